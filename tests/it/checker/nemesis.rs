//! The nemesis: faults chosen at random from the seed, each bounded and
//! healed before the end, partitions overlapping with the others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::RedisCluster;

use super::history::now;
use super::workload::World;

/// Node `node`'s wall clock offset (ms), as its clock shim reads it
/// (`CLOCK_SKEW_FILE`, set in mod.rs).
fn skew(c: &Cluster, node: usize) -> i64 {
    std::fs::read_to_string(c.dir.path().join(format!("clock-skew-ms-{node}")))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn set_skew(c: &Cluster, node: usize, ms: i64) {
    std::fs::write(
        c.dir.path().join(format!("clock-skew-ms-{node}")),
        ms.to_string(),
    )
    .unwrap();
}

pub fn publish_ports(w: &World, c: &Cluster) {
    *w.ports.write().unwrap() = c.nodes.iter().map(|n| n.as_ref().map(|s| s.port)).collect();
}

/// A partition under way: which node, which link, healed when.
struct Partition {
    kind: &'static str,
    node: usize,
    from: i64,
    heal_at: Instant,
}

fn links_of<'a>(c: &'a Cluster, p: &Partition) -> Vec<&'a crate::common::proxy::Proxy> {
    let l = &c.links[p.node];
    match p.kind {
        "redis_partition" => l.redis.iter().collect(),
        "database_partition" => vec![&l.database],
        "database_down" => c.links.iter().map(|l| &l.database).collect(),
        _ => l.zookeeper.iter().collect(),
    }
}

pub async fn nemesis(
    w: Arc<World>,
    mut c: Cluster,
    redis_cluster: Option<&RedisCluster>,
    run_for: Duration,
) -> Cluster {
    let mut rng = fastrand::Rng::with_seed(w.seed * 7 + 1);
    let end = Instant::now() + run_for;
    // A single Redis has a replica, for a failover that loses writes.
    let mut replica = redis_cluster.is_none().then(|| {
        let dir = c.dir.path().join("replica");
        std::fs::create_dir_all(&dir).unwrap();
        let r = crate::common::redis_server::Redis::start(&dir);
        r.replicate(c.redis.port);
        r
    });
    let nodes = c.nodes.len();
    let mut partitions: Vec<Partition> = Vec::new();
    let mut next = Instant::now() + Duration::from_millis(rng.u64(1_000..3_000));
    loop {
        let t = Instant::now();
        // Heal what is due.
        let (due, left): (Vec<Partition>, Vec<Partition>) = partitions
            .into_iter()
            .partition(|p| p.heal_at <= t || t >= end);
        partitions = left;
        for p in due {
            for link in links_of(&c, &p) {
                link.heal();
            }
            w.history.fault(p.kind, p.from);
        }
        if t >= end {
            break;
        }
        if t < next {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        next = t + Duration::from_millis(rng.u64(2_000..5_000));
        let node = rng.usize(..nodes);
        let from = now();
        let choice = rng.u8(..15);
        // A node that starts again needs its journal (it gives up after a
        // few seconds without it, as a supervisor would restart it later):
        // its partitions heal before a restart.
        if matches!(choice, 0 | 2) {
            let (touching, left): (Vec<Partition>, Vec<Partition>) = partitions
                .into_iter()
                .partition(|p| p.node == node || p.kind == "database_down");
            partitions = left;
            for p in touching {
                for link in links_of(&c, &p) {
                    link.heal();
                }
                w.history.fault(p.kind, p.from);
            }
        }
        match choice {
            0 => {
                c.kill9(node);
                publish_ports(&w, &c);
                tokio::time::sleep(Duration::from_millis(rng.u64(200..2_000))).await;
                c.start_node(node).await;
                w.history.fault("node_kill9", from);
            }
            1 => {
                c.node(node).signal("STOP");
                tokio::time::sleep(c.session() + Duration::from_millis(rng.u64(500..2_000))).await;
                c.node(node).signal("CONT");
                w.history.fault("node_sigstop", from);
            }
            2 => {
                // Started again with its clock off, both directions, and
                // back.
                let offset = [3_000, -3_000, 0][rng.usize(..3)];
                set_skew(&c, node, offset);
                c.kill9(node);
                publish_ports(&w, &c);
                c.start_node(node).await;
                w.history.fault(
                    match offset {
                        3_000 => "node_clock_ahead",
                        -3_000 => "node_clock_behind",
                        _ => "node_clock_true",
                    },
                    from,
                );
            }
            13 if c.journal.can_refuse_writes() => {
                // The database answers and refuses every write for 2 to 5
                // s (PostgreSQL: read-only; MariaDB: a trigger on every
                // table refuses each write).
                c.journal.set_read_only(true);
                assert!(!c.journal.takes_writes(), "the database refuses writes now");
                tokio::time::sleep(Duration::from_millis(rng.u64(2_000..5_000))).await;
                c.journal.set_read_only(false);
                assert!(c.journal.takes_writes(), "the database takes writes again");
                w.history.fault("database_read_only", from);
            }
            12 => {
                // The clock of a running node jumps 3 s, either way, and
                // back a few seconds later (the shim reads its file each
                // second).
                let before = skew(&c, node);
                let ahead = rng.bool();
                set_skew(&c, node, before + if ahead { 3_000 } else { -3_000 });
                tokio::time::sleep(Duration::from_millis(rng.u64(2_000..5_000))).await;
                set_skew(&c, node, before);
                tokio::time::sleep(Duration::from_millis(1_100)).await;
                w.history.fault(
                    if ahead {
                        "node_clock_jump_ahead"
                    } else {
                        "node_clock_jump_behind"
                    },
                    from,
                );
            }
            3 if redis_cluster.is_none() => {
                let _ = std::fs::remove_file(c.redis.dump_path());
                let from = now();
                c.redis.kill();
                tokio::time::sleep(Duration::from_millis(rng.u64(200..1_000))).await;
                c.redis.restart_same_port();
                w.history.fault("redis_restart_empty", from);
            }
            4 if redis_cluster.is_none() => {
                // An older snapshot: what Redis took after it is lost,
                // its data set marker kept.
                let _: redis::RedisResult<()> = redis::cmd("SAVE").query(&mut c.redis.con());
                tokio::time::sleep(Duration::from_millis(rng.u64(500..3_000))).await;
                let from = now();
                c.redis.kill();
                c.redis.restart_same_port();
                let _ = std::fs::remove_file(c.redis.dump_path());
                w.history.fault("redis_older_snapshot", from);
            }
            14 if redis_cluster.is_none() => {
                // A failover to a replica that lags: it is promoted while
                // its master still takes writes for 200 ms to 2 s (lost
                // with it), then every node's Redis address moves to it
                // (connections cut); the old master follows it from then
                // on, as its replica.
                let r = replica.as_mut().expect("a single Redis has a replica");
                let _: redis::RedisResult<i64> = redis::cmd("WAIT")
                    .arg(1)
                    .arg(2_000)
                    .query(&mut c.redis.con());
                let from = now();
                r.promote();
                tokio::time::sleep(Duration::from_millis(rng.u64(200..2_000))).await;
                for l in &c.links {
                    if let Some(p) = &l.redis {
                        p.redirect(r.port);
                    }
                }
                std::mem::swap(&mut c.redis, r);
                r.replicate(c.redis.port);
                w.history.fault("redis_replica_promoted", from);
            }
            3 | 4 => {
                let rc = redis_cluster.unwrap();
                let masters: Vec<usize> = rc
                    .status()
                    .into_iter()
                    .filter(|s| s.role == "master")
                    .map(|s| s.n)
                    .collect();
                // Hung past the cluster's node timeout (2 s): its replica
                // is promoted, and the old master, resumed, rejoins as a
                // replica. (A killed server's port may be taken by an
                // outgoing connection before it starts again.)
                let m = masters[rng.usize(..masters.len())];
                rc.pause(m);
                tokio::time::sleep(Duration::from_millis(rng.u64(3_000..6_000))).await;
                rc.resume(m);
                w.history.fault("redis_master_hung", from);
            }
            5 => {
                let n = rng.usize(1..=3);
                c.zk.kill(n);
                tokio::time::sleep(Duration::from_millis(rng.u64(1_000..3_000))).await;
                c.zk.start_one(n);
                w.history.fault("zookeeper_server_killed", from);
            }
            6 => {
                let a = rng.usize(1..=3);
                let b = a % 3 + 1;
                c.zk.kill(a);
                c.zk.kill(b);
                tokio::time::sleep(Duration::from_millis(rng.u64(1_000..4_000))).await;
                c.zk.start_one(a);
                c.zk.start_one(b);
                w.history.fault("zookeeper_quorum_lost", from);
            }
            _ => {
                let kind = match choice {
                    7 if redis_cluster.is_none() => "redis_partition",
                    7 | 8 => "database_partition",
                    9 => "database_down",
                    _ => "zookeeper_partition",
                };
                let p = Partition {
                    kind,
                    node,
                    from,
                    heal_at: Instant::now() + Duration::from_millis(rng.u64(1_000..5_000)),
                };
                let links = links_of(&c, &p);
                if kind == "database_down" || rng.bool() {
                    for l in links {
                        l.cut();
                    }
                } else {
                    for l in links {
                        l.hang();
                    }
                }
                partitions.push(p);
            }
        }
        publish_ports(&w, &c);
    }
    c
}
