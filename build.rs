//! Build script: hands the checkout's git revision to the crate as
//! `DELAYQ_GIT_REVISION` (12 hex digits, shown by `delayq --version`, the
//! start-up log line and `GET /health`).
//!
//! It runs `git rev-parse --short=12 HEAD`. Without git or a `.git` (a
//! source tarball, a docker build context) the revision is `unknown`, unless
//! the build's environment sets `DELAYQ_GIT_REVISION` itself (the
//! Dockerfile passes it as a build argument). Cargo runs this again only
//! when HEAD, the branch HEAD points to or the packed refs change, so a
//! commit or a checkout refreshes the revision and nothing else rebuilds it.

use std::path::{Path, PathBuf};
use std::process::Command;

const VAR: &str = "DELAYQ_GIT_REVISION";

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Watches `path` when it exists: a path that does not exist would make
/// cargo run the script on every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={VAR}");
    let given = std::env::var(VAR).ok().filter(|v| !v.trim().is_empty());
    let revision = given.unwrap_or_else(|| {
        // A worktree keeps HEAD in its own git dir and the refs in the
        // common one.
        if let (Some(dir), Some(common)) = (
            git(&["rev-parse", "--git-dir"]),
            git(&["rev-parse", "--git-common-dir"]),
        ) {
            let (dir, common) = (PathBuf::from(dir), PathBuf::from(common));
            watch(&dir.join("HEAD"));
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watch(&dir.join(&branch));
                watch(&common.join(&branch));
            }
            watch(&common.join("packed-refs"));
        }
        git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
    });
    println!("cargo:rustc-env={VAR}={revision}");
}
