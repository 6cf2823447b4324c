//! The flo engine. One shard per core owns its log (UAL), its state and its timers; the
//! engine logic (`engine`, `state`, `kv`, `ual`) is runtime-agnostic, the glommio parts
//! (files, sockets, mesh) live in `server`.

pub mod actions;
pub mod clock;
pub mod engine;
pub mod hash;
pub mod kv;
pub mod record;
pub mod server;
pub mod state;
pub mod ual;
pub mod wasm;
pub mod workers;
pub mod workflows;

pub use server::{Durability, Ready, ServerConfig, ServerError, run_server};
