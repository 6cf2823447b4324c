//! Worker task dispatch across shards.
//!
//! A worker's home is the shard its id hashes to (its registry entry lives there). Its
//! `TaskAwait` asks every shard at once for a share of the tasks it wants (a *want*): the
//! home leases from its own queues directly and sends the others a `Want`. A shard with
//! matching tasks leases them (a logged record) and replies with the assignments once
//! the lease is durable; a shard with none parks the want and delivers when tasks arrive.
//! The home answers the worker as soon as every shard replied and at least one task came,
//! or at the deadline with none; then it cancels the wants still parked. Tasks that reach
//! the home after the await was answered are released (pending again, same attempt).

use super::shard::{ReplyTo, Shard, ShardOp};
use crate::actions::ActionKey;
use crate::clock::{Clock, SystemClock};
use crate::kv::validate_namespace;
use crate::workers::{TaskReport, WantSpec, validate_worker_id};
use ahash::AHashMap as HashMap;
use flo_protocol::{
    ActionKind, ErrorValue, Reply, TASK_AWAIT_MS_MAX, TASK_AWAIT_TASKS_MAX, TaskAssignment,
    WORKER_PROCESSES_MAX,
};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

type WorkerKey = (String, String);

/// An await being answered, on the worker's home shard.
struct OpenAwait {
    want_id: u64,
    room: usize,
    tasks: Vec<TaskAssignment>,
    /// LSN of the home's own lease record (the others were durable before they came).
    lsn: u64,
    /// Shards that have not answered the first ask yet.
    immediate_pending: u32,
    /// Shards holding a parked want for this await.
    parked: Vec<u32>,
    to: ReplyTo,
    deadline_ms: u64,
}

/// A worker's want parked on a shard that had no matching task when asked.
struct Want {
    origin: u32,
    want_id: u64,
    actions: Vec<String>,
    labels: Option<Map<String, Value>>,
    room: usize,
    deadline_ms: u64,
}

#[derive(Default)]
pub(crate) struct WorkerHost {
    awaits: RefCell<HashMap<WorkerKey, OpenAwait>>,
    wants: RefCell<HashMap<WorkerKey, Want>>,
    /// Parked wants by action, served round-robin (may hold ids of wants since gone).
    wants_by_action: RefCell<HashMap<ActionKey, VecDeque<String>>>,
    next_want_id: Cell<u64>,
    dispatch_scheduled: Cell<bool>,
    /// Rotates which shards get the remainder when an await is split.
    rotate: Cell<u32>,
}

/// Parameters of a `Want` sent to another shard.
pub(crate) struct WantMsg {
    pub namespace: String,
    pub worker_id: String,
    pub want_id: u64,
    pub actions: Vec<String>,
    pub labels: Option<Map<String, Value>>,
    pub room: u32,
    pub deadline_ms: u64,
}

fn now_real() -> u64 {
    SystemClock.now_ms()
}

/// `TaskAwait` on the worker's home shard.
pub(crate) fn await_tasks(
    shard: &Rc<Shard>,
    namespace: String,
    worker_id: String,
    actions: Vec<String>,
    max_tasks: u32,
    block_ms: u64,
    to: ReplyTo,
) {
    let labels = match check_await(shard, &namespace, &worker_id, &actions, max_tasks) {
        Ok(Some(labels)) => labels,
        Ok(None) => {
            // Draining: nothing new.
            shard.reply(to, 0, Ok(Reply::Tasks(Vec::new())));
            return;
        }
        Err(e) => {
            shard.reply(to, 0, Err(e));
            return;
        }
    };
    let key = (namespace.clone(), worker_id.clone());
    abandon_await(shard, &key);
    let host = &shard.workers;
    let want_id = host.next_want_id.get() + 1;
    host.next_want_id.set(want_id);
    let block_ms = block_ms.min(TASK_AWAIT_MS_MAX);
    let deadline_ms = now_real() + block_ms;
    let shards = shard.partitioning.shards;
    let shares = split(max_tasks, shards, host.rotate.get());
    host.rotate.set(host.rotate.get().wrapping_add(1));

    let (tasks, lsn) = {
        let mut core = shard.core.borrow_mut();
        let now = core.clock.now_ms();
        core.lease_tasks(
            &WantSpec {
                namespace: &namespace,
                worker_id: &worker_id,
                actions: &actions,
                labels: labels.as_ref(),
                max: shares[shard.id as usize] as usize,
            },
            now,
        )
    };
    if lsn > 0 {
        shard.flush.notify();
    }
    let mut parked = Vec::new();
    if tasks.is_empty() && block_ms > 0 {
        park_want(
            shard,
            &namespace,
            &worker_id,
            Want {
                origin: shard.id,
                want_id,
                actions: actions.clone(),
                labels: labels.clone(),
                room: shares[shard.id as usize] as usize,
                deadline_ms,
            },
        );
        parked.push(shard.id);
    }
    for s in (0..shards).filter(|&s| s != shard.id) {
        let msg = WantMsg {
            namespace: namespace.clone(),
            worker_id: worker_id.clone(),
            want_id,
            actions: actions.clone(),
            labels: labels.clone(),
            room: shares[s as usize],
            deadline_ms,
        };
        let call = shard.begin_shard_call(s, ShardOp::Want(Box::new(msg)));
        let (shard, namespace, worker_id) = (shard.clone(), namespace.clone(), worker_id.clone());
        glommio::spawn_local(async move {
            let tasks = match call.finish(&shard).await {
                Ok(Reply::Tasks(tasks)) => tasks,
                _ => Vec::new(),
            };
            on_delivery(&shard, &namespace, &worker_id, want_id, s, tasks, true);
        })
        .detach();
    }
    host.awaits.borrow_mut().insert(
        key.clone(),
        OpenAwait {
            want_id,
            room: max_tasks as usize,
            tasks,
            lsn,
            immediate_pending: shards - 1,
            parked,
            to,
            deadline_ms,
        },
    );
    maybe_answer(shard, &key);
    if deadline_ms < shard.watch_wake_ms.get() {
        shard.watch_signal.notify();
    }
}

/// Validates an await; `Ok(None)` when the worker is draining, else its labels.
fn check_await(
    shard: &Shard,
    namespace: &str,
    worker_id: &str,
    actions: &[String],
    max_tasks: u32,
) -> Result<Option<Option<Map<String, Value>>>, ErrorValue> {
    validate_namespace(namespace)?;
    validate_worker_id(worker_id)?;
    if actions.is_empty() || actions.len() > WORKER_PROCESSES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "name 1 to {WORKER_PROCESSES_MAX} actions to await"
        )));
    }
    if max_tasks == 0 || max_tasks > TASK_AWAIT_TASKS_MAX {
        return Err(ErrorValue::bad_request(format!(
            "max tasks must be 1 to {TASK_AWAIT_TASKS_MAX}, got {max_tasks}"
        )));
    }
    let core = shard.core.borrow();
    let worker = core.workers.require(namespace, worker_id)?;
    for action in actions {
        let def = core.state.registry.require(namespace, action)?;
        if def.kind != ActionKind::User {
            return Err(ErrorValue::bad_request(format!(
                "action {action:?} is a wasm action: the server runs it, workers cannot await it"
            )));
        }
        if !worker.processes_action(action) {
            let list: Vec<&str> = worker.processes.iter().map(|p| p.name.as_str()).collect();
            return Err(ErrorValue::bad_request(format!(
                "worker {worker_id:?} is not registered for action {action:?} (it processes: \
                 {}); register it again with that action",
                list.join(", ")
            )));
        }
    }
    if worker.is_draining() {
        return Ok(None);
    }
    Ok(Some(worker.label_map.clone()))
}

/// Splits `max` tasks over `shards` (each asked for at least one), the remainder going
/// to shards in rotating order.
fn split(max: u32, shards: u32, rotate: u32) -> Vec<u32> {
    let base = max / shards;
    let extra = max % shards;
    (0..shards)
        .map(|s| {
            let turn = (s + shards - rotate % shards) % shards;
            (base + u32::from(turn < extra)).max(1)
        })
        .collect()
}

/// Tasks for an open await arrived from shard `from` (`immediate`: its reply to the
/// first ask). Tasks nobody waits for any more are released.
pub(crate) fn on_delivery(
    shard: &Rc<Shard>,
    namespace: &str,
    worker_id: &str,
    want_id: u64,
    from: u32,
    tasks: Vec<TaskAssignment>,
    immediate: bool,
) {
    let key = (namespace.to_string(), worker_id.to_string());
    if shard
        .workers
        .awaits
        .borrow()
        .get(&key)
        .is_some_and(|a| a.to.is_closed())
    {
        // The worker's connection is gone: nothing can reach it.
        abandon_await(shard, &key);
    }
    let extra = {
        let mut awaits = shard.workers.awaits.borrow_mut();
        match awaits.get_mut(&key).filter(|a| a.want_id == want_id) {
            None => tasks,
            Some(open) => {
                if immediate {
                    open.immediate_pending = open.immediate_pending.saturating_sub(1);
                    if tasks.is_empty() {
                        open.parked.push(from);
                    }
                } else {
                    open.parked.retain(|&s| s != from);
                }
                let room = open.room.saturating_sub(open.tasks.len());
                let mut bytes: usize = open.tasks.iter().map(|t| t.payload.len()).sum();
                let mut extra = Vec::new();
                for task in tasks {
                    let fits = open.tasks.is_empty()
                        || bytes + task.payload.len() <= AWAIT_REPLY_BYTES_MAX;
                    if open.tasks.len() < room && fits {
                        bytes += task.payload.len();
                        open.tasks.push(task);
                    } else {
                        extra.push(task);
                    }
                }
                extra
            }
        }
    };
    if !extra.is_empty() {
        let ids = extra.into_iter().map(|t| t.task_id).collect();
        release(shard, from, namespace, worker_id, ids);
    }
    maybe_answer(shard, &key);
}

fn maybe_answer(shard: &Rc<Shard>, key: &WorkerKey) {
    let ready = shard.workers.awaits.borrow().get(key).is_some_and(|a| {
        a.immediate_pending == 0 && (!a.tasks.is_empty() || a.deadline_ms <= now_real())
    });
    if ready {
        finish_await(shard, key);
    }
}

/// Payload bytes one await's reply may carry (at least one task): under the frame limit.
const AWAIT_REPLY_BYTES_MAX: usize = 3 << 20;

/// Drops the worker's open await without handing it its tasks (its connection closed, or
/// the worker asked again): they are released, it gets an empty answer if it still listens.
fn abandon_await(shard: &Rc<Shard>, key: &WorkerKey) {
    let tasks = match shard.workers.awaits.borrow_mut().get_mut(key) {
        Some(open) => std::mem::take(&mut open.tasks),
        None => return,
    };
    release_assignments(shard, &key.0, &key.1, tasks);
    finish_await(shard, key);
}

/// Hands back tasks leased to a worker that cannot receive them (each to its owner shard).
pub(crate) fn release_assignments(
    shard: &Rc<Shard>,
    namespace: &str,
    worker_id: &str,
    tasks: Vec<TaskAssignment>,
) {
    let mut by_owner: HashMap<u32, Vec<String>> = HashMap::new();
    for task in tasks {
        let owner = shard.partitioning.shard_of(namespace, &task.task_id);
        by_owner.entry(owner).or_default().push(task.task_id);
    }
    for (owner, ids) in by_owner {
        release(shard, owner, namespace, worker_id, ids);
    }
}

/// Answers the worker's open await with what it has and cancels its parked wants.
fn finish_await(shard: &Rc<Shard>, key: &WorkerKey) {
    let Some(open) = shard.workers.awaits.borrow_mut().remove(key) else {
        return;
    };
    for s in open.parked {
        if s == shard.id {
            cancel_want(shard, &key.0, &key.1, open.want_id);
        } else {
            shard.tell(
                s,
                ShardOp::WantCancel {
                    namespace: key.0.clone(),
                    worker_id: key.1.clone(),
                    want_id: open.want_id,
                },
            );
        }
    }
    let mut tasks = open.tasks;
    if open.to.is_closed() {
        release_assignments(shard, &key.0, &key.1, tasks);
        return;
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.priority));
    shard.reply(open.to, open.lsn, Ok(Reply::Tasks(tasks)));
}

/// Answers awaits whose deadline passed; returns the next deadline.
pub(crate) fn expire_awaits(shard: &Rc<Shard>, now_ms: u64) -> Option<u64> {
    let (due, next) = {
        let awaits = shard.workers.awaits.borrow();
        // An await still missing a shard's first answer is answered when it comes (every
        // shard answers at once), so tasks leased for it are not lost.
        let due: Vec<WorkerKey> = awaits
            .iter()
            .filter(|(_, a)| a.deadline_ms <= now_ms && a.immediate_pending == 0)
            .map(|(k, _)| k.clone())
            .collect();
        let next = awaits
            .values()
            .filter(|a| a.deadline_ms > now_ms)
            .map(|a| a.deadline_ms)
            .min();
        (due, next)
    };
    for key in due {
        finish_await(shard, &key);
    }
    next
}

/// The worker drained or left: answer its await now, nothing more comes to it.
pub(crate) fn worker_gone(shard: &Rc<Shard>, namespace: &str, worker_id: &str) {
    finish_await(shard, &(namespace.to_string(), worker_id.to_string()));
}

// ---- on the shard owning the tasks ----

/// A worker's home asks this shard for tasks: lease what matches now, else park.
pub(crate) fn on_want(shard: &Rc<Shard>, origin: u32, msg: WantMsg, to: ReplyTo) {
    let (tasks, lsn) = {
        let mut core = shard.core.borrow_mut();
        let now = core.clock.now_ms();
        core.lease_tasks(
            &WantSpec {
                namespace: &msg.namespace,
                worker_id: &msg.worker_id,
                actions: &msg.actions,
                labels: msg.labels.as_ref(),
                max: msg.room as usize,
            },
            now,
        )
    };
    if lsn > 0 {
        shard.flush.notify();
    }
    if tasks.is_empty() && msg.deadline_ms > now_real() {
        park_want(
            shard,
            &msg.namespace,
            &msg.worker_id,
            Want {
                origin,
                want_id: msg.want_id,
                actions: msg.actions,
                labels: msg.labels,
                room: msg.room as usize,
                deadline_ms: msg.deadline_ms,
            },
        );
    }
    shard.reply(to, lsn, Ok(Reply::Tasks(tasks)));
}

fn park_want(shard: &Shard, namespace: &str, worker_id: &str, want: Want) {
    let host = &shard.workers;
    let mut index = host.wants_by_action.borrow_mut();
    for action in &want.actions {
        index
            .entry((namespace.to_string(), action.clone()))
            .or_default()
            .push_back(worker_id.to_string());
    }
    host.wants
        .borrow_mut()
        .insert((namespace.to_string(), worker_id.to_string()), want);
}

pub(crate) fn cancel_want(shard: &Shard, namespace: &str, worker_id: &str, want_id: u64) {
    let mut wants = shard.workers.wants.borrow_mut();
    let key = (namespace.to_string(), worker_id.to_string());
    if wants.get(&key).is_some_and(|w| w.want_id == want_id) {
        wants.remove(&key);
    }
}

/// Serves parked wants from tasks that became ready, soon (after the operations being
/// handled now, so a burst of invocations is leased in one record).
pub(crate) fn dispatch_soon(shard: &Rc<Shard>) {
    if !shard.core.borrow().scheduler.has_user_dirty() {
        return;
    }
    if shard.workers.wants.borrow().is_empty() {
        shard.core.borrow_mut().scheduler.take_user_dirty();
        return;
    }
    if shard.workers.dispatch_scheduled.replace(true) {
        return;
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        futures_lite::future::yield_now().await;
        shard.workers.dispatch_scheduled.set(false);
        dispatch(&shard);
    })
    .detach();
}

fn dispatch(shard: &Rc<Shard>) {
    let dirty = shard.core.borrow_mut().scheduler.take_user_dirty();
    for action in dirty {
        serve_action(shard, &action);
    }
}

/// Leases queued tasks of `action` to the wants parked for it, round-robin.
fn serve_action(shard: &Rc<Shard>, action: &ActionKey) {
    let now_real = now_real();
    let mut misses = 0usize;
    loop {
        if shard.core.borrow().scheduler.user_queued(action) == 0 {
            return;
        }
        let candidates = shard
            .workers
            .wants_by_action
            .borrow()
            .get(action)
            .map_or(0, VecDeque::len);
        if candidates == 0 || misses >= candidates {
            return;
        }
        let Some(worker_id) = pop_candidate(shard, action) else {
            return;
        };
        let key = (action.0.clone(), worker_id);
        let live = {
            let wants = shard.workers.wants.borrow();
            wants
                .get(&key)
                .map(|w| (w.deadline_ms > now_real, w.actions.contains(&action.1)))
        };
        match live {
            None | Some((_, false)) => continue,
            Some((false, _)) => {
                shard.workers.wants.borrow_mut().remove(&key);
                continue;
            }
            Some((true, true)) => {}
        }
        let (tasks, lsn) = {
            let wants = shard.workers.wants.borrow();
            let want = wants.get(&key).expect("checked");
            let mut core = shard.core.borrow_mut();
            let now = core.clock.now_ms();
            core.lease_tasks(
                &WantSpec {
                    namespace: &key.0,
                    worker_id: &key.1,
                    actions: &want.actions,
                    labels: want.labels.as_ref(),
                    max: want.room,
                },
                now,
            )
        };
        if tasks.is_empty() {
            // Labels keep this worker from the queued tasks: try the next want.
            misses += 1;
            push_candidate(shard, action, key.1);
            continue;
        }
        misses = 0;
        shard.flush.notify();
        let want = shard
            .workers
            .wants
            .borrow_mut()
            .remove(&key)
            .expect("checked");
        deliver(shard, want.origin, key.0, key.1, want.want_id, tasks, lsn);
    }
}

fn pop_candidate(shard: &Shard, action: &ActionKey) -> Option<String> {
    let mut index = shard.workers.wants_by_action.borrow_mut();
    let queue = index.get_mut(action)?;
    let id = queue.pop_front();
    if queue.is_empty() {
        index.remove(action);
    }
    id
}

fn push_candidate(shard: &Shard, action: &ActionKey, worker_id: String) {
    shard
        .workers
        .wants_by_action
        .borrow_mut()
        .entry(action.clone())
        .or_default()
        .push_back(worker_id);
}

/// Sends leased tasks to the worker's home once their lease is durable.
fn deliver(
    shard: &Rc<Shard>,
    origin: u32,
    namespace: String,
    worker_id: String,
    want_id: u64,
    tasks: Vec<TaskAssignment>,
    lsn: u64,
) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        shard.wait_durable(lsn).await;
        if origin == shard.id {
            on_delivery(
                &shard, &namespace, &worker_id, want_id, shard.id, tasks, false,
            );
        } else {
            let from = shard.id;
            shard.tell(
                origin,
                ShardOp::TasksDelivered {
                    namespace,
                    worker_id,
                    want_id,
                    from,
                    tasks,
                },
            );
        }
    })
    .detach();
}

/// Hands leased tasks back to the shard owning them.
fn release(shard: &Rc<Shard>, owner: u32, namespace: &str, worker_id: &str, run_ids: Vec<String>) {
    if owner != shard.id {
        shard.tell(
            owner,
            ShardOp::ReleaseLeases {
                namespace: namespace.to_string(),
                worker_id: worker_id.to_string(),
                run_ids,
            },
        );
        return;
    }
    let lsn = shard
        .core
        .borrow_mut()
        .release_tasks(namespace, worker_id, run_ids);
    if lsn > 0 {
        shard.flush.notify();
        dispatch_soon(shard);
    }
}

/// Counts a finished task on the worker's registry entry (on its home shard).
pub(crate) fn note_task_done(
    shard: &Shard,
    namespace: &str,
    worker_id: &str,
    action: &str,
    ok: bool,
) {
    let home = shard.partitioning.shard_of(namespace, worker_id);
    let at_ms = shard.now_ms();
    if home == shard.id {
        shard
            .core
            .borrow_mut()
            .workers
            .record_task(namespace, worker_id, action, ok, at_ms);
        return;
    }
    shard.tell(
        home,
        ShardOp::WorkerTaskDone {
            namespace: namespace.to_string(),
            worker_id: worker_id.to_string(),
            action: action.to_string(),
            ok,
            at_ms,
        },
    );
}

/// `TaskComplete` / `TaskFail` on the shard owning the task.
pub(crate) fn report(shard: &Rc<Shard>, op: flo_protocol::Op, to: ReplyTo) {
    use flo_protocol::Op;
    let (namespace, worker_id, task_id, action, result) = match op {
        Op::TaskComplete {
            namespace,
            worker_id,
            task_id,
            action,
            attempt,
            result,
            outcome,
        } => {
            let r = TaskReport {
                namespace: &namespace,
                worker_id: &worker_id,
                task_id: &task_id,
                action: &action,
                attempt,
            };
            let now = shard.now_ms();
            let done = shard
                .core
                .borrow_mut()
                .complete_task(&r, result, outcome, now);
            let result = done.map(|lsn| (lsn, true, Reply::Done));
            (namespace, worker_id, task_id, action, result)
        }
        Op::TaskFail {
            namespace,
            worker_id,
            task_id,
            action,
            attempt,
            error,
            retry,
            non_retryable,
        } => {
            let r = TaskReport {
                namespace: &namespace,
                worker_id: &worker_id,
                task_id: &task_id,
                action: &action,
                attempt,
            };
            let now = shard.now_ms();
            let failed = shard
                .core
                .borrow_mut()
                .fail_task(&r, &error, retry, non_retryable, now);
            let result = failed.map(|f| {
                let reply = shard
                    .core
                    .borrow()
                    .run_status(&namespace, &task_id)
                    .result
                    .unwrap_or(Reply::Done);
                (f.lsn, f.is_final, reply)
            });
            (namespace, worker_id, task_id, action, result)
        }
        _ => {
            shard.reply(to, 0, Err(ErrorValue::internal("not a task report")));
            return;
        }
    };
    match result {
        Ok((lsn, is_final, reply)) => {
            shard.flush.notify();
            let ok = matches!(reply, Reply::Done);
            if is_final {
                shard.run_final(&namespace, &task_id);
            } else {
                shard.timer_signal.notify();
                dispatch_soon(shard);
            }
            note_task_done(shard, &namespace, &worker_id, &action, ok);
            shard.reply(to, lsn, Ok(reply));
        }
        Err(e) => shard.reply(to, 0, Err(e)),
    }
}

/// Drops parked wants whose deadline passed (their home answered its worker already) and
/// stale or repeated ids from the per-action index.
pub(crate) fn sweep_wants(shard: &Shard) {
    let now = now_real();
    shard
        .workers
        .wants
        .borrow_mut()
        .retain(|_, w| w.deadline_ms > now);
    let wants = shard.workers.wants.borrow();
    shard
        .workers
        .wants_by_action
        .borrow_mut()
        .retain(|(ns, _), ids| {
            let mut seen = ahash::AHashSet::new();
            ids.retain(|id| {
                wants.contains_key(&(ns.clone(), id.clone())) && seen.insert(id.clone())
            });
            !ids.is_empty()
        });
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_shares_every_shard_at_least_one() {
        assert_eq!(split(64, 2, 0), vec![32, 32]);
        assert_eq!(split(5, 2, 0), vec![3, 2]);
        assert_eq!(split(5, 2, 1), vec![2, 3]);
        assert_eq!(split(1, 3, 0), vec![1, 1, 1]);
        assert_eq!(split(7, 1, 5), vec![7]);
    }
}
