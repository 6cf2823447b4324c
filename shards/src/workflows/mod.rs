//! Workflows: YAML definitions (parsed, validated, on every shard) and durable runs (each on
//! the shard its id hashes to) that walk a definition's steps.

mod def;

pub use def::{
    BUILTIN_TERMINALS, Backoff, Idempotency, Next, PollPolicy, RetryPolicy, START_STEP, SignalWait,
    Step, StepAction, Target, Validated, WorkflowDef,
};
