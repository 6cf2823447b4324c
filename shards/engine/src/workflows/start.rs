//! Starting a run on the shard that owns its id: the definition and version, the input, the
//! run id (a new `wfrun-N`, the caller's, or one an idempotency key derives), then the first
//! steps.

use super::advance::advance;
use super::definitions::find_entry;
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::archive::{RunKind, name_tag};
use crate::fold::record::Record;
use crate::fold::schedules::{SCHEDULED_RUN_ID_PREFIX, ScheduledBy};
use crate::fold::workflows::GENERATED_RUN_ID_PREFIX;
use crate::ids::run_id_taken;
use flo_protocol::check_namespace;
use flo_protocol::{
    ErrorValue, IDEMPOTENCY_KEY_BYTES_MAX, RUN_ID_BYTES_MAX, RUN_INPUT_BYTES_MAX, Reply,
    WorkflowStartSpec,
};
use flo_workflow::Idempotency;
use serde_json::Value;

/// The prefix of the ids idempotency keys map to (reserved: callers cannot choose them).
const IDEMPOTENT_RUN_ID_PREFIX: &str = "wfrun:";

/// The id an idempotency key maps to (the same key always reaches the same shard).
pub fn idempotent_workflow_run_id(workflow: &str, key: &str) -> String {
    format!("{IDEMPOTENT_RUN_ID_PREFIX}{workflow}:{key}")
}

/// A run id chosen by the caller: 1 to `RUN_ID_BYTES_MAX` ASCII letters, digits, `-`, `_`,
/// `.`, `:`, not starting with `wfrun:` (the ids idempotency keys map to) nor of the form
/// `wfrun-N` (the ids the server hands out).
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
    if let Some(n) = id.strip_prefix(GENERATED_RUN_ID_PREFIX)
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(ErrorValue::bad_request(format!(
            "run id {id:?} is invalid: ids {GENERATED_RUN_ID_PREFIX}N are handed out by the \
             server to runs started without one; choose another id"
        )));
    }
    if id.starts_with(SCHEDULED_RUN_ID_PREFIX) {
        return Err(ErrorValue::bad_request(format!(
            "run id {id:?} is invalid: ids starting with {SCHEDULED_RUN_ID_PREFIX:?} are \
             reserved for the runs schedules start"
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

/// Longest `--group` name.
pub const GROUP_BYTES_MAX: usize = 128;

/// What a start did, or what it needs first.
// Nearly every start is `Done`, returned by value: boxing it would allocate on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Started {
    Done(Done),
    /// The caller's run id names an archived run of this workflow and the start carries
    /// an idempotency key: whether it is that run's repeat is in its archived document
    /// (read it with `Want::WfStartRepeat`).
    CheckArchived {
        run_id: String,
        workflow: String,
        key: String,
    },
}

/// Starts a run on this shard (the caller routed it here) and advances it.
pub fn start(core: &mut Core, spec: WorkflowStartSpec) -> Started {
    start_as(core, spec, None)
}

/// `start`, for a run a schedule fires: `by` goes into its start record, which fires the
/// tick. Its id (`sched:…`, reserved) is the schedule's to choose.
pub fn start_scheduled(core: &mut Core, spec: WorkflowStartSpec, by: ScheduledBy) -> Started {
    start_as(core, spec, Some(by))
}

fn start_as(core: &mut Core, spec: WorkflowStartSpec, schedule: Option<ScheduledBy>) -> Started {
    let now = core.now_ms();
    if let Some(group) = &spec.group
        && (group.is_empty() || group.len() > GROUP_BYTES_MAX || group.contains('/'))
    {
        return Started::Done(Done::now(Err(ErrorValue::bad_request(format!(
            "group {group:?} is invalid: a group is 1 to {GROUP_BYTES_MAX} bytes without '/'"
        )))));
    }
    if let Some(url) = &spec.webhook
        && let Err(why) = flo_workflow::webhook::check_webhook_url(url)
    {
        return Started::Done(Done::now(Err(ErrorValue::bad_request(why))));
    }
    let planned = plan_start(core, &spec, schedule.is_some());
    let PlannedStart {
        run_id,
        version,
        idempotency_key,
    } = match planned {
        Ok(Ok(v)) => v,
        Ok(Err(Repeat::Archived { run_id, key })) => {
            return Started::CheckArchived {
                run_id,
                workflow: spec.name,
                key,
            };
        }
        Ok(Err(Repeat::Found(existing))) => {
            let lsn = core
                .state()
                .workflows
                .run(&spec.namespace, &existing)
                .map(|r| r.lsn)
                .or_else(|| {
                    core.state()
                        .archived(RunKind::Workflow, &spec.namespace, &existing)
                        .map(|e| e.lsn)
                })
                .unwrap_or(0);
            return Started::Done(Done {
                result: Ok(Reply::WorkflowStarted {
                    run_id: existing,
                    created: false,
                }),
                wait_lsn: lsn,
            });
        }
        Err(e) => return Started::Done(Done::now(Err(e))),
    };
    if let Err(e) = core.check_live_runs(&spec.namespace) {
        return Started::Done(Done::now(Err(e)));
    }
    core.commit(Record::WfRunStarted {
        namespace: spec.namespace.clone(),
        run_id: run_id.clone(),
        workflow: spec.name,
        version,
        input: spec.input,
        idempotency_key,
        parent: None,
        at_ms: now,
        schedule,
        group: spec.group,
        webhook: spec.webhook,
    });
    advance(core, &spec.namespace, &run_id);
    Started::Done(Done {
        result: Ok(Reply::WorkflowStarted {
            run_id,
            created: true,
        }),
        wait_lsn: core.last_lsn(),
    })
}

/// A start that is the repeat of an existing run.
enum Repeat {
    /// This run (live, or archived under an id a key derives).
    Found(String),
    /// An archived run with the caller's id, which may be the repeat (its document says).
    Archived { run_id: String, key: String },
}

/// What a start creates.
struct PlannedStart {
    run_id: String,
    version: String,
    /// The key kept with the run (when the definition uses idempotency keys).
    idempotency_key: Option<String>,
}

/// The run a start creates, or `Ok(Err(_))` for an idempotent repeat.
fn plan_start(
    core: &Core,
    spec: &WorkflowStartSpec,
    scheduled: bool,
) -> Result<Result<PlannedStart, Repeat>, ErrorValue> {
    check_namespace(&spec.namespace)?;
    let entry = find_entry(core, &spec.namespace, &spec.name)?;
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
        if !scheduled {
            check_run_id(id)?;
        }
        if let Some(e) = core
            .state()
            .archived(RunKind::Workflow, &spec.namespace, id)
        {
            // Finished and archived: its key is in the log, not in memory. A start of
            // another workflow (by the index's tag) is refused at once; with a key, the
            // archived document says whether it is the repeat.
            let status = crate::fold::archived::workflow_status(e.status);
            let same_workflow = e.name_tag == name_tag(&spec.namespace, &spec.name);
            return match key {
                Some(key) if same_workflow => Ok(Err(Repeat::Archived {
                    run_id: id.clone(),
                    key,
                })),
                _ => Err(ErrorValue::conflict(format!(
                    "workflow run {id:?} exists already ({}); choose another run id, or \
                     start with its idempotency key to get that run back",
                    status.as_str()
                ))),
            };
        }
        let Some(existing) = core.state().workflows.run(&spec.namespace, id) else {
            return Ok(Ok(planned(id.clone(), key)));
        };
        if key.is_some() && existing.idempotency_key == key && existing.workflow == spec.name {
            return Ok(Err(Repeat::Found(id.clone())));
        }
        return Err(run_id_taken(
            id,
            &existing.workflow,
            existing.status().as_str(),
        ));
    }
    if let Some(key) = key {
        let id = idempotent_workflow_run_id(&spec.name, &key);
        let archived = core
            .state()
            .archived(RunKind::Workflow, &spec.namespace, &id);
        if core.state().workflows.run(&spec.namespace, &id).is_some() || archived.is_some() {
            return Ok(Err(Repeat::Found(id)));
        }
        return Ok(Ok(planned(id, Some(key))));
    }
    let state = core.state();
    let id = state.workflows.next_run_id(&spec.namespace, |id| {
        state.owns(&spec.namespace, id) && state.run_id_free(RunKind::Workflow, &spec.namespace, id)
    });
    Ok(Ok(planned(id, None)))
}
