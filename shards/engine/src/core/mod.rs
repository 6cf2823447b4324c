//! What the engine is made of between the fold and the domains: the inputs and effects it
//! exchanges with the runtime (`io`), the commit path every domain changes state through
//! and reaches the rest by (`commit`: `Core`), the durability gate (`gate`), the agenda of
//! work and its budgets (`agenda`), calls to other shards (`calls`) and the namespaces'
//! quotas (`quotas`).

mod agenda;
mod calls;
mod commit;
mod gate;
pub mod io;
mod quotas;

pub use agenda::Task;
pub use calls::{TriggerStart, Waiting};
pub use commit::Core;
pub use gate::Durability;
