//! What every handler shares ([`AppState`]), and who may call what: the
//! admin and read tokens, and the refusal of cross-site requests to the
//! routes that change data on a GET.

use actix_web::HttpRequest;

use crate::api::error::ApiError;
use crate::cluster::ClusterHandle;
use crate::error::ErrorCode;
use crate::queue::Queue;
use crate::reconcile::Reconciler;
use crate::restore::{RestoreStatus, Restorer};

/// Everything a request handler needs, shared by all HTTP workers.
pub struct AppState {
    /// The queue: its rules, and what it shows (`queue::read`). Handlers
    /// touch no store themselves.
    pub queue: Queue,
    pub cluster: ClusterHandle,
    pub max_body: usize,
    pub admin_token: Option<String>,
    /// Reads message bodies (`--read-token`); the admin token does too.
    pub read_token: Option<String>,
    /// The dashboard shows everything and takes no action (`--ui-read-only`).
    pub ui_read_only: bool,
    /// This node's current or last restore.
    pub restore_status: RestoreStatus,
    /// Restores Redis from the journal (`GET /reStore`, the dashboard).
    pub restorer: Restorer,
    pub reconciler: Reconciler,
}

impl AppState {
    pub fn restorer(&self) -> &Restorer {
        &self.restorer
    }

    /// With an admin token configured, the caller must present it.
    pub(super) fn require_admin(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(token) = &self.admin_token else {
            return Ok(());
        };
        match bearer(req) {
            Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
            _ => Err(ApiError::Unauthorized),
        }
    }

    /// A route that shows message bodies: with a read token, it or the
    /// admin token; else with an admin token, that one; else anyone.
    pub(super) fn require_reader(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(read) = &self.read_token else {
            return self.require_admin(req);
        };
        let given = bearer(req).unwrap_or("");
        let admin = self
            .admin_token
            .as_ref()
            .is_some_and(|t| constant_time_eq(given.as_bytes(), t.as_bytes()));
        if constant_time_eq(given.as_bytes(), read.as_bytes()) || admin {
            Ok(())
        } else {
            Err(ApiError::UnauthorizedReader)
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The original routes that change state on a GET (`/delete`, `/reStore`,
/// a repairing `/admin/reconcile`) refuse a request a browser says comes
/// from another site (`Sec-Fetch-Site: cross-site` or `same-site`, or an
/// `Origin` naming another host): without an admin token a page elsewhere
/// could otherwise make a visitor's browser cancel messages. Clients that
/// are not browsers send neither header and are not affected.
pub(super) fn refuse_cross_site(req: &HttpRequest) -> Result<(), ApiError> {
    let h = req.headers();
    let refused = |why: String| {
        Err(ApiError::Forbidden {
            code: ErrorCode::Forbidden,
            message: format!(
                "this route changes data and refuses requests from other sites ({why})"
            ),
        })
    };
    if let Some(site) = h.get("Sec-Fetch-Site").and_then(|v| v.to_str().ok()) {
        if site == "cross-site" || site == "same-site" {
            return refused(format!("Sec-Fetch-Site: {site}"));
        }
    }
    if let Some(origin) = h.get("Origin").and_then(|v| v.to_str().ok()) {
        let host = h
            .get("X-Forwarded-Host")
            .or_else(|| h.get("Host"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin == "null" || origin_host != host {
            return refused(format!("Origin: {origin}"));
        }
    }
    Ok(())
}

/// Compares a presented token with the configured one: every byte of the
/// configured token is examined whatever was presented, so the time taken
/// tells a caller neither where a guess went wrong nor whether its length
/// was right.
pub(crate) fn constant_time_eq(given: &[u8], token: &[u8]) -> bool {
    let mut diff = (given.len() != token.len()) as u8;
    for (i, t) in token.iter().enumerate() {
        diff |= t ^ given.get(i).copied().unwrap_or(!*t);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"s3crex"] {
            assert!(!constant_time_eq(wrong, b"s3cret"), "{wrong:?}");
        }
    }
}
