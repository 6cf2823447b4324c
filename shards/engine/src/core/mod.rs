//! What the engine is made of between the fold and the domains: the inputs and effects it
//! exchanges with the runtime (`io`), the commit path every domain changes state through
//! and reaches the rest by (`commit`: `Core`), the durability gate (`gate`), the agenda of
//! work and its budgets (`agenda`), calls to other shards (`calls`), the namespaces'
//! quotas (`quotas`), the operator's bounds (`limits`), the WebAssembly steps waiting for or
//! holding an execution slot (`step_queue`) and what the handlers count for the metrics
//! (`counts`).

mod agenda;
mod calls;
mod commit;
mod counts;
mod gate;
pub mod io;
mod limits;
mod quotas;
mod step_queue;

pub use agenda::Task;
pub use calls::{TriggerStart, Waiting};
pub use commit::Core;
pub use counts::{Counts, SLOT_WAIT_BOUNDS_MS};
pub use gate::Durability;
pub use limits::{Limits, RUN_STEPS_MAX_DEFAULT, WASM_SLOTS_DEFAULT, WASM_SLOTS_MAX};
pub use step_queue::StepExec;
