//! Time and restarts: retries, polls and signal deadlines that came due, and the runs that
//! resume after recovery.

use super::advance::advance;
use super::results::{notify_parent, on_action_final};
use super::signals::{signal_timeout, try_signal};
use crate::core::Core;
use crate::fold::record::StepWait;
use crate::ids::RunKey;

/// Workflow timers fired per tick (the rest on the next).
const TIMERS_PER_TICK_MAX: usize = 1024;

/// Retries, polls and signal deadlines that came due (at most `TIMERS_PER_TICK_MAX`;
/// returns whether more may be due).
pub fn fire_timers(core: &mut Core) -> bool {
    let now = core.now_ms();
    let due = core.index_mut().due_workflows(now, TIMERS_PER_TICK_MAX);
    let more = due.len() == TIMERS_PER_TICK_MAX;
    for (namespace, run_id) in due {
        let Some(run) = core.state().workflows.run(&namespace, &run_id) else {
            continue;
        };
        if run.status().is_final() {
            continue;
        }
        match run.phase.wait() {
            Some(StepWait::Signal {
                deadline_ms: Some(deadline),
                ..
            }) if *deadline <= now => signal_timeout(core, &namespace, &run_id),
            None if run.phase.timer_ms().is_some_and(|at| at <= now) => {
                advance(core, &namespace, &run_id)
            }
            Some(StepWait::ActionRun { run_id: action, .. })
                if run
                    .plan
                    .as_ref()
                    .and_then(|p| p.deadline_ms)
                    .is_some_and(|at| at <= now) =>
            {
                let action = action.clone();
                crate::plans::attempt_timed_out(core, &namespace, &action);
            }
            _ => {}
        }
    }
    more
}

/// Runs that are not final (to resume after recovery).
pub fn open_runs(core: &Core) -> Vec<RunKey> {
    core.state()
        .workflows
        .all_runs()
        .filter(|(_, _, r)| !r.status().is_final())
        .map(|(ns, id, _)| (ns.to_string(), id.to_string()))
        .collect()
}

/// After recovery: an in-flight run continues where it was (finishes whose records were
/// lost with a crash are taken again; its timers were set again by replay's observe).
pub fn resume(core: &mut Core, namespace: &str, run_id: &str) {
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return;
    };
    if run.status().is_final() {
        return;
    }
    match run.phase.wait().cloned() {
        Some(StepWait::ActionRun { run_id: action, .. }) => {
            let done = core
                .state()
                .runs
                .get(namespace, &action)
                .is_some_and(|r| r.status.is_final());
            if done {
                on_action_final(core, namespace, &action);
            }
        }
        Some(StepWait::ChildRun { run_id: child }) => {
            let done = core
                .state()
                .workflows
                .run(namespace, &child)
                .is_some_and(|c| c.status().is_final());
            if done {
                notify_parent(core, namespace, &child);
            }
        }
        Some(StepWait::Signal { .. }) => try_signal(core, namespace, run_id),
        None if run.phase.timer_ms().is_none() => advance(core, namespace, run_id),
        None => {}
    }
}
