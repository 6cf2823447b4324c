//! A run's state changed from outside (Codehooks' `updateState` / `setState`):
//! `flo workflow update-state` merges an object's fields into it, `set-state` replaces it,
//! and with `--continue` the run's `waitForState` steps go on in the same atomic group.

use super::advance::advance;
use super::finish::finish;
use super::queries::{archived_status, find_run, status};
use crate::actions::Executions;
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::record::{Record, RunControl, StepOutcome, StepWait};
use flo_protocol::ErrorValue;
use flo_workflow::state::{STATE_BYTES_MAX, STATE_SIGNAL, merge};
use serde_json::Value;

/// Merges (or with `replace` sets) the state of a run that is not final; with
/// `continue_run` its `waitForState` steps finish. Answers its status.
pub fn update_state(
    core: &mut Core,
    execs: &Executions,
    namespace: &str,
    run_id: &str,
    state: Vec<u8>,
    (replace, continue_run): (bool, bool),
) -> Done {
    let waiting = match check(core, namespace, run_id, &state, replace, continue_run) {
        Ok(waiting) => waiting,
        Err(e) => return Done::now(Err(e)),
    };
    let now = core.now_ms();
    let group = !waiting.is_empty();
    if group {
        core.begin_group();
    }
    core.commit(Record::WfRunControl {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: None,
        control: RunControl::State { state, replace },
        at_ms: now,
    });
    for step in &waiting {
        finish(
            core,
            namespace,
            run_id,
            step,
            StepOutcome::Success,
            None,
            None,
            None,
        );
    }
    if group {
        core.end_group();
        advance(core, namespace, run_id);
    }
    let done = status(core, execs, namespace, run_id);
    Done {
        wait_lsn: core.last_lsn().max(done.wait_lsn),
        result: done.result,
    }
}

/// The request checked against the run: the `waitForState` steps it continues.
fn check(
    core: &Core,
    namespace: &str,
    run_id: &str,
    state: &[u8],
    replace: bool,
    continue_run: bool,
) -> Result<Vec<String>, ErrorValue> {
    if let Some(status) = archived_status(core, namespace, run_id) {
        return Err(final_run(run_id, status.as_str()));
    }
    let run = find_run(core, namespace, run_id)?;
    if run.status().is_final() {
        return Err(final_run(run_id, run.status().as_str()));
    }
    if state.len() > STATE_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "the state given is {} bytes; a run's state is at most {STATE_BYTES_MAX}",
            state.len()
        )));
    }
    let fields = match serde_json::from_slice::<Value>(state) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => {
            return Err(ErrorValue::bad_request(
                "the state must be a JSON object of names and values",
            ));
        }
        Err(e) => {
            return Err(ErrorValue::bad_request(format!(
                "the state must be JSON: {e}"
            )));
        }
    };
    if !replace {
        let mut after = run.state.clone();
        merge(&mut after, fields);
        let bytes = after.to_string().len();
        if bytes > STATE_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "the run's state would be {bytes} bytes with these fields; at most \
                 {STATE_BYTES_MAX}: nothing was changed"
            )));
        }
    }
    if !continue_run {
        return Ok(Vec::new());
    }
    let waiting: Vec<String> = run
        .waits()
        .filter(|(_, wait)| {
            matches!(wait, StepWait::Signal { signal_type, .. } if signal_type == STATE_SIGNAL)
        })
        .map(|(step, _)| step.to_string())
        .collect();
    if waiting.is_empty() {
        return Err(ErrorValue::conflict(format!(
            "workflow run {run_id:?} is {} and not waiting in a `waitForState` step, so it \
             cannot continue: nothing was changed (leave out --continue to only update its \
             state)",
            run.status().as_str()
        )));
    }
    Ok(waiting)
}

fn final_run(run_id: &str, status: &str) -> ErrorValue {
    ErrorValue::conflict(format!(
        "workflow run {run_id:?} is already {status}; its state no longer changes"
    ))
}
