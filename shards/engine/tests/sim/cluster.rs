//! A cluster of engines driven by hand: no sockets, no glommio. Each shard has a simulated
//! disk (segment files laid out as the real writer lays them out: every batch on a block
//! boundary, zero-padded; snapshot files; see `storage.rs`), at most one batch being
//! written at a time, a FIFO link to every other shard, and the effects it released
//! collected for the caller. Shared by the simulation (`sim.rs`) and the unit tests
//! (`engine_units.rs`), which keep one segment and no snapshots.

#![allow(dead_code)]

#[path = "storage.rs"]
pub mod storage;

use flo_engine::clock::ManualClock;
use flo_engine::hash::{PARTITIONS_DEFAULT, Partitioning};
use flo_engine::testing::RunKind;
use flo_engine::testing::record::Record;
use flo_engine::{
    ClientRef, Durability, Effect, Engine, EngineConfig, Execution, Input, PeerMsg, ReplyResult,
};
use flo_ual::{Batch, align_up, segment_file_name};
use std::collections::{BTreeMap, HashMap, VecDeque};
use storage::{CrashPlan, Segment, SnapFile, SnapJob, StorageStats, Unlinked};

pub const BLOCK: usize = 4096;
pub const HEADER: usize = 20;

/// The records of a clean log image: (LSN, payload). Panics on a gap in LSNs.
pub fn parse_log(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (lsn, at, len) in walk_log(bytes) {
        if let Some((prev, _)) = out.last() {
            assert_eq!(lsn, prev + 1, "log image: LSN {lsn} follows {prev}");
        }
        out.push((lsn, bytes[at + HEADER..at + HEADER + len].to_vec()));
    }
    out
}

/// (LSN, offset, payload length) of each record of a segment image, in order.
fn walk_log(bytes: &[u8]) -> Vec<(u64, usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + HEADER <= bytes.len() {
        if BLOCK - pos % BLOCK < HEADER {
            pos = align_up(pos as u64) as usize;
            continue;
        }
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        if len == 0 {
            pos = align_up(pos as u64 + 1) as usize;
            continue;
        }
        let lsn = u64::from_le_bytes(bytes[pos + 8..pos + 16].try_into().unwrap());
        out.push((lsn, pos, len));
        pos += HEADER + len;
    }
    out
}

/// Where the record with LSN `lsn` starts in a segment image.
fn record_offset(bytes: &[u8], lsn: u64) -> Option<usize> {
    walk_log(bytes)
        .into_iter()
        .find(|r| r.0 == lsn)
        .map(|r| r.1)
}

/// Writes the log's acknowledged mark at `lsn` into `dir`, as the writer keeps it.
fn write_acked_mark(dir: &std::path::Path, lsn: u64) {
    let mut file = vec![0u8; flo_ual::ACKED_MARK_BYTES as usize];
    let (at, bytes) = flo_ual::acked_slot(1, lsn);
    file[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
    std::fs::write(dir.join(flo_ual::ACKED_MARK_FILE), file).expect("write the mark");
}

/// Facts a durable record establishes, counted (`kvput ns/key v3` → 1). Checks look
/// replies up here ("the record this reply reports is durable") and bound counts ("one
/// completion per run").
pub fn facts_of(record: &Record, shard_facts: &mut HashMap<String, u64>) {
    let mut add = |f: String| *shard_facts.entry(f).or_insert(0) += 1;
    match record {
        Record::KvPut {
            namespace,
            key,
            version,
            ..
        } => add(format!("kvput {namespace}/{key} v{version}")),
        Record::ActionDefined {
            namespace,
            name,
            def,
        } => add(format!("action {namespace}/{name} v{}", def.version)),
        Record::RunCreated {
            namespace, run_id, ..
        } => add(format!("run {namespace}/{run_id}")),
        Record::RunCompleted {
            namespace, run_id, ..
        } => add(format!("completed {namespace}/{run_id}")),
        Record::RunCancelled {
            namespace, run_id, ..
        } => add(format!("runcancel {namespace}/{run_id}")),
        Record::AttemptFailed {
            namespace,
            run_id,
            attempt,
            ..
        } => add(format!("failed {namespace}/{run_id} a{attempt}")),
        Record::TasksLeased {
            namespace, tasks, ..
        } => {
            for t in tasks {
                add(format!("leased {namespace}/{} a{}", t.run_id, t.attempt));
            }
        }
        Record::WorkflowDefined {
            namespace,
            name,
            version,
            ..
        } => add(format!("workflow {namespace}/{name} v{version}")),
        Record::WfRunStarted {
            namespace,
            run_id,
            workflow,
            schedule,
            ..
        } => {
            add(format!("wfrun {namespace}/{run_id}"));
            if let Some(by) = schedule.filter(|by| !by.manual) {
                add(format!("tick {namespace}/{workflow}/{}", by.tick_ms));
            }
        }
        // A tick skipped alone (busy, refused) is neither fired nor skipped again.
        Record::ScheduleSkipped {
            namespace,
            workflow,
            ticks: 1,
            last_tick_ms,
            ..
        } => add(format!("tick {namespace}/{workflow}/{last_tick_ms}")),
        Record::WfStepFinished {
            namespace,
            run_id,
            next: flo_engine::testing::record::StepNext::End { .. },
            ..
        }
        | Record::WfRunCancelled {
            namespace, run_id, ..
        } => add(format!("wfend {namespace}/{run_id}")),
        Record::WfSignalReceived {
            namespace, run_id, ..
        } => add(format!("signal {namespace}/{run_id}")),
        Record::KvRemoteWrites {
            origin_shard,
            origin_lsn,
            ..
        } => add(format!("remote o{origin_shard} l{origin_lsn}")),
        Record::StreamAppended {
            namespace,
            stream,
            entries,
            ..
        } => {
            for e in entries {
                add(format!("sappend {namespace}/{stream} {}", e.id));
            }
        }
        Record::StreamDelivered {
            namespace,
            stream,
            group,
            ids,
            ..
        } => {
            for id in ids {
                add(format!("sdeliver {namespace}/{stream}/{group} {id}"));
            }
        }
        Record::StreamAcked {
            namespace,
            stream,
            group,
            ids,
            ..
        } => {
            for id in ids {
                add(format!("sack {namespace}/{stream}/{group} {id}"));
            }
        }
        _ => {}
    }
}

/// A guest read's answer: (shard, execution, read, value or why it failed).
type GuestValue = (u32, u64, u64, Result<Option<Vec<u8>>, String>);

/// How a cluster keeps its files and its finished runs.
#[derive(Debug, Clone, Copy)]
pub struct StorageConfig {
    /// The engines' retention of finished runs.
    pub retention_ms: u64,
    /// A segment file takes batches up to this many bytes (the unit tests: one segment).
    pub segment_bytes: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            retention_ms: flo_engine::testing::RETENTION_MS_DEFAULT,
            segment_bytes: u64::MAX,
        }
    }
}

/// A run id of a kind (`RunKind as u8`).
pub type RunId = (u8, String);

/// A durable archive record, as the checks of retention follow it.
#[derive(Debug, Clone)]
pub struct Archived {
    pub lsn: u64,
    /// When the run finished.
    pub finished_ms: u64,
    pub id: RunId,
    /// Which of the runs with this id (`Node::generation`).
    pub generation: u32,
}

/// The run a fact (`facts_of`) is about.
fn fact_subject(fact: &str) -> Option<(RunKind, &str)> {
    let (what, rest) = fact.split_once(' ')?;
    let kind = match what {
        "run" | "completed" | "runcancel" | "failed" | "leased" => RunKind::Action,
        "wfrun" | "wfend" | "signal" => RunKind::Workflow,
        _ => return None,
    };
    let subject = rest.split(' ').next()?;
    Some((kind, subject.split_once('/')?.1))
}

pub struct Node {
    pub engine: Engine,
    /// The segment file being written (each batch padded to the block size).
    pub disk: Vec<u8>,
    /// Its first LSN (its name).
    pub disk_first: u64,
    /// The segment files before it still on disk, in LSN order.
    pub sealed: Vec<Segment>,
    pub segment_bytes: u64,
    /// The batch the writer holds (written and acknowledged by `complete_write`).
    pub writing: Option<Batch>,
    /// Every durable record, decoded: kept across crashes and segment deletions (a record
    /// once durable stays so), from LSN 1 on.
    pub records: Vec<(u64, Record)>,
    pub payloads: Vec<(u64, Vec<u8>)>,
    pub facts: HashMap<String, u64>,
    /// (first LSN one step appended, the clock then), in LSN order: when a record was made.
    pub commit_ms: Vec<(u64, u64)>,
    /// Archive records among the durable ones, in LSN order.
    pub archived: Vec<Archived>,
    /// (kind, run id) → LSN of the archive record of the latest run with this id.
    pub archived_ids: HashMap<RunId, u64>,
    /// (kind, run id) → how many runs had this id: an id made of an idempotency key is
    /// free again once its run is forgotten.
    pub generations: HashMap<RunId, u32>,
    /// (kind, run id) → the latest of its runs a durable `RunsForgotten` forgot.
    pub forgotten_generations: HashMap<RunId, u32>,
    /// The highest `RunsForgotten { before_lsn }` durable: runs archived before it are
    /// forgotten; `archived[..forgotten]` are those runs.
    pub forgotten_before: u64,
    pub forgotten: usize,
    pub retention_ms: u64,
    /// Earliest `WakeAt` asked since the last tick.
    pub wake: Option<u64>,
    /// `Effect::Continue`s not yet fed back.
    pub continues: u32,
    /// Snapshot files on disk, newest first.
    pub snaps: Vec<SnapFile>,
    /// The snapshot being written.
    pub job: Option<SnapJob>,
    /// Files unlinked since the directory was last synced (a crash may bring them back).
    pub unlinked: Vec<Unlinked>,
    /// Log bytes handed to the writer since the last snapshot was taken.
    pub logged: u64,
    pub stats: StorageStats,
}

impl Node {
    fn fresh(shard: u32, part: Partitioning, clock: &ManualClock, config: StorageConfig) -> Node {
        let mut engine = new_engine_with(shard, part, clock, config.retention_ms);
        engine.recovered(0, 1);
        Node {
            engine,
            disk: Vec::new(),
            disk_first: 1,
            sealed: Vec::new(),
            segment_bytes: config.segment_bytes,
            writing: None,
            records: Vec::new(),
            payloads: Vec::new(),
            facts: HashMap::new(),
            commit_ms: Vec::new(),
            archived: Vec::new(),
            archived_ids: HashMap::new(),
            generations: HashMap::new(),
            forgotten_generations: HashMap::new(),
            forgotten_before: 0,
            forgotten: 0,
            retention_ms: config.retention_ms,
            wake: None,
            continues: 0,
            snaps: Vec::new(),
            job: None,
            unlinked: Vec::new(),
            logged: 0,
            stats: StorageStats::default(),
        }
    }

    pub fn fact(&self, f: &str) -> u64 {
        self.facts.get(f).copied().unwrap_or(0)
    }

    /// When record `lsn` was appended (the clock at the step that made it).
    pub fn committed_at(&self, lsn: u64) -> u64 {
        let at = self.commit_ms.partition_point(|c| c.0 <= lsn);
        at.checked_sub(1)
            .map(|i| self.commit_ms[i].1)
            .unwrap_or_else(|| panic!("shard {}: record {lsn} was never appended", self.shard()))
    }

    pub fn shard(&self) -> u32 {
        self.engine.shard()
    }

    /// The durable archive record of run `run_id` of `kind`, and whether a durable
    /// `RunsForgotten` forgot it since.
    pub fn archive_of(&self, kind: RunKind, run_id: &str) -> Option<(u64, bool)> {
        let lsn = *self.archived_ids.get(&(kind as u8, run_id.to_string()))?;
        Some((lsn, lsn < self.forgotten_before))
    }

    /// Whether the latest run with id `run_id` of `kind` was archived and then forgotten,
    /// durably.
    pub fn forgot(&self, kind: RunKind, run_id: &str) -> bool {
        let generation = self.generation(kind, run_id);
        generation > 0 && self.forgotten_generation(kind, run_id) == generation
    }

    /// The latest of the runs with this id that a durable record forgot (0: none).
    pub fn forgotten_generation(&self, kind: RunKind, run_id: &str) -> u32 {
        let key = (kind as u8, run_id.to_string());
        self.forgotten_generations.get(&key).copied().unwrap_or(0)
    }

    /// How many runs with this id the durable log created.
    pub fn generation(&self, kind: RunKind, run_id: &str) -> u32 {
        let key = (kind as u8, run_id.to_string());
        self.generations.get(&key).copied().unwrap_or(0)
    }

    /// A run created with an id an earlier run had: only once that run was forgotten.
    /// Facts about the earlier run no longer count.
    fn note_creation(&mut self, lsn: u64, record: &Record) {
        let (kind, run_id) = match record {
            Record::RunCreated { run_id, .. } => (RunKind::Action, run_id),
            Record::WfRunStarted { run_id, .. } => (RunKind::Workflow, run_id),
            _ => return,
        };
        let key = (kind as u8, run_id.clone());
        if self.generations.contains_key(&key) {
            assert!(
                self.forgot(kind, run_id),
                "shard {}: run {run_id} created again at LSN {lsn}, its earlier run not \
                 forgotten (archived at {:?})",
                self.shard(),
                self.archive_of(kind, run_id)
            );
            self.facts
                .retain(|f, _| fact_subject(f) != Some((kind, run_id.as_str())));
            self.archived_ids.remove(&key);
        }
        *self.generations.entry(key).or_insert(0) += 1;
    }

    fn absorb(&mut self, payloads: Vec<(u64, Vec<u8>)>) -> Vec<Record> {
        let mut added = Vec::new();
        for (lsn, payload) in payloads {
            let record = Record::decode(&payload)
                .unwrap_or_else(|e| panic!("durable record {lsn} does not decode: {e}"));
            assert_eq!(
                lsn,
                self.payloads.len() as u64 + 1,
                "shard {}: the durable records go on from LSN 1 without a gap",
                self.shard()
            );
            self.note_creation(lsn, &record);
            facts_of(&record, &mut self.facts);
            self.note_retention(lsn, &record);
            self.records.push((lsn, record.clone()));
            self.payloads.push((lsn, payload));
            added.push(record);
        }
        added
    }

    /// Follows archive and forget records; a run is forgotten only once its retention
    /// window has passed (when the forget record was made).
    fn note_retention(&mut self, lsn: u64, record: &Record) {
        match record {
            Record::RunArchived { run, .. } => {
                let id = (run.kind() as u8, run.id().1.to_string());
                self.archived_ids.insert(id.clone(), lsn);
                self.archived.push(Archived {
                    lsn,
                    finished_ms: run.finished_at_ms(),
                    generation: self.generations.get(&id).copied().unwrap_or(0),
                    id,
                });
            }
            Record::RunsForgotten { before_lsn } => {
                let at = self.committed_at(lsn);
                let end = self.archived.partition_point(|a| a.lsn < *before_lsn);
                for a in &self.archived[self.forgotten.min(end)..end] {
                    assert!(
                        a.finished_ms + self.retention_ms <= at,
                        "shard {}: RunsForgotten {{ before_lsn: {before_lsn} }} at LSN {lsn}, \
                         made at {at} ms, forgets the run archived at {}, which finished at \
                         {} ms: within its retention window ({} ms)",
                        self.shard(),
                        a.lsn,
                        a.finished_ms,
                        self.retention_ms
                    );
                    self.forgotten_generations
                        .insert(a.id.clone(), a.generation);
                }
                self.forgotten = self.forgotten.max(end);
                self.forgotten_before = self.forgotten_before.max(*before_lsn);
            }
            _ => {}
        }
    }
}

pub fn new_engine(shard: u32, part: Partitioning, clock: &ManualClock) -> Engine {
    new_engine_with(
        shard,
        part,
        clock,
        flo_engine::testing::RETENTION_MS_DEFAULT,
    )
}

pub fn new_engine_with(
    shard: u32,
    part: Partitioning,
    clock: &ManualClock,
    retention_ms: u64,
) -> Engine {
    // Tables iterate in the same order in every run: a seed replays exactly.
    flo_engine::testing::fix_table_seeds();
    Engine::new(
        EngineConfig {
            shard,
            partitioning: part,
            durability: Durability::Sync,
            retention_ms,
            // The simulated clock jumps while messages are in flight: no timeouts.
            peer_timeout_ms: u64::MAX,
            quotas: Default::default(),
            limits: Default::default(),
        },
        Box::new(clock.clone()),
        Box::new(clock.clone()),
    )
}

/// A fresh engine that replayed `payloads` (what recovery would rebuild).
pub fn replayed(
    shard: u32,
    part: Partitioning,
    clock: &ManualClock,
    retention_ms: u64,
    payloads: &[(u64, Vec<u8>)],
) -> Engine {
    let mut engine = new_engine_with(shard, part, clock, retention_ms);
    for (lsn, payload) in payloads {
        engine
            .replay(*lsn, payload)
            .unwrap_or_else(|e| panic!("replay of record {lsn}: {e}"));
    }
    engine.recovered(payloads.last().map_or(0, |p| p.0), 1);
    engine
}

/// How a crashed shard came back.
#[derive(Debug)]
pub struct Recovered {
    pub shard: u32,
    pub durable_before: u64,
    pub last_lsn: u64,
    /// The snapshot it started from (0: none).
    pub snapshot: u64,
    /// Damaged snapshots passed over before it.
    pub passed_over: usize,
    /// First LSNs of the segments the crash left.
    pub segments: Vec<u64>,
}

/// `engine`'s fold has the `live` digest; else the lines that differ.
pub fn assert_same_fold(live: &[String], engine: &Engine, what: &str) {
    let other = engine.state().digest();
    if live != other.as_slice() {
        let only_live: Vec<&String> = live.iter().filter(|l| !other.contains(l)).collect();
        let only_other: Vec<&String> = other.iter().filter(|l| !live.contains(l)).collect();
        panic!("{what} differs from live\nlive only: {only_live:#?}\n{what} only: {only_other:#?}");
    }
}

pub struct Cluster {
    pub clock: ManualClock,
    pub part: Partitioning,
    pub storage: StorageConfig,
    pub nodes: Vec<Node>,
    /// In-flight peer messages, FIFO per ordered pair (from, to).
    pub links: BTreeMap<(u32, u32), VecDeque<PeerMsg>>,
    /// Client replies released: (shard, to, result), in release order.
    pub replies: Vec<(u32, ClientRef, ReplyResult)>,
    pub executions: Vec<(u32, Execution)>,
    /// Executions the engine asked to stop: (shard, exec). Their `Executed` still comes
    /// from whoever answers `executions`.
    pub stops: Vec<(u32, u64)>,
    pub compiles: Vec<(u32, u64)>,
    pub guest_values: Vec<GuestValue>,
    pub logs: Vec<String>,
    /// Reads of the log asked for: (shard, token, LSN).
    pub log_reads: Vec<(u32, u64, u64)>,
    /// Webhook attempts the shards asked for, not yet answered.
    pub deliveries: Vec<(u32, flo_engine::WebhookCall)>,
    /// `settle` writes every batch at once (unit tests); the simulation writes by hand.
    pub auto_write: bool,
    /// Number of inputs fed so far.
    pub steps: u64,
    /// Reads of the log that found their record deleted.
    pub reads_missed: u64,
    /// Media faults recovery refused (`CrashPlan::flip_acked`).
    pub media_faults: u64,
}

impl Cluster {
    /// `shards` fresh shards at `start_ms`, each told `Started`.
    pub fn new(shards: u32, start_ms: u64) -> Cluster {
        Cluster::with_storage(shards, start_ms, StorageConfig::default())
    }

    /// `new`, keeping files and finished runs as `storage` says.
    pub fn with_storage(shards: u32, start_ms: u64, storage: StorageConfig) -> Cluster {
        let clock = ManualClock::new(start_ms);
        let part = Partitioning::new(PARTITIONS_DEFAULT, shards);
        let nodes = (0..shards)
            .map(|s| Node::fresh(s, part, &clock, storage))
            .collect();
        let mut c = Cluster {
            clock,
            part,
            storage,
            nodes,
            links: BTreeMap::new(),
            replies: Vec::new(),
            executions: Vec::new(),
            stops: Vec::new(),
            compiles: Vec::new(),
            guest_values: Vec::new(),
            logs: Vec::new(),
            log_reads: Vec::new(),
            deliveries: Vec::new(),
            auto_write: true,
            steps: 0,
            reads_missed: 0,
            media_faults: 0,
        };
        for s in 0..shards {
            c.step(s, Input::Started);
        }
        c
    }

    pub fn shards(&self) -> u32 {
        self.nodes.len() as u32
    }

    pub fn now(&self) -> u64 {
        use flo_engine::clock::Clock;
        self.clock.now_ms()
    }

    pub fn advance(&self, ms: u64) {
        use flo_engine::clock::Clock;
        self.clock.advance(ms);
    }

    pub fn owner(&self, namespace: &str, key: &str) -> u32 {
        self.part.shard_of(namespace, key)
    }

    pub fn partitioning(&self) -> Partitioning {
        self.part
    }

    pub fn engine(&self, shard: u32) -> &Engine {
        &self.nodes[shard as usize].engine
    }

    /// Feeds one input to one shard and collects what it released.
    pub fn step(&mut self, shard: u32, input: Input) {
        self.steps += 1;
        let mut effects = Vec::new();
        let node = &mut self.nodes[shard as usize];
        if matches!(input, Input::Tick) {
            node.wake = None;
        }
        let last = node.engine.last_lsn();
        node.engine.step(input, &mut effects);
        if node.engine.last_lsn() > last {
            let now = {
                use flo_engine::clock::Clock;
                self.clock.now_ms()
            };
            node.commit_ms.push((last + 1, now));
        }
        for effect in effects {
            match effect {
                Effect::Reply { to, result } => self.replies.push((shard, to, *result)),
                Effect::Send { shard: to, msg } => {
                    assert_ne!(to, shard, "shard {shard} sent a message to itself");
                    assert!(
                        to < self.shards(),
                        "shard {shard} sent to unknown shard {to}"
                    );
                    self.links.entry((shard, to)).or_default().push_back(*msg);
                }
                Effect::Execute(x) => self.executions.push((shard, *x)),
                Effect::StopExecution { exec } => self.stops.push((shard, exec)),
                Effect::Compile { job, .. } => self.compiles.push((shard, job)),
                Effect::GuestValue { exec, read, value } => {
                    self.guest_values.push((shard, exec, read, value))
                }
                Effect::WakeAt { wall_ms } => {
                    let node = &mut self.nodes[shard as usize];
                    node.wake = Some(node.wake.map_or(wall_ms, |w| w.min(wall_ms)));
                }
                Effect::Continue => self.nodes[shard as usize].continues += 1,
                Effect::Log(line) => self
                    .logs
                    .push(format!("shard {shard}: {:?} {}", line.level, line.text)),
                Effect::ReadLog { token, lsn } => self.log_reads.push((shard, token, lsn)),
                Effect::Deliver(call) => {
                    let durable = self.nodes[shard as usize].engine.durable_lsn();
                    assert!(
                        call.id >> 3 <= durable,
                        "shard {shard}: webhook {} sent before its event's record {} was \
                         durable ({durable})",
                        call.delivery_id,
                        call.id >> 3
                    );
                    self.deliveries.push((shard, *call))
                }
            }
        }
        self.take_batch(shard);
    }

    /// Answers the `i`th read of the log asked for, from the shard's segment files: only
    /// durable records may be read, so the record must be there — unless its run was
    /// forgotten since the read was asked and its segment deleted (the runtime answers with
    /// the error, as here).
    pub fn answer_read(&mut self, i: usize) {
        let (shard, token, lsn) = self.log_reads.remove(i);
        let node = &self.nodes[shard as usize];
        let result = node.read_record(lsn).and_then(|payload| {
            let refs = flo_engine::archived_refs(&payload);
            let records = refs
                .into_iter()
                .map(|at| node.read_record(at).map(|p| (at, p)))
                .collect::<Result<Vec<_>, String>>()?;
            flo_engine::fill_archived(&payload, &records)
        });
        if let Err(e) = &result {
            let retained = node.engine.retained_from_lsn();
            assert!(
                retained.is_none_or(|r| lsn < r),
                "shard {shard}: read of record {lsn} (durable up to {}, retained runs from \
                 {retained:?}, segments {:?}): {e}",
                node.engine.durable_lsn(),
                node.segment_firsts()
            );
            self.reads_missed += 1;
        }
        self.step(shard, Input::LogRead { token, result });
    }

    /// Hands the shard's appended records to its writer if the writer is idle.
    fn take_batch(&mut self, shard: u32) {
        let node = &mut self.nodes[shard as usize];
        if node.writing.is_none() && node.engine.pending_log_bytes() > 0 {
            node.writing = node.engine.take_batch(Vec::new());
            if let Some(batch) = &node.writing {
                node.logged += align_up(batch.bytes.len() as u64);
            }
        }
    }

    /// The writer finished the batch it holds: its bytes are on disk, then the shard hears
    /// they are durable. Returns the records written.
    pub fn complete_write(&mut self, shard: u32) -> Vec<Record> {
        let node = &mut self.nodes[shard as usize];
        let Some(batch) = node.writing.take() else {
            return Vec::new();
        };
        if node.rolls(batch.bytes.len()) {
            node.roll(batch.first_lsn);
            node.stats.rolls += 1;
        }
        if node.disk.is_empty() {
            assert_eq!(
                node.disk_first, batch.first_lsn,
                "a segment's name is its first LSN"
            );
        }
        assert_eq!(
            node.disk.len() % BLOCK,
            0,
            "a batch starts on a block boundary"
        );
        let start = node.disk.len();
        node.disk.extend_from_slice(&batch.bytes);
        node.disk
            .resize(align_up(node.disk.len() as u64) as usize, 0);
        let parsed = parse_log(&node.disk[start..]);
        assert_eq!(
            parsed.first().map(|p| p.0),
            Some(batch.first_lsn),
            "batch first LSN"
        );
        assert_eq!(
            parsed.last().map(|p| p.0),
            Some(batch.last_lsn),
            "batch last LSN"
        );
        if let Some((lsn, _)) = node.payloads.last() {
            assert_eq!(batch.first_lsn, lsn + 1, "shard {shard}: batch after {lsn}");
        }
        let added = node.absorb(parsed);
        let segments = node.segment_count();
        self.step(
            shard,
            Input::Durable {
                lsn: batch.last_lsn,
                segments,
            },
        );
        added
    }

    /// Delivers the oldest message from `from` to `to`.
    pub fn deliver(&mut self, from: u32, to: u32) -> bool {
        let Some(msg) = self
            .links
            .get_mut(&(from, to))
            .and_then(VecDeque::pop_front)
        else {
            return false;
        };
        self.step(
            to,
            Input::Peer {
                from,
                msg: Box::new(msg),
            },
        );
        true
    }

    /// Sends a client request to `shard`.
    pub fn client(&mut self, shard: u32, conn: u64, request: u64, op: flo_protocol::Op) {
        self.step(
            shard,
            Input::Client {
                from: ClientRef { conn, request },
                op,
            },
        );
    }

    /// The reply to (conn, request), if released (taken out of `replies`).
    pub fn take_reply(&mut self, conn: u64, request: u64) -> Option<ReplyResult> {
        let at = self
            .replies
            .iter()
            .position(|(_, to, _)| to.conn == conn && to.request == request)?;
        Some(self.replies.remove(at).2)
    }

    /// Feeds ticks to shards whose wake-up time has come.
    pub fn fire_wakes(&mut self) -> bool {
        let now = self.now();
        let mut any = false;
        for s in 0..self.shards() {
            if self.nodes[s as usize].wake.is_some_and(|w| w <= now) {
                self.step(s, Input::Tick);
                any = true;
            }
        }
        any
    }

    /// Runs until nothing moves: messages delivered, batches written (with `auto_write`),
    /// continues fed, due wake-ups fired, `Idle` fed to every shard. Executions, compiles
    /// and client replies are left for the caller.
    pub fn settle(&mut self) {
        for _ in 0..1_000_000 {
            if !self.settle_round() {
                return;
            }
        }
        panic!("the cluster did not settle (a livelock?)");
    }

    fn settle_round(&mut self) -> bool {
        let mut moved = false;
        let pairs: Vec<(u32, u32)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        for (from, to) in pairs {
            while self.deliver(from, to) {
                moved = true;
            }
        }
        while !self.log_reads.is_empty() {
            self.answer_read(0);
            moved = true;
        }
        for s in 0..self.shards() {
            if self.nodes[s as usize].continues > 0 {
                self.nodes[s as usize].continues -= 1;
                self.step(s, Input::Continue);
                moved = true;
            }
            if self.auto_write && self.nodes[s as usize].writing.is_some() {
                self.complete_write(s);
                moved = true;
            }
        }
        moved |= self.fire_wakes();
        if !moved {
            // The runtime feeds Idle whenever its inbox runs dry.
            for s in 0..self.shards() {
                let before = (
                    self.progress_marker(),
                    self.nodes[s as usize].writing.is_some(),
                );
                self.step(s, Input::Idle);
                if (
                    self.progress_marker(),
                    self.nodes[s as usize].writing.is_some(),
                ) != before
                {
                    moved = true;
                }
            }
        }
        moved
    }

    fn progress_marker(&self) -> (usize, usize, usize, usize, u32) {
        (
            self.links.values().map(VecDeque::len).sum(),
            self.replies.len(),
            self.executions.len(),
            self.guest_values.len(),
            self.nodes.iter().map(|n| n.continues).sum(),
        )
    }

    /// Crashes `shards`: what is not on their disk is lost (unreleased effects, messages
    /// to and from them, executions), then each recovers from its disk (plus `torn[i]`
    /// bytes of the batch being written, if any) with the real recovery, and is told
    /// `Started` only by `start`. Returns (shard, durable LSN before, recovered LSN).
    pub fn crash(&mut self, shards: &[u32], torn: &[usize]) -> Vec<(u32, u64, u64)> {
        let plans: Vec<CrashPlan> = (0..shards.len())
            .map(|i| CrashPlan {
                torn: torn.get(i).copied().unwrap_or(0),
                ..CrashPlan::default()
            })
            .collect();
        self.crash_planned(shards, &plans)
            .iter()
            .map(|r| (r.shard, r.durable_before, r.last_lsn))
            .collect()
    }

    /// `crash`, where `plans[i]` says what the crash leaves of shard `shards[i]`'s files
    /// (`storage::CrashPlan`). Each shard recovers as boot does: the newest snapshot that
    /// is not damaged (a damaged one passed over), then `flo_ual::recover_from` after it.
    /// Checked: recovery succeeds (no segment it needs was deleted), loses no durable
    /// record, reads back each record as it was written, keeps every retained run's archive
    /// record, and rebuilds the fold a replay of every durable record gives.
    pub fn crash_planned(&mut self, shards: &[u32], plans: &[CrashPlan]) -> Vec<Recovered> {
        let mut out = Vec::new();
        for (i, &s) in shards.iter().enumerate() {
            self.links.retain(|(a, b), _| *a != s && *b != s);
            self.executions.retain(|(x, _)| *x != s);
            self.log_reads.retain(|(x, _, _)| *x != s);
            self.deliveries.retain(|(x, _)| *x != s);
            self.compiles.retain(|(x, _)| *x != s);
            self.guest_values.retain(|(x, _, _, _)| *x != s);
            self.replies.retain(|(x, _, _)| *x != s);
            let plan = plans.get(i).cloned().unwrap_or_default();
            out.push(self.recover_node(s, &plan));
        }
        out
    }

    /// A media fault: one byte of the last durable (acknowledged) record flipped. Recovery
    /// must refuse (naming the records below the mark) and change nothing; then the file
    /// is restored, as an operator would from a copy, and recovery goes on.
    fn check_media_damage_refused(
        &mut self,
        s: u32,
        dir: &std::path::Path,
        files: &storage::CrashFiles,
        durable: u64,
    ) {
        // Recovery reads from the snapshot it would load (the newest undamaged one); a
        // record the snapshot holds is not read at start-up.
        let from = files.snaps.iter().find(|f| !f.damaged).map_or(0, |f| f.lsn);
        if durable <= from {
            return;
        }
        let Some((seg, at)) = files
            .segments
            .iter()
            .find_map(|seg| record_offset(&seg.bytes, durable).map(|at| (seg, at)))
        else {
            return;
        };
        let path = dir.join(segment_file_name(seg.first_lsn));
        let mut damaged = seg.bytes.clone();
        damaged[at + HEADER] ^= 0x20;
        std::fs::write(&path, &damaged).expect("write the damaged segment");
        match flo_ual::recover_from(dir, from, |_, _, _| Ok::<(), flo_ual::ApplyError>(())) {
            Err(flo_ual::RecoveryError::AckedDamaged { to, .. }) => {
                assert_eq!(
                    to, durable,
                    "shard {s}: the refusal names the records to the mark"
                )
            }
            // A batch written after the damaged record (the one being written when the
            // crash struck, in part) makes it mid-log damage: refused as well.
            Err(flo_ual::RecoveryError::Corruption { .. }) => {}
            other => panic!(
                "shard {s}: a flipped byte in record {durable} (acknowledged) was not \
                 refused: {other:?}"
            ),
        }
        assert!(
            std::fs::read(&path).expect("read back") == damaged,
            "shard {s}: a refused recovery changed the segment"
        );
        std::fs::write(&path, &seg.bytes).expect("restore the segment");
        self.media_faults += 1;
    }

    /// A media fault: a segment recovery reads, neither its first nor its last, is gone.
    /// Recovery must refuse (naming the gap) and delete nothing; then the file is put back.
    fn check_missing_segment_refused(
        &mut self,
        s: u32,
        dir: &std::path::Path,
        files: &storage::CrashFiles,
    ) {
        let from = files.snaps.iter().find(|f| !f.damaged).map_or(0, |f| f.lsn);
        // The segments recovery reads: from the one holding `from + 1` on.
        let start = files
            .segments
            .partition_point(|seg| seg.first_lsn <= from + 1)
            .saturating_sub(1);
        let read = &files.segments[start.min(files.segments.len())..];
        if read.len() < 3 {
            return;
        }
        let gone = &read[read.len() / 2];
        let path = dir.join(segment_file_name(gone.first_lsn));
        std::fs::remove_file(&path).expect("remove a segment");
        let before: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        match flo_ual::recover_from(dir, from, |_, _, _| Ok::<(), flo_ual::ApplyError>(())) {
            Err(flo_ual::RecoveryError::Gap { found, .. }) => {
                assert!(
                    found > gone.first_lsn,
                    "shard {s}: the gap is after the missing segment"
                )
            }
            other => panic!(
                "shard {s}: segment {} missing from the middle of the log was not refused: \
                 {other:?}",
                gone.first_lsn
            ),
        }
        let after: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            before, after,
            "shard {s}: a refused recovery changed the files"
        );
        std::fs::write(&path, &gone.bytes).expect("put the segment back");
        self.media_faults += 1;
    }

    fn recover_node(&mut self, s: u32, plan: &CrashPlan) -> Recovered {
        let node = &self.nodes[s as usize];
        let before = node.engine.durable_lsn();
        let files = node.files_after_crash(plan);
        let dir = tempfile::tempdir().expect("temp dir");
        for seg in &files.segments {
            std::fs::write(
                dir.path().join(segment_file_name(seg.first_lsn)),
                &seg.bytes,
            )
            .expect("write segment");
        }
        // The mark follows the syncs: here at its furthest, every durable record.
        write_acked_mark(dir.path(), before);
        if plan.flip_acked {
            self.check_media_damage_refused(s, dir.path(), &files, before);
        }
        if plan.drop_segment {
            self.check_missing_segment_refused(s, dir.path(), &files);
        }
        let firsts: Vec<u64> = files.segments.iter().map(|f| f.first_lsn).collect();
        let snaps: Vec<(u64, bool)> = files.snaps.iter().map(|f| (f.lsn, f.damaged)).collect();
        let mut engine = new_engine_with(s, self.part, &self.clock, self.storage.retention_ms);
        let snapshot = files.snaps.iter().find(|f| !f.damaged);
        let from = match snapshot {
            Some(f) => {
                let at = engine
                    .restore(&f.image)
                    .unwrap_or_else(|e| panic!("shard {s}: snapshot at {}: {e}", f.lsn));
                assert_eq!(at, f.lsn, "shard {s}: snapshot LSN");
                at
            }
            None => 0,
        };
        let mut applied: Vec<(u64, Vec<u8>)> = Vec::new();
        let log = flo_ual::recover_from(dir.path(), from, |lsn, _rtype, payload| {
            applied.push((lsn, payload.to_vec()));
            engine.replay(lsn, payload)
        })
        .unwrap_or_else(|e| {
            panic!(
                "shard {s}: recovery from snapshot {from} failed: {e}\n(snapshots on disk \
                 (LSN, damaged) {snaps:?}, segments {firsts:?}, durable up to {before})"
            )
        });
        assert!(
            log.last_lsn >= before,
            "shard {s}: recovery lost durable records ({} < {before})",
            log.last_lsn
        );
        // Boot refuses a log whose first segment starts after a retained run's record.
        if let Some(retained) = engine.retained_from_lsn() {
            assert!(
                log.segments
                    .first()
                    .is_some_and(|f| f.first_lsn <= retained),
                "shard {s}: runs are retained from LSN {retained}, the segments start at \
                 {firsts:?} (snapshot {from}, snapshots {snaps:?})"
            );
        }
        engine.recovered(log.last_lsn, log.segments.len().max(1) as u32);

        let node = &mut self.nodes[s as usize];
        for (lsn, payload) in &applied {
            if let Some((l, p)) = node.payloads.get(*lsn as usize - 1) {
                assert_eq!(l, lsn, "shard {s}: durable records by LSN");
                assert!(p == payload, "shard {s}: record {lsn} reads back changed");
            }
        }
        let known = node.payloads.len() as u64;
        let extra: Vec<(u64, Vec<u8>)> = applied.into_iter().filter(|a| a.0 > known).collect();
        node.absorb(extra);
        node.commit_ms.retain(|c| c.0 <= log.last_lsn);

        // The files recovery left (it may cut the last segment's torn tail).
        let mut sealed = Vec::new();
        let (mut disk_first, mut disk) = (log.last_lsn + 1, Vec::new());
        for (k, seg) in log.segments.iter().enumerate() {
            let bytes = std::fs::read(&seg.path).unwrap_or_default();
            if k + 1 < log.segments.len() {
                sealed.push(Segment::new(seg.first_lsn, bytes));
                continue;
            }
            let end = (log.tail_end as usize).min(bytes.len());
            disk = bytes[..end].to_vec();
            disk.resize(align_up(end as u64) as usize, 0);
            disk_first = seg.first_lsn;
        }
        assert_eq!(
            parse_log(&disk).last().map_or(disk_first - 1, |p| p.0),
            log.last_lsn,
            "shard {s}: image and recovery disagree"
        );
        node.engine = engine;
        node.disk = disk;
        node.disk_first = disk_first;
        node.sealed = sealed;
        node.writing = None;
        node.wake = None;
        node.continues = 0;
        // Boot sets aside the damaged snapshots it passed over (`load_snapshot`).
        let passed_over = snaps.iter().take_while(|f| f.1).count();
        node.snaps = files.snaps[passed_over..].to_vec();
        node.job = None;
        node.unlinked.clear();
        node.logged = 0;

        let full = replayed(
            s,
            self.part,
            &self.clock,
            self.storage.retention_ms,
            &node.payloads,
        );
        assert_same_fold(
            &full.state().digest(),
            &node.engine,
            &format!("shard {s}: recovery from snapshot {from} + log"),
        );
        Recovered {
            shard: s,
            durable_before: before,
            last_lsn: log.last_lsn,
            snapshot: from,
            passed_over,
            segments: firsts,
        }
    }

    /// Tells a recovered shard it is up.
    pub fn start(&mut self, shard: u32) {
        self.step(shard, Input::Started);
    }

    /// Crashes every shard, recovers them, starts them.
    pub fn restart_all(&mut self) {
        let all: Vec<u32> = (0..self.shards()).collect();
        self.crash(&all, &[]);
        for s in all {
            self.start(s);
        }
    }
}
