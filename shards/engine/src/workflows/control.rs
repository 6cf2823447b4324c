//! Manual control of a run (flow8's `ON_HOLD`, Codehooks' `continue`): pause it before its
//! next step, resume it, or continue the steps it is stuck in. Each is a
//! `Record::WfRunControl`, in the run's history.

use super::advance::advance;
use super::cancel::cancel_waits;
use super::queries::{archived_status, find_run, status};
use crate::actions::Executions;
use crate::core::io::Done;
use crate::core::{Core, Task};
use crate::fold::record::{Record, RunControl, StepWait};
use crate::fold::workflows::RunPhase;
use flo_protocol::{ErrorValue, WorkflowControl};

/// Pauses, resumes or continues a run that is not final; answers its status.
pub fn control(
    core: &mut Core,
    execs: &Executions,
    namespace: &str,
    run_id: &str,
    control: WorkflowControl,
) -> Done {
    let held = match archived_status(core, namespace, run_id) {
        Some(status) => Err(status),
        None => match find_run(core, namespace, run_id) {
            Err(e) => return Done::now(Err(e)),
            Ok(run) if run.status().is_final() => Err(run.status()),
            Ok(run) => Ok(run.held),
        },
    };
    let held = match held {
        Ok(held) => held,
        Err(status) => {
            return Done::now(Err(ErrorValue::conflict(format!(
                "workflow run {run_id:?} is already {}; only running or waiting runs can be \
                 paused, resumed or continued",
                status.as_str()
            ))));
        }
    };
    let now = core.now_ms();
    let record = |step: Option<String>, control: RunControl| Record::WfRunControl {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step,
        control,
        at_ms: now,
    };
    match control {
        // Pausing a paused run (or resuming a running one) changes nothing.
        WorkflowControl::Pause if !held => {
            core.commit(record(None, RunControl::Hold));
        }
        WorkflowControl::Resume if held => {
            core.commit(record(None, RunControl::Release));
            advance(core, namespace, run_id);
        }
        WorkflowControl::Pause | WorkflowControl::Resume => {}
        WorkflowControl::Continue { reset_visits } => {
            let stuck = stuck_steps(core, namespace, run_id);
            if stuck.is_empty() {
                return Done::now(Err(ErrorValue::conflict(format!(
                    "workflow run {run_id:?} has no step to continue: continue starts again a \
                     step that waits for an action run or a child run, or sleeps before a retry"
                ))));
            }
            // One atomic group: the steps start again and what they waited for is
            // cancelled, or neither.
            core.begin_group();
            for (step, wait) in &stuck {
                core.commit(record(
                    Some(step.clone()),
                    RunControl::Continue { reset_visits },
                ));
                let why = format!("workflow run {run_id} continued step {step}");
                cancel_waits(core, namespace, wait.as_slice(), &why);
            }
            core.end_group();
            core.schedule(Task::WfAdvance((namespace.to_string(), run_id.to_string())));
        }
    }
    let done = status(core, execs, namespace, run_id);
    Done {
        wait_lsn: core.last_lsn().max(done.wait_lsn),
        result: done.result,
    }
}

/// The run's steps that `continue` starts again, with what each waits for.
pub(super) fn stuck_steps(
    core: &Core,
    namespace: &str,
    run_id: &str,
) -> Vec<(String, Option<StepWait>)> {
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return Vec::new();
    };
    run.cursors()
        .filter_map(|c| match &c.phase {
            RunPhase::Waiting {
                step,
                wait: wait @ (StepWait::ActionRun { .. } | StepWait::ChildRun { .. }),
            } => Some((step.clone(), Some(wait.clone()))),
            RunPhase::Sleeping { step, .. } if c.executions > 0 => Some((step.clone(), None)),
            _ => None,
        })
        .collect()
}
