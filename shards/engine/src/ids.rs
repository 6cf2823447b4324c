//! The keys that name things across the engine.

/// (namespace, run id): an action run or a workflow run.
pub type RunKey = (String, String);
/// (namespace, worker id).
pub type WorkerKey = (String, String);
