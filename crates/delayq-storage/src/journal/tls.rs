//! The journal's TLS: MySQL/MariaDB's is its client library's, asked for
//! in the URL ([`mysql_url`]); the CA it checks against may come from
//! `--tls-ca-file` ([`crate::tls`]).

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::tls::trust;

/// A MySQL/MariaDB URL as the client library takes it. delayq is built
/// with MariaDB's client library (libmariadb), which has no `ssl_mode`
/// option of its own: TLS is on when a CA is named, and the server's
/// certificate chain is then checked against it. So `ssl_mode` is read
/// here:
///
/// - `disabled`: plain text (any `ssl_*` parameter is dropped);
/// - `required`, `verify_ca`: TLS, the chain checked against `ssl_ca`, or
///   `--tls-ca-file`, or the platform's bundle; a server without TLS is
///   refused;
/// - `preferred` or none: TLS when an `ssl_ca` is given, plain otherwise
///   (the library's own behaviour);
/// - `verify_identity`: refused with an explanation, since the library
///   checks the chain but not the host name.
pub fn mysql_url(url: &str) -> anyhow::Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => return Ok(url.to_string()),
    };
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect();
    let mode = params
        .iter()
        .position(|(k, _)| k == "ssl_mode")
        .map(|i| params.remove(i).1.to_ascii_lowercase());
    match mode.as_deref() {
        None | Some("preferred") => {}
        Some("disabled") => params.retain(|(k, _)| !k.starts_with("ssl_")),
        Some("required" | "verify_ca") => {
            if !params.iter().any(|(k, _)| k == "ssl_ca") {
                let ca = match &trust().ca_file {
                    Some(f) => f.clone(),
                    None => platform_bundle().context(
                        "ssl_mode needs a CA to check the server against: give ssl_ca=PATH in the URL or --tls-ca-file",
                    )?,
                };
                params.push(("ssl_ca".into(), ca.display().to_string()));
            }
        }
        Some("verify_identity") => bail!(
            "ssl_mode=verify_identity: the MySQL client library delayq is built with (libmariadb) checks the server's certificate chain but not its host name; use ssl_mode=verify_ca with ssl_ca=PATH (a CA that signs only your database servers)"
        ),
        Some(other) => bail!(
            "unknown ssl_mode '{other}' in the journal URL: disabled, preferred, required or verify_ca"
        ),
    }
    if params.is_empty() {
        return Ok(base.to_string());
    }
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(format!("{base}?{}", query.join("&")))
}

/// Whether a journal URL asks for TLS, so that a connection without it is
/// refused (see [`mysql_url`]).
pub fn mysql_requires_tls(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|p| {
            p.eq_ignore_ascii_case("ssl_mode=required")
                || p.eq_ignore_ascii_case("ssl_mode=verify_ca")
        })
    })
}

/// The platform's CA bundle file, for the MySQL client library.
fn platform_bundle() -> Option<PathBuf> {
    let env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    env.into_iter()
        .chain(
            [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem",
            ]
            .map(PathBuf::from),
        )
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_ssl_modes() {
        let u = "mysql://u:p@h:3306/d";
        assert_eq!(mysql_url(u).unwrap(), u);
        assert_eq!(
            mysql_url(&format!("{u}?ssl_mode=disabled&ssl_ca=/c")).unwrap(),
            u
        );
        assert_eq!(
            mysql_url(&format!("{u}?ssl_mode=VERIFY_CA&ssl_ca=/c")).unwrap(),
            format!("{u}?ssl_ca=/c")
        );
        assert_eq!(
            mysql_url(&format!("{u}?ssl_ca=/c&ssl_mode=preferred")).unwrap(),
            format!("{u}?ssl_ca=/c")
        );
        assert!(mysql_url(&format!("{u}?ssl_mode=verify_identity")).is_err());
        assert!(mysql_url(&format!("{u}?ssl_mode=sometimes")).is_err());
        assert!(mysql_requires_tls(&format!("{u}?ssl_mode=REQUIRED")));
        assert!(!mysql_requires_tls(&format!("{u}?ssl_mode=preferred")));
    }
}
