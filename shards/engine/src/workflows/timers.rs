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
        // What came due, cursor by cursor (a run with branches may have several).
        let mut signal_deadlines = Vec::new();
        let mut plan_deadlines = Vec::new();
        let mut sleep_over = false;
        for cursor in run.cursors() {
            match cursor.phase.wait() {
                Some(StepWait::Signal {
                    deadline_ms: Some(deadline),
                    ..
                }) if *deadline <= now => {
                    signal_deadlines.extend(cursor.phase.step().map(str::to_string))
                }
                None if cursor.phase.timer_ms().is_some_and(|at| at <= now) => sleep_over = true,
                Some(StepWait::ActionRun { run_id: action, .. })
                    if cursor
                        .plan
                        .as_ref()
                        .and_then(|p| p.deadline_ms)
                        .is_some_and(|at| at <= now) =>
                {
                    plan_deadlines.push(action.clone())
                }
                _ => {}
            }
        }
        for step in signal_deadlines {
            signal_timeout(core, &namespace, &run_id, &step);
        }
        for action in plan_deadlines {
            crate::plans::attempt_timed_out(core, &namespace, &action);
        }
        if sleep_over {
            advance(core, &namespace, &run_id);
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
    let waits: Vec<StepWait> = run.waits().map(|(_, w)| w.clone()).collect();
    for wait in waits {
        match wait {
            StepWait::ActionRun { run_id: action, .. } => {
                let done = core
                    .state()
                    .runs
                    .get(namespace, &action)
                    .is_some_and(|r| r.status.is_final());
                if done {
                    on_action_final(core, namespace, &action);
                }
            }
            StepWait::ChildRun { run_id: child } => {
                let done = core
                    .state()
                    .workflows
                    .run(namespace, &child)
                    .is_some_and(|c| c.status().is_final());
                if done {
                    notify_parent(core, namespace, &child);
                }
            }
            StepWait::Signal { .. } => try_signal(core, namespace, run_id),
        }
    }
    // Cursors to start (their timers were set again by replay's observe).
    let now = core.now_ms();
    if core
        .state()
        .workflows
        .run(namespace, run_id)
        .is_some_and(|r| r.ready_step(now).is_some())
    {
        advance(core, namespace, run_id);
    }
}
