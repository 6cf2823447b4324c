//! Stream workloads. `stream-append`: each operation appends `--batch` records (keyed
//! `k-{n % keys}` when `--keys` is given, else unkeyed) of `--value-bytes` bytes to the
//! stream `loadtest-stream`. `stream-consume`: the same appends, each record's payload the
//! moment it was queued (`{"sent_ns":N}`), consumed by `--workers` consumers of the shared
//! group `loadtest` that each read up to `--await-batch` records at a time and ack them in
//! one request; latency is append-to-ack.

use crate::driver::{self, describe, new_histogram};
use crate::progress;
use crate::workers::TaskOutcome;
use crate::workload::{Generator, decode_sent_ns, encode_sent_ns, sent_ns};
use flo::protocol::{
    GroupConfig, GroupReadSpec, GroupStart, Op, Reply, Request, StreamConfig, StreamRecordIn,
};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub const STREAM: &str = "loadtest-stream";
pub const GROUP: &str = "loadtest";
/// Longest a consumer's read waits: short, so consumers notice the end of the run.
const READ_BLOCK_MS: u64 = 500;

/// Creates the stream (and, for `stream-consume`, the group from its start).
pub fn prepare(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    group: bool,
) -> Result<(), String> {
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    client
        .create_stream(STREAM, StreamConfig::default())
        .map_err(|e| format!("cannot create {STREAM}: {e}"))?;
    if group {
        let config = GroupConfig {
            start: GroupStart::Start,
            ..Default::default()
        };
        client
            .create_group(STREAM, GROUP, config)
            .map_err(|e| format!("cannot create the group {GROUP}: {e}"))?;
    }
    Ok(())
}

/// `stream-append` / the appending side of `stream-consume`.
pub struct StreamAppend {
    namespace: String,
    keys: Option<u64>,
    batch: usize,
    value: Vec<u8>,
    /// Payloads carry their send time (from `epoch`) instead of `value`.
    epoch: Option<Instant>,
}

impl StreamAppend {
    pub fn new(
        namespace: &str,
        keys: Option<u64>,
        batch: u32,
        value_bytes: usize,
        epoch: Option<Instant>,
    ) -> Self {
        StreamAppend {
            namespace: namespace.to_string(),
            keys,
            batch: batch.max(1) as usize,
            value: (0..value_bytes).map(|i| b'a' + (i % 26) as u8).collect(),
            epoch,
        }
    }
}

impl Generator for StreamAppend {
    fn fill(&mut self, n: u64, intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::StreamAppend { .. }) {
            let record = StreamRecordIn {
                key: self.keys.map(|_| String::with_capacity(24)),
                headers: Default::default(),
                payload: self.value.clone(),
            };
            *op = Op::StreamAppend {
                namespace: self.namespace.clone(),
                stream: STREAM.into(),
                records: vec![record; self.batch],
                partition: None,
            };
        }
        let Op::StreamAppend { records, .. } = op else {
            return;
        };
        let sent_ns = self.epoch.map(|epoch| sent_ns(epoch, intended));
        for (i, r) in records.iter_mut().enumerate() {
            if let (Some(keys), Some(key)) = (self.keys, r.key.as_mut()) {
                key.clear();
                let _ = write!(key, "k-{}", (n * self.batch as u64 + i as u64) % keys);
            }
            if let Some(sent_ns) = sent_ns {
                encode_sent_ns(sent_ns, &mut r.payload);
            }
        }
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::StreamAppended { ids } if ids.len() == self.batch => Ok(()),
            other => Err(format!("unexpected reply to a stream append: {other:?}")),
        }
    }
}

pub struct ConsumeConfig {
    pub addr: String,
    pub token: Option<String>,
    pub namespace: String,
    pub consumers: usize,
    pub read_batch: u32,
    /// Records per append: the records expected are the appends that succeeded × this.
    pub batch: u32,
    pub max_duration: Duration,
    pub epoch: Instant,
}

struct Shared {
    expected: AtomicU64,
    acked: AtomicU64,
    last_ack_ns: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// Runs the consumers while `append` runs, until every appended record was acked.
pub fn run(
    cfg: &ConsumeConfig,
    append: impl FnOnce() -> driver::Outcome,
) -> (driver::Outcome, TaskOutcome) {
    let shared = Shared {
        expected: AtomicU64::new(u64::MAX),
        acked: AtomicU64::new(0),
        last_ack_ns: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
    };
    let barrier = Barrier::new(cfg.consumers + 1);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.consumers)
            .map(|i| {
                let (shared, barrier) = (&shared, &barrier);
                scope.spawn(move || consume(i, cfg, shared, barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let appended = append();
        let expected = appended.ops.saturating_sub(appended.errors) * cfg.batch as u64;
        shared.expected.store(expected, Relaxed);
        let mut outcome = no_outcome(expected);
        for (i, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(Ok((latency, timed_out))) => {
                    outcome.latency_us.add(&latency).expect("same bounds");
                    outcome.hit_time_limit |= timed_out;
                }
                Ok(Err(e)) => outcome.failures.push(format!("consumer {i}: {e}")),
                Err(_) => outcome.failures.push(format!("consumer {i}: panicked")),
            }
        }
        outcome.completed = shared.acked.load(Relaxed);
        outcome.errors = shared.errors.load(Relaxed);
        outcome.first_error = shared.first_error.lock().unwrap().take();
        let start_ns = u64::try_from(start.duration_since(cfg.epoch).as_nanos()).unwrap_or(0);
        let last = shared.last_ack_ns.load(Relaxed);
        outcome.elapsed = if last > start_ns {
            Duration::from_nanos(last - start_ns)
        } else {
            start.elapsed()
        };
        (appended, outcome)
    })
}

/// Nothing done yet of `expected` records.
fn no_outcome(expected: u64) -> TaskOutcome {
    TaskOutcome {
        latency_us: new_histogram(),
        completed: 0,
        expected,
        errors: 0,
        first_error: None,
        failures: Vec::new(),
        elapsed: Duration::ZERO,
        hit_time_limit: false,
    }
}

type Consumed = Result<(hdrhistogram::Histogram<u64>, bool), String>;

fn consume(index: usize, cfg: &ConsumeConfig, shared: &Shared, barrier: &Barrier) -> Consumed {
    let opened = driver::open(&cfg.addr, cfg.token.as_deref());
    barrier.wait();
    let (mut conn, _) = opened?;
    let deadline = Instant::now() + cfg.max_duration;
    let mut latency = new_histogram();
    let mut next_id = 2;
    let mut call = |conn: &mut flo::Connection, op: Op| -> Result<Reply, String> {
        next_id += 1;
        conn.queue(&Request { id: next_id, op }).map_err(describe)?;
        conn.flush().map_err(describe)?;
        let response = conn.recv().map_err(describe)?;
        response.result.map_err(|e| e.to_string())
    };
    loop {
        if shared.acked.load(Relaxed) >= shared.expected.load(Relaxed) {
            return Ok((latency, false));
        }
        if Instant::now() >= deadline {
            return Ok((latency, true));
        }
        let read = Op::StreamGroupRead(GroupReadSpec {
            namespace: cfg.namespace.clone(),
            stream: STREAM.into(),
            group: GROUP.into(),
            consumer: format!("consumer-{index}"),
            count: Some(cfg.read_batch),
            block_ms: Some(READ_BLOCK_MS),
        });
        let records = match call(&mut conn, read) {
            Ok(Reply::StreamRecords { records, .. }) => records,
            Ok(other) => return Err(format!("unexpected reply to a group read: {other:?}")),
            Err(e) => {
                shared.note(e);
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        let ids = records.iter().map(|r| r.id).collect();
        let ack = Op::StreamGroupAck {
            namespace: cfg.namespace.clone(),
            stream: STREAM.into(),
            group: GROUP.into(),
            ids,
        };
        match call(&mut conn, ack) {
            Ok(Reply::GroupAcked { count }) => {
                let now_ns = u64::try_from(cfg.epoch.elapsed().as_nanos()).unwrap_or(0);
                for r in &records {
                    if let Some(sent) = decode_sent_ns(&r.payload) {
                        let _ = latency.record((now_ns.saturating_sub(sent) / 1000).max(1));
                    }
                }
                shared.acked.fetch_add(count, Relaxed);
                shared.last_ack_ns.fetch_max(now_ns, Relaxed);
            }
            Ok(other) => return Err(format!("unexpected reply to an ack: {other:?}")),
            Err(e) => shared.note(e),
        }
    }
}

impl Shared {
    fn note(&self, message: String) {
        self.errors.fetch_add(1, Relaxed);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            progress::note(&format!("flo-loadtest: first consumer error: {message}"));
            *first = Some(message);
        }
    }
}

/// The workflow the `trigger` workload's records start: one step on `loadtest-ok`.
pub const TRIGGER_WORKFLOW: &str = "loadtest-trigger";
const TRIGGER_YAML: &str = r#"kind: Workflow
name: loadtest-trigger
version: "1"
trigger:
  stream: loadtest-stream
start:
  run: "@actions/loadtest-ok"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;

/// Registers `loadtest-ok`, creates the stream and the workflow its records trigger.
pub fn prepare_trigger(addr: &str, token: Option<&str>, namespace: &str) -> Result<(), String> {
    crate::workload::register_wasm_action(addr, token, namespace)?;
    prepare(addr, token, namespace, false)?;
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    client
        .create_workflow(TRIGGER_YAML)
        .map_err(|e| format!("cannot create {TRIGGER_WORKFLOW}: {e}"))?;
    Ok(())
}

/// How often the `trigger` workload looks at the trigger's progress.
const TRIGGER_POLL: Duration = Duration::from_millis(20);

/// Runs the appends, then waits until the trigger acknowledged every record and no
/// workflow run is left in flight: every run started and completed.
pub fn run_trigger(
    cfg: &ConsumeConfig,
    append: impl FnOnce() -> driver::Outcome,
) -> (driver::Outcome, TaskOutcome) {
    let start = Instant::now();
    let appended = append();
    let expected = appended.ops.saturating_sub(appended.errors) * cfg.batch as u64;
    let mut outcome = no_outcome(expected);
    let client = flo::Client::connect_as(cfg.addr.as_str(), cfg.token.as_deref())
        .map(|c| c.with_namespace(cfg.namespace.clone()));
    let mut client = match client {
        Ok(c) => c,
        Err(e) => {
            outcome.failures.push(format!("cannot connect: {e}"));
            return (appended, outcome);
        }
    };
    let group = format!("wf-{TRIGGER_WORKFLOW}");
    let deadline = start + cfg.max_duration;
    loop {
        let acked = client
            .groups(STREAM, Some(&group))
            .ok()
            .and_then(|g| g.first().map(|g| g.acked))
            .unwrap_or(0);
        let in_flight = client
            .status()
            .map(|s| s.shards.iter().map(|s| s.workflow_runs).sum::<u64>())
            .unwrap_or(u64::MAX);
        outcome.completed = acked;
        if acked >= expected && in_flight == 0 {
            break;
        }
        if Instant::now() >= deadline {
            outcome.hit_time_limit = true;
            break;
        }
        thread::sleep(TRIGGER_POLL);
    }
    outcome.elapsed = start.elapsed();
    (appended, outcome)
}
