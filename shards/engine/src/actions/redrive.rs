//! Redriving dead-lettered runs (`flo action dlq NAME --redrive`): a run that failed or
//! timed out after its retries is queued again as a new attempt, through a `RunRedriven`
//! record. One that left memory is read back from the log first (`Dest::Redrive`) and
//! comes back to memory from its archived document.

use super::Executions;
use super::ops::run_status;
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::archive::{Entry, RunKind};
use crate::fold::archived::action_status;
use crate::fold::runs::plan_redrive;
use flo_protocol::{ErrorValue, Reply};

/// Whether an archived run may be redriven, from its index entry alone: only one that was
/// dead-lettered (its document says the rest once read).
pub fn redrivable_entry(entry: &Entry, run_id: &str) -> Result<(), ErrorValue> {
    if entry.dead_lettered {
        return Ok(());
    }
    Err(ErrorValue::conflict(format!(
        "run {run_id:?} is {} and not dead-lettered; only dead-lettered runs (failed or \
         timed out after their retries) can be redriven",
        action_status(entry.status).as_str()
    )))
}

/// `RunRedrive` of a run in memory: pending again at its next attempt; answers the run.
pub fn redrive(
    core: &mut Core,
    execs: &Executions,
    namespace: &str,
    run_id: &str,
    action: Option<&str>,
) -> Done {
    let now = core.now_ms();
    let state = core.state();
    let planned = state
        .runs
        .plan_redrive_live(&state.registry, namespace, run_id, action, now);
    match planned {
        Ok(record) => {
            core.commit(record);
            run_status(core, execs, namespace, run_id)
        }
        Err(e) => Done::now(Err(e)),
    }
}

/// `RunRedrive` of an archived run, once its document is read back (`read`: the answer to
/// the read of its archive record at `lsn`): the run comes back to memory, pending at its
/// next attempt.
pub fn redrive_archived(
    core: &mut Core,
    execs: &Executions,
    lsn: u64,
    read: Done,
    action: Option<&str>,
) -> Done {
    let info = match read.result {
        Ok(Reply::Run(info)) => info,
        Ok(other) => {
            let e = ErrorValue::internal(format!("an archived run read back as {other:?}"));
            return Done::now(Err(e));
        }
        Err(e) => return Done::now(Err(e)),
    };
    let (namespace, run_id) = (info.namespace.clone(), info.run_id.clone());
    match core.state().archived(RunKind::Action, &namespace, &run_id) {
        Some(entry) if entry.lsn == lsn => {}
        // Back in memory while it was read (another redrive): as any run in memory.
        None if core.state().runs.get(&namespace, &run_id).is_some() => {
            return redrive(core, execs, &namespace, &run_id, action);
        }
        _ => {
            return Done::now(Err(ErrorValue::conflict(format!(
                "run {run_id:?} changed while it was read back from the log; redrive it again"
            ))));
        }
    }
    // It comes back to memory: a run in flight like a new one.
    if let Err(e) = core.check_live_runs(&namespace) {
        return Done::now(Err(e));
    }
    let now = core.now_ms();
    let registry = &core.state().registry;
    match plan_redrive(registry, &info, action, Some(info.clone()), now) {
        Ok(record) => {
            core.commit(record);
            run_status(core, execs, &namespace, &run_id)
        }
        Err(e) => Done::now(Err(e)),
    }
}
