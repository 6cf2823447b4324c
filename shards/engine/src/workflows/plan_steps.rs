//! Steps that run an inline plan (`@plan/NAME`): the plan's moves (`plans`) turned into
//! the step's — waiting, advancing again, or finishing (the plan's last events and the
//! step's end in one atomic group).

use super::finish::{Retry, finish_with};
use crate::core::Core;
use crate::plans::Move;
use flo_workflow::{StepAction, Target};

/// The plan the step `step` of the run's definition runs, if it runs one.
pub(super) fn plan_of(core: &Core, namespace: &str, run_id: &str, step: &str) -> Option<String> {
    let run = core.state().workflows.run(namespace, run_id)?;
    let def = run.def.as_ref().ok()?;
    match &def.step(step)?.action {
        StepAction::Run(Target::Plan(name)) => Some(name.clone()),
        _ => None,
    }
}

/// Carries a plan's move out on its step; returns whether the run may advance at once.
pub(super) fn apply_move(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    mv: Move,
) -> bool {
    match mv {
        Move::Wait => false,
        Move::Continue => true,
        Move::Finish {
            events,
            outcome,
            output,
            error,
        } => {
            let own_group = !core.group_open();
            if own_group {
                core.begin_group();
            }
            for event in events {
                crate::plans::log(core, namespace, run_id, step, event);
            }
            // A plan step retries through its executors, never by a step `retry:`.
            let ended = (outcome, output, error, None);
            finish_with(
                core,
                namespace,
                run_id,
                step,
                ended,
                None,
                Retry::Never,
                None,
                false,
            );
            if own_group {
                core.end_group();
            }
            true
        }
    }
}
