//! Advancing a run: from its current step (or each branch's), start what the step runs (an
//! execution, an action run, a child run, a wait for a signal) until every cursor waits or
//! the run ends. Advancing one run never calls into another: what another run must do next
//! goes on the agenda as a `Task`. A run step on `@actions/NAME` of a WebAssembly action
//! queues an execution in this shard's slots (`core::StepQueue`: no action run, no record
//! until it finished, `wasm_steps`); of a user-hosted action it creates an action run on
//! this same shard for workers to take (one attempt: the step's `retry:` decides about
//! retries); `@workflow/NAME[:V]` starts a child run, also here, so advancing never waits
//! on another shard. `@plan/NAME` runs the plan's executors one attempt at a time (`plans`,
//! `plan_steps.rs`).

use super::finish::{end, finish};
use crate::clock::deadline_after;
use crate::core::{Core, StepExec, Task};
use crate::fold::archive::RunKind;
use crate::fold::record::{FILTERED, Record, RunControl, StepOutcome, StepRef, StepWait};
use crate::fold::workflows::RunPhase;
use crate::ids::RunKey;
use flo_protocol::{ActionKind, RUN_INPUT_BYTES_MAX};
use flo_workflow::{StepAction, Target};
use serde_json::{Value, json};

/// Steps a run (with its children) may take in one burst of work without waiting on
/// anything (an execution, a worker, a signal, a timer) before it is failed: a loop in the
/// definition.
pub const MAX_ADVANCE_STEPS: u32 = 256;

/// Deepest nesting of child workflows.
pub const CHILD_DEPTH_MAX: u32 = 10;

/// The top-level run of `key`'s tree (children run on their parent's shard).
fn root_of(core: &Core, namespace: &str, run_id: &str) -> RunKey {
    let mut id = run_id.to_string();
    for _ in 0..=CHILD_DEPTH_MAX {
        match core
            .state()
            .workflows
            .run(namespace, &id)
            .and_then(|r| r.parent.as_ref())
        {
            Some(parent) => id = parent.run_id.clone(),
            None => break,
        }
    }
    (namespace.to_string(), id)
}

/// Walks the run forward until it waits or ends. Each step is charged to the run's tree:
/// past `MAX_ADVANCE_STEPS` in one burst of work the run fails (a loop in the definition);
/// past the input's budget the rest is continued by a later input. A run that executed
/// `Limits::run_steps_max` steps in all fails too (a loop through steps that wait, which
/// no burst catches); the count is the fold's (`WfRun::steps_executed`), so it survives a
/// restart.
pub fn advance(core: &mut Core, namespace: &str, run_id: &str) {
    let root = root_of(core, namespace, run_id);
    loop {
        let now = core.now_ms();
        let Some(run) = core.state().workflows.run(namespace, run_id) else {
            return;
        };
        // A held run starts no step (what runs finishes).
        if run.status().is_final() || run.held {
            return;
        }
        // A cursor to move: the run's, or one of its branches' (not one whose step waits
        // for a WebAssembly slot or executes: `wasm_steps`).
        let taken = core.steps();
        let Some(current_step) = run
            .ready_steps(now)
            .find(|s| !taken.is_taken(namespace, run_id, s))
            .map(str::to_string)
        else {
            return;
        };
        if core.budget_spent() {
            core.schedule(Task::WfAdvance((namespace.to_string(), run_id.to_string())));
            return;
        }
        if !core.charge_root(&root, MAX_ADVANCE_STEPS) {
            let step = current_step;
            let reason = format!(
                "the run took more than {MAX_ADVANCE_STEPS} steps without waiting (a loop in \
                 the definition?)"
            );
            end(core, namespace, run_id, &step, &reason);
            return;
        }
        let Some(run) = core.state().workflows.run(namespace, run_id) else {
            return;
        };
        let steps_max = core.limits().run_steps_max;
        if run.steps_executed() >= steps_max {
            let reason = format!(
                "the run executed {steps_max} steps, the most one run may (--max-run-steps); \
                 a loop through its steps that never ends?"
            );
            end(core, namespace, run_id, &current_step, &reason);
            return;
        }
        let def = match &run.def {
            Ok(def) => def.clone(),
            Err(reason) => {
                let reason = reason.clone();
                end(core, namespace, run_id, &current_step, &reason);
                return;
            }
        };
        let step_name = current_step;
        let Some(step) = def.step(&step_name) else {
            let reason = format!("step {step_name:?} is not in the definition");
            end(core, namespace, run_id, &step_name, &reason);
            return;
        };
        // A visit about to start: its limits first.
        let fresh = run.at(&step_name).is_some_and(|c| {
            matches!(c.phase, RunPhase::Ready { .. }) && c.executions == 0 && c.plan.is_none()
        });
        if fresh {
            let visits = run.step_state(&step_name).map_or(0, |s| s.visits);
            if let Some(max) = step.max_visits
                && visits > max
            {
                let reason = format!(
                    "step {step_name:?} was entered {visits} times; its maxVisits is {max}"
                );
                end(core, namespace, run_id, &step_name, &reason);
                return;
            }
            if let Some(filter) = &step.filter {
                let ctx = run_context(run, now);
                let ended = match filter.passes(&ctx) {
                    Ok(true) => None,
                    Ok(false) => Some((StepOutcome::Named(FILTERED.to_string()), None)),
                    Err(why) => Some((
                        StepOutcome::ExecutionFailure,
                        Some(format!("the step's filter could not be evaluated: {why}")),
                    )),
                };
                if let Some((outcome, error)) = ended {
                    finish(
                        core, namespace, run_id, &step_name, outcome, None, error, None,
                    );
                    continue;
                }
            }
            if let Some(defer_ms) = step.defer_ms {
                core.commit(Record::WfRunControl {
                    namespace: namespace.to_string(),
                    run_id: run_id.to_string(),
                    step: Some(step_name),
                    control: RunControl::Defer {
                        until_ms: now.saturating_add(defer_ms),
                    },
                    at_ms: now,
                });
                continue;
            }
        }
        match &step.action {
            // A meeting point: it succeeds at once, with no output.
            StepAction::Pass => {
                let success = StepOutcome::Success;
                finish(
                    core, namespace, run_id, &step_name, success, None, None, None,
                );
            }
            StepAction::WaitForSignal(wait) => {
                let queued = run
                    .signals
                    .iter()
                    .find(|(_, t, _)| *t == wait.signal_type)
                    .map(|(seq, _, p)| (*seq, serde_json::to_vec(p).unwrap_or_default()));
                match queued {
                    Some((seq, payload)) => finish(
                        core,
                        namespace,
                        run_id,
                        &step_name,
                        StepOutcome::Success,
                        Some(payload),
                        None,
                        Some(seq),
                    ),
                    None => {
                        // The record's observe sets the deadline's timer (none beyond the
                        // timer horizon: such a wait never times out).
                        let deadline_ms = wait.timeout_ms.and_then(|t| deadline_after(now, t));
                        core.commit(Record::WfStepStarted {
                            namespace: namespace.to_string(),
                            run_id: run_id.to_string(),
                            step: step_name.clone(),
                            wait: StepWait::Signal {
                                signal_type: wait.signal_type.clone(),
                                deadline_ms,
                            },
                            at_ms: now,
                        });
                        // The run's other branches may have a step to start.
                        continue;
                    }
                }
            }
            StepAction::Run(target) => {
                let input = step_input(core, namespace, run_id, step, now);
                let target = target.clone();
                // Whether it waits or moved on, the next cursor is looked for (a branch's
                // or this one's again).
                run_target(core, namespace, run_id, &step_name, &target, input);
            }
        }
    }
}

/// What a step's filter reads: the run's input, each step's output and outcome, its state,
/// and the time (ms since the epoch).
fn run_context(run: &crate::fold::workflows::WfRun, now: u64) -> Value {
    json!({
        "input": run.input,
        "steps": steps_json(run),
        "state": run.state,
        "now": now,
    })
}

/// Each step that ran: `{"output": ..., "outcome": ...}` by name.
fn steps_json(run: &crate::fold::workflows::WfRun) -> serde_json::Map<String, Value> {
    run.steps
        .iter()
        .filter(|s| s.executions > 0)
        .map(|s| {
            (
                s.name.clone(),
                json!({"output": s.output.clone().unwrap_or(Value::Null), "outcome": s.outcome}),
            )
        })
        .collect()
}

/// The step's input: its `inputMapping` resolved, else the run's input.
fn step_input(
    core: &Core,
    namespace: &str,
    run_id: &str,
    step: &flo_workflow::Step,
    now: u64,
) -> Vec<u8> {
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return Vec::new();
    };
    let Some(mapping) = &step.input_mapping else {
        return run.input_bytes.clone();
    };
    let steps = steps_json(run);
    let ctx = json!({
        "input": run.input,
        "state": run.state,
        "steps": steps,
        "flo": {"run_id": run_id, "timestamp": now},
    });
    serde_json::to_vec(&flo_workflow::resolve_mapping(mapping, &ctx)).unwrap_or_default()
}

/// Starts a run step's target (or finishes the step at once with an execution-level
/// outcome).
#[allow(clippy::too_many_arguments)]
fn run_target(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    target: &Target,
    input: Vec<u8>,
) {
    let now = core.now_ms();
    let fail = |outcome: StepOutcome, error: String| (outcome, error);
    let problem = match target {
        // An `inputMapping` may assemble an input larger than any run accepts.
        _ if input.len() > RUN_INPUT_BYTES_MAX => Some(fail(
            StepOutcome::ExecutionFailure,
            format!(
                "the step's input of {} bytes exceeds the maximum of {RUN_INPUT_BYTES_MAX} bytes",
                input.len()
            ),
        )),
        Target::Plan(_) => None,
        Target::Action(name) => match core.state().registry.get(namespace, name) {
            None => Some(fail(
                StepOutcome::TargetNotFound,
                format!("action {name:?} is not registered"),
            )),
            Some(def) if !def.enabled => Some(fail(
                StepOutcome::TargetDisabled,
                format!("action {name:?} is disabled"),
            )),
            Some(_) => None,
        },
        Target::Workflow { name, version } => {
            let depth = core
                .state()
                .workflows
                .run(namespace, run_id)
                .map_or(0, |r| r.depth);
            match core.state().workflows.def(namespace, name) {
                None => Some(fail(
                    StepOutcome::TargetNotFound,
                    format!("workflow {name:?} is not defined"),
                )),
                Some(e) if e.get(version.as_deref()).is_none() => Some(fail(
                    StepOutcome::TargetNotFound,
                    format!(
                        "workflow {name:?} has no version {:?}",
                        version.as_deref().unwrap_or_default()
                    ),
                )),
                Some(e) if !e.enabled => Some(fail(
                    StepOutcome::TargetDisabled,
                    format!("workflow {name:?} is disabled"),
                )),
                Some(_) if depth + 1 > CHILD_DEPTH_MAX => Some(fail(
                    StepOutcome::ExecutionFailure,
                    format!("child workflows nest at most {CHILD_DEPTH_MAX} deep"),
                )),
                Some(_) => None,
            }
        }
    };
    if let Some((outcome, error)) = problem {
        finish(
            core,
            namespace,
            run_id,
            step,
            outcome,
            None,
            Some(error),
            None,
        );
        return;
    }
    let step_ref = StepRef {
        run_id: run_id.to_string(),
        step: step.to_string(),
    };
    match target {
        Target::Action(name) => {
            let Some(def) = core.state().registry.get(namespace, name) else {
                return;
            };
            // A WebAssembly action executes in this shard's slots: no action run, nothing
            // logged until it finished (`wasm_steps::on_step_executed`).
            if def.kind == ActionKind::Wasm {
                core.steps_mut().push(StepExec {
                    run: (namespace.to_string(), run_id.to_string()),
                    step: step.to_string(),
                    action: name.clone(),
                    input,
                    queued_ms: now,
                });
                return;
            }
            let version = def.version;
            let state = core.state();
            let action_run = state.runs.next_run_id(namespace, name, |id| {
                state.owns(namespace, id) && state.run_id_free(RunKind::Action, namespace, id)
            });
            core.commit(Record::RunCreated {
                namespace: namespace.to_string(),
                run_id: action_run.clone(),
                action: name.clone(),
                action_version: version,
                input,
                priority: crate::fold::runs::PRIORITY_DEFAULT,
                labels: None,
                idempotency_key: None,
                created_at_ms: now,
                available_at_ms: now,
                step: Some(step_ref),
            });
            // Applying RunCreated (its `step`) started the step as well; its observe
            // queued the run.
        }
        Target::Workflow { name, version } => {
            let Some(version) = core
                .state()
                .workflows
                .def(namespace, name)
                .and_then(|e| e.get(version.as_deref()))
                .map(|v| v.version.clone())
            else {
                return;
            };
            let state = core.state();
            let child = state.workflows.next_run_id(namespace, |id| {
                state.owns(namespace, id) && state.run_id_free(RunKind::Workflow, namespace, id)
            });
            // The child's start and the parent's wait are one atomic group.
            core.commit_group(vec![
                Record::WfRunStarted {
                    schedule: None,
                    namespace: namespace.to_string(),
                    run_id: child.clone(),
                    workflow: name.clone(),
                    version,
                    input,
                    idempotency_key: None,
                    parent: Some(step_ref),
                    at_ms: now,
                    group: core
                        .state()
                        .workflows
                        .run(namespace, run_id)
                        .and_then(|r| r.group.clone()),
                    webhook: None,
                },
                Record::WfStepStarted {
                    namespace: namespace.to_string(),
                    run_id: run_id.to_string(),
                    step: step.to_string(),
                    wait: StepWait::ChildRun {
                        run_id: child.clone(),
                    },
                    at_ms: now,
                },
            ]);
            core.schedule(Task::WfAdvance((namespace.to_string(), child)));
        }
        Target::Plan(name) => {
            let mv = crate::plans::next(core, namespace, run_id, step, name, input);
            super::plan_steps::apply_move(core, namespace, run_id, step, mv);
        }
    }
}
