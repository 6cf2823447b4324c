//! Tasks of user-hosted actions on the shard that owns their runs: leasing queued tasks to
//! workers, their reports (complete, fail, touch), lease expiry and release. Each change
//! is a record committed through `Core::commit` (whose `observe` queues and times runs).

use super::registry::labels_match;
use crate::core::io::DiskSpace;
use crate::core::{Core, Task};
use crate::fold::archive::RunKind;
use crate::fold::record::{LeasedTask, Record};
use crate::fold::runs::{Run, TIMEOUT_CODE, retry_at};
use crate::fold::scheduler::ActionKey;
use crate::tables::HashSet;
use flo_protocol::{
    ACTION_NAME_BYTES_MAX, ErrorValue, LEASE_EXTEND_MS_MAX, RunStatus, TaskAssignment,
};
use serde_json::{Map, Value};

/// Queue entries one lease may look at (bounds the work when labels exclude many tasks).
pub const LEASE_SCAN_MAX: usize = 4096;
/// Payload bytes one lease batch may carry (at least one task, whatever its size): the
/// assignments of an await must fit in one reply frame.
pub const LEASE_BATCH_BYTES_MAX: usize = 1 << 20;
/// Longest error text kept from a worker's failure report.
pub const TASK_ERROR_BYTES_MAX: usize = 16 << 10;
/// Lease length when the action's definition is gone.
const LEASE_MS_FALLBACK: u64 = 30_000;

/// What a worker asks for.
pub struct WantSpec<'a> {
    pub namespace: &'a str,
    pub worker_id: &'a str,
    pub actions: &'a [String],
    pub labels: Option<&'a Map<String, Value>>,
    pub max: usize,
}

/// Names the leased task a worker reports on.
pub struct TaskReport<'a> {
    pub namespace: &'a str,
    pub worker_id: &'a str,
    pub task_id: &'a str,
    pub action: &'a str,
    pub attempt: Option<u32>,
}

/// What a failure report did.
pub struct Failed {
    pub lsn: u64,
    /// The run is final (failed); otherwise it waits for another attempt.
    pub is_final: bool,
}

/// Leases up to `want.max` queued tasks of `want.actions` (highest priority first, then
/// oldest) whose labels the worker satisfies. Returns the assignments and the LSN of
/// the lease record (0 when none). A shard whose disk is full leases nothing: the worker
/// could not report on the task here; wants stay parked until space returns.
pub fn lease_tasks(core: &mut Core, want: &WantSpec, now_ms: u64) -> (Vec<TaskAssignment>, u64) {
    if core.disk() == DiskSpace::Full {
        return (Vec::new(), 0);
    }
    let keys: Vec<ActionKey> = want
        .actions
        .iter()
        .map(|a| (want.namespace.to_string(), a.clone()))
        .collect();
    let mut chosen: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::default();
    let mut skipped = Vec::new();
    let mut scanned = 0;
    let mut bytes = 0;
    while chosen.len() < want.max && scanned < LEASE_SCAN_MAX && bytes < LEASE_BATCH_BYTES_MAX {
        let best = keys
            .iter()
            .filter_map(|k| core.index_mut().runs.peek_user(k).map(|e| (k, (e.0, e.1))))
            .max_by_key(|(_, order)| *order)
            .map(|(k, _)| k.clone());
        let Some(key) = best else {
            break;
        };
        let entry = core.index_mut().runs.pop_user(&key).expect("peeked");
        scanned += 1;
        let Some(run) = core.state().runs.get(want.namespace, &entry.2) else {
            continue;
        };
        if run.status != RunStatus::Pending || seen.contains(&entry.2) {
            continue;
        }
        if !labels_match(run.labels.as_deref(), want.labels) {
            skipped.push((key, entry));
            continue;
        }
        if !chosen.is_empty() && bytes + run.input.len() > LEASE_BATCH_BYTES_MAX {
            skipped.push((key, entry));
            break;
        }
        bytes += run.input.len();
        seen.insert(entry.2.clone());
        chosen.push(entry.2);
    }
    for (key, entry) in skipped {
        core.index_mut().runs.push_user(key, entry);
    }
    if chosen.is_empty() {
        return (Vec::new(), 0);
    }
    // Each lease and its assignment, as the lease record leaves the run (its attempt is
    // the one leased; nothing else the assignment says changes).
    let (tasks, assignments): (Vec<LeasedTask>, Vec<TaskAssignment>) = chosen
        .into_iter()
        .map(|run_id| {
            let state = core.state();
            let run = state.runs.get(want.namespace, &run_id).expect("chosen");
            // A workflow step's `timeoutMs` is its task's lease.
            let lease_ms = state
                .step_timeout_ms(want.namespace, run.step.as_ref())
                .or_else(|| {
                    let def = state.registry.get(want.namespace, &run.action);
                    def.map(|d| d.timeout_ms)
                })
                .unwrap_or(LEASE_MS_FALLBACK);
            let expires_at_ms = now_ms.saturating_add(lease_ms);
            let assignment = TaskAssignment {
                task_id: run_id.clone(),
                action: run.action.clone(),
                namespace: want.namespace.to_string(),
                payload: run.input.clone(),
                attempt: run.attempt,
                priority: run.priority,
                created_at_ms: run.created_at_ms,
                lease_expires_at_ms: expires_at_ms,
                state: state.step_run_state(want.namespace, run.step.as_ref()),
            };
            let lease = LeasedTask {
                attempt: run.attempt,
                expires_at_ms,
                run_id,
            };
            (lease, assignment)
        })
        .unzip();
    core.counts_mut().tasks_leased += tasks.len() as u64;
    let lsn = core.commit(Record::TasksLeased {
        namespace: want.namespace.to_string(),
        worker_id: want.worker_id.to_string(),
        tasks,
        at_ms: now_ms,
    });
    (assignments, lsn)
}

/// The run a report is about, if `r.worker_id` holds its current lease.
fn leased_run<'a>(core: &'a Core, r: &TaskReport, now_ms: u64) -> Result<&'a Run, ErrorValue> {
    let id = r.task_id;
    let Some(run) = core.state().runs.get(r.namespace, id) else {
        // Finished and archived: say how it ended.
        if let Some(e) = core.state().archived(RunKind::Action, r.namespace, id) {
            return Err(ErrorValue::conflict(format!(
                "task {id:?} is already {}; there is nothing to report",
                crate::fold::archived::action_status(e.status).as_str()
            )));
        }
        return Err(crate::fold::runs::run_not_found(r.namespace, id));
    };
    if run.action != r.action {
        return Err(ErrorValue::bad_request(format!(
            "task {id:?} is a task of action {:?}, not {:?}",
            run.action, r.action
        )));
    }
    if run.status.is_final() {
        return Err(ErrorValue::conflict(format!(
            "task {id:?} is already {}; there is nothing to report",
            run.status.as_str()
        )));
    }
    let Some(lease) = &run.lease else {
        return Err(ErrorValue::conflict(format!(
            "task {id:?} is not leased to any worker (it is pending, attempt {}); only \
                 the worker holding its lease can report on it",
            run.attempt
        )));
    };
    if lease.worker_id != r.worker_id {
        // Not who holds it: a worker learns nothing of another's tasks from a refusal.
        return Err(ErrorValue::conflict(format!(
            "task {id:?} is not leased to worker {:?}; only the worker holding its lease \
             can report on it",
            r.worker_id
        )));
    }
    if let Some(attempt) = r.attempt
        && attempt != run.attempt
    {
        return Err(ErrorValue::conflict(format!(
            "task {id:?} is on attempt {} now; this report for attempt {attempt} is stale",
            run.attempt
        )));
    }
    if lease.expires_at_ms <= now_ms {
        return Err(ErrorValue::conflict(format!(
            "the lease of task {id:?} expired at {} ms (now {now_ms} ms); the attempt \
                 counts as failed and the task will be retried (use touch to extend a lease)",
            lease.expires_at_ms
        )));
    }
    Ok(run)
}

/// A worker completed its leased task: returns the LSN to wait for.
pub fn complete_task(
    core: &mut Core,
    r: &TaskReport,
    (result, outcome, state): (Vec<u8>, Option<String>, Option<Vec<u8>>),
    now_ms: u64,
) -> Result<u64, ErrorValue> {
    if let Some(o) = &outcome
        && (o.is_empty() || o.len() > ACTION_NAME_BYTES_MAX)
    {
        return Err(ErrorValue::bad_request(format!(
            "outcome name must be 1 to {ACTION_NAME_BYTES_MAX} bytes"
        )));
    }
    let run = leased_run(core, r, now_ms)?;
    let (state_patch, kv_writes) = match (state, &run.step) {
        (None, _) => (None, Vec::new()),
        (Some(_), None) => {
            return Err(ErrorValue::bad_request(format!(
                "task {:?} is not a workflow step's: it has no run state to update (complete \
                 it without a state)",
                r.task_id
            )));
        }
        (Some(patch), Some(step)) => {
            let patch = check_state_patch(patch)?;
            core.state()
                .scoped_patch(r.namespace, step, &patch)
                .map_err(ErrorValue::bad_request)?
        }
    };
    let record = Record::RunCompleted {
        namespace: r.namespace.to_string(),
        run_id: r.task_id.to_string(),
        attempt: run.attempt,
        action_version: run.action_version,
        output: result,
        outcome,
        kv_writes,
        at_ms: now_ms,
        state_patch,
    };
    Ok(core.commit(record))
}

/// A worker's state patch: a JSON object within a run's state limit.
fn check_state_patch(patch: Vec<u8>) -> Result<Vec<u8>, ErrorValue> {
    use flo_workflow::state::STATE_BYTES_MAX;
    if patch.len() > STATE_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "the state given is {} bytes; a run's state is at most {STATE_BYTES_MAX}",
            patch.len()
        )));
    }
    match serde_json::from_slice::<serde_json::Value>(&patch) {
        Ok(serde_json::Value::Object(_)) => Ok(patch),
        _ => Err(ErrorValue::bad_request(
            "the state given with a completion must be a JSON object of names and values \
             (merged into the run's state)",
        )),
    }
}

/// How a worker says its task failed.
pub struct TaskFailure {
    pub error: String,
    /// A code naming the error (an inline plan's `errors:` classify it).
    pub error_code: Option<String>,
    /// Another attempt after backoff while retries remain.
    pub retry: bool,
    /// Failed at once, not dead-lettered.
    pub non_retryable: bool,
}

/// Longest error code.
pub const ERROR_CODE_BYTES_MAX: usize = 128;

/// A worker failed its leased task: another attempt after backoff (`retry` while
/// retries remain), else final: dead-lettered unless `non_retryable`.
pub fn fail_task(
    core: &mut Core,
    r: &TaskReport,
    failure: TaskFailure,
    now_ms: u64,
) -> Result<Failed, ErrorValue> {
    let TaskFailure {
        error,
        error_code,
        retry,
        non_retryable,
    } = failure;
    if let Some(code) = &error_code
        && (code.is_empty()
            || code.len() > ERROR_CODE_BYTES_MAX
            || code.chars().any(char::is_control))
    {
        return Err(ErrorValue::bad_request(format!(
            "an error code is 1 to {ERROR_CODE_BYTES_MAX} bytes without control characters"
        )));
    }
    let run = leased_run(core, r, now_ms)?;
    let (attempt, version) = (run.attempt, run.action_version);
    let error = truncate(&error, TASK_ERROR_BYTES_MAX);
    let retry_at_ms = (retry && !non_retryable)
        .then(|| retry_at(&core.state().registry, r.namespace, run, now_ms))
        .flatten();
    let lsn = core.commit(Record::AttemptFailed {
        namespace: r.namespace.to_string(),
        run_id: r.task_id.to_string(),
        attempt,
        action_version: version,
        error,
        timed_out: false,
        retry_at_ms,
        at_ms: now_ms,
        dead_letter: !non_retryable,
        error_code,
    });
    Ok(Failed {
        lsn,
        is_final: retry_at_ms.is_none(),
    })
}

/// Extends a lease to `extend_ms` from now (never shortens it); returns the new
/// expiry and the LSN to wait for.
pub fn touch_task(
    core: &mut Core,
    r: &TaskReport,
    extend_ms: u64,
    now_ms: u64,
) -> Result<(u64, u64), ErrorValue> {
    if extend_ms == 0 || extend_ms > LEASE_EXTEND_MS_MAX {
        return Err(ErrorValue::bad_request(format!(
            "extend must be 1 to {LEASE_EXTEND_MS_MAX} ms, got {extend_ms}"
        )));
    }
    let run = leased_run(core, r, now_ms)?;
    let current = run.lease.as_ref().map_or(0, |l| l.expires_at_ms);
    let wanted = now_ms.saturating_add(extend_ms);
    if wanted <= current {
        return Ok((current, run.lsn));
    }
    let lsn = core.commit(Record::LeaseExtended {
        namespace: r.namespace.to_string(),
        run_id: r.task_id.to_string(),
        expires_at_ms: wanted,
    });
    Ok((wanted, lsn))
}

/// Fails the attempts whose lease expired (a final one moves its run's step on).
pub fn expire_leases(core: &mut Core) {
    let now_ms = core.now_ms();
    for (namespace, run_id) in core.index_mut().runs.due_leases(now_ms) {
        let Some(run) = core.state().runs.get(&namespace, &run_id) else {
            continue;
        };
        let Some(lease) = &run.lease else {
            continue;
        };
        if run.status != RunStatus::Running || lease.expires_at_ms > now_ms {
            continue;
        }
        let (attempt, version) = (run.attempt, run.action_version);
        let error = format!(
            "lease expired: worker {:?} did not report attempt {attempt} in time",
            lease.worker_id
        );
        let retry_at_ms = retry_at(&core.state().registry, &namespace, run, now_ms);
        core.counts_mut().leases_expired += 1;
        core.commit(Record::AttemptFailed {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            attempt,
            action_version: version,
            error,
            timed_out: true,
            retry_at_ms,
            at_ms: now_ms,
            dead_letter: true,
            error_code: Some(TIMEOUT_CODE.to_string()),
        });
        if retry_at_ms.is_none() {
            core.schedule(Task::ActionFinal((namespace, run_id)));
        }
    }
}

/// Hands leased tasks back unstarted (pending again, same attempt); returns the LSN.
pub fn release_tasks(
    core: &mut Core,
    namespace: &str,
    worker_id: &str,
    run_ids: Vec<String>,
) -> u64 {
    let now_ms = core.now_ms();
    let run_ids: Vec<String> = run_ids
        .into_iter()
        .filter(|id| {
            core.state().runs.get(namespace, id).is_some_and(|r| {
                r.status == RunStatus::Running
                    && r.lease.as_ref().is_some_and(|l| l.worker_id == worker_id)
            })
        })
        .collect();
    if run_ids.is_empty() {
        return 0;
    }
    core.commit(Record::LeasesReleased {
        namespace: namespace.to_string(),
        run_ids,
        at_ms: now_ms,
    })
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
