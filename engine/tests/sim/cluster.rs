//! A cluster of engines driven by hand: no sockets, no glommio. Each shard has a simulated
//! disk (the bytes of one segment file, laid out as the real writer lays them out: every
//! batch on a block boundary, zero-padded), at most one batch being written at a time, a
//! FIFO link to every other shard, and the effects it released collected for the caller.
//! Shared by the simulation (`sim.rs`) and the unit tests (`engine_units.rs`).

#![allow(dead_code)]

use flo_engine::clock::ManualClock;
use flo_engine::hash::{PARTITIONS_DEFAULT, Partitioning};
use flo_engine::record::Record;
use flo_engine::{
    ClientRef, Durability, Effect, Engine, EngineConfig, Execution, Input, PeerMsg, ReplyResult,
};
use flo_ual::{Batch, align_up, segment_file_name};
use std::collections::{BTreeMap, HashMap, VecDeque};

pub const BLOCK: usize = 4096;
pub const HEADER: usize = 20;

/// The records of a clean log image: (LSN, payload). Panics on a gap in LSNs.
pub fn parse_log(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
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
        if let Some((prev, _)) = out.last() {
            assert_eq!(lsn, prev + 1, "log image: LSN {lsn} follows {prev}");
        }
        out.push((lsn, bytes[pos + HEADER..pos + HEADER + len].to_vec()));
        pos += HEADER + len;
    }
    out
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
            namespace, run_id, ..
        } => add(format!("wfrun {namespace}/{run_id}")),
        Record::WfStepFinished {
            namespace,
            run_id,
            next: flo_engine::record::StepNext::End { .. },
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
        _ => {}
    }
}

pub struct Node {
    pub engine: Engine,
    /// The segment file: what was written (each batch padded to the block size).
    pub disk: Vec<u8>,
    /// The batch the writer holds (written and acknowledged by `complete_write`).
    pub writing: Option<Batch>,
    /// The durable records, decoded.
    pub records: Vec<(u64, Record)>,
    pub payloads: Vec<(u64, Vec<u8>)>,
    pub facts: HashMap<String, u64>,
    /// Earliest `WakeAt` asked since the last tick.
    pub wake: Option<u64>,
    /// `Effect::Continue`s not yet fed back.
    pub continues: u32,
    /// The installed snapshot (LSN, image): recovery starts from it.
    pub snap: Option<(u64, Vec<u8>)>,
    /// A snapshot being written: a crash may find it installed (renamed, directory not
    /// synced yet) or not (the recovery then uses `snap`).
    pub snap_pending: Option<(u64, Vec<u8>)>,
}

impl Node {
    fn fresh(shard: u32, part: Partitioning, clock: &ManualClock) -> Node {
        let mut engine = new_engine(shard, part, clock);
        engine.recovered(0, 1);
        Node {
            engine,
            disk: Vec::new(),
            writing: None,
            records: Vec::new(),
            payloads: Vec::new(),
            facts: HashMap::new(),
            wake: None,
            continues: 0,
            snap: None,
            snap_pending: None,
        }
    }

    pub fn fact(&self, f: &str) -> u64 {
        self.facts.get(f).copied().unwrap_or(0)
    }

    fn absorb(&mut self, payloads: Vec<(u64, Vec<u8>)>) -> Vec<Record> {
        let mut added = Vec::new();
        for (lsn, payload) in payloads {
            let record = Record::decode(&payload)
                .unwrap_or_else(|e| panic!("durable record {lsn} does not decode: {e}"));
            facts_of(&record, &mut self.facts);
            self.records.push((lsn, record.clone()));
            self.payloads.push((lsn, payload));
            added.push(record);
        }
        added
    }
}

pub fn new_engine(shard: u32, part: Partitioning, clock: &ManualClock) -> Engine {
    // Tables iterate in the same order in every run: a seed replays exactly.
    flo_engine::tables::fix_table_seeds();
    Engine::new(
        EngineConfig {
            shard,
            partitioning: part,
            durability: Durability::Sync,
            retention_ms: flo_engine::archive::RETENTION_MS_DEFAULT,
            // The simulated clock jumps while messages are in flight: no timeouts.
            peer_timeout_ms: u64::MAX,
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
    payloads: &[(u64, Vec<u8>)],
) -> Engine {
    let mut engine = new_engine(shard, part, clock);
    for (lsn, payload) in payloads {
        engine
            .replay(*lsn, payload)
            .unwrap_or_else(|e| panic!("replay of record {lsn}: {e}"));
    }
    engine.recovered(payloads.last().map_or(0, |p| p.0), 1);
    engine
}

pub struct Cluster {
    pub clock: ManualClock,
    pub part: Partitioning,
    pub nodes: Vec<Node>,
    /// In-flight peer messages, FIFO per ordered pair (from, to).
    pub links: BTreeMap<(u32, u32), VecDeque<PeerMsg>>,
    /// Client replies released: (shard, to, result), in release order.
    pub replies: Vec<(u32, ClientRef, ReplyResult)>,
    pub executions: Vec<(u32, Execution)>,
    pub compiles: Vec<(u32, u64)>,
    pub guest_values: Vec<(u32, u64, u64, Option<Vec<u8>>)>,
    pub logs: Vec<String>,
    /// Reads of the log asked for: (shard, token, LSN).
    pub log_reads: Vec<(u32, u64, u64)>,
    /// `settle` writes every batch at once (unit tests); the simulation writes by hand.
    pub auto_write: bool,
    /// Number of inputs fed so far.
    pub steps: u64,
}

impl Cluster {
    /// `shards` fresh shards at `start_ms`, each told `Started`.
    pub fn new(shards: u32, start_ms: u64) -> Cluster {
        let clock = ManualClock::new(start_ms);
        let part = Partitioning::new(PARTITIONS_DEFAULT, shards);
        let nodes = (0..shards).map(|s| Node::fresh(s, part, &clock)).collect();
        let mut c = Cluster {
            clock,
            part,
            nodes,
            links: BTreeMap::new(),
            replies: Vec::new(),
            executions: Vec::new(),
            compiles: Vec::new(),
            guest_values: Vec::new(),
            logs: Vec::new(),
            log_reads: Vec::new(),
            auto_write: true,
            steps: 0,
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
        node.engine.step(input, &mut effects);
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
                Effect::Compile { job, .. } => self.compiles.push((shard, job)),
                Effect::GuestValue { exec, read, value } => {
                    self.guest_values.push((shard, exec, read, value))
                }
                Effect::WakeAt { wall_ms } => {
                    let node = &mut self.nodes[shard as usize];
                    node.wake = Some(node.wake.map_or(wall_ms, |w| w.min(wall_ms)));
                }
                Effect::Continue => self.nodes[shard as usize].continues += 1,
                Effect::Log(line) => self.logs.push(format!("shard {shard}: {line}")),
                Effect::ReadLog { token, lsn } => self.log_reads.push((shard, token, lsn)),
            }
        }
        self.take_batch(shard);
    }

    /// Answers the `i`th read of the log asked for, from the shard's disk: only durable
    /// records may be read, so the record must be there.
    pub fn answer_read(&mut self, i: usize) {
        let (shard, token, lsn) = self.log_reads.remove(i);
        let node = &self.nodes[shard as usize];
        let result = match flo_ual::find_record(&node.disk, 0, lsn, true) {
            flo_ual::Found::Record { payload, .. } => Ok(payload.to_vec()),
            other => panic!(
                "shard {shard}: read of record {lsn} (durable up to {}): {other:?}",
                node.engine.durable_lsn()
            ),
        };
        self.step(shard, Input::LogRead { token, result });
    }

    /// Hands the shard's appended records to its writer if the writer is idle.
    fn take_batch(&mut self, shard: u32) {
        let node = &mut self.nodes[shard as usize];
        if node.writing.is_none() && node.engine.pending_log_bytes() > 0 {
            node.writing = node.engine.take_batch(Vec::new());
        }
    }

    /// The writer finished the batch it holds: its bytes are on disk, then the shard hears
    /// they are durable. Returns the records written.
    pub fn complete_write(&mut self, shard: u32) -> Vec<Record> {
        let node = &mut self.nodes[shard as usize];
        let Some(batch) = node.writing.take() else {
            return Vec::new();
        };
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
        self.step(
            shard,
            Input::Durable {
                lsn: batch.last_lsn,
                segments: 1,
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
        self.crash_with(shards, torn, &vec![false; shards.len()])
    }

    /// `crash`, where `pending_installed[i]` says whether shard `i`'s snapshot being written
    /// (if any) made it (renamed before the crash) or not.
    pub fn crash_with(
        &mut self,
        shards: &[u32],
        torn: &[usize],
        pending_installed: &[bool],
    ) -> Vec<(u32, u64, u64)> {
        let mut out = Vec::new();
        for (i, &s) in shards.iter().enumerate() {
            self.links.retain(|(a, b), _| *a != s && *b != s);
            self.executions.retain(|(x, _)| *x != s);
            self.log_reads.retain(|(x, _, _)| *x != s);
            self.compiles.retain(|(x, _)| *x != s);
            self.guest_values.retain(|(x, _, _, _)| *x != s);
            self.replies.retain(|(x, _, _)| *x != s);
            let node = &mut self.nodes[s as usize];
            let before = node.engine.durable_lsn();
            let mut image = node.disk.clone();
            if let Some(batch) = node.writing.take() {
                let keep = torn.get(i).copied().unwrap_or(0).min(batch.bytes.len());
                image.extend_from_slice(&batch.bytes[..keep]);
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join(segment_file_name(1));
            std::fs::write(&path, &image).expect("write segment");
            let mut engine = new_engine(s, self.part, &self.clock);
            let pending = node.snap_pending.take();
            let snap = match pending {
                Some(p) if pending_installed.get(i).copied().unwrap_or(false) => Some(p),
                _ => node.snap.take(),
            };
            let from = match &snap {
                Some((lsn, image)) => {
                    let at = engine
                        .restore(image)
                        .unwrap_or_else(|e| panic!("shard {s}: snapshot at {lsn}: {e}"));
                    assert_eq!(at, *lsn, "shard {s}: snapshot LSN");
                    at
                }
                None => 0,
            };
            let log = flo_ual::recover(dir.path(), |lsn, _rtype, payload| {
                if lsn <= from {
                    return Ok(());
                }
                engine.replay(lsn, payload)
            })
            .unwrap_or_else(|e| panic!("shard {s}: recovery failed: {e}"));
            assert!(
                log.last_lsn >= from,
                "shard {s}: the log ends at {} before its snapshot {from}",
                log.last_lsn
            );
            engine.recovered(log.last_lsn, 1);
            assert!(
                log.last_lsn >= before,
                "shard {s}: recovery lost durable records ({} < {before})",
                log.last_lsn
            );
            let file = std::fs::read(&path).unwrap_or_default();
            let end = (log.tail_end as usize).min(file.len());
            let mut disk = file[..end].to_vec();
            disk.resize(align_up(end as u64) as usize, 0);
            let mut node = Node {
                engine,
                disk,
                writing: None,
                records: Vec::new(),
                payloads: Vec::new(),
                facts: HashMap::new(),
                wake: None,
                continues: 0,
                snap,
                snap_pending: None,
            };
            let parsed = parse_log(&node.disk);
            assert_eq!(
                parsed.last().map_or(0, |p| p.0),
                log.last_lsn,
                "shard {s}: image and recovery disagree"
            );
            node.absorb(parsed);
            self.nodes[s as usize] = node;
            out.push((s, before, log.last_lsn));
        }
        out
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
