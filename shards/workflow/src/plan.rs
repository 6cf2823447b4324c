//! Inline plans (`plans:`): several executors for one logical step, tried in an order the
//! plan's `selection` gives, each with its own retries, circuit breaker, rate limit and
//! tracking; plus a result cache, a fallback value and the classification of error codes.
//! This module holds the plan as validated; `parse.rs` has it as written (`RawPlan`) and
//! `plan_checks.rs` its checks.

use crate::backoff::RetryPolicy;
use serde_json::Value;

/// Most executors in one plan.
pub const PLAN_EXECUTORS_MAX: usize = 32;
/// Most plans in one definition.
pub const PLANS_MAX: usize = 64;
/// The longest health window, breaker cooldown, cache TTL and async timeout (30 days).
pub const PLAN_MS_MAX: u64 = 30 * 24 * 3_600_000;

/// A validated plan.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub selection: Selection,
    /// In the order written; `selection` orders them per step.
    pub executors: Vec<Executor>,
    pub health: Option<HealthPolicy>,
    pub cache: Option<CachePolicy>,
    pub fallback: Option<Fallback>,
    /// Error codes whose failure retries the executor (others not listed also do, unless
    /// fatal).
    pub retryable: Vec<String>,
    /// Error codes whose failure skips the executor's retries.
    pub fatal: Vec<String>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Priority order, highest first.
    StaticOrder,
    /// Priority order, rotated by one per step started.
    RoundRobin,
    /// A random order per step started.
    Random,
    /// Highest health score first (priority order until `min_samples`).
    HealthWeighted,
}

impl Selection {
    pub fn as_str(self) -> &'static str {
        match self {
            Selection::StaticOrder => "static-order",
            Selection::RoundRobin => "round-robin",
            Selection::Random => "random",
            Selection::HealthWeighted => "health-weighted",
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Executor {
    pub name: String,
    /// The action it runs (`@actions/NAME` as written: this is NAME).
    pub action: String,
    /// Higher first; 0 when not given.
    pub priority: i64,
    /// Attempts on this executor (one, with no `retry:`).
    pub retry: RetryPolicy,
    pub breaker: Option<Breaker>,
    pub rate_limit: Option<RateLimit>,
    /// `tracking: {mode: async, timeout_ms}`: an attempt not finished within this fails
    /// with the error code `timeout` (None: `sync`, the action's own timeout applies).
    pub async_timeout_ms: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    /// Consecutive failures that open it.
    pub failure_threshold: u32,
    /// How long it stays open before letting probes through (half-open).
    pub cooldown_ms: u64,
    /// Probes let through while half-open.
    pub half_open_max_calls: u32,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: Option<u32>,
    pub per_minute: Option<u32>,
    pub per_hour: Option<u32>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    pub window_ms: u64,
    /// The weight of a sample one window old relative to a new one, in (0, 1], as f64 bits
    /// (a definition compares and hashes as text does).
    decay_bits: u64,
    pub min_samples: u32,
}

impl HealthPolicy {
    pub fn new(window_ms: u64, decay: f64, min_samples: u32) -> HealthPolicy {
        HealthPolicy {
            window_ms,
            decay_bits: decay.to_bits(),
            min_samples,
        }
    }

    pub fn decay(&self) -> f64 {
        f64::from_bits(self.decay_bits)
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    pub ttl_ms: u64,
    /// A template: `{input.FIELD}` (nested with dots) replaced by the run input's value.
    pub key: String,
    /// Event names whose publication (`flo plan invalidate EVENT`) drops the plan's entries.
    pub invalidate_on: Vec<String>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The step's output when the fallback applies (JSON text as validated).
    pub value: String,
    pub condition: FallbackWhen,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackWhen {
    /// Every executor failed or was skipped.
    Exhausted,
    /// The first executor whose attempts end in failure gives the fallback (no failover).
    AnyError,
}

impl Plan {
    /// How an executor's failure with `code` is treated: fatal ones skip its retries.
    pub fn is_fatal(&self, code: Option<&str>) -> bool {
        code.is_some_and(|c| self.fatal.iter().any(|f| f == c))
    }

    /// The cache key of `input` (None: the template names a field the input lacks).
    pub fn cache_key(&self, input: &Value) -> Option<String> {
        let cache = self.cache.as_ref()?;
        let mut out = String::new();
        let mut rest = cache.key.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}')? + open;
            let path = &rest[open + 1..close];
            let mut v = input;
            for part in path.strip_prefix("input.")?.split('.') {
                v = v.get(part)?;
            }
            match v {
                Value::String(s) => out.push_str(s),
                Value::Null => return None,
                other => out.push_str(&other.to_string()),
            }
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cache_key_fills_its_placeholders_from_the_input() {
        let plan = Plan {
            selection: Selection::StaticOrder,
            executors: Vec::new(),
            health: None,
            cache: Some(CachePolicy {
                ttl_ms: 1000,
                key: "charge:{input.customer.id}:{input.n}".into(),
                invalidate_on: Vec::new(),
            }),
            fallback: None,
            retryable: Vec::new(),
            fatal: vec!["invalid_card".into()],
        };
        let input = json!({"customer": {"id": "c-1"}, "n": 7});
        assert_eq!(plan.cache_key(&input).as_deref(), Some("charge:c-1:7"));
        assert_eq!(plan.cache_key(&json!({"n": 7})), None);
        assert!(plan.is_fatal(Some("invalid_card")) && !plan.is_fatal(Some("timeout")));
        assert!(!plan.is_fatal(None));
    }
}
