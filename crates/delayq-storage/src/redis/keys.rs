//! Every Redis key delayq uses, built in one place.
//!
//! All keys of shard `s` carry the hash tag `{PREFIX:s}`, so one shard's keys
//! share a Redis Cluster slot and every script touches one slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{P:s}:delay` | zset | scheduled ids, scored by [`score`] (due time, then priority) |
//! | `{P:s}:msg` | hash | id → message record ([`crate::redis::record`]) |
//! | `{P:s}:ready:TOPIC` | zset | due ids of one topic waiting for a consumer, same score |
//! | `{P:s}:inflight` | zset | ids handed to a consumer, scored by ack deadline (epoch ms) |
//! | `{P:s}:finished` | zset | tombstones: ids acked or cancelled lately, scored by when (ms) |
//! | `{P:s}:unjournaled` | hash | id → `status|attempts|at`: an end (acked, cancelled, dead) Redis applied and the journal has not confirmed; its tombstone stays while it is here |
//! | `{P:s}:epoch` | string | the shard's fencing epoch |
//! | `{P:s}:applied` | hash | `run`: the data set (the Redis process's run id and replication id) on which the journal's ends were last known applied to the shard, `at`: when (ms); while another process serves the shard (a restart, a failover: Redis may have lost its last writes) the shard hands nothing out until the journal's ends are re-applied (see the server's `reconcile::fence`) |
//! | `{P:s}:fence-lock` | string | the node re-applying the journal's ends to a fenced shard (a lease) |
//! | `{P:s}:moved` | hash | id → `score|at`: a message rescheduled while Redis did not hold it (nor its tombstone); the next schedule of it takes that score (within two minutes); the key expires two minutes after the last such move |
//! | `{P:s}:moved-at` | zset | the ids of `{P:s}:moved`, scored by `at` (ms): the scripts that leave or take moves drop those past their two minutes, a batch at a time; expires with it |
//! | `{P:s}:limit:TOPIC` | hash | a rate-limited topic's token bucket (`t` tokens, `at` ms), gone a minute after its last use; on one Redis only shard 0's |
//! | `{P:s}:turn:TOPIC` | hash | ordered groups of the topic: group → the id holding the group's turn (ready, handed out, or waiting for the retry after a failed delivery); see group.lua |
//! | `{P:s}:held:TOPIC\|GROUP` | zset | a group's due messages waiting behind its turn, scored as in a ready queue |
//! | `{P:s}:gwait:TOPIC` | set | the topic's groups with messages held |
//! | `{P:s}:heldn:TOPIC` | string | how many of the topic's messages are held |
//! | `{P:s}:gtopics` | set | the topics with a group holding its turn in the shard (what `GET /topics` reads groups of) |
//! | `{P:s}:busy:TOPIC` | zset | a topic with a concurrency cap: ids of it this shard handed out and not acked or nacked, scored by their ack deadline; those past it leave at the next claim; the key expires after the last deadline |
//! | `{P:s}:paused` | set | topics paused (nothing handed out): the copy the shard's hand-out scripts read |
//! | `{P:s}:pause-seq` | hash | topic → the number of the last pause or resume of it this shard took; an older one is ignored (pause.lua) |
//! | `{P}:dataset` | string | marker: this Redis holds a delayq data set |
//! | `{P}:shards` | string | the shard count the data set was written with; a node with another refuses to start (see `delayq reshard`) |
//! | `{P}:resharding` | string | `FROM>TO` while `delayq reshard` moves the data set (nodes refuse to start) |
//! | `{P}:retention` | hash | how far the journal's retention has read the flow rows: `finished`, `dead` → flow id |
//! | `{P}:groups` | string | set when the first message of an ordered group is pushed: groups may wait in the journal alone (beyond the horizon, dead letters), so `delayq reshard` refuses from then on unless `--split-groups` |
//! | `{P}:restore` | hash | keyset cursor of the restore under way (or interrupted), so a restore run again resumes; gone with the data set |
//! | `{P}:standalone` | string | lease of the one standalone node serving this prefix |
//! | `{P}:worker:N` | string | lease of Snowflake worker id N (standalone nodes, command-line tools) |
//! | `{P}:worker-reserved:N` | string | highest millisecond worker N may have used (epoch ms) |
//! | `{P}:journal-spill` | list | status changes a stopping node could not journal (JSON) |
//! | `{P}:ui-revoked` | zset | dashboard sessions logged out, scored by when they would have expired (ms) |
//! | `{P}:reconciled` | string | the leader's last periodic reconciliation: its node, when, and its report (JSON), for the dashboard |
//! | `{P}:paused` | hash | topic → when it was paused (ms): the paused topics, as `GET /topics` lists them; every shard's `:paused` set follows it |
//! | `{P}:pause-seq` | string | the number of the last pause or resume, taken with its change of `{P}:paused` (pause_topic.lua), so the shards apply them in that order |
//! | `{P}:journal-behind` | zset | nodes whose journal writes are failing or backlogged, scored by when they said so (ms) |
//! | `{P}:alive` | zset | serving nodes (standalone or ZooKeeper mode), scored by when they last said they run (ms, each second); `delayq reshard` refuses while one said so lately |
//!
//! Pub/sub channels (not keys), one pair per shard and tagged like its keys,
//! so on a Redis Cluster they are sharded channels (SPUBLISH/SSUBSCRIBE) of
//! the shard's slot: `{P:s}:wake` carries the due time (ms) of a message
//! scheduled ahead of everything shard `s` held, for the shard's owner;
//! `{P:s}:ready` carries `NODE|topic,topic` when messages of the shard
//! became ready, for consumers long-polling on other nodes.
//!
//! The one key a script touches without being given it in KEYS is a
//! topic's ready queue `{P:s}:ready:TOPIC`: the topic is read from the
//! record, and the caller passes the shard's `{P:s}:ready:` prefix. It
//! carries the hash tag of the keys the call declares, so it is in the
//! same slot, which Redis Cluster allows (a key of another slot would fail
//! the call with CROSSSLOT).

use crate::message::MessageId;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    shards: u32,
}

impl Keys {
    pub fn new(prefix: &str, shards: u32) -> Self {
        assert!(shards > 0, "at least one shard");
        Keys {
            prefix: prefix.to_string(),
            shards,
        }
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The shard a message belongs to, for the life of the cluster.
    pub fn shard_of(&self, id: MessageId) -> u32 {
        shard_of(id, self.shards)
    }

    /// The shard of every message of an ordered group of a topic: a push
    /// gives such a message an id of this shard, so the group's messages
    /// and its turn share one shard's keys (one Redis Cluster slot) and
    /// each script sees the whole group.
    pub fn shard_of_group(&self, topic: &str, group: &str) -> u32 {
        shard_of_group(topic, group, self.shards)
    }

    /// Who holds each group's turn in a topic: group → id (see group.lua).
    pub fn group_turns(&self, shard: u32, topic: &str) -> String {
        format!("{}:turn:{topic}", self.tag(shard))
    }

    /// The groups of a topic with due messages waiting behind their turn.
    pub fn groups_waiting(&self, shard: u32, topic: &str) -> String {
        format!("{}:gwait:{topic}", self.tag(shard))
    }

    /// The topics with a group holding its turn in the shard: what
    /// `GET /topics` reads the groups of.
    pub fn group_topics(&self, shard: u32) -> String {
        format!("{}:gtopics", self.tag(shard))
    }

    /// How many due messages of a topic wait behind their group's turn.
    pub fn held_count(&self, shard: u32, topic: &str) -> String {
        format!("{}:heldn:{topic}", self.tag(shard))
    }

    /// The due messages of one group waiting behind its turn, scored as
    /// in a ready queue (topics cannot hold `|`).
    pub fn held(&self, shard: u32, topic: &str, group: &str) -> String {
        format!("{}:held:{topic}|{group}", self.tag(shard))
    }

    fn tag(&self, shard: u32) -> String {
        format!("{{{}:{}}}", self.prefix, shard)
    }

    pub fn delay(&self, shard: u32) -> String {
        format!("{}:delay", self.tag(shard))
    }

    pub fn messages(&self, shard: u32) -> String {
        format!("{}:msg", self.tag(shard))
    }

    pub fn inflight(&self, shard: u32) -> String {
        format!("{}:inflight", self.tag(shard))
    }

    /// Prefix of the shard's ready queues; the scripts append the topic.
    pub fn ready_prefix(&self, shard: u32) -> String {
        format!("{}:ready:", self.tag(shard))
    }

    pub fn ready(&self, shard: u32, topic: &str) -> String {
        format!("{}{}", self.ready_prefix(shard), topic)
    }

    pub fn finished(&self, shard: u32) -> String {
        format!("{}:finished", self.tag(shard))
    }

    pub fn unjournaled(&self, shard: u32) -> String {
        format!("{}:unjournaled", self.tag(shard))
    }

    /// id → `score|at`: the new score of a message rescheduled while this
    /// shard did not hold it, for the call about to schedule it (see
    /// reschedule.lua and schedule.lua).
    pub fn moved(&self, shard: u32) -> String {
        format!("{}:moved", self.tag(shard))
    }

    /// The ids of [`Keys::moved`] scored by when the move was left (ms),
    /// so the stale ones are found without reading the hash.
    pub fn moved_at(&self, shard: u32) -> String {
        format!("{}:moved-at", self.tag(shard))
    }

    /// The rate limit bucket of `topic` in shard `s` (on one Redis, shard
    /// 0's is the topic's only one); see [`crate::limit`].
    pub fn limit(&self, shard: u32, topic: &str) -> String {
        format!("{}:limit:{topic}", self.tag(shard))
    }

    /// The hand-outs of a topic with a concurrency cap in shard `s`; see
    /// [`crate::limit`].
    pub fn busy(&self, shard: u32, topic: &str) -> String {
        format!("{}:busy:{topic}", self.tag(shard))
    }

    /// Topics paused, as shard `s`'s hand-out scripts read them.
    pub fn paused(&self, shard: u32) -> String {
        format!("{}:paused", self.tag(shard))
    }

    /// Topic → when it was paused (ms), for every shard.
    pub fn paused_topics(&self) -> String {
        format!("{{{}}}:paused", self.prefix)
    }

    /// The number of the last pause or resume.
    pub fn pause_seq(&self) -> String {
        format!("{{{}}}:pause-seq", self.prefix)
    }

    /// Topic → the number of the last pause or resume shard `s` took.
    pub fn shard_pause_seq(&self, shard: u32) -> String {
        format!("{}:pause-seq", self.tag(shard))
    }

    /// Which Redis process the journal's ends were last applied on.
    pub fn applied(&self, shard: u32) -> String {
        format!("{}:applied", self.tag(shard))
    }

    /// The lease of the node re-applying the journal's ends to a fenced
    /// shard.
    pub fn fence_lock(&self, shard: u32) -> String {
        format!("{}:fence-lock", self.tag(shard))
    }

    pub fn epoch(&self, shard: u32) -> String {
        format!("{}:epoch", self.tag(shard))
    }

    pub fn dataset_marker(&self) -> String {
        format!("{{{}}}:dataset", self.prefix)
    }

    /// The shard count the data set was written with.
    pub fn shard_count(&self) -> String {
        format!("{{{}}}:shards", self.prefix)
    }

    /// `FROM>TO` while a reshard moves the data set.
    pub fn resharding(&self) -> String {
        format!("{{{}}}:resharding", self.prefix)
    }

    /// Set once a message of an ordered group was pushed on this data set
    /// (`delayq reshard` then refuses unless told `--split-groups`).
    pub fn groups_used(&self) -> String {
        format!("{{{}}}:groups", self.prefix)
    }

    /// How far the journal's retention has read (see the server's `retention`).
    pub fn retention_cursor(&self) -> String {
        format!("{{{}}}:retention", self.prefix)
    }

    /// Where a restore keeps its keyset cursor (see the server's `restore`).
    /// It lives in the Redis it restores into: a Redis that lost its data
    /// lost the cursor too, and is restored from the first row.
    pub fn restore_cursor(&self) -> String {
        format!("{{{}}}:restore", self.prefix)
    }

    pub fn standalone_lease(&self) -> String {
        format!("{{{}}}:standalone", self.prefix)
    }

    pub fn worker_lease(&self, worker: u16) -> String {
        format!("{{{}}}:worker:{worker}", self.prefix)
    }

    pub fn worker_reserved(&self, worker: u16) -> String {
        format!("{{{}}}:worker-reserved:{worker}", self.prefix)
    }

    /// Status changes a node could not write to the journal before it
    /// stopped (JSON, one per element); the next node to start writes them.
    pub fn journal_spill(&self) -> String {
        format!("{{{}}}:journal-spill", self.prefix)
    }

    /// Dashboard sessions logged out, scored by when they would have
    /// expired (ms).
    pub fn ui_revoked(&self) -> String {
        format!("{{{}}}:ui-revoked", self.prefix)
    }

    /// The leader's last periodic reconciliation (JSON), for the dashboard.
    pub fn reconciled(&self) -> String {
        format!("{{{}}}:reconciled", self.prefix)
    }

    /// Nodes whose journal is behind Redis right now (their status changes
    /// wait for the database), scored by when they last said so (ms).
    pub fn journal_behind(&self) -> String {
        format!("{{{}}}:journal-behind", self.prefix)
    }

    /// Serving nodes, scored by when they last said they run (ms).
    pub fn alive(&self) -> String {
        format!("{{{}}}:alive", self.prefix)
    }

    /// The latest ask that every node write the status changes it has
    /// queued (a counter; see `reconcile::fence`).
    pub fn flush_asked(&self) -> String {
        format!("{{{}}}:flush-asked", self.prefix)
    }

    /// Per node, the latest ask it answered: every status change it had
    /// queued when it read that ask is written.
    pub fn flushed(&self) -> String {
        format!("{{{}}}:flushed", self.prefix)
    }

    /// Channel waking shard `s`'s owner (see schedule.lua).
    pub fn wake_channel(&self, shard: u32) -> String {
        format!("{}:wake", self.tag(shard))
    }

    /// Channel telling every node which topics of shard `s` have new ready
    /// messages.
    pub fn ready_channel(&self, shard: u32) -> String {
        format!("{}:ready", self.tag(shard))
    }
}

/// `splitmix64(id) % shards`: the low bits of a Snowflake id are a sequence
/// and a worker id, so they are mixed before the modulo to spread evenly.
pub fn shard_of(id: MessageId, shards: u32) -> u32 {
    let mut z = (id.0 as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % shards as u64) as u32
}

/// See [`Keys::shard_of_group`]: FNV-1a of `topic|group`, mixed as
/// [`shard_of`] mixes an id.
pub fn shard_of_group(topic: &str, group: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic
        .bytes()
        .chain(std::iter::once(b'|'))
        .chain(group.bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    shard_of(MessageId(h as i64), shards)
}

/// Zset score of a message: due time first, then higher priority first.
/// `due_ms * 256 + (255 - priority)` stays an exact f64 integer until the
/// year 3000 (2^53 / 256 ms), so the order is exact.
pub fn score(due_ms: i64, priority: u8) -> f64 {
    (due_ms * 256 + (255 - priority as i64)) as f64
}

/// Highest score of anything due at `now_ms`.
pub fn max_due_score(now_ms: i64) -> f64 {
    (now_ms * 256 + 255) as f64
}

/// The due time encoded in a score.
pub fn due_of_score(score: f64) -> i64 {
    (score as i64).div_euclid(256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::IdGenerator;

    #[test]
    fn keys_share_the_shard_tag() {
        let k = Keys::new("dq", 8);
        assert_eq!(k.delay(3), "{dq:3}:delay");
        assert_eq!(k.messages(3), "{dq:3}:msg");
        assert_eq!(k.ready(3, "orders"), "{dq:3}:ready:orders");
        assert_eq!(k.inflight(0), "{dq:0}:inflight");
        assert_eq!(k.epoch(7), "{dq:7}:epoch");
        assert_eq!(k.finished(2), "{dq:2}:finished");
        assert_eq!(k.unjournaled(2), "{dq:2}:unjournaled");
        assert_eq!(k.moved(2), "{dq:2}:moved");
        assert_eq!(k.moved_at(2), "{dq:2}:moved-at");
        assert_eq!(k.shard_count(), "{dq}:shards");
        assert_eq!(k.dataset_marker(), "{dq}:dataset");
        assert_eq!(k.restore_cursor(), "{dq}:restore");
        assert_eq!(k.wake_channel(5), "{dq:5}:wake");
        assert_eq!(k.worker_lease(9), "{dq}:worker:9");
    }

    #[test]
    fn shards_are_stable_and_even() {
        assert_eq!(shard_of(MessageId(1), 8), shard_of(MessageId(1), 8));
        let g = IdGenerator::new(1);
        let mut counts = [0u32; 8];
        for _ in 0..80_000 {
            counts[shard_of(g.next_id().unwrap(), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn score_orders_by_due_then_priority() {
        let now = 1_900_000_000_000;
        assert!(score(now, 255) < score(now, 0));
        assert!(score(now, 0) < score(now + 1, 255));
        assert!(score(now, 0) <= max_due_score(now) && score(now + 1, 255) > max_due_score(now));
        assert_eq!(due_of_score(score(now, 17)), now);
        assert_eq!(due_of_score(max_due_score(now)), now);
    }
}
