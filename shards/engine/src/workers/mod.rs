//! Workers: the registry of worker processes (on the shard a worker id hashes to, in
//! memory), the leasing of user-hosted tasks to them (on the shard that owns each run), and
//! the awaits that gather a worker's tasks from every shard.

mod awaits;
mod ops;
mod registry;
mod tasks;

#[cfg(feature = "test-support")]
pub use awaits::AWAITS_PER_WORKER_MAX;
pub use awaits::{
    Awaits, abandon_forwarded, await_tasks, cancel_want, conn_closed, dispatch, expire_awaits,
    forward_await, on_await_relayed, on_delivery, on_want, on_want_share, serve_held, serve_parked,
    sweep_wants, worker_gone,
};
pub use ops::report;
pub use registry::WorkerRegistry;
#[cfg(test)]
pub use tasks::TASK_ERROR_BYTES_MAX;
pub use tasks::{expire_leases, release_tasks};
