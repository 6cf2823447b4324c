//! flo's runtime: one pinned glommio executor per shard. Each runs a loop that owns the
//! shard's `Engine`, feeds it every input (client requests, peer messages, durable LSNs,
//! ticks, WebAssembly results) and performs the effects it returns. The runtime decides
//! nothing durable and builds no record: that is the engine's.

mod boot;
mod config;
mod console;
mod fault_disk;
mod fd_limit;
mod inbox;
mod kick;
mod listener;
mod log_reader;
mod log_writer;
mod logging;
mod mesh;
mod metrics;
mod module_cache;
mod poke;
mod reserve;
mod shard_loop;
mod snapshots;
mod stderr;
mod timers;
mod wasm_pool;
mod webhooks;

pub use boot::{Ready, SHARDS_MAX, ServerError, run_server};
pub use config::ServerConfig;
pub use flo_engine::{
    Durability, Limits, RUN_STEPS_MAX_DEFAULT, WASM_SLOTS_DEFAULT, WASM_SLOTS_MAX,
};
pub use flo_ual::SEGMENT_BYTES_MIN;
pub use listener::FRAME_DEADLINE_MS_DEFAULT;
pub use log_writer::{LOG_WRITES_DEFAULT, LOG_WRITES_MAX};
pub use logging::{
    LOG_FILTER_DEFAULT, LogError, LogFormat, flush as flush_log, install as install_logging,
};
pub use metrics::HTTP_CONNECTIONS_MAX;
pub use module_cache::MODULE_CACHE_BYTES_DEFAULT;
pub use snapshots::SNAPSHOT_BYTES_DEFAULT;
