//! The checks of `plans:` (E508 for a plan, E509 for an executor, E401 for a duplicate
//! executor name, E204 for an `@plan/` target naming no plan) into validated plans.

use crate::backoff::{Backoff, RetryPolicy};
use crate::issues::IssueCode;
use crate::names::{check_step_name, listed, parse_target};
use crate::parse::{Entries, RawCache, RawErrors, RawExecutor, RawFallback, RawHealth, RawPlan};
use crate::plan::{
    Breaker, CachePolicy, Executor, Fallback, FallbackWhen, HealthPolicy, PLAN_EXECUTORS_MAX,
    PLAN_MS_MAX, PLANS_MAX, Plan, RateLimit, Selection,
};
use crate::validate::Checker;
use serde_json::Value;
use std::collections::BTreeMap;

/// The shortest cache TTL.
const PLAN_MS_MIN: u64 = 1;

impl Checker {
    /// `plans:` into validated plans (only those without errors).
    pub(crate) fn plans(&mut self, raw: Option<Entries<RawPlan>>) -> BTreeMap<String, Plan> {
        let raw = raw.map_or_else(Vec::new, |e| e.0);
        if raw.len() > PLANS_MAX {
            self.error(
                IssueCode::E508,
                "plans",
                format!("{} plans; a definition has at most {PLANS_MAX}", raw.len()),
            );
        }
        let mut out = BTreeMap::new();
        for (name, plan) in self.unique("plans", raw) {
            let path = format!("plans.{name}");
            let errors = self.error_count();
            if let Err(why) = check_step_name(&name) {
                self.error(IssueCode::E508, &path, format!("plan `{name}`: {why}"));
            }
            let plan = self.plan(&path, plan);
            if self.error_count() == errors {
                out.insert(name, plan);
            }
        }
        out
    }

    fn plan(&mut self, path: &str, raw: RawPlan) -> Plan {
        let bad = |c: &mut Self, field: &str, message: String| {
            c.error(IssueCode::E508, format!("{path}.{field}"), message)
        };
        let selection = match raw.selection.as_deref() {
            None | Some("static-order") => Selection::StaticOrder,
            Some("round-robin") => Selection::RoundRobin,
            Some("random") => Selection::Random,
            Some("health-weighted") => Selection::HealthWeighted,
            Some(other) => {
                bad(
                    self,
                    "selection",
                    format!(
                        "unknown selection `{other}`; use `static-order`, `round-robin`, `random` or `health-weighted`"
                    ),
                );
                Selection::StaticOrder
            }
        };
        let raw_executors = raw.executors.unwrap_or_default();
        if raw_executors.is_empty() {
            bad(
                self,
                "executors",
                "a plan needs at least one executor: `executors: [{name: primary, action: \"@actions/NAME\"}]`".into(),
            );
        } else if raw_executors.len() > PLAN_EXECUTORS_MAX {
            bad(
                self,
                "executors",
                format!(
                    "{} executors; a plan has at most {PLAN_EXECUTORS_MAX}",
                    raw_executors.len()
                ),
            );
        }
        let mut executors: Vec<Executor> = Vec::new();
        for (i, raw) in raw_executors.into_iter().enumerate() {
            let epath = format!("{path}.executors[{i}]");
            let executor = self.executor(&epath, raw);
            if executors.iter().any(|e| e.name == executor.name) {
                self.error(
                    IssueCode::E401,
                    format!("{epath}.name"),
                    format!(
                        "executor `{}` is named twice in the plan: names tell executors apart in history and status",
                        executor.name
                    ),
                );
            }
            executors.push(executor);
        }
        let health = raw
            .health
            .map(|h| self.health(&format!("{path}.health"), h));
        if selection == Selection::HealthWeighted && health.is_none() {
            bad(
                self,
                "health",
                "`selection: health-weighted` needs a `health:` block (window_ms, decay, min_samples)".into(),
            );
        }
        let cache = raw.cache.map(|c| self.cache(&format!("{path}.cache"), c));
        let fallback = raw
            .fallback
            .map(|f| self.fallback(&format!("{path}.fallback"), f));
        let errors = raw.errors.unwrap_or(RawErrors {
            retryable: None,
            fatal: None,
        });
        let retryable = errors.retryable.unwrap_or_default();
        let fatal = errors.fatal.unwrap_or_default();
        for code in retryable.iter().filter(|c| fatal.contains(c)) {
            bad(
                self,
                "errors",
                format!("error code `{code}` is both retryable and fatal: keep it in one list"),
            );
        }
        for code in retryable.iter().chain(&fatal) {
            if code.is_empty() || code.len() > 128 || code.chars().any(char::is_control) {
                bad(
                    self,
                    "errors",
                    format!("error code {code:?}: 1 to 128 bytes, no control characters"),
                );
            }
        }
        Plan {
            selection,
            executors,
            health,
            cache,
            fallback,
            retryable,
            fatal,
        }
    }

    fn executor(&mut self, path: &str, raw: RawExecutor) -> Executor {
        let bad = |c: &mut Self, field: &str, message: String| {
            c.error(IssueCode::E509, format!("{path}.{field}"), message)
        };
        let name = raw.name.unwrap_or_default();
        if let Err(why) = check_step_name(&name) {
            bad(self, "name", format!("executor name {name:?}: {why}"));
        }
        let action = match raw.action.as_deref().map(parse_target) {
            Some(Ok(crate::def::Target::Action(a))) => a,
            Some(Ok(_)) => {
                bad(
                    self,
                    "action",
                    "an executor runs an action: `action: \"@actions/NAME\"`".into(),
                );
                String::new()
            }
            Some(Err(why)) => {
                self.error(IssueCode::E201, format!("{path}.action"), why);
                String::new()
            }
            None => {
                bad(
                    self,
                    "action",
                    "missing `action`: the action this executor runs, e.g. `action: \"@actions/charge-stripe\"`".into(),
                );
                String::new()
            }
        };
        let retry = match raw.retry {
            Some(r) => self.retry(&format!("{path}.retry"), r),
            None => RetryPolicy {
                max_attempts: 1,
                backoff: Backoff::Exponential,
                initial_delay_ms: 0,
                max_delay_ms: None,
                within_ms: None,
            },
        };
        let breaker = raw.breaker.map(|b| {
            let threshold = b.failure_threshold.unwrap_or(5);
            if !(1..=10_000).contains(&threshold) {
                bad(
                    self,
                    "breaker.failure_threshold",
                    format!(
                        "`failure_threshold` is 1 to 10000 consecutive failures, not {threshold}"
                    ),
                );
            }
            let cooldown_ms = b.cooldown_ms.unwrap_or(30_000);
            self.plan_ms(path, "breaker.cooldown_ms", cooldown_ms);
            let probes = b.half_open_max_calls.unwrap_or(1);
            if !(1..=10_000).contains(&probes) {
                bad(
                    self,
                    "breaker.half_open_max_calls",
                    format!("`half_open_max_calls` is 1 to 10000 probes, not {probes}"),
                );
            }
            Breaker {
                failure_threshold: threshold.min(10_000) as u32,
                cooldown_ms,
                half_open_max_calls: probes.min(10_000) as u32,
            }
        });
        let rate_limit = raw.rate_limit.map(|r| {
            let mut per = |field: &str, v: Option<u64>| -> Option<u32> {
                let v = v?;
                if !(1..=1_000_000_000).contains(&v) {
                    bad(
                        self,
                        &format!("rate_limit.{field}"),
                        format!("`{field}` is 1 to 1000000000, not {v}"),
                    );
                }
                Some(v.min(1_000_000_000) as u32)
            };
            let limit = RateLimit {
                per_second: per("max_per_second", r.max_per_second),
                per_minute: per("max_per_minute", r.max_per_minute),
                per_hour: per("max_per_hour", r.max_per_hour),
            };
            if limit.per_second.is_none() && limit.per_minute.is_none() && limit.per_hour.is_none()
            {
                bad(
                    self,
                    "rate_limit",
                    "a `rate_limit` sets at least one of `max_per_second`, `max_per_minute`, `max_per_hour`".into(),
                );
            }
            limit
        });
        let async_timeout_ms = match raw.tracking {
            None => None,
            Some(t) => match t.mode.as_deref() {
                None | Some("sync") => {
                    if t.timeout_ms.is_some() {
                        bad(
                            self,
                            "tracking.timeout_ms",
                            "`timeout_ms` applies to `mode: async`; a sync executor's attempt lasts its action's timeout".into(),
                        );
                    }
                    None
                }
                Some("async") => {
                    let ms = t.timeout_ms.unwrap_or(300_000);
                    self.plan_ms(path, "tracking.timeout_ms", ms);
                    Some(ms)
                }
                Some(other) => {
                    bad(
                        self,
                        "tracking.mode",
                        format!("unknown tracking mode `{other}`; use `sync` or `async`"),
                    );
                    None
                }
            },
        };
        Executor {
            name,
            action,
            priority: raw.priority.unwrap_or(0),
            retry,
            breaker,
            rate_limit,
            async_timeout_ms,
        }
    }

    fn health(&mut self, path: &str, raw: RawHealth) -> HealthPolicy {
        let window_ms = raw.window_ms.unwrap_or(300_000);
        if window_ms == 0 || window_ms > PLAN_MS_MAX {
            self.error(
                IssueCode::E508,
                format!("{path}.window_ms"),
                format!("`window_ms` is 1 to {PLAN_MS_MAX}, not {window_ms}"),
            );
        }
        let decay = raw.decay.unwrap_or(0.9);
        if !(decay > 0.0 && decay <= 1.0) {
            self.error(
                IssueCode::E508,
                format!("{path}.decay"),
                format!("`decay` is in (0, 1], not {decay}"),
            );
        }
        let min_samples = raw.min_samples.unwrap_or(10);
        if !(1..=1_000_000).contains(&min_samples) {
            self.error(
                IssueCode::E508,
                format!("{path}.min_samples"),
                format!("`min_samples` is 1 to 1000000, not {min_samples}"),
            );
        }
        HealthPolicy::new(window_ms, decay, min_samples.min(1_000_000) as u32)
    }

    fn cache(&mut self, path: &str, raw: RawCache) -> CachePolicy {
        let ttl_ms = raw.ttl_ms.unwrap_or(0);
        if !(PLAN_MS_MIN..=PLAN_MS_MAX).contains(&ttl_ms) {
            self.error(
                IssueCode::E508,
                format!("{path}.ttl_ms"),
                format!("`ttl_ms` is 1 to {PLAN_MS_MAX}, not {ttl_ms}"),
            );
        }
        let key = raw.key.unwrap_or_default();
        if let Err(why) = check_key_template(&key) {
            self.error(IssueCode::E508, format!("{path}.key"), why);
        }
        let invalidate_on = raw.invalidate_on.unwrap_or_default();
        for event in &invalidate_on {
            if event.is_empty() || event.len() > 256 || event.chars().any(char::is_control) {
                self.error(
                    IssueCode::E508,
                    format!("{path}.invalidate_on"),
                    format!("event name {event:?}: 1 to 256 bytes, no control characters"),
                );
            }
        }
        CachePolicy {
            ttl_ms,
            key,
            invalidate_on,
        }
    }

    fn fallback(&mut self, path: &str, raw: RawFallback) -> Fallback {
        let value = match raw.value {
            Some(serde_yaml::Value::String(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => v.to_string(),
                Err(e) => {
                    self.error(
                        IssueCode::E508,
                        format!("{path}.value"),
                        format!("`value` is not JSON ({e}): write it as JSON text or as YAML"),
                    );
                    String::new()
                }
            },
            Some(yaml) => match serde_json::to_value(&yaml) {
                Ok(v) => v.to_string(),
                Err(e) => {
                    self.error(
                        IssueCode::E508,
                        format!("{path}.value"),
                        format!("`value` cannot be turned into JSON: {e}"),
                    );
                    String::new()
                }
            },
            None => {
                self.error(
                    IssueCode::E508,
                    format!("{path}.value"),
                    "a `fallback` needs a `value`: the step's output when it applies",
                );
                String::new()
            }
        };
        let condition = match raw.condition.as_deref() {
            None | Some("exhausted") => FallbackWhen::Exhausted,
            Some("any_error") => FallbackWhen::AnyError,
            Some(other) => {
                self.error(
                    IssueCode::E508,
                    format!("{path}.condition"),
                    format!("unknown condition `{other}`; use `exhausted` or `any_error`"),
                );
                FallbackWhen::Exhausted
            }
        };
        Fallback { value, condition }
    }

    fn plan_ms(&mut self, path: &str, field: &str, ms: u64) {
        if ms == 0 || ms > PLAN_MS_MAX {
            self.error(
                IssueCode::E509,
                format!("{path}.{field}"),
                format!(
                    "`{}` is 1 to {PLAN_MS_MAX} ms, not {ms}",
                    field.rsplit('.').next().unwrap_or(field)
                ),
            );
        }
    }

    /// An `@plan/NAME` target: the plan must be defined.
    pub(crate) fn plan_target(&mut self, path: &str, name: &str, plans: &[String]) -> bool {
        if plans.iter().any(|p| p == name) {
            return true;
        }
        self.error(
            IssueCode::E204,
            path,
            format!(
                "`@plan/{name}` names no plan of this definition (plans: {})",
                listed(plans.iter().map(String::as_str))
            ),
        );
        false
    }
}

/// A cache key template: text with `{input.FIELD[.FIELD...]}` placeholders.
fn check_key_template(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 1024 {
        return Err(format!(
            "`key` is 1 to 1024 bytes, e.g. \"charge:{{input.customer_id}}\"; found {} bytes",
            key.len()
        ));
    }
    let mut rest = key;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("`key` {key:?}: a `{{` is never closed"));
        };
        let path = &rest[open + 1..open + close];
        let fields = path.strip_prefix("input.");
        if fields.is_none_or(|f| f.split('.').any(str::is_empty)) {
            return Err(format!(
                "`key` {key:?}: `{{{path}}}` is not a field of the input; write `{{input.FIELD}}`"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("`key` {key:?}: a `}}` without its `{{`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_templates_name_input_fields() {
        assert!(check_key_template("k:{input.a}:{input.b.c}").is_ok());
        assert!(check_key_template("plain").is_ok());
        for bad in [
            "",
            "k:{a}",
            "k:{input.}",
            "k:{input.a",
            "k:}",
            "k:{input..a}",
        ] {
            assert!(check_key_template(bad).is_err(), "{bad}");
        }
    }
}
