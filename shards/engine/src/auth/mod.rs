//! Who may do what. The auth file (`file.rs`: tokens → role and namespaces, parsed and
//! validated, tokens found in constant time), the policy (`policy.rs`: `authorize`, the one
//! place that says which role may send which `Op`), a connection's gate (`gate.rs`: the
//! handshake authenticates, every later request is authorized; the log lines denials write
//! are bounded by `DENIAL_LINES_PER_SECOND_MAX`). Pure: no I/O; the runtime reads the file and
//! asks the gate before a request enters the shard.

mod file;
mod gate;
mod policy;

pub use file::{AuthFileError, AuthTable, FileFormat, Namespaces, Principal, Quota, Quotas, Role};
pub use gate::{DENIAL_LINES_PER_SECOND_MAX, Gate, Refusal, Session, hide_counts};
pub use policy::{Denied, authorize, op_name};
