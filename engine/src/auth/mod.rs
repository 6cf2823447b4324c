//! Who may do what. The auth file (`file.rs`: tokens → role and namespaces, parsed and
//! validated, tokens found in constant time), the policy (`policy.rs`: `authorize`, the one
//! place that says which role may send which `Op`), a connection's gate (`gate.rs`: the
//! handshake authenticates, every later request is authorized) and the rate limit on the
//! log lines denials write (`denials.rs`). Pure: no I/O; the runtime reads the file and
//! asks the gate before a request enters the shard.

mod denials;
mod file;
mod gate;
mod policy;

pub use denials::{DENIAL_LINES_PER_SECOND_MAX, DenialLog};
pub use file::{AuthFileError, AuthTable, FileFormat, Namespaces, Principal, Role};
pub use gate::{Gate, Refusal, Session};
pub use policy::{Denied, authorize, op_name};
