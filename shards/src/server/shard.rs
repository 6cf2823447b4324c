//! The per-core shard as an event loop's state: its core (state + log buffer), the replies
//! waiting for durability, and the links to the other shards.

use super::config::Durability;
use super::conn::Conn;
use super::outbox::{DurableOneshot, DurableWaiter, Outbox, Signal};
use crate::actions::RunKey;
use crate::engine::{Done, ShardCore, route_key};
use crate::hash::Partitioning;
use crate::record::{GuestKvWrite, Record};
use ahash::AHashMap as HashMap;
use flo_protocol::{ErrorValue, InvokeSpec, Op, Reply};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

pub(crate) type ReplyResult = Result<Reply, ErrorValue>;

/// A client waiting for a run: its deadline and where the answer goes.
type Watch = (u64, ReplyTo);

/// The shard that orders registry changes.
pub(crate) const COORDINATOR: u32 = 0;

/// What one shard asks another.
pub(crate) enum ShardOp {
    /// A client operation owned by the receiving shard (or its part of a fan-out).
    Client(Op),
    /// Log and apply a registry change ordered by the coordinator.
    ApplyRegistry(Record),
    /// The coordinator's whole registry (deleted actions included): the receiver logs
    /// whatever it needs to match it (after a crash during a registry change).
    RegistrySync(Vec<(String, String, crate::actions::ActionDef)>),
    /// The coordinator's workflow definitions, likewise.
    WorkflowSync(Vec<crate::workflows::WfSyncEntry>),
    /// A worker's home shard asks for tasks (see `worker_host`).
    Want(Box<super::worker_host::WantMsg>),
    WantCancel {
        namespace: String,
        worker_id: String,
        want_id: u64,
    },
    /// Tasks leased (durably) for a parked want, sent to the worker's home shard.
    TasksDelivered {
        namespace: String,
        worker_id: String,
        want_id: u64,
        from: u32,
        tasks: Vec<flo_protocol::TaskAssignment>,
    },
    /// Leased tasks the worker's home could not hand out: pending again.
    ReleaseLeases {
        namespace: String,
        worker_id: String,
        run_ids: Vec<String>,
    },
    /// A worker finished (`ok`) or failed a task: counted on its home shard.
    WorkerTaskDone {
        namespace: String,
        worker_id: String,
        action: String,
        ok: bool,
        at_ms: u64,
    },
    /// Guest KV writes of a completion on `origin_shard`, for keys the receiver owns.
    RemoteWrites {
        origin_shard: u32,
        origin_lsn: u64,
        namespace: String,
        writes: Vec<GuestKvWrite>,
    },
}

/// Where an operation is executed.
pub(crate) enum Target {
    Shard(u32),
    /// Every shard, results merged.
    All,
    /// The connection answers itself.
    Here,
}

/// Traffic to one other shard: requests to send it, and replies owed to it.
pub(crate) struct PeerLink {
    pub requests: RefCell<Vec<(u64, ShardOp)>>,
    pub replies: Rc<Outbox<(u64, ReplyResult)>>,
    pub signal: Rc<Signal>,
}

impl PeerLink {
    fn new() -> Self {
        let signal = Rc::new(Signal::default());
        PeerLink {
            requests: RefCell::new(Vec::new()),
            replies: Rc::new(Outbox::new(signal.clone())),
            signal,
        }
    }
}

/// Who gets a reply.
pub(crate) enum ReplyTo {
    Conn { conn: Rc<Conn>, id: u64 },
    Peer { shard: u32, tag: u64 },
    Oneshot(oneshot::Sender<ReplyResult>),
}

pub(crate) struct Shard {
    pub id: u32,
    pub partitioning: Partitioning,
    pub durability: Durability,
    pub core: RefCell<ShardCore>,
    /// Wakes the log flusher.
    pub flush: Signal,
    waiting: RefCell<Vec<Rc<dyn DurableWaiter>>>,
    /// Indexed by shard id; `None` for this shard.
    pub peers: Vec<Option<PeerLink>>,
    waiters: RefCell<HashMap<u64, ReplyTo>>,
    next_tag: Cell<u64>,
    /// Registry changes are ordered one at a time (on the coordinator).
    pub registry_turn: glommio::sync::Semaphore,
    /// Clients waiting for runs to become final, with their deadlines.
    /// Keyed by run and whether it is a workflow run.
    run_watchers: RefCell<HashMap<(RunKey, bool), Vec<Watch>>>,
    /// WebAssembly executions in progress on this shard.
    pub wasm_running: Cell<usize>,
    pub wasm: super::wasm_runner::WasmHost,
    /// Wakes the timer task (a run was scheduled for later).
    pub timer_signal: Signal,
    /// Wakes the forwarder of guest KV writes to other shards.
    pub forward_signal: Signal,
    /// Wakes the task that expires waits on runs (when a wait ends before `watch_wake_ms`).
    pub watch_signal: Signal,
    pub watch_wake_ms: Cell<u64>,
    /// The clock tests may move (`--test-clock`).
    pub test_clock: Option<crate::clock::OffsetClock>,
    /// Shutting down: new operations are refused so the final flush covers every
    /// acknowledged one.
    pub stopping: Cell<bool>,
    /// Awaits of workers homed here and wants parked here.
    pub workers: super::worker_host::WorkerHost,
}

impl ReplyTo {
    /// Whether the reply can no longer be delivered (a client connection that closed).
    pub fn is_closed(&self) -> bool {
        match self {
            ReplyTo::Conn { conn, .. } => conn.is_closed(),
            ReplyTo::Oneshot(tx) => tx.is_canceled(),
            ReplyTo::Peer { .. } => false,
        }
    }
}

/// A call to one shard, started: finish it with `CallHandle::finish`.
pub(crate) enum CallHandle {
    Local(Box<Done>),
    Remote(oneshot::Receiver<ReplyResult>),
}

impl Shard {
    pub fn new(
        id: u32,
        partitioning: Partitioning,
        durability: Durability,
        core: ShardCore,
        wasm: super::wasm_runner::WasmHost,
        test_clock: Option<crate::clock::OffsetClock>,
    ) -> Self {
        let peers = (0..partitioning.shards)
            .map(|s| (s != id).then(PeerLink::new))
            .collect();
        Shard {
            id,
            partitioning,
            durability,
            core: RefCell::new(core),
            flush: Signal::default(),
            waiting: RefCell::new(Vec::new()),
            peers,
            waiters: RefCell::new(HashMap::new()),
            next_tag: Cell::new(1),
            registry_turn: glommio::sync::Semaphore::new(1),
            run_watchers: RefCell::new(HashMap::new()),
            wasm_running: Cell::new(0),
            wasm,
            timer_signal: Signal::default(),
            forward_signal: Signal::default(),
            watch_signal: Signal::default(),
            watch_wake_ms: Cell::new(0),
            test_clock,
            stopping: Cell::new(false),
            workers: Default::default(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.core.borrow().clock.now_ms()
    }

    /// Answers `to` with the run's status once it is final (`run_final`) or at
    /// `deadline_ms` (`expire_watches`), whichever comes first.
    pub fn watch_run(&self, key: RunKey, deadline_ms: u64, to: ReplyTo) {
        self.watch(key, false, deadline_ms, to);
    }

    /// Like `watch_run`, for a workflow run (`workflow_final`).
    pub fn watch_workflow(&self, key: RunKey, deadline_ms: u64, to: ReplyTo) {
        self.watch(key, true, deadline_ms, to);
    }

    fn watch(&self, key: RunKey, workflow: bool, deadline_ms: u64, to: ReplyTo) {
        self.run_watchers
            .borrow_mut()
            .entry((key, workflow))
            .or_default()
            .push((deadline_ms, to));
    }

    fn answer_watch(&self, ((namespace, run_id), workflow): &(RunKey, bool), to: ReplyTo) {
        let status = if *workflow {
            self.core.borrow().wf_status(namespace, run_id)
        } else {
            self.core.borrow().run_status(namespace, run_id)
        };
        self.reply(to, status.wait_lsn, status.result);
    }

    fn answer_final(&self, namespace: &str, run_id: &str, workflow: bool) {
        if self.run_watchers.borrow().is_empty() {
            return;
        }
        let key = ((namespace.to_string(), run_id.to_string()), workflow);
        let Some(list) = self.run_watchers.borrow_mut().remove(&key) else {
            return;
        };
        for (_, to) in list {
            self.answer_watch(&key, to);
        }
    }

    /// An action run became final: answer those waiting on it, and move on the workflow
    /// step it executes.
    pub fn run_final(self: &Rc<Self>, namespace: &str, run_id: &str) {
        self.answer_final(namespace, run_id, false);
        let has_step = self
            .core
            .borrow()
            .state
            .runs
            .get(namespace, run_id)
            .is_some_and(|r| r.step.is_some());
        if has_step {
            let mut fx = crate::workflows::WfEffects::default();
            self.core
                .borrow_mut()
                .wf_on_action_final(namespace, run_id, &mut fx);
            super::workflow_host::apply_effects(self, fx);
        }
    }

    /// A workflow run became final: answer those waiting on it.
    pub fn workflow_final(&self, namespace: &str, run_id: &str) {
        self.answer_final(namespace, run_id, true);
    }

    /// Answers the watches whose deadline passed; returns the next deadline. Scans the live
    /// watches only (bounded by requests in flight), when the expiry task wakes.
    pub fn expire_watches(&self, now_ms: u64) -> Option<u64> {
        let mut expired: Vec<((RunKey, bool), ReplyTo)> = Vec::new();
        let mut next: Option<u64> = None;
        self.run_watchers.borrow_mut().retain(|key, list| {
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(list)
                .into_iter()
                .partition(|(d, _)| *d <= now_ms);
            expired.extend(gone.into_iter().map(|(_, to)| (key.clone(), to)));
            next = kept.iter().map(|(d, _)| *d).chain(next).min();
            *list = kept;
            !list.is_empty()
        });
        for (key, to) in expired {
            self.answer_watch(&key, to);
        }
        next
    }

    /// Where a client operation runs.
    pub fn target(&self, op: &Op) -> Target {
        if let Some((namespace, key)) = route_key(op) {
            return Target::Shard(self.partitioning.shard_of(namespace, &key));
        }
        match op {
            Op::ActionRegister(_) | Op::ActionDelete { .. } | Op::ActionSetEnabled { .. } => {
                Target::Shard(COORDINATOR)
            }
            // Definitions live on every shard; a new run takes an id this shard owns.
            Op::ActionGet { .. } | Op::ActionList { .. } | Op::ActionInvoke(InvokeSpec { .. }) => {
                Target::Shard(self.id)
            }
            Op::Status | Op::KvList { .. } | Op::RunList { .. } | Op::TestAdvanceClock { .. } => {
                Target::All
            }
            Op::Hello { .. } | Op::ShardMap => Target::Here,
            Op::WorkerList { .. } => Target::All,
            Op::WorkflowCreate { .. } | Op::WorkflowSetEnabled { .. } => Target::Shard(COORDINATOR),
            // Definitions live on every shard; a new run takes an id this shard owns.
            Op::WorkflowGet { .. } | Op::WorkflowList { .. } | Op::WorkflowStart(_) => {
                Target::Shard(self.id)
            }
            Op::WorkflowListRuns { .. } => Target::All,
            Op::WorkflowStatus { .. }
            | Op::WorkflowWait { .. }
            | Op::WorkflowHistory { .. }
            | Op::WorkflowSignal { .. }
            | Op::WorkflowCancel { .. } => unreachable!("keyed operations are routed by key"),
            Op::WorkerRegister(_)
            | Op::WorkerHeartbeat { .. }
            | Op::WorkerDrain { .. }
            | Op::WorkerDeregister { .. }
            | Op::WorkerGet { .. }
            | Op::TaskAwait { .. }
            | Op::TaskComplete { .. }
            | Op::TaskFail { .. }
            | Op::TaskTouch { .. } => unreachable!("keyed operations are routed by key"),
            Op::KvGet { .. }
            | Op::KvPut { .. }
            | Op::KvDelete { .. }
            | Op::RunStatus { .. }
            | Op::RunWait { .. }
            | Op::RunCancel { .. } => unreachable!("keyed operations are routed by key"),
        }
    }

    /// Executes a synchronous operation owned by this shard.
    pub fn execute(&self, op: Op) -> Done {
        let mut core = self.core.borrow_mut();
        let done = core.execute(op);
        if core.log.pending_bytes() > 0 {
            self.flush.notify();
        }
        done
    }

    /// Appends and applies one record; returns its LSN.
    pub fn commit(&self, record: Record) -> u64 {
        let lsn = self.core.borrow_mut().commit(record);
        self.flush.notify();
        lsn
    }

    /// Sends `result` to `to` once `lsn` is durable.
    pub fn reply(&self, to: ReplyTo, lsn: u64, result: ReplyResult) {
        match to {
            ReplyTo::Conn { conn, id } => conn.send_when_durable(self, id, lsn, result),
            ReplyTo::Peer { shard, tag } => {
                let link = self.peers[shard as usize]
                    .as_ref()
                    .expect("reply to another shard");
                self.deliver(&link.replies, lsn, (tag, result));
            }
            ReplyTo::Oneshot(tx) => {
                if !self.must_wait(lsn) {
                    let _ = tx.send(result);
                    return;
                }
                let (waiter, rx) = DurableOneshot::new(lsn);
                self.waiting.borrow_mut().push(waiter);
                glommio::spawn_local(async move {
                    let _ = rx.await;
                    let _ = tx.send(result);
                })
                .detach();
            }
        }
    }

    pub fn durable_lsn(&self) -> u64 {
        self.core.borrow().durable_lsn
    }

    fn must_wait(&self, lsn: u64) -> bool {
        self.durability == Durability::Sync && lsn > self.durable_lsn()
    }

    /// Hands `item` to `outbox` once `lsn` is durable (at once with async durability).
    pub fn deliver<T: 'static>(&self, outbox: &Rc<Outbox<T>>, lsn: u64, item: T) {
        if !self.must_wait(lsn) {
            outbox.push_ready(item);
            return;
        }
        outbox.push_pending(lsn, item);
        if !outbox.queued.replace(true) {
            self.waiting.borrow_mut().push(outbox.clone());
        }
    }

    pub async fn wait_durable(&self, lsn: u64) {
        if !self.must_wait(lsn) {
            return;
        }
        let (waiter, rx) = DurableOneshot::new(lsn);
        self.waiting.borrow_mut().push(waiter);
        let _ = rx.await;
    }

    /// Called by the flusher once everything up to `lsn` is on disk.
    pub fn set_durable(&self, lsn: u64) {
        self.core.borrow_mut().durable_lsn = lsn;
        let mut list = std::mem::take(&mut *self.waiting.borrow_mut());
        list.retain(|w| w.release(lsn));
        self.waiting.borrow_mut().append(&mut list);
    }

    /// Sends `op` to shard `target`; the reply goes to `waiter`.
    pub fn forward(&self, target: u32, op: ShardOp, waiter: ReplyTo) {
        let tag = self.next_tag.get();
        self.next_tag.set(tag + 1);
        self.waiters.borrow_mut().insert(tag, waiter);
        let link = self.peers[target as usize]
            .as_ref()
            .expect("forward to another shard");
        link.requests.borrow_mut().push((tag, op));
        link.signal.notify();
    }

    /// Sends `op` to shard `target` without waiting for (or caring about) its reply.
    pub fn tell(&self, target: u32, op: ShardOp) {
        let (tx, _rx) = oneshot::channel();
        self.forward(target, op, ReplyTo::Oneshot(tx));
    }

    /// A reply from another shard arrived.
    pub fn complete(&self, tag: u64, result: ReplyResult) {
        let Some(waiter) = self.waiters.borrow_mut().remove(&tag) else {
            return;
        };
        self.reply(waiter, 0, result);
    }

    /// Starts `op` on shard `target` (this one included) without waiting.
    pub fn begin_call(&self, target: u32, op: Op) -> CallHandle {
        if target == self.id {
            return CallHandle::Local(Box::new(self.execute(op)));
        }
        self.begin_shard_call(target, ShardOp::Client(op))
    }

    /// Starts an internal operation on another shard.
    pub fn begin_shard_call(&self, target: u32, op: ShardOp) -> CallHandle {
        let (tx, rx) = oneshot::channel();
        self.forward(target, op, ReplyTo::Oneshot(tx));
        CallHandle::Remote(rx)
    }
}

impl CallHandle {
    pub async fn finish(self, shard: &Shard) -> ReplyResult {
        match self {
            CallHandle::Local(done) => {
                shard.wait_durable(done.wait_lsn).await;
                done.result
            }
            CallHandle::Remote(rx) => rx
                .await
                .unwrap_or_else(|_| Err(ErrorValue::unavailable("shard stopped before replying"))),
        }
    }
}
