//! Steps on WebAssembly actions, executed in the shard's own slots without an action run:
//! `advance` puts the step in line for a slot (`crate::core::StepQueue`; nothing is logged),
//! `on_step_executed` turns its execution's result into the step's one record — a
//! `WfStepFinished` carrying when it started and its guest's KV writes
//! (`Record::WfStepFinished::ran`) — and moves the run on. A crash before that record
//! loses nothing acknowledged: the run is still at the step after a restart and is
//! advanced again (`Task::WfResume`), which queues the step anew.

use super::advance::advance;
use super::finish::{Retry, finish_with};
use super::results::timeout_error;
use crate::actions::{StepExecuted, guest_kv_writes, split_state_patch};
use crate::core::Core;
use crate::fold::record::{StepOutcome, StepRan, StepRef};
use crate::fold::workflows::step_output_json;

/// A step's execution ended (or could not start): unless its run moved on meanwhile
/// (cancelled, ended by another branch), the step finishes with what the guest gave — its
/// output, its outcome, the state fields it set, its KV writes — or its failure, in one
/// record, and the run goes on.
pub fn on_step_executed(core: &mut Core, done: StepExecuted) {
    let StepExecuted {
        run: (namespace, run_id),
        step,
        started_ms,
        mut result,
    } = done;
    core.steps_mut().release(&namespace, &run_id, &step);
    let at_step = core.state().workflows.run(&namespace, &run_id);
    if !at_step.is_some_and(|r| r.is_to_start(&step)) {
        return;
    }
    let step_ref = StepRef {
        run_id: run_id.clone(),
        step: step.clone(),
    };
    // The guest's state fields: the run's own, and the shared scopes' as KV writes.
    let (state_patch, scoped) = split_state_patch(core, &namespace, Some(&step_ref), &mut result);
    let (outcome, output, error, kv_writes) = match result.output {
        Ok(output) => {
            let outcome = result
                .outcome
                .as_deref()
                .map_or(StepOutcome::Success, StepOutcome::from_name);
            let output = step_output_json(&output);
            let writes = guest_kv_writes(result.kv_writes, scoped);
            (outcome, Some(output), None, writes)
        }
        Err(failure) if failure.timed_out => {
            let error = timeout_error(core, &namespace, &step_ref, Some(failure.error));
            (StepOutcome::Timeout, None, error, Vec::new())
        }
        Err(failure) => (StepOutcome::Failure, None, Some(failure.error), Vec::new()),
    };
    let ran = StepRan {
        ran_ms: core.now_ms().saturating_sub(started_ms),
        kv_writes,
    };
    finish_with(
        core,
        &namespace,
        &run_id,
        &step,
        (outcome, output, error, state_patch),
        None,
        Retry::ByPolicy,
        Some(ran),
        false,
    );
    advance(core, &namespace, &run_id);
}
