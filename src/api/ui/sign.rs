//! Signatures: HMAC-SHA256 in hex (sessions are signed with it under the
//! admin token), and the notices (`?done=`, `?error=`) a node's action
//! passes to the next page, signed with this process's own key.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::api::state::constant_time_eq;

/// HMAC-SHA256 of `purpose`, a zero byte and `text` under `key`, in hex.
pub(super) fn hmac_hex(key: &str, purpose: &str, text: &str) -> String {
    let mut m =
        Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes a key of any length");
    m.update(purpose.as_bytes());
    m.update(b"\0");
    m.update(text.as_bytes());
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The key notices are signed with: this process's own, so a notice
/// (`?done=`, `?error=`) is shown only when this node's action wrote it,
/// never text a link made up (a notice sent to another node is dropped).
static NOTICE_KEY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());

/// The signature of a notice of `kind` (`done`, `error`) saying `text`.
pub fn notice_sig(kind: &str, text: &str) -> String {
    hmac_hex(&NOTICE_KEY, kind, text)
}

/// The notice of `kind` in a query, when this node signed it.
pub(super) fn notice(q: &HashMap<String, String>, kind: &str) -> Option<String> {
    let text = q.get(kind)?;
    let sig = q.get("sig").map(String::as_str).unwrap_or("");
    constant_time_eq(sig.as_bytes(), notice_sig(kind, text).as_bytes()).then(|| text.clone())
}
