//! Schedules' ticks: a standard 5-field cron expression (or an interval) turned into the
//! times a schedule fires.
//!
//! The `cron` crate reads a seconds-first expression whose day of week counts 1–7 from
//! Sunday and which requires both day fields to match. A 5-field expression here means
//! what it means to cron(8): seconds are 0, the day of week is 0–7 (0 and 7 are Sunday, or
//! `SUN`…`SAT`), and when both the day of month and the day of week are restricted a day
//! matching either fires (so `0 9 1 * 1` is 09:00 on the 1st and on every Monday).

use crate::def::Every;
use chrono::{TimeZone, Utc};
use chrono_tz::Tz;
use std::str::FromStr;

/// Computes a schedule's ticks (milliseconds since the epoch).
#[derive(Debug, Clone)]
pub struct Ticker {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// One schedule, or two whose earliest tick wins (both day fields restricted).
    Cron {
        schedules: Vec<cron::Schedule>,
        tz: Tz,
    },
    /// Ticks at `anchor + k × ms`, k ≥ 1.
    Interval { ms: u64, anchor: u64 },
}

impl Ticker {
    /// The ticker of `every`; an interval counts from `anchor_ms` (the definition's
    /// creation). Err: the expression or time zone is invalid (validation refused it).
    pub fn new(every: &Every, anchor_ms: u64) -> Result<Ticker, String> {
        let kind = match every {
            Every::Interval { ms } => Kind::Interval {
                ms: (*ms).max(1),
                anchor: anchor_ms,
            },
            Every::Cron { expr, timezone } => Kind::Cron {
                schedules: compile_cron(expr)?,
                tz: parse_timezone(timezone.as_deref())?,
            },
        };
        Ok(Ticker { kind })
    }

    /// The first tick strictly after `after_ms`; None when there is none (a cron
    /// expression that never matches again, e.g. a 31st of February).
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match &self.kind {
            Kind::Interval { ms, anchor } => {
                if after_ms < *anchor {
                    return anchor.checked_add(*ms);
                }
                let k = (after_ms - anchor) / ms + 1;
                k.checked_mul(*ms)?.checked_add(*anchor)
            }
            Kind::Cron { schedules, tz } => {
                let after = tz.timestamp_millis_opt(after_ms as i64).single()?;
                schedules
                    .iter()
                    .filter_map(|s| s.after(&after).next())
                    .map(|t| t.timestamp_millis())
                    .filter(|&t| t > after_ms as i64)
                    .min()
                    .map(|t| t as u64)
            }
        }
    }
}

/// The IANA time zone named (None: UTC).
pub fn parse_timezone(name: Option<&str>) -> Result<Tz, String> {
    match name {
        None => Ok(Tz::UTC),
        Some(name) => Tz::from_str(name).map_err(|_| {
            format!(
                "unknown time zone {name:?}: use an IANA name such as \"Europe/Paris\" or \"UTC\""
            )
        }),
    }
}

/// Checks an expression; the message says what is wrong.
pub fn check_cron(expr: &str) -> Result<(), String> {
    compile_cron(expr).map(|_| ())
}

/// The `cron` crate's schedules for a 5-field expression (two when both day fields are
/// restricted: a day matching either fires).
fn compile_cron(expr: &str) -> Result<Vec<cron::Schedule>, String> {
    let expanded = match expr.trim() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other => other,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = fields[..] else {
        return Err(format!(
            "cron expression {expr:?} has {} fields; write 5: minute hour day-of-month month \
             day-of-week (e.g. \"0 */6 * * *\")",
            fields.len()
        ));
    };
    let dow = day_of_week(dow)?;
    let dom_any = matches!(dom, "*" | "?");
    let dow_any = dow == "*";
    let mut variants = vec![(dom, dow.as_str())];
    if !dom_any && !dow_any {
        variants = vec![(dom, "*"), ("*", dow.as_str())];
    }
    variants
        .into_iter()
        .map(|(dom, dow)| {
            let six = format!("0 {minute} {hour} {dom} {month} {dow}");
            cron::Schedule::from_str(&six)
                .map_err(|e| format!("cron expression {expr:?} is invalid: {e}"))
        })
        .collect()
}

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A 5-field day of week (0–7, 0 and 7 Sunday, or names; `*`, `,`, `-`, `/`) as the
/// `cron` crate reads it: `*` or a list of day names.
fn day_of_week(field: &str) -> Result<String, String> {
    let bad = |why: String| format!("day of week {field:?}: {why}");
    let day = |s: &str| -> Result<u32, String> {
        if let Ok(n) = s.parse::<u32>() {
            return (n <= 7)
                .then_some(n)
                .ok_or_else(|| bad(format!("{n} is not 0 to 7 (0 and 7 are Sunday)")));
        }
        DAY_NAMES
            .iter()
            .position(|d| d.eq_ignore_ascii_case(s))
            .map(|p| p as u32)
            .ok_or_else(|| bad(format!("{s:?} is not a day (0-7 or SUN-SAT)")))
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| bad(format!("step {step:?} is not a positive number")))?;
                (range, step)
            }
            None => (item, 1),
        };
        let (from, to) = match range {
            "*" | "?" => (0, 6),
            r => match r.split_once('-') {
                Some((a, b)) => (day(a)?, day(b)?),
                // `N/S` means from N to the end of the week.
                None if step > 1 => (day(r)?, 6),
                None => {
                    let d = day(r)?;
                    (d, d)
                }
            },
        };
        if from > to {
            return Err(bad(format!("range {range:?} runs backwards")));
        }
        for d in (from..=to).step_by(step as usize) {
            days[(d % 7) as usize] = true;
        }
    }
    if days.iter().all(|&d| d) && matches!(field, "*" | "?") {
        return Ok("*".to_string());
    }
    let names: Vec<&str> = (0..7).filter(|&d| days[d]).map(|d| DAY_NAMES[d]).collect();
    Ok(names.join(","))
}

/// `interval:` as milliseconds: a number, or text with a unit (`500ms`, `30s`, `5m`, `2h`,
/// `1d`).
pub fn parse_interval(value: &serde_yaml::Value) -> Result<u64, String> {
    let hint = "write milliseconds (`interval: 30000`) or a duration (`30s`, `5m`, `1h`)";
    match value {
        serde_yaml::Value::Number(n) => n.as_u64().ok_or_else(|| {
            format!("`interval: {n}` is not a whole number of milliseconds; {hint}")
        }),
        serde_yaml::Value::String(text) => {
            let t = text.trim();
            let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let (digits, unit) = t.split_at(split);
            let factor = match unit.trim() {
                "" | "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(format!("`interval: {text}` has an unknown unit; {hint}")),
            };
            digits
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(factor))
                .ok_or_else(|| format!("`interval: {text}` is not a duration; {hint}"))
        }
        _ => Err(format!("`interval` is not a number; {hint}")),
    }
}

/// A tick's time for people: `2026-11-26T12:00:00Z`.
pub fn format_tick(ms: u64) -> String {
    Utc.timestamp_millis_opt(ms as i64)
        .single()
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> u64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis() as u64
    }

    fn cron(expr: &str, tz: Option<&str>) -> Ticker {
        let every = Every::Cron {
            expr: expr.into(),
            timezone: tz.map(String::from),
        };
        Ticker::new(&every, 0).unwrap()
    }

    fn ticks(t: &Ticker, from: &str, n: usize) -> Vec<String> {
        let mut at = utc(from);
        (0..n)
            .map(|_| {
                at = t.next_after(at).unwrap();
                format_tick(at)
            })
            .collect()
    }

    #[test]
    fn five_fields_mean_what_they_mean_to_cron() {
        let t = cron("0 */6 * * *", None);
        assert_eq!(
            ticks(&t, "2026-11-26T05:59:59Z", 3),
            [
                "2026-11-26T06:00:00.000Z",
                "2026-11-26T12:00:00.000Z",
                "2026-11-26T18:00:00.000Z"
            ]
        );
        // A tick is strictly after: at 06:00 exactly, the next is 12:00.
        assert_eq!(
            t.next_after(utc("2026-11-26T06:00:00Z")),
            Some(utc("2026-11-26T12:00:00Z"))
        );
        // 9 AM weekdays: 2026-11-27 is a Friday, so the next after it is Monday.
        let t = cron("0 9 * * 1-5", None);
        assert_eq!(
            ticks(&t, "2026-11-27T09:00:00Z", 2),
            ["2026-11-30T09:00:00.000Z", "2026-12-01T09:00:00.000Z"]
        );
        // 0 and 7 are Sunday; 2026-11-29 is a Sunday.
        for expr in ["30 2 * * 0", "30 2 * * 7", "30 2 * * sun"] {
            assert_eq!(
                ticks(&cron(expr, None), "2026-11-26T00:00:00Z", 1),
                ["2026-11-29T02:30:00.000Z"],
                "{expr}"
            );
        }
        // Midnight on the 1st, across the year's end.
        assert_eq!(
            ticks(&cron("0 0 1 * *", None), "2026-12-01T00:00:00Z", 1),
            ["2027-01-01T00:00:00.000Z"]
        );
    }

    #[test]
    fn both_day_fields_restricted_fire_on_either() {
        // The 1st of the month or any Monday (2026-11-30 is a Monday).
        let t = cron("0 9 1 * 1", None);
        assert_eq!(
            ticks(&t, "2026-11-27T00:00:00Z", 3),
            [
                "2026-11-30T09:00:00.000Z",
                "2026-12-01T09:00:00.000Z",
                "2026-12-07T09:00:00.000Z"
            ]
        );
    }

    #[test]
    fn a_time_zone_moves_the_ticks_and_follows_daylight_saving() {
        let t = cron("0 9 * * *", Some("America/New_York"));
        // 09:00 in New York is 14:00 UTC in winter, 13:00 in summer.
        assert_eq!(
            ticks(&t, "2026-11-26T00:00:00Z", 1),
            ["2026-11-26T14:00:00.000Z"]
        );
        assert_eq!(
            ticks(&t, "2026-07-01T00:00:00Z", 1),
            ["2026-07-01T13:00:00.000Z"]
        );
        assert!(parse_timezone(Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn day_of_week_steps_lists_and_errors() {
        assert_eq!(day_of_week("*").unwrap(), "*");
        assert_eq!(day_of_week("1-5").unwrap(), "MON,TUE,WED,THU,FRI");
        assert_eq!(day_of_week("*/2").unwrap(), "SUN,TUE,THU,SAT");
        assert_eq!(day_of_week("5-7").unwrap(), "SUN,FRI,SAT");
        assert_eq!(day_of_week("0,6").unwrap(), "SUN,SAT");
        assert!(day_of_week("8").unwrap_err().contains("0 to 7"));
        assert!(day_of_week("5-1").unwrap_err().contains("backwards"));
        assert!(day_of_week("*/0").unwrap_err().contains("step"));
        assert!(check_cron("0 0 * *").unwrap_err().contains("has 4 fields"));
        assert!(check_cron("61 * * * *").is_err());
        assert!(check_cron("@hourly").is_ok());
    }

    #[test]
    fn intervals_count_from_their_anchor() {
        let t = Ticker::new(&Every::Interval { ms: 1000 }, 10_500).unwrap();
        assert_eq!(t.next_after(0), Some(11_500));
        assert_eq!(t.next_after(11_499), Some(11_500));
        assert_eq!(t.next_after(11_500), Some(12_500));
        assert_eq!(t.next_after(u64::MAX - 1), None);
        let ms = |v: &str| parse_interval(&serde_yaml::from_str(v).unwrap());
        assert_eq!(ms("30000"), Ok(30_000));
        assert_eq!(ms("\"30s\""), Ok(30_000));
        assert_eq!(ms("5m"), Ok(300_000));
        assert_eq!(ms("1h"), Ok(3_600_000));
        assert!(ms("5 parsecs").is_err());
        assert!(ms("-3").is_err());
    }
}
