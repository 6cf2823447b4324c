//! `--max-outstanding`: a bound on the operations in flight over every connection.
//!
//! A connection takes a permit for each operation before it sends it. For a
//! request/response operation the permit comes back with the reply; for an invocation of a
//! user-hosted action (the `worker` workload, the worker tasks of `mixed`) it comes back
//! when a worker completes the task, so the bound covers invoked-but-not-completed tasks
//! end to end rather than only the invoke requests.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

pub struct Limiter {
    outstanding_max: u64,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    /// Permits taken and not yet released.
    held: u64,
    /// Highest `held` seen.
    peak: u64,
}

impl Limiter {
    pub fn new(outstanding_max: u64) -> Limiter {
        assert!(
            outstanding_max > 0,
            "a limit of 0 would never let anything run"
        );
        Limiter {
            outstanding_max,
            state: Mutex::new(State { held: 0, peak: 0 }),
            freed: Condvar::new(),
        }
    }

    pub fn outstanding_max(&self) -> u64 {
        self.outstanding_max
    }

    /// Takes up to `want` permits without waiting; returns how many it took (0 when full).
    pub fn try_acquire(&self, want: u64) -> u64 {
        let mut state = self.state.lock().unwrap();
        let taken = want.min(self.outstanding_max - state.held);
        state.held += taken;
        state.peak = state.peak.max(state.held);
        taken
    }

    /// Gives back `n` permits taken with `try_acquire`. Never below 0: an invoke answered
    /// with an unexpected reply gives its permit back at once, and a task it did create
    /// anyway gives one back again when completed.
    pub fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut state = self.state.lock().unwrap();
        state.held = state.held.saturating_sub(n);
        drop(state);
        self.freed.notify_all();
    }

    /// Whether every permit is taken.
    pub fn is_full(&self) -> bool {
        self.state.lock().unwrap().held >= self.outstanding_max
    }

    /// Waits until a permit is free or `timeout` passes (whichever is first).
    pub fn wait_for_room(&self, timeout: Duration) {
        let state = self.state.lock().unwrap();
        let _unused = self
            .freed
            .wait_timeout_while(state, timeout, |s| s.held >= self.outstanding_max)
            .unwrap();
    }

    /// Permits held right now.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.state.lock().unwrap().held
    }

    /// The most permits ever held at once.
    pub fn peak(&self) -> u64 {
        self.state.lock().unwrap().peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_no_more_than_the_limit_in_total() {
        let limiter = Limiter::new(10);
        assert_eq!(limiter.try_acquire(4), 4);
        assert_eq!(limiter.try_acquire(4), 4);
        assert_eq!(limiter.try_acquire(4), 2, "only 2 left of 10");
        assert_eq!(limiter.try_acquire(1), 0);
        assert!(limiter.is_full());
        assert_eq!((limiter.held(), limiter.peak()), (10, 10));
    }

    #[test]
    fn released_permits_can_be_taken_again_and_the_peak_stays() {
        let limiter = Limiter::new(3);
        assert_eq!(limiter.try_acquire(3), 3);
        limiter.release(2);
        assert!(!limiter.is_full());
        assert_eq!(limiter.held(), 1);
        assert_eq!(limiter.try_acquire(5), 2);
        limiter.release(3);
        assert_eq!((limiter.held(), limiter.peak()), (0, 3));
    }

    #[test]
    fn a_waiter_returns_once_another_thread_releases() {
        let limiter = Limiter::new(1);
        assert_eq!(limiter.try_acquire(1), 1);
        std::thread::scope(|scope| {
            scope.spawn(|| limiter.release(1));
            // Bounded only as a safety net: the release wakes it.
            limiter.wait_for_room(Duration::from_secs(60));
        });
        assert_eq!(limiter.try_acquire(1), 1);
    }
}
