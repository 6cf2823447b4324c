//! flo client SDK. Talks the flo protocol over plain blocking sockets, so applications
//! use it from any runtime (or none). The server lives behind the default `server`
//! feature; depend on `flo` with `default-features = false` to get only the client.
//!
//! - `Client`: one request at a time over one connection.
//! - `MuxClient`: one connection shared by many threads, pipelined.

mod client;
#[cfg(test)]
mod fake_server;
mod mux;

pub use client::{
    Client, Connection, Error, FailMode, InvokeOptions, PutOptions, TaskRef, generate_worker_id,
};
pub use flo_protocol as protocol;
pub use mux::{MUX_PENDING_CALLS_MAX, MuxClient, MuxOptions, PendingReply};
