//! The server's metrics and its HTTP port: each shard's counters (`shard.rs`, atomics it
//! bumps; `histogram.rs`), their export in the Prometheus text format (`export.rs`) and the
//! thread that serves `/metrics`, `/healthz` and `/readyz` (`http.rs`).

mod export;
mod histogram;
mod http;
mod shard;

pub(crate) use export::ServerMetrics;
pub use http::HTTP_CONNECTIONS_MAX;
pub(crate) use http::{bearer_token, bind, start};
pub(crate) use shard::{EXEC_RESULTS, FAILURE_REASONS, ShardMetrics, result_index};
