//! What the handlers count as they work, for the server's metrics: events that leave no
//! number in the fold (a task leased, a lease expired, a run's wait for a WebAssembly
//! slot). Plain integers bumped on the shard's thread, live only (a replay counts nothing:
//! a restart starts again from zero, as Prometheus counters may); the runtime copies them
//! about once a second (`Engine::counts`). Nothing here is durable or decides anything.

/// Upper bounds (ms) of the buckets of a run's wait for a WebAssembly slot; one more
/// bucket holds the longer ones.
pub const SLOT_WAIT_BOUNDS_MS: [u64; 12] = [0, 1, 2, 5, 10, 25, 50, 100, 250, 1_000, 5_000, 30_000];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// User-hosted tasks leased to workers (one per task, however many a lease holds).
    pub tasks_leased: u64,
    /// Leases that ran out before their worker reported (each a failed attempt).
    pub leases_expired: u64,
    /// WebAssembly executions started, by their run's wait from due to started (ms,
    /// buckets of `SLOT_WAIT_BOUNDS_MS`, the last beyond them), and the sum of the waits.
    pub slot_wait: [u64; SLOT_WAIT_BOUNDS_MS.len() + 1],
    pub slot_wait_sum_ms: u64,
}

impl Counts {
    /// A WebAssembly execution started `wait_ms` after its run came due.
    pub fn slot_waited(&mut self, wait_ms: u64) {
        let bucket = SLOT_WAIT_BOUNDS_MS.partition_point(|&b| b < wait_ms);
        self.slot_wait[bucket] += 1;
        self.slot_wait_sum_ms += wait_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_lands_in_the_first_bucket_whose_bound_holds_it() {
        let mut counts = Counts::default();
        counts.slot_waited(0);
        counts.slot_waited(7);
        counts.slot_waited(u64::MAX / 4);
        assert_eq!(counts.slot_wait[0], 1, "no wait: the 0 ms bucket");
        assert_eq!(counts.slot_wait[4], 1, "7 ms: the bucket up to 10 ms");
        assert_eq!(counts.slot_wait[SLOT_WAIT_BOUNDS_MS.len()], 1);
        assert_eq!(counts.slot_wait.iter().sum::<u64>(), 3);
    }
}
