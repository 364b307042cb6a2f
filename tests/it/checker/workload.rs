//! The clients: producers, cancellers, a rescheduler, a pauser and
//! consumers, each recording every operation in the history.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{json, Value};

use super::history::{now, CancelBy, Got, History, OnDuplicate, Pushed, Res, What};

/// The topics: the main one, one paused and resumed now and then, one
/// with a rate limit and a concurrency cap.
pub const MAIN: &str = "chk";
pub const PAUSED: &str = "pz";
pub const LIMITED: &str = "lim";
/// The limited topic's cap (`--topic-limit lim=…`).
pub const CAP: usize = 4;
/// Cancels and reschedules pick among this many of the latest pushes, so
/// most still wait when they arrive.
const RECENT: usize = 60;
/// One delivery in this many stalls past its ttl before its ack or nack.
const STALL_ONE_IN: u8 = 10;
/// Of a hundred messages pushed, this many push again on a recent bizKey
/// with `onDuplicate` (debounce).
const DEBOUNCE_PERCENT: u8 = 8;
/// Of a hundred messages of the main topic, this many belong to one of
/// [`GROUPS`] ordered groups (few, so their messages queue behind each
/// other).
const GROUP_PERCENT: u8 = 15;
const GROUPS: u8 = 6;

pub struct World {
    pub ports: RwLock<Vec<Option<u16>>>,
    pub history: History,
    /// The recurring series' own record (series.rs).
    pub series: super::series::Series,
    /// Stop pushing, cancelling, rescheduling and pausing.
    pub stop: AtomicBool,
    /// Consumers stop once this is set and a poll comes back empty.
    pub drained: AtomicBool,
    pub http: reqwest::Client,
    /// Recent pushes answered ok: (id, topic, bizKey).
    recent: Mutex<VecDeque<(String, String, Option<String>)>>,
    pub seed: u64,
}

impl World {
    pub fn new(seed: u64) -> World {
        World {
            ports: RwLock::new(Vec::new()),
            history: History::default(),
            series: Default::default(),
            stop: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            recent: Mutex::default(),
            seed,
        }
    }

    pub fn port(&self, pick: usize) -> Option<u16> {
        let ports = self.ports.read().unwrap();
        let live: Vec<u16> = ports.iter().flatten().copied().collect();
        (!live.is_empty()).then(|| live[pick % live.len()])
    }

    /// Sends a request: the status and JSON body, or None (no answer).
    pub async fn call(&self, req: reqwest::RequestBuilder) -> Option<(u16, Value)> {
        let r = req.send().await.ok()?;
        let status = r.status().as_u16();
        let v = r.json::<Value>().await.unwrap_or(Value::Null);
        Some((status, v))
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn remember(&self, id: String, topic: String, key: Option<String>) {
        let mut recent = self.recent.lock().unwrap();
        recent.push_back((id, topic, key));
        if recent.len() > RECENT {
            recent.pop_front();
        }
    }

    fn pick_recent(&self, rng: &mut fastrand::Rng) -> Option<(String, String, Option<String>)> {
        let recent = self.recent.lock().unwrap();
        (!recent.is_empty()).then(|| recent[rng.usize(..recent.len())].clone())
    }

    /// The topic and bizKey of a recent push answered ok that had one.
    fn pick_recent_key(&self, rng: &mut fastrand::Rng) -> Option<(String, String)> {
        let recent = self.recent.lock().unwrap();
        let keyed: Vec<(&String, &String)> = recent
            .iter()
            .filter_map(|(_, topic, key)| Some((topic, key.as_ref()?)))
            .collect();
        (!keyed.is_empty()).then(|| {
            let (topic, key) = keyed[rng.usize(..keyed.len())];
            (topic.clone(), key.clone())
        })
    }
}

/// Pushes (one at a time or in batches, with a bizKey or without) to the
/// three topics; a tenth of them are followed by a cancel of a recent
/// message, by id, by bizKey or by bizKey prefix. Some messages
/// ([`DEBOUNCE_PERCENT`]) push again on the bizKey of a recent push
/// answered ok, with `onDuplicate` `replace` (a new body, a new delay) or
/// `extend` (a new delay); every body is new, so a delivered body names
/// the push or replace it came from.
pub async fn producer(w: Arc<World>, me: u64) {
    let mut rng = fastrand::Rng::with_seed(w.seed * 1_000 + me);
    let mut n = 0u64;
    while !w.stopping() {
        let Some(port) = w.port(rng.usize(..)) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let count = if rng.u8(..3) == 0 {
            1
        } else {
            rng.usize(2..=8)
        };
        let msgs: Vec<Pushed> = (0..count)
            .map(|_| {
                n += 1;
                let body = format!("b{}-{me}-{n}", w.seed);
                let delay = rng.i64(0..3_000);
                if rng.u8(..100) < DEBOUNCE_PERCENT {
                    if let Some((topic, key)) = w.pick_recent_key(&mut rng) {
                        let mode = if rng.bool() {
                            OnDuplicate::Replace
                        } else {
                            OnDuplicate::Extend
                        };
                        return Pushed {
                            id: None,
                            topic,
                            body,
                            delay,
                            biz_key: Some(key),
                            duplicate: false,
                            on_duplicate: Some(mode),
                            result: None,
                            due_time: None,
                            group: None,
                        };
                    }
                }
                let topic = match rng.u8(..10) {
                    0 => PAUSED,
                    1 => LIMITED,
                    _ => MAIN,
                };
                let group = (topic == MAIN && rng.u8(..100) < GROUP_PERCENT)
                    .then(|| format!("g{}-{}", w.seed, rng.u8(..GROUPS)));
                Pushed {
                    id: None,
                    topic: topic.to_string(),
                    body,
                    delay,
                    biz_key: rng.bool().then(|| format!("k{}-{me}-{n}", w.seed)),
                    duplicate: false,
                    on_duplicate: None,
                    result: None,
                    due_time: None,
                    group,
                }
            })
            .collect();
        let wire = |p: &Pushed, ttl: i64| {
            let mut m = json!({
                "topic": p.topic, "body": p.body, "delay": p.delay,
                "ttl": ttl, "maxAttempts": 1000,
            });
            if let Some(k) = &p.biz_key {
                m["bizKey"] = json!(k);
            }
            if let Some(mode) = p.on_duplicate {
                m["onDuplicate"] = json!(mode.name());
            }
            if let Some(g) = &p.group {
                m["group"] = json!(g);
            }
            m
        };
        let ttls: Vec<i64> = msgs.iter().map(|_| rng.i64(1_000..3_000)).collect();
        let invoke = now();
        let (req, single) = if count == 1 {
            let body = wire(&msgs[0], ttls[0]);
            (
                w.http
                    .post(format!("http://127.0.0.1:{port}/push"))
                    .json(&body),
                true,
            )
        } else {
            let batch: Vec<Value> = msgs.iter().zip(&ttls).map(|(p, t)| wire(p, *t)).collect();
            (
                w.http
                    .post(format!("http://127.0.0.1:{port}/push/batch"))
                    .json(&json!({ "messages": batch })),
                false,
            )
        };
        let answer = w.call(req).await;
        let res = Res::of(answer.as_ref().map(|(s, _)| *s));
        let mut msgs = msgs;
        if let (Res::Ok, Some((_, v))) = (res, &answer) {
            let ids: Vec<String> = if single {
                vec![v["id"].as_str().unwrap_or_default().to_string()]
            } else {
                v["ids"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|i| i.as_str().unwrap_or_default().to_string())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let dups: Vec<usize> = if single {
                if v["duplicate"] == true {
                    vec![0]
                } else {
                    vec![]
                }
            } else {
                v["duplicates"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|d| d.as_u64())
                            .map(|d| d as usize)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            // What a push with onDuplicate did to the live message:
            // index → (result, dueTime).
            let updates: Vec<(usize, String, Option<i64>)> = if single {
                v["result"]
                    .as_str()
                    .map(|r| (0, r.to_string(), v["dueTime"].as_i64()))
                    .into_iter()
                    .collect()
            } else {
                v["updates"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|u| {
                        Some((
                            u["index"].as_u64()? as usize,
                            u["result"].as_str()?.to_string(),
                            u["dueTime"].as_i64(),
                        ))
                    })
                    .collect()
            };
            for (i, (p, id)) in msgs.iter_mut().zip(ids).enumerate() {
                p.duplicate = dups.contains(&i);
                if let Some((_, result, due)) = updates.iter().find(|u| u.0 == i) {
                    p.result = Some(result.clone());
                    p.due_time = *due;
                }
                if !p.duplicate {
                    w.remember(id.clone(), p.topic.clone(), p.biz_key.clone());
                }
                p.id = Some(id);
            }
        }
        w.history.op(invoke, res, port, What::Push { msgs });
        // A tenth of pushes: a cancel of a recent message.
        if rng.u8(..10) == 0 {
            if let (Some((id, topic, key)), Some(port)) =
                (w.pick_recent(&mut rng), w.port(rng.usize(..)))
            {
                let by = [By::Id, By::Key, By::Prefix][rng.usize(..3)];
                cancel(&w, port, id, topic, key, by).await;
            }
        }
        // Now and then, a reschedule of a recent message.
        if rng.u8(..20) == 0 {
            if let (Some((id, _, _)), Some(port)) = (w.pick_recent(&mut rng), w.port(rng.usize(..)))
            {
                reschedule(&w, port, id, rng.i64(0..3_000)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(10..60))).await;
    }
}

/// How a cancel names what it cancels.
#[derive(Clone, Copy, PartialEq)]
enum By {
    Id,
    Key,
    /// The message's bizKey as a prefix: it, and the keys that go on from
    /// it (`k…-12` names `k…-120` to `k…-129` too).
    Prefix,
}

async fn cancel(w: &World, port: u16, id: String, topic: String, key: Option<String>, by: By) {
    let invoke = now();
    let (req, by) = match key {
        Some(key) if by == By::Key => (
            w.http
                .post(format!("http://127.0.0.1:{port}/cancel"))
                .json(&json!({"topic": topic, "bizKey": key})),
            CancelBy::BizKey { topic, key },
        ),
        Some(prefix) if by == By::Prefix => (
            w.http
                .post(format!("http://127.0.0.1:{port}/cancel"))
                .json(&json!({"topic": topic, "bizKeyPrefix": prefix})),
            CancelBy::Prefix { topic, prefix },
        ),
        _ => (
            w.http
                .get(format!("http://127.0.0.1:{port}/delete?id={id}")),
            CancelBy::Id(id),
        ),
    };
    let answer = w.call(req).await;
    // A 404 of an unknown id is a definite answer too.
    let res = Res::of(answer.as_ref().map(|(s, _)| *s));
    let mut deleted = Vec::new();
    let mut counted = None;
    if let Some((200, v)) = &answer {
        counted = v["results"]["deleted"].as_u64();
        if v["result"] == "deleted" {
            deleted.push(v["id"].as_str().unwrap_or_default().to_string());
        }
        for r in v["results"].as_array().into_iter().flatten() {
            if r["result"] == "deleted" {
                deleted.push(r["id"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    w.history.op(
        invoke,
        res,
        port,
        What::Cancel {
            by,
            deleted,
            counted,
        },
    );
}

async fn reschedule(w: &World, port: u16, id: String, delay: i64) {
    let invoke = now();
    let req = w
        .http
        .post(format!("http://127.0.0.1:{port}/reschedule"))
        .json(&json!({"ids": [id], "delay": delay}));
    let answer = w.call(req).await;
    let res = Res::of(answer.as_ref().map(|(s, _)| *s));
    let rescheduled =
        matches!(&answer, Some((200, v)) if v["results"][0]["result"] == "rescheduled");
    w.history.op(
        invoke,
        res,
        port,
        What::Reschedule {
            id,
            delay,
            rescheduled,
        },
    );
}

/// Pauses the paused topic for a second or two every few seconds.
pub async fn pauser(w: Arc<World>) {
    let mut rng = fastrand::Rng::with_seed(w.seed * 17);
    while !w.stopping() {
        tokio::time::sleep(Duration::from_millis(rng.u64(2_000..5_000))).await;
        for pause in [true, false] {
            // A resume is sent until it is answered, so the topic is
            // not left paused.
            loop {
                let Some(port) = w.port(rng.usize(..)) else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let verb = if pause { "pause" } else { "resume" };
                let invoke = now();
                let answer = w
                    .call(
                        w.http
                            .post(format!("http://127.0.0.1:{port}/topics/{PAUSED}/{verb}")),
                    )
                    .await;
                let res = Res::of(answer.as_ref().map(|(s, _)| *s));
                let topic = PAUSED.to_string();
                let what = if pause {
                    What::Pause { topic }
                } else {
                    What::Resume { topic }
                };
                w.history.op(invoke, res, port, what);
                if res == Res::Ok || pause {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if pause {
                tokio::time::sleep(Duration::from_millis(rng.u64(500..2_000))).await;
            }
        }
    }
}

/// Polls `topic`; acks each message with its receipt (alone, or in its
/// next poll), nacks some, and now and then stalls past the ttl and then
/// acks or nacks with its old receipt.
pub async fn consumer(w: Arc<World>, me: usize, topic: &'static str) {
    let mut rng = fastrand::Rng::with_seed(w.seed * 31 + me as u64);
    let in_poll = me % 2 == 1;
    let mut carried: Vec<(String, String)> = Vec::new();
    loop {
        let Some(port) = w.port(rng.usize(..)) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let draining = w.drained.load(Ordering::Acquire);
        let acks = std::mem::take(&mut carried);
        let req = if !acks.is_empty() {
            let ack: Vec<Value> = acks
                .iter()
                .map(|(id, r)| json!({"id": id, "receipt": r}))
                .collect();
            w.http
                .post(format!("http://127.0.0.1:{port}/get/{topic}"))
                .json(&json!({"ack": ack, "count": 10, "timeout": 1}))
        } else {
            w.http.get(format!(
                "http://127.0.0.1:{port}/get/{topic}?count=10&timeout=1"
            ))
        };
        let invoke = now();
        let answer = w.call(req).await;
        let res = Res::of(answer.as_ref().map(|(s, _)| *s));
        let v = match &answer {
            Some((200, v)) => v.clone(),
            _ => Value::Null,
        };
        let results = v["results"].as_array().cloned().unwrap_or_default();
        let acked: Vec<(String, String, bool)> = acks
            .iter()
            .enumerate()
            .map(|(i, (id, r))| {
                let consumed = results.get(i).is_some_and(|x| x["result"] == "consumed");
                (id.clone(), r.clone(), consumed)
            })
            .collect();
        let got: Vec<Got> = v["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| Got {
                id: m["id"].as_str().unwrap_or_default().to_string(),
                topic: m["topic"].as_str().unwrap_or_default().to_string(),
                body: m["body"].as_str().unwrap_or_default().to_string(),
                receipt: m["receipt"].as_str().unwrap_or_default().to_string(),
                ttl: m["ttl"].as_i64().unwrap_or(0),
                group: m["group"].as_str().map(str::to_string),
            })
            .collect();
        w.history.op(
            invoke,
            res,
            port,
            What::Poll {
                consumer: me,
                topic: topic.to_string(),
                got: got.clone(),
                acks: acked,
            },
        );
        if res != Res::Ok {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if got.is_empty() && draining {
            return;
        }
        for g in got {
            let roll = rng.u8(..20);
            if roll < 20 / STALL_ONE_IN && !draining {
                // Stalls past the ttl, then comes back with its receipt.
                let w2 = w.clone();
                let nack = rng.bool();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(g.ttl as u64 + 300)).await;
                    settle(&w2, port, &g.id, &g.receipt, nack).await;
                });
            } else if roll == 19 && !draining {
                // One in twenty: a nack at once.
                settle(&w, port, &g.id, &g.receipt, true).await;
            } else if in_poll {
                carried.push((g.id, g.receipt));
            } else {
                settle(&w, port, &g.id, &g.receipt, false).await;
            }
        }
    }
}

/// Acks (or nacks, at once) one delivery with its receipt.
async fn settle(w: &World, port: u16, id: &str, receipt: &str, nack: bool) {
    let url = if nack {
        format!("http://127.0.0.1:{port}/nack/{id}?receipt={receipt}&delay=0")
    } else {
        format!("http://127.0.0.1:{port}/ack/{id}?receipt={receipt}")
    };
    let invoke = now();
    let answer = w.call(w.http.post(url)).await;
    let res = Res::of(answer.as_ref().map(|(s, _)| *s));
    let what = if nack {
        What::Nack {
            id: id.to_string(),
            receipt: receipt.to_string(),
        }
    } else {
        What::Ack {
            id: id.to_string(),
            receipt: receipt.to_string(),
            consumed: matches!(&answer, Some((200, v)) if v["status"] == "Consumed"),
        }
    };
    w.history.op(invoke, res, port, what);
}
