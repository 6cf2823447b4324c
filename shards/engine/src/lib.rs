//! flo's shard engine: a pure state machine per shard. Inputs in (`Input`), effects out
//! (`Effect`); state changes only through the commit path (`core::Core::commit`: append →
//! apply → observe). No async runtime, no I/O: the runtime crate performs the effects, the
//! simulation drives it without one.
//!
//! Floors, from the ground: the leaves (`bytes`, `clock`, `hash`, `ids`, `image`, `pages`,
//! `plan_book`, `run_query`, `shares`, `tables`, `line_budget`); `fold` (records, the state they fold into, the derived index:
//! below the commit path); `core` (the commit path, the durability gate, the agenda,
//! inputs and effects); the domains' handlers (`kv`, `actions`, `plans`, `workflows`,
//! `archive`, `workers`, `definitions`); `engine` (the step loop, routing, fan-outs). `auth` stands
//! apart: the policy the runtime asks before a request enters the shard.
//!
//! This file is the runtime's face: what it may name. Everything else is private to the
//! crate, so the runtime cannot build a record or reach the fold; the engine's own tests,
//! the simulation and the fuzz targets see more through `testing` (feature `test-support`).

mod actions;
mod archive;
pub mod auth;
mod bytes;
pub mod clock;
mod core;
mod definitions;
mod engine;
mod fold;
pub mod hash;
mod ids;
pub mod image;
mod kv;
pub mod line_budget;
mod pages;
mod plan_book;
mod plans;
mod run_query;
mod schedules;
mod shares;
mod streams;
mod tables;
mod webhooks;
mod workers;
mod workflows;

pub use crate::actions::WASM_SLOTS;
pub use crate::archive::{archived_refs, fill_archived};
pub use crate::core::io::{
    ClientRef, ConnId, DiskSpace, Effect, ExecFailure, ExecResult, Execution, Input, LogLevel,
    LogLine, LogSource, PeerMsg, ReplyResult, StorageInfo, WebhookCall,
};
pub use crate::core::{
    Counts, Durability, Limits, RUN_STEPS_MAX_DEFAULT, SLOT_WAIT_BOUNDS_MS, WASM_SLOTS_DEFAULT,
    WASM_SLOTS_MAX,
};
pub use crate::engine::{
    Engine, EngineConfig, FINAL_STATUSES, Gauges, GroupDepth, InFlight, LIVE_STATUSES,
    PEER_TIMEOUT_MS_DEFAULT, RUN_KINDS, RUN_LATENCY_BOUNDS_MS, RUN_NAMES_MAX, RUNS_CENSUS_MAX,
    RunsEnded, STREAM_GROUPS_MAX,
};
pub use crate::fold::record::DecodeError;
pub use crate::fold::registry::MEMORY_LIMIT_MB_MAX;
pub use crate::fold::snapshot::{SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_READ_MIN, SnapshotError};
/// Whether a panic on this thread is one a step filter catches (see `fail_stop_on_panic`).
pub use flo_workflow::filter::panic_contained;

/// The engine's insides that its own tests, the simulation and the fuzz targets check
/// against: records, the fold, bounds. Never for the runtime.
#[cfg(feature = "test-support")]
pub mod testing {
    pub use crate::archive::RETENTION_MS_DEFAULT;
    pub use crate::core::io::PeerRequest;
    pub use crate::engine::{EXPIRY_SWEEP_KEYS_MAX, LOG_BACKLOG_BYTES_MAX};
    pub use crate::fold::archive::RunKind;
    pub use crate::fold::cursor::RunPhase;
    pub use crate::fold::state::ShardState;
    pub use crate::fold::{archived, record, schedules, streams};
    pub use crate::kv::KV_WAITS_MAX;
    pub use crate::tables::fix_table_seeds;
    pub use crate::workers::AWAITS_PER_WORKER_MAX;
    pub use crate::workflows::SIGNALS_QUEUED_MAX;
}
