//! Actions: the operations on named task types and their runs, the WebAssembly attempts
//! that move runs along, and the redrive of dead-lettered runs. Their state (the registry, the runs, the queues) is in
//! `fold`.

mod attempts;
mod ops;
mod redrive;

#[cfg(test)]
pub use attempts::RUN_RESULT_BYTES_MAX;
pub use attempts::{
    Executions, StepExecuted, WASM_SLOTS, guest_kv_writes, on_executed, split_state_patch,
    start_executions, stop_if_executing, stop_steps_of,
};
pub use ops::{action_get, action_list, cancel, invoke, run_list, run_status};
pub use redrive::{redrivable_entry, redrive, redrive_archived};
