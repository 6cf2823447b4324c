//! What a driven run did: counts, latencies, each kind's share of a blend and how the
//! operations were sent against an open-loop schedule. Every part is of fixed size, so a run
//! of any length takes the same memory.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Latencies are recorded in microseconds, up to this (larger ones count as this).
const LATENCY_US_MAX: u64 = 100_000_000;

pub struct Outcome {
    /// Latency of every answered request, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Requests answered (successfully or not).
    pub ops: u64,
    /// Error replies (and unexpected replies).
    pub errors: u64,
    pub first_error: Option<String>,
    /// One message per failed connection.
    pub failures: Vec<String>,
    /// From the moment every connection was ready to the last response.
    pub elapsed: Duration,
    /// Whether the `max_duration` limit stopped the run early.
    pub hit_time_limit: bool,
    /// Shard count the server announced in its handshake.
    pub server_shards: Option<u32>,
    /// Each kind's share, for a generator of several kinds (`mixed`); empty otherwise.
    pub kinds: Vec<KindOutcome>,
    /// What the open-loop schedule asked and what was sent.
    pub sending: Sending,
}

/// One kind of operation of a blend.
pub struct KindOutcome {
    pub name: &'static str,
    pub latency_us: Histogram<u64>,
    pub ops: u64,
    pub errors: u64,
}

/// How requests were sent, against the schedule in open-loop mode.
pub struct Sending {
    /// Operations sent (not counting those sent again after `overloaded`).
    pub sent: u64,
    /// From the start to the last operation sent.
    pub span: Duration,
    /// Open-loop mode: how long after its intended time each request was sent, in µs.
    pub lag_us: Histogram<u64>,
    /// Open-loop mode: operations sent more than `LATE_MS` after their intended time.
    pub late: u64,
}

impl Sending {
    pub fn empty() -> Sending {
        Sending {
            sent: 0,
            span: Duration::ZERO,
            lag_us: new_histogram(),
            late: 0,
        }
    }

    pub fn merge(&mut self, other: &Sending) {
        self.sent += other.sent;
        self.span = self.span.max(other.span);
        self.lag_us
            .add(&other.lag_us)
            .expect("histograms share bounds");
        self.late += other.late;
    }
}

impl KindOutcome {
    pub fn new(name: &'static str) -> KindOutcome {
        KindOutcome {
            name,
            latency_us: new_histogram(),
            ops: 0,
            errors: 0,
        }
    }

    pub fn merge(&mut self, other: &KindOutcome) {
        debug_assert_eq!(self.name, other.name);
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms share bounds");
        self.ops += other.ops;
        self.errors += other.errors;
    }
}

impl Outcome {
    /// Nothing done yet.
    pub fn empty() -> Self {
        Outcome {
            latency_us: new_histogram(),
            ops: 0,
            errors: 0,
            first_error: None,
            failures: Vec::new(),
            elapsed: Duration::ZERO,
            hit_time_limit: false,
            server_shards: None,
            kinds: Vec::new(),
            sending: Sending::empty(),
        }
    }

    /// Operations answered without error.
    pub fn succeeded(&self) -> u64 {
        self.ops.saturating_sub(self.errors)
    }

    /// Operations of the kind named `name` answered without error (0 for a generator of
    /// one kind, which reports no kinds).
    pub fn succeeded_of(&self, name: &str) -> u64 {
        self.kinds
            .iter()
            .find(|k| k.name == name)
            .map_or(0, |k| k.ops.saturating_sub(k.errors))
    }

    /// The operations of the kind named `name` answered, 0 if there is no such kind.
    pub fn ops_of(&self, name: &str) -> u64 {
        self.kinds
            .iter()
            .find(|k| k.name == name)
            .map_or(0, |k| k.ops)
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}
