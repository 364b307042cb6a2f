//! Certificates made at test time: a CA the test trusts, a server and a
//! client certificate it signed, and a second CA nobody trusts with a
//! server certificate of its own (for the refusals). Every server
//! certificate names `localhost` and `127.0.0.1`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// PEM files in the test's directory.
pub struct Pki {
    /// The CA the test trusts.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA nobody trusts, and a server certificate it signed.
    pub rogue_ca: PathBuf,
    pub rogue_cert: PathBuf,
    pub rogue_key: PathBuf,
    /// A self-signed CA certificate (CA:TRUE) naming `localhost` and
    /// `127.0.0.1`, as `openssl req -x509` makes, for a server's own use.
    pub self_signed_cert: PathBuf,
    pub self_signed_key: PathBuf,
    dir: PathBuf,
    ca_cert: Certificate,
    ca_key: KeyPair,
}

fn ca(name: &str) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}

fn leaf(
    name: &str,
    purpose: ExtendedKeyUsagePurpose,
    issuer: &Certificate,
    issuer_key: &KeyPair,
) -> (Certificate, KeyPair) {
    let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![purpose];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    (params.signed_by(&key, issuer, issuer_key).unwrap(), key)
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

impl Pki {
    pub fn make(dir: &Path) -> Pki {
        let dir = dir.join("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_cert, ca_key) = ca("delayq test CA");
        let (server, server_key) = leaf(
            "server",
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca_cert,
            &ca_key,
        );
        let (client, client_key) = leaf(
            "client",
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca_cert,
            &ca_key,
        );
        let (rogue_ca, rogue_ca_key) = ca("a CA nobody trusts");
        let (rogue, rogue_key) = leaf(
            "rogue",
            ExtendedKeyUsagePurpose::ServerAuth,
            &rogue_ca,
            &rogue_ca_key,
        );
        let (self_signed, self_signed_key) = {
            let mut params =
                CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, "localhost");
            let key = KeyPair::generate().unwrap();
            (params.self_signed(&key).unwrap(), key)
        };
        Pki {
            ca: write(&dir, "ca.pem", &ca_cert.pem()),
            self_signed_cert: write(&dir, "self-signed.pem", &self_signed.pem()),
            self_signed_key: write(&dir, "self-signed.key", &self_signed_key.serialize_pem()),
            server_cert: write(&dir, "server.pem", &server.pem()),
            server_key: write(&dir, "server.key", &server_key.serialize_pem()),
            client_cert: write(&dir, "client.pem", &client.pem()),
            client_key: write(&dir, "client.key", &client_key.serialize_pem()),
            rogue_ca: write(&dir, "rogue-ca.pem", &rogue_ca.pem()),
            rogue_cert: write(&dir, "rogue.pem", &rogue.pem()),
            rogue_key: write(&dir, "rogue.key", &rogue_key.serialize_pem()),
            dir,
            ca_cert,
            ca_key,
        }
    }

    /// Another server certificate of the trusted CA, named `name` (a
    /// renewal), written over `cert` and `key`.
    pub fn renew(&self, name: &str, cert: &Path, key: &Path) {
        let (c, k) = leaf(
            name,
            ExtendedKeyUsagePurpose::ServerAuth,
            &self.ca_cert,
            &self.ca_key,
        );
        std::fs::write(cert, c.pem()).unwrap();
        std::fs::write(key, k.serialize_pem()).unwrap();
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The trusted CA as a rustls root store.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert.der().clone()).unwrap();
        roots
    }

    /// A server configuration serving `cert` and `key`.
    pub fn server_config(cert: &Path, key: &Path) -> rustls::ServerConfig {
        use rustls::pki_types::pem::PemObject;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap()
    }
}
