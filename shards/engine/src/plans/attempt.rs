//! An attempt of a plan step ended (its action run became final): the executor's health
//! and breaker learn of it, and the step succeeds, retries the executor, or gives it up
//! (a fatal error code, its retries spent) for the next — or for the fallback, when the
//! plan's fallback applies on any error.

use super::{Move, StepRun, log, out_of_executors};
use crate::core::{Core, Task};
use crate::fold::record::{PlanEvent, Record, StepOutcome};
use crate::fold::workflows::step_output_json;
use crate::plan_book::{AttemptEnd, PlanKey};
use flo_protocol::RunStatus;
use flo_workflow::FallbackWhen;

/// The action run `action_run` of plan step `step` (plan `plan_name`) of run `run_id` is
/// final.
pub fn on_attempt_final(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    plan_name: &str,
    action_run: &str,
) -> Move {
    let now = core.now_ms();
    let Some(run) = StepRun::read(core, namespace, run_id, step, plan_name) else {
        return Move::Wait;
    };
    let (key, plan, seq) = (&run.key, run.plan(), run.seq);
    let Some(progress) = &run.progress else {
        return Move::Wait;
    };
    let Some(index) = progress.current() else {
        return out_of_executors(plan_name, plan, progress.last_error.as_deref());
    };
    let Some(executor) = plan.executors.get(index as usize) else {
        return Move::Wait;
    };
    let Some(attempt) = core.state().runs.get(namespace, action_run).cloned() else {
        return Move::Wait;
    };
    let code = attempt.error_code.clone();
    let fatal_code = plan.is_fatal(code.as_deref());
    let end = match attempt.status {
        RunStatus::Completed => AttemptEnd::Success,
        _ if fatal_code => AttemptEnd::BusinessFailure,
        _ => AttemptEnd::Failure,
    };
    if attempt.status == RunStatus::Completed {
        let output = attempt.output.as_ref().map(|o| step_output_json(o));
        let outcome = attempt.outcome.clone();
        if let (Some(cache), Some(out), Some(k)) = (&plan.cache, &output, &run.cache_key) {
            let value = (out.clone(), outcome.clone());
            core.plans().cache_put(key, k.clone(), value, cache, now);
        }
        record(core, key, plan, index, end, now);
        return Move::Finish {
            events: vec![PlanEvent::Succeeded { executor: index }],
            outcome: outcome.map_or(StepOutcome::Success, |o| StepOutcome::from_name(&o)),
            output,
            error: None,
        };
    }
    record(core, key, plan, index, end, now);
    let error = match (&code, &attempt.error) {
        (Some(c), Some(e)) if !e.starts_with(c.as_str()) => format!("{c}: {e}"),
        (_, Some(e)) => e.clone(),
        (Some(c), None) => c.clone(),
        (None, None) => format!("action run {action_run} ended {}", attempt.status.as_str()),
    };
    // A failure reported non-retryable, or a cancelled attempt, is not retried either.
    let non_retryable = (attempt.status == RunStatus::Failed && !attempt.dead_lettered)
        || attempt.status == RunStatus::Cancelled;
    let fatal = fatal_code || non_retryable;
    let policy = &executor.retry;
    if !fatal && progress.attempts < policy.max_attempts {
        let jitter = (xxhash_rust::xxh3::xxh3_64(
            &(seq ^ u64::from(progress.attempts)).to_le_bytes(),
        ) % 1000) as f64
            / 1000.0;
        let at_ms = now.saturating_add(policy.delay_ms(progress.attempts, jitter));
        let in_budget = policy
            .within_ms
            .is_none_or(|w| at_ms.saturating_sub(progress.first_at_ms) <= w);
        if in_budget {
            let retry = PlanEvent::Retry {
                executor: index,
                at_ms,
                error,
            };
            log(core, namespace, run_id, step, retry);
            return Move::Wait;
        }
    }
    let exhausted = PlanEvent::Exhausted {
        executor: index,
        fatal,
        error: error.clone(),
    };
    if let Some(fallback) = &plan.fallback
        && fallback.condition == FallbackWhen::AnyError
    {
        return Move::Finish {
            events: vec![exhausted, PlanEvent::Fallback],
            outcome: StepOutcome::Success,
            output: Some(fallback.value.clone().into_bytes()),
            error: None,
        };
    }
    log(core, namespace, run_id, step, exhausted);
    Move::Continue
}

/// An attempt tracked `async` has no result by its deadline: it fails as timed out (code
/// `timeout`, not dead-lettered; a worker's later report is refused), and the step moves
/// on as for any failed attempt (`Task::ActionFinal`).
pub fn attempt_timed_out(core: &mut Core, namespace: &str, action_run: &str) {
    let now = core.now_ms();
    let Some(run) = core.state().runs.get(namespace, action_run) else {
        return;
    };
    if run.status.is_final() {
        return;
    }
    let record = Record::AttemptFailed {
        namespace: namespace.to_string(),
        run_id: action_run.to_string(),
        attempt: run.attempt,
        action_version: run.action_version,
        error: "no result within the executor's tracking timeout".to_string(),
        timed_out: true,
        retry_at_ms: None,
        at_ms: now,
        dead_letter: false,
        error_code: Some(crate::fold::runs::TIMEOUT_CODE.to_string()),
    };
    core.commit(record);
    core.schedule(Task::ActionFinal((
        namespace.to_string(),
        action_run.to_string(),
    )));
}

/// The executor's breaker and health learn how the attempt ended.
fn record(
    core: &mut Core,
    key: &PlanKey,
    plan: &flo_workflow::Plan,
    index: u16,
    end: AttemptEnd,
    now: u64,
) {
    let Some(executor) = plan.executors.get(index as usize) else {
        return;
    };
    let breaker = executor.breaker;
    let health = plan.health;
    if let Some(state) = core.plans().executors(key, plan).get_mut(index as usize) {
        state.record(end, breaker.as_ref(), health.as_ref(), now);
    }
}
