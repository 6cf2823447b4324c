//! Worker task dispatch across shards.
//!
//! A worker's home is the shard its id hashes to (its registry entry lives there). Its
//! `TaskAwait` asks every shard at once for a share of the tasks it wants (a *want*): the
//! home leases from its own queues directly and sends the others a `Want`. A shard with
//! matching tasks leases them (a logged record) and answers with the assignments once the
//! lease is durable; a shard with none parks the want and delivers when tasks arrive (unless
//! the home leased tasks of its own: then the answer is near and nothing parks). The
//! home answers the worker as soon as every shard answered and at least one task came, or
//! at the deadline with none; then it cancels the wants still parked. Tasks that reach the
//! home after the await was answered (or whose worker's connection closed) are released:
//! pending again, same attempt.
//!
//! An await with `home_only` asks its home alone (for all its room): a worker homed on
//! each shard, connected to it, then takes that shard's tasks with no message between
//! shards (the SDK's `ActionWorkerBuilder::spawn_on_every_shard`).
//!
//! A worker may have several awaits open at once (one per slot, or per thread): each is
//! its own want (numbered by the home), served on its own, so a task goes to exactly one of
//! them. At most `AWAITS_PER_WORKER_MAX` are open per worker; one more answers the oldest
//! at once with no task (as if its time was up), releasing what it held.
//!
//! Load: an await asks for no more than the worker's free slots — its concurrency less its
//! load (`Worker::current_load`: the last heartbeat's, plus the tasks handed since, minus
//! those reported since) and less what its other open awaits may still bring. A worker at
//! its concurrency is offered nothing: its await is held, asking no shard, until its load
//! goes down (a report, a heartbeat) or its time is up (`serve_held`). Parked wants carry
//! the worker's load: a shard serves the least loaded first (`wants_by_action`).

use super::registry::WorkerRegistry;
use super::tasks::{WantSpec, lease_tasks, release_tasks};
use crate::core::io::{ConnId, DiskSpace, PeerRequest, ReplyResult, ReplyTo, WantMsg};
use crate::core::{Core, Task, Waiting};
use crate::fold::scheduler::ActionKey;
use crate::ids::WorkerKey;
use crate::tables::{HashMap, HashSet};
use flo_protocol::{
    ActionKind, ErrorValue, Reply, TASK_AWAIT_MS_MAX, TASK_AWAIT_TASKS_MAX, TaskAssignment,
    WORKER_PROCESSES_MAX,
};
use flo_protocol::{check_namespace, check_worker_id};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Payload bytes one await's reply may carry (at least one task): under the frame limit.
const AWAIT_REPLY_BYTES_MAX: usize = 3 << 20;
/// Awaits one worker may have open at once; one more answers the oldest with no task.
pub const AWAITS_PER_WORKER_MAX: usize = 64;

/// An await being answered, on the worker's home shard (keyed there by its want id).
struct OpenAwait {
    worker: WorkerKey,
    /// Tasks it may take (none asked for yet while `held`).
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
    /// A shard that could not answer the first ask: the worker hears of it if no task
    /// comes (never "no tasks" when a shard was not asked).
    failed: Option<ErrorValue>,
    /// What it asks for, while it waits for the worker to have a free slot (no shard
    /// asked yet).
    held: Option<Ask>,
}

/// What an await asks for.
struct Ask {
    actions: Vec<String>,
    labels: Option<Map<String, Value>>,
    max_tasks: u32,
    /// Only the home's tasks: no other shard is asked.
    home_only: bool,
}

/// A worker's want parked on a shard that had no matching task when asked (keyed there by
/// its origin shard and want id).
struct Want {
    worker: WorkerKey,
    actions: Vec<String>,
    labels: Option<Map<String, Value>>,
    room: usize,
    deadline_ms: u64,
    /// The worker's load when it asked (served least loaded first).
    load: u32,
}

/// A want on the shard holding it: (origin shard, want id).
type WantKey = (u32, u64);

/// A parked want in the order wants are served: its worker's load, then when it was
/// parked (or passed over).
type WantTurn = (u32, u64, WantKey);

#[derive(Default)]
pub struct Awaits {
    /// Open awaits of workers homed here, by want id.
    awaits: HashMap<u64, OpenAwait>,
    /// A worker's open awaits, oldest first.
    by_worker: HashMap<WorkerKey, Vec<u64>>,
    /// Await deadlines: (deadline, want id).
    deadlines: BTreeSet<(u64, u64)>,
    wants: HashMap<WantKey, Want>,
    /// Parked wants by action, the least loaded worker's first, then in turn (may hold
    /// keys of wants since gone).
    wants_by_action: HashMap<ActionKey, BTreeSet<WantTurn>>,
    next_turn: u64,
    next_want_id: u64,
    /// Rotates which shards get the remainder when an await is split.
    rotate: u32,
    /// Open awaits of this shard's clients, by connection (to drop them when it closes).
    by_conn: HashMap<ConnId, Vec<u64>>,
    /// Awaits of this shard's clients forwarded to the worker's home: connection →
    /// (home, call tag, worker).
    forwarded: HashMap<ConnId, Vec<(u32, u64, WorkerKey)>>,
    /// Forwarded awaits whose connection closed: their tasks are handed back on arrival.
    orphaned: HashSet<u64>,
    /// Tasks handed to workers since the last `serve_held` (added to their load there).
    handed: Vec<(WorkerKey, u32)>,
    /// Workers of held awaits whose other awaits ended since the last `serve_held` (their
    /// room is free again).
    freed: Vec<WorkerKey>,
}

impl Awaits {
    /// The earliest await deadline (wall clock).
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    pub fn open_awaits(&self) -> usize {
        self.awaits.len()
    }
}

/// The await is the worker's own request. Routed to the worker's home if that is another
/// shard; remembered by connection so a closed connection releases its tasks.
pub fn forward_await(
    core: &mut Core,
    aw: &mut Awaits,
    home: u32,
    to: ReplyTo,
    op: flo_protocol::Op,
) {
    let worker = match &op {
        flo_protocol::Op::TaskAwait {
            namespace,
            worker_id,
            ..
        } => (namespace.clone(), worker_id.clone()),
        _ => return,
    };
    let tag = core.call(
        home,
        0,
        PeerRequest::Client(op),
        Waiting::AwaitRelay {
            to,
            worker: worker.clone(),
        },
    );
    if let ReplyTo::Client(c) = to {
        aw.forwarded
            .entry(c.conn)
            .or_default()
            .push((home, tag, worker));
    }
}

/// The home answered a forwarded await.
pub fn on_await_relayed(
    core: &mut Core,
    aw: &mut Awaits,
    tag: u64,
    to: ReplyTo,
    worker: WorkerKey,
    result: ReplyResult,
) {
    if let ReplyTo::Client(c) = to
        && let Some(list) = aw.forwarded.get_mut(&c.conn)
    {
        list.retain(|(_, t, _)| *t != tag);
        if list.is_empty() {
            aw.forwarded.remove(&c.conn);
        }
    }
    if aw.orphaned.remove(&tag) {
        if let Ok(Reply::Tasks(tasks)) = result {
            release_assignments(core, &worker.0, &worker.1, tasks);
        }
        return;
    }
    core.reply_op(to, 0, result);
}

/// A client connection closed: its awaits are dropped and their tasks handed back.
pub fn conn_closed(core: &mut Core, aw: &mut Awaits, conn: ConnId) {
    for id in aw.by_conn.remove(&conn).unwrap_or_default() {
        abandon_await(core, aw, id, true);
    }
    for (home, tag, worker) in aw.forwarded.remove(&conn).unwrap_or_default() {
        aw.orphaned.insert(tag);
        core.tell(
            home,
            0,
            PeerRequest::AbandonAwait {
                namespace: worker.0,
                worker_id: worker.1,
                tag,
            },
        );
    }
}

/// The shard a forwarded await came from says its client is gone.
pub fn abandon_forwarded(core: &mut Core, aw: &mut Awaits, from: u32, worker: WorkerKey, tag: u64) {
    let to = ReplyTo::Peer { shard: from, tag };
    let id = aw.by_worker.get(&worker).and_then(|ids| {
        ids.iter()
            .copied()
            .find(|id| aw.awaits.get(id).is_some_and(|a| a.to == to))
    });
    if let Some(id) = id {
        // Answered all the same (with nothing): the shard that forwarded it waits for an
        // answer to forget the call.
        abandon_await(core, aw, id, false);
    }
}

/// `TaskAwait` on the worker's home shard.
pub fn await_tasks(
    core: &mut Core,
    aw: &mut Awaits,
    registry: &WorkerRegistry,
    to: ReplyTo,
    op: flo_protocol::Op,
) {
    let flo_protocol::Op::TaskAwait {
        namespace,
        worker_id,
        actions,
        max_tasks,
        block_ms,
        home_only,
    } = op
    else {
        core.reply_op(to, 0, Err(ErrorValue::internal("not a task await")));
        return;
    };
    let labels = match check_await(core, registry, &namespace, &worker_id, &actions, max_tasks) {
        Ok(Some(labels)) => labels,
        Ok(None) => {
            // Draining: nothing new.
            core.reply_op(to, 0, Ok(Reply::Tasks(Vec::new())));
            return;
        }
        Err(e) => {
            core.reply_op(to, 0, Err(e));
            return;
        }
    };
    let key = (namespace, worker_id);
    make_room(core, aw, &key);
    aw.next_want_id += 1;
    let want_id = aw.next_want_id;
    let block_ms = block_ms.min(TASK_AWAIT_MS_MAX);
    let deadline_ms = core.wall_ms() + block_ms;
    let free = free_slots(aw, registry, &key);
    if let ReplyTo::Client(c) = to {
        aw.by_conn.entry(c.conn).or_default().push(want_id);
    }
    aw.deadlines.insert((deadline_ms, want_id));
    aw.by_worker.entry(key.clone()).or_default().push(want_id);
    aw.awaits.insert(
        want_id,
        OpenAwait {
            worker: key.clone(),
            room: 0,
            tasks: Vec::new(),
            lsn: 0,
            immediate_pending: 0,
            parked: Vec::new(),
            to,
            deadline_ms,
            failed: None,
            held: Some(Ask {
                actions,
                labels,
                max_tasks,
                home_only,
            }),
        },
    );
    if free == 0 {
        // At its concurrency: held until a slot frees or its time is up.
        return;
    }
    let load = registry.get(&key.0, &key.1).map_or(0, |w| w.current_load);
    ask_shards(core, aw, want_id, free.min(max_tasks), load);
}

/// Tasks the worker may be offered now: its free slots (`WorkerRegistry::free_slots`)
/// less the room of its awaits already asking.
fn free_slots(aw: &Awaits, registry: &WorkerRegistry, worker: &WorkerKey) -> u32 {
    let asking: usize = aw.by_worker.get(worker).map_or(0, |ids| {
        ids.iter()
            .filter_map(|id| aw.awaits.get(id))
            .filter(|a| a.held.is_none())
            .map(|a| a.room)
            .sum()
    });
    let asking = u32::try_from(asking).unwrap_or(u32::MAX);
    registry
        .free_slots(&worker.0, &worker.1)
        .saturating_sub(asking)
}

/// A held await asks every shard for up to `room` tasks: the home leases from its own
/// queues, the others get a `Want` (none with `home_only`: the home is asked for all).
fn ask_shards(core: &mut Core, aw: &mut Awaits, want_id: u64, room: u32, load: u32) {
    let Some(open) = aw.awaits.get_mut(&want_id) else {
        return;
    };
    let Some(ask) = open.held.take() else {
        return;
    };
    open.room = room as usize;
    let key = open.worker.clone();
    let deadline_ms = open.deadline_ms;
    let me = core.shard();
    let shards = core.partitioning().shards;
    let others = (0..shards).filter(|&s| s != me && !ask.home_only);
    let mut shares = split(room, shards, aw.rotate);
    aw.rotate = aw.rotate.wrapping_add(1);
    if ask.home_only {
        shares[me as usize] = room;
    }
    let now = core.now_ms();
    let (tasks, lsn) = lease_tasks(
        core,
        &WantSpec {
            namespace: &key.0,
            worker_id: &key.1,
            actions: &ask.actions,
            labels: ask.labels.as_ref(),
            max: shares[me as usize] as usize,
        },
        now,
    );
    let mut parked = Vec::new();
    if tasks.is_empty() && deadline_ms > core.wall_ms() {
        park_want(
            aw,
            (me, want_id),
            Want {
                worker: key.clone(),
                actions: ask.actions.clone(),
                labels: ask.labels.clone(),
                room: shares[me as usize] as usize,
                deadline_ms,
                load,
            },
        );
        parked.push(me);
    }
    // With tasks of its own the await is answered as soon as every shard answered this
    // ask: the others lease what they hold now and park nothing (a want parked there
    // would lease tasks that reach the home after its answer: released, leased again —
    // measured, 0.76 extra leases per task with two shards under load).
    let others_deadline_ms = if tasks.is_empty() { deadline_ms } else { 0 };
    for s in others.clone() {
        let msg = WantMsg {
            namespace: key.0.clone(),
            worker_id: key.1.clone(),
            want_id,
            actions: ask.actions.clone(),
            labels: ask.labels.clone(),
            room: shares[s as usize],
            deadline_ms: others_deadline_ms,
            load,
        };
        let waiting = Waiting::WantShare {
            worker: key.clone(),
            want_id,
            from: s,
        };
        core.call(s, 0, PeerRequest::Want(msg), waiting);
    }
    if let Some(open) = aw.awaits.get_mut(&want_id) {
        open.tasks = tasks;
        open.lsn = lsn;
        open.parked = parked;
        open.immediate_pending = others.count() as u32;
    }
    maybe_answer(core, aw, want_id);
}

/// After each input, on the worker's home: the tasks handed to workers count in their
/// load, and the awaits held while their worker was at its concurrency ask for tasks once
/// it has a free slot again (a report or a heartbeat lowered its load, or another of its
/// awaits ended), oldest first.
pub fn serve_held(core: &mut Core, aw: &mut Awaits, registry: &mut WorkerRegistry) {
    for (worker, tasks) in std::mem::take(&mut aw.handed) {
        registry.add_load(&worker.0, &worker.1, tasks);
    }
    let mut workers = registry.take_lowered();
    workers.append(&mut aw.freed);
    if workers.is_empty() {
        return;
    }
    workers.sort();
    workers.dedup();
    for worker in workers {
        let held: Vec<(u64, u32)> = aw.by_worker.get(&worker).map_or(Vec::new(), |ids| {
            ids.iter()
                .filter_map(|id| aw.awaits.get(id).map(|a| (*id, a)))
                .filter_map(|(id, a)| a.held.as_ref().map(|h| (id, h.max_tasks)))
                .collect()
        });
        let load = registry
            .get(&worker.0, &worker.1)
            .map_or(0, |w| w.current_load);
        for (want_id, max_tasks) in held {
            let free = free_slots(aw, registry, &worker);
            if free == 0 {
                break;
            }
            ask_shards(core, aw, want_id, free.min(max_tasks), load);
        }
    }
}

/// A worker at its bound of open awaits: the oldest is answered now, with no task.
fn make_room(core: &mut Core, aw: &mut Awaits, worker: &WorkerKey) {
    let open = aw.by_worker.get(worker).map_or(0, Vec::len);
    if open < AWAITS_PER_WORKER_MAX {
        return;
    }
    if let Some(&oldest) = aw.by_worker.get(worker).and_then(|ids| ids.first()) {
        abandon_await(core, aw, oldest, false);
    }
}

/// Validates an await; `Ok(None)` when the worker is draining, else its labels.
fn check_await(
    core: &Core,
    registry: &WorkerRegistry,
    namespace: &str,
    worker_id: &str,
    actions: &[String],
    max_tasks: u32,
) -> Result<Option<Option<Map<String, Value>>>, ErrorValue> {
    check_namespace(namespace)?;
    check_worker_id(worker_id)?;
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
    let worker = registry.require(namespace, worker_id)?;
    for action in actions {
        // An action not registered (yet) has no tasks: the await waits for them like for
        // any other (its tasks come once it is registered and invoked).
        let Some(def) = core.state().registry.get(namespace, action) else {
            if worker.processes_action(action) {
                continue;
            }
            return Err(ErrorValue::not_found(format!(
                "action {action:?} is not registered in namespace {namespace:?}, and worker \
                 {worker_id:?} is not registered for it"
            )));
        };
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

/// A shard's first answer to a want (its tasks, or none and the want parked there).
pub fn on_want_share(
    core: &mut Core,
    aw: &mut Awaits,
    worker: WorkerKey,
    want_id: u64,
    from: u32,
    result: ReplyResult,
) {
    let tasks = match result {
        Ok(Reply::Tasks(tasks)) => tasks,
        Ok(other) => {
            let e = ErrorValue::internal(format!("shard {from} answered a want with {other:?}"));
            return share_failed(core, aw, want_id, from, e);
        }
        Err(e) => return share_failed(core, aw, want_id, from, e),
    };
    on_delivery(core, aw, &worker, want_id, from, tasks, true);
}

/// Shard `from` could not answer an await's first ask: it counts as answered (nothing
/// parked there), and the await answers the failure unless tasks came from elsewhere.
fn share_failed(core: &mut Core, aw: &mut Awaits, want_id: u64, from: u32, e: ErrorValue) {
    let Some(open) = aw.awaits.get_mut(&want_id) else {
        return;
    };
    open.immediate_pending = open.immediate_pending.saturating_sub(1);
    open.failed = Some(ErrorValue::new(
        e.code,
        format!("shard {from} could not be asked for tasks: {}", e.message),
    ));
    maybe_answer(core, aw, want_id);
}

/// Tasks for an open await arrived from shard `from` (`immediate`: its answer to the
/// first ask). Tasks nobody waits for any more are released.
pub fn on_delivery(
    core: &mut Core,
    aw: &mut Awaits,
    key: &WorkerKey,
    want_id: u64,
    from: u32,
    tasks: Vec<TaskAssignment>,
    immediate: bool,
) {
    let extra = match aw.awaits.get_mut(&want_id).filter(|a| a.worker == *key) {
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
            fit(open, tasks)
        }
    };
    if !extra.is_empty() {
        let ids = extra.into_iter().map(|t| t.task_id).collect();
        release(core, from, &key.0, &key.1, ids);
    }
    maybe_answer(core, aw, want_id);
}

/// Adds `tasks` to `open` while they fit (its room, the answer's bytes); returns the rest.
fn fit(open: &mut OpenAwait, tasks: Vec<TaskAssignment>) -> Vec<TaskAssignment> {
    let mut bytes: usize = open.tasks.iter().map(|t| t.payload.len()).sum();
    let mut extra = Vec::new();
    for task in tasks {
        let fits = open.tasks.is_empty() || bytes + task.payload.len() <= AWAIT_REPLY_BYTES_MAX;
        // The room counts every task it holds (the tasks held before these included).
        if open.tasks.len() < open.room && fits {
            bytes += task.payload.len();
            open.tasks.push(task);
        } else {
            extra.push(task);
        }
    }
    extra
}

fn maybe_answer(core: &mut Core, aw: &mut Awaits, want_id: u64) {
    let now = core.wall_ms();
    let ready = aw.awaits.get(&want_id).is_some_and(|a| {
        // A shard that could not be asked ends the wait: the worker hears why.
        let done = !a.tasks.is_empty() || a.failed.is_some() || a.deadline_ms <= now;
        a.immediate_pending == 0 && done
    });
    if ready {
        finish_await(core, aw, want_id, true);
    }
}

/// Drops an open await without handing it its tasks (its connection closed, or it made
/// room for a newer one): they are released; it gets an empty answer if it still listens.
fn abandon_await(core: &mut Core, aw: &mut Awaits, want_id: u64, gone: bool) {
    let Some(open) = aw.awaits.get_mut(&want_id) else {
        return;
    };
    let tasks = std::mem::take(&mut open.tasks);
    let worker = open.worker.clone();
    release_assignments(core, &worker.0, &worker.1, tasks);
    finish_await(core, aw, want_id, !gone);
}

/// Hands back tasks leased to a worker that will not receive them (each to its owner).
pub fn release_assignments(
    core: &mut Core,
    namespace: &str,
    worker_id: &str,
    tasks: Vec<TaskAssignment>,
) {
    let mut by_owner: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for task in tasks {
        let owner = core.partitioning().shard_of(namespace, &task.task_id);
        by_owner.entry(owner).or_default().push(task.task_id);
    }
    for (owner, ids) in by_owner {
        release(core, owner, namespace, worker_id, ids);
    }
}

/// Answers an open await with what it has (`answer`) and cancels its parked wants.
fn finish_await(core: &mut Core, aw: &mut Awaits, want_id: u64, answer: bool) {
    let Some(open) = aw.awaits.remove(&want_id) else {
        return;
    };
    let key = &open.worker;
    aw.deadlines.remove(&(open.deadline_ms, want_id));
    if let Some(ids) = aw.by_worker.get_mut(key) {
        ids.retain(|id| *id != want_id);
        if ids.is_empty() {
            aw.by_worker.remove(key);
        }
    }
    if let ReplyTo::Client(c) = open.to
        && let Some(list) = aw.by_conn.get_mut(&c.conn)
    {
        list.retain(|id| *id != want_id);
        if list.is_empty() {
            aw.by_conn.remove(&c.conn);
        }
    }
    // Finished before every shard answered (the worker left, asked again, its connection
    // closed): those that have not answered may park the want yet, so they are told too
    // (the cancel follows the want on the same ordered link).
    let mut cancel = open.parked;
    if open.immediate_pending > 0 {
        cancel = (0..core.partitioning().shards).collect();
    }
    let me = core.shard();
    for s in cancel {
        if s == me {
            cancel_want(aw, me, want_id);
        } else {
            let req = PeerRequest::WantCancel {
                namespace: key.0.clone(),
                worker_id: key.1.clone(),
                want_id,
            };
            core.tell(s, 0, req);
        }
    }
    let mut tasks = open.tasks;
    if open.held.is_none() && aw.by_worker.contains_key(key) {
        // Its room is free again for the worker's held awaits.
        aw.freed.push(key.clone());
    }
    if !answer {
        release_assignments(core, &key.0, &key.1, tasks);
        return;
    }
    if let (true, Some(e)) = (tasks.is_empty(), open.failed) {
        core.reply_op(open.to, open.lsn, Err(e));
        return;
    }
    if !tasks.is_empty() {
        let handed = u32::try_from(tasks.len()).unwrap_or(u32::MAX);
        aw.handed.push((key.clone(), handed));
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.priority));
    core.reply_op(open.to, open.lsn, Ok(Reply::Tasks(tasks)));
}

/// Answers awaits whose deadline passed.
pub fn expire_awaits(core: &mut Core, aw: &mut Awaits) {
    let now = core.wall_ms();
    let mut due = Vec::new();
    while aw.deadlines.first().is_some_and(|(d, _)| *d <= now) {
        let (_, want_id) = aw.deadlines.pop_first().expect("checked");
        // An await still missing a shard's first answer is answered when that comes (every
        // shard answers at once, and `maybe_answer` sees the deadline passed), so tasks
        // leased for it are not lost.
        if aw
            .awaits
            .get(&want_id)
            .is_some_and(|a| a.immediate_pending == 0)
        {
            due.push(want_id);
        }
    }
    for want_id in due {
        finish_await(core, aw, want_id, true);
    }
}

/// The worker drained or left: answer its awaits now, nothing more comes to it.
pub fn worker_gone(core: &mut Core, aw: &mut Awaits, namespace: &str, worker_id: &str) {
    let key = (namespace.to_string(), worker_id.to_string());
    for want_id in aw.by_worker.get(&key).cloned().unwrap_or_default() {
        finish_await(core, aw, want_id, true);
    }
}

// ---- on the shard owning the tasks ----

/// A worker's home asks this shard for tasks: lease what matches now, else park.
pub fn on_want(core: &mut Core, aw: &mut Awaits, origin: u32, msg: WantMsg, to: ReplyTo) {
    let now = core.now_ms();
    let (tasks, lsn) = lease_tasks(
        core,
        &WantSpec {
            namespace: &msg.namespace,
            worker_id: &msg.worker_id,
            actions: &msg.actions,
            labels: msg.labels.as_ref(),
            max: msg.room as usize,
        },
        now,
    );
    if tasks.is_empty() && msg.deadline_ms > core.wall_ms() {
        park_want(
            aw,
            (origin, msg.want_id),
            Want {
                worker: (msg.namespace, msg.worker_id),
                actions: msg.actions,
                labels: msg.labels,
                room: msg.room as usize,
                deadline_ms: msg.deadline_ms,
                load: msg.load,
            },
        );
    }
    // Tasks leave for a worker only once their lease is durable.
    core.reply(to, lsn, Ok(Reply::Tasks(tasks)));
}

fn park_want(aw: &mut Awaits, key: WantKey, want: Want) {
    aw.next_turn += 1;
    for action in &want.actions {
        aw.wants_by_action
            .entry((want.worker.0.clone(), action.clone()))
            .or_default()
            .insert((want.load, aw.next_turn, key));
    }
    aw.wants.insert(key, want);
}

/// Drops want `want_id` of shard `origin` parked here (its await was answered).
pub fn cancel_want(aw: &mut Awaits, origin: u32, want_id: u64) {
    aw.wants.remove(&(origin, want_id));
}

/// Serves parked wants from tasks that became ready since the last call (once per batch
/// of inputs, so a burst of invocations is leased in one record).
pub fn dispatch(core: &mut Core, aw: &mut Awaits) {
    // A full shard leases nothing: the marks wait for space (`serve_parked`).
    if core.disk() == DiskSpace::Full || !core.index_mut().runs.has_user_dirty() {
        return;
    }
    let dirty = core.index_mut().runs.take_user_dirty();
    if aw.wants.is_empty() {
        return;
    }
    for action in dirty {
        serve_action(core, aw, &action);
    }
}

/// Space for the log returned: leases queued tasks to every want parked while the shard
/// was full (their tasks were queued before, so no new task marks them).
pub fn serve_parked(core: &mut Core, aw: &mut Awaits) {
    let actions: Vec<ActionKey> = aw.wants_by_action.keys().cloned().collect();
    for action in actions {
        serve_action(core, aw, &action);
    }
}

/// Leases queued tasks of `action` to the wants parked for it: the least loaded worker's
/// first, then in turn (a want passed over goes behind those of its load).
fn serve_action(core: &mut Core, aw: &mut Awaits, action: &ActionKey) {
    let now_real = core.wall_ms();
    let mut misses = 0usize;
    loop {
        if core.index_mut().runs.user_queued(action) == 0 {
            return;
        }
        let candidates = aw.wants_by_action.get(action).map_or(0, BTreeSet::len);
        if candidates == 0 || misses >= candidates {
            return;
        }
        let Some(key) = pop_candidate(aw, action) else {
            return;
        };
        let live = aw
            .wants
            .get(&key)
            .map(|w| (w.deadline_ms > now_real, w.actions.contains(&action.1)));
        match live {
            None | Some((_, false)) => continue,
            Some((false, _)) => {
                aw.wants.remove(&key);
                continue;
            }
            Some((true, true)) => {}
        }
        let Some(want) = aw.wants.get(&key) else {
            continue;
        };
        let now = core.now_ms();
        let (tasks, lsn) = lease_tasks(
            core,
            &WantSpec {
                namespace: &want.worker.0,
                worker_id: &want.worker.1,
                actions: &want.actions,
                labels: want.labels.as_ref(),
                max: want.room,
            },
            now,
        );
        if tasks.is_empty() {
            // Labels keep this worker from the queued tasks: try the next want.
            misses += 1;
            let load = want.load;
            push_candidate(aw, action, load, key);
            continue;
        }
        misses = 0;
        let Some(want) = aw.wants.remove(&key) else {
            continue;
        };
        let (origin, want_id) = key;
        deliver(core, origin, want.worker, want_id, tasks, lsn);
    }
}

fn pop_candidate(aw: &mut Awaits, action: &ActionKey) -> Option<WantKey> {
    let queue = aw.wants_by_action.get_mut(action)?;
    let turn = queue.pop_first();
    if queue.is_empty() {
        aw.wants_by_action.remove(action);
    }
    turn.map(|(_, _, key)| key)
}

fn push_candidate(aw: &mut Awaits, action: &ActionKey, load: u32, key: WantKey) {
    aw.next_turn += 1;
    aw.wants_by_action
        .entry(action.clone())
        .or_default()
        .insert((load, aw.next_turn, key));
}

/// Sends leased tasks to the worker's home once their lease is durable.
fn deliver(
    core: &mut Core,
    origin: u32,
    worker: WorkerKey,
    want_id: u64,
    tasks: Vec<TaskAssignment>,
    lsn: u64,
) {
    if origin == core.shard() {
        let from = core.shard();
        core.schedule_after(
            lsn,
            Task::Delivered {
                worker,
                want_id,
                from,
                tasks,
            },
        );
        return;
    }
    let req = PeerRequest::TasksDelivered {
        namespace: worker.0,
        worker_id: worker.1,
        want_id,
        tasks,
    };
    core.tell(origin, lsn, req);
}

/// Hands leased tasks back to the shard owning them.
fn release(core: &mut Core, owner: u32, namespace: &str, worker_id: &str, run_ids: Vec<String>) {
    if owner != core.shard() {
        let req = PeerRequest::ReleaseLeases {
            namespace: namespace.to_string(),
            worker_id: worker_id.to_string(),
            run_ids,
        };
        core.tell(owner, 0, req);
        return;
    }
    release_tasks(core, namespace, worker_id, run_ids);
}

/// Drops parked wants whose deadline passed (their home answered its worker already) and
/// stale or repeated ids from the per-action index.
pub fn sweep_wants(core: &Core, aw: &mut Awaits) {
    let now = core.wall_ms();
    aw.wants.retain(|_, w| w.deadline_ms > now);
    let wants = &aw.wants;
    aw.wants_by_action.retain(|_, turns| {
        let mut seen = HashSet::default();
        turns.retain(|(_, _, key)| wants.contains_key(key) && seen.insert(*key));
        !turns.is_empty()
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
