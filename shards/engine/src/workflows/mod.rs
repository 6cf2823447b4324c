//! Workflow runs on the shard that owns them, one file per thing a run does: start, advance
//! through steps, execute a WebAssembly step in the shard's slots, finish a step, signals,
//! cancel, timers and restarts, and the reads; the
//! definitions' planning and reads. Every change is a record committed through
//! `Core::commit`. Their state is `fold::workflows`; the language is `flo_workflow`.

mod advance;
mod cancel;
mod control;
mod definitions;
mod events;
mod finish;
mod plan_steps;
mod queries;
mod results;
mod run_state;
mod search;
mod signals;
mod start;
mod timers;
mod wasm_steps;

pub use crate::ids::run_id_taken;
pub use advance::advance;
pub use cancel::cancel;
pub use control::control;
pub use definitions::{info, list, plan_create, plan_set_enabled};
pub use events::{events_part, merge_events};
#[cfg(test)]
pub use finish::STEP_OUTPUT_BYTES_MAX;
pub use queries::{RunFilter, history, list_runs, status};
pub use results::{notify_parent, on_action_final};
pub use run_state::update_state;
pub use search::{QueryAsk, merge_parts, query_part};
#[cfg(feature = "test-support")]
pub use signals::SIGNALS_QUEUED_MAX;
pub use signals::signal;
pub use start::{Started, idempotent_workflow_run_id, start, start_scheduled};
pub use timers::{fire_timers, open_runs, resume};
pub use wasm_steps::on_step_executed;
