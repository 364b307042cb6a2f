//! Recurring messages: `repeat` on a push, and when each occurrence is due.
//!
//! A recurring message keeps one id for its whole series. Its occurrences
//! are delivered one after another: occurrence `n` is due at its own time,
//! is handed out, and when it is acked the message moves on to occurrence
//! `n + 1` (or ends its series, `Consumed`). The due time of the next
//! occurrence is a pure function of the series and the current occurrence's
//! nominal due time ([`Repeat::next`]), so the journal row (series, current
//! occurrence, its due time) is the whole durable state: a crash at any
//! point redelivers the current occurrence at worst, and never skips one or
//! starts a second copy of the series.
//!
//! - `{"every": ms}`: every `ms` after the first occurrence (due as pushed;
//!   without `delay` or `deliverAt`, one interval after the push), anchored
//!   to the schedule, so a late ack does not shift later occurrences;
//! - `{"cron": "…", "tz": "Area/City"}`: 5-field (minutes) or 6-field
//!   (seconds first) cron in an IANA zone (UTC by default). It names
//!   wall-clock times and each is delivered once across daylight-saving
//!   changes: a named time the clock jumps over comes as much later as the
//!   jump (02:30 as 03:30 +02:00 in Berlin's spring), one the clock passes
//!   twice comes on its first pass, and two named times that come to one
//!   instant are delivered once there ([`crate::local`]);
//! - `times` (occurrences in all) and `until` (epoch ms: no occurrence after
//!   it) end a series; without either it runs until cancelled.
//! - `misfire` says what happens to occurrences missed while nothing
//!   delivered them (the cluster down, a consumer away): an occurrence is
//!   *missed* when the one after it is due before it is handed out.
//!   `one` (the default): the occurrence waiting when the series fell
//!   behind is delivered, late, as its one catch-up, and the series goes on
//!   at its first time in the future. `all`: every missed occurrence is
//!   delivered, back to back (due times follow the schedule). `skip`: a
//!   missed occurrence is not delivered at all; the series goes on at its
//!   first time in the future. Skipped occurrences are not counted:
//!   occurrence numbers and `times` count the occurrences delivered.

use std::str::FromStr;

use croner::parser::{CronParser, Seconds};
use serde_json::{Map, Value};

use crate::input::{whole_number, Invalid, MAX_DELAY_MS, MIN_TTL_MS};
use delayq_proto::ErrorCode;
pub use delayq_proto::{Misfire, Occurrence, Repeat};

/// Shortest `every`.
pub const MIN_EVERY_MS: i64 = MIN_TTL_MS;
pub const MAX_TIMES: i64 = 1_000_000_000;
pub const MAX_CRON_LEN: usize = 128;

/// The fields of `repeat` a push takes (the OpenAPI document's
/// `RepeatRequest` lists the same: a test in api::docs checks).
pub const FIELDS: &[&str] = &["every", "cron", "tz", "times", "until", "misfire"];

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid {
        code: ErrorCode::InvalidRepeat,
        message: message.into(),
    }
}

/// Each number of a cron expression within its field's range, said in a
/// person's words ("the hour field is 25; hours are 0 to 23") where the
/// parser would say "Number out of bounds". Steps (after `/`) and names
/// (`JAN`, `MON`) are left to the parser.
fn cron_fields_in_range(expr: &str) -> Result<(), String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: &[(&str, &str, u32, u32)] = &[
        ("second", "seconds", 0, 59),
        ("minute", "minutes", 0, 59),
        ("hour", "hours", 0, 23),
        ("day", "days of the month", 1, 31),
        ("month", "months", 1, 12),
        ("weekday", "weekdays", 0, 7),
    ];
    let names = if fields.len() == 6 {
        names
    } else {
        &names[1..]
    };
    for (field, (name, plural, lo, hi)) in fields.iter().zip(names) {
        for part in field.split(',') {
            let range = part.split('/').next().unwrap_or_default();
            for n in range.split('-').filter_map(|n| n.parse::<u64>().ok()) {
                if n < u64::from(*lo) || n > u64::from(*hi) {
                    return Err(format!(
                        "the {name} field is {n}; {plural} are {lo} to {hi}"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn cron_parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
}

fn zone(tz: Option<&str>) -> Result<chrono_tz::Tz, String> {
    match tz {
        None => Ok(chrono_tz::UTC),
        Some(name) => chrono_tz::Tz::from_str(name).map_err(|_| {
            format!("repeat.tz {name:?} is not an IANA time zone (e.g. Asia/Shanghai)")
        }),
    }
}

/// The first cron time after `at` (ms), or at it when `inclusive`, when
/// the series is cron: the wall-clock times it names, each once, across
/// daylight-saving changes as [`crate::local`] says.
fn cron_after(r: &Repeat, at: i64, inclusive: bool) -> Option<i64> {
    let expr = r.cron.as_deref()?;
    // Parsed per use (microseconds, once per occurrence): nothing is
    // kept in memory per message.
    let cron = cron_parser().parse(expr).ok()?;
    let tz = zone(r.tz.as_deref()).ok()?;
    crate::local::next_wall_time(&cron, tz, at, inclusive)
}

fn within(r: &Repeat, number: i64, t: i64) -> Option<i64> {
    if r.times.is_some_and(|n| number > n) || r.until.is_some_and(|u| t > u) {
        None
    } else {
        Some(t)
    }
}

/// When a series' occurrences are due: the rules of [`Repeat`].
pub trait Series {
    /// When the first occurrence is due, given the earliest time the push
    /// allows (`earliest`, ms); `None` when the series has none.
    fn first(&self, earliest: i64) -> Option<i64>;
    /// When occurrence `number + 1` is due, after occurrence `number` due at
    /// `at` (ms); `None` when the series ends with occurrence `number`.
    fn next(&self, number: i32, at: i64) -> Option<i64>;
    /// The first time of the schedule after both `at` (a time of the
    /// schedule) and `now` (ms), for occurrence `number + 1`: what a series
    /// that fell behind goes on with. `None` when the series ends first.
    fn next_after(&self, number: i32, at: i64, now: i64) -> Option<i64>;
}

impl Series for Repeat {
    fn first(&self, earliest: i64) -> Option<i64> {
        let t = match self.every {
            Some(_) => earliest,
            None => cron_after(self, earliest, true)?,
        };
        within(self, 1, t)
    }

    fn next(&self, number: i32, at: i64) -> Option<i64> {
        let t = match self.every {
            Some(every) => at.checked_add(every)?,
            None => cron_after(self, at, false)?,
        };
        within(self, number as i64 + 1, t)
    }

    fn next_after(&self, number: i32, at: i64, now: i64) -> Option<i64> {
        let t = match self.every {
            Some(every) if now >= at => {
                let steps = (now - at) / every + 1;
                at.checked_add(steps.checked_mul(every)?)?
            }
            Some(every) => at.checked_add(every)?,
            None => cron_after(self, at.max(now), false)?,
        };
        within(self, number as i64 + 1, t)
    }
}

fn int(obj: &Map<String, Value>, name: &str) -> Result<Option<i64>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(v)
            .map(Some)
            .ok_or_else(|| invalid(format!("repeat.{name} must be a whole number, got {v}"))),
    }
}

fn string<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, Invalid> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(invalid(format!("repeat.{name} must be a string, got {v}"))),
    }
}

/// Checks `repeat` on a push. `now` bounds `until`.
pub fn parse_repeat(value: &Value, now: i64) -> Result<Option<Repeat>, Invalid> {
    let obj = match value {
        Value::Null => return Ok(None),
        Value::Object(obj) => obj,
        _ => return Err(invalid(
            "repeat must be an object: {\"every\": ms} or {\"cron\": \"…\", \"tz\": \"Area/City\"}, with \"times\" or \"until\" optional",
        )),
    };
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "unknown field 'repeat.{k}'; repeat has {}",
            FIELDS.join(", ")
        )));
    }
    let every = int(obj, "every")?;
    let cron = string(obj, "cron")?;
    let tz = string(obj, "tz")?;
    let times = int(obj, "times")?;
    let until = int(obj, "until")?;
    let misfire = match string(obj, "misfire")? {
        None => None,
        Some("one") => Some(Misfire::One),
        Some("all") => Some(Misfire::All),
        Some("skip") => Some(Misfire::Skip),
        Some(other) => {
            return Err(invalid(format!(
                "repeat.misfire must be \"one\", \"all\" or \"skip\", got {other:?}"
            )))
        }
    };
    match (every, cron) {
        (Some(_), Some(_)) => return Err(invalid("give repeat.every or repeat.cron, not both")),
        (None, None) => return Err(invalid("repeat needs every (ms) or cron")),
        (Some(e), None) if !(MIN_EVERY_MS..=MAX_DELAY_MS).contains(&e) => {
            return Err(invalid(format!(
                "repeat.every must be {MIN_EVERY_MS} to {MAX_DELAY_MS} ms, got {e}"
            )))
        }
        (Some(_), None) if tz.is_some() => {
            return Err(invalid("repeat.tz goes with repeat.cron, not every"))
        }
        (None, Some(expr)) => {
            if expr.len() > MAX_CRON_LEN {
                return Err(invalid(format!(
                    "repeat.cron is longer than {MAX_CRON_LEN} characters"
                )));
            }
            let fields = expr.split_whitespace().count();
            if !(fields == 5 || fields == 6) {
                return Err(invalid(format!(
                    "repeat.cron must have 5 fields (minute hour day month weekday) or 6 (seconds first), got {fields}"
                )));
            }
            cron_fields_in_range(expr)
                .map_err(|e| invalid(format!("repeat.cron {expr:?}: {e}")))?;
            if let Err(e) = cron_parser().parse(expr) {
                let why = match e {
                    croner::errors::CronError::ComponentError(m)
                    | croner::errors::CronError::InvalidPattern(m)
                    | croner::errors::CronError::IllegalCharacters(m) => m,
                    other => other.to_string(),
                };
                return Err(invalid(format!(
                    "repeat.cron {expr:?} is not valid: {why} (fields: [second] minute hour day month weekday)"
                )));
            }
            zone(tz).map_err(invalid)?;
        }
        _ => {}
    }
    if let Some(n) = times {
        if !(1..=MAX_TIMES).contains(&n) {
            return Err(invalid(format!(
                "repeat.times must be 1 to {MAX_TIMES}, got {n}"
            )));
        }
    }
    if let Some(u) = until {
        if u < now || u > now.saturating_add(10 * MAX_DELAY_MS) {
            return Err(invalid(format!(
                "repeat.until must be an epoch time in ms from now to 100 years ahead, got {u}"
            )));
        }
    }
    Ok(Some(Repeat {
        every,
        cron: cron.map(|c| c.trim().to_string()),
        tz: tz.map(str::to_string),
        times,
        until,
        misfire,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn ms(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, tz: &str) -> i64 {
        let tz = chrono_tz::Tz::from_str(tz).unwrap();
        tz.with_ymd_and_hms(y, mo, d, h, mi, s)
            .earliest()
            .unwrap()
            .timestamp_millis()
    }

    fn repeat(v: Value) -> Repeat {
        parse_repeat(&v, NOW).unwrap().unwrap()
    }

    #[test]
    fn missed_occurrences_follow_the_misfire_policy() {
        let r = repeat(json!({"every": 1000}));
        // Occurrence 3 was due at NOW; it is acked 5.5 s later.
        assert_eq!(r.next_after(3, NOW, NOW + 5_500), Some(NOW + 6_000));
        assert_eq!(r.next_after(3, NOW, NOW + 500), Some(NOW + 1_000));
        assert_eq!(r.misfire_policy(), Misfire::One);
        let r = repeat(json!({"every": 1000, "until": NOW + 5_000, "misfire": "skip"}));
        assert_eq!(r.next_after(3, NOW, NOW + 5_500), None);
        assert_eq!(r.misfire_policy(), Misfire::Skip);
        let c = repeat(json!({"cron": "0 * * * * *", "misfire": "all"}));
        assert_eq!(c.misfire_policy(), Misfire::All);
        let at = ms(2027, 3, 1, 9, 5, 0, "UTC");
        assert_eq!(
            c.next_after(1, at, at + 150_000),
            Some(ms(2027, 3, 1, 9, 8, 0, "UTC"))
        );
        assert!(parse_repeat(&json!({"every": 1000, "misfire": "some"}), NOW).is_err());
    }

    #[test]
    fn every_is_anchored_to_the_schedule() {
        let r = repeat(json!({"every": 1000, "times": 3}));
        assert_eq!(r.first(NOW), Some(NOW));
        assert_eq!(r.next(1, NOW), Some(NOW + 1000));
        assert_eq!(r.next(2, NOW + 1000), Some(NOW + 2000));
        assert_eq!(r.next(3, NOW + 2000), None);
        let r = repeat(json!({"every": 1000, "until": NOW + 2500}));
        assert_eq!(r.next(2, NOW + 1000), Some(NOW + 2000));
        assert_eq!(r.next(3, NOW + 2000), None);
        let r = repeat(json!({"every": 60000}));
        assert_eq!(r.next(1_000_000, NOW), Some(NOW + 60000));
    }

    #[test]
    fn cron_numbers_out_of_range_are_named() {
        let e = parse_repeat(&json!({"cron": "0 25 * * *"}), NOW)
            .unwrap_err()
            .message;
        assert!(e.contains("the hour field is 25; hours are 0 to 23"), "{e}");
        let e = parse_repeat(&json!({"cron": "61 * * * * *"}), NOW)
            .unwrap_err()
            .message;
        assert!(e.contains("the second field is 61"), "{e}");
        let e = parse_repeat(&json!({"cron": "0 0 1-32 * *"}), NOW)
            .unwrap_err()
            .message;
        assert!(e.contains("the day field is 32"), "{e}");
        assert!(parse_repeat(&json!({"cron": "0 9 * JAN-MAR MON-FRI"}), NOW).is_ok());
        for good in ["0 9 * * *", "0 9 * * 7", "*/15 0-23 1,15 1-12 0-6"] {
            assert!(parse_repeat(&json!({"cron": good}), NOW).is_ok(), "{good}");
        }
    }

    #[test]
    fn cron_five_and_six_fields_in_a_zone() {
        // Every 20 minutes, Shanghai (UTC+8, no DST).
        let r = repeat(json!({"cron": "*/20 * * * *", "tz": "Asia/Shanghai"}));
        let start = ms(2027, 3, 1, 9, 5, 0, "Asia/Shanghai");
        let first = r.first(start).unwrap();
        assert_eq!(first, ms(2027, 3, 1, 9, 20, 0, "Asia/Shanghai"));
        assert_eq!(
            r.next(1, first),
            Some(ms(2027, 3, 1, 9, 40, 0, "Asia/Shanghai"))
        );
        // Seconds first; an occurrence exactly at the start counts.
        let r = repeat(json!({"cron": "*/2 * * * * *", "times": 2}));
        let t = ms(2027, 1, 1, 0, 0, 4, "UTC");
        assert_eq!(r.first(t), Some(t));
        assert_eq!(r.next(1, t), Some(t + 2000));
        assert_eq!(r.next(2, t + 2000), None);
        // Never before the time it is asked from: a push 803 ms into a
        // second of an every-second series is first due at the next one,
        // and one 30 s into a minute of an every-minute series at the next.
        let r = repeat(json!({"cron": "* * * * * *"}));
        assert_eq!(r.first(t + 803), Some(t + 1000));
        let r = repeat(json!({"cron": "* * * * *"}));
        let m = ms(2027, 1, 1, 0, 1, 0, "UTC");
        assert_eq!(r.first(m + 30_000), Some(m + 60_000));
        assert_eq!(r.first(m), Some(m));
    }

    #[test]
    fn cron_across_daylight_saving_time() {
        // New York springs forward on 2027-03-14: 02:30 does not exist and
        // comes as much later as the jump, 03:30 EDT, once.
        let r = repeat(json!({"cron": "30 2 * * *", "tz": "America/New_York"}));
        let before = ms(2027, 3, 13, 2, 30, 0, "America/New_York");
        let next = r.next(1, before).unwrap();
        assert_eq!(next, ms(2027, 3, 14, 3, 30, 0, "America/New_York"));
        assert_eq!(
            r.next(2, next),
            Some(ms(2027, 3, 15, 2, 30, 0, "America/New_York"))
        );
        // It falls back on 2027-11-07: 01:30 happens twice, runs once.
        let r = repeat(json!({"cron": "30 1 * * *", "tz": "America/New_York"}));
        let day = 24 * 3600 * 1000;
        let sat = ms(2027, 11, 6, 1, 30, 0, "America/New_York");
        let sun = r.next(1, sat).unwrap();
        let mon = r.next(2, sun).unwrap();
        assert_eq!(sun - sat, day);
        assert_eq!(mon - sun, day + 3600 * 1000);
        // Hourly: the hour the clock passes twice is delivered once, on
        // its first pass, and the hour after follows it by two hours.
        let r = repeat(json!({"cron": "0 * * * *", "tz": "America/New_York"}));
        let first = ms(2027, 11, 7, 1, 0, 0, "America/New_York");
        let second = r.next(1, first).unwrap();
        assert_eq!(second - first, 2 * 3600 * 1000);
        // A range naming the hour the clock jumps over: 02:30 comes at 03:30,
        // and so does 03:30 itself: one delivery there, none skipped.
        let r = repeat(json!({"cron": "30 1-3 * * *", "tz": "America/New_York"}));
        let t = ms(2027, 3, 14, 1, 30, 0, "America/New_York");
        let next = r.next(1, t).unwrap();
        assert_eq!(next, ms(2027, 3, 14, 3, 30, 0, "America/New_York"));
        assert_eq!(
            r.next(2, next),
            Some(ms(2027, 3, 15, 1, 30, 0, "America/New_York"))
        );
        // Zones follow their rules: noon in Berlin is 11:00 UTC in winter.
        let r = repeat(json!({"cron": "0 0 12 * * *", "tz": "Europe/Berlin"}));
        assert_eq!(
            r.first(ms(2027, 1, 10, 0, 0, 0, "UTC")),
            Some(ms(2027, 1, 10, 11, 0, 0, "UTC"))
        );
    }

    #[test]
    fn refuses_bad_series() {
        for bad in [
            json!(5),
            json!({}),
            json!({"every": 1000, "cron": "* * * * *"}),
            json!({"every": 5}),
            json!({"every": 1000, "tz": "UTC"}),
            json!({"every": 1000, "times": 0}),
            json!({"every": 1000, "until": NOW - 1}),
            json!({"every": "1000"}),
            json!({"cron": "* * *"}),
            json!({"cron": "61 * * * *"}),
            json!({"cron": "* * * * *", "tz": "Mars/Olympus"}),
            json!({"every": 1000, "count": 3}),
        ] {
            let e = parse_repeat(&bad, NOW).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRepeat, "{bad}");
        }
        assert_eq!(parse_repeat(&Value::Null, NOW).unwrap(), None);
    }
}
