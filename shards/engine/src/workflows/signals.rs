//! Signals: stored on the run in arrival order; a step waiting for a type consumes the
//! earliest, or times out at its deadline.

use super::advance::advance;
use super::finish::{after_end, finish};
use super::queries::{archived_status, find_run};
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::record::{Record, StepNext, StepOutcome, StepWait};
use flo_protocol::{ErrorValue, RUN_INPUT_BYTES_MAX, Reply, WorkflowRunStatus};
use flo_workflow::{Next, SIGNAL_TYPE_BYTES_MAX, StepAction};
use serde_json::Value;

/// Signals a run holds before it consumes them: one more answers `overloaded`.
pub const SIGNALS_QUEUED_MAX: usize = 1000;

/// Stores a signal; a run waiting for its type consumes it and moves on.
pub fn signal(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    signal_type: String,
    payload: Vec<u8>,
) -> Done {
    let now = core.now_ms();
    let check = || -> Result<(), ErrorValue> {
        let status = match archived_status(core, namespace, run_id) {
            Some(status) => status,
            None => {
                let run = find_run(core, namespace, run_id)?;
                if run.signals.len() >= SIGNALS_QUEUED_MAX && !run.status().is_final() {
                    return Err(ErrorValue::new(
                        flo_protocol::ErrorCode::Overloaded,
                        format!(
                            "workflow run {run_id:?} holds {SIGNALS_QUEUED_MAX} signals not \
                             consumed yet, the most a run queues; send more once it consumes \
                             some"
                        ),
                    ));
                }
                run.status()
            }
        };
        if status.is_final() {
            return Err(ErrorValue::conflict(format!(
                "workflow run {run_id:?} is already {}; it takes no more signals",
                status.as_str()
            )));
        }
        if signal_type.is_empty() || signal_type.len() > SIGNAL_TYPE_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "signal type must be 1 to {SIGNAL_TYPE_BYTES_MAX} bytes"
            )));
        }
        if flo_workflow::state::reserved_signal_type(&signal_type) {
            return Err(ErrorValue::bad_request(format!(
                "signal types starting with `flo.` are the server's own ({signal_type:?}); a \
                 step waiting in `waitForState` goes on with `flo workflow update-state RUN \
                 JSON --continue`"
            )));
        }
        if payload.len() > RUN_INPUT_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "signal payload must be at most {RUN_INPUT_BYTES_MAX} bytes"
            )));
        }
        if !payload.is_empty() {
            serde_json::from_slice::<Value>(&payload).map_err(|e| {
                ErrorValue::bad_request(format!("signal payload must be JSON: {e}"))
            })?;
        }
        Ok(())
    };
    if let Err(e) = check() {
        return Done::now(Err(e));
    }
    core.commit(Record::WfSignalReceived {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        signal_type,
        payload,
        at_ms: now,
    });
    let lsn = core.last_lsn();
    try_signal(core, namespace, run_id);
    Done {
        result: Ok(Reply::Done),
        wait_lsn: lsn,
    }
}

/// A run waiting for a signal whose type is queued consumes the earliest and moves on (each
/// branch that waits for one, in turn).
pub(super) fn try_signal(core: &mut Core, namespace: &str, run_id: &str) {
    loop {
        let Some(run) = core.state().workflows.run(namespace, run_id) else {
            return;
        };
        if run.status().is_final() {
            return;
        }
        let found = run.waits().find_map(|(step, wait)| {
            let StepWait::Signal { signal_type, .. } = wait else {
                return None;
            };
            let (seq, _, payload) = run.signals.iter().find(|(_, t, _)| t == signal_type)?;
            Some((step.to_string(), *seq, payload))
        });
        let Some((step, seq, payload)) = found else {
            return;
        };
        let payload = serde_json::to_vec(payload).unwrap_or_default();
        finish(
            core,
            namespace,
            run_id,
            &step,
            StepOutcome::Success,
            Some(payload),
            None,
            Some(seq),
        );
        advance(core, namespace, run_id);
    }
}

/// The signal wait of `step` reached its deadline.
pub(super) fn signal_timeout(core: &mut Core, namespace: &str, run_id: &str, step: &str) {
    let now = core.now_ms();
    let Some(run) = core.state().workflows.run(namespace, run_id) else {
        return;
    };
    let Ok(def) = run.def.clone() else {
        return;
    };
    let step = step.to_string();
    // `onTimeout`, else a `timeout` transition, else the run times out.
    let on_timeout = def.step(&step).and_then(|s| match &s.action {
        StepAction::WaitForSignal(w) => w
            .on_timeout
            .clone()
            .or_else(|| s.transitions.get("timeout").cloned()),
        StepAction::Run(_) | StepAction::Pass => None,
    });
    let next = match on_timeout.as_deref().and_then(|t| def.resolve(t)) {
        Some(Next::Step(s)) => StepNext::Step(s.to_string()),
        Some(Next::Terminal { name, status }) => StepNext::End {
            terminal: name.to_string(),
            status,
            reason: None,
        },
        None => StepNext::End {
            terminal: "flo.TimedOut".to_string(),
            status: WorkflowRunStatus::TimedOut,
            reason: Some(format!("no signal arrived for step {step:?} in time")),
        },
    };
    let ends = matches!(next, StepNext::End { .. });
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step,
        outcome: StepOutcome::Timeout,
        output: None,
        error: None,
        consumed_signal: None,
        next,
        at_ms: now,
        state_patch: None,
        ran: None,
        output_of_run: false,
    });
    if ends {
        after_end(core, namespace, run_id);
    } else {
        advance(core, namespace, run_id);
    }
}
