//! Cancelling a run: the run, the action run its step waits on and every descendant, in one
//! atomic group.

use super::queries::{archived_status, find_run};
use crate::actions::Executions;
use crate::core::io::Done;
use crate::core::{Core, Task};
use crate::fold::record::{Record, StepWait};
use flo_protocol::ErrorValue;

/// Cancels a run, its current action run and its child runs.
pub fn cancel(
    core: &mut Core,
    execs: &Executions,
    namespace: &str,
    run_id: &str,
    reason: Option<String>,
) -> Done {
    let status = match archived_status(core, namespace, run_id) {
        Some(status) => status,
        None => match find_run(core, namespace, run_id) {
            Err(e) => return Done::now(Err(e)),
            Ok(run) => run.status(),
        },
    };
    if status.is_final() {
        return Done::now(Err(ErrorValue::conflict(format!(
            "workflow run {run_id:?} is already {}; only running or waiting runs can be \
             cancelled",
            status.as_str()
        ))));
    }
    // One atomic group: after a crash the whole tree is cancelled, or none of it.
    core.begin_group();
    cancel_tree(core, namespace, run_id, reason);
    core.end_group();
    let done = super::queries::status(core, execs, namespace, run_id);
    Done {
        wait_lsn: core.last_lsn().max(done.wait_lsn),
        result: done.result,
    }
}

fn cancel_tree(core: &mut Core, namespace: &str, run_id: &str, reason: Option<String>) {
    let now = core.now_ms();
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return;
    };
    if run.status().is_final() {
        return;
    }
    // Every branch's action run (its child runs are among `children`).
    let actions: Vec<StepWait> = run
        .waits()
        .filter(|(_, w)| matches!(w, StepWait::ActionRun { .. }))
        .map(|(_, w)| w.clone())
        .collect();
    let children = run.children.clone();
    core.commit(Record::WfRunCancelled {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        reason: reason.clone(),
        at_ms: now,
    });
    core.schedule(Task::WfFinal((namespace.to_string(), run_id.to_string())));
    cancel_waits(core, namespace, &actions, "");
    for child in children {
        let why = Some(format!("parent run {run_id} cancelled"));
        cancel_tree(core, namespace, &child, why);
    }
}

/// Cancels what a run's branches waited for once the run ended without them (`why`): their
/// action runs and their child runs, with the children's own trees.
pub(super) fn cancel_waits(core: &mut Core, namespace: &str, waits: &[StepWait], why: &str) {
    let now = core.now_ms();
    for wait in waits {
        match wait {
            StepWait::ActionRun { run_id: action, .. } => {
                if let Ok(record) = core.state().runs.plan_cancel(namespace, action, now) {
                    core.commit(record);
                    core.schedule(Task::ActionFinal((namespace.to_string(), action.clone())));
                }
            }
            StepWait::ChildRun { run_id: child } => {
                cancel_tree(core, namespace, child, Some(why.to_string()));
            }
            StepWait::Signal { .. } => {}
        }
    }
}
