//! Workers: the registry of worker processes (on the shard a worker id hashes to) and the
//! leasing of user-hosted tasks to them (on the shard that owns each run).

mod registry;
mod tasks;

pub use registry::{
    HEARTBEAT_TIMEOUT_MS, MAX_CONCURRENCY_DEFAULT, WORKERS_PER_SHARD_MAX, Worker, WorkerRegistry,
    labels_match, validate_worker_id, worker_info,
};
pub use tasks::{Failed, LEASE_SCAN_MAX, TASK_ERROR_BYTES_MAX, TaskReport, WantSpec};
