//! Engine code takes time from a clock it is given, so tests drive time instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How far ahead a deadline may be set: a delay longer than this (about 100 years) means
/// "never" (no deadline, no timer), so no addition can overflow.
pub const TIMER_HORIZON_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// The deadline `delay_ms` after `now_ms`, or None (never) for a delay beyond the horizon.
pub fn deadline_after(now_ms: u64, delay_ms: u64) -> Option<u64> {
    (delay_ms <= TIMER_HORIZON_MS).then(|| now_ms.saturating_add(delay_ms))
}

pub trait Clock {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Moves the clock forward by `ms`; false when this clock cannot be moved.
    fn advance(&self, _ms: u64) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The system clock plus an offset that tests move forward (`flo server --test-clock`).
/// Clones share the offset (every shard sees the same time).
#[derive(Debug, Clone, Default)]
pub struct OffsetClock(pub Arc<AtomicU64>);

impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.0.load(Ordering::SeqCst)
    }

    fn advance(&self, ms: u64) -> bool {
        self.0.fetch_add(ms, Ordering::SeqCst);
        true
    }
}

/// A clock that moves only when told to (simulation and unit tests). Clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn advance(&self, ms: u64) -> bool {
        self.0.fetch_add(ms, Ordering::SeqCst);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_beyond_the_horizon_is_never() {
        assert_eq!(deadline_after(1000, 500), Some(1500));
        assert_eq!(
            deadline_after(1000, TIMER_HORIZON_MS),
            Some(1000 + TIMER_HORIZON_MS)
        );
        assert_eq!(deadline_after(1000, TIMER_HORIZON_MS + 1), None);
        assert_eq!(
            deadline_after(u64::MAX, flo_protocol::DELAY_MS_ACCEPTED_MAX),
            None
        );
        assert_eq!(deadline_after(u64::MAX, 5), Some(u64::MAX));
    }
}
