//! TLS on every link, against real servers started with certificates made
//! at test time (tests/it/common/tls.rs): Redis (`--tls-port`, client
//! certificates required), a MariaDB with `ssl-cert`, the shared PostgreSQL
//! (libpq's `sslmode`), NATS (`--tls`),
//! RabbitMQ's TLS listener, an HTTPS webhook receiver, and delayq's own
//! HTTPS listener with the Rust client. Each link works with the test's
//! CA trusted and is refused, with an error that says why, when the
//! server's certificate is signed by a CA nobody trusts.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::brokers::{Nats, RabbitMq};
use crate::common::mariadb::PrivateMariadb;
use crate::common::tls::Pki;
use crate::common::webhook::Hook;
use crate::common::*;
use delayq_client::{Client, NewMessage};
use futures::StreamExt;

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `--tls-ca-file` with the test's CA.
fn trusting(pki: &Pki) -> Vec<String> {
    vec!["--tls-ca-file".into(), path(&pki.ca)]
}

/// A redis-server that speaks TLS alone and wants a client certificate.
struct TlsRedis {
    port: u16,
    child: std::process::Child,
}

impl TlsRedis {
    fn start(dir: &Path, pki: &Pki, cert: &Path, key: &Path) -> TlsRedis {
        let port = free_port();
        let log = std::fs::File::create(dir.join("redis-tls.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--tls-cert-file", &path(cert), "--tls-key-file", &path(key)])
            .args(["--tls-ca-cert-file", &path(&pki.ca)])
            .args(["--tls-auth-clients", "yes"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn redis-server");
        let what = "redis-server --tls-port to listen";
        let every = Duration::from_millis(20);
        wait_every_blocking(what, Duration::from_secs(10), every, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        TlsRedis { port, child }
    }

    fn url(&self) -> String {
        format!("rediss://localhost:{}/0", self.port)
    }

    /// The test's own connection, over TLS with the client certificate.
    fn con(&self, pki: &Pki) -> redis::Connection {
        let certs = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(&pki.client_cert).unwrap(),
                client_key: std::fs::read(&pki.client_key).unwrap(),
            }),
            root_cert: Some(std::fs::read(&pki.ca).unwrap()),
        };
        redis::Client::build_with_tls(self.url(), certs)
            .unwrap()
            .get_connection()
            .expect("the test's TLS connection to redis-server")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, redis_url: String, database_url: String, args: Vec<String>) -> ServerConfig {
    ServerConfig {
        redis_url,
        database_url,
        key_prefix: format!("t{}", random_hex(8)),
        extra_args: args,
        log_dir: dir.to_path_buf(),
        env: Vec::new(),
    }
}

/// Runs `delayq serve` with `cfg`, expecting it to give up; its log.
fn refused_start(cfg: &ServerConfig, within: Duration) -> String {
    let log = cfg.log_dir.join(format!("refused-{}.log", random_hex(4)));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .args(["--bind", &format!("127.0.0.1:{}", free_port())])
        .args(["--redis-url", &cfg.redis_url])
        .args(["--database-url", &cfg.database_url])
        .args(["--key-prefix", &cfg.key_prefix])
        .args(&cfg.extra_args)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(!status.success(), "delayq started:\n{text}");
            return text;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "delayq neither started nor gave up within {within:?}:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pushes a message due in 300 ms, receives it from a long poll and acks it.
async fn round_trip(client: &Client, topic: &str) {
    let pushed = client
        .push(&NewMessage::new(topic, "over TLS").delay(Duration::from_millis(300)))
        .await
        .unwrap();
    let polled = client
        .poll(topic, &[], 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(polled.messages.len(), 1, "the message came back");
    assert_eq!(polled.messages[0].id, pushed.id);
    assert_eq!(polled.messages[0].body, "over TLS");
    client
        .ack_delivery(&delayq_client::Delivery::from(&polled.messages[0]))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_over_tls_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let redis = TlsRedis::start(dir.path(), &pki, &pki.server_cert, &pki.server_key);
    let journal = Journal::create(Backend::Sqlite, dir.path());
    let mut args = trusting(&pki);
    args.extend([
        "--tls-client-cert".into(),
        path(&pki.client_cert),
        "--tls-client-key".into(),
        path(&pki.client_key),
    ]);
    let cfg = config(dir.path(), redis.url(), journal.url.clone(), args);
    let server = Server::start(&cfg, 1).await;
    let client = Client::new(&format!("http://127.0.0.1:{}", server.port)).unwrap();
    round_trip(&client, "tls").await;
    // The schedule is in that Redis.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{}:*", cfg.key_prefix))
        .query(&mut redis.con(&pki))
        .unwrap();
    assert!(!keys.is_empty(), "no key of the node's in the TLS Redis");

    // Without the CA the node refuses the server's certificate, and says so
    // at once rather than after its start-up wait.
    let mut untrusting = cfg.clone();
    untrusting.extra_args.drain(..2);
    let started = Instant::now();
    let log = refused_start(&untrusting, Duration::from_secs(20));
    assert!(
        log.contains("not signed by a CA delayq trusts"),
        "the refusal says why:\n{log}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{log}");
    // Without a client certificate Redis refuses the node, and it says so.
    let mut anonymous = cfg.clone();
    anonymous.extra_args.truncate(2);
    let log = refused_start(&anonymous, Duration::from_secs(20));
    assert!(log.contains("client certificate"), "{log}");
}

/// A self-signed CA certificate used as the server's own (the quick
/// `openssl req -x509` set-up) is refused at once, with what to do
/// instead, not retried for the start-up wait.
#[tokio::test(flavor = "multi_thread")]
async fn a_ca_certificate_as_the_servers_own_is_refused_at_once_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let redis = TlsRedis::start(
        dir.path(),
        &pki,
        &pki.self_signed_cert,
        &pki.self_signed_key,
    );
    let journal = Journal::create(Backend::Sqlite, dir.path());
    let args = vec![
        "--tls-ca-file".into(),
        path(&pki.self_signed_cert),
        "--tls-client-cert".into(),
        path(&pki.client_cert),
        "--tls-client-key".into(),
        path(&pki.client_key),
    ];
    let cfg = config(dir.path(), redis.url(), journal.url.clone(), args);
    let started = Instant::now();
    let log = refused_start(&cfg, Duration::from_secs(40));
    assert!(
        log.contains("CaUsedAsEndEntity") && log.contains("CA:FALSE"),
        "the refusal says what is wrong and what to do:\n{log}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_serves_https_to_the_client_and_reads_a_renewed_certificate_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let (cert, key) = (dir.path().join("node.pem"), dir.path().join("node.key"));
    pki.renew("node-1", &cert, &key);
    let redis = Redis::start(dir.path());
    let journal = Journal::create(Backend::Sqlite, dir.path());
    let port = free_port();
    let log = dir.path().join("node.log");
    let mut node = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("serve")
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .args(["--redis-url", &redis.url(), "--database-url", &journal.url])
        .args(["--key-prefix", &format!("t{}", random_hex(8))])
        .args(["--tls-cert", &path(&cert), "--tls-key", &path(&key)])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("node.err")).unwrap())
        .spawn()
        .unwrap();
    let url = format!("https://localhost:{port}");
    let client = Client::builder(&url).tls_ca_file(&pki.ca).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .poll("warm-up", &[], 1, Duration::ZERO)
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "no HTTPS answer; log:\n{}",
            std::fs::read_to_string(dir.path().join("node.err")).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    round_trip(&client, "https").await;
    assert_eq!(served_name(port, &pki).await, "node-1");

    // Plain HTTP is not served on the TLS port: it is told to use https,
    // as nginx does, and nothing is done.
    let plain = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    assert!(plain.poll("x", &[], 1, Duration::ZERO).await.is_err());
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/health"))
        .send()
        .await
        .expect("an answer to plain HTTP");
    assert_eq!(r.status().as_u16(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "https_required", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("https://"),
        "{body}"
    );
    round_trip(&client, "https").await;

    // A client that does not trust the CA is refused, and told why.
    let stranger = Client::new(&url).unwrap();
    let err = stranger
        .poll("x", &[], 1, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not trusted"), "{err}");
    assert!(!err.is_retryable(), "{err}");

    // A renewed certificate is served after SIGHUP, without a restart.
    pki.renew("node-2", &cert, &key);
    assert_eq!(
        served_name(port, &pki).await,
        "node-1",
        "read before the signal"
    );
    signal(&node, "HUP");
    let what = "the renewed certificate to be served";
    let every = Duration::from_millis(100);
    wait_every(what, Duration::from_secs(10), every, || async {
        let name = served_name(port, &pki).await;
        if name == "node-2" {
            Ok(())
        } else {
            Err(name)
        }
    })
    .await;
    round_trip(&client, "https").await;
    // A broken file on SIGHUP leaves the certificate before it in place.
    std::fs::write(&key, "not a key").unwrap();
    signal(&node, "HUP");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(served_name(port, &pki).await, "node-2");
    round_trip(&client, "https").await;
    let _ = node.kill();
    let _ = node.wait();
}

/// Waits until the journal shows `id` Consumed: forwarded, and the
/// broker or receiver confirmed it. Giving up, the server's log is
/// printed as it stops.
async fn wait_forwarded(env: &Env, id: &str, within: Duration, every: Duration) {
    let what = format!("{id} to be forwarded");
    wait_every(&what, within, every, || async {
        (env.journal.row(id).unwrap().status == status::CONSUMED).then_some(())
    })
    .await
}

/// Waits (up to 20 s) until the server's log says `text`.
async fn wait_logged(env: &Env, text: &str) {
    let what = format!("the server to log {text:?}");
    let every = Duration::from_millis(200);
    wait_every(&what, Duration::from_secs(20), every, || async {
        let log = std::fs::read_to_string(&env.server.log).unwrap();
        log.contains(text).then_some(())
    })
    .await
}

fn signal(child: &std::process::Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// The common name of the certificate the node at `port` serves now.
async fn served_name(port: u16, pki: &Pki) -> String {
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let cert = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    // The common name is the only printable run in this short DER after
    // the issuer's: find ours by the names the test gives.
    let der = cert.as_ref();
    ["node-1", "node-2"]
        .into_iter()
        .find(|n| der.windows(n.len()).any(|w| w == n.as_bytes()))
        .unwrap_or("?")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_over_https_and_their_tokens_stay_out_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let hook = Hook::default();
    let port = hook
        .clone()
        .start_tls(
            |_, _| 200,
            Pki::server_config(&pki.server_cert, &pki.server_key),
        )
        .await;
    let rogue = Hook::default();
    let rogue_port = rogue
        .clone()
        .start_tls(
            |_, _| 200,
            Pki::server_config(&pki.rogue_cert, &pki.rogue_key),
        )
        .await;
    let mut builder = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!(
            "hk=https://localhost:{port}/hook?token=s3cret-hook"
        ))
        .arg("--forward")
        .arg(&format!(
            "rogue=https://localhost:{rogue_port}/hook?token=s3cret-rogue"
        ));
    for a in trusting(&pki) {
        builder = builder.arg(&a);
    }
    let env = builder.start().await;
    let id = env
        .push(serde_json::json!({"topic": "hk", "body": "to the hook"}))
        .await;
    let rogue_id = env
        .push(serde_json::json!({"topic": "rogue", "body": "never", "maxAttempts": 2}))
        .await;
    wait_forwarded(
        &env,
        &id,
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await;
    let received = hook.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].1.get("x-delayq-id"), Some(&id));

    // The receiver with a certificate nobody trusts never sees a request,
    // and the log says why.
    wait_logged(&env, "not signed by a CA delayq trusts").await;
    assert!(rogue.received.lock().unwrap().is_empty());
    assert_ne!(env.journal.row(&rogue_id).unwrap().status, status::CONSUMED);
    let log = std::fs::read_to_string(&env.server.log).unwrap();
    assert!(
        !log.contains("s3cret"),
        "a webhook token in the log:\n{log}"
    );
    assert!(log.contains("token=***"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let nats = Nats::start_tls(dir.path(), &pki.server_cert, &pki.server_key);
    let url = format!("tls://localhost:{}", nats.port);
    let client = async_nats::ConnectOptions::new()
        .add_root_certificates(pki.ca.clone())
        .require_tls(true)
        .connect(&url)
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["delayq.orders".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut builder = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!("orders={url}?subject=delayq.orders"));
    for a in trusting(&pki) {
        builder = builder.arg(&a);
    }
    let env = builder.start().await;
    let id = env
        .push(serde_json::json!({"topic": "orders", "body": "b"}))
        .await;
    wait_forwarded(
        &env,
        &id,
        Duration::from_secs(20),
        Duration::from_millis(100),
    )
    .await;
    let mut stream = js.get_stream("ORDERS").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("check".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(v["id"], id);

    // Without the CA, the forwarder is refused and says why.
    let mut env = env;
    env.stop_server();
    env.config.extra_args.truncate(2);
    env.start_server().await;
    wait_logged(&env, "not signed by a CA delayq trusts").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_over_tls_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let rabbit = RabbitMq::start_tls(dir.path(), &pki.ca, &pki.server_cert, &pki.server_key);
    // The test declares the queue and reads it over the plain port; the
    // node is given the TLS port alone.
    let conn = lapin::Connection::connect(&rabbit.url(), Default::default())
        .await
        .unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("orders".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let tls_url = format!(
        "amqps://guest:guest@localhost:{}/%2f",
        rabbit.tls_port.unwrap()
    );
    let mut builder = Env::builder(Backend::Sqlite)
        .arg("--forward")
        .arg(&format!("orders={tls_url}"))
        .arg("--tls-client-cert")
        .arg(&path(&pki.client_cert))
        .arg("--tls-client-key")
        .arg(&path(&pki.client_key));
    for a in trusting(&pki) {
        builder = builder.arg(&a);
    }
    let env = builder.start().await;
    let id = env
        .push(serde_json::json!({"topic": "orders", "body": "b"}))
        .await;
    wait_forwarded(
        &env,
        &id,
        Duration::from_secs(60),
        Duration::from_millis(200),
    )
    .await;
    let got = channel
        .basic_get(
            "orders".into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
        .expect("the message is in the queue");
    let v: serde_json::Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(v["id"], id);
    let log = std::fs::read_to_string(&env.server.log).unwrap();
    assert!(
        !log.contains("guest:guest"),
        "a password in the log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_over_tls_to_mariadb() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let db = PrivateMariadb::start_with(
        dir.path(),
        "delayq_tls",
        &[
            format!("--ssl-cert={}", path(&pki.server_cert)),
            format!("--ssl-key={}", path(&pki.server_key)),
            format!("--ssl-ca={}", path(&pki.ca)),
        ],
    );
    let url = format!("{}?ssl_mode=verify_ca", db.url("delayq_tls"));
    let before = db.ssl_accepts();
    let env = Env::builder(Backend::Sqlite)
        .journal_url(&url)
        .arg("--tls-ca-file")
        .arg(&path(&pki.ca))
        .start()
        .await;
    let id = env
        .push(serde_json::json!({"topic": "j", "body": "b"}))
        .await;
    let client = Client::new(&env.url("")).unwrap();
    let polled = client
        .poll("j", &[], 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(polled.messages[0].id.to_string(), id);
    // The server accepted TLS sessions (the node's: verify_ca makes the
    // node check its own session's cipher too).
    assert!(db.ssl_accepts() > before, "no TLS session of the node's");

    // A CA that did not sign the server's certificate: refused, with why.
    let bad = format!(
        "{}?ssl_mode=verify_ca&ssl_ca={}",
        db.url("delayq_tls"),
        path(&pki.rogue_ca)
    );
    let err = migrate_refused(&bad);
    assert!(
        err.contains("not signed by a CA delayq trusts") || err.contains("certificate"),
        "{err}"
    );

    // ssl_mode=required against a server without TLS (the shared one, on
    // the database the test user may use): libmariadb falls back to plain
    // text there, and the node refuses the session.
    let shared = std::env::var("DELAYQ_TEST_MYSQL_URL")
        .expect("DELAYQ_TEST_MYSQL_URL (scripts/test sets it)");
    let plain = format!("{shared}/delayq?ssl_mode=required&ssl_ca={}", path(&pki.ca));
    let err = migrate_refused(&plain);
    assert!(err.contains("without TLS"), "{err}");
}

/// `delayq migrate --database-url URL`, which must fail: its stderr.
fn migrate_refused(url: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["migrate", "--database-url", url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{err}");
    err
}

#[derive(diesel::QueryableByName)]
struct SessionSsl {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    ssl: bool,
}

/// PostgreSQL's TLS is libpq's, set in the URL (`sslmode`, `sslrootcert`):
/// against the shared server (its certificate Debian's self-signed
/// snakeoil, its own CA, which scripts/test makes sure it serves) every
/// session of the node is encrypted, and a CA that did not sign the
/// server's certificate is refused at once, with why.
#[tokio::test(flavor = "multi_thread")]
async fn the_journal_over_tls_to_postgres() {
    use diesel::RunQueryDsl;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path());
    let db = Journal::create(Backend::Postgres, dir.path());
    let url = format!(
        "{}?sslmode=verify-ca&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem",
        db.url
    );
    let env = Env::builder(Backend::Sqlite)
        .journal_url(&url)
        .start()
        .await;
    let id = env
        .push(serde_json::json!({"topic": "j", "body": "b"}))
        .await;
    assert_eq!(env.receive_one("j").await.id(), id);
    env.ack(&id).await.assert_ok();
    env.wait_status(&id, status::CONSUMED).await;
    let mut conn = env.journal.conn();
    let sessions: Vec<SessionSsl> = delayq::with_conn!(&mut conn, c => diesel::sql_query(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
    )
    .load(c))
    .unwrap();
    assert!(!sessions.is_empty(), "no session of the node's");
    assert!(
        sessions.iter().all(|s| s.ssl),
        "{} of {} sessions in plain text",
        sessions.iter().filter(|s| !s.ssl).count(),
        sessions.len()
    );

    // A CA that did not sign the server's certificate: refused at once.
    let bad = format!("{}?sslmode=verify-ca&sslrootcert={}", db.url, path(&pki.ca));
    let began = Instant::now();
    let err = migrate_refused(&bad);
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
}
