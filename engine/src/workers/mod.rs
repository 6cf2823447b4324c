//! Workers: the registry of worker processes (on the shard a worker id hashes to, in
//! memory), the leasing of user-hosted tasks to them (on the shard that owns each run), and
//! the awaits that gather a worker's tasks from every shard.

mod awaits;
mod ops;
mod registry;
mod tasks;

pub use awaits::{
    AWAITS_PER_WORKER_MAX, Awaits, abandon_forwarded, await_tasks, cancel_want, conn_closed,
    dispatch, expire_awaits, forward_await, on_await_relayed, on_delivery, on_want, on_want_share,
    serve_parked, sweep_wants, worker_gone,
};
pub use ops::{note_task_done, report};
pub use registry::{
    HEARTBEAT_TIMEOUT_MS, MAX_CONCURRENCY_DEFAULT, WORKERS_PER_SHARD_MAX, Worker, WorkerRegistry,
    labels_match, worker_info,
};
pub use tasks::{
    Failed, LEASE_SCAN_MAX, TASK_ERROR_BYTES_MAX, TaskReport, WantSpec, expire_leases, lease_tasks,
    release_tasks,
};
