//! Bounds the operator sets when starting the server (flags of `flo server`), the same on
//! every shard and read by the domains through `Core::limits`.

/// Default of `Limits::run_steps_max` (`--max-run-steps`).
pub const RUN_STEPS_MAX_DEFAULT: u64 = 10_000;
/// Default of `Limits::wasm_slots` (`--max-concurrent-executions`).
pub const WASM_SLOTS_DEFAULT: usize = 4;
/// Largest `Limits::wasm_slots` accepted.
pub const WASM_SLOTS_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Steps one workflow run may execute in all (retries and polls count, each visit of
    /// a step in a loop counts): one more fails the run (`--max-run-steps`).
    pub run_steps_max: u64,
    /// WebAssembly executions at once on one shard; more runs wait for a slot
    /// (`--max-concurrent-executions`, the spec's `max_concurrent_executions`).
    pub wasm_slots: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            run_steps_max: RUN_STEPS_MAX_DEFAULT,
            wasm_slots: WASM_SLOTS_DEFAULT,
        }
    }
}
