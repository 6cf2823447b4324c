//! The workflow language: a YAML definition parsed (`parse`) and validated (`validate`,
//! with the issue codes of `issues`) into a `WorkflowDef`, and the JSONPath input mappings
//! a step's input is built with (`mapping`). No engine, no I/O: `flo workflow validate`
//! and the server use the same code.

mod backoff;
mod bounds;
mod def;
mod definition;
mod depends;
pub mod filter;
mod graph;
mod issues;
mod mapping;
mod names;
mod parse;
mod plan;
mod plan_checks;
mod policies;
pub mod query;
pub mod schedule;
pub mod search;
pub mod state;
mod step_limits;
mod validate;
pub mod webhook;
mod webhook_checks;
pub mod yaml_depth;

pub use backoff::{Backoff, PollPolicy, RetryPolicy};
pub use bounds::{
    ATTEMPTS_MAX, BRANCHES_MAX, DELAY_MS_MAX, FORK_WIDTH_MAX, MAPPING_PATH_NESTING_MAX,
    POLL_ATTEMPTS_DEFAULT, POLL_BASE_DELAY_MS_DEFAULT, RETRY_ATTEMPTS_DEFAULT,
    RETRY_INITIAL_DELAY_MS_DEFAULT, RETRY_WITHIN_MS_MAX, SCHEDULE_CATCHUP_MAX,
    SCHEDULE_CONCURRENT_MAX, SCHEDULE_INTERVAL_MS_MIN, SIGNAL_TIMEOUT_MS_MAX,
    SIGNAL_TYPE_BYTES_MAX, STEP_NAME_BYTES_MAX, TRIGGER_BATCH_MAX, VERSION_BYTES_MAX,
    WORKFLOW_NAME_BYTES_MAX,
};
pub use def::{
    BUILTIN_TERMINALS, Catchup, Every, Fork, Idempotency, Next, OnError, START_STEP, Schedule,
    SignalWait, Step, StepAction, Target, Trigger, Validated, WorkflowDef,
};
pub use definition::{
    DEFINITION_BYTES_MAX, DEFINITION_EXPANDED_BYTES_MAX, DEFINITION_NESTING_MAX, parse_workflow,
};
pub use issues::IssueCode;
pub use mapping::{is_mapping_path, mapping_paths, resolve_mapping};
pub use names::{check_version, check_workflow_name, parse_target};
pub use plan::{
    Breaker, CachePolicy, Executor, Fallback, FallbackWhen, HealthPolicy, PLAN_EXECUTORS_MAX,
    PLANS_MAX, Plan, RateLimit, Selection,
};
