//! The connection to Redis: one server (`redis://`, `rediss://`) or a Redis
//! Cluster (`redis+cluster://HOST:PORT[,HOST:PORT…]`, `rediss+cluster://…`
//! for TLS).
//!
//! Both kinds are one [`Conn`], so the schedule, the reconciler and the
//! tools do not care which they talk to. On a cluster:
//! - every key of one shard carries the shard's hash tag `{PREFIX:s}`, so
//!   each script call and each shard's commands land in one slot;
//! - a pipeline whose commands touch several shards is sent as one pipeline
//!   per slot, concurrently, and the replies are put back in order
//!   ([`Conn`]'s `req_packed_commands`); a pipeline of one slot goes as it is;
//! - `SCRIPT LOAD` reaches every master (see [`crate::redis::scripts`]);
//! - the client follows MOVED and ASK, and after a failover finds the new
//!   master and retries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How long a connection attempt and a reply may take before the command
/// fails (rather than hanging while Redis is away).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A multiplexed, self-reconnecting connection to one Redis or a cluster.
#[derive(Clone)]
pub enum Conn {
    Single(Single),
    Cluster(Cluster),
}

/// A connection to one server, and the scripts loaded through it.
#[derive(Clone)]
pub struct Single {
    con: ConnectionManager,
    /// The scripts loaded through this connection, to load again when the
    /// server answers NOSCRIPT (see [`Single::send`]).
    scripts: Arc<Mutex<Vec<redis::Script>>>,
}

/// A cluster connection, and when it last asked the cluster to redraw its
/// slot map ([`Cluster::nudge`]).
#[derive(Clone)]
pub struct Cluster {
    con: ClusterConnection,
    nudged: Arc<Mutex<Option<Instant>>>,
    /// The scripts loaded through this connection, to load again on a
    /// master that answers NOSCRIPT (see [`send_part`]).
    scripts: Arc<Mutex<Vec<redis::Script>>>,
}

/// Where a `--redis-url` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One server: the URL as given.
    Single(String),
    /// A cluster: one `redis://` (or `rediss://`) URL per seed node.
    Cluster { seeds: Vec<String>, tls: bool },
}

impl Target {
    /// Reads `redis+cluster://[USER:PASS@]H:P,H:P[/…]` (and `rediss+cluster`)
    /// as a cluster's seed nodes; anything else is one server.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
            (true, rest)
        } else {
            return Ok(Target::Single(url.to_string()));
        };
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, rest),
        };
        // Nothing after the hosts is used: a cluster has one database.
        let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
        let scheme = if tls { "rediss" } else { "redis" };
        let seeds: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|h| match userinfo {
                Some(u) => format!("{scheme}://{u}@{h}"),
                None => format!("{scheme}://{h}"),
            })
            .collect();
        if seeds.is_empty() || hosts.split(',').any(|h| !h.contains(':')) {
            return Err(format!(
                "a cluster URL names its seed nodes as HOST:PORT[,HOST:PORT…], got '{}'",
                crate::redact::url(url)
            ));
        }
        Ok(Target::Cluster { seeds, tls })
    }
}

/// A client of the cluster `seeds` name; with `push` it speaks RESP3 and
/// hands pushed messages (sharded pub/sub) to that sender.
pub fn cluster_client(
    seeds: &[String],
    tls: bool,
    push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
) -> RedisResult<redis::cluster::ClusterClient> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        // The client would send a command again after a dropped connection
        // or a timeout, when it may have run already: a claim run twice
        // hands a batch to nobody, a nack run twice fails another
        // consumer's delivery. It retries nothing; [`Conn`] sends again
        // only what the cluster refused before running it.
        .retries(0);
    if tls {
        builder = builder
            .tls(redis::TlsMode::Secure)
            .certs(redis_certificates());
    }
    if let Some(push) = push {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push);
    }
    builder.build()
}

/// Whether the client can read `url` at all (its scheme, host, port and
/// database), before any connection is tried: a URL it cannot read does
/// not become readable by waiting.
pub fn check_url(url: &str) -> Result<(), String> {
    match Target::parse(url)? {
        Target::Single(url) => client(&url).map(|_| ()).map_err(|e| e.to_string()),
        Target::Cluster { .. } => Ok(()),
    }
}

/// Opens a connection to what `url` names. Commands fail after
/// [`RESPONSE_TIMEOUT`] instead of hanging while Redis is away.
pub async fn connect(url: &str) -> RedisResult<Conn> {
    match Target::parse(url).map_err(|e| (redis::ErrorKind::InvalidClientConfig, "bad URL", e))? {
        Target::Single(url) => {
            let client = client(&url)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(500));
            Ok(Conn::Single(Single {
                con: ConnectionManager::new_with_config(client, config).await?,
                scripts: Arc::default(),
            }))
        }
        Target::Cluster { seeds, tls } => Ok(Conn::Cluster(Cluster {
            con: cluster_client(&seeds, tls, None)?
                .get_async_connection()
                .await?,
            nudged: Arc::default(),
            scripts: Arc::default(),
        })),
    }
}

impl Conn {
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Notes the scripts loaded through this connection (a cluster loads
    /// them again where a master lost them).
    pub fn remember_scripts<'a>(&self, scripts: impl IntoIterator<Item = &'a redis::Script>) {
        let known = match self {
            Conn::Single(c) => &c.scripts,
            Conn::Cluster(c) => &c.scripts,
        };
        *known.lock().unwrap_or_else(|p| p.into_inner()) = scripts.into_iter().cloned().collect();
    }
}

/// How often a command the cluster refused unrun is sent again, and the
/// first wait between tries (doubling): about 1.5 s in all, enough for the
/// client to learn a moved slot, not to wait out a failover (delayq's own
/// loops do that, as for any Redis outage).
const REFUSED_TRIES: u32 = 5;
const REFUSED_WAIT: Duration = Duration::from_millis(100);

/// Errors that prove the command did not run: the slot is served
/// elsewhere (MOVED), the cluster or the slot's master is down, a
/// multi-key command met a slot in migration (TRYAGAIN), or no connection
/// was made. After a timeout or a dropped connection it may have run, and
/// is not sent again.
fn refused_unrun(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        ) | ErrorKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal()
}

/// Runs `send` until it succeeds, fails in a way that may have run it, or
/// [`REFUSED_TRIES`] refusals passed.
async fn unless_refused<T, F, Fut>(mut send: F) -> RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = RedisResult<T>>,
{
    let mut wait = REFUSED_WAIT;
    let mut tries = 1;
    loop {
        match send().await {
            Err(e) if refused_unrun(&e) && tries < REFUSED_TRIES => {
                tracing::debug!(error = %e, tries, "Redis Cluster refused a command unrun; sending it again");
                tokio::time::sleep(wait).await;
                wait *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.con.req_packed_command(cmd),
            Conn::Cluster(c) => async move {
                let result = unless_refused(|| {
                    let mut con = c.con.clone();
                    async move { con.req_packed_command(cmd).await }
                })
                .await;
                c.after(result)
            }
            .boxed(),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => {
                if pipeline.is_transaction() {
                    c.con.req_packed_commands(pipeline, offset, count)
                } else {
                    c.send(pipeline).boxed()
                }
            }
            Conn::Cluster(c) => async move {
                let result = by_slot(c, pipeline, offset, count).await;
                c.after(result)
            }
            .boxed(),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.con.get_db(),
            Conn::Cluster(_) => 0,
        }
    }
}

/// The key the nudge asks about: any key does, the node that does not
/// serve its slot answers MOVED.
const NUDGE_KEY: &str = "delayq:slot-map-nudge";
/// At most one nudge in this long.
const NUDGE_EVERY: Duration = Duration::from_secs(2);

impl Cluster {
    /// Passes `result` on; after a timeout, nudges.
    fn after<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result {
            if e.is_timeout() {
                self.nudge();
            }
        }
        result
    }

    /// Makes the client redraw its slot map. It does that by itself only
    /// when a node answers MOVED; a master that hangs (instead of dying)
    /// and is failed over answers nothing, so every command for its slots
    /// would time out against it for good. Here a node that answers at
    /// once tells the masters (CLUSTER SLOTS), and each is asked about
    /// [`NUDGE_KEY`]: those not serving its slot answer MOVED, and the
    /// client fetches the whole map again.
    fn nudge(&self) {
        {
            let mut nudged = self.nudged.lock().unwrap_or_else(|p| p.into_inner());
            if nudged.is_some_and(|t| t.elapsed() < NUDGE_EVERY) {
                return;
            }
            *nudged = Some(Instant::now());
        }
        let mut con = self.con.clone();
        tokio::spawn(async move {
            let quick = Duration::from_millis(500);
            for _ in 0..5 {
                let ask = redis::cmd("CLUSTER").arg("SLOTS").clone();
                let slots = ask.query_async::<Value>(&mut con);
                let Ok(Ok(reply)) = tokio::time::timeout(quick, slots).await else {
                    continue;
                };
                let mut masters: Vec<(String, u16)> = slot_ranges(&reply)
                    .into_iter()
                    .map(|r| (r.host, r.port))
                    .collect();
                masters.sort();
                masters.dedup();
                tracing::info!(
                    masters = masters.len(),
                    "a Redis Cluster command timed out; asking the cluster for its slot map again"
                );
                for (host, port) in masters {
                    let ask = con.route_command(
                        redis::cmd("EXISTS").arg(NUDGE_KEY).clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                    );
                    let _ = tokio::time::timeout(quick, ask).await;
                }
                return;
            }
        });
    }
}

/// One row of a CLUSTER SLOTS reply: a range of slots and its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    pub first: i64,
    pub last: i64,
    pub host: String,
    pub port: u16,
}

/// Reads a CLUSTER SLOTS reply: `[[first, last, [host, port, id, …], replicas…], …]`.
pub fn slot_ranges(reply: &Value) -> Vec<SlotRange> {
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    let Value::Array(rows) = reply else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| {
            let Value::Array(f) = row else { return None };
            let Some(Value::Array(master)) = f.get(2) else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            Some(SlotRange {
                first: int(f.first()?)?,
                last: int(f.get(1)?)?,
                host,
                port: u16::try_from(int(master.get(1)?)?).ok()?,
            })
        })
        .collect()
}

/// Sends `pipeline` to a cluster as one pipeline per slot its commands
/// touch (concurrently), and returns the replies in the pipeline's order.
/// Commands without a key go with the first slot's. A transaction goes as
/// it is.
async fn by_slot(
    c: &Cluster,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    if pipeline.is_transaction() {
        return unless_refused(|| {
            let mut con = c.con.clone();
            async move { con.req_packed_commands(pipeline, offset, count).await }
        })
        .await;
    }
    let groups = group_by_slot(pipeline.cmd_iter().map(first_key));
    let cmds: Vec<&Cmd> = pipeline.cmd_iter().collect();
    let parts: Vec<Pipeline> = groups
        .iter()
        .map(|idx| {
            let mut part = redis::pipe();
            for &i in idx {
                part.add_command(cmds[i].clone());
            }
            part
        })
        .collect();
    let replies = try_join_all(parts.iter().map(|part| send_part(c, part))).await?;
    let mut out = vec![Value::Nil; cmds.len()];
    for (idx, values) in groups.iter().zip(replies) {
        for (&i, v) in idx.iter().zip(values) {
            out[i] = v;
        }
    }
    Ok(out)
}

/// Sends one slot's part of a pipeline. A master that lost the scripts (a
/// restarted server promoted, `SCRIPT FLUSH`) answers NOSCRIPT to each
/// script call, which then did not run: the scripts are loaded again and
/// only those calls are sent again. Sending the whole pipeline again would
/// run twice what ran on the other masters (claims held by nobody).
async fn send_part(c: &Cluster, part: &Pipeline) -> RedisResult<Vec<Value>> {
    async fn send(con: &ClusterConnection, p: &Pipeline) -> RedisResult<Vec<Value>> {
        unless_refused(|| {
            let mut con = con.clone();
            async move { con.req_packed_commands(p, 0, p.len()).await }
        })
        .await
    }
    let mut values = send(&c.con, part).await?;
    let missing = unrun_calls(&values);
    if missing.is_empty() {
        return Ok(values);
    }
    load_again(&mut c.con.clone(), &c.scripts, missing.len()).await?;
    let again = send(&c.con, &calls_again(part, &missing)).await?;
    put_back(&mut values, &missing, again);
    Ok(values)
}

impl Single {
    /// Sends a pipeline. A server that lost the scripts between two of
    /// its commands (`SCRIPT FLUSH`, a restart under the connection) ran
    /// the commands before and none of the script calls after: as on a
    /// cluster ([`send_part`]), only the calls that answered NOSCRIPT are
    /// sent again, so nothing runs twice.
    async fn send(&self, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
        let mut con = self.con.clone();
        let mut values = con.req_packed_commands(pipeline, 0, pipeline.len()).await?;
        let missing = unrun_calls(&values);
        if missing.is_empty() {
            return Ok(values);
        }
        load_again(&mut con, &self.scripts, missing.len()).await?;
        let again = calls_again(pipeline, &missing);
        let replies = con.req_packed_commands(&again, 0, again.len()).await?;
        put_back(&mut values, &missing, replies);
        Ok(values)
    }
}

/// The indexes of the calls that answered NOSCRIPT (and so did not run).
fn unrun_calls(values: &[Value]) -> Vec<usize> {
    values
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            matches!(v, Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript))
        })
        .map(|(i, _)| i)
        .collect()
}

/// Loads the scripts known to the connection again through `con`.
async fn load_again(
    con: &mut impl ConnectionLike,
    scripts: &Mutex<Vec<redis::Script>>,
    calls: usize,
) -> RedisResult<()> {
    let scripts = scripts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for script in &scripts {
        script.prepare_invoke().load_async(con).await?;
    }
    tracing::info!(
        calls,
        "Redis had lost delayq's scripts; loaded them again and sending again only the calls that did not run"
    );
    Ok(())
}

/// The commands of `part` at `missing`, as a pipeline of their own.
fn calls_again(part: &Pipeline, missing: &[usize]) -> Pipeline {
    let cmds: Vec<&Cmd> = part.cmd_iter().collect();
    let mut again = redis::pipe();
    for &i in missing {
        again.add_command(cmds[i].clone());
    }
    again
}

/// Puts the replies of the calls sent again in their places.
fn put_back(values: &mut [Value], missing: &[usize], replies: Vec<Value>) {
    for (&i, v) in missing.iter().zip(replies) {
        values[i] = v;
    }
}

/// Indexes of the commands, grouped by the slot of their first key, in the
/// order the slots first appear; keyless commands join the first group.
fn group_by_slot<'a>(keys: impl Iterator<Item = Option<&'a [u8]>>) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut of_slot: HashMap<Slot, usize> = HashMap::new();
    let mut keyless = Vec::new();
    for (i, key) in keys.enumerate() {
        match key {
            Some(key) => {
                let g = *of_slot.entry(Slot::for_key(key)).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push(i);
            }
            None => keyless.push(i),
        }
    }
    match groups.first_mut() {
        Some(first) => {
            first.extend(keyless);
            first.sort_unstable();
        }
        None if !keyless.is_empty() => groups.push(keyless),
        None => {}
    }
    groups
}

/// The first key a command names: after the script and key count for
/// `EVALSHA`/`EVAL`, none for the keyless commands delayq pipelines, the
/// first argument otherwise.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        Arg::Simple(b) => Some(b),
        _ => None,
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVALSHA" | b"EVAL" | b"EVALSHA_RO" | b"EVAL_RO" => {
            let _script = args.next()?;
            let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if keys == 0 {
                None
            } else {
                args.next()
            }
        }
        b"TIME" | b"PING" | b"CONFIG" | b"INFO" | b"SCRIPT" | b"DBSIZE" | b"PUBLISH"
        | b"SPUBLISH" => None,
        _ => args.next(),
    }
}

/// Redis's TLS settings: every trusted root and the client certificate.
pub fn redis_certificates() -> redis::TlsCertificates {
    let t = crate::tls::trust();
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

/// A client of the Redis at `url`; `rediss://` speaks TLS with the roots
/// and client certificate of [`crate::tls`].
pub fn client(url: &str) -> redis::RedisResult<redis::Client> {
    if url.starts_with("rediss://") {
        redis::Client::build_with_tls(url, redis_certificates())
    } else {
        redis::Client::open(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_seed_nodes() {
        assert_eq!(
            Target::parse("redis://h:1/0").unwrap(),
            Target::Single("redis://h:1/0".into())
        );
        assert_eq!(
            Target::parse("redis+cluster://a:1,b:2").unwrap(),
            Target::Cluster {
                seeds: vec!["redis://a:1".into(), "redis://b:2".into()],
                tls: false
            }
        );
        assert_eq!(
            Target::parse("rediss+cluster://u:p@a:1,b:2/").unwrap(),
            Target::Cluster {
                seeds: vec!["rediss://u:p@a:1".into(), "rediss://u:p@b:2".into()],
                tls: true
            }
        );
        assert!(Target::parse("redis+cluster://").is_err());
        assert!(Target::parse("redis+cluster://a:1,b").is_err());
    }

    #[test]
    fn a_pipeline_splits_by_slot_and_keeps_order_within_each() {
        let mut pipe = redis::pipe();
        pipe.hget("{p:1}:msg", "1")
            .cmd("TIME")
            .zadd("{p:2}:delay", "2", 1)
            .hdel("{p:1}:unjournaled", "1")
            .add_command(
                redis::cmd("EVALSHA")
                    .arg("sha")
                    .arg(2)
                    .arg("{p:2}:msg")
                    .arg("{p:2}:x")
                    .arg("arg")
                    .clone(),
            );
        let groups = group_by_slot(pipe.cmd_iter().map(first_key));
        assert_eq!(groups, vec![vec![0, 1, 3], vec![2, 4]]);
        let keyless = group_by_slot([None, None].into_iter());
        assert_eq!(keyless, vec![vec![0, 1]]);
    }
}
