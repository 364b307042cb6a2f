//! The HTTPS listener: actix-web's HTTP service behind rustls, with one
//! thing more than `HttpServer::bind_rustls_0_23` offers. A plain-HTTP
//! request sent to the HTTPS port (`curl http://…` for `https://…`) gets
//! a 400 that says to use https, as nginx answers, rather than a closed
//! connection that clients report as "Received HTTP/0.9" or an empty reply.
//!
//! Before the TLS handshake the first bytes are peeked (not read): a TLS
//! connection opens with a handshake record (`0x16`); anything that reads
//! as an HTTP method is answered and closed. Everything else goes to
//! rustls as it came.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix_http::HttpService;
use actix_rt::net::TcpStream;
use actix_server::Server;
use actix_service::{fn_service, map_config, ServiceFactoryExt as _};
use actix_web::body::MessageBody;
use actix_web::dev::{AppConfig, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::App;
use anyhow::Context;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::AsyncWriteExt as _;

/// How long a connection may take to send its first byte.
const FIRST_BYTE: Duration = Duration::from_secs(5);

/// The answer to plain HTTP on the HTTPS port.
fn plain_http_answer(port: u16) -> Vec<u8> {
    let body = serde_json::json!({
        "error": crate::error::ErrorCode::HttpsRequired,
        "message": format!("this port speaks HTTPS: send the request to https://…:{port}/ (plain HTTP was sent)"),
    })
    .to_string();
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether a connection's first bytes are an HTTP request line's start
/// (an upper-case method and a space), not a TLS handshake.
pub fn looks_like_plain_http(first: &[u8]) -> bool {
    let method: Vec<u8> = first
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_uppercase())
        .collect();
    !method.is_empty()
        && (first.len() > method.len() && first[method.len()] == b' '
            || first.len() == method.len())
}

/// Serves `app` over HTTPS on `bind` (as `HttpServer` would: `workers`,
/// a 5 s shutdown, signals left to the caller).
pub fn serve<F, T, B>(
    bind: SocketAddr,
    workers: Option<usize>,
    tls: rustls::ServerConfig,
    app: F,
) -> std::io::Result<Server>
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    let listener = std::net::TcpListener::bind(bind)?;
    let local = listener.local_addr()?;
    let mut builder = Server::build().shutdown_timeout(5).disable_signals();
    if let Some(n) = workers {
        builder = builder.workers(n);
    }
    // As HttpServer sets them: connections drain on a graceful stop
    // (keep-alive closed, HTTP/2 GOAWAY), and an answer sent before the
    // request's body was read lingers a second rather than resetting.
    let shutdown = builder.graceful_shutdown_signal();
    builder
        .listen("delayq-https", listener, move || {
            let shutdown = shutdown.clone();
            let http = HttpService::build()
                .graceful_shutdown_signal(move || {
                    let shutdown = shutdown.clone();
                    async move { shutdown.notified().await }
                })
                .client_disconnect_timeout(Duration::from_secs(1))
                .finish(map_config(app(), |_| AppConfig::default()))
                .rustls_0_23(tls.clone())
                .map_err(|_| ());
            let port = local.port();
            fn_service(move |io: TcpStream| async move {
                let mut first = [0u8; 8];
                let n = match tokio::time::timeout(FIRST_BYTE, io.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => n,
                    _ => return Err(()),
                };
                if looks_like_plain_http(&first[..n]) {
                    let mut io = io;
                    // The request read first (only peeked so far): a socket
                    // closed with unread bytes resets, and the client may
                    // see the reset rather than the answer.
                    let mut sink = [0u8; 4096];
                    let _ = tokio::time::timeout(
                        Duration::from_millis(100),
                        tokio::io::AsyncReadExt::read(&mut io, &mut sink),
                    )
                    .await;
                    let _ = io.write_all(&plain_http_answer(port)).await;
                    let _ = io.shutdown().await;
                    return Err(());
                }
                Ok(io)
            })
            .and_then(http)
        })
        .map(|b| b.run())
}

/// delayq's own HTTPS listener: the certificate and key files, read again
/// on SIGHUP (a renewed certificate is served to new connections without a
/// restart; one that cannot be read leaves the old one in place).
pub struct Listener {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Listener {
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Listener>> {
        crate::tls::provider();
        let current = RwLock::new(Arc::new(certified_key(cert, key)?));
        Ok(Arc::new(Listener {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current,
        }))
    }

    /// The server configuration actix-web listens with.
    pub fn server_config(self: &Arc<Self>) -> rustls::ServerConfig {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }

    /// Reads the files again.
    pub fn reload(&self) -> anyhow::Result<()> {
        let fresh = certified_key(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    /// Reloads on every SIGHUP, for the life of the process.
    pub fn reload_on_hangup(self: Arc<Self>) -> anyhow::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangups = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
        actix::spawn(async move {
            while hangups.recv().await.is_some() {
                match self.reload() {
                    Ok(()) => {
                        tracing::info!(cert = %self.cert.display(), "SIGHUP: TLS certificate read again")
                    }
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "SIGHUP: TLS certificate not read; serving the one before")
                    }
                }
            }
        });
        Ok(())
    }
}

impl ResolvesServerCert for Listener {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn certified_key(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = crate::tls::read_certs(cert).context("--tls-cert")?;
    let secret = crate::tls::read_key(key).context("--tls-key")?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&secret).map_err(|_| {
        anyhow::anyhow!(
            "--tls-key {}: a key type rustls cannot sign with",
            key.display()
        )
    })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|_| {
        anyhow::anyhow!(
            "--tls-key {} is not the key of --tls-cert {}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(certified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_methods_are_told_from_a_tls_handshake() {
        for plain in [&b"GET / HT"[..], b"POST /pu", b"HEAD ", b"GET"] {
            assert!(looks_like_plain_http(plain), "{plain:?}");
        }
        for tls in [
            &[0x16u8, 0x03, 0x01, 0x02, 0x00][..],
            b"get / ht",
            b"\x00GET",
        ] {
            assert!(!looks_like_plain_http(tls), "{tls:?}");
        }
    }
}
