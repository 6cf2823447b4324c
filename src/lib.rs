//! flo client SDK. Talks the flo protocol over plain blocking sockets, so applications
//! use it from any runtime (or none). The server lives behind the default `server`
//! feature; depend on `flo` with `default-features = false` to get only the client.
//!
//! - `Client`: one request at a time over one connection.
//! - `MuxClient`: one connection shared by many threads, pipelined.
//! - `ShardedClient`: a `Client` on each shard; keyed operations go to their owner's.
//! - `ActionWorker`: runs user-hosted actions (register, poll, run handlers, report).

mod client;
#[cfg(test)]
mod fake_server;
mod handler;
mod mux;
mod requests;
mod sharded;
mod stream_worker;
mod streams;
mod worker;

pub use client::{
    Client, Connection, Error, EventsPage, FailMode, HistoryPage, InvokeOptions, Page, PutOptions,
    StartOptions, TaskRef, generate_worker_id,
};
pub use flo_protocol as protocol;
pub use handler::{
    ActionContext, ActionResult, CodedError, ERROR_TEXT_BYTES_MAX, HandlerError, HandlerResult,
    NonRetryableError,
};
pub use mux::{MUX_PENDING_CALLS_MAX, MuxClient, MuxOptions, PendingReply};
pub use requests::RecordsPage;
pub use sharded::ShardedClient;
pub use stream_worker::{
    RunningStreamWorker, StreamContext, StreamWorker, StreamWorkerBuilder, StreamWorkerOptions,
};
pub use worker::{
    ACTION_TIMEOUT_DEFAULT, ActionWorker, ActionWorkerBuilder, RunningWorker, StopHandle,
    WORKER_CONCURRENCY_MAX, WorkerError, WorkerOptions, WorkerStats,
};
