//! The overview's numbers, read from the metrics the shards keep (atomics and what each
//! shard publishes once a second): no shard is asked anything. Counters are totals since
//! the server started; the page polls and shows rates and latencies over the last interval
//! from the difference of two reads.

use crate::metrics::ServerMetrics;
use flo_engine::clock::{Clock, SystemClock};
use flo_engine::{FINAL_STATUSES, RUN_KINDS, RUN_LATENCY_BOUNDS_MS};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// Operations that wait for something (a task, a run to end) by design: their time is not
/// the server's latency, so the overview's latency leaves them out.
fn waits(op: &str) -> bool {
    op.ends_with("_await") || op.ends_with("_wait")
}

pub(crate) fn overview(m: &ServerMetrics) -> Value {
    let mut requests = 0u64;
    let mut errors = 0u64;
    let mut latency: Vec<u64> = Vec::new();
    let mut bounds_ms: Vec<Value> = Vec::new();
    let mut finished = [[0u64; FINAL_STATUSES.len()]; RUN_KINDS.len()];
    let mut run_latency = [[0u64; RUN_LATENCY_BOUNDS_MS.len() + 1]; RUN_KINDS.len()];
    let mut in_memory = [0u64; RUN_KINDS.len()];
    let mut shards = Vec::with_capacity(m.shards.len());
    let mut log = [0u64; 3];
    for s in &m.shards {
        let mut shard_requests = 0;
        for (op, slot) in s.ops() {
            let results = slot.results();
            let total: u64 = results.iter().sum();
            shard_requests += total;
            errors += total - results[0];
            if waits(op) {
                continue;
            }
            let read = slot.latency().read();
            if latency.is_empty() {
                latency = vec![0; read.buckets.len()];
                bounds_ms = read.buckets.iter().map(|(b, _)| bound_ms(*b)).collect();
            }
            for (sum, (_, n)) in latency.iter_mut().zip(&read.buckets) {
                *sum += n;
            }
        }
        requests += shard_requests;
        let published = s.published();
        let (g, ended) = (&published.gauges, &published.ended);
        for kind in 0..RUN_KINDS.len() {
            for (sum, n) in finished[kind].iter_mut().zip(ended.counts[kind]) {
                *sum += n;
            }
            for (sum, n) in run_latency[kind].iter_mut().zip(ended.latency[kind]) {
                *sum += n;
            }
        }
        in_memory[0] += g.action_runs;
        in_memory[1] += g.workflow_runs;
        let shard_log = [
            s.log_records.load(Ordering::Relaxed),
            s.log_batches.load(Ordering::Relaxed),
            s.log_bytes.load(Ordering::Relaxed),
        ];
        for (sum, n) in log.iter_mut().zip(shard_log) {
            *sum += n;
        }
        shards.push(json!({
            "shard": s.shard,
            "serving": s.serving.load(Ordering::Relaxed),
            "requests": shard_requests,
            "lsn": g.last_lsn,
            "durable_lsn": g.durable_lsn,
            "segments": g.segments,
            "disk_bytes": g.disk_bytes,
            "disk_full": g.disk_full,
            "snapshot_lsn": g.snapshot_lsn,
            "action_runs": g.action_runs,
            "workflow_runs": g.workflow_runs,
            "archived_runs": g.archived_runs,
            "executions": g.executions,
            "wasm_slots": g.wasm_slots,
            "kv_keys": g.kv_keys,
            "stream_records": g.stream_records,
            "workers": g.workers,
            "log_records": shard_log[0],
        }));
    }
    let runs: serde_json::Map<String, Value> = RUN_KINDS
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            let by_status: serde_json::Map<String, Value> = FINAL_STATUSES
                .iter()
                .zip(finished[k])
                .map(|(status, n)| (status.to_string(), json!(n)))
                .collect();
            let doc = json!({
                "in_memory": in_memory[k],
                "finished": by_status,
                "latency": run_latency[k],
            });
            (kind.to_string(), doc)
        })
        .collect();
    let run_bounds: Vec<Value> = RUN_LATENCY_BOUNDS_MS
        .iter()
        .map(|&ms| json!(ms))
        .chain(std::iter::once(Value::Null))
        .collect();
    json!({
        "at_ms": SystemClock.now_ms(),
        "ready": m.ready.load(Ordering::Relaxed),
        "connections": m.connections.load(Ordering::Relaxed),
        "shards": shards,
        "requests": {
            "total": requests,
            "errors": errors,
            "latency_bounds_ms": bounds_ms,
            "latency": latency,
        },
        "runs": runs,
        "run_latency_bounds_ms": run_bounds,
        "log": {"records": log[0], "batches": log[1], "bytes": log[2]},
    })
}

/// A bucket's upper bound in milliseconds (None: beyond every bound).
fn bound_ms(seconds: f64) -> Value {
    match seconds.is_finite() {
        true => json!(seconds * 1000.0),
        false => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn requests_add_up_over_shards_and_waits_stay_out_of_the_latency() {
        let m = ServerMetrics::new(2, Arc::new(Default::default()), true);
        m.shards[0].request("kv_put", 0, 1_000_000);
        m.shards[1].request("kv_put", 1, 1_000_000);
        m.shards[1].request("task_await", 0, 30_000_000_000);
        let doc = overview(&m);
        assert_eq!(doc["requests"]["total"], 3);
        assert_eq!(doc["requests"]["errors"], 1);
        let counted: u64 = doc["requests"]["latency"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(counted, 2);
        assert_eq!(doc["shards"].as_array().unwrap().len(), 2);
        assert_eq!(doc["runs"]["workflow"]["finished"]["completed"], 0);
    }
}
