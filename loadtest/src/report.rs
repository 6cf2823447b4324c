//! Final report: human-readable or one JSON document.

use crate::driver::{KindOutcome, Outcome};
use crate::mix::{KINDS, Mix};
use crate::pacing::{LATE_MS, Pace};
use crate::server_stats::Usage;
use crate::workers::TaskOutcome;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::time::Duration;

/// The spawned server, as its `listening` line described it.
pub struct Spawned {
    pub shards: u32,
    pub durability: String,
}

pub struct Report<'a> {
    pub workload: &'static str,
    pub addr: &'a str,
    pub spawned: Option<Spawned>,
    pub connections: u32,
    pub pipeline: u32,
    pub value_bytes: u32,
    pub keys: u64,
    pub requested_ops: u64,
    pub outcome: &'a Outcome,
    /// The worker side of the `worker`, `workflow-worker` and `mixed` workloads.
    pub tasks: Option<Tasks<'a>>,
    /// `--max-outstanding` and the most operations that were outstanding at once.
    pub outstanding: Option<Outstanding>,
    /// `--rate` and `--duration`: the open-loop schedule.
    pub open_loop: Option<OpenLoop>,
    /// The `mixed` workload's blend.
    pub mix: Option<&'a Mix>,
    /// What the spawned server cost while the workload ran.
    pub server_usage: Option<&'a Usage>,
    /// The load generator's own peak resident set.
    pub generator_rss_peak_bytes: Option<u64>,
}

/// What the workers of the `worker`, `workflow-worker` and `mixed` workloads did.
pub struct Tasks<'a> {
    pub action: &'a str,
    pub workers: u32,
    pub await_batch: u32,
    pub outcome: &'a TaskOutcome,
    /// Invokes of the user-hosted action a second (None when workflow steps invoke it).
    pub invokes_per_s: Option<f64>,
}

pub struct Outstanding {
    pub limit: u64,
    pub peak: u64,
}

pub struct OpenLoop {
    pub pace: Pace,
    pub duration: Duration,
    /// Operations the schedule held.
    pub scheduled: u64,
}

/// Latency percentiles in milliseconds.
struct Latency {
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    fn json(&self) -> Value {
        json!({
            "p50": self.p50, "p90": self.p90, "p99": self.p99, "p999": self.p999, "max": self.max,
        })
    }

    /// The percentiles, or null when nothing was recorded.
    fn json_of(h: &Histogram<u64>) -> Value {
        if h.is_empty() {
            Value::Null
        } else {
            Latency::of(h).json()
        }
    }

    fn text(&self) -> String {
        format!(
            "p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            self.p50, self.p90, self.p99, self.p999, self.max
        )
    }
}

fn per_s(count: u64, secs: f64) -> f64 {
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Tasks<'_> {
    fn json(&self) -> Value {
        let o = self.outcome;
        let secs = o.elapsed.as_secs_f64();
        json!({
            "action": self.action,
            "workers": self.workers,
            "await_batch": self.await_batch,
            "invokes_per_s": self.invokes_per_s.map(f64::round),
            "expected": o.expected,
            "completed": o.completed,
            "errors": o.errors,
            "elapsed_s": round3(secs),
            "completed_per_s": per_s(o.completed, secs).round(),
            "latency_ms": Latency::json_of(&o.latency_us),
            "hit_time_limit": o.hit_time_limit,
            "worker_failures": o.failures,
            "first_error": o.first_error,
        })
    }

    fn human(&self, line: &mut impl FnMut(&str, String)) {
        let o = self.outcome;
        let secs = o.elapsed.as_secs_f64();
        line("action", self.action.to_string());
        line(
            "workers",
            format!("{} (await batch {})", self.workers, self.await_batch),
        );
        if let Some(invokes_per_s) = self.invokes_per_s {
            line("invokes/s", format!("{invokes_per_s:.0}"));
        }
        let mut completed = o.completed.to_string();
        if o.completed != o.expected {
            completed.push_str(&format!(" (of {} invoked)", o.expected));
        }
        if o.hit_time_limit {
            completed.push_str(", stopped by --max-secs");
        }
        line("tasks done", completed);
        line("task errors", o.errors.to_string());
        if !o.failures.is_empty() {
            line("failed wkrs", o.failures.len().to_string());
        }
        line(
            "tasks/s",
            format!("{:.0} in {secs:.3} s", per_s(o.completed, secs)),
        );
        if !o.latency_us.is_empty() {
            line("e2e ms", Latency::of(&o.latency_us).text());
        }
    }
}

impl Report<'_> {
    fn latency(&self) -> Latency {
        Latency::of(&self.outcome.latency_us)
    }

    fn elapsed_s(&self) -> f64 {
        self.outcome.elapsed.as_secs_f64()
    }

    fn ops_per_s(&self) -> f64 {
        per_s(self.outcome.ops, self.elapsed_s())
    }

    pub fn json(&self) -> Value {
        let l = self.latency();
        let o = self.outcome;
        let mut doc = json!({
            "workload": self.workload,
            "ops": o.ops,
            "errors": o.errors,
            "elapsed_s": round3(self.elapsed_s()),
            "ops_per_s": self.ops_per_s().round(),
            "latency_ms": l.json(),
            "connections": self.connections,
            "pipeline": self.pipeline,
            "value_bytes": self.value_bytes,
            "keys": self.keys,
            "requested_ops": self.requested_ops,
            "hit_time_limit": o.hit_time_limit,
            "connection_failures": o.failures,
            "first_error": o.first_error,
            "addr": self.addr,
            "server_shards": o.server_shards,
            "spawned": self.spawned.as_ref().map(|s| json!({
                "shards": s.shards,
                "durability": s.durability,
            })),
        });
        if let Some(tasks) = &self.tasks {
            doc["tasks"] = tasks.json();
        }
        doc["max_outstanding"] = self
            .outstanding
            .as_ref()
            .map_or(Value::Null, |b| json!({ "limit": b.limit, "peak": b.peak }));
        doc["open_loop"] = self
            .open_loop
            .as_ref()
            .map_or(Value::Null, |open| open_loop_json(open, o));
        if let Some(mix) = self.mix {
            doc["mix"] = json!(mix.describe());
            doc["kinds"] = kinds_json(mix, o);
        }
        doc["server"] = self
            .server_usage
            .map_or(Value::Null, |usage| usage_json(usage, o.ops));
        doc["generator_peak_rss_bytes"] = json!(self.generator_rss_peak_bytes);
        doc
    }

    pub fn human(&self) -> String {
        let l = self.latency();
        let o = self.outcome;
        let server = match (&self.spawned, o.server_shards) {
            (Some(s), _) => format!(
                "spawned at {}: {} shards, durability {}",
                self.addr, s.shards, s.durability
            ),
            (None, Some(shards)) => format!("{} ({shards} shards)", self.addr),
            (None, None) => self.addr.to_string(),
        };
        let mut out = String::new();
        let mut line = |name: &str, value: String| out.push_str(&format!("{name:<13}{value}\n"));
        line("workload", self.workload.to_string());
        line("server", server);
        line("connections", self.connections.to_string());
        line("pipeline", self.pipeline.to_string());
        line("value bytes", self.value_bytes.to_string());
        line("keys", self.keys.to_string());
        let mut ops = o.ops.to_string();
        if o.ops != self.requested_ops {
            ops.push_str(&format!(" (of {} requested)", self.requested_ops));
        }
        if o.hit_time_limit {
            ops.push_str(", stopped by --max-secs");
        }
        line("ops", ops);
        line("errors", o.errors.to_string());
        if !o.failures.is_empty() {
            line("failed conns", o.failures.len().to_string());
        }
        line("elapsed", format!("{:.3} s", self.elapsed_s()));
        line("throughput", format!("{:.0} ops/s", self.ops_per_s()));
        if let Some(b) = &self.outstanding {
            line(
                "outstanding",
                format!(
                    "at most {} (--max-outstanding), {} at the peak",
                    b.limit, b.peak
                ),
            );
        }
        match &self.open_loop {
            Some(open) => {
                open_loop_human(open, o, &mut line);
                line(
                    "latency ms",
                    format!("{} (from the intended send time)", l.text()),
                );
            }
            None => line("latency ms", l.text()),
        }
        if let Some(mix) = self.mix {
            kinds_human(mix, o, &mut line);
        }
        if let Some(tasks) = &self.tasks {
            tasks.human(&mut line);
        }
        if let Some(usage) = self.server_usage {
            line("server use", usage_human(usage, o.ops));
        }
        if let Some(bytes) = self.generator_rss_peak_bytes {
            line("generator", format!("peak RSS {}", mebibytes(bytes)));
        }
        out
    }
}

/// The operations sent a second: `sent` over the span from the start to one interval past
/// the last send (exactly the rate when every operation left on time).
fn achieved_per_s(open: &OpenLoop, o: &Outcome) -> f64 {
    let interval = 1.0 / open.pace.rate_per_s() as f64;
    per_s(o.sending.sent, o.sending.span.as_secs_f64() + interval)
}

/// Whether the generator failed its schedule: an operation sent late, or not all sent.
fn fell_behind(open: &OpenLoop, o: &Outcome) -> bool {
    o.sending.late > 0 || o.sending.sent < open.scheduled
}

fn open_loop_json(open: &OpenLoop, o: &Outcome) -> Value {
    json!({
        "rate_per_s": open.pace.rate_per_s(),
        "duration_s": round3(open.duration.as_secs_f64()),
        "scheduled_ops": open.scheduled,
        "sent_ops": o.sending.sent,
        "achieved_per_s": achieved_per_s(open, o).round(),
        "send_lag_ms": Latency::json_of(&o.sending.lag_us),
        "late_ms": LATE_MS,
        "late_ops": o.sending.late,
        "fell_behind": fell_behind(open, o),
    })
}

fn open_loop_human(open: &OpenLoop, o: &Outcome, line: &mut impl FnMut(&str, String)) {
    line(
        "open loop",
        format!(
            "{} ops/s for {:.1} s: {} of {} sent, at {:.0} ops/s",
            open.pace.rate_per_s(),
            open.duration.as_secs_f64(),
            o.sending.sent,
            open.scheduled,
            achieved_per_s(open, o)
        ),
    );
    if !o.sending.lag_us.is_empty() {
        line("send lag ms", Latency::of(&o.sending.lag_us).text());
    }
    if fell_behind(open, o) {
        line(
            "FELL BEHIND",
            format!(
                "{} ops sent over {LATE_MS} ms late (every slot or permit taken, or no CPU \
                 to spare): the latencies include that wait",
                o.sending.late
            ),
        );
    }
}

/// The kinds of a blend with weight above 0, in `KINDS` order, with their outcome.
fn weighted_kinds<'o>(mix: &Mix, o: &'o Outcome) -> impl Iterator<Item = (u32, &'o KindOutcome)> {
    KINDS
        .iter()
        .zip(&o.kinds)
        .map(|(kind, outcome)| (mix.weight(*kind), outcome))
        .filter(|(weight, _)| *weight > 0)
}

fn kinds_json(mix: &Mix, o: &Outcome) -> Value {
    let secs = o.elapsed.as_secs_f64();
    let kinds: Vec<Value> = weighted_kinds(mix, o)
        .map(|(weight, k)| {
            json!({
                "kind": k.name,
                "weight": weight,
                "ops": k.ops,
                "errors": k.errors,
                "ops_per_s": per_s(k.ops, secs).round(),
                "latency_ms": Latency::json_of(&k.latency_us),
            })
        })
        .collect();
    Value::Array(kinds)
}

fn kinds_human(mix: &Mix, o: &Outcome, line: &mut impl FnMut(&str, String)) {
    let secs = o.elapsed.as_secs_f64();
    for (weight, k) in weighted_kinds(mix, o) {
        let latency = if k.latency_us.is_empty() {
            String::new()
        } else {
            let l = Latency::of(&k.latency_us);
            format!("  p50 {:.3}  p99 {:.3}  max {:.3} ms", l.p50, l.p99, l.max)
        };
        line(
            &format!("  {}", k.name),
            format!(
                "w{weight}: {} ops, {} errors, {:.0} ops/s{latency}",
                k.ops,
                k.errors,
                per_s(k.ops, secs)
            ),
        );
    }
}

fn usage_json(usage: &Usage, ops: u64) -> Value {
    json!({
        "samples": usage.samples,
        "peak_rss_bytes": usage.rss_peak_bytes,
        "cpu_s": usage.cpu_s.map(round3),
        "cpu_s_per_1000_ops": usage.cpu_s_per_1000_ops(ops).map(round6),
        "disk_write_bytes": usage.disk_write_bytes,
        "disk_bytes_per_op": usage.disk_bytes_per_op(ops).map(round3),
    })
}

fn usage_human(usage: &Usage, ops: u64) -> String {
    let unknown = || "?".to_string();
    let rss = usage.rss_peak_bytes.map_or_else(unknown, mebibytes);
    let cpu = match (usage.cpu_s, usage.cpu_s_per_1000_ops(ops)) {
        (Some(cpu), Some(per_1000)) => {
            format!("{cpu:.2} s ({:.2} ms per 1,000 ops)", per_1000 * 1000.0)
        }
        (Some(cpu), None) => format!("{cpu:.2} s"),
        _ => unknown(),
    };
    let disk = match (usage.disk_write_bytes, usage.disk_bytes_per_op(ops)) {
        (Some(bytes), Some(per_op)) => format!("{} ({per_op:.0} B per op)", mebibytes(bytes)),
        (Some(bytes), None) => mebibytes(bytes),
        _ => unknown(),
    };
    format!("peak RSS {rss}, CPU {cpu}, disk written {disk}")
}

fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
