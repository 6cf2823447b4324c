//! Finished runs leave memory. Once a run is final and nothing waits on it any more, its
//! final document is logged once (`Record::RunArchived`) and `apply` drops the run from
//! the fold, keeping a few bytes in the run index (`fold::archive::RunIndex`): where in
//! the log the document is. Reads of an archived run read that record back
//! (`Effect::ReadLog`).

#[cfg(any(test, feature = "test-support"))]
/// Finished runs are kept (their status, history, idempotency key) this long by default.
pub const RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3600 * 1000;

mod fill;
mod plan;
mod reads;

pub use fill::{archived_refs, fill_archived};
pub use plan::{archive_if_done, final_runs, forget_expired};
pub use reads::{ListQuery, Live, Reads, Want, on_read, read_list, read_one};
