//! Workflows: YAML definitions (parsed, validated, on every shard) and durable runs (each on
//! the shard its id hashes to) that walk a definition's steps.

mod advance;

pub use advance::{
    CHILD_DEPTH_MAX, MAX_ADVANCE_STEPS, SIGNALS_QUEUED_MAX, STEP_OUTPUT_BYTES_MAX, check_run_id,
    history_page, idempotent_workflow_run_id, open_runs, wf_advance, wf_cancel, wf_fire_timers,
    wf_history, wf_info, wf_list, wf_list_runs, wf_notify_parent, wf_on_action_final,
    wf_plan_create, wf_plan_set_enabled, wf_resume, wf_signal, wf_start, wf_status,
};
pub use flo_workflow::{
    BUILTIN_TERMINALS, Backoff, Idempotency, Next, PollPolicy, RetryPolicy, START_STEP, SignalWait,
    Step, StepAction, Target, Validated, WorkflowDef,
};

pub use flo_workflow::{parse_workflow, resolve_mapping};
