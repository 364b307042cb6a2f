//! The message: its fields, its status codes, its id, and the rules a
//! producer's input must pass before anything is written.

use serde::Serialize;
use serde_json::{Map, Value};

/// The cluster's clock (Redis's, as this node estimates it), epoch ms: what
/// every due time, deadline and status change is measured on (see
/// [`crate::clock`]).
pub fn now_ms() -> i64 {
    crate::clock::now_ms()
}

pub use crate::ids::{IdGenerator, MessageId, NoWorkerId, ID_PATTERN};
use crate::input::invalid;
pub use crate::input::{
    valid_topic, whole_number, Invalid, DEFAULT_TTL_MS, MAX_BIZ_KEY_LEN, MAX_DELAY_MS,
    MAX_TOPIC_LEN, MAX_TTL_MS, MIN_TTL_MS,
};
use crate::local::{self, Dst};
use crate::repeat::{parse_repeat, Occurrence, Repeat, Series};
use crate::retry::{parse_max_attempts, parse_policy, AfterFailure, RetryPolicy};
pub use delayq_proto::{ErrorCode, Message, MessageView, OnDuplicate, Status};

/// A recurring message moved on to its next occurrence: what it becomes
/// when the current occurrence is acked at `now` (the cluster's clock).
/// The next one follows the schedule; when that is already due the series
/// fell behind, and unless its misfire policy is `all` it goes on at its
/// first time after `now`.
pub fn next_occurrence(msg: &Message, now: i64) -> Option<Message> {
    let (repeat, occ) = (msg.repeat.as_ref()?, msg.occurrence?);
    let due = match repeat.next(occ.number, occ.due_time)? {
        due if due <= now && repeat.misfire_policy() != crate::repeat::Misfire::All => {
            repeat.next_after(occ.number, occ.due_time, now)?
        }
        due => due,
    };
    let mut next = msg.clone();
    next.due_time = due;
    next.occurrence = Some(Occurrence {
        number: occ.number + 1,
        due_time: due,
    });
    Some(next)
}

/// Names one delivery of a message: its attempt number and ack deadline
/// (unique per delivery: two deliveries of a message never share a
/// deadline), and for a recurring message the occurrence. Written
/// `ATTEMPTS-DEADLINE[-OCCURRENCE]`; clients treat it as opaque text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub attempts: i32,
    /// The delivery's ack deadline (epoch ms, Redis's clock).
    pub deadline: i64,
    pub occurrence: Option<i32>,
}

impl Receipt {
    /// What the scripts compare: `ATTEMPTS-DEADLINE`.
    pub fn delivery(&self) -> String {
        format!("{}-{}", self.attempts, self.deadline)
    }
}

impl std::fmt::Display for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.attempts, self.deadline)?;
        if let Some(o) = self.occurrence {
            write!(f, "-{o}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Receipt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || format!("{s:?} is not a receipt (ATTEMPTS-DEADLINE[-OCCURRENCE], as handed out)");
        let mut parts = s.split('-');
        let attempts: i32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let deadline: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let occurrence = match parts.next() {
            None => None,
            Some(p) => Some(p.parse::<i32>().ok().filter(|o| *o >= 1).ok_or_else(bad)?),
        };
        if parts.next().is_some() || attempts < 1 || deadline < 0 {
            return Err(bad());
        }
        Ok(Receipt {
            attempts,
            deadline,
            occurrence,
        })
    }
}

impl Serialize for Receipt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a producer asked for, checked but not yet given an id.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub topic: String,
    pub biz_key: Option<String>,
    pub group: Option<String>,
    pub body: String,
    pub priority: u8,
    pub ttl: i64,
    /// Either a delay from now or an absolute due time.
    pub when: When,
    pub max_attempts: i32,
    pub retry: Option<RetryPolicy>,
    pub repeat: Option<Repeat>,
    /// What it does to a live message holding its bizKey.
    pub on_duplicate: OnDuplicate,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum When {
    Delay(i64),
    /// `deliverAt`, epoch ms.
    At(i64),
    /// `deliverAtLocal` read in its zone, epoch ms.
    Local(i64),
}

impl When {
    /// The due time it gives at `now`: an instant past is due now.
    pub fn due(self, now: i64) -> i64 {
        match self {
            When::Delay(d) => now + d,
            When::At(at) | When::Local(at) => at.max(now),
        }
    }
}

impl Draft {
    /// Gives the draft its id and times. A `deliverAt` in the past is due
    /// now. A cron series starts at its first time at or after that.
    pub fn into_message(self, id: MessageId, now: i64) -> Message {
        let mut due_time = self.when.due(now);
        let occurrence = self.repeat.as_ref().map(|r| {
            due_time = r.first(due_time).unwrap_or(due_time);
            Occurrence {
                number: 1,
                due_time,
            }
        });
        Message {
            id,
            topic: self.topic,
            biz_key: self.biz_key,
            group: self.group,
            body: self.body,
            priority: self.priority,
            ttl: self.ttl,
            delay: due_time - now,
            create_time: now,
            due_time,
            max_attempts: self.max_attempts,
            retry: self.retry,
            repeat: self.repeat,
            occurrence,
        }
    }
}

/// An optional key of a message, `bizKey` or `group`: 1 to
/// [`MAX_BIZ_KEY_LEN`] characters, or `code`.
fn key_field(
    obj: &Map<String, Value>,
    name: &str,
    code: ErrorCode,
) -> Result<Option<String>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(k)) if !k.is_empty() && k.chars().count() <= MAX_BIZ_KEY_LEN => {
            Ok(Some(k.clone()))
        }
        Some(Value::String(_)) => Err(invalid(
            code,
            format!("{name} must be 1 to {MAX_BIZ_KEY_LEN} characters"),
        )),
        Some(other) => Err(invalid(
            code,
            format!("{name} must be a string, got {}", json_type(other)),
        )),
    }
}

const FIELDS: &[&str] = &[
    "topic",
    "bizKey",
    "group",
    "delay",
    "deliverAt",
    "deliverAtLocal",
    "tz",
    "dst",
    "priority",
    "onDuplicate",
    "ttl",
    "body",
    "maxAttempts",
    "retry",
    "repeat",
];

/// The fields that say when, as one choice: `delay` (ms from `now`),
/// `deliverAt` (epoch ms) or `deliverAtLocal` with `tz` and `dst` (a
/// wall-clock time in a zone, see [`crate::local`]); `None` when none is
/// given. Bounds are checked by the caller.
fn parse_when(obj: &Map<String, Value>) -> Result<Option<When>, Invalid> {
    let delay = int_field(obj, "delay")?;
    let at = int_field(obj, "deliverAt")?;
    let local = parse_local(obj)?;
    match (delay, at, local) {
        (None, None, None) => Ok(None),
        (Some(d), None, None) => Ok(Some(When::Delay(d))),
        (None, Some(at), None) => Ok(Some(When::At(at))),
        (None, None, Some(at)) => Ok(Some(When::Local(at))),
        _ => Err(invalid(
            ErrorCode::InvalidDelay,
            "give one of delay, deliverAt or deliverAtLocal, not two",
        )),
    }
}

/// `deliverAtLocal` read in `tz` under `dst`: the instant (epoch ms), or
/// `None` when none of the three is given.
fn parse_local(obj: &Map<String, Value>) -> Result<Option<i64>, Invalid> {
    let text = |name: &str| match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(invalid(
            ErrorCode::InvalidDelay,
            format!("{name} must be a string, got {}", json_type(other)),
        )),
    };
    let (wall, tz, dst) = (text("deliverAtLocal")?, text("tz")?, text("dst")?);
    let Some(wall) = wall else {
        if tz.is_some() || dst.is_some() {
            return Err(invalid(
                ErrorCode::InvalidDelay,
                "tz and dst go with deliverAtLocal (a series' zone is repeat.tz)",
            ));
        }
        return Ok(None);
    };
    let wall = local::parse_wall(wall)
        .map_err(|e| invalid(ErrorCode::InvalidDelay, format!("deliverAtLocal {e}")))?;
    let tz = tz.ok_or_else(|| {
        invalid(
            ErrorCode::InvalidDelay,
            "deliverAtLocal needs tz, an IANA time zone (e.g. Europe/Berlin)",
        )
    })?;
    let tz = local::zone(tz).map_err(|e| invalid(ErrorCode::InvalidDelay, format!("tz {e}")))?;
    let dst = match dst {
        None | Some("reject") => Dst::Reject,
        Some("earlier") => Dst::Earlier,
        Some("later") => Dst::Later,
        Some(other) => {
            return Err(invalid(
                ErrorCode::InvalidDelay,
                format!(
                    "dst must be \"reject\" (the default), \"earlier\" or \"later\", got {other:?}"
                ),
            ))
        }
    };
    local::resolve(wall, tz, dst)
        .map(Some)
        .map_err(|e| invalid(ErrorCode::InvalidDelay, local::explain(wall, tz, e)))
}

/// A due time from [`parse_when`], checked against its bounds: a delay of 0
/// to 10 years, an instant from the epoch to 10 years ahead (one past is
/// due now).
fn bounded(when: When, now: i64) -> Result<When, Invalid> {
    match when {
        When::Delay(d) if !(0..=MAX_DELAY_MS).contains(&d) => Err(invalid(
            ErrorCode::InvalidDelay,
            format!("delay must be 0 to {MAX_DELAY_MS} ms (10 years), got {d}"),
        )),
        When::At(at) if at < 0 || at > now + MAX_DELAY_MS => Err(invalid(
            ErrorCode::InvalidDelay,
            format!("deliverAt must be an epoch time in ms no more than 10 years ahead, got {at}"),
        )),
        When::Local(at) if at > now + MAX_DELAY_MS => Err(invalid(
            ErrorCode::InvalidDelay,
            "deliverAtLocal must be no more than 10 years ahead",
        )),
        w => Ok(w),
    }
}

/// A reschedule's new time and priority from its request: `delay` (ms
/// from `now`) or `deliverAt` (epoch ms; in the past means now), and/or
/// `priority`, checked as a push checks them. `None` keeps what the
/// message has; at least one is given.
pub fn parse_new_schedule(
    obj: &Map<String, Value>,
    now: i64,
) -> Result<(Option<i64>, Option<u8>), Invalid> {
    for name in ["delay", "deliverAt", "priority"] {
        if obj.get(name) == Some(&Value::Null) {
            let (code, range) = accepted(name);
            return Err(invalid(
                code,
                format!("{name} is null: give {range}, or leave {name} out to keep what the message has"),
            ));
        }
    }
    let due = match parse_when(obj)? {
        None => None,
        Some(w) => Some(bounded(w, now)?.due(now)),
    };
    let priority = match int_field(obj, "priority")? {
        None => None,
        Some(p) if (0..=255).contains(&p) => Some(p as u8),
        Some(p) => {
            return Err(invalid(
                ErrorCode::InvalidPriority,
                format!("priority must be 0 to 255, got {p}"),
            ))
        }
    };
    if due.is_none() && priority.is_none() {
        return Err(invalid(
            ErrorCode::InvalidDelay,
            "give the new time (delay, deliverAt or deliverAtLocal), the new priority, or both",
        ));
    }
    Ok((due, priority))
}

/// The code and the accepted values of a whole-number field, for the
/// refusal of a number that is not one (or too large to read).
fn accepted(name: &str) -> (ErrorCode, String) {
    match name {
        "delay" => (
            ErrorCode::InvalidDelay,
            format!("0 to {MAX_DELAY_MS} ms (10 years)"),
        ),
        "deliverAt" => (
            ErrorCode::InvalidDelay,
            "an epoch time in ms no more than 10 years ahead".into(),
        ),
        "priority" => (ErrorCode::InvalidPriority, "0 to 255".into()),
        "ttl" => (
            ErrorCode::InvalidTtl,
            format!("{MIN_TTL_MS} to {MAX_TTL_MS} ms"),
        ),
        _ => (ErrorCode::InvalidField, "a whole number".into()),
    }
}

fn int_field(obj: &Map<String, Value>, name: &str) -> Result<Option<i64>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => whole_number(v).map(Some).ok_or_else(|| {
            let (code, range) = accepted(name);
            if n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                // Whole, but beyond what a number here can be.
                invalid(code, format!("{name} must be {range}, got {n}"))
            } else {
                invalid(
                    ErrorCode::InvalidField,
                    format!("{name} must be a whole number, {range}, got {n}"),
                )
            }
        }),
        Some(other) => Err(invalid(
            ErrorCode::InvalidField,
            format!("{name} must be a number, got {}", json_type(other)),
        )),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks one pushed message (a JSON object) against the contract.
/// `max_body` is the largest body accepted, in bytes.
pub fn parse_draft(value: &Value, max_body: usize, now: i64) -> Result<Draft, Invalid> {
    let obj = value.as_object().ok_or_else(|| {
        invalid(
            ErrorCode::InvalidMessage,
            format!("a message must be a JSON object, got {}", json_type(value)),
        )
    })?;
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(
            ErrorCode::UnknownField,
            format!(
                "unknown field '{unknown}'; a message has {}",
                FIELDS.join(", ")
            ),
        ));
    }

    let topic = match obj.get("topic") {
        Some(Value::String(t)) => t.clone(),
        None | Some(Value::Null) => {
            return Err(invalid(ErrorCode::MissingTopic, "topic is required"))
        }
        Some(other) => {
            return Err(invalid(
                ErrorCode::InvalidTopic,
                format!("topic must be a string, got {}", json_type(other)),
            ))
        }
    };
    if !valid_topic(&topic) {
        return Err(invalid(
            ErrorCode::InvalidTopic,
            format!("topic must be 1 to {MAX_TOPIC_LEN} characters of A-Z a-z 0-9 . _ : -"),
        ));
    }

    let biz_key = key_field(obj, "bizKey", ErrorCode::InvalidBizKey)?;
    let group = key_field(obj, "group", ErrorCode::InvalidGroup)?;

    let when = match parse_when(obj)? {
        None => When::Delay(0),
        Some(w) => bounded(w, now)?,
    };

    let priority = match int_field(obj, "priority")? {
        None => 0,
        Some(p) if (0..=255).contains(&p) => p as u8,
        Some(p) => {
            return Err(invalid(
                ErrorCode::InvalidPriority,
                format!("priority must be 0 to 255, got {p}"),
            ))
        }
    };

    let ttl = match int_field(obj, "ttl")? {
        None => DEFAULT_TTL_MS,
        Some(t) if (MIN_TTL_MS..=MAX_TTL_MS).contains(&t) => t,
        Some(t) => {
            return Err(invalid(
                ErrorCode::InvalidTtl,
                format!("ttl must be {MIN_TTL_MS} to {MAX_TTL_MS} ms, got {t}"),
            ))
        }
    };

    let body = match obj.get("body") {
        Some(Value::String(b)) => b.clone(),
        None | Some(Value::Null) => {
            return Err(invalid(
                ErrorCode::MissingBody,
                "body is required (a string; JSON text is fine)",
            ))
        }
        Some(other) => {
            return Err(invalid(
                ErrorCode::InvalidBody,
                format!(
                    "body must be a string (send JSON as text), got {}",
                    json_type(other)
                ),
            ))
        }
    };
    if body.len() > max_body {
        return Err(invalid(
            ErrorCode::BodyTooLarge,
            format!("body is {} bytes; the limit is {max_body}", body.len()),
        ));
    }

    let on_duplicate = match obj.get("onDuplicate") {
        None | Some(Value::Null) => OnDuplicate::Keep,
        Some(Value::String(s)) if s == "keep" => OnDuplicate::Keep,
        Some(Value::String(s)) if s == "replace" => OnDuplicate::Replace,
        Some(Value::String(s)) if s == "extend" => OnDuplicate::Extend,
        Some(other) => {
            return Err(invalid(
                ErrorCode::InvalidField,
                format!("onDuplicate must be \"keep\" (the default), \"replace\" or \"extend\", got {other}"),
            ))
        }
    };
    if on_duplicate != OnDuplicate::Keep && biz_key.is_none() {
        return Err(invalid(
            ErrorCode::InvalidField,
            "onDuplicate says what a push does to the live message holding its bizKey: give bizKey too",
        ));
    }

    let max_attempts = parse_max_attempts(obj.get("maxAttempts"))?;
    let retry = parse_policy(obj.get("retry").unwrap_or(&Value::Null))?;
    let repeat = parse_repeat(obj.get("repeat").unwrap_or(&Value::Null), now)?;
    let when = match (&repeat, when) {
        // "every 20 minutes after the order": the first one interval on.
        (Some(Repeat { every: Some(e), .. }), When::Delay(0))
            if !obj.contains_key("delay") && !obj.contains_key("deliverAt") =>
        {
            When::Delay((*e).min(MAX_DELAY_MS))
        }
        (_, w) => w,
    };
    if let Some(r) = &repeat {
        let earliest = when.due(now);
        if r.first(earliest).is_none() {
            return Err(invalid(
                ErrorCode::InvalidRepeat,
                "the series has no occurrence: its cron never matches, or until is before the first one",
            ));
        }
    }

    Ok(Draft {
        topic,
        biz_key,
        group,
        body,
        priority,
        ttl,
        when,
        max_attempts,
        retry,
        repeat,
        on_duplicate,
    })
}

/// Where a failed delivery left a message, as a status.
impl AfterFailure {
    pub fn status(self) -> Status {
        match self {
            AfterFailure::Ready => Status::Ready,
            AfterFailure::Delaying { .. } => Status::Delaying,
            AfterFailure::Dead => Status::Dead,
            AfterFailure::Stopped => Status::Deleted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn parse(v: Value) -> Result<Draft, Invalid> {
        parse_draft(&v, 16, NOW)
    }

    #[test]
    fn status_codes_round_trip() {
        for code in 0..=6 {
            assert_eq!(Status::from_code(code).unwrap().code(), code);
        }
        assert_eq!(Status::from_code(7), None);
        assert!(Status::Consumed.is_terminal() && !Status::Consuming.is_terminal());
    }

    #[test]
    fn whole_numbers_with_or_without_a_point() {
        for (v, n) in [
            (json!(5), Some(5)),
            (json!(5.0), Some(5)),
            (json!(-0.0), Some(0)),
        ] {
            assert_eq!(whole_number(&v), n, "{v}");
        }
        for v in [
            json!(1.5),
            json!(1e300),
            json!("5"),
            json!(null),
            json!(u64::MAX),
        ] {
            assert_eq!(whole_number(&v), None, "{v}");
        }
        let d =
            parse(json!({"topic": "t", "body": "x", "delay": 1500.0, "priority": 7.0})).unwrap();
        assert_eq!((d.when, d.priority), (When::Delay(1500), 7));
    }

    #[test]
    fn ids_parse_only_positive_decimals() {
        assert_eq!("42".parse::<MessageId>(), Ok(MessageId(42)));
        for bad in ["", "0", "-1", "+4", "abc", "1.5", "99999999999999999999"] {
            assert!(bad.parse::<MessageId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_fields() {
        let d = parse(json!({"topic": "a.b:c-d_1", "body": "x"})).unwrap();
        assert_eq!(
            (d.priority, d.ttl, d.when),
            (0, DEFAULT_TTL_MS, When::Delay(0))
        );
        let d = parse(json!({"topic": "t", "body": "x", "deliverAt": NOW + 5, "priority": 255, "bizKey": "k"})).unwrap();
        assert_eq!(
            (d.priority, d.when, d.biz_key.as_deref()),
            (255, When::At(NOW + 5), Some("k"))
        );
        let m = d.into_message(MessageId(7), NOW);
        assert_eq!((m.due_time, m.delay), (NOW + 5, 5));
    }

    #[test]
    fn local_wall_clock_times_follow_their_dst_rule() {
        let berlin = |wall: &str, dst: Option<&str>| {
            let mut v =
                json!({"topic": "t", "body": "x", "deliverAtLocal": wall, "tz": "Europe/Berlin"});
            if let Some(d) = dst {
                v["dst"] = json!(d);
            }
            parse(v)
        };
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .timestamp_millis()
        };
        assert_eq!(
            berlin("2027-03-28T04:00:00", None).unwrap().when,
            When::Local(at("2027-03-28T04:00:00+02:00"))
        );
        // A gap: refused by default, the answer naming both readings.
        let e = berlin("2027-03-28T02:30:00", None).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidDelay);
        assert!(
            e.message.contains("does not exist in Europe/Berlin"),
            "{}",
            e.message
        );
        assert!(berlin("2027-03-28T02:30:00", Some("reject")).is_err());
        for (dst, want) in [
            ("earlier", "2027-03-28T01:30:00+01:00"),
            ("later", "2027-03-28T03:30:00+02:00"),
        ] {
            let d = berlin("2027-03-28T02:30:00", Some(dst)).unwrap();
            assert_eq!(d.when, When::Local(at(want)), "{dst}");
        }
        // A fold: refused by default; earlier is the first pass.
        let e = berlin("2027-10-31T02:30:00", None).unwrap_err();
        assert!(e.message.contains("happens twice"), "{}", e.message);
        for (dst, want) in [
            ("earlier", "2027-10-31T02:30:00+02:00"),
            ("later", "2027-10-31T02:30:00+01:00"),
        ] {
            let d = berlin("2027-10-31T02:30:00", Some(dst)).unwrap();
            assert_eq!(d.when, When::Local(at(want)), "{dst}");
        }
        // A local time past is due now, like deliverAt.
        let d = berlin("2020-01-01T00:00:00", None).unwrap();
        assert_eq!(d.into_message(MessageId(1), NOW).due_time, NOW);
        // What is refused, and why.
        for (bad, says) in [
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2027-03-28T04:00:00"}),
                "needs tz",
            ),
            (
                json!({"topic": "t", "body": "x", "tz": "Europe/Berlin"}),
                "go with deliverAtLocal",
            ),
            (
                json!({"topic": "t", "body": "x", "dst": "later"}),
                "go with deliverAtLocal",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2027-03-28T04:00:00", "tz": "Mars/Olympus"}),
                "not an IANA",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2027-03-28T04:00:00Z", "tz": "UTC"}),
                "carries an offset",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2027-03-28T04:00:00", "tz": "UTC", "dst": "first"}),
                "dst must be",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2027-03-28T04:00:00", "tz": "UTC", "delay": 5}),
                "not two",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": 5, "tz": "UTC"}),
                "must be a string",
            ),
            (
                json!({"topic": "t", "body": "x", "deliverAtLocal": "2099-01-01T00:00:00", "tz": "UTC"}),
                "10 years",
            ),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidDelay, "{bad}");
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn past_deliver_at_is_due_now() {
        let d = parse(json!({"topic": "t", "body": "", "deliverAt": NOW - 1000})).unwrap();
        let m = d.into_message(MessageId(1), NOW);
        assert_eq!((m.due_time, m.delay), (NOW, 0));
    }

    #[test]
    fn rejects_bad_input_with_codes() {
        let cases = [
            (json!([1]), "invalid_message"),
            (json!({"body": "x"}), "missing_topic"),
            (json!({"topic": "", "body": "x"}), "invalid_topic"),
            (json!({"topic": "a b", "body": "x"}), "invalid_topic"),
            (
                json!({"topic": "x".repeat(129), "body": "x"}),
                "invalid_topic",
            ),
            (
                json!({"topic": "t", "body": "x", "delay": -1}),
                "invalid_delay",
            ),
            (
                json!({"topic": "t", "body": "x", "delay": MAX_DELAY_MS + 1}),
                "invalid_delay",
            ),
            (
                json!({"topic": "t", "body": "x", "delay": 1.5}),
                "invalid_field",
            ),
            (
                json!({"topic": "t", "body": "x", "delay": 1, "deliverAt": NOW}),
                "invalid_delay",
            ),
            (
                json!({"topic": "t", "body": "x", "priority": 300}),
                "invalid_priority",
            ),
            (json!({"topic": "t", "body": "x", "ttl": 5}), "invalid_ttl"),
            (
                json!({"topic": "t", "body": "x".repeat(17)}),
                "body_too_large",
            ),
            (json!({"topic": "t", "body": {"a": 1}}), "invalid_body"),
            (json!({"topic": "t"}), "missing_body"),
            (
                json!({"topic": "t", "body": "x", "maxAttempts": 0}),
                "invalid_max_attempts",
            ),
            (
                json!({"topic": "t", "body": "x", "retry": {"backoff": "never"}}),
                "invalid_retry",
            ),
            (
                json!({"topic": "t", "body": "x", "bizKey": ""}),
                "invalid_biz_key",
            ),
            (
                json!({"topic": "t", "body": "x", "delay_ms": 5}),
                "unknown_field",
            ),
        ];
        for (input, code) in cases {
            assert_eq!(
                parse(input.clone()).unwrap_err().code.as_str(),
                code,
                "{input}"
            );
        }
    }
}
