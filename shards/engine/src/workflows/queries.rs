//! Reads of live runs: status, history (paged), the runs of a workflow.

use crate::actions::Executions;
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::archive::RunKind;
use crate::fold::record::StepWait;
use crate::fold::workflows::{RunPhase, WfRun, run_info};
use crate::pages::Pos;
use flo_protocol::{
    ErrorValue, RUN_LIST_LIMIT_DEFAULT, RUN_LIST_LIMIT_MAX, Reply, RunStatus, TimedOutFilter,
    WorkflowRunStatus,
};

/// The status a live run shows: `pending` while its step's action run is queued, waiting
/// for a worker to lease it or for a WebAssembly slot, or its WebAssembly step waits for a
/// slot (the spec's "queued, waiting for a
/// worker (or WASM execution)"); else its phase's (`running` while a guest executes its
/// step, `waiting` while a worker holds it or on a signal, a child, a timer).
pub fn shown_status(
    core: &Core,
    execs: &Executions,
    namespace: &str,
    run_id: &str,
    run: &WfRun,
) -> WorkflowRunStatus {
    if let Some(StepWait::ActionRun { run_id, .. }) = run.lead.phase.wait()
        && !run.status().is_final()
        && core
            .state()
            .runs
            .get(namespace, run_id)
            .is_some_and(|r| r.status == RunStatus::Pending)
        && !execs.is_executing(namespace, run_id)
    {
        return WorkflowRunStatus::Pending;
    }
    // Its WebAssembly step waits for a slot.
    if let Some(step) = run.lead.phase.step()
        && !run.status().is_final()
        && core.steps().is_taken(namespace, run_id, step)
        && !execs.is_executing_step(namespace, run_id, step)
    {
        return WorkflowRunStatus::Pending;
    }
    run.status()
}

/// Whether a step of `run` waits (for an action run, a child run, a retry) longer than
/// `older_than_ms`, or than its step's `timeoutMs` when not given.
fn has_timed_out(run: &WfRun, now: u64, older_than_ms: Option<u64>) -> bool {
    let Ok(def) = &run.def else {
        return false;
    };
    run.cursors().any(|c| {
        let stuck = matches!(
            c.phase,
            RunPhase::Waiting {
                wait: StepWait::ActionRun { .. } | StepWait::ChildRun { .. },
                ..
            }
        ) || (matches!(c.phase, RunPhase::Sleeping { .. }) && c.executions > 0);
        let limit = older_than_ms.or_else(|| c.phase.step().and_then(|s| def.step(s)?.timeout_ms));
        stuck && limit.is_some_and(|l| now.saturating_sub(c.first_at_ms) > l)
    })
}

pub(super) fn find_run<'a>(
    core: &'a Core,
    namespace: &str,
    run_id: &str,
) -> Result<&'a WfRun, ErrorValue> {
    core.state()
        .workflows
        .run(namespace, run_id)
        .ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow run {run_id:?} not found in namespace {namespace:?}"
            ))
        })
}

/// The status of an archived (so final) run, for the conflicts that answer changes to it.
pub(super) fn archived_status(
    core: &Core,
    namespace: &str,
    run_id: &str,
) -> Option<WorkflowRunStatus> {
    core.state()
        .archived(RunKind::Workflow, namespace, run_id)
        .map(|e| crate::fold::archived::workflow_status(e.status))
}

pub fn status(core: &Core, execs: &Executions, namespace: &str, run_id: &str) -> Done {
    match find_run(core, namespace, run_id) {
        Ok(run) => Done {
            wait_lsn: run.lsn,
            result: Ok(Reply::WorkflowRun(run_info(
                namespace,
                run_id,
                run,
                shown_status(core, execs, namespace, run_id, run),
            ))),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// A run's history, oldest first: all of it, or (with `limit` or `after`) the page of at
/// most `limit` events after event `after`, with the cursor of the next page.
pub fn history(
    core: &Core,
    namespace: &str,
    run_id: &str,
    limit: Option<u32>,
    after: Option<u64>,
) -> Done {
    match find_run(core, namespace, run_id) {
        Ok(run) => Done {
            wait_lsn: run.lsn,
            result: crate::pages::history_page(&run.history, limit, after),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// Which runs a list keeps: those showing `status`, those with a step past its timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFilter {
    pub status: Option<WorkflowRunStatus>,
    pub timed_out: Option<TimedOutFilter>,
}

pub fn list_runs(
    core: &Core,
    execs: &Executions,
    namespace: &str,
    name: &str,
    filter: RunFilter,
    limit: Option<u32>,
    from: &Pos,
) -> Done {
    let RunFilter { status, timed_out } = filter;
    let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT);
    if limit == 0 || limit > RUN_LIST_LIMIT_MAX {
        return Done::now(Err(ErrorValue::bad_request(format!(
            "limit must be 1 to {RUN_LIST_LIMIT_MAX}, got {limit}"
        ))));
    }
    let shown = |id: &str, r: &WfRun| shown_status(core, execs, namespace, id, r);
    let now = core.now_ms();
    let wanted = |id: &str, r: &WfRun| {
        status.is_none_or(|s| shown(id, r) == s)
            && timed_out.is_none_or(|t| has_timed_out(r, now, t.older_than_ms))
    };
    let (runs, truncated) =
        core.state()
            .workflows
            .list(namespace, name, wanted, limit as usize, from);
    Done {
        wait_lsn: runs.iter().map(|(_, r)| r.lsn).max().unwrap_or(0),
        result: Ok(Reply::WorkflowRuns {
            runs: runs
                .iter()
                .map(|(id, r)| run_info(namespace, id, r, shown(id, r)))
                .collect(),
            truncated,
            next_cursor: None,
        }),
    }
}
