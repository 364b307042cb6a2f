//! TLS: one stack for every link. delayq speaks TLS through rustls with
//! the ring provider, to Redis (`rediss://`), RabbitMQ (`amqps://`), NATS
//! (`tls://`), webhooks (`https://`) and on its own listener
//! (`--tls-cert`/`--tls-key`). The one exception is MySQL/MariaDB, whose
//! TLS is the client library's (libmariadb with OpenSSL), set in the URL
//! (see the journal's `tls` module). ZooKeeper is spoken in plain text.
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
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS settings of every link (the `--tls-ca-file`,
/// `--tls-client-cert` and `--tls-client-key` flags).
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    pub tls_ca_file: Option<PathBuf>,
    pub tls_client_cert: Option<PathBuf>,
    pub tls_client_key: Option<PathBuf>,
}

/// What every outgoing TLS link is made with.
pub struct Trust {
    config: Arc<rustls::ClientConfig>,
    /// Every trusted root, PEM (for Redis, which takes its roots so).
    pub roots_pem: Vec<u8>,
    /// The certificates of `--tls-ca-file`, PEM (RabbitMQ's connector adds
    /// them to the platform's roots it loads itself).
    pub ca_pem: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// `--tls-client-cert` and `--tls-client-key`, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

static TRUST: OnceLock<Trust> = OnceLock::new();

/// Reads the TLS flags: a CA file or client certificate that cannot be
/// read is an error at start, not at the first connection. Called once,
/// before anything connects; without it the platform's roots alone are
/// trusted.
pub fn init(args: &TlsSettings) -> anyhow::Result<()> {
    let trust = Trust::load(args)?;
    if TRUST.set(trust).is_err() {
        bail!("TLS settings were read twice");
    }
    Ok(())
}

pub fn trust() -> &'static Trust {
    TRUST.get_or_init(|| Trust::load(&TlsSettings::default()).expect("the platform's roots alone"))
}

/// Installs ring as the process's TLS provider (the one rustls and every
/// library on it use); harmless when done before.
pub fn provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Trust {
    fn load(args: &TlsSettings) -> anyhow::Result<Trust> {
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
        Some(format!("{error} (the server presents a CA certificate, basicConstraints CA:TRUE, as its own, as `openssl req -x509` makes by default: give the server a certificate signed by a CA, with CA:FALSE and a subjectAltName naming its host, and pass that CA with --tls-ca-file; the book's operating chapter, TLS (docs/src/operating.md), shows the openssl commands)"))
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

pub fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
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

pub fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
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
    fn untrusted_certificates_are_explained() {
        assert!(explain("invalid peer certificate: UnknownIssuer").contains("--tls-ca-file"));
        let ca = "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        assert!(explain(ca).contains("CA:FALSE"));
        assert!(settled_refusal(ca));
        assert_eq!(explain("connection refused"), "connection refused");
    }
}
