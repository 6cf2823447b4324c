//! Open-loop mode (`--rate R --duration D`): operation `n` is due `n / R` seconds after the
//! start, whether or not earlier operations were answered, and its latency counts from that
//! intended time. A generator that sends late (its connections' slots all busy, the
//! `--max-outstanding` bound reached, or no CPU to spare) then shows the wait in the latency
//! instead of hiding it: the correction for coordinated omission.

use std::time::{Duration, Instant};

const NANOS_PER_S: u128 = 1_000_000_000;
/// An operation sent more than this after its intended time counts as late: the generator
/// fell behind its schedule.
pub const LATE_MS: u64 = 10;
/// Longest `--duration`.
pub const DURATION_S_MAX: u64 = 24 * 3600;

/// The schedule of an open-loop run: `rate_per_s` operations a second from `start`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    rate_per_s: u64,
}

impl Pace {
    pub fn new(rate_per_s: u64) -> Pace {
        assert!(rate_per_s > 0, "a rate of 0 schedules nothing");
        Pace { rate_per_s }
    }

    pub fn rate_per_s(self) -> u64 {
        self.rate_per_s
    }

    /// Operations scheduled in `duration` (those due before it ends).
    pub fn ops_in(self, duration: Duration) -> u64 {
        let ops = duration.as_nanos() * u128::from(self.rate_per_s) / NANOS_PER_S;
        u64::try_from(ops).unwrap_or(u64::MAX)
    }

    /// Nanoseconds from the start to the intended send time of operation `n`.
    pub fn intended_ns(self, n: u64) -> u64 {
        let ns = u128::from(n) * NANOS_PER_S / u128::from(self.rate_per_s);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The intended send time of operation `n` of a run that started at `start`.
    pub fn intended(self, start: Instant, n: u64) -> Instant {
        start + Duration::from_nanos(self.intended_ns(n))
    }

    /// How many operations are due `elapsed_ns` after the start: every `n` whose
    /// `intended_ns(n) <= elapsed_ns`.
    pub fn due(self, elapsed_ns: u64) -> u64 {
        // intended_ns(n) <= e  <=>  n * 1e9 / R < e + 1  <=>  n * 1e9 < (e + 1) * R
        let bound = (u128::from(elapsed_ns) + 1) * u128::from(self.rate_per_s);
        u64::try_from(bound.div_ceil(NANOS_PER_S)).unwrap_or(u64::MAX)
    }
}

/// Latency of an operation answered at `answered`: from `since`, its intended send time in
/// open-loop mode (its actual send time otherwise). Never negative.
pub fn latency_us(since: Instant, answered: Instant) -> u64 {
    u64::try_from(answered.saturating_duration_since(since).as_micros()).unwrap_or(u64::MAX)
}

/// Parses `--duration`: a whole number with a unit, `ms`, `s`, `m` or `h` (`30s`, `10m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write 30s, 10m, 500ms or 1h"))?;
    let (number, unit) = text.split_at(digits_end);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number (30s, 10m)"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        "h" => Duration::from_secs(number.saturating_mul(3600)),
        other => return Err(format!("unknown unit `{other}` in `{text}`: ms, s, m or h")),
    };
    if duration.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    if duration > Duration::from_secs(DURATION_S_MAX) {
        return Err(format!("`{text}` is longer than {DURATION_S_MAX} s"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_counts_exactly_the_operations_whose_time_has_come() {
        for rate in [1, 3, 7, 1000, 33_333, 1_000_000, 3_000_000] {
            let pace = Pace::new(rate);
            for n in 0..2000 {
                let at = pace.intended_ns(n);
                assert!(pace.due(at) > n, "rate {rate}: op {n} due at its own time");
                if at > 0 {
                    assert!(pace.due(at - 1) <= n, "rate {rate}: op {n} not due before");
                }
            }
        }
    }

    #[test]
    fn operations_are_spaced_evenly_at_the_rate() {
        let pace = Pace::new(4);
        let times: Vec<u64> = (0..5).map(|n| pace.intended_ns(n)).collect();
        assert_eq!(
            times,
            [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]
        );
        assert_eq!(pace.due(0), 1, "the first operation is due at the start");
        assert_eq!(pace.due(999_999_999), 4);
        assert_eq!(pace.ops_in(Duration::from_secs(30)), 120);
        assert_eq!(
            Pace::new(100_000).ops_in(Duration::from_secs(600)),
            60_000_000
        );
    }

    #[test]
    fn a_late_send_is_measured_from_its_intended_time() {
        let start = Instant::now();
        let pace = Pace::new(1000);
        let intended = pace.intended(start, 10);
        assert_eq!(intended - start, Duration::from_millis(10));
        // Sent 40 ms late (say every slot was busy) and answered 1 ms after it was sent:
        // the latency is the 41 ms the caller waited, not the 1 ms on the wire.
        let sent = intended + Duration::from_millis(40);
        let answered = sent + Duration::from_millis(1);
        assert_eq!(latency_us(intended, answered), 41_000);
        assert_eq!(latency_us(answered, intended), 0, "never negative");
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["30", "s", "0s", "1.5s", "10 m", "3d", "-1s", "25h", ""] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
