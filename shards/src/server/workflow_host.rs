//! Workflow operations on their shard: start, signal, cancel, wait; and what the engine asks
//! for afterwards (executions, timers, replies to waiters).

use super::shard::{ReplyTo, Shard};
use super::{wasm_runner, worker_host};
use crate::clock::{Clock, SystemClock};
use crate::workflows::WfEffects;
use flo_protocol::{RUN_WAIT_MS_MAX, Reply, WorkflowStartSpec};
use std::rc::Rc;

/// Carries out what the engine asked for after changing state.
pub(crate) fn apply_effects(shard: &Rc<Shard>, fx: WfEffects) {
    if fx.lsn > 0 {
        shard.flush.notify();
    }
    if fx.wasm_kick {
        wasm_runner::kick(shard);
    }
    worker_host::dispatch_soon(shard);
    if fx.timers_changed {
        shard.timer_signal.notify();
    }
    for (namespace, run_id) in &fx.wf_finals {
        shard.workflow_final(namespace, run_id);
    }
    for (namespace, run_id) in &fx.action_finals {
        shard.run_final(namespace, run_id);
    }
}

pub(crate) fn start(shard: &Rc<Shard>, spec: WorkflowStartSpec, to: ReplyTo) {
    let (namespace, wait_ms) = (spec.namespace.clone(), spec.wait_ms);
    let mut fx = WfEffects::default();
    let done = shard.core.borrow_mut().wf_start(spec, &mut fx);
    apply_effects(shard, fx);
    match (wait_ms, done.result) {
        (Some(wait_ms), Ok(Reply::WorkflowStarted { run_id, .. })) => {
            wait(shard, namespace, run_id, wait_ms, to)
        }
        (_, result) => shard.reply(to, done.wait_lsn, result),
    }
}

pub(crate) fn signal(
    shard: &Rc<Shard>,
    namespace: String,
    run_id: String,
    signal_type: String,
    payload: Vec<u8>,
    to: ReplyTo,
) {
    let mut fx = WfEffects::default();
    let done =
        shard
            .core
            .borrow_mut()
            .wf_signal(&namespace, &run_id, signal_type, payload, &mut fx);
    apply_effects(shard, fx);
    shard.reply(to, done.wait_lsn, done.result);
}

pub(crate) fn cancel(
    shard: &Rc<Shard>,
    namespace: String,
    run_id: String,
    reason: Option<String>,
    to: ReplyTo,
) {
    let mut fx = WfEffects::default();
    let done = shard
        .core
        .borrow_mut()
        .wf_cancel(&namespace, &run_id, reason, &mut fx);
    apply_effects(shard, fx);
    shard.reply(to, done.wait_lsn, done.result);
}

/// Replies with the run once it is final, or after `timeout_ms` with its current status.
pub(crate) fn wait(
    shard: &Rc<Shard>,
    namespace: String,
    run_id: String,
    timeout_ms: u64,
    to: ReplyTo,
) {
    let status = shard.core.borrow().wf_status(&namespace, &run_id);
    let is_final = matches!(&status.result, Ok(Reply::WorkflowRun(info)) if info.status.is_final());
    if status.result.is_err() || is_final || timeout_ms == 0 {
        shard.reply(to, status.wait_lsn, status.result);
        return;
    }
    let deadline = SystemClock.now_ms() + timeout_ms.min(RUN_WAIT_MS_MAX);
    shard.watch_workflow((namespace, run_id), deadline, to);
    if deadline < shard.watch_wake_ms.get() {
        shard.watch_signal.notify();
    }
}

/// Retries, polls and signal deadlines that came due.
pub(crate) fn fire_timers(shard: &Rc<Shard>) {
    let mut fx = WfEffects::default();
    shard.core.borrow_mut().wf_fire_timers(&mut fx);
    apply_effects(shard, fx);
}

/// At start-up: every in-flight run continues where it was.
pub(crate) fn resume_all(shard: &Rc<Shard>) {
    let mut fx = WfEffects::default();
    shard.core.borrow_mut().wf_resume_all(&mut fx);
    apply_effects(shard, fx);
}
