//! What finishes a step from outside: the action run it executes became final, or the
//! child run it started ended. The step finishes with the outcome that gives, and the run
//! moves on.

use super::advance::advance;
use super::finish::{Retry, finish, finish_with};
use super::plan_steps::{apply_move, plan_of};
use crate::core::Core;
use crate::fold::record::{StepOutcome, StepRef, StepWait};
use crate::fold::workflows::{RunPhase, step_output_json};
use flo_protocol::{RunStatus, WorkflowRunStatus};
/// A run ended: if it is a child, its parent's step finishes (completed → success, else
/// failure) and the parent moves on.
pub fn notify_parent(core: &mut Core, namespace: &str, run_id: &str) {
    let Some(child) = core.state().workflows.run(namespace, run_id) else {
        return;
    };
    let Some(parent) = child.parent.clone() else {
        return;
    };
    let (outcome, error) = match child.status() {
        WorkflowRunStatus::Completed => (StepOutcome::Success, None),
        s => (
            StepOutcome::Failure,
            Some(format!(
                "child workflow run {run_id} ended {}{}",
                s.as_str(),
                child
                    .error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )),
        ),
    };
    let output = match &child.lead.phase {
        RunPhase::Ended {
            output: Some(v), ..
        } => Some(serde_json::to_vec(v).unwrap_or_default()),
        _ => None,
    };
    let waiting = core
        .state()
        .workflows
        .run(namespace, &parent.run_id)
        .is_some_and(|p| {
            !p.status().is_final()
                && matches!(p.wait_at(&parent.step), Some(StepWait::ChildRun { run_id: c }) if c == run_id)
        });
    if !waiting {
        return;
    }
    finish(
        core,
        namespace,
        &parent.run_id,
        &parent.step,
        outcome,
        output,
        error,
        None,
    );
    advance(core, namespace, &parent.run_id);
}

/// Why a step timed out: its `timeoutMs` when it has one, then what the execution said.
pub(super) fn timeout_error(
    core: &Core,
    namespace: &str,
    step: &StepRef,
    error: Option<String>,
) -> Option<String> {
    match core.state().step_timeout_ms(namespace, Some(step)) {
        Some(ms) => Some(format!(
            "execution timeout exceeded (the step's timeoutMs is {ms}){}",
            error.map(|e| format!(": {e}")).unwrap_or_default()
        )),
        None => error,
    }
}

/// An action run became final: the workflow step it executes finishes.
pub fn on_action_final(core: &mut Core, namespace: &str, action_run: &str) {
    let Some(run) = core.state().runs.get(namespace, action_run) else {
        return;
    };
    let Some(step_ref) = run.step.clone() else {
        return;
    };
    // The fields its worker or guest set in the run's state go with a completion only.
    let state_patch = match run.status {
        RunStatus::Completed => run.state_patch.as_deref().map(<[u8]>::to_vec),
        _ => None,
    };
    let (outcome, output, error) = match run.status {
        RunStatus::Completed => (
            run.outcome
                .as_deref()
                .map_or(StepOutcome::Success, StepOutcome::from_name),
            run.output.as_ref().map(|o| step_output_json(o)),
            None,
        ),
        RunStatus::TimedOut => {
            let error = timeout_error(core, namespace, &step_ref, run.error.clone());
            (StepOutcome::Timeout, None, error)
        }
        RunStatus::Cancelled => (
            StepOutcome::Failure,
            None,
            Some(format!("action run {action_run} was cancelled")),
        ),
        RunStatus::Failed => (StepOutcome::Failure, None, run.error.clone()),
        RunStatus::Pending | RunStatus::Running => return,
    };
    // A failure that is final without being dead-lettered was reported non-retryable
    // (`fail_task`): the step's `retry:` does not run it again.
    let retry = match run.status == RunStatus::Failed && !run.dead_lettered {
        true => Retry::Never,
        false => Retry::ByPolicy,
    };
    let waiting = core
        .state()
        .workflows
        .run(namespace, &step_ref.run_id)
        .is_some_and(|w| {
            !w.status().is_final()
                && matches!(w.wait_at(&step_ref.step), Some(StepWait::ActionRun { run_id, .. }) if run_id == action_run)
        });
    if !waiting {
        return;
    }
    let (wf_run, step) = (&step_ref.run_id, &step_ref.step);
    if let Some(plan) = plan_of(core, namespace, wf_run, step) {
        let mv = crate::plans::on_attempt_final(core, namespace, wf_run, step, &plan, action_run);
        apply_move(core, namespace, wf_run, step, mv);
        advance(core, namespace, wf_run);
        return;
    }
    finish_with(
        core,
        namespace,
        wf_run,
        step,
        (outcome, output, error, state_patch),
        None,
        retry,
        None,
        true,
    );
    advance(core, namespace, wf_run);
}
