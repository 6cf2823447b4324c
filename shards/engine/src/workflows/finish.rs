//! A step finished: its outcome chooses where the run goes (a retry, a poll, a transition, the
//! end).

use crate::core::{Core, Task};
use crate::fold::record::{Record, StepNext, StepOutcome};
use flo_protocol::WorkflowRunStatus;
use flo_workflow::{Next, WorkflowDef};
/// Largest step output kept (as JSON): it goes into the step's record. A larger one fails
/// the step (an output that is not JSON is kept as a JSON string and may grow six-fold).
pub const STEP_OUTPUT_BYTES_MAX: usize = 4 << 20;

fn jitter(seed: u64) -> f64 {
    (xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()) % 1000) as f64 / 1000.0
}

/// Ends the run as failed with `reason` (no transition applies).
pub(super) fn end(core: &mut Core, namespace: &str, run_id: &str, step: &str, reason: &str) {
    let now = core.now_ms();
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome: StepOutcome::ExecutionFailure,
        output: None,
        error: None,
        consumed_signal: None,
        next: StepNext::End {
            terminal: "flo.Failed".to_string(),
            status: WorkflowRunStatus::Failed,
            reason: Some(reason.to_string()),
        },
        at_ms: now,
    });
    after_end(core, namespace, run_id);
}

/// Whether the step's `retry:` policy may run it again after this outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// As the policy says (a retryable outcome while attempts and time remain).
    ByPolicy,
    /// Never: the action said retrying cannot help (a worker's `NonRetryableError`,
    /// `flo worker fail --non-retryable`); the outcome's transition is taken at once.
    Never,
}

/// Records that the current step finished with `outcome`, choosing where the run goes:
/// a retry, a poll, a transition, or the end.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    outcome: StepOutcome,
    output: Option<Vec<u8>>,
    error: Option<String>,
    consumed_signal: Option<u64>,
) {
    let ended = (outcome, output, error);
    finish_with(
        core,
        namespace,
        run_id,
        step,
        ended,
        consumed_signal,
        Retry::ByPolicy,
    );
}

/// `finish`, with the step's retries allowed or not (`retry`).
pub(super) fn finish_with(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    (outcome, output, error): (StepOutcome, Option<Vec<u8>>, Option<String>),
    consumed_signal: Option<u64>,
    retry: Retry,
) {
    let now = core.now_ms();
    let (outcome, output, error) = match output {
        Some(o) if o.len() > STEP_OUTPUT_BYTES_MAX => (
            StepOutcome::Failure,
            None,
            Some(format!(
                "the step's output of {} bytes (as JSON) exceeds the maximum of \
                 {STEP_OUTPUT_BYTES_MAX} bytes",
                o.len()
            )),
        ),
        output => (outcome, output, error),
    };
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return;
    };
    let Ok(def) = run.def.clone() else {
        return;
    };
    let Some(step_def) = def.step(step) else {
        return;
    };
    let (outcome, output, error) = match state_overflow(run, step_def, output.as_deref()) {
        Some(why) => (StepOutcome::Failure, None, Some(why)),
        None => (outcome, output, error),
    };
    let executions = run.step_executions + 1;
    let mut outcome = outcome;
    let mut next = None;
    if let Some(policy) = &step_def.retry
        && retry == Retry::ByPolicy
        && outcome.is_retryable()
        && executions < policy.max_attempts
    {
        let at = now
            .saturating_add(policy.delay_ms(executions, jitter(run.seq ^ u64::from(executions))));
        let in_budget = policy
            .within_ms
            .is_none_or(|w| at.saturating_sub(run.step_first_at_ms) <= w);
        if in_budget {
            next = Some(StepNext::Retry { at_ms: at });
        }
    }
    if next.is_none()
        && outcome == StepOutcome::Pending
        && let Some(poll) = &step_def.poll
    {
        if run.step_polls < poll.max_attempts {
            let delay = poll.delay_ms(
                run.step_polls + 1,
                jitter(run.seq ^ u64::from(run.step_polls)),
            );
            next = Some(StepNext::Poll {
                at_ms: now.saturating_add(delay),
            });
        } else {
            outcome = StepOutcome::Timeout;
        }
    }
    let next = next.unwrap_or_else(|| transition(&def, step_def, step, &outcome));
    let ends = matches!(next, StepNext::End { .. });
    // A retry or poll timer is set by the record's observe.
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome,
        output,
        error,
        consumed_signal,
        next,
        at_ms: now,
    });
    if ends {
        after_end(core, namespace, run_id);
    }
}

/// Why the step's output cannot go into the run's state (it would take it past
/// `STATE_BYTES_MAX`), if so. Exact only near the limit: the state and the output together
/// bound what merging them gives.
fn state_overflow(
    run: &crate::fold::workflows::WfRun,
    step: &flo_workflow::Step,
    output: Option<&[u8]>,
) -> Option<String> {
    use flo_workflow::state::{STATE_BYTES_MAX, mapped_output, merge};
    let output = output?;
    if step.output_mapping.is_none() && run.state_bytes + output.len() <= STATE_BYTES_MAX {
        return None;
    }
    let out = crate::fold::workflows::json_value(output);
    let fields = mapped_output(step, &out, &run.state, &run.input)?;
    let mut state = run.state.clone();
    merge(&mut state, fields);
    let bytes = state.to_string().len();
    (bytes > STATE_BYTES_MAX).then(|| {
        format!(
            "the step's output would make the run's state {bytes} bytes (as JSON); at most \
             {STATE_BYTES_MAX}"
        )
    })
}

/// The run ended: its waiters and its parent hear of it from the agenda.
pub(super) fn after_end(core: &mut Core, namespace: &str, run_id: &str) {
    core.schedule(Task::WfFinal((namespace.to_string(), run_id.to_string())));
}

/// Where `outcome` of `step` leads: the first transition of its fallback chain, else the
/// run fails naming step and outcome.
pub(super) fn transition(
    def: &WorkflowDef,
    step_def: &flo_workflow::Step,
    step: &str,
    outcome: &StepOutcome,
) -> StepNext {
    for candidate in outcome.transition_names() {
        let Some(target) = step_def.transitions.get(candidate) else {
            continue;
        };
        match def.resolve(target) {
            Some(Next::Step(s)) => return StepNext::Step(s.to_string()),
            Some(Next::Terminal { name, status }) => {
                return StepNext::End {
                    terminal: name.to_string(),
                    status,
                    reason: None,
                };
            }
            None => {
                return StepNext::End {
                    terminal: "flo.Failed".to_string(),
                    status: WorkflowRunStatus::Failed,
                    reason: Some(format!(
                        "step {step:?}: transition {candidate:?} leads to unknown {target:?}"
                    )),
                };
            }
        }
    }
    StepNext::End {
        terminal: "flo.Failed".to_string(),
        status: WorkflowRunStatus::Failed,
        reason: Some(format!(
            "step {step:?} has no transition for outcome {:?}",
            outcome.as_str()
        )),
    }
}
