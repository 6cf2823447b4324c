//! The one commit path (append → apply → observe) and the gate every effect passes: an
//! effect that depends on a record leaves the shard only once that record is durable.
//! Domain handlers get a `&mut Core`; they change state only through `commit`.

use super::io::{DiskSpace, Effect, PeerMsg, PeerRequest, ReplyResult, ReplyTo};
use crate::clock::Clock;
use crate::fold::index::{Index, Touch};
use crate::fold::record::Record;
use crate::fold::state::ShardState;
use crate::hash::Partitioning;
use crate::ids::{RunKey, WorkerKey};
use crate::tables::HashMap;
use flo_protocol::{ErrorCode, TaskAssignment};
use flo_ual::{Batch, LogBuffer};
use std::collections::VecDeque;

/// When a client's mutation is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After its records are written and fdatasync'ed (the default).
    Sync,
    /// Before the sync; the flusher writes and syncs right behind (within ~1 ms).
    Async,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

/// Work the engine queues for itself instead of calling deeper: drained by the step loop,
/// one budget per input.
#[derive(Debug)]
pub enum Task {
    /// An action run became final: answer its waiters, finish the step it executes.
    ActionFinal(RunKey),
    /// A workflow run may move on.
    WfAdvance(RunKey),
    /// A workflow run became final: answer its waiters, finish its parent's step.
    WfFinal(RunKey),
    /// After recovery: an in-flight workflow run continues where it was.
    WfResume(RunKey),
    /// A run may be final and unreferenced: archive it (`archive::plan_archive`).
    Archive(crate::fold::archive::RunKind, RunKey),
    /// Tasks leased here (now durable) for an await of a worker homed here.
    Delivered {
        worker: WorkerKey,
        want_id: u64,
        from: u32,
        tasks: Vec<TaskAssignment>,
    },
}

/// What a reply from another shard continues.
#[derive(Debug)]
pub enum Waiting {
    /// A client operation forwarded to its owner: pass the answer on.
    Relay(ReplyTo),
    /// A forwarded await: pass the answer on, or hand its tasks back if nobody listens.
    AwaitRelay { to: ReplyTo, worker: WorkerKey },
    /// A blocking read forwarded to the key's owner: pass the answer on.
    KvWaitRelay(ReplyTo),
    /// A part of fan-out `id`.
    FanOut(u64),
    /// A shard's acknowledgement of definition change `id`.
    Definition(u64),
    /// A shard's first answer to a worker's want.
    WantShare {
        worker: WorkerKey,
        want_id: u64,
        from: u32,
    },
    /// A guest's read of a key on another shard.
    GuestRead { exec: u64, read: u64 },
    /// Delivery of guest KV writes of the completion at `origin_lsn`.
    Forward { origin_lsn: u64 },
    /// Nothing to continue (a start-up sync, a clock move).
    Nothing,
}

enum Held {
    Effect(Effect),
    Task(Task),
}

/// Steps one input may take before the rest is continued by `Input::Continue`.
pub const STEPS_PER_INPUT_MAX: u32 = 4096;

pub struct Core {
    pub shard: u32,
    pub partitioning: Partitioning,
    pub durability: Durability,
    /// The fold of the log.
    pub state: ShardState,
    /// Derived from the fold by `observe` (queues, timers): the same live and on replay.
    pub index: Index,
    log: LogBuffer,
    durable_lsn: u64,
    /// LSN of the last record that removed a key: a read that finds no key waits for it.
    absence_lsn: u64,
    /// LSN of the last `RunsForgotten`: an answer that finds no run (not found) waits for
    /// it, or a crash could bring back a run a client was told is gone.
    forgotten_lsn: u64,
    /// LSN of the last definition record: a read of definitions waits for it.
    definitions_lsn: u64,
    /// Effects and tasks waiting for their LSN to be durable, in LSN order.
    held: VecDeque<(u64, Held)>,
    out: Vec<Effect>,
    agenda: VecDeque<Task>,
    /// Steps left for the input being handled.
    pub steps_left: u32,
    /// Workflow steps taken per root run since the agenda was last empty.
    pub root_steps: HashMap<RunKey, u32>,
    /// Calls to other shards waiting for an answer: the continuation, the shard asked,
    /// and when (wall clock).
    calls: HashMap<u64, (Waiting, u32, u64)>,
    next_tag: u64,
    clock: Box<dyn Clock>,
    wall: Box<dyn Clock>,
    /// Both clocks, read once per input (`read_clocks`): time stands still while one input
    /// is handled.
    now_ms: u64,
    wall_ms: u64,
    group_open: bool,
    /// Keys written since the last look (`kv::serve_waits`), noted only while blocking
    /// reads are parked (None: not noting).
    pub kv_written: Option<Vec<(String, String)>>,
    /// Room for the log, as the runtime last said (`Input::DiskSpace`): read-only while
    /// `Full`.
    pub disk: DiskSpace,
}

impl Core {
    pub fn new(
        state: ShardState,
        durability: Durability,
        clock: Box<dyn Clock>,
        wall: Box<dyn Clock>,
    ) -> Self {
        Core {
            shard: state.shard,
            partitioning: state.partitioning,
            durability,
            state,
            index: Index::default(),
            log: LogBuffer::new(1),
            durable_lsn: 0,
            absence_lsn: 0,
            forgotten_lsn: 0,
            definitions_lsn: 0,
            held: VecDeque::new(),
            out: Vec::new(),
            agenda: VecDeque::new(),
            steps_left: STEPS_PER_INPUT_MAX,
            root_steps: HashMap::default(),
            calls: HashMap::default(),
            next_tag: 1,
            now_ms: clock.now_ms(),
            wall_ms: wall.now_ms(),
            clock,
            wall,
            group_open: false,
            kv_written: None,
            disk: DiskSpace::Available,
        }
    }

    // ---- time ----

    /// Reads both clocks (at the start of each input).
    pub fn read_clocks(&mut self) {
        self.now_ms = self.clock.now_ms();
        self.wall_ms = self.wall.now_ms();
    }

    /// The shard's time (what records carry; a test clock may move it).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Real time, for client patience (waits, awaits).
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }

    /// Moves the shard's clock (a test clock only).
    pub fn advance_clock(&mut self, ms: u64) -> bool {
        let moved = self.clock.advance(ms);
        self.read_clocks();
        moved
    }

    // ---- the commit path ----

    /// Appends `record` to the log, applies it to the state and observes it into the
    /// derived index: the only way state changes. Returns its LSN.
    pub fn commit(&mut self, record: Record) -> u64 {
        let touch = Touch::of(&record);
        let removes_keys = record.may_remove_keys();
        let definition = record.is_definition();
        let forgets = matches!(record, Record::RunsForgotten { .. });
        if let Some(written) = &mut self.kv_written {
            record.keys_written(written);
        }
        let lsn = self
            .log
            .append(record.type_code(), |out| record.encode(out))
            .unwrap_or_else(|e| panic!("shard {}: {e}", self.shard));
        self.state.apply(lsn, record);
        self.index.observe(&touch, &self.state);
        if removes_keys {
            self.absence_lsn = lsn;
        }
        if definition {
            self.definitions_lsn = lsn;
        }
        if forgets {
            self.forgotten_lsn = lsn;
        }
        lsn
    }

    /// Commits `records` as one atomic group: recovery applies all of them or none.
    /// Returns the LSN of the last (0 for none).
    pub fn commit_group(&mut self, records: Vec<Record>) -> u64 {
        debug_assert!(!self.group_open, "groups do not nest");
        self.group_open = true;
        self.log.begin_group();
        let mut lsn = 0;
        for record in records {
            lsn = self.commit(record);
        }
        self.log.end_group();
        self.group_open = false;
        lsn
    }

    /// Opens an atomic group that several handlers fill (closed by `end_group`).
    pub fn begin_group(&mut self) {
        debug_assert!(!self.group_open, "groups do not nest");
        self.group_open = true;
        self.log.begin_group();
    }

    pub fn end_group(&mut self) {
        debug_assert!(self.group_open);
        self.log.end_group();
        self.group_open = false;
    }

    /// Applies a record read back from the log at start-up (same fold, same index).
    pub fn replay(&mut self, lsn: u64, record: Record) {
        let touch = Touch::of(&record);
        self.state.apply(lsn, record);
        self.index.observe(&touch, &self.state);
    }

    /// Replaces the (empty) fold with one loaded from a snapshot; its index is rebuilt.
    pub fn restore(&mut self, state: ShardState) {
        self.index = Index::rebuild(&state);
        self.state = state;
    }

    /// After replay: appends continue after `last_lsn`, which is durable.
    pub fn recovered(&mut self, last_lsn: u64) {
        self.log = LogBuffer::new(last_lsn + 1);
        self.durable_lsn = last_lsn;
        self.index.compact(&self.state);
    }

    pub fn last_lsn(&self) -> u64 {
        self.log.last_lsn()
    }

    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
    }

    pub fn absence_lsn(&self) -> u64 {
        self.absence_lsn
    }

    pub fn definitions_lsn(&self) -> u64 {
        self.definitions_lsn
    }

    pub fn pending_log_bytes(&self) -> usize {
        self.log.pending_bytes()
    }

    /// The records appended since the last take, for the log writer.
    pub fn take_batch(&mut self, spare: Vec<u8>) -> Option<Batch> {
        debug_assert!(!self.group_open, "a batch never cuts a group");
        self.log.take(spare)
    }

    // ---- what leaves the shard ----

    /// Everything up to `lsn` is on disk: release what waited for it.
    pub fn set_durable(&mut self, lsn: u64) {
        self.durable_lsn = self.durable_lsn.max(lsn);
        while self
            .held
            .front()
            .is_some_and(|(l, _)| *l <= self.durable_lsn)
        {
            let (_, held) = self.held.pop_front().expect("checked");
            match held {
                Held::Effect(e) => self.out.push(e),
                Held::Task(t) => self.agenda.push_back(t),
            }
        }
    }

    fn hold(&mut self, lsn: u64, held: Held) {
        if lsn <= self.durable_lsn {
            match held {
                Held::Effect(e) => self.out.push(e),
                Held::Task(t) => self.agenda.push_back(t),
            }
            return;
        }
        // Mostly appended in LSN order; a read of an older record may wait for less.
        let at = self.held.partition_point(|(l, _)| *l <= lsn);
        if at == self.held.len() {
            self.held.push_back((lsn, held));
        } else {
            self.held.insert(at, (lsn, held));
        }
    }

    /// An effect that depends on nothing durable.
    pub fn emit(&mut self, effect: Effect) {
        self.out.push(effect);
    }

    /// Answers a client operation once `lsn` is durable (at once with async durability:
    /// the client chose to be answered before the sync).
    pub fn reply_op(&mut self, to: ReplyTo, lsn: u64, result: ReplyResult) {
        let lsn = match self.durability {
            // What is not found may have been forgotten by a record not yet durable.
            Durability::Sync
                if result
                    .as_ref()
                    .is_err_and(|e| e.code == ErrorCode::NotFound) =>
            {
                lsn.max(self.forgotten_lsn)
            }
            Durability::Sync => lsn,
            Durability::Async => 0,
        };
        self.reply(to, lsn, result);
    }

    /// Answers once `lsn` is durable, whatever the durability setting.
    pub fn reply(&mut self, to: ReplyTo, lsn: u64, result: ReplyResult) {
        let effect = match to {
            // A message that wanted no answer.
            ReplyTo::Peer { tag: 0, .. } => return,
            ReplyTo::Client(to) => Effect::Reply {
                to,
                result: Box::new(result),
            },
            ReplyTo::Peer { shard, tag } => Effect::Send {
                shard,
                msg: Box::new(PeerMsg::Reply { tag, result }),
            },
        };
        self.hold(lsn, Held::Effect(effect));
    }

    /// Reads the record at `lsn` back from the log once it is durable (`Input::LogRead`
    /// answers with `token`).
    pub fn read_log(&mut self, lsn: u64, token: u64) {
        self.hold(lsn, Held::Effect(Effect::ReadLog { token, lsn }));
    }

    /// Asks shard `shard` once `lsn` is durable; its answer continues `waiting`.
    pub fn call(&mut self, shard: u32, lsn: u64, req: PeerRequest, waiting: Waiting) -> u64 {
        debug_assert_ne!(shard, self.shard, "a shard does not call itself");
        let tag = self.next_tag;
        self.next_tag += 1;
        self.calls.insert(tag, (waiting, shard, self.wall_ms));
        let msg = Box::new(PeerMsg::Request { tag, req });
        self.hold(lsn, Held::Effect(Effect::Send { shard, msg }));
        tag
    }

    /// Tells shard `shard` once `lsn` is durable; no answer is wanted.
    pub fn tell(&mut self, shard: u32, lsn: u64, req: PeerRequest) {
        debug_assert_ne!(shard, self.shard, "a shard does not tell itself");
        let msg = Box::new(PeerMsg::Request { tag: 0, req });
        self.hold(lsn, Held::Effect(Effect::Send { shard, msg }));
    }

    /// The continuation of call `tag` (once).
    pub fn take_call(&mut self, tag: u64) -> Option<Waiting> {
        self.calls.remove(&tag).map(|(waiting, _, _)| waiting)
    }

    /// Calls a client waits on (a relayed operation, a part of a fan-out) made at or
    /// before `sent_by_ms` (wall clock) and still unanswered, as (tag, shard asked). Other
    /// calls wait as long as they must: a blocking read or an await has its own time
    /// limit, and internal deliveries must not be given up.
    pub fn overdue_client_calls(&self, sent_by_ms: u64) -> Vec<(u64, u32)> {
        self.calls
            .iter()
            .filter(|(_, (w, _, at))| {
                *at <= sent_by_ms && matches!(w, Waiting::Relay(_) | Waiting::FanOut(_))
            })
            .map(|(&tag, &(_, shard, _))| (tag, shard))
            .collect()
    }

    /// Calls waiting for an answer (for tests and status).
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Queues work for this input's step loop.
    pub fn schedule(&mut self, task: Task) {
        self.agenda.push_back(task);
    }

    /// Queues work for once `lsn` is durable.
    pub fn schedule_after(&mut self, lsn: u64, task: Task) {
        self.hold(lsn, Held::Task(task));
    }

    pub fn next_task(&mut self) -> Option<Task> {
        self.agenda.pop_front()
    }

    pub fn has_tasks(&self) -> bool {
        !self.agenda.is_empty()
    }

    pub fn take_effects(&mut self, into: &mut Vec<Effect>) {
        into.append(&mut self.out);
    }

    /// Effects and tasks still waiting for durability.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Charges one workflow step to `root`'s budget; false once it is spent.
    pub fn charge_root(&mut self, root: &RunKey, max: u32) -> bool {
        self.steps_left = self.steps_left.saturating_sub(1);
        match self.root_steps.get_mut(root) {
            Some(n) => {
                *n += 1;
                *n <= max
            }
            None => {
                self.root_steps.insert(root.clone(), 1);
                true
            }
        }
    }
}
