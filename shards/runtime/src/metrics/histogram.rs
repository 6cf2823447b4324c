//! A histogram one shard observes into and the HTTP thread reads: fixed bucket bounds, an
//! observation is two relaxed atomic additions, no lock. A scrape reads the buckets one at a
//! time, so it may see an observation in its bucket and not yet in the sum (or the reverse):
//! off by the observations made during the read, never more.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of latency buckets, in nanoseconds: 50 µs to 10 s.
pub(crate) const LATENCY_BOUNDS_NS: [u64; 16] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// Upper bounds of the records-per-batch buckets.
pub(crate) const BATCH_RECORDS_BOUNDS: [u64; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024];

/// Bounds in an integer unit (nanoseconds, records) and the factor to the exported unit
/// (seconds, records).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub upper: &'static [u64],
    pub scale: f64,
}

pub(crate) const LATENCY: Bounds = Bounds {
    upper: &LATENCY_BOUNDS_NS,
    scale: 1e-9,
};

pub(crate) const BATCH_RECORDS: Bounds = Bounds {
    upper: &BATCH_RECORDS_BOUNDS,
    scale: 1.0,
};

#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: Bounds,
    /// Observations per bucket (not cumulative); the last one is beyond every bound.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations, in the integer unit.
    sum: AtomicU64,
}

/// A histogram as read for one scrape, in the exported unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramValues {
    /// (upper bound, observations in that bucket alone); the last bound is +Inf.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(bounds: Bounds) -> Histogram {
        Histogram {
            bounds,
            buckets: (0..=bounds.upper.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `value` (in the integer unit).
    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.upper.partition_point(|&b| b < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub fn read(&self) -> HistogramValues {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let bounds = self
            .bounds
            .upper
            .iter()
            .map(|&b| b as f64 * self.bounds.scale);
        let buckets: Vec<(f64, u64)> = bounds
            .chain(std::iter::once(f64::INFINITY))
            .zip(counts.iter().copied())
            .collect();
        HistogramValues {
            buckets,
            count: counts.iter().sum(),
            sum: self.sum.load(Ordering::Relaxed) as f64 * self.bounds.scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let h = Histogram::new(BATCH_RECORDS);
        for v in [1, 2, 3, 1024, 5000] {
            h.observe(v);
        }
        let read = h.read();
        assert_eq!(read.buckets[0], (1.0, 1));
        assert_eq!(read.buckets[1], (2.0, 1));
        assert_eq!(read.buckets[2], (4.0, 1), "3 is counted up to 4");
        assert_eq!(read.buckets[9], (1024.0, 1), "a bound is inclusive");
        assert_eq!(read.buckets[10], (f64::INFINITY, 1));
        assert_eq!(read.count, 5);
        assert_eq!(read.sum, 6030.0);
    }

    #[test]
    fn latency_is_read_in_seconds() {
        let h = Histogram::new(LATENCY);
        h.observe(2_000_000);
        let read = h.read();
        assert_eq!(read.sum, 0.002);
        assert_eq!(read.buckets[5], (0.0025, 1));
    }
}
