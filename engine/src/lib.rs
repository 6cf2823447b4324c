//! flo's shard engine: a pure state machine per shard. Inputs in (`core::io::Input`),
//! effects out (`core::io::Effect`); state changes only through the commit path
//! (`core::cx::Core::commit`: append → apply → observe). No async runtime, no I/O: the
//! runtime crate performs the effects, the simulation drives it without one.

pub mod actions;
pub mod archive;
pub mod auth;
pub mod clock;
pub mod core;
pub mod definitions;
pub mod engine;
pub mod fold;
pub mod hash;
pub mod ids;
pub mod image;
pub mod kv;
pub mod line_budget;
pub mod pages;
pub mod tables;
pub mod workers;
pub mod workflows;

pub use crate::core::Durability;
pub use crate::core::io::{
    ClientRef, ConnId, DiskSpace, Effect, ExecFailure, ExecResult, Execution, Input, PeerMsg,
    ReplyResult, StorageInfo,
};
pub use crate::engine::{Engine, EngineConfig};
