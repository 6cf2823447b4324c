//! `flo workflow plan-status` and `flo plan invalidate`: each shard's part.

use crate::core::Core;
use crate::core::io::Done;
use crate::plan_book::{BreakerState, RateShare, plan_key};
use flo_protocol::{ErrorValue, PlanExecutorInfo, Reply};

/// This shard's executors of the latest version of `workflow`'s plans (of `plan` only, when given): those it has
/// state for (a plan step ran here since the server started).
pub fn status_part(core: &mut Core, namespace: &str, workflow: &str, plan: Option<&str>) -> Done {
    let now = core.now_ms();
    let latest = core
        .state()
        .workflows
        .def(namespace, workflow)
        .and_then(|e| e.get(None))
        .and_then(|v| Some((v.version.clone(), v.def.clone().ok()?)));
    let Some((version, def)) = latest else {
        return Done::now(Err(ErrorValue::not_found(format!(
            "workflow {workflow:?} is not defined"
        ))));
    };
    if let Some(p) = plan
        && !def.plans.contains_key(p)
    {
        let known: Vec<&str> = def.plans.keys().map(String::as_str).collect();
        return Done::now(Err(ErrorValue::not_found(format!(
            "workflow {workflow:?} has no plan {p:?} (plans: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))));
    }
    let share = RateShare {
        shard: core.shard(),
        shards: core.partitioning().shards,
    };
    let mut out = Vec::new();
    for (name, p) in def
        .plans
        .iter()
        .filter(|(n, _)| plan.is_none_or(|q| q == *n))
    {
        let key = plan_key(namespace, workflow, &version, name);
        let Some(states) = core.plans().executors_seen(&key) else {
            continue;
        };
        for (executor, state) in p.executors.iter().zip(states) {
            let limits = executor
                .rate_limit
                .map_or([None; 3], |l| [l.per_second, l.per_minute, l.per_hour]);
            out.push(PlanExecutorInfo {
                shard: share.shard,
                plan: name.clone(),
                executor: executor.name.clone(),
                action: executor.action.clone(),
                priority: executor.priority,
                breaker: state.breaker.as_str().to_string(),
                open_until_ms: match state.breaker {
                    BreakerState::Open { until_ms } => Some(until_ms),
                    _ => None,
                },
                consecutive_failures: state.consecutive_failures,
                score_permille: (state.score() * 1000.0).round() as u32,
                samples: state.samples,
                rate_used: state.rate_used(now).to_vec(),
                rate_share: limits.iter().map(|l| l.map(|c| share.of(c))).collect(),
            });
        }
    }
    Done::now(Ok(Reply::PlanStatus(out)))
}

/// Drops this shard's cached outputs for `event` (see `Op::PlanInvalidate`).
pub fn invalidate_part(core: &mut Core, namespace: &str, event: &str, key: Option<&str>) -> Done {
    if event.is_empty() || event.len() > 256 || event.chars().any(char::is_control) {
        return Done::now(Err(ErrorValue::bad_request(
            "an event name is 1 to 256 bytes without control characters",
        )));
    }
    let entries = core.plans().invalidate(namespace, event, key);
    Done::now(Ok(Reply::Invalidated { entries }))
}
