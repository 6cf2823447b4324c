//! Final report: human-readable or one JSON document.

use crate::driver::Outcome;
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
}

/// Latency percentiles in milliseconds.
struct Latency {
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Report<'_> {
    fn latency(&self) -> Latency {
        let h = &self.outcome.latency_us;
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    fn elapsed_s(&self) -> f64 {
        self.outcome.elapsed.as_secs_f64()
    }

    fn ops_per_s(&self) -> f64 {
        let secs = self.elapsed_s();
        if secs > 0.0 {
            self.outcome.ops as f64 / secs
        } else {
            0.0
        }
    }

    pub fn json(&self) -> Value {
        let l = self.latency();
        let o = self.outcome;
        let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "workload": self.workload,
            "ops": o.ops,
            "errors": o.errors,
            "elapsed_s": round3(self.elapsed_s()),
            "ops_per_s": self.ops_per_s().round(),
            "latency_ms": {
                "p50": l.p50, "p90": l.p90, "p99": l.p99, "p999": l.p999, "max": l.max,
            },
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
        })
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
        line(
            "latency ms",
            format!(
                "p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                l.p50, l.p90, l.p99, l.p999, l.max
            ),
        );
        out
    }
}
