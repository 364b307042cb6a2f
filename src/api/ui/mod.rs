//! The dashboard at `/ui`: server-rendered HTML pages over the same state
//! as the API, with two small vendored libraries (htmx refreshes parts of
//! a page, uPlot draws the lateness chart; `assets/vendor/`), all built
//! into the binary ([`assets`]).
//!
//! | page | shows | actions |
//! |---|---|---|
//! | Overview (`/ui`) | topics with waiting, delaying, ready, in-flight and dead counts, push and delivery rates; lateness and rate charts | |
//! | Topic (`/ui/topics/{topic}`) | its messages by status, a page at a time; search by id or bizKey | |
//! | Message (`/ui/messages/{id}`) | its fields, body and status history | requeue, delete (dead) |
//! | Dead letters (`/ui/dead`, `/ui/dead/{topic}`) | dead messages per topic | requeue or delete one or all |
//! | Cluster (`/ui/cluster`) | nodes, leader, each shard's owner, epoch and counts | rebalance, move a shard |
//! | Restore (`/ui/restore`) | this node's restore, a resumable cursor, the last reconciliation | reconcile: report, repair |
//!
//! Counts per topic and status come from the journal (one grouped,
//! index-only count, [`overview`]); rates and lateness from this process's
//! metrics, sampled every [`history::EVERY`] into a ring buffer
//! ([`history`]). Actions call the queue layer ([`crate::queue`]) or the
//! cluster, as the API's routes do.
//!
//! Who may do what ([`auth`]): with `--admin-token`, every page needs a
//! login (the token, once, for a signed session cookie); actions are POST
//! forms carrying a CSRF token tied to that cookie, refused from another
//! origin; `--ui-read-only` shows everything and offers no action.
//!
//! These routes answer HTML (and the chart's JSON), not the API's JSON:
//! they are listed in [`UI_ROUTES`], apart from [`super::ROUTES`], and are
//! left out of the OpenAPI document.

/// The viewer of a page, or (from the handler) the way to the login form.
macro_rules! viewer {
    ($state:expr, $req:expr) => {
        match $crate::api::ui::auth::Viewer::of(&$state, &$req) {
            Ok(v) => v,
            Err(login) => return Ok($crate::api::ui::response::see_other(&login)),
        }
    };
}

mod assets;
pub mod auth;
mod cluster;
mod dead;
pub mod history;
pub mod html;
pub mod layout;
mod login;
mod message;
pub(crate) mod overview;
pub mod response;
mod restore;
mod sign;
mod topic;

use actix_web::web;

pub use auth::Viewer;
pub use response::UiError;

/// The dashboard's routes, apart from the API's: they answer HTML and are
/// left out of the OpenAPI document (a test checks both lists).
macro_rules! ui_routes {
    ($($method:ident $path:literal => $module:ident :: $handler:ident,)*) => {
        /// Every route of the dashboard: (method, path).
        pub const UI_ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path),)*];

        pub fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.route($path, web::$method().to($module::$handler));)*
        }
    };
}

ui_routes! {
    get "/ui" => overview::page,
    get "/ui/chart.json" => overview::chart,
    get "/ui/forecast.json" => overview::forecast,
    get "/ui/topics/{topic}" => topic::page,
    post "/ui/topics/{topic}/pause" => topic::pause,
    post "/ui/topics/{topic}/resume" => topic::resume,
    get "/ui/messages/{id}" => message::page,
    post "/ui/messages/{id}/requeue" => dead::requeue_one,
    post "/ui/messages/{id}/delete" => dead::delete_one,
    get "/ui/dead" => dead::index,
    get "/ui/dead/{topic}" => dead::page,
    post "/ui/dead/{topic}/requeue" => dead::requeue_all,
    post "/ui/dead/{topic}/delete" => dead::delete_all,
    get "/ui/cluster" => cluster::page,
    post "/ui/cluster/rebalance" => cluster::rebalance,
    post "/ui/cluster/shards/{shard}/move" => cluster::move_shard,
    get "/ui/restore" => restore::page,
    post "/ui/restore/reconcile" => restore::reconcile,
    get "/ui/login" => login::page,
    post "/ui/login" => login::login,
    post "/ui/logout" => login::logout,
    get "/ui/assets/{file}" => assets::file,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_under_ui() {
        for (_, path) in UI_ROUTES {
            assert!(path.starts_with("/ui"), "{path}");
        }
    }
}
