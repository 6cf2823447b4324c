//! Engine code takes time from a clock it is given, so tests drive time instead of sleeping.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
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
#[derive(Debug, Clone, Default)]
pub struct OffsetClock(pub std::sync::Arc<std::sync::atomic::AtomicU64>);

impl OffsetClock {
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Clone, Default)]
pub struct TestClock(Rc<Cell<u64>>);

impl TestClock {
    pub fn new(start_ms: u64) -> Self {
        TestClock(Rc::new(Cell::new(start_ms)))
    }
    pub fn advance(&self, ms: u64) {
        self.0.set(self.0.get() + ms);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}
