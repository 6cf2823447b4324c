//! Actions: the registry of named task types (on every shard), the durable runs (each on
//! the shard its run id hashes to), the queues that order runnable runs, and the
//! operations and WebAssembly attempts that move runs along.

mod attempts;
mod ops;
mod registry;
mod runs;
mod scheduler;

pub use attempts::{
    Executions, RUN_RESULT_BYTES_MAX, WASM_SLOTS, on_executed, start_executions, stop_if_executing,
};
pub use ops::{action_get, action_list, cancel, invoke, run_list, run_status};
pub use registry::{
    ActionDef, MEMORY_LIMIT_MB_DEFAULT, MEMORY_LIMIT_MB_MAX, Registry, action_info,
};
pub use runs::{
    Lease, PRIORITY_DEFAULT, Run, Runs, idempotent_run_id, retry_at, retry_delay_ms, run_info,
    run_not_found,
};
pub use scheduler::{ActionKey, Queue, RunKey, Scheduler, TaskEntry};
