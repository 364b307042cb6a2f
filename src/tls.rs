//! TLS: one stack for every link. delayq speaks TLS through rustls with
//! the ring provider, to Redis (`rediss://`), RabbitMQ (`amqps://`), NATS
//! (`tls://`), webhooks (`https://`) and on its own listener
//! (`--tls-cert`/`--tls-key`). The one exception is MySQL/MariaDB, whose
//! TLS is the client library's (libmariadb with OpenSSL), set in the URL
//! (see [`mysql_url`]). ZooKeeper is spoken in plain text.
//!
//! | link | turned on by | trusts | client certificate |
//! |---|---|---|---|
//! | Redis | `rediss://` | roots below | `--tls-client-cert` |
//! | RabbitMQ | `amqps://` | roots below | `--tls-client-cert` |
//! | NATS | `tls://` | roots below | `--tls-client-cert` |
//! | webhooks | `https://` | roots below | `--tls-client-cert` |
//! | MySQL | `ssl_mode=required` / `verify_ca` in the URL | `ssl_ca=` or `--tls-ca-file` | `ssl_cert=`, `ssl_key=` |
//!
//! The roots are the platform's (read by rustls-native-certs: Debian's
//! `/etc/ssl/certs`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`) plus the
//! certificates of `--tls-ca-file`. The platform's store, not a copy built
//! into the binary: operators add a company CA there once
//! (`update-ca-certificates`) for every program, and its updates arrive
//! with the system's, not with a rebuild of delayq.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The TLS flags of every command (global, so `delayq restore` reaches a
/// `rediss://` Redis as `delayq serve` does).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM file of CA certificates to trust besides the platform's, on
    /// every TLS link delayq opens (Redis, RabbitMQ, NATS, webhooks; MySQL
    /// when its URL names no ssl_ca).
    #[arg(long, env = "DELAYQ_TLS_CA_FILE", global = true, value_name = "PATH")]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM certificate (chain) delayq presents to servers that ask for one
    /// (mutual TLS with Redis, RabbitMQ, NATS, webhooks).
    #[arg(
        long,
        env = "DELAYQ_TLS_CLIENT_CERT",
        global = true,
        value_name = "PATH",
        requires = "tls_client_key"
    )]
    pub tls_client_cert: Option<PathBuf>,
    /// PEM private key of --tls-client-cert.
    #[arg(
        long,
        env = "DELAYQ_TLS_CLIENT_KEY",
        global = true,
        value_name = "PATH",
        requires = "tls_client_cert"
    )]
    pub tls_client_key: Option<PathBuf>,
}

/// What every outgoing TLS link is made with.
pub struct Trust {
    config: Arc<rustls::ClientConfig>,
    /// Every trusted root, PEM (for Redis, which takes its roots so).
    roots_pem: Vec<u8>,
    /// The certificates of `--tls-ca-file`, PEM (RabbitMQ's connector adds
    /// them to the platform's roots it loads itself).
    ca_pem: Option<String>,
    ca_file: Option<PathBuf>,
    /// `--tls-client-cert` and `--tls-client-key`, PEM.
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

static TRUST: OnceLock<Trust> = OnceLock::new();

/// Reads the TLS flags: a CA file or client certificate that cannot be
/// read is an error at start, not at the first connection. Called once,
/// before anything connects; without it the platform's roots alone are
/// trusted.
pub fn init(args: &TlsArgs) -> anyhow::Result<()> {
    let trust = Trust::load(args)?;
    if TRUST.set(trust).is_err() {
        bail!("TLS settings were read twice");
    }
    Ok(())
}

fn trust() -> &'static Trust {
    TRUST.get_or_init(|| Trust::load(&TlsArgs::default()).expect("the platform's roots alone"))
}

/// Installs ring as the process's TLS provider (the one rustls and every
/// library on it use); harmless when done before.
fn provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Trust {
    fn load(args: &TlsArgs) -> anyhow::Result<Trust> {
        provider();
        let mut roots = rustls::RootCertStore::empty();
        let mut roots_pem = Vec::new();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::warn!(error = %e, "some of the platform's CA certificates could not be read");
        }
        for cert in native.certs {
            pem_encode(&mut roots_pem, &cert);
            // A platform certificate rustls cannot use is skipped, as
            // every TLS client on the machine skips it.
            let _ = roots.add(cert);
        }
        let ca_pem = match &args.tls_ca_file {
            None => None,
            Some(path) => {
                let certs = read_certs(path)?;
                for cert in &certs {
                    roots.add(cert.clone()).with_context(|| {
                        format!(
                            "--tls-ca-file {}: a certificate rustls cannot use",
                            path.display()
                        )
                    })?;
                    pem_encode(&mut roots_pem, cert);
                }
                Some(std::fs::read_to_string(path)?)
            }
        };
        if roots.is_empty() {
            tracing::warn!("no CA certificate to trust: TLS links will fail (install ca-certificates or pass --tls-ca-file)");
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let (config, identity) = match (&args.tls_client_cert, &args.tls_client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let secret = read_key(key)?;
                let config = builder
                    .with_client_auth_cert(chain, secret)
                    .context("--tls-client-cert and --tls-client-key do not make a pair")?;
                let identity = (std::fs::read(cert)?, std::fs::read(key)?);
                (config, Some(identity))
            }
            _ => (builder.with_no_client_auth(), None),
        };
        Ok(Trust {
            config: Arc::new(config),
            roots_pem,
            ca_pem,
            ca_file: args.tls_ca_file.clone(),
            identity,
        })
    }
}

/// The rustls configuration of every outgoing link (webhooks, NATS).
pub fn client_config() -> Arc<rustls::ClientConfig> {
    trust().config.clone()
}

/// Redis's TLS settings: every trusted root and the client certificate.
pub fn redis_certificates() -> redis::TlsCertificates {
    let t = trust();
    redis::TlsCertificates {
        client_tls: t
            .identity
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: Some(t.roots_pem.clone()),
    }
}

/// RabbitMQ's TLS settings: `--tls-ca-file` on top of the platform's
/// roots, and the client certificate.
pub fn amqp_config() -> lapin::tcp::OwnedTLSConfig {
    let t = trust();
    lapin::tcp::OwnedTLSConfig {
        identity: t
            .identity
            .as_ref()
            .map(|(pem, key)| lapin::tcp::OwnedIdentity::PKCS8 {
                pem: pem.clone(),
                key: key.clone(),
            }),
        cert_chain: t.ca_pem.clone(),
    }
}

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

/// An error of a TLS link, with what to do about an untrusted certificate.
pub fn explain(error: &str) -> String {
    certificate_problem(error).unwrap_or_else(|| error.to_string())
}

/// The error explained, when it is a certificate delayq does not accept
/// (which waiting and retrying do not mend).
pub fn certificate_problem(error: &str) -> Option<String> {
    let untrusted = [
        "UnknownIssuer",
        "unknown issuer",
        "certificate verify failed",
        "self-signed",
        "self signed",
    ];
    if untrusted.iter().any(|s| error.contains(s)) {
        Some(format!("{error} (the server's certificate is not signed by a CA delayq trusts: add the CA to the platform's store or pass --tls-ca-file)"))
    } else if error.contains("CaUsedAsEndEntity") {
        Some(format!("{error} (the server presents a CA certificate, basicConstraints CA:TRUE, as its own, as `openssl req -x509` makes by default: give the server a certificate signed by a CA, with CA:FALSE and a subjectAltName naming its host, and pass that CA with --tls-ca-file; the README's TLS section shows the openssl commands)"))
    } else if error.contains("CertificateRequired") || error.contains("certificate required") {
        Some(format!("{error} (the server wants a client certificate: pass --tls-client-cert and --tls-client-key)"))
    } else if [
        "BadCertificate",
        "UnknownCA",
        "bad certificate",
        "unknown ca",
    ]
    .iter()
    .any(|s| error.contains(s))
    {
        Some(format!(
            "{error} (the server did not accept delayq's client certificate)"
        ))
    } else if error.contains("NotValidForName") || error.contains("not valid for name") {
        Some(format!(
            "{error} (the server's certificate does not name the host in the URL)"
        ))
    } else {
        None
    }
}

/// Whether a connection error is a TLS refusal that waiting does not mend:
/// a certificate not accepted, or a server without the TLS asked for.
pub fn settled_refusal(error: &str) -> bool {
    certificate_problem(error).is_some()
        || error.contains("without TLS")
        || error.contains("SSL is required")
        || error.contains("SSL connection is required")
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM file of certificates", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{} holds no certificate (PEM, BEGIN CERTIFICATE)",
            path.display()
        );
    }
    Ok(certs)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    // The error never quotes the file: it is a secret.
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls::pki_types::pem::Error::Io(e) => {
            anyhow::anyhow!("cannot read {}: {e}", path.display())
        }
        _ => anyhow::anyhow!("{} holds no PEM private key", path.display()),
    })
}

fn pem_encode(out: &mut Vec<u8>, cert: &CertificateDer<'_>) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = Vec::with_capacity(cert.len().div_ceil(3) * 4);
    for chunk in cert.chunks(3) {
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            b64.push(if i <= n {
                ALPHABET[(v >> (18 - 6 * i)) as usize & 63]
            } else {
                b'='
            });
        }
    }
    out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
    for line in b64.chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"-----END CERTIFICATE-----\n");
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
        provider();
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
    let chain = read_certs(cert).context("--tls-cert")?;
    let secret = read_key(key).context("--tls-key")?;
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
    fn pem_encoding_reads_back() {
        for len in [1usize, 2, 3, 47, 48, 49, 200] {
            let der: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut pem = Vec::new();
            pem_encode(&mut pem, &CertificateDer::from(der.clone()));
            let back: Vec<_> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(back.len(), 1, "{len}");
            assert_eq!(back[0].as_ref(), der.as_slice(), "{len}");
        }
    }

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

    #[test]
    fn untrusted_certificates_are_explained() {
        assert!(explain("invalid peer certificate: UnknownIssuer").contains("--tls-ca-file"));
        let ca = "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        assert!(explain(ca).contains("CA:FALSE"));
        assert!(settled_refusal(ca));
        assert_eq!(explain("connection refused"), "connection refused");
    }
}
