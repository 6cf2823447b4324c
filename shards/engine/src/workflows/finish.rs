//! A step finished: its outcome chooses where the run goes (a retry, a poll, a transition, the
//! end).

use crate::core::{Core, Task};
use crate::fold::record::{Record, StepNext, StepOutcome, StepRan, StepWait};
use crate::fold::workflows::StepEnd;
use flo_protocol::WorkflowRunStatus;
use flo_workflow::{BRANCHES_MAX, Next, OnError, WorkflowDef};
/// Largest step output kept (as JSON): it goes into the step's record. A larger one fails
/// the step (an output that is not JSON is kept as a JSON string and may grow six-fold).
pub const STEP_OUTPUT_BYTES_MAX: usize = 4 << 20;

fn jitter(seed: u64) -> f64 {
    (xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()) % 1000) as f64 / 1000.0
}

/// Ends the run as failed with `reason` (no transition applies).
pub(super) fn end(core: &mut Core, namespace: &str, run_id: &str, step: &str, reason: &str) {
    let now = core.now_ms();
    let record = Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome: StepOutcome::ExecutionFailure,
        output: None,
        error: None,
        consumed_signal: None,
        next: failed(reason.to_string()),
        at_ms: now,
        state_patch: None,
        ran: None,
        output_of_run: false,
    };
    commit_end(core, namespace, run_id, step, record);
}

/// The run fails for `reason`.
fn failed(reason: String) -> StepNext {
    StepNext::End {
        terminal: "flo.Failed".to_string(),
        status: WorkflowRunStatus::Failed,
        reason: Some(reason),
    }
}

/// Commits `record`, which ends the run at `step`: in a run with branches, the action runs
/// and child runs the other branches wait for are cancelled in the same atomic group. Then
/// the run's waiters and parent hear of it.
pub(super) fn commit_end(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    record: Record,
) {
    let others: Vec<StepWait> = core
        .state()
        .workflows
        .run(namespace, run_id)
        .map(|r| {
            r.waits()
                .filter(|(s, _)| *s != step)
                .map(|(_, w)| w.clone())
                .collect()
        })
        .unwrap_or_default();
    let own_group = !others.is_empty() && !core.group_open();
    if own_group {
        core.begin_group();
    }
    core.commit(record);
    let why = format!("workflow run {run_id} ended");
    super::cancel::cancel_waits(core, namespace, &others, &why);
    if own_group {
        core.end_group();
    }
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
    let ended = (outcome, output, error, None);
    finish_with(
        core,
        namespace,
        run_id,
        step,
        ended,
        consumed_signal,
        Retry::ByPolicy,
        None,
        false,
    );
}

/// `finish`, with the step's retries allowed or not (`retry`); `ran`: the step executed
/// in the shard's slots (its record is the step's only one); `from_run`: `output` is the
/// completed action run's the step waits on (the record then points at it).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_with(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    (outcome, output, error, state_patch): StepEnd,
    consumed_signal: Option<u64>,
    retry: Retry,
    mut ran: Option<StepRan>,
    from_run: bool,
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
    let patch = state_patch.as_deref();
    let (outcome, output, error, state_patch) =
        match state_overflow(run, step_def, output.as_deref(), patch) {
            Some(why) => (StepOutcome::Failure, None, Some(why), None),
            None => (outcome, output, error, state_patch),
        };
    // A step that failed here leaves nothing of its guest's: no KV writes either.
    if output.is_none()
        && let Some(ran) = &mut ran
    {
        ran.kv_writes.clear();
    }
    let Some(cursor) = run.at(step) else {
        return;
    };
    let executions = cursor.executions + 1;
    let mut outcome = outcome;
    let mut next = None;
    if let Some(policy) = &step_def.retry
        && retry == Retry::ByPolicy
        && (outcome.is_retryable()
            || (outcome == StepOutcome::Timeout && step_def.timeout_ms.is_some()))
        && executions < policy.max_attempts
    {
        let at = now
            .saturating_add(policy.delay_ms(executions, jitter(run.seq ^ u64::from(executions))));
        let in_budget = policy
            .within_ms
            .is_none_or(|w| at.saturating_sub(cursor.first_at_ms) <= w);
        if in_budget {
            next = Some(StepNext::Retry { at_ms: at });
        }
    }
    if next.is_none()
        && outcome == StepOutcome::Pending
        && let Some(poll) = &step_def.poll
    {
        if cursor.polls < poll.max_attempts {
            let delay = poll.delay_ms(cursor.polls + 1, jitter(run.seq ^ u64::from(cursor.polls)));
            next = Some(StepNext::Poll {
                at_ms: now.saturating_add(delay),
            });
        } else {
            outcome = StepOutcome::Timeout;
        }
    }
    let (outcome, next) = match next {
        Some(next) => (outcome, next),
        None => route(&def, step_def, step, outcome, error.as_deref()),
    };
    let next = match next {
        StepNext::Fork { steps, .. } if run.branches.len() + steps.len() > BRANCHES_MAX => {
            failed(format!(
                "step {step:?} would start {} branches while the run has {}; a run runs at most \
                 {BRANCHES_MAX} branches at once",
                steps.len(),
                run.branches.len()
            ))
        }
        next => next,
    };
    let ends = matches!(next, StepNext::End { .. });
    // The output as the run gave it (not cut, not refused): the run's completion holds it.
    let output_of_run = from_run && output.is_some();
    // A retry or poll timer is set by the record's observe.
    let record = Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome,
        output: output.filter(|_| !output_of_run),
        error,
        consumed_signal,
        next,
        at_ms: now,
        state_patch,
        ran: ran.map(Box::new),
        output_of_run,
    };
    match ends {
        true => commit_end(core, namespace, run_id, step, record),
        false => {
            core.commit(record);
        }
    }
}

/// Why the step's output and state patch cannot go into the run's state (it would take it
/// past `STATE_BYTES_MAX`), if so. Exact only near the limit: the state, the output and
/// the patch together bound what merging them gives.
fn state_overflow(
    run: &crate::fold::workflows::WfRun,
    step: &flo_workflow::Step,
    output: Option<&[u8]>,
    patch: Option<&[u8]>,
) -> Option<String> {
    use crate::fold::workflows::json_value;
    use flo_workflow::state::{STATE_BYTES_MAX, mapped_output, merge};
    if output.is_none() && patch.is_none() {
        return None;
    }
    let (out_len, patch_len) = (output.map_or(0, <[u8]>::len), patch.map_or(0, <[u8]>::len));
    if step.output_mapping.is_none() && run.state_bytes + out_len + patch_len <= STATE_BYTES_MAX {
        return None;
    }
    let mut state = run.state.clone();
    if let Some(output) = output
        && let Some(fields) = mapped_output(step, &json_value(output), &run.state, &run.input)
    {
        merge(&mut state, fields);
    }
    if let Some(serde_json::Value::Object(fields)) = patch.map(json_value) {
        merge(&mut state, fields);
    }
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

/// Where `outcome` of `step` leads: the first transition of its fallback chain; else, for
/// a failure, `success` when the step's `onError` says `continue` (the outcome kept) or
/// `skip` (the outcome `skipped`); else the run fails naming step and outcome.
fn route(
    def: &WorkflowDef,
    step_def: &flo_workflow::Step,
    step: &str,
    outcome: StepOutcome,
    error: Option<&str>,
) -> (StepOutcome, StepNext) {
    if let Some(next) = transition(def, step_def, step, &outcome) {
        return (outcome, next);
    }
    if outcome.is_failure()
        && let Some(next) = transition(def, step_def, step, &StepOutcome::Success)
    {
        match step_def.on_error {
            OnError::Fail => {}
            OnError::Continue => return (outcome, next),
            OnError::Skip => return (StepOutcome::Named(SKIPPED.to_string()), next),
        }
    }
    let why = error.map(|e| format!(": {e}")).unwrap_or_default();
    let reason = format!(
        "step {step:?} has no transition for outcome {:?}{why}",
        outcome.as_str()
    );
    (outcome, failed(reason))
}

/// The outcome of a step that failed with `onError: skip`.
pub const SKIPPED: &str = "skipped";

/// The first transition of `outcome`'s fallback chain, if any.
fn transition(
    def: &WorkflowDef,
    step_def: &flo_workflow::Step,
    step: &str,
    outcome: &StepOutcome,
) -> Option<StepNext> {
    for candidate in outcome.transition_names() {
        if let Some(fork) = step_def.forks.get(candidate) {
            return Some(StepNext::Fork {
                steps: fork.steps.clone(),
                join: fork.join.clone(),
            });
        }
        let Some(target) = step_def.transitions.get(candidate) else {
            continue;
        };
        return Some(match def.resolve(target) {
            Some(Next::Step(s)) => StepNext::Step(s.to_string()),
            Some(Next::Terminal { name, status }) => StepNext::End {
                terminal: name.to_string(),
                status,
                reason: None,
            },
            None => failed(format!(
                "step {step:?}: transition {candidate:?} leads to unknown {target:?}"
            )),
        });
    }
    None
}
