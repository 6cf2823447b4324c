//! Workflows: YAML definitions (parsed, validated, on every shard) and durable runs (each on
//! the shard its id hashes to) that walk a definition's steps.

mod advance;
mod def;
mod definition;
mod issues;
mod mapping;
mod parse;
mod state;
mod validate;

pub use advance::{
    CHILD_DEPTH_MAX, MAX_ADVANCE_STEPS, SIGNALS_QUEUED_MAX, STEP_OUTPUT_BYTES_MAX, check_run_id,
    history_page, idempotent_workflow_run_id, open_runs, wf_advance, wf_cancel, wf_fire_timers,
    wf_history, wf_info, wf_list, wf_list_runs, wf_notify_parent, wf_on_action_final,
    wf_plan_create, wf_plan_set_enabled, wf_resume, wf_signal, wf_start, wf_status,
};
pub use def::{
    BUILTIN_TERMINALS, Backoff, Idempotency, Next, PollPolicy, RetryPolicy, START_STEP, SignalWait,
    Step, StepAction, Target, Validated, WorkflowDef,
};
pub use state::{
    StepState, WfEntry, WfRun, WfSyncEntry, WfSyncVersion, WfVersion, Workflows, json_value,
    run_info, sorted_defs,
};

pub use definition::{DEFINITION_BYTES_MAX, DEFINITION_NESTING_MAX, parse_workflow};
pub use issues::IssueCode;
pub use mapping::{is_mapping_path, mapping_paths, resolve_mapping};
pub use validate::{
    ATTEMPTS_MAX, DELAY_MS_MAX, MAPPING_PATH_NESTING_MAX, POLL_ATTEMPTS_DEFAULT,
    POLL_BASE_DELAY_MS_DEFAULT, RETRY_ATTEMPTS_DEFAULT, RETRY_INITIAL_DELAY_MS_DEFAULT,
    RETRY_WITHIN_MS_MAX, SIGNAL_TIMEOUT_MS_MAX, SIGNAL_TYPE_BYTES_MAX, STEP_NAME_BYTES_MAX,
    VERSION_BYTES_MAX, WORKFLOW_NAME_BYTES_MAX, check_version, check_workflow_name, parse_target,
};
