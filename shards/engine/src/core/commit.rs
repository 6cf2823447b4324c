//! `Core`: the one commit path (append → apply → observe) and what every handler reaches
//! through it — the fold (read-only: state changes only by `commit`), the derived index,
//! the durability gate, the agenda, calls to other shards and the shard's clocks. Domain
//! handlers get a `&mut Core`.

use super::agenda::{Agenda, Task};
use super::calls::{Calls, Waiting};
use super::counts::Counts;
use super::gate::{Durability, Gate, Marks};
use super::io::{DiskSpace, Effect, PeerMsg, PeerRequest, ReplyResult, ReplyTo};
use super::limits::Limits;
use super::step_queue::StepQueue;
use crate::auth::{Quota, Quotas};
use crate::clock::Clock;
use crate::fold::index::{Index, Touch};
use crate::fold::record::Record;
use crate::fold::state::ShardState;
use crate::hash::Partitioning;
use crate::ids::RunKey;
use crate::plan_book::PlanBook;
use flo_ual::{Batch, LogBuffer};
use std::sync::Arc;

/// The shard's two clocks, read once per input: time stands still while one input is
/// handled.
struct Clocks {
    /// The shard's time (what records carry; a test clock may move it).
    clock: Box<dyn Clock>,
    /// Real time, for client patience (waits, awaits).
    wall: Box<dyn Clock>,
    now_ms: u64,
    wall_ms: u64,
}

pub struct Core {
    shard: u32,
    partitioning: Partitioning,
    /// The fold of the log.
    state: ShardState,
    /// Derived from the fold by `observe` (queues, timers): the same live and on replay.
    index: Index,
    log: LogBuffer,
    gate: Gate,
    agenda: Agenda,
    calls: Calls,
    clocks: Clocks,
    group_open: bool,
    /// Keys written since the last look (`kv::serve_waits`), noted only while blocking
    /// reads are parked (None: not noting).
    keys_written: Option<Vec<(String, String)>>,
    /// Room for the log, as the runtime last said (`Input::DiskSpace`): read-only while
    /// `Full`.
    disk: DiskSpace,
    /// The namespaces' quotas (`quotas.rs`).
    quotas: Arc<Quotas>,
    /// The operator's bounds (`limits.rs`).
    limits: Limits,
    /// Inline plans' breakers, health, rate windows and cache: in memory only
    /// (`plan_book.rs`).
    plans: PlanBook,
    /// What the handlers count for the metrics (live only: `counts.rs`).
    counts: Counts,
    /// WebAssembly steps waiting for a slot or executing (in memory only: `step_queue.rs`).
    steps: StepQueue,
    /// The LSN of the last snapshot image taken or loaded: the segments that may be deleted
    /// after it end at or before it, so an archive record may point at records after it
    /// (`archive::plan`).
    imaged_lsn: std::cell::Cell<u64>,
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
            state,
            index: Index::default(),
            log: LogBuffer::new(1),
            gate: Gate::new(durability),
            agenda: Agenda::default(),
            calls: Calls::default(),
            clocks: Clocks {
                now_ms: clock.now_ms(),
                wall_ms: wall.now_ms(),
                clock,
                wall,
            },
            group_open: false,
            keys_written: None,
            disk: DiskSpace::Available,
            quotas: Arc::default(),
            limits: Limits::default(),
            plans: PlanBook::default(),
            counts: Counts::default(),
            steps: StepQueue::default(),
            imaged_lsn: std::cell::Cell::new(0),
        }
    }

    /// What the handlers counted for the metrics.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    pub fn counts_mut(&mut self) -> &mut Counts {
        &mut self.counts
    }

    /// WebAssembly steps waiting for a slot or executing.
    pub fn steps(&self) -> &StepQueue {
        &self.steps
    }

    pub fn steps_mut(&mut self) -> &mut StepQueue {
        &mut self.steps
    }

    /// Inline plans' in-memory state on this shard.
    pub fn plans(&mut self) -> &mut PlanBook {
        &mut self.plans
    }

    pub fn set_quotas(&mut self, quotas: Arc<Quotas>) {
        self.quotas = quotas;
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The operator's bounds (server flags).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The namespaces' quotas, when there are any.
    pub fn quotas(&self) -> Option<Arc<Quotas>> {
        (!self.quotas.is_empty()).then(|| self.quotas.clone())
    }

    /// The quota of `namespace` (the whole server's), if one applies.
    pub fn quota(&self, namespace: &str) -> Option<&Quota> {
        match self.quotas.is_empty() {
            true => None,
            false => self.quotas.of(namespace),
        }
    }

    // ---- who and where ----

    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub fn partitioning(&self) -> Partitioning {
        self.partitioning
    }

    pub fn durability(&self) -> Durability {
        self.gate.durability()
    }

    /// The fold, to read: it changes only through `commit`.
    pub fn state(&self) -> &ShardState {
        &self.state
    }

    /// The derived index (queues and timers), which handlers pop and push.
    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn index_mut(&mut self) -> &mut Index {
        &mut self.index
    }

    /// The index to change, with the steps waiting for a slot beside it (choosing the next
    /// execution looks at both).
    pub fn index_and_steps(&mut self) -> (&mut Index, &StepQueue) {
        (&mut self.index, &self.steps)
    }

    /// Runs whose delay or retry came due move to the ready queues.
    pub fn fire_due_runs(&mut self, now_ms: u64) {
        self.index.fire_due_runs(now_ms, &self.state);
    }

    pub fn disk(&self) -> DiskSpace {
        self.disk
    }

    pub fn set_disk(&mut self, space: DiskSpace) {
        self.disk = space;
    }

    // ---- time ----

    /// A new input: both clocks read, a fresh step budget.
    pub fn begin_input(&mut self) {
        self.read_clocks();
        self.agenda.new_input();
    }

    fn read_clocks(&mut self) {
        self.clocks.now_ms = self.clocks.clock.now_ms();
        self.clocks.wall_ms = self.clocks.wall.now_ms();
    }

    /// The shard's time (what records carry; a test clock may move it).
    pub fn now_ms(&self) -> u64 {
        self.clocks.now_ms
    }

    /// Real time, for client patience (waits, awaits).
    pub fn wall_ms(&self) -> u64 {
        self.clocks.wall_ms
    }

    /// Moves the shard's clock (a test clock only).
    pub fn advance_clock(&mut self, ms: u64) -> bool {
        let moved = self.clocks.clock.advance(ms);
        self.read_clocks();
        moved
    }

    // ---- the commit path ----

    /// Appends `record` to the log, applies it to the state and observes it into the
    /// derived index: the only way state changes. Returns its LSN.
    pub fn commit(&mut self, record: Record) -> u64 {
        let touch = Touch::of(&record);
        let marks = Marks {
            removes_keys: record.may_remove_keys(),
            definition: record.is_definition(),
            forgets: matches!(record, Record::RunsForgotten { .. }),
        };
        if let Some(written) = &mut self.keys_written {
            record.keys_written(written);
        }
        let type_code = record.type_code();
        let lsn = self
            .log
            .append(type_code, |out| record.encode(out))
            .unwrap_or_else(|e| panic!("shard {}: {e}", self.shard));
        #[cfg(debug_assertions)]
        self.assert_round_trip(lsn, type_code, &record);
        self.state.apply(lsn, record);
        self.index.observe(&touch, &self.state);
        self.gate.note(lsn, marks);
        lsn
    }

    /// What was appended decodes to the record committed, under the type code it was
    /// framed with (debug builds: the other side of the log's boundary).
    #[cfg(debug_assertions)]
    fn assert_round_trip(&self, lsn: u64, type_code: u16, record: &Record) {
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        let back = Record::decode(&bytes).unwrap_or_else(|e| panic!("record {lsn}: {e}"));
        debug_assert_eq!(back.type_code(), type_code, "record {lsn}: type code");
        // An archive that points at its payloads (`Refs`) reads back without them until a
        // reader puts them back: the rest must round-trip.
        debug_assert!(
            without_payloads(&back) == without_payloads(record),
            "record {lsn} does not round-trip"
        );
    }

    /// Commits `records` as one atomic group: recovery applies all of them or none.
    /// Returns the LSN of the last (0 for none).
    pub fn commit_group(&mut self, records: Vec<Record>) -> u64 {
        self.begin_group();
        let mut lsn = 0;
        for record in records {
            lsn = self.commit(record);
        }
        self.end_group();
        lsn
    }

    /// Opens an atomic group that several handlers fill (closed by `end_group`).
    pub fn begin_group(&mut self) {
        debug_assert!(!self.group_open, "groups do not nest");
        self.group_open = true;
        self.log.begin_group();
    }

    /// Whether an atomic group is open (its records are logged together).
    pub fn group_open(&self) -> bool {
        self.group_open
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
        self.imaged_lsn.set(state.applied_lsn);
        self.state = state;
    }

    /// A snapshot image was taken at `lsn` (see `imaged_lsn`).
    pub fn imaged_at(&self, lsn: u64) {
        self.imaged_lsn.set(self.imaged_lsn.get().max(lsn));
    }

    /// The LSN of the last snapshot image taken or loaded (0: none).
    pub fn imaged_lsn(&self) -> u64 {
        self.imaged_lsn.get()
    }

    /// After replay: appends continue after `last_lsn`, which is durable.
    pub fn recovered(&mut self, last_lsn: u64) {
        self.log = LogBuffer::new(last_lsn + 1);
        self.gate.recovered(last_lsn);
        self.index.compact(&self.state);
    }

    pub fn last_lsn(&self) -> u64 {
        self.log.last_lsn()
    }

    pub fn durable_lsn(&self) -> u64 {
        self.gate.durable_lsn()
    }

    pub fn absence_lsn(&self) -> u64 {
        self.gate.absence_lsn()
    }

    pub fn definitions_lsn(&self) -> u64 {
        self.gate.definitions_lsn()
    }

    pub fn pending_log_bytes(&self) -> usize {
        self.log.pending_bytes()
    }

    /// The records appended since the last take, for the log writer.
    pub fn take_batch(&mut self, spare: Vec<u8>) -> Option<Batch> {
        debug_assert!(!self.group_open, "a batch never cuts a group");
        self.log.take(spare)
    }

    // ---- what leaves the shard: the durability gate ----

    /// Everything up to `lsn` is on disk: release what waited for it.
    pub fn set_durable(&mut self, lsn: u64) {
        debug_assert!(
            lsn <= self.last_lsn(),
            "durable {lsn} beyond the last record"
        );
        self.gate.set_durable(lsn, &mut self.agenda);
    }

    fn hold(&mut self, lsn: u64, effect: Effect) {
        debug_assert!(
            lsn <= self.last_lsn(),
            "an effect waits for record {lsn}, which is not appended"
        );
        self.gate.hold_effect(lsn, effect, &mut self.agenda);
    }

    /// An effect that depends on nothing durable.
    pub fn emit(&mut self, effect: Effect) {
        self.gate.emit(effect);
    }

    /// Answers a client operation once `lsn` is durable (at once with async durability:
    /// the client chose to be answered before the sync).
    pub fn reply_op(&mut self, to: ReplyTo, lsn: u64, result: ReplyResult) {
        let lsn = self.gate.client_lsn(lsn, &result);
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
        self.hold(lsn, effect);
    }

    /// Reads the record at `lsn` back from the log once it is durable (`Input::LogRead`
    /// answers with `token`).
    pub fn read_log(&mut self, lsn: u64, token: u64) {
        self.hold(lsn, Effect::ReadLog { token, lsn });
    }

    /// Asks shard `shard` once `lsn` is durable; its answer continues `waiting`.
    pub fn call(&mut self, shard: u32, lsn: u64, req: PeerRequest, waiting: Waiting) -> u64 {
        debug_assert_ne!(shard, self.shard, "a shard does not call itself");
        let tag = self.calls.open(shard, self.wall_ms(), waiting);
        let msg = Box::new(PeerMsg::Request { tag, req });
        self.hold(lsn, Effect::Send { shard, msg });
        tag
    }

    /// Tells shard `shard` once `lsn` is durable; no answer is wanted.
    pub fn tell(&mut self, shard: u32, lsn: u64, req: PeerRequest) {
        debug_assert_ne!(shard, self.shard, "a shard does not tell itself");
        let msg = Box::new(PeerMsg::Request { tag: 0, req });
        self.hold(lsn, Effect::Send { shard, msg });
    }

    /// The continuation of call `tag` (once).
    pub fn take_call(&mut self, tag: u64) -> Option<Waiting> {
        self.calls.take(tag)
    }

    /// Calls a client waits on made at or before `sent_by_ms` (wall clock) and still
    /// unanswered, as (tag, shard asked).
    pub fn overdue_client_calls(&self, sent_by_ms: u64) -> Vec<(u64, u32)> {
        self.calls.overdue_client_calls(sent_by_ms)
    }

    /// Calls waiting for an answer (for tests and status).
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    pub fn take_effects(&mut self, into: &mut Vec<Effect>) {
        self.gate.take_effects(into);
    }

    /// Effects and tasks still waiting for durability.
    pub fn held_len(&self) -> usize {
        self.gate.held_len()
    }

    /// Whether an effect or task waits for a record not yet taken for writing (those
    /// taken are being written already).
    pub fn waits_for_pending(&self) -> bool {
        self.log
            .first_pending_lsn()
            .is_some_and(|first| self.gate.waits_for(first))
    }

    // ---- the agenda ----

    /// Queues work for this input's step loop.
    pub fn schedule(&mut self, task: Task) {
        self.agenda.push(task);
    }

    /// Queues work for once `lsn` is durable.
    pub fn schedule_after(&mut self, lsn: u64, task: Task) {
        debug_assert!(
            lsn <= self.last_lsn(),
            "a task waits for record {lsn}, not appended"
        );
        self.gate.hold_task(lsn, task, &mut self.agenda);
    }

    /// The next task within the input's budget.
    pub fn next_task(&mut self) -> Option<Task> {
        self.agenda.next()
    }

    pub fn has_tasks(&self) -> bool {
        !self.agenda.is_empty()
    }

    /// Whether this input's step budget is spent.
    pub fn budget_spent(&self) -> bool {
        self.agenda.spent()
    }

    /// Charges one workflow step to `root`'s budget; false once it is spent.
    pub fn charge_root(&mut self, root: &RunKey, max: u32) -> bool {
        self.agenda.charge_root(root, max)
    }

    // ---- keys written, for parked reads ----

    /// Starts noting the keys records write (parked reads wait on some), into `buf`
    /// (cleared) unless noting already.
    pub fn note_keys_written(&mut self, mut buf: Vec<(String, String)>) {
        if self.keys_written.is_none() {
            buf.clear();
            self.keys_written = Some(buf);
        }
    }

    /// The keys written since noting started; noting stops until asked again.
    pub fn take_keys_written(&mut self) -> Vec<(String, String)> {
        self.keys_written.take().unwrap_or_default()
    }
}

/// `record` with the payloads an archive document points at (and what derives from them)
/// cleared, so that a document as written and as read back compare.
#[cfg(debug_assertions)]
fn without_payloads(record: &Record) -> Record {
    use crate::fold::archived::{ArchivedRun, WfArchived};
    let Record::RunArchived {
        namespace,
        run_id,
        run,
    } = record
    else {
        return record.clone();
    };
    let bare = match run {
        ArchivedRun::Action(info, Some(refs)) => {
            let mut info = info.clone();
            refs.leave_out_of(&mut info);
            ArchivedRun::Action(info, Some(refs.clone()))
        }
        ArchivedRun::Workflow(doc) if doc.refs.is_some() => {
            let mut info = doc.info.clone();
            info.input.clear();
            info.output = None;
            // Written as its difference from the input (`Refs::state_over_input`, set as the
            // document is written) when that gives it back.
            info.state = None;
            for step in &mut info.steps {
                step.output = None;
            }
            let mut history = doc.history.clone();
            for e in &mut history {
                if e.event_type == flo_protocol::HistoryEventType::WorkflowStarted {
                    e.detail.clear();
                }
            }
            let mut bare = WfArchived::new(info, history);
            bare.refs = doc.refs.clone().map(|mut r| {
                r.state_over_input = false;
                r
            });
            ArchivedRun::Workflow(Box::new(bare))
        }
        _ => return record.clone(),
    };
    Record::RunArchived {
        namespace: namespace.clone(),
        run_id: run_id.clone(),
        run: bare,
    }
}
