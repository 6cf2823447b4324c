//! A plan step's next move when it may act: begin (a cached output, or the executors'
//! order), skip an executor whose breaker is open or that is over its rate limit, or start
//! an attempt on the executor whose turn it is.

use super::{Move, StepRun, log, out_of_executors};
use crate::core::Core;
use crate::fold::archive::RunKind;
use crate::fold::record::{PlanEvent, PlanSkip, Record, StepOutcome, StepRef};
use crate::plan_book::RateShare;

/// Moves the plan `plan_name` of step `step` of run `run_id` on; `input` is the step's.
pub fn next(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    plan_name: &str,
    input: Vec<u8>,
) -> Move {
    let now = core.now_ms();
    let Some(run) = StepRun::read(core, namespace, run_id, step, plan_name) else {
        return Move::Finish {
            events: Vec::new(),
            outcome: StepOutcome::TargetNotFound,
            output: None,
            error: Some(format!("plan {plan_name:?} is not in the definition")),
        };
    };
    let (key, plan) = (&run.key, run.plan());
    let event = |core: &mut Core, event: PlanEvent| log(core, namespace, run_id, step, event);
    let Some(progress) = &run.progress else {
        if let Some(k) = &run.cache_key
            && let Some((output, outcome)) = core.plans().cached(key, k, now)
        {
            return Move::Finish {
                events: vec![PlanEvent::CacheHit { key: k.clone() }],
                outcome: outcome.map_or(StepOutcome::Success, |o| StepOutcome::from_name(&o)),
                output: Some(output),
                error: None,
            };
        }
        let order = core.plans().order(key, plan, run.seq ^ now);
        event(core, PlanEvent::Begin { order });
        return Move::Continue;
    };
    let Some(index) = progress.current() else {
        return out_of_executors(plan_name, plan, progress.last_error.as_deref());
    };
    let Some(executor) = plan.executors.get(index as usize) else {
        return out_of_executors(plan_name, plan, progress.last_error.as_deref());
    };
    let share = RateShare {
        shard: core.shard(),
        shards: core.partitioning().shards,
    };
    let state = &mut core.plans().executors(key, plan)[index as usize];
    let skip = if !state.would_admit(executor.breaker.as_ref(), now) {
        Some(PlanSkip::BreakerOpen)
    } else if !state.take_rate(executor.rate_limit.as_ref(), share, now) {
        Some(PlanSkip::RateLimited)
    } else {
        state.admit(executor.breaker.as_ref(), now);
        None
    };
    if let Some(reason) = skip {
        event(
            core,
            PlanEvent::Skipped {
                executor: index,
                reason,
            },
        );
        return Move::Continue;
    }
    let action = executor.action.clone();
    let problem = match core.state().registry.get(namespace, &action) {
        None => Some(format!("action {action:?} is not registered")),
        Some(def) if !def.enabled => Some(format!("action {action:?} is disabled")),
        Some(_) => None,
    };
    if let Some(error) = problem {
        // Nothing to retry: the next executor.
        event(
            core,
            PlanEvent::Exhausted {
                executor: index,
                fatal: true,
                error,
            },
        );
        return Move::Continue;
    }
    let Some(version) = core
        .state()
        .registry
        .get(namespace, &action)
        .map(|d| d.version)
    else {
        return Move::Wait;
    };
    let state = core.state();
    let action_run = state.runs.next_run_id(namespace, &action, |id| {
        state.owns(namespace, id) && state.run_id_free(RunKind::Action, namespace, id)
    });
    core.commit_group(vec![
        Record::WfPlanEvent {
            namespace: namespace.to_string(),
            run_id: run_id.to_string(),
            step: step.to_string(),
            event: PlanEvent::Start {
                executor: index,
                deadline_ms: executor
                    .async_timeout_ms
                    .and_then(|t| crate::clock::deadline_after(now, t)),
            },
            at_ms: now,
        },
        Record::RunCreated {
            namespace: namespace.to_string(),
            run_id: action_run,
            action,
            action_version: version,
            input,
            priority: crate::fold::runs::PRIORITY_DEFAULT,
            labels: None,
            idempotency_key: None,
            created_at_ms: now,
            available_at_ms: now,
            step: Some(StepRef {
                run_id: run_id.to_string(),
                step: step.to_string(),
            }),
        },
    ]);
    Move::Wait
}
