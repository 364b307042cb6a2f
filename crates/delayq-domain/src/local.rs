//! Local wall-clock times: a one-off message due at "02:30 Berlin time on
//! 2027-03-28" (`deliverAtLocal` with `tz` and `dst`), and the wall-clock
//! walk a cron series takes across daylight-saving changes.
//!
//! Twice a year a zone's clock jumps. A wall-clock time can then:
//! - not exist (a **gap**: Berlin goes from 02:00 straight to 03:00 on the
//!   last Sunday of March, so 02:30 never happens), or
//! - happen twice (a **fold**: Berlin goes from 03:00 back to 02:00 on the
//!   last Sunday of October, so 02:30 happens at +02:00 and again at
//!   +01:00).
//!
//! [`Dst`] says which instant such a time means, with the names and the
//! meaning JavaScript's `Temporal` gives its `disambiguation` option:
//! `earlier` is the earlier of the two instants (a fold's first pass; a gap
//! time read with the offset after the jump, so 02:30 is 01:30 +01:00),
//! `later` the later one (a fold's second pass; a gap time read with the
//! offset before the jump, so 02:30 is 03:30 +02:00), and `reject` (the
//! default) refuses both.
//!
//! A cron series names wall-clock times and each one it names is delivered
//! once ([`next_wall_time`]): a named time in a fold on its first pass, a
//! named time in a gap as much later as the gap is long (what `Temporal`
//! calls `compatible`: so a daily 02:30 still comes on the spring day, at
//! 03:30, and never before the 01:xx times of the same night); when two
//! named times come to the same instant (an hourly series' 02:00 read as
//! 03:00 +02:00, and its own 03:00) that instant is delivered once.
//!
//! Every time is resolved with the zone rules built into this node
//! (`chrono-tz`'s copy of the IANA database) when it is computed: a one-off
//! message at its push, a series' next occurrence when the one before ends.

use std::str::FromStr;

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

pub use delayq_proto::Dst;

/// Why a wall-clock time does not name one instant in its zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOneInstant {
    /// The time falls in a gap: `earlier` and `later` are the instants it
    /// reads as with the offset after and before the jump.
    Gap { earlier: i64, later: i64 },
    /// The time happens twice: at `earlier`, and again at `later`.
    Fold { earlier: i64, later: i64 },
}

/// The zone's offset at an instant, in seconds east of UTC.
fn offset_at(tz: Tz, utc: NaiveDateTime) -> i64 {
    i64::from(tz.offset_from_utc_datetime(&utc).fix().local_minus_utc())
}

/// The instant (epoch ms) a wall-clock time reads as with `offset` seconds.
fn read_with(wall: NaiveDateTime, offset: i64) -> i64 {
    wall.and_utc().timestamp_millis() - offset * 1000
}

/// The instant `wall` names in `tz`, or why it names none or two.
pub fn instants(wall: NaiveDateTime, tz: Tz) -> Result<i64, NotOneInstant> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Ok(t.timestamp_millis()),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.timestamp_millis(), b.timestamp_millis());
            Err(NotOneInstant::Fold {
                earlier: a.min(b),
                later: a.max(b),
            })
        }
        LocalResult::None => {
            // The offsets a day either side: no zone jumps twice in a day.
            let before = offset_at(tz, wall - Duration::days(1));
            let after = offset_at(tz, wall + Duration::days(1));
            let (x, y) = (read_with(wall, after), read_with(wall, before));
            Err(NotOneInstant::Gap {
                earlier: x.min(y),
                later: x.max(y),
            })
        }
    }
}

/// The instant `wall` names in `tz` under `dst`; `Err` only for `reject`
/// (and a time that does not name one instant).
pub fn resolve(wall: NaiveDateTime, tz: Tz, dst: Dst) -> Result<i64, NotOneInstant> {
    match (instants(wall, tz), dst) {
        (Ok(t), _) => Ok(t),
        (Err(e), Dst::Reject | Dst::Unknown) => Err(e),
        (
            Err(NotOneInstant::Gap { earlier, .. } | NotOneInstant::Fold { earlier, .. }),
            Dst::Earlier,
        ) => Ok(earlier),
        (Err(NotOneInstant::Gap { later, .. } | NotOneInstant::Fold { later, .. }), Dst::Later) => {
            Ok(later)
        }
    }
}

/// The instant a cron series' named time comes at: a fold's first pass,
/// a gap's later reading (`Temporal`'s `compatible`).
fn compatible(wall: NaiveDateTime, tz: Tz) -> i64 {
    match instants(wall, tz) {
        Ok(t) => t,
        Err(NotOneInstant::Fold { earlier, .. }) => earlier,
        Err(NotOneInstant::Gap { later, .. }) => later,
    }
}

/// Reads an IANA zone name; the error names what was given.
pub fn zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name)
        .map_err(|_| format!("{name:?} is not an IANA time zone (e.g. Europe/Berlin)"))
}

/// Reads a local wall-clock time: `YYYY-MM-DDTHH:MM`, with `:SS` and
/// `.fff` optional, and no offset (the zone says it).
pub fn parse_wall(s: &str) -> Result<NaiveDateTime, String> {
    if s.ends_with(['Z', 'z']) || s.get(19..).is_some_and(|t| t.contains(['+', '-'])) {
        return Err(format!(
            "{s:?} carries an offset; a local time has none (the zone is tz): give YYYY-MM-DDTHH:MM:SS, or deliverAt for an instant"
        ));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            // Years a zone's rules cover; the caller bounds it further
            // (10 years ahead).
            if !(1970..=9999).contains(&t.year()) {
                return Err(format!(
                    "{s:?} is out of range: give a year from 1970 to 9999"
                ));
            }
            return Ok(t);
        }
    }
    Err(format!(
        "{s:?} is not a local date and time: give YYYY-MM-DDTHH:MM:SS (seconds and .fff optional)"
    ))
}

fn show(t: i64, tz: Tz) -> String {
    match tz.timestamp_millis_opt(t) {
        LocalResult::Single(t) => t.format("%H:%M:%S%.3f %:z").to_string(),
        _ => format!("{t} ms"),
    }
}

/// A person's words for a time that names no instant or two.
pub fn explain(wall: NaiveDateTime, tz: Tz, e: NotOneInstant) -> String {
    let at = wall.format("%Y-%m-%dT%H:%M:%S%.3f");
    match e {
        NotOneInstant::Gap { earlier, later } => format!(
            "{at} does not exist in {tz}: the clocks jump over it that day. Give dst \"earlier\" ({} then) or \"later\" ({}), or another time",
            show(earlier, tz),
            show(later, tz)
        ),
        NotOneInstant::Fold { earlier, later } => format!(
            "{at} happens twice in {tz}: at {} and again at {}. Give dst \"earlier\" or \"later\" to say which",
            show(earlier, tz),
            show(later, tz)
        ),
    }
}

/// Longest jump of any zone's clock, with room to spare: how far either
/// side of an instant the wall-clock walk looks for a named time that
/// reads as a later instant than its neighbours.
const MAX_JUMP: Duration = Duration::hours(3);

/// Most named times the walk reads in one call (an every-second series
/// near a jump reads a few thousand).
const MAX_STEPS: usize = 100_000;

/// The first instant after `at` (or at it, when `inclusive`) of the
/// wall-clock times `cron` names in `tz`, each read as [`compatible`]: a
/// named time in a gap as much later as the gap is long, a named time in
/// a fold on its first pass, each instant once. `None` when the cron names
/// no such time (within the walk's bounds).
pub fn next_wall_time(cron: &Cron, tz: Tz, at: i64, inclusive: bool) -> Option<i64> {
    let at_utc = DateTime::<Utc>::from_timestamp_millis(at)?.naive_utc();
    let wall_at = at_utc + Duration::seconds(offset_at(tz, at_utc));
    // A named time before `at`'s own wall time can read as an instant after
    // it only in a gap (read with the offset before the jump): start that
    // far back when the clock jumped forward within MAX_JUMP before `at`.
    let jumped_forward = offset_at(tz, at_utc - MAX_JUMP) < offset_at(tz, at_utc);
    let start = if jumped_forward {
        wall_at - MAX_JUMP
    } else {
        wall_at
    };
    let keep = |t: i64| if inclusive { t >= at } else { t > at };
    let mut wall = start.and_utc();
    let mut first = true;
    // The earliest instant found so far, and its own wall-clock reading: a
    // named time in a gap reads as an instant later than named times after
    // it on the wall clock (Lord Howe's 02:20 is 02:50 +11:00, after its
    // 02:40), so the walk goes on to that reading and keeps the earliest.
    let mut best: Option<(i64, NaiveDateTime)> = None;
    for _ in 0..MAX_STEPS {
        // The wall clock as a calendar without jumps: croner on UTC.
        wall = cron.find_next_occurrence(&wall, first).ok()?;
        first = false;
        if best.is_some_and(|(_, reading)| wall.naive_utc() > reading) {
            break;
        }
        let t = compatible(wall.naive_utc(), tz);
        if keep(t) && best.is_none_or(|(b, _)| t < b) {
            let utc = DateTime::<Utc>::from_timestamp_millis(t)?.naive_utc();
            best = Some((t, utc + Duration::seconds(offset_at(tz, utc))));
        }
    }
    best.map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use croner::parser::{CronParser, Seconds};

    const BERLIN: Tz = chrono_tz::Europe::Berlin;

    fn wall(s: &str) -> NaiveDateTime {
        parse_wall(s).unwrap()
    }

    fn utc(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn a_time_in_a_gap_or_a_fold_follows_the_rule() {
        // Berlin springs forward on 2027-03-28 at 02:00 +01:00.
        let gap = wall("2027-03-28T02:30:00");
        assert!(matches!(
            instants(gap, BERLIN),
            Err(NotOneInstant::Gap { .. })
        ));
        assert!(resolve(gap, BERLIN, Dst::Reject).is_err());
        assert_eq!(
            resolve(gap, BERLIN, Dst::Earlier),
            Ok(utc("2027-03-28T01:30:00+01:00"))
        );
        assert_eq!(
            resolve(gap, BERLIN, Dst::Later),
            Ok(utc("2027-03-28T03:30:00+02:00"))
        );
        assert_eq!(compatible(gap, BERLIN), utc("2027-03-28T03:30:00+02:00"));
        // It falls back on 2027-10-31 at 03:00 +02:00.
        let fold = wall("2027-10-31T02:30:00");
        assert!(resolve(fold, BERLIN, Dst::Reject).is_err());
        assert_eq!(
            resolve(fold, BERLIN, Dst::Earlier),
            Ok(utc("2027-10-31T02:30:00+02:00"))
        );
        assert_eq!(
            resolve(fold, BERLIN, Dst::Later),
            Ok(utc("2027-10-31T02:30:00+01:00"))
        );
        assert_eq!(compatible(fold, BERLIN), utc("2027-10-31T02:30:00+02:00"));
        // An ordinary time is one instant whatever the rule.
        let plain = wall("2027-03-28T04:00:00.250");
        for dst in [Dst::Reject, Dst::Earlier, Dst::Later] {
            assert_eq!(
                resolve(plain, BERLIN, dst),
                Ok(utc("2027-03-28T04:00:00.250+02:00"))
            );
        }
        // Lord Howe moves by half an hour.
        let howe = chrono_tz::Australia::Lord_Howe;
        let t = resolve(wall("2027-10-03T02:15:00"), howe, Dst::Later).unwrap();
        assert_eq!(t, utc("2027-10-03T02:45:00+11:00"));
    }

    #[test]
    fn the_refusal_says_both_readings() {
        let w = wall("2027-03-28T02:30:00");
        let e = explain(w, BERLIN, instants(w, BERLIN).unwrap_err());
        assert!(e.contains("does not exist in Europe/Berlin"), "{e}");
        assert!(
            e.contains("01:30:00.000 +01:00") && e.contains("03:30:00.000 +02:00"),
            "{e}"
        );
        let w = wall("2027-10-31T02:30:00");
        let e = explain(w, BERLIN, instants(w, BERLIN).unwrap_err());
        assert!(e.contains("happens twice"), "{e}");
        assert!(
            e.contains("02:30:00.000 +02:00") && e.contains("02:30:00.000 +01:00"),
            "{e}"
        );
    }

    #[test]
    fn local_times_are_read_strictly() {
        assert_eq!(wall("2027-03-28T02:30"), wall("2027-03-28T02:30:00"));
        assert!(parse_wall("2027-03-28T02:30:00.5").is_ok());
        for bad in [
            "2027-03-28T02:30:00Z",
            "2027-03-28T02:30:00+01:00",
            "2027-03-28T02:30:00-05:00",
            "2027-03-28 02:30:00",
            "2027-02-30T02:30:00",
            "2027-03-28T24:00:00",
            "tomorrow",
            "",
            "+262142-12-31T23:59:59",
            "-262143-01-01T00:00:00",
            "1969-12-31T23:59:59",
            "10000-01-01T00:00:00",
        ] {
            assert!(parse_wall(bad).is_err(), "{bad}");
        }
        assert!(zone("Europe/Berlin").is_ok());
        assert!(zone("Mars/Olympus").unwrap_err().contains("Mars/Olympus"));
    }

    /// Every delivery of `expr` from 2027-01-01 to 2028-01-01 in `tz`, as
    /// the series walks it (each from the one before).
    fn year(expr: &str, tz: Tz) -> Vec<i64> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .unwrap();
        let end = utc("2028-01-01T00:00:00Z");
        let mut out = vec![];
        let mut t = next_wall_time(&cron, tz, utc("2027-01-01T00:00:00Z"), true).unwrap();
        while t < end {
            out.push(t);
            t = next_wall_time(&cron, tz, t, false).unwrap();
        }
        out
    }

    fn local(t: i64, tz: Tz) -> String {
        tz.timestamp_millis_opt(t)
            .unwrap()
            .format("%m-%d %H:%M %:z")
            .to_string()
    }

    #[test]
    fn a_daily_series_runs_once_every_day_of_a_year_in_berlin() {
        for expr in [
            "30 2 * * *",
            "0 2 * * *",
            "30 1 * * *",
            "0 3 * * *",
            "0 12 * * *",
        ] {
            let days = year(expr, BERLIN);
            assert_eq!(days.len(), 365, "{expr}");
            let spring: Vec<String> = days
                .iter()
                .filter(|t| local(**t, BERLIN).starts_with("03-28"))
                .map(|t| local(*t, BERLIN))
                .collect();
            let autumn: Vec<String> = days
                .iter()
                .filter(|t| local(**t, BERLIN).starts_with("10-31"))
                .map(|t| local(*t, BERLIN))
                .collect();
            assert_eq!(spring.len(), 1, "{expr}: {spring:?}");
            assert_eq!(autumn.len(), 1, "{expr}: {autumn:?}");
        }
        let spring = year("30 2 * * *", BERLIN)
            .into_iter()
            .map(|t| local(t, BERLIN))
            .find(|l| l.starts_with("03-28"));
        assert_eq!(spring.as_deref(), Some("03-28 03:30 +02:00"));
        let autumn = year("30 2 * * *", BERLIN)
            .into_iter()
            .map(|t| local(t, BERLIN))
            .find(|l| l.starts_with("10-31"));
        assert_eq!(autumn.as_deref(), Some("10-31 02:30 +02:00"));
    }

    #[test]
    fn hourly_and_faster_series_name_each_wall_clock_time_once() {
        // 24 named hours a day; on the spring day 02:00 reads as 03:00,
        // the same instant as 03:00 itself: 23 deliveries. On the autumn
        // day 02:00 happens twice and is delivered once: 24.
        let hours = year("0 * * * *", BERLIN);
        assert_eq!(hours.len(), 365 * 24 - 1);
        let on = |day: &str| {
            hours
                .iter()
                .filter(|t| local(**t, BERLIN).starts_with(day))
                .count()
        };
        assert_eq!(on("03-28"), 23);
        assert_eq!(on("10-31"), 24);
        assert!(hours.windows(2).all(|w| w[0] < w[1]));
        // Every 20 minutes: three named times in the gap fall on the three
        // of 03:xx; the fold's three are delivered on the first pass only.
        let twenty = year("*/20 * * * *", BERLIN);
        assert_eq!(twenty.len(), 365 * 72 - 3);
        assert!(twenty.windows(2).all(|w| w[0] < w[1]));
        // A named time only in the gap hour still comes, an hour on.
        let only = year("15 2 28 3 *", BERLIN);
        assert_eq!(only.len(), 1);
        assert_eq!(local(only[0], BERLIN), "03-28 03:15 +02:00");
        // A series naming 02:10 and 02:40 only, walked from its 02:10 read
        // as 03:10: its 02:40 still comes at 03:40.
        let two = year("10,40 2 * * *", BERLIN);
        let spring: Vec<String> = two
            .iter()
            .map(|t| local(*t, BERLIN))
            .filter(|l| l.starts_with("03-28"))
            .collect();
        assert_eq!(spring, ["03-28 03:10 +02:00", "03-28 03:40 +02:00"]);
        assert_eq!(two.len(), 365 * 2);
    }

    #[test]
    fn gaps_of_half_an_hour_and_two_hours_skip_nothing() {
        // Lord Howe jumps from 02:00 to 02:30 (+10:30 to +11:00) on
        // 2027-10-03: 02:20 comes at 02:50, and 02:40, which exists, at
        // 02:40, first.
        let howe = chrono_tz::Australia::Lord_Howe;
        let day: Vec<String> = year("20,40 2 * * *", howe)
            .into_iter()
            .map(|t| local(t, howe))
            .filter(|l| l.starts_with("10-03"))
            .collect();
        assert_eq!(day, ["10-03 02:40 +11:00", "10-03 02:50 +11:00"]);
        assert_eq!(year("20,40 2 * * *", howe).len(), 365 * 2);
        // Every 20 minutes: 02:00 and 02:20 come at 02:30 and 02:50, all four
        // distinct; the half hour passed twice in April names 01:40 once.
        assert_eq!(year("*/20 * * * *", howe).len(), 365 * 72);
        // Troll (Antarctica) jumps two hours, from 01:00 to 03:00: 02:00
        // and 03:00 are both named; 02:00 comes at 04:00, after 03:00.
        let troll = chrono_tz::Antarctica::Troll;
        let day: Vec<String> = year("0 1,2,3 * * *", troll)
            .into_iter()
            .map(|t| local(t, troll))
            .filter(|l| l.starts_with("03-28"))
            .collect();
        assert_eq!(day, ["03-28 03:00 +02:00", "03-28 04:00 +02:00"], "{day:?}");
        for (name, tz) in [("Lord_Howe", howe), ("Troll", troll), ("Berlin", BERLIN)] {
            let all = year("*/10 * * * *", tz);
            assert!(all.windows(2).all(|w| w[0] < w[1]), "{name}");
        }
    }

    #[test]
    fn zones_in_the_south_and_without_dst() {
        // Sydney falls back in April and springs forward in October.
        let sydney = chrono_tz::Australia::Sydney;
        let days = year("30 2 * * *", sydney);
        assert_eq!(days.len(), 365);
        assert!(year("0 * * * *", chrono_tz::Asia::Shanghai).len() == 365 * 24);
        assert_eq!(year("0 * * * *", sydney).len(), 365 * 24 - 1);
    }
}
