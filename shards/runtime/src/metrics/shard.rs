//! One shard's metrics: counters and histograms the shard bumps as it works (relaxed atomic
//! additions, one writer: the shard's thread), and the numbers its engine keeps, published
//! by the shard about once a second. The HTTP thread reads both for a scrape; nothing it
//! does can make the shard wait. Without an HTTP port (`--http off`) nobody reads them, and
//! the shard counts nothing (`counting`).

use super::histogram::{BATCH_RECORDS, Histogram, LATENCY};
use flo_engine::{Counts, Gauges, RunsEnded};
use flo_protocol::ErrorCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Distinct operation names counted per shard (the protocol has about 110); the requests
/// of any name beyond are counted under the last slot's name.
const OP_SLOTS: usize = 256;

/// A request's result: `ok`, or its error's code.
pub(crate) const RESULTS: [&str; 8] = [
    "ok",
    "bad_request",
    "not_found",
    "conflict",
    "unauthorized",
    "overloaded",
    "unavailable",
    "internal",
];

/// The index in `RESULTS` of a reply's result.
pub(crate) fn result_index(error: Option<ErrorCode>) -> usize {
    match error {
        None => 0,
        Some(ErrorCode::BadRequest) => 1,
        Some(ErrorCode::NotFound) => 2,
        Some(ErrorCode::Conflict) => 3,
        Some(ErrorCode::Unauthorized) => 4,
        Some(ErrorCode::Overloaded) => 5,
        Some(ErrorCode::Unavailable) => 6,
        Some(ErrorCode::Internal) => 7,
    }
}

/// The requests of one operation: answers by result, and their latency.
#[derive(Debug)]
pub(crate) struct OpSlot {
    /// Set once, by the shard, the first time it answers this operation.
    name: OnceLock<&'static str>,
    results: [AtomicU64; RESULTS.len()],
    latency: Histogram,
}

/// How a WebAssembly execution ended, in the order of `ShardMetrics::executions`.
pub(crate) const EXEC_RESULTS: [&str; 4] = ["ok", "failed", "timed_out", "cancelled"];

/// Why a WebAssembly execution failed (its `GuestError`), in the order of
/// `ShardMetrics::failures`: every result but `ok` and `cancelled`.
pub(crate) const FAILURE_REASONS: [&str; 9] = [
    "invalid_input",
    "allocation",
    "guest_error",
    "trap",
    "timeout",
    "memory_limit",
    "bad_output",
    "init",
    "instantiate",
];

/// How a webhook attempt was answered, in the order of `ShardMetrics::webhook_attempts`:
/// a 2xx status, another status, no answer (connection, timeout, bad URL, a stop).
pub(crate) const WEBHOOK_RESULTS: [&str; 3] = ["delivered", "refused", "failed"];

/// The index in `WEBHOOK_RESULTS` of a webhook attempt's answer.
fn webhook_result_index(result: &Result<u16, String>) -> usize {
    match result {
        Ok(200..=299) => 0,
        Ok(_) => 1,
        Err(_) => 2,
    }
}

/// What the engine keeps, as the shard last published it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    pub gauges: Gauges,
    pub ended: RunsEnded,
    pub counts: Counts,
}

#[derive(Debug)]
pub(crate) struct ShardMetrics {
    pub shard: u32,
    /// Whether anything reads these metrics (an HTTP port): else the shard neither counts
    /// nor publishes, and reads no clock for them.
    counting: bool,
    /// Recovered and listening.
    pub serving: AtomicBool,
    ops: Box<[OpSlot]>,
    /// Log batches written (one durable write each), their records and bytes (padding
    /// included), records per batch, and each write's latency (its sync included).
    pub log_batches: AtomicU64,
    pub log_records: AtomicU64,
    pub log_bytes: AtomicU64,
    pub batch_records: Histogram,
    pub write_time: Histogram,
    /// WebAssembly executions by `EXEC_RESULTS`, and their time.
    pub executions: [AtomicU64; EXEC_RESULTS.len()],
    pub execution_time: Histogram,
    /// WebAssembly executions that ran in an instance kept from an earlier one.
    pub executions_reused: AtomicU64,
    /// WebAssembly executions failed, by `FAILURE_REASONS`.
    pub failures: [AtomicU64; FAILURE_REASONS.len()],
    /// Client connections accepted.
    pub connections_accepted: AtomicU64,
    /// Requests the auth gate refused.
    pub auth_denials: AtomicU64,
    /// Webhook attempts answered, by `WEBHOOK_RESULTS`.
    pub webhook_attempts: [AtomicU64; WEBHOOK_RESULTS.len()],
    /// The engine's numbers: the shard replaces them (`try_lock`: a scrape reading them
    /// makes it skip a turn, never wait), a scrape copies them.
    published: Mutex<Published>,
}

impl ShardMetrics {
    pub fn new(shard: u32, counting: bool) -> ShardMetrics {
        ShardMetrics {
            shard,
            counting,
            serving: AtomicBool::new(false),
            ops: (0..OP_SLOTS)
                .map(|_| OpSlot {
                    name: OnceLock::new(),
                    results: Default::default(),
                    latency: Histogram::new(LATENCY),
                })
                .collect(),
            log_batches: AtomicU64::new(0),
            log_records: AtomicU64::new(0),
            log_bytes: AtomicU64::new(0),
            batch_records: Histogram::new(BATCH_RECORDS),
            write_time: Histogram::new(LATENCY),
            executions: Default::default(),
            execution_time: Histogram::new(LATENCY),
            executions_reused: AtomicU64::new(0),
            failures: Default::default(),
            connections_accepted: AtomicU64::new(0),
            auth_denials: AtomicU64::new(0),
            webhook_attempts: Default::default(),
            published: Mutex::new(Published::default()),
        }
    }

    /// Whether the shard counts (an HTTP port reads the metrics).
    pub fn counting(&self) -> bool {
        self.counting
    }

    /// Counts one request of `op` answered with `result` (`result_index`) after
    /// `elapsed_ns`. Called on the shard's thread only (the one writer of the slots' names).
    pub fn request(&self, op: &'static str, result: usize, elapsed_ns: u64) {
        if !self.counting {
            return;
        }
        let slot = self.slot(op);
        slot.results[result].fetch_add(1, Ordering::Relaxed);
        slot.latency.observe(elapsed_ns);
    }

    /// The slot of `op`: found by open addressing from its name's hash, taken when free.
    fn slot(&self, op: &'static str) -> &OpSlot {
        let start = xxhash_rust::xxh3::xxh3_64(op.as_bytes()) as usize % OP_SLOTS;
        for i in 0..OP_SLOTS {
            let slot = &self.ops[(start + i) % OP_SLOTS];
            match slot.name.get() {
                Some(name) if *name == op => return slot,
                Some(_) => continue,
                None => {
                    let _ = slot.name.set(op);
                    return slot;
                }
            }
        }
        // Every slot taken by other names: more operations than the protocol has.
        &self.ops[start]
    }

    /// Counts a log batch written: its records and bytes, and how long its write took.
    pub fn log_batch(&self, records: u64, bytes: u64, write_ns: u64) {
        if !self.counting {
            return;
        }
        self.log_batches.fetch_add(1, Ordering::Relaxed);
        self.log_records.fetch_add(records, Ordering::Relaxed);
        self.log_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.batch_records.observe(records);
        self.write_time.observe(write_ns);
    }

    /// Counts an execution that ended as `EXEC_RESULTS[result]` after `elapsed_ns`.
    /// `failure`: why it failed (an index in `FAILURE_REASONS`), unless it ended `ok` or
    /// `cancelled`.
    pub fn execution(&self, result: usize, failure: Option<usize>, elapsed_ns: u64, reused: bool) {
        if !self.counting {
            return;
        }
        self.executions[result].fetch_add(1, Ordering::Relaxed);
        if reused {
            self.executions_reused.fetch_add(1, Ordering::Relaxed);
        }
        self.execution_time.observe(elapsed_ns);
        if let Some(reason) = failure {
            self.failures[reason].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a webhook attempt answered with `result` (a status, or why none came).
    pub fn webhook_attempt(&self, result: &Result<u16, String>) {
        if !self.counting {
            return;
        }
        self.webhook_attempts[webhook_result_index(result)].fetch_add(1, Ordering::Relaxed);
    }

    /// Replaces the published numbers, unless a scrape is reading them (then the next
    /// publication brings them): the shard never waits here.
    pub fn publish(&self, gauges: Gauges, ended: &RunsEnded, counts: &Counts) {
        if let Ok(mut published) = self.published.try_lock() {
            published.gauges = gauges;
            published.ended.clone_from(ended);
            published.counts.clone_from(counts);
        }
    }

    /// The numbers last published.
    pub fn published(&self) -> Published {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Each operation answered so far: its name, answers by result and latency.
    pub fn ops(&self) -> impl Iterator<Item = (&'static str, &OpSlot)> {
        self.ops
            .iter()
            .filter_map(|slot| slot.name.get().map(|name| (*name, slot)))
    }
}

impl OpSlot {
    pub fn results(&self) -> [u64; RESULTS.len()] {
        std::array::from_fn(|i| self.results[i].load(Ordering::Relaxed))
    }

    pub fn latency(&self) -> &Histogram {
        &self.latency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operation_gets_its_own_slot_and_keeps_it() {
        let m = ShardMetrics::new(0, true);
        m.request("kv_put", 0, 1_000);
        m.request("kv_get", 2, 1_000);
        m.request("kv_put", 0, 1_000);
        let ops: std::collections::HashMap<_, _> =
            m.ops().map(|(name, slot)| (name, slot.results())).collect();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops["kv_put"][0], 2);
        assert_eq!(ops["kv_get"][2], 1);
    }

    /// What counting one request costs the shard: the two clock reads (admitted,
    /// answered) and `request` (`cargo test --release -p flo-runtime --lib request_cost --
    /// --ignored --nocapture`).
    #[test]
    #[ignore = "a measurement: run it by name, with --release"]
    fn request_cost() {
        let m = ShardMetrics::new(0, true);
        let ops = ["kv_put", "kv_get", "invoke", "workflow_start"];
        let rounds = 4_000_000u64;
        let started = std::time::Instant::now();
        for i in 0..rounds {
            let since = std::time::Instant::now();
            let op = ops[(i % 4) as usize];
            let elapsed_ns = std::hint::black_box(since.elapsed().as_nanos() as u64);
            m.request(op, 0, elapsed_ns);
        }
        let per = started.elapsed().as_nanos() as f64 / rounds as f64;
        let counted: u64 = m.ops().map(|(_, s)| s.results()[0]).sum();
        assert_eq!(counted, rounds);
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            let since = std::time::Instant::now();
            std::hint::black_box(since.elapsed().as_nanos() as u64);
        }
        let clock = started.elapsed().as_nanos() as f64 / rounds as f64;
        eprintln!("counting a request: {per:.1} ns, of which the two clock reads {clock:.1} ns");
    }

    #[test]
    fn a_webhook_attempt_counts_as_delivered_on_2xx_refused_on_another_status_else_failed() {
        let m = ShardMetrics::new(0, true);
        for result in [Ok(200), Ok(204), Ok(302), Ok(500), Err("no answer".into())] {
            m.webhook_attempt(&result);
        }
        let counted: Vec<u64> = m
            .webhook_attempts
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counted, [2, 2, 1]);
    }

    #[test]
    fn a_publication_waits_for_no_reader() {
        let m = ShardMetrics::new(0, true);
        let gauges = Gauges {
            last_lsn: 7,
            ..Gauges::default()
        };
        let held = m.published.lock().unwrap();
        m.publish(gauges.clone(), &RunsEnded::default(), &Counts::default());
        drop(held);
        assert_eq!(m.published().gauges.last_lsn, 0, "skipped while read");
        m.publish(gauges, &RunsEnded::default(), &Counts::default());
        assert_eq!(m.published().gauges.last_lsn, 7);
    }
}
