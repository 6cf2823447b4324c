//! The glommio half: executors, data directory, log files, listener, connections, mesh.

mod boot;
mod config;
mod conn;
mod dispatch;
mod forwarder;
mod log_writer;
mod mesh;
mod outbox;
mod shard;
mod wasm_runner;
mod worker_host;
mod workflow_host;

pub use boot::{Ready, ServerError, run_server};
pub use config::{Durability, ServerConfig};
