//! The shard's engine: owns the fold, the derived index and the ephemeral state of every
//! domain, and turns each `Input` into `Effect`s (`Engine::step`). Synchronous, no I/O, no
//! async runtime: the runtime feeds it and performs what it asks; the simulation drives it
//! without either.

#[cfg(test)]
mod bounds;
mod clients;
mod execute;
mod fanout;
mod metrics;
mod peers;
mod routing;
mod run_waits;
mod step;
mod triggers;
mod watches;

pub use fanout::SERVER_VERSION;
pub use metrics::{
    FINAL_STATUSES, Gauges, GroupDepth, LIVE_STATUSES, RUN_KINDS, RUN_LATENCY_BOUNDS_MS,
    RUN_NAMES_MAX, RUNS_CENSUS_MAX, RunsEnded, STREAM_GROUPS_MAX,
};

use crate::actions::Executions;
use crate::auth::Quotas;
use crate::clock::Clock;
use crate::core::{Core, Durability, Limits};
use crate::definitions::Definitions;
use crate::fold::index::Index;
use crate::fold::record::{DecodeError, Record};
use crate::fold::snapshot::SnapshotError;
use crate::fold::state::ShardState;
use crate::hash::Partitioning;
use crate::kv::{Forwarder, KvWaits};
use crate::workers::{Awaits, WorkerRegistry};
use fanout::FanOuts;
use flo_ual::Batch;
use std::sync::Arc;
use watches::Watches;

/// How often expired keys are swept and worker health checked.
pub const HOUSEKEEPING_MS: u64 = 1000;
/// Log bytes appended but not yet handed to the disk beyond which client mutations answer
/// `overloaded` (the writer is stalled: memory would grow without bound).
pub const LOG_BACKLOG_BYTES_MAX: usize = 256 << 20;
/// Stream partitions trimmed by their age limit per sweep (once a second).
pub const STREAM_SWEEP_PARTITIONS_MAX: usize = 1000;
/// Expired keys deleted per sweep.
pub const EXPIRY_SWEEP_KEYS_MAX: usize = 1000;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub shard: u32,
    pub partitioning: Partitioning,
    pub durability: Durability,
    /// Finished runs are forgotten this long after they finished.
    pub retention_ms: u64,
    /// A client's operation waiting on another shard answers `unavailable` after this
    /// long without its answer.
    pub peer_timeout_ms: u64,
    /// The namespaces' quotas (from the auth file; empty: none).
    pub quotas: Arc<Quotas>,
    /// The operator's bounds: steps per workflow run, WebAssembly slots per shard.
    pub limits: Limits,
}

/// Default of `EngineConfig::peer_timeout_ms`.
pub const PEER_TIMEOUT_MS_DEFAULT: u64 = 30_000;

pub struct Engine {
    core: Core,
    /// Workers homed here (in memory: they register again after a restart).
    workers: WorkerRegistry,
    awaits: Awaits,
    watches: Watches,
    definitions: Definitions,
    fanouts: FanOuts,
    executions: Executions,
    /// Webhook attempts in flight.
    webhooks: crate::webhooks::Deliveries,
    forwarder: Forwarder,
    /// Blocking reads parked on keys this shard owns.
    kv_waits: KvWaits,
    /// Stream operations waiting for their partitions, and parked group reads.
    streams: crate::streams::Scatter,
    /// Stream triggers' deliveries and run starts in progress.
    triggers: triggers::Triggers,
    /// The schedules living here and their next ticks.
    tickers: crate::schedules::Tickers,
    reads: crate::archive::Reads,
    retention_ms: u64,
    peer_timeout_ms: u64,
    storage: crate::core::io::StorageInfo,
    /// The runtime's module cache as last reported, for status.
    module_cache: Option<flo_protocol::ModuleCacheInfo>,
    stopping: bool,
    next_housekeeping_ms: u64,
    /// The last expiry sweep stopped at its limit: more keys are due.
    expiry_backlog: bool,
    /// The wake-up last asked of the runtime (wall clock).
    wake_asked: Option<u64>,
    segments: u32,
    /// Runs that became final here since the process started (for metrics).
    runs_ended: RunsEnded,
}

impl Engine {
    /// An engine with an empty state; `replay` the log into it, then `recovered`.
    pub fn new(config: EngineConfig, clock: Box<dyn Clock>, wall: Box<dyn Clock>) -> Engine {
        let state = ShardState::new(config.shard, config.partitioning);
        let mut core = Core::new(state, config.durability, clock, wall);
        core.set_quotas(config.quotas);
        core.set_limits(config.limits);
        Engine {
            core,
            workers: WorkerRegistry::default(),
            awaits: Awaits::default(),
            watches: Watches::default(),
            definitions: Definitions::default(),
            fanouts: FanOuts::default(),
            executions: Executions::default(),
            webhooks: Default::default(),
            forwarder: Forwarder::default(),
            kv_waits: KvWaits::default(),
            streams: Default::default(),
            triggers: Default::default(),
            tickers: Default::default(),
            reads: Default::default(),
            retention_ms: config.retention_ms,
            peer_timeout_ms: config.peer_timeout_ms,
            storage: Default::default(),
            module_cache: None,
            stopping: false,
            next_housekeeping_ms: 0,
            expiry_backlog: false,
            wake_asked: None,
            segments: 1,
            runs_ended: RunsEnded::default(),
        }
    }

    /// Applies one record read back from the log (recovery).
    pub fn replay(&mut self, lsn: u64, payload: &[u8]) -> Result<(), DecodeError> {
        let record = Record::decode(payload)?;
        self.core.replay(lsn, record);
        Ok(())
    }

    /// Before replay: starts from a snapshot (`snapshot::encode`'s bytes) instead of an
    /// empty fold; the log is then replayed from the LSN it returns + 1.
    pub fn restore(&mut self, image: &[u8]) -> Result<u64, SnapshotError> {
        self.restore_with_progress(image, &mut |_| {})
    }

    /// `restore`, telling `progress` how many of the image's bytes are decoded, every few
    /// MiB (start-up reports it).
    pub fn restore_with_progress(
        &mut self,
        image: &[u8],
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, SnapshotError> {
        let state = crate::fold::snapshot::decode(
            image,
            self.core.shard(),
            self.core.partitioning(),
            progress,
        )?;
        let lsn = state.applied_lsn;
        self.core.restore(state);
        Ok(lsn)
    }

    /// The first LSN the log must keep for the runs this shard retains (their archive
    /// records are read back from it); None when it retains none.
    pub fn retained_from_lsn(&self) -> Option<u64> {
        self.core.state().archive.retained_from()
    }

    /// Whether the disk is full (the log writer said so): client mutations but deletes
    /// are refused, and the runtime snapshots to let segments go.
    pub fn read_only(&self) -> bool {
        self.core.disk() == crate::core::io::DiskSpace::Full
    }

    /// The fold as a snapshot image, and the LSN it stands at (the last record appended,
    /// which may not be durable yet: write the image only once it is).
    pub fn snapshot(&self) -> (u64, crate::image::Image) {
        let lsn = self.core.last_lsn();
        self.core.imaged_at(lsn);
        (lsn, crate::fold::snapshot::encode(self.core.state()))
    }

    /// Recovery is done: `last_lsn` is the last durable record, in `segments` files.
    pub fn recovered(&mut self, last_lsn: u64, segments: u32) {
        self.core.recovered(last_lsn);
        self.segments = segments;
    }

    /// The records appended since the last take, for the log writer.
    pub fn take_batch(&mut self, spare: Vec<u8>) -> Option<Batch> {
        self.core.take_batch(spare)
    }

    pub fn pending_log_bytes(&self) -> usize {
        self.core.pending_log_bytes()
    }

    /// Whether something waits for the records appended and not yet taken to be durable: a
    /// reply, a message to another shard, a task held by the durability gate, or a client
    /// that chose async durability (its records are written right behind its answer). When
    /// nothing does, the runtime may let the records wait a moment for the ones that follow
    /// (a workflow run's steps behind its start) and write them in one batch.
    pub fn wants_durable(&self) -> bool {
        self.core.waits_for_pending() || self.core.durability() == Durability::Async
    }

    pub fn shard(&self) -> u32 {
        self.core.shard()
    }

    pub fn partitioning(&self) -> Partitioning {
        self.core.partitioning()
    }

    pub fn last_lsn(&self) -> u64 {
        self.core.last_lsn()
    }

    pub fn durable_lsn(&self) -> u64 {
        self.core.durable_lsn()
    }

    /// The fold (for checks: simulation, tests).
    pub fn state(&self) -> &ShardState {
        self.core.state()
    }

    /// The derived index (for checks).
    pub fn index(&self) -> &Index {
        self.core.index()
    }

    /// Whether `step` of workflow run `run_id` waits for a WebAssembly slot or executes
    /// (for checks: such a step has no record yet, and its timer has fired).
    pub fn step_taken(&self, namespace: &str, run_id: &str, step: &str) -> bool {
        self.core.steps().is_taken(namespace, run_id, step)
    }

    /// Work or effects still waiting (for checks): calls in flight, held effects,
    /// executions, open awaits, waiting clients, parked reads.
    pub fn in_flight(&self) -> InFlight {
        InFlight {
            calls: self.core.calls_in_flight(),
            held: self.core.held_len(),
            executions: self.executions.len(),
            awaits: self.awaits.open_awaits(),
            watches: self.watches.len(),
            kv_waits: self.kv_waits.len(),
            stream_ops: self.streams.len() + self.triggers.len(),
            definitions_busy: self.definitions.busy(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub calls: usize,
    pub held: usize,
    pub executions: usize,
    pub awaits: usize,
    pub watches: usize,
    pub kv_waits: usize,
    pub stream_ops: usize,
    pub definitions_busy: bool,
}
