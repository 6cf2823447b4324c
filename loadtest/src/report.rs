//! Final report: human-readable or one JSON document.

use crate::driver::Outcome;
use crate::workers::TaskOutcome;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

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
    /// The worker side of the `worker` workload.
    pub tasks: Option<Tasks<'a>>,
}

/// What the workers of the `worker` workload did.
pub struct Tasks<'a> {
    pub action: &'a str,
    pub workers: u32,
    pub await_batch: u32,
    pub outcome: &'a TaskOutcome,
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
    fn json(&self, invokes_per_s: f64) -> Value {
        let o = self.outcome;
        let secs = o.elapsed.as_secs_f64();
        json!({
            "action": self.action,
            "workers": self.workers,
            "await_batch": self.await_batch,
            "invokes_per_s": invokes_per_s.round(),
            "expected": o.expected,
            "completed": o.completed,
            "errors": o.errors,
            "elapsed_s": round3(secs),
            "completed_per_s": per_s(o.completed, secs).round(),
            "latency_ms": Latency::of(&o.latency_us).json(),
            "hit_time_limit": o.hit_time_limit,
            "worker_failures": o.failures,
            "first_error": o.first_error,
        })
    }

    fn human(&self, invokes_per_s: f64, line: &mut impl FnMut(&str, String)) {
        let o = self.outcome;
        let secs = o.elapsed.as_secs_f64();
        line("action", self.action.to_string());
        line(
            "workers",
            format!("{} (await batch {})", self.workers, self.await_batch),
        );
        line("invokes/s", format!("{invokes_per_s:.0}"));
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
        line("e2e ms", Latency::of(&o.latency_us).text());
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
            doc["tasks"] = tasks.json(self.ops_per_s());
        }
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
        line("latency ms", l.text());
        if let Some(tasks) = &self.tasks {
            tasks.human(self.ops_per_s(), &mut line);
        }
        out
    }
}
