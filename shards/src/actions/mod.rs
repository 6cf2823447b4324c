//! Actions: the registry of named task types (on every shard) and the durable runs
//! (each on the shard its run id hashes to), plus the scheduler that orders runnable runs.

mod registry;
mod runs;
mod scheduler;

pub use registry::{
    ActionDef, MEMORY_LIMIT_MB_DEFAULT, MEMORY_LIMIT_MB_MAX, Registry, action_info,
    validate_action_name,
};
pub use runs::{
    Lease, PRIORITY_DEFAULT, Run, Runs, idempotent_run_id, retry_delay_ms, run_info,
    validate_idempotency_key, validate_labels,
};
pub use scheduler::{ActionKey, Queue, RunKey, Scheduler, TaskEntry};
