//! The whole server's metrics and their encoding in the Prometheus text format (by
//! `prometheus-client`: a collector that reads the shards' atomics and their published
//! numbers at each scrape). Every name and label is listed in docs/operations.md, "Metrics
//! and health".

use super::histogram::HistogramValues;
use super::shard::{
    EXEC_RESULTS, FAILURE_REASONS, Published, RESULTS, ShardMetrics, WEBHOOK_RESULTS,
};
use flo_engine::{
    FINAL_STATUSES, GroupDepth, LIVE_STATUSES, RUN_KINDS, RUN_LATENCY_BOUNDS_MS,
    SLOT_WAIT_BOUNDS_MS,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Everything a scrape reads, shared by the shards (each writes its own `ShardMetrics`)
/// and the HTTP thread.
#[derive(Debug)]
pub(crate) struct ServerMetrics {
    pub shards: Vec<Arc<ShardMetrics>>,
    /// Client connections open, over all shards (the listeners' own count).
    pub connections: Arc<AtomicUsize>,
    /// Every shard started and no stop was asked.
    pub ready: AtomicBool,
    /// HTTP requests refused for want of a good token.
    pub http_denials: AtomicU64,
}

impl ServerMetrics {
    /// `counting`: whether the shards count (an HTTP port reads them).
    pub fn new(shards: u32, connections: Arc<AtomicUsize>, counting: bool) -> ServerMetrics {
        ServerMetrics {
            shards: (0..shards)
                .map(|s| Arc::new(ShardMetrics::new(s, counting)))
                .collect(),
            connections,
            ready: AtomicBool::new(false),
            http_denials: AtomicU64::new(0),
        }
    }

    /// The shards not serving yet (all serve once `ready`).
    pub fn shards_not_serving(&self) -> Vec<u32> {
        self.shards
            .iter()
            .filter(|s| !s.serving.load(Ordering::Relaxed))
            .map(|s| s.shard)
            .collect()
    }

    /// A registry holding the one collector of these metrics.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(self.clone())));
        registry
    }
}

/// The metrics in the Prometheus text format.
pub(crate) fn encode_text(registry: &Registry) -> Result<String, fmt::Error> {
    let mut text = String::with_capacity(64 << 10);
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry)?;
    Ok(text)
}

#[derive(Debug)]
struct Exporter(Arc<ServerMetrics>);

/// A shard's live counters and what it last published, read once per scrape.
struct ShardView<'a> {
    live: &'a ShardMetrics,
    label: String,
    published: Published,
}

impl Collector for Exporter {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        let m = &self.0;
        let shards: Vec<ShardView> = m
            .shards
            .iter()
            .map(|s| ShardView {
                live: s,
                label: s.shard.to_string(),
                published: s.published(),
            })
            .collect();
        encode_server(&mut e, m)?;
        encode_requests(&mut e, &shards)?;
        encode_log(&mut e, &shards)?;
        encode_storage(&mut e, &shards)?;
        encode_runs(&mut e, &shards)?;
        encode_wasm(&mut e, &shards)?;
        encode_queues(&mut e, &shards)?;
        encode_workers(&mut e, &shards)?;
        encode_stream_groups(&mut e, &shards)?;
        encode_webhooks(&mut e, &shards)
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// A counter family read from each shard's published numbers: name, help, reader.
type CounterFamily = (&'static str, &'static str, fn(&Published) -> u64);
fn shard_labels<'a>(s: &'a ShardView) -> Labels<'a> {
    vec![("shard", s.label.as_str())]
}

fn counter(m: &mut MetricEncoder, labels: &impl EncodeLabelSet, v: u64) -> fmt::Result {
    m.encode_family(labels)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge(m: &mut MetricEncoder, labels: &impl EncodeLabelSet, v: i64) -> fmt::Result {
    m.encode_family(labels)?.encode_gauge(&v)
}

fn histogram(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    h: HistogramValues,
) -> fmt::Result {
    m.encode_family(labels)?
        .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)
}

/// One counter per shard.
fn shard_counters(
    e: &mut DescriptorEncoder,
    shards: &[ShardView],
    name: &str,
    help: &str,
    value: impl Fn(&ShardMetrics) -> u64,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for s in shards {
        counter(&mut m, &shard_labels(s), value(s.live))?;
    }
    Ok(())
}

/// One gauge per shard, from what it published.
fn shard_gauges(
    e: &mut DescriptorEncoder,
    shards: &[ShardView],
    name: &str,
    help: &str,
    value: impl Fn(&Published) -> u64,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for s in shards {
        let v = value(&s.published).min(i64::MAX as u64) as i64;
        gauge(&mut m, &shard_labels(s), v)?;
    }
    Ok(())
}

fn encode_server(e: &mut DescriptorEncoder, m: &ServerMetrics) -> fmt::Result {
    let open = m.connections.load(Ordering::Relaxed) as i64;
    let mut c = e.encode_descriptor(
        "flo_connections",
        "Client connections open (binary protocol, all shards).",
        None,
        MetricType::Gauge,
    )?;
    c.encode_gauge(&open)?;
    let mut d = e.encode_descriptor(
        "flo_http_auth_denials",
        "HTTP requests refused for a missing or unknown bearer token.",
        None,
        MetricType::Counter,
    )?;
    d.encode_counter::<NoLabelSet, _, u64>(&m.http_denials.load(Ordering::Relaxed), None)?;
    let mut r = e.encode_descriptor(
        "flo_shard_serving",
        "1 once the shard has recovered its log and listens, else 0.",
        None,
        MetricType::Gauge,
    )?;
    for s in &m.shards {
        let label = s.shard.to_string();
        let serving = i64::from(s.serving.load(Ordering::Relaxed));
        gauge(&mut r, &[("shard", label.as_str())], serving)?;
    }
    Ok(())
}

fn encode_requests(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    let mut m = e.encode_descriptor(
        "flo_requests",
        "Client requests answered, by operation and result (ok or the error code).",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        for (op, slot) in s.live.ops() {
            for (result, n) in RESULTS.iter().zip(slot.results()) {
                if n > 0 {
                    let labels = [("shard", s.label.as_str()), ("op", op), ("result", result)];
                    counter(&mut m, &labels, n)?;
                }
            }
        }
    }
    let mut m = e.encode_descriptor(
        "flo_request_duration_seconds",
        "Time from a request read whole to its answer queued, by operation (waits included).",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        for (op, slot) in s.live.ops() {
            let labels = [("shard", s.label.as_str()), ("op", op)];
            histogram(&mut m, &labels, slot.latency().read())?;
        }
    }
    shard_counters(
        e,
        shards,
        "flo_connections_accepted",
        "Client connections accepted.",
        |s| s.connections_accepted.load(Ordering::Relaxed),
    )?;
    shard_counters(
        e,
        shards,
        "flo_auth_denials",
        "Binary-protocol requests refused by the auth gate.",
        |s| s.auth_denials.load(Ordering::Relaxed),
    )
}

fn encode_log(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    shard_counters(
        e,
        shards,
        "flo_log_batches",
        "Log batches written (one durable O_DSYNC write each).",
        |s| s.log_batches.load(Ordering::Relaxed),
    )?;
    shard_counters(e, shards, "flo_log_records", "Log records written.", |s| {
        s.log_records.load(Ordering::Relaxed)
    })?;
    shard_counters(
        e,
        shards,
        "flo_log_written_bytes",
        "Log bytes written, padding to 4 KiB blocks included.",
        |s| s.log_bytes.load(Ordering::Relaxed),
    )?;
    let mut m = e.encode_descriptor(
        "flo_log_batch_records",
        "Records per log batch (group commit).",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        histogram(&mut m, &shard_labels(s), s.live.batch_records.read())?;
    }
    let mut m = e.encode_descriptor(
        "flo_log_write_seconds",
        "Time of each log batch's write, durable when it returns (O_DSYNC: its sync included).",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        histogram(&mut m, &shard_labels(s), s.live.write_time.read())?;
    }
    shard_gauges(
        e,
        shards,
        "flo_log_lsn",
        "Last log sequence number appended.",
        |p| p.gauges.last_lsn,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_log_durable_lsn",
        "Last log sequence number synced to disk.",
        |p| p.gauges.durable_lsn,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_log_durable_lag_records",
        "Records appended and not yet synced to disk.",
        |p| p.gauges.last_lsn.saturating_sub(p.gauges.durable_lsn),
    )
}

fn encode_storage(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    shard_gauges(e, shards, "flo_log_segments", "Log segment files.", |p| {
        u64::from(p.gauges.segments)
    })?;
    shard_gauges(
        e,
        shards,
        "flo_disk_bytes",
        "Bytes of log segments and snapshots on disk.",
        |p| p.gauges.disk_bytes,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_disk_full",
        "1 while the shard is read-only for lack of disk space.",
        |p| u64::from(p.gauges.disk_full),
    )?;
    shard_gauges(
        e,
        shards,
        "flo_snapshot_lsn",
        "Log sequence number of the newest snapshot (0: none).",
        |p| p.gauges.snapshot_lsn,
    )?;
    let now_ms = flo_engine::clock::Clock::now_ms(&flo_engine::clock::SystemClock);
    let mut m = e.encode_descriptor(
        "flo_snapshot_age_seconds",
        "Time since the newest snapshot was written (absent without one).",
        None,
        MetricType::Gauge,
    )?;
    for s in shards
        .iter()
        .filter(|s| s.published.gauges.snapshot_lsn > 0)
    {
        let age_ms = now_ms.saturating_sub(s.published.gauges.snapshot_at_ms);
        m.encode_family(&shard_labels(s))?
            .encode_gauge(&(age_ms as f64 / 1000.0))?;
    }
    shard_gauges(e, shards, "flo_kv_keys", "KV keys held.", |p| {
        p.gauges.kv_keys
    })?;
    shard_gauges(
        e,
        shards,
        "flo_stream_records",
        "Stream records held.",
        |p| p.gauges.stream_records,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_stream_bytes",
        "Payload bytes of the stream records held.",
        |p| p.gauges.stream_bytes,
    )
}

fn encode_runs(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    let mut m = e.encode_descriptor(
        "flo_runs_finished",
        "Runs that became final since the server started, by kind, action or workflow name \
         (at most 100 per kind and shard, then _other) and final status.",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        let ended = &s.published.ended;
        for (kind, names) in RUN_KINDS.iter().zip(&ended.by_name) {
            for (name, counts) in names {
                for (status, &n) in FINAL_STATUSES.iter().zip(counts) {
                    if n > 0 {
                        let labels = [
                            ("shard", s.label.as_str()),
                            ("kind", kind),
                            ("name", name.as_str()),
                            ("status", status),
                        ];
                        counter(&mut m, &labels, n)?;
                    }
                }
            }
        }
    }
    let mut m = e.encode_descriptor(
        "flo_run_duration_seconds",
        "Time from a run's creation to its final status, by kind.",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        for (k, kind) in RUN_KINDS.iter().enumerate() {
            let labels = [("shard", s.label.as_str()), ("kind", kind)];
            let ended = &s.published.ended;
            let h = ms_histogram(
                &RUN_LATENCY_BOUNDS_MS,
                &ended.latency[k],
                ended.latency_sum_ms[k],
            );
            histogram(&mut m, &labels, h)?;
        }
    }
    let mut m = e.encode_descriptor(
        "flo_runs_in_memory",
        "Runs held in memory (not final, or final and not yet archived), by kind.",
        None,
        MetricType::Gauge,
    )?;
    for s in shards {
        let g = &s.published.gauges;
        for (kind, n) in RUN_KINDS.iter().zip([g.action_runs, g.workflow_runs]) {
            gauge(
                &mut m,
                &[("shard", s.label.as_str()), ("kind", kind)],
                n as i64,
            )?;
        }
    }
    let mut m = e.encode_descriptor(
        "flo_runs_by_status",
        "Runs held in memory by kind and status (absent for a kind with more than 10,000 \
         runs in memory on the shard: not counted).",
        None,
        MetricType::Gauge,
    )?;
    for s in shards {
        let census = &s.published.gauges.runs_by_status;
        for (k, kind) in RUN_KINDS.iter().enumerate() {
            let Some(counts) = census[k] else {
                continue;
            };
            for (status, &n) in LIVE_STATUSES.iter().zip(&counts) {
                if k == ACTION_KIND && matches!(*status, "waiting" | "on_hold") {
                    continue;
                }
                let labels = [
                    ("shard", s.label.as_str()),
                    ("kind", kind),
                    ("status", status),
                ];
                gauge(&mut m, &labels, n as i64)?;
            }
        }
    }
    shard_gauges(
        e,
        shards,
        "flo_runs_archived",
        "Finished runs retained (found through the run index).",
        |p| p.gauges.archived_runs,
    )
}

/// The index of action runs in `RUN_KINDS`.
const ACTION_KIND: usize = 0;

/// Buckets counted in ms (each bucket's own count, the last beyond `bounds_ms`) as a
/// histogram in seconds.
fn ms_histogram(bounds_ms: &[u64], counts: &[u64], sum_ms: u64) -> HistogramValues {
    debug_assert_eq!(bounds_ms.len() + 1, counts.len());
    let bounds = bounds_ms
        .iter()
        .map(|&ms| ms as f64 / 1000.0)
        .chain(std::iter::once(f64::INFINITY));
    HistogramValues {
        buckets: bounds.zip(counts.iter().copied()).collect(),
        count: counts.iter().sum(),
        sum: sum_ms as f64 / 1000.0,
    }
}

fn encode_wasm(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    let mut m = e.encode_descriptor(
        "flo_wasm_executions",
        "WebAssembly executions ended, by result (ok, failed, timed_out, cancelled).",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        for (result, n) in EXEC_RESULTS.iter().zip(&s.live.executions) {
            let labels = [("shard", s.label.as_str()), ("result", result)];
            counter(&mut m, &labels, n.load(Ordering::Relaxed))?;
        }
    }
    let mut m = e.encode_descriptor(
        "flo_wasm_executions_reused",
        "WebAssembly executions that ran in an instance kept from an earlier execution \
         (modules exporting flo_reuse_instance).",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        let n = s.live.executions_reused.load(Ordering::Relaxed);
        counter(&mut m, &shard_labels(s), n)?;
    }
    let mut m = e.encode_descriptor(
        "flo_wasm_execution_seconds",
        "Time of each WebAssembly execution, module lookup and guest reads included.",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        histogram(&mut m, &shard_labels(s), s.live.execution_time.read())?;
    }
    let mut m = e.encode_descriptor(
        "flo_wasm_failures",
        "WebAssembly executions failed, by reason (a guest's error, trap, timeout, memory \
         limit, bad output, init or instantiation).",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        for (reason, n) in FAILURE_REASONS.iter().zip(&s.live.failures) {
            let labels = [("shard", s.label.as_str()), ("reason", reason)];
            counter(&mut m, &labels, n.load(Ordering::Relaxed))?;
        }
    }
    let mut m = e.encode_descriptor(
        "flo_wasm_slot_wait_seconds",
        "Time from a WebAssembly run due to its execution started (waiting for a slot), \
         per execution, in ms steps.",
        None,
        MetricType::Histogram,
    )?;
    for s in shards {
        let counts = &s.published.counts;
        let h = ms_histogram(
            &SLOT_WAIT_BOUNDS_MS,
            &counts.slot_wait,
            counts.slot_wait_sum_ms,
        );
        histogram(&mut m, &shard_labels(s), h)?;
    }
    shard_gauges(
        e,
        shards,
        "flo_wasm_slots_busy",
        "WebAssembly executions in progress (each holds one slot).",
        |p| p.gauges.executions,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_wasm_slots",
        "WebAssembly slots of the shard (--max-concurrent-executions).",
        |p| p.gauges.wasm_slots,
    )
}

fn encode_queues(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    shard_gauges(
        e,
        shards,
        "flo_run_waits",
        "Clients waiting for a run to become final.",
        |p| p.gauges.run_waits,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_kv_parked_reads",
        "KV reads parked until their key is written or their deadline.",
        |p| p.gauges.kv_waits,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_webhook_deliveries_pending",
        "Webhook deliveries waiting for an attempt or a retry (in flight included).",
        |p| p.gauges.webhooks_pending,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_webhook_deliveries_failed",
        "Webhook deliveries given up after their last attempt, kept for redelivery.",
        |p| p.gauges.webhooks_failed,
    )?;
    shard_gauges(
        e,
        shards,
        "flo_worker_awaits",
        "Worker task awaits open on their home shard.",
        |p| p.gauges.awaits,
    )?;
    let mut m = e.encode_descriptor(
        "flo_tasks_queued",
        "Action runs ready and queued: for a WebAssembly slot (wasm) or a worker (worker); \
         a run cancelled while queued counts until its entry is taken.",
        None,
        MetricType::Gauge,
    )?;
    for s in shards {
        let g = &s.published.gauges;
        for (queue, n) in [("wasm", g.wasm_ready), ("worker", g.tasks_ready)] {
            gauge(
                &mut m,
                &[("shard", s.label.as_str()), ("queue", queue)],
                n as i64,
            )?;
        }
    }
    let mut m = e.encode_descriptor(
        "flo_timers",
        "Timers set: action runs not yet due (delay, retry), leases of tasks out, workflow \
         timers (retry, poll, signal deadline); one whose run moved on counts until due.",
        None,
        MetricType::Gauge,
    )?;
    for s in shards {
        let g = &s.published.gauges;
        let kinds = [
            ("run_delay", g.delayed_runs),
            ("lease", g.leases),
            ("workflow", g.workflow_timers),
        ];
        for (kind, n) in kinds {
            gauge(
                &mut m,
                &[("shard", s.label.as_str()), ("kind", kind)],
                n as i64,
            )?;
        }
    }
    Ok(())
}

fn encode_workers(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    const STATUSES: [&str; 4] = ["active", "idle", "draining", "unhealthy"];
    let mut m = e.encode_descriptor(
        "flo_workers",
        "Workers registered on their home shard, by status.",
        None,
        MetricType::Gauge,
    )?;
    for s in shards {
        for (status, &n) in STATUSES.iter().zip(&s.published.gauges.workers) {
            let labels = [("shard", s.label.as_str()), ("status", status)];
            gauge(&mut m, &labels, n as i64)?;
        }
    }
    let families: [CounterFamily; 2] = [
        (
            "flo_worker_tasks_leased",
            "Tasks of user-hosted actions leased to workers.",
            |p| p.counts.tasks_leased,
        ),
        (
            "flo_worker_leases_expired",
            "Task leases that ran out before their worker reported (each a failed attempt).",
            |p| p.counts.leases_expired,
        ),
    ];
    for (name, help, value) in families {
        let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for s in shards {
            counter(&mut m, &shard_labels(s), value(&s.published))?;
        }
    }
    Ok(())
}

fn encode_stream_groups(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    let families = [
        (
            "flo_stream_group_pending",
            "Stream records delivered to a consumer group and not yet acked, by stream and \
             group (at most 100 pairs per shard, then _other).",
        ),
        (
            "flo_stream_group_lag",
            "Stream records not yet delivered to a consumer group, by stream and group (at \
             most 100 pairs per shard, then _other).",
        ),
    ];
    let values: [fn(&GroupDepth) -> u64; 2] = [|g| g.pending, |g| g.lag];
    for ((name, help), value) in families.into_iter().zip(values) {
        let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for s in shards {
            for g in &s.published.gauges.stream_groups {
                let labels = [
                    ("shard", s.label.as_str()),
                    ("stream", g.stream.as_str()),
                    ("group", g.group.as_str()),
                ];
                gauge(&mut m, &labels, value(g) as i64)?;
            }
        }
    }
    Ok(())
}

fn encode_webhooks(e: &mut DescriptorEncoder, shards: &[ShardView]) -> fmt::Result {
    let mut m = e.encode_descriptor(
        "flo_webhook_attempts",
        "Webhook delivery attempts answered, by result: delivered (a 2xx status), refused \
         (another status) or failed (no answer: connection, timeout, bad URL, a stop).",
        None,
        MetricType::Counter,
    )?;
    for s in shards {
        for (result, n) in WEBHOOK_RESULTS.iter().zip(&s.live.webhook_attempts) {
            let labels = [("shard", s.label.as_str()), ("result", result)];
            counter(&mut m, &labels, n.load(Ordering::Relaxed))?;
        }
    }
    Ok(())
}
