//! The workflow engine on the shard owning a run: start, advance through steps, react to
//! action runs, child runs, signals and timers, cancel. Every change is a record committed
//! through `Core::commit`. Advancing one run never calls into another: what another run
//! must do next (a child to advance, a parent to notify) goes on the agenda as a `Task`,
//! drained by the engine's step loop with one budget per input — so no definition, however
//! it loops through children, can nest calls on the shard's stack.
//!
//! A run step on `@actions/NAME` creates an action run on this same shard (one attempt: the
//! step's `retry:` decides about retries) and waits for it to be final; WASM runs execute
//! on the shard, user-hosted ones go to workers. `@workflow/NAME[:V]` starts a child run,
//! also on this shard. Everything a run touches is local, so advancing never waits on
//! another shard.

use crate::clock::deadline_after;
use crate::core::cx::{Core, Task};
use crate::core::io::Done;
use crate::fold::archive::RunKind;
use crate::fold::record::{Record, StepNext, StepRef, StepWait};
use crate::fold::workflows::{WfRun, json_value, run_info};
use crate::ids::RunKey;
use crate::pages::Pos;
use flo_protocol::check_namespace;
use flo_protocol::{
    ErrorValue, HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, HistoryEvent, IDEMPOTENCY_KEY_BYTES_MAX,
    RUN_ID_BYTES_MAX, RUN_INPUT_BYTES_MAX, RUN_LIST_LIMIT_DEFAULT, RUN_LIST_LIMIT_MAX, Reply,
    RunStatus, ValidationIssue, WorkflowInfo, WorkflowRunStatus, WorkflowStartSpec,
};
use flo_workflow::{Idempotency, Next, SIGNAL_TYPE_BYTES_MAX, StepAction, Target, WorkflowDef};
use serde_json::{Value, json};

/// Steps a run (with its children) may take in one burst of work without waiting on
/// anything (an execution, a worker, a signal, a timer) before it is failed: a loop in the
/// definition.
pub const MAX_ADVANCE_STEPS: u32 = 256;
/// Workflow timers fired per tick (the rest on the next).
const TIMERS_PER_TICK_MAX: usize = 1024;
/// Deepest nesting of child workflows.
pub const CHILD_DEPTH_MAX: u32 = 10;
pub const WORKFLOW_YAML_BYTES_MAX: usize = 1 << 20;
/// Largest step output kept (as JSON): it goes into the step's record. A larger one fails
/// the step (an output that is not JSON is kept as a JSON string and may grow six-fold).
pub const STEP_OUTPUT_BYTES_MAX: usize = 4 << 20;

/// The prefix of the ids idempotency keys map to (reserved: callers cannot choose them).
const IDEMPOTENT_RUN_ID_PREFIX: &str = "wfrun:";

/// The id an idempotency key maps to (the same key always reaches the same shard).
pub fn idempotent_workflow_run_id(workflow: &str, key: &str) -> String {
    format!("{IDEMPOTENT_RUN_ID_PREFIX}{workflow}:{key}")
}

/// A run id chosen by the caller: 1 to `RUN_ID_BYTES_MAX` ASCII letters, digits, `-`, `_`,
/// `.`, `:`, not starting with `wfrun:` (the ids idempotency keys map to).
pub fn check_run_id(id: &str) -> Result<(), ErrorValue> {
    let ok_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if id.is_empty() || id.len() > RUN_ID_BYTES_MAX || !ok_chars {
        return Err(ErrorValue::bad_request(format!(
            "run id {id:?} is invalid: use 1 to {RUN_ID_BYTES_MAX} letters, digits, '-', '_', \
             '.' or ':'"
        )));
    }
    if id.starts_with(IDEMPOTENT_RUN_ID_PREFIX) {
        return Err(ErrorValue::bad_request(format!(
            "run id {id:?} is invalid: ids starting with {IDEMPOTENT_RUN_ID_PREFIX:?} are \
             reserved for runs started with an idempotency key"
        )));
    }
    Ok(())
}

fn outcome_chain(outcome: &str) -> Vec<&str> {
    match outcome {
        "target_not_found" => vec!["target_not_found", "execution_failure", "failure"],
        "target_disabled" => vec!["target_disabled", "execution_failure", "failure"],
        "execution_failure" => vec!["execution_failure", "failure"],
        other => vec![other],
    }
}

fn jitter(seed: u64) -> f64 {
    (xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()) % 1000) as f64 / 1000.0
}

// ---- definitions ----

/// Validates a new definition; `None` when this exact version exists already.
pub fn wf_plan_create(
    core: &Core,
    namespace: &str,
    yaml: &str,
    now_ms: u64,
) -> Result<(Option<Record>, String, String, Vec<ValidationIssue>), ErrorValue> {
    check_namespace(namespace)?;
    if yaml.len() > WORKFLOW_YAML_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "a workflow definition must be at most {WORKFLOW_YAML_BYTES_MAX} bytes"
        )));
    }
    let validated = super::parse_workflow(yaml).map_err(|issues| {
        let lines: Vec<String> = issues
            .iter()
            .map(|i| format!("  {} {}: {}", i.code, i.path, i.message))
            .collect();
        ErrorValue::bad_request(format!(
            "invalid workflow definition:\n{}",
            lines.join("\n")
        ))
    })?;
    let (name, version) = (validated.def.name.clone(), validated.def.version.clone());
    if let Some(existing) = core
        .state
        .workflows
        .def(namespace, &name)
        .and_then(|e| e.get(Some(&version)))
    {
        if existing.yaml == yaml {
            return Ok((None, name, version, validated.warnings));
        }
        return Err(ErrorValue::conflict(format!(
            "workflow {name:?} version {version:?} exists with a different definition; \
             give the new definition another version"
        )));
    }
    let record = Record::WorkflowDefined {
        namespace: namespace.to_string(),
        name: name.clone(),
        version: version.clone(),
        yaml: yaml.to_string(),
        at_ms: now_ms,
        def: Some(Box::new(validated.def)),
    };
    Ok((Some(record), name, version, validated.warnings))
}

pub fn wf_plan_set_enabled(
    core: &Core,
    namespace: &str,
    name: &str,
    enabled: bool,
    now_ms: u64,
) -> Result<Record, ErrorValue> {
    wf_entry(core, namespace, name)?;
    Ok(Record::WorkflowEnabled {
        namespace: namespace.to_string(),
        name: name.to_string(),
        enabled,
        at_ms: now_ms,
    })
}

fn wf_entry<'a>(
    core: &'a Core,
    namespace: &str,
    name: &str,
) -> Result<&'a crate::fold::workflows::WfEntry, ErrorValue> {
    core.state.workflows.def(namespace, name).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {name:?} is not defined in namespace {namespace:?} \
             (create it with flo workflow create -f FILE)"
        ))
    })
}

pub fn wf_info(
    core: &Core,
    namespace: &str,
    name: &str,
    version: Option<&str>,
) -> Result<WorkflowInfo, ErrorValue> {
    let entry = wf_entry(core, namespace, name)?;
    let v = entry.get(version).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {name:?} has no version {:?}",
            version.unwrap_or_default()
        ))
    })?;
    Ok(workflow_info(namespace, name, entry, v))
}

pub fn wf_list(core: &Core, namespace: &str) -> Vec<WorkflowInfo> {
    crate::fold::workflows::sorted_defs(&core.state.workflows.defs, namespace)
        .into_iter()
        .filter_map(|(name, entry)| {
            entry
                .versions
                .last()
                .map(|v| workflow_info(namespace, name, entry, v))
        })
        .collect()
}

// ---- runs ----

/// Starts a run on this shard (the caller routed it here) and advances it.
pub fn wf_start(core: &mut Core, spec: WorkflowStartSpec) -> Done {
    let now = core.now_ms();
    let planned = wf_plan_start(core, &spec);
    let PlannedStart {
        run_id,
        version,
        idempotency_key,
    } = match planned {
        Ok(Ok(v)) => v,
        Ok(Err(existing)) => {
            let lsn = core
                .state
                .workflows
                .run(&spec.namespace, &existing)
                .map(|r| r.lsn)
                .or_else(|| {
                    core.state
                        .archived(RunKind::Workflow, &spec.namespace, &existing)
                        .map(|e| e.lsn)
                })
                .unwrap_or(0);
            return Done {
                result: Ok(Reply::WorkflowStarted {
                    run_id: existing,
                    created: false,
                }),
                wait_lsn: lsn,
            };
        }
        Err(e) => return Done::now(Err(e)),
    };
    core.commit(Record::WfRunStarted {
        namespace: spec.namespace.clone(),
        run_id: run_id.clone(),
        workflow: spec.name,
        version,
        input: spec.input,
        idempotency_key,
        parent: None,
        at_ms: now,
    });
    wf_advance(core, &spec.namespace, &run_id);
    Done {
        result: Ok(Reply::WorkflowStarted {
            run_id,
            created: true,
        }),
        wait_lsn: core.last_lsn(),
    }
}

/// What a start creates.
struct PlannedStart {
    run_id: String,
    version: String,
    /// The key kept with the run (when the definition uses idempotency keys).
    idempotency_key: Option<String>,
}

/// The run a start creates, or `Ok(Err(id))` for an idempotent repeat.
fn wf_plan_start(
    core: &Core,
    spec: &WorkflowStartSpec,
) -> Result<Result<PlannedStart, String>, ErrorValue> {
    check_namespace(&spec.namespace)?;
    let entry = wf_entry(core, &spec.namespace, &spec.name)?;
    if !entry.enabled {
        return Err(ErrorValue::conflict(format!(
            "workflow {:?} is disabled; enable it with flo workflow enable {}",
            spec.name, spec.name
        )));
    }
    let version = entry.get(spec.version.as_deref()).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {:?} has no version {:?}",
            spec.name,
            spec.version.as_deref().unwrap_or_default()
        ))
    })?;
    let def = version
        .def
        .as_ref()
        .map_err(|e| ErrorValue::conflict(e.clone()))?;
    if spec.input.len() > RUN_INPUT_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "input of {} bytes exceeds the maximum of {RUN_INPUT_BYTES_MAX} bytes",
            spec.input.len()
        )));
    }
    if !spec.input.is_empty() {
        serde_json::from_slice::<Value>(&spec.input)
            .map_err(|e| ErrorValue::bad_request(format!("input must be JSON: {e}")))?;
    }
    if let Some(key) = &spec.idempotency_key
        && (key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX)
    {
        return Err(ErrorValue::bad_request(format!(
            "idempotency key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"
        )));
    }
    let key = match (def.idempotency, &spec.idempotency_key) {
        (Idempotency::Required, None) => {
            return Err(ErrorValue::bad_request(format!(
                "workflow {:?} requires an idempotency key (--idempotency-key KEY)",
                spec.name
            )));
        }
        (Idempotency::None, _) | (_, None) => None,
        (_, Some(key)) => Some(key.clone()),
    };
    let planned = |run_id: String, idempotency_key: Option<String>| PlannedStart {
        run_id,
        version: version.version.clone(),
        idempotency_key,
    };
    // The caller's id: refused when taken, unless the key says this start is a repeat.
    if let Some(id) = &spec.run_id {
        check_run_id(id)?;
        if let Some(e) = core.state.archived(RunKind::Workflow, &spec.namespace, id) {
            // Finished and archived: its key is in the log, not in memory. A start that
            // carries a key is taken as its repeat; one without is refused.
            if key.is_some() {
                return Ok(Err(id.clone()));
            }
            return Err(ErrorValue::conflict(format!(
                "workflow run {id:?} exists already ({}); choose another run id, or start \
                 with its idempotency key to get that run back",
                crate::fold::archived::workflow_status(e.status).as_str()
            )));
        }
        let Some(existing) = core.state.workflows.run(&spec.namespace, id) else {
            return Ok(Ok(planned(id.clone(), key)));
        };
        if key.is_some() && existing.idempotency_key == key && existing.workflow == spec.name {
            return Ok(Err(id.clone()));
        }
        return Err(ErrorValue::conflict(format!(
            "workflow run {id:?} exists already (workflow {:?}, {}); choose another run id, \
             or start with its idempotency key to get that run back",
            existing.workflow,
            existing.status.as_str()
        )));
    }
    if let Some(key) = key {
        let id = idempotent_workflow_run_id(&spec.name, &key);
        let archived = core.state.archived(RunKind::Workflow, &spec.namespace, &id);
        if core.state.workflows.run(&spec.namespace, &id).is_some() || archived.is_some() {
            return Ok(Err(id));
        }
        return Ok(Ok(planned(id, Some(key))));
    }
    let state = &core.state;
    let id = state
        .workflows
        .next_run_id(&spec.namespace, |id| state.owns(&spec.namespace, id));
    Ok(Ok(planned(id, None)))
}

fn wf_run<'a>(core: &'a Core, namespace: &str, run_id: &str) -> Result<&'a WfRun, ErrorValue> {
    core.state.workflows.run(namespace, run_id).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow run {run_id:?} not found in namespace {namespace:?}"
        ))
    })
}

/// The status of an archived (so final) run, for the conflicts that answer changes to it.
fn archived_status(core: &Core, namespace: &str, run_id: &str) -> Option<WorkflowRunStatus> {
    core.state
        .archived(RunKind::Workflow, namespace, run_id)
        .map(|e| crate::fold::archived::workflow_status(e.status))
}

pub fn wf_status(core: &Core, namespace: &str, run_id: &str) -> Done {
    match wf_run(core, namespace, run_id) {
        Ok(run) => Done {
            wait_lsn: run.lsn,
            result: Ok(Reply::WorkflowRun(run_info(namespace, run_id, run))),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// A run's history, oldest first: all of it, or (with `limit` or `after`) the page of at
/// most `limit` events after event `after`, with the cursor of the next page.
pub fn wf_history(
    core: &Core,
    namespace: &str,
    run_id: &str,
    limit: Option<u32>,
    after: Option<u64>,
) -> Done {
    match wf_run(core, namespace, run_id) {
        Ok(run) => Done {
            wait_lsn: run.lsn,
            result: history_page(&run.history, limit, after),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// A run's history as the reply shows it (live or archived): events numbered from 1; with
/// `limit` or `after`, one page of it and the cursor of the next.
pub fn history_page(
    history: &[HistoryEvent],
    limit: Option<u32>,
    after: Option<u64>,
) -> Result<Reply, ErrorValue> {
    let numbered = |(i, e): (usize, &HistoryEvent)| HistoryEvent {
        seq: i as u64 + 1,
        ..e.clone()
    };
    if limit.is_none() && after.is_none() {
        let events = history.iter().enumerate().map(numbered).collect();
        return Ok(Reply::WorkflowHistory(events));
    }
    let limit = limit.unwrap_or(HISTORY_LIMIT_DEFAULT);
    if limit == 0 || limit > HISTORY_LIMIT_MAX {
        return Err(ErrorValue::bad_request(format!(
            "limit must be 1 to {HISTORY_LIMIT_MAX}, got {limit}"
        )));
    }
    let skip = usize::try_from(after.unwrap_or(0)).unwrap_or(usize::MAX);
    let events: Vec<HistoryEvent> = history
        .iter()
        .enumerate()
        .skip(skip)
        .take(limit as usize)
        .map(numbered)
        .collect();
    let last = events.last().map_or(skip as u64, |e| e.seq);
    let next_after = (last < history.len() as u64).then_some(last);
    Ok(Reply::WorkflowHistoryPage { events, next_after })
}

pub fn wf_list_runs(
    core: &Core,
    namespace: &str,
    name: &str,
    status: Option<WorkflowRunStatus>,
    limit: Option<u32>,
    from: &Pos,
) -> Done {
    let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT);
    if limit == 0 || limit > RUN_LIST_LIMIT_MAX {
        return Done::now(Err(ErrorValue::bad_request(format!(
            "limit must be 1 to {RUN_LIST_LIMIT_MAX}, got {limit}"
        ))));
    }
    let (runs, truncated) =
        core.state
            .workflows
            .list(namespace, name, status, limit as usize, from);
    Done {
        wait_lsn: runs.iter().map(|(_, r)| r.lsn).max().unwrap_or(0),
        result: Ok(Reply::WorkflowRuns {
            runs: runs
                .iter()
                .map(|(id, r)| run_info(namespace, id, r))
                .collect(),
            truncated,
            next_cursor: None,
        }),
    }
}

/// Signals a run holds before it consumes them: one more answers `overloaded`.
pub const SIGNALS_QUEUED_MAX: usize = 1000;

/// Stores a signal; a run waiting for its type consumes it and moves on.
pub fn wf_signal(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    signal_type: String,
    payload: Vec<u8>,
) -> Done {
    let now = core.now_ms();
    let check = || -> Result<(), ErrorValue> {
        let status = match archived_status(core, namespace, run_id) {
            Some(status) => status,
            None => {
                let run = wf_run(core, namespace, run_id)?;
                if run.signals.len() >= SIGNALS_QUEUED_MAX && !run.status.is_final() {
                    return Err(ErrorValue::new(
                        flo_protocol::ErrorCode::Overloaded,
                        format!(
                            "workflow run {run_id:?} holds {SIGNALS_QUEUED_MAX} signals not \
                             consumed yet, the most a run queues; send more once it consumes \
                             some"
                        ),
                    ));
                }
                run.status
            }
        };
        if status.is_final() {
            return Err(ErrorValue::conflict(format!(
                "workflow run {run_id:?} is already {}; it takes no more signals",
                status.as_str()
            )));
        }
        if signal_type.is_empty() || signal_type.len() > SIGNAL_TYPE_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "signal type must be 1 to {SIGNAL_TYPE_BYTES_MAX} bytes"
            )));
        }
        if payload.len() > RUN_INPUT_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "signal payload must be at most {RUN_INPUT_BYTES_MAX} bytes"
            )));
        }
        if !payload.is_empty() {
            serde_json::from_slice::<Value>(&payload).map_err(|e| {
                ErrorValue::bad_request(format!("signal payload must be JSON: {e}"))
            })?;
        }
        Ok(())
    };
    if let Err(e) = check() {
        return Done::now(Err(e));
    }
    core.commit(Record::WfSignalReceived {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        signal_type,
        payload,
        at_ms: now,
    });
    let lsn = core.last_lsn();
    wf_try_signal(core, namespace, run_id);
    Done {
        result: Ok(Reply::Done),
        wait_lsn: lsn,
    }
}

/// A run waiting for a signal whose type is queued consumes the earliest and moves on.
fn wf_try_signal(core: &mut Core, namespace: &str, run_id: &str) {
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    let Some(StepWait::Signal { signal_type, .. }) = &run.wait else {
        return;
    };
    let Some((seq, _, payload)) = run.signals.iter().find(|(_, t, _)| t == signal_type) else {
        return;
    };
    let (seq, payload) = (*seq, serde_json::to_vec(payload).unwrap_or_default());
    let step = run.current_step.clone().unwrap_or_default();
    wf_finish(
        core,
        namespace,
        run_id,
        &step,
        "success",
        Some(payload),
        None,
        Some(seq),
    );
    wf_advance(core, namespace, run_id);
}

/// Cancels a run, its current action run and its child runs.
pub fn wf_cancel(core: &mut Core, namespace: &str, run_id: &str, reason: Option<String>) -> Done {
    let status = match archived_status(core, namespace, run_id) {
        Some(status) => status,
        None => match wf_run(core, namespace, run_id) {
            Err(e) => return Done::now(Err(e)),
            Ok(run) => run.status,
        },
    };
    if status.is_final() {
        return Done::now(Err(ErrorValue::conflict(format!(
            "workflow run {run_id:?} is already {}; only running or waiting runs can be \
             cancelled",
            status.as_str()
        ))));
    }
    // One atomic group: after a crash the whole tree is cancelled, or none of it.
    core.begin_group();
    wf_cancel_tree(core, namespace, run_id, reason);
    core.end_group();
    let done = wf_status(core, namespace, run_id);
    Done {
        wait_lsn: core.last_lsn().max(done.wait_lsn),
        result: done.result,
    }
}

fn wf_cancel_tree(core: &mut Core, namespace: &str, run_id: &str, reason: Option<String>) {
    let now = core.now_ms();
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    if run.status.is_final() {
        return;
    }
    let action = match &run.wait {
        Some(StepWait::ActionRun { run_id, .. }) => Some(run_id.clone()),
        _ => None,
    };
    let children = run.children.clone();
    core.commit(Record::WfRunCancelled {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        reason: reason.clone(),
        at_ms: now,
    });
    core.schedule(Task::WfFinal((namespace.to_string(), run_id.to_string())));
    if let Some(action) = action
        && let Ok(record) = core.state.runs.plan_cancel(namespace, &action, now)
    {
        core.commit(record);
        core.schedule(Task::ActionFinal((namespace.to_string(), action)));
    }
    for child in children {
        let why = Some(format!("parent run {run_id} cancelled"));
        wf_cancel_tree(core, namespace, &child, why);
    }
}

// ---- advancing ----

/// The top-level run of `key`'s tree (children run on their parent's shard).
fn root_of(core: &Core, namespace: &str, run_id: &str) -> RunKey {
    let mut id = run_id.to_string();
    for _ in 0..=CHILD_DEPTH_MAX {
        match core
            .state
            .workflows
            .run(namespace, &id)
            .and_then(|r| r.parent.as_ref())
        {
            Some(parent) => id = parent.run_id.clone(),
            None => break,
        }
    }
    (namespace.to_string(), id)
}

/// Walks the run forward until it waits or ends. Each step is charged to the run's tree:
/// past `MAX_ADVANCE_STEPS` in one burst of work the run fails (a loop in the definition);
/// past the input's budget the rest is continued by a later input.
pub fn wf_advance(core: &mut Core, namespace: &str, run_id: &str) {
    let root = root_of(core, namespace, run_id);
    loop {
        let now = core.now_ms();
        let Some(run) = core.state.workflows.run(namespace, run_id) else {
            return;
        };
        if run.status.is_final() || run.wait.is_some() || run.timer_ms.is_some_and(|at| at > now) {
            return;
        }
        let current_step = run.current_step.clone().unwrap_or_default();
        if core.steps_left == 0 {
            core.schedule(Task::WfAdvance((namespace.to_string(), run_id.to_string())));
            return;
        }
        if !core.charge_root(&root, MAX_ADVANCE_STEPS) {
            let step = current_step;
            let reason = format!(
                "the run took more than {MAX_ADVANCE_STEPS} steps without waiting (a loop in \
                 the definition?)"
            );
            wf_end(core, namespace, run_id, &step, &reason);
            return;
        }
        let Some(run) = core.state.workflows.run(namespace, run_id) else {
            return;
        };
        let def = match &run.def {
            Ok(def) => def.clone(),
            Err(reason) => {
                let reason = reason.clone();
                wf_end(core, namespace, run_id, &current_step, &reason);
                return;
            }
        };
        let step_name = current_step;
        let Some(step) = def.step(&step_name) else {
            let reason = format!("step {step_name:?} is not in the definition");
            wf_end(core, namespace, run_id, &step_name, &reason);
            return;
        };
        match &step.action {
            StepAction::WaitForSignal(wait) => {
                let queued = run
                    .signals
                    .iter()
                    .find(|(_, t, _)| *t == wait.signal_type)
                    .map(|(seq, _, p)| (*seq, serde_json::to_vec(p).unwrap_or_default()));
                match queued {
                    Some((seq, payload)) => wf_finish(
                        core,
                        namespace,
                        run_id,
                        &step_name,
                        "success",
                        Some(payload),
                        None,
                        Some(seq),
                    ),
                    None => {
                        // The record's observe sets the deadline's timer (none beyond the
                        // timer horizon: such a wait never times out).
                        let deadline_ms = wait.timeout_ms.and_then(|t| deadline_after(now, t));
                        core.commit(Record::WfStepStarted {
                            namespace: namespace.to_string(),
                            run_id: run_id.to_string(),
                            step: step_name.clone(),
                            wait: StepWait::Signal {
                                signal_type: wait.signal_type.clone(),
                                deadline_ms,
                            },
                            at_ms: now,
                        });
                        return;
                    }
                }
            }
            StepAction::Run(target) => {
                let input = wf_step_input(core, namespace, run_id, step, now);
                let target = target.clone();
                if !wf_run_target(core, namespace, run_id, &step_name, &target, input) {
                    return;
                }
            }
        }
    }
}

/// The step's input: its `inputMapping` resolved, else the run's input.
fn wf_step_input(
    core: &Core,
    namespace: &str,
    run_id: &str,
    step: &super::Step,
    now: u64,
) -> Vec<u8> {
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return Vec::new();
    };
    let Some(mapping) = &step.input_mapping else {
        return run.input_bytes.clone();
    };
    let steps: serde_json::Map<String, Value> = run
        .steps
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                json!({"output": s.output.clone().unwrap_or(Value::Null), "outcome": s.outcome}),
            )
        })
        .collect();
    let ctx = json!({
        "input": run.input,
        "steps": steps,
        "flo": {"run_id": run_id, "timestamp": now},
    });
    serde_json::to_vec(&super::resolve_mapping(mapping, &ctx)).unwrap_or_default()
}

/// Starts a run step's target; returns whether the run moved on at once (an
/// execution-level outcome) so advancing continues.
#[allow(clippy::too_many_arguments)]
fn wf_run_target(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    target: &Target,
    input: Vec<u8>,
) -> bool {
    let now = core.now_ms();
    let fail = |outcome: &str, error: String| (outcome.to_string(), error);
    let problem = match target {
        // An `inputMapping` may assemble an input larger than any run accepts.
        _ if input.len() > RUN_INPUT_BYTES_MAX => Some(fail(
            "execution_failure",
            format!(
                "the step's input of {} bytes exceeds the maximum of {RUN_INPUT_BYTES_MAX} bytes",
                input.len()
            ),
        )),
        Target::Plan(name) => Some(fail(
            "target_not_found",
            format!("plan {name:?}: inline plans are not supported yet"),
        )),
        Target::Action(name) => match core.state.registry.get(namespace, name) {
            None => Some(fail(
                "target_not_found",
                format!("action {name:?} is not registered"),
            )),
            Some(def) if !def.enabled => Some(fail(
                "target_disabled",
                format!("action {name:?} is disabled"),
            )),
            Some(_) => None,
        },
        Target::Workflow { name, version } => {
            let depth = core
                .state
                .workflows
                .run(namespace, run_id)
                .map_or(0, |r| r.depth);
            match core.state.workflows.def(namespace, name) {
                None => Some(fail(
                    "target_not_found",
                    format!("workflow {name:?} is not defined"),
                )),
                Some(e) if e.get(version.as_deref()).is_none() => Some(fail(
                    "target_not_found",
                    format!(
                        "workflow {name:?} has no version {:?}",
                        version.as_deref().unwrap_or_default()
                    ),
                )),
                Some(e) if !e.enabled => Some(fail(
                    "target_disabled",
                    format!("workflow {name:?} is disabled"),
                )),
                Some(_) if depth + 1 > CHILD_DEPTH_MAX => Some(fail(
                    "execution_failure",
                    format!("child workflows nest at most {CHILD_DEPTH_MAX} deep"),
                )),
                Some(_) => None,
            }
        }
    };
    if let Some((outcome, error)) = problem {
        wf_finish(
            core,
            namespace,
            run_id,
            step,
            &outcome,
            None,
            Some(error),
            None,
        );
        return true;
    }
    let step_ref = StepRef {
        run_id: run_id.to_string(),
        step: step.to_string(),
    };
    match target {
        Target::Action(name) => {
            let Some(def) = core.state.registry.get(namespace, name) else {
                return false;
            };
            let version = def.version;
            let state = &core.state;
            let action_run = state
                .runs
                .next_run_id(namespace, name, |id| state.owns(namespace, id));
            core.commit(Record::RunCreated {
                namespace: namespace.to_string(),
                run_id: action_run.clone(),
                action: name.clone(),
                action_version: version,
                input,
                priority: crate::fold::runs::PRIORITY_DEFAULT,
                labels: None,
                idempotency_key: None,
                created_at_ms: now,
                available_at_ms: now,
                step: Some(step_ref),
            });
            // Applying RunCreated (its `step`) started the step as well; its observe
            // queued the run.
            false
        }
        Target::Workflow { name, version } => {
            let Some(version) = core
                .state
                .workflows
                .def(namespace, name)
                .and_then(|e| e.get(version.as_deref()))
                .map(|v| v.version.clone())
            else {
                return false;
            };
            let state = &core.state;
            let child = state
                .workflows
                .next_run_id(namespace, |id| state.owns(namespace, id));
            // The child's start and the parent's wait are one atomic group.
            core.commit_group(vec![
                Record::WfRunStarted {
                    namespace: namespace.to_string(),
                    run_id: child.clone(),
                    workflow: name.clone(),
                    version,
                    input,
                    idempotency_key: None,
                    parent: Some(step_ref),
                    at_ms: now,
                },
                Record::WfStepStarted {
                    namespace: namespace.to_string(),
                    run_id: run_id.to_string(),
                    step: step.to_string(),
                    wait: StepWait::ChildRun {
                        run_id: child.clone(),
                    },
                    at_ms: now,
                },
            ]);
            core.schedule(Task::WfAdvance((namespace.to_string(), child)));
            false
        }
        Target::Plan(_) => unreachable!("refused above"),
    }
}

/// Ends the run as failed with `reason` (no transition applies).
fn wf_end(core: &mut Core, namespace: &str, run_id: &str, step: &str, reason: &str) {
    let now = core.now_ms();
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome: "execution_failure".to_string(),
        output: None,
        error: None,
        consumed_signal: None,
        next: StepNext::End {
            terminal: "flo.Failed".to_string(),
            status: WorkflowRunStatus::Failed,
            reason: Some(reason.to_string()),
        },
        at_ms: now,
    });
    wf_after_end(core, namespace, run_id);
}

/// Records that the current step finished with `outcome`, choosing where the run goes:
/// a retry, a poll, a transition, or the end.
#[allow(clippy::too_many_arguments)]
fn wf_finish(
    core: &mut Core,
    namespace: &str,
    run_id: &str,
    step: &str,
    outcome: &str,
    output: Option<Vec<u8>>,
    error: Option<String>,
    consumed_signal: Option<u64>,
) {
    let now = core.now_ms();
    let (outcome, output, error) = match output {
        Some(o) if o.len() > STEP_OUTPUT_BYTES_MAX => (
            "failure",
            None,
            Some(format!(
                "the step's output of {} bytes (as JSON) exceeds the maximum of \
                 {STEP_OUTPUT_BYTES_MAX} bytes",
                o.len()
            )),
        ),
        output => (outcome, output, error),
    };
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    let Ok(def) = run.def.clone() else {
        return;
    };
    let Some(step_def) = def.step(step) else {
        return;
    };
    let executions = run.step_executions + 1;
    let mut outcome = outcome.to_string();
    let mut next = None;
    if let Some(retry) = &step_def.retry
        && matches!(outcome.as_str(), "failure" | "execution_failure")
        && executions < retry.max_attempts
    {
        let at =
            now.saturating_add(retry.delay_ms(executions, jitter(run.seq ^ u64::from(executions))));
        let in_budget = retry
            .within_ms
            .is_none_or(|w| at.saturating_sub(run.step_first_at_ms) <= w);
        if in_budget {
            next = Some(StepNext::Retry { at_ms: at });
        }
    }
    if next.is_none()
        && outcome == "pending"
        && let Some(poll) = &step_def.poll
    {
        if run.step_polls < poll.max_attempts {
            let delay = poll.delay_ms(
                run.step_polls + 1,
                jitter(run.seq ^ u64::from(run.step_polls)),
            );
            next = Some(StepNext::Poll {
                at_ms: now.saturating_add(delay),
            });
        } else {
            outcome = "timeout".to_string();
        }
    }
    let next = next.unwrap_or_else(|| transition(&def, step_def, step, &outcome));
    let ends = matches!(next, StepNext::End { .. });
    // A retry or poll timer is set by the record's observe.
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        outcome,
        output,
        error,
        consumed_signal,
        next,
        at_ms: now,
    });
    if ends {
        wf_after_end(core, namespace, run_id);
    }
}

/// The run ended: its waiters and its parent hear of it from the agenda.
fn wf_after_end(core: &mut Core, namespace: &str, run_id: &str) {
    core.schedule(Task::WfFinal((namespace.to_string(), run_id.to_string())));
}

/// A run ended: if it is a child, its parent's step finishes (completed → success, else
/// failure) and the parent moves on.
pub fn wf_notify_parent(core: &mut Core, namespace: &str, run_id: &str) {
    let Some(child) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    let Some(parent) = child.parent.clone() else {
        return;
    };
    let (outcome, error) = match child.status {
        WorkflowRunStatus::Completed => ("success", None),
        s => (
            "failure",
            Some(format!(
                "child workflow run {run_id} ended {}{}",
                s.as_str(),
                child
                    .error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )),
        ),
    };
    let output = child
        .output
        .as_ref()
        .map(|v| serde_json::to_vec(v).unwrap_or_default());
    let waiting = core
        .state
        .workflows
        .run(namespace, &parent.run_id)
        .is_some_and(|p| {
            !p.status.is_final()
                && matches!(&p.wait, Some(StepWait::ChildRun { run_id: c }) if c == run_id)
        });
    if !waiting {
        return;
    }
    wf_finish(
        core,
        namespace,
        &parent.run_id,
        &parent.step,
        outcome,
        output,
        error,
        None,
    );
    wf_advance(core, namespace, &parent.run_id);
}

/// An action run became final: the workflow step it executes finishes.
pub fn wf_on_action_final(core: &mut Core, namespace: &str, action_run: &str) {
    let Some(run) = core.state.runs.get(namespace, action_run) else {
        return;
    };
    let Some(step_ref) = run.step.clone() else {
        return;
    };
    let (outcome, output, error) = match run.status {
        RunStatus::Completed => (
            run.outcome.clone().unwrap_or_else(|| "success".to_string()),
            run.output
                .as_ref()
                .map(|o| serde_json::to_vec(&json_value(o)).unwrap_or_default()),
            None,
        ),
        RunStatus::TimedOut => ("timeout".to_string(), None, run.error.clone()),
        RunStatus::Cancelled => (
            "failure".to_string(),
            None,
            Some(format!("action run {action_run} was cancelled")),
        ),
        RunStatus::Failed => ("failure".to_string(), None, run.error.clone()),
        RunStatus::Pending | RunStatus::Running => return,
    };
    let waiting = core
        .state
        .workflows
        .run(namespace, &step_ref.run_id)
        .is_some_and(|w| {
            !w.status.is_final()
                && matches!(&w.wait, Some(StepWait::ActionRun { run_id, .. }) if run_id == action_run)
        });
    if !waiting {
        return;
    }
    wf_finish(
        core,
        namespace,
        &step_ref.run_id,
        &step_ref.step,
        &outcome,
        output,
        error,
        None,
    );
    wf_advance(core, namespace, &step_ref.run_id);
}

/// Retries, polls and signal deadlines that came due (at most `TIMERS_PER_TICK_MAX`;
/// returns whether more may be due).
pub fn wf_fire_timers(core: &mut Core) -> bool {
    let now = core.now_ms();
    let due = core.index.due_workflows(now, TIMERS_PER_TICK_MAX);
    let more = due.len() == TIMERS_PER_TICK_MAX;
    for (namespace, run_id) in due {
        let Some(run) = core.state.workflows.run(&namespace, &run_id) else {
            continue;
        };
        if run.status.is_final() {
            continue;
        }
        match &run.wait {
            Some(StepWait::Signal {
                deadline_ms: Some(deadline),
                ..
            }) if *deadline <= now => wf_signal_timeout(core, &namespace, &run_id),
            None if run.timer_ms.is_some_and(|at| at <= now) => {
                wf_advance(core, &namespace, &run_id)
            }
            _ => {}
        }
    }
    more
}

fn wf_signal_timeout(core: &mut Core, namespace: &str, run_id: &str) {
    let now = core.now_ms();
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    let Ok(def) = run.def.clone() else {
        return;
    };
    let step = run.current_step.clone().unwrap_or_default();
    // `onTimeout`, else a `timeout` transition, else the run times out.
    let on_timeout = def.step(&step).and_then(|s| match &s.action {
        StepAction::WaitForSignal(w) => w
            .on_timeout
            .clone()
            .or_else(|| s.transitions.get("timeout").cloned()),
        StepAction::Run(_) => None,
    });
    let next = match on_timeout.as_deref().and_then(|t| def.resolve(t)) {
        Some(Next::Step(s)) => StepNext::Step(s.to_string()),
        Some(Next::Terminal { name, status }) => StepNext::End {
            terminal: name.to_string(),
            status,
            reason: None,
        },
        None => StepNext::End {
            terminal: "flo.TimedOut".to_string(),
            status: WorkflowRunStatus::TimedOut,
            reason: Some(format!("no signal arrived for step {step:?} in time")),
        },
    };
    let ends = matches!(next, StepNext::End { .. });
    core.commit(Record::WfStepFinished {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step,
        outcome: "timeout".to_string(),
        output: None,
        error: None,
        consumed_signal: None,
        next,
        at_ms: now,
    });
    if ends {
        wf_after_end(core, namespace, run_id);
    } else {
        wf_advance(core, namespace, run_id);
    }
}

/// Runs that are not final (to resume after recovery).
pub fn open_runs(core: &Core) -> Vec<RunKey> {
    core.state
        .workflows
        .all_runs()
        .filter(|(_, _, r)| !r.status.is_final())
        .map(|(ns, id, _)| (ns.to_string(), id.to_string()))
        .collect()
}

/// After recovery: an in-flight run continues where it was (finishes whose records were
/// lost with a crash are taken again; its timers were set again by replay's observe).
pub fn wf_resume(core: &mut Core, namespace: &str, run_id: &str) {
    let Some(run) = core.state.workflows.run(namespace, run_id) else {
        return;
    };
    if run.status.is_final() {
        return;
    }
    match run.wait.clone() {
        Some(StepWait::ActionRun { run_id: action, .. }) => {
            let done = core
                .state
                .runs
                .get(namespace, &action)
                .is_some_and(|r| r.status.is_final());
            if done {
                wf_on_action_final(core, namespace, &action);
            }
        }
        Some(StepWait::ChildRun { run_id: child }) => {
            let done = core
                .state
                .workflows
                .run(namespace, &child)
                .is_some_and(|c| c.status.is_final());
            if done {
                wf_notify_parent(core, namespace, &child);
            }
        }
        Some(StepWait::Signal { .. }) => wf_try_signal(core, namespace, run_id),
        None if run.timer_ms.is_none() => wf_advance(core, namespace, run_id),
        None => {}
    }
}

/// Where `outcome` of `step` leads: the first transition of its fallback chain, else the
/// run fails naming step and outcome.
fn transition(def: &WorkflowDef, step_def: &super::Step, step: &str, outcome: &str) -> StepNext {
    for candidate in outcome_chain(outcome) {
        let Some(target) = step_def.transitions.get(candidate) else {
            continue;
        };
        match def.resolve(target) {
            Some(Next::Step(s)) => return StepNext::Step(s.to_string()),
            Some(Next::Terminal { name, status }) => {
                return StepNext::End {
                    terminal: name.to_string(),
                    status,
                    reason: None,
                };
            }
            None => {
                return StepNext::End {
                    terminal: "flo.Failed".to_string(),
                    status: WorkflowRunStatus::Failed,
                    reason: Some(format!(
                        "step {step:?}: transition {candidate:?} leads to unknown {target:?}"
                    )),
                };
            }
        }
    }
    StepNext::End {
        terminal: "flo.Failed".to_string(),
        status: WorkflowRunStatus::Failed,
        reason: Some(format!(
            "step {step:?} has no transition for outcome {outcome:?}"
        )),
    }
}

fn workflow_info(
    namespace: &str,
    name: &str,
    entry: &crate::fold::workflows::WfEntry,
    v: &crate::fold::workflows::WfVersion,
) -> WorkflowInfo {
    WorkflowInfo {
        namespace: namespace.to_string(),
        name: name.to_string(),
        version: v.version.clone(),
        versions: entry.versions.iter().map(|x| x.version.clone()).collect(),
        enabled: entry.enabled,
        yaml: v.yaml.clone(),
        created_at_ms: v.created_at_ms,
        updated_at_ms: entry.updated_at_ms,
    }
}
