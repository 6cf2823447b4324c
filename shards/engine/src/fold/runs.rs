//! Runs of actions on this shard: created, attempted, completed, failed, cancelled.

use crate::clock::deadline_after;
use crate::fold::record::{ActionDefRecord, Record};
use crate::pages::{self, Pos};
use crate::run_query::{RunFields, RunQuery};
use crate::tables::HashMap;
use flo_protocol::{
    DELAY_MS_ACCEPTED_MAX, ErrorValue, InvokeSpec, RUN_INPUT_BYTES_MAX, RUN_LIST_LIMIT_MAX,
    RunInfo, RunStatus, check_labels,
};

pub const PRIORITY_DEFAULT: u8 = 10;
/// The error code of an attempt that ran out of time (a guest's timeout, a lease expired).
pub const TIMEOUT_CODE: &str = "timeout";
/// Longest invocation delay; one beyond the timer horizon never ends (the run stays
/// pending until cancelled).
pub const DELAY_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Run {
    pub action: String,
    pub action_version: u32,
    pub status: RunStatus,
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub output: Option<Vec<u8>>,
    pub outcome: Option<String>,
    pub error: Option<String>,
    /// Number of the current (or last) attempt, from 1.
    pub attempt: u32,
    pub priority: u8,
    pub labels: Option<String>,
    pub idempotency_key: Option<String>,
    pub dead_lettered: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub available_at_ms: u64,
    /// Creation order on this shard.
    pub seq: u64,
    /// LSN of the last record that changed this run: replies about it wait for it.
    pub lsn: u64,
    /// The worker holding a user-hosted run (status `running`).
    pub lease: Option<Lease>,
    /// The workflow step this run executes.
    pub step: Option<crate::fold::record::StepRef>,
    /// The code of its last failure, if one was given.
    #[serde(default)]
    pub error_code: Option<String>,
    /// A step's run that completed: the fields its worker or guest set in the workflow
    /// run's state (JSON object), for the step's finish.
    #[serde(default, with = "serde_bytes")]
    pub state_patch: Option<Box<[u8]>>,
    /// Its `RunCreated` (which holds its input), and the `RunCompleted` that gave its
    /// output: its archive may point there instead of repeating them. 0: not known (a run
    /// loaded from a snapshot, or brought back by a redrive).
    #[serde(skip)]
    pub created_lsn: u64,
    #[serde(skip)]
    pub output_lsn: u64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub worker_id: String,
    pub expires_at_ms: u64,
}

/// Backoff before attempt `failed_attempt + 1`: `retry_delay_ms × 2^(failed_attempt-1)`.
pub fn retry_delay_ms(base_ms: u64, failed_attempt: u32) -> u64 {
    let exp = failed_attempt.saturating_sub(1).min(30);
    base_ms.saturating_mul(1u64 << exp)
}

/// When the run whose attempt just failed tries again, if its action's policy allows it:
/// `retry_delay_ms × 2^(attempt-1)` after `now_ms`, while `attempt <= max_retries`. A
/// workflow step's run has a single attempt: the step's own `retry:` decides.
pub fn retry_at(
    registry: &super::registry::Registry,
    namespace: &str,
    run: &Run,
    now_ms: u64,
) -> Option<u64> {
    if run.step.is_some() {
        return None;
    }
    let def = registry.get(namespace, &run.action)?;
    (run.attempt <= def.max_retries)
        .then(|| now_ms.saturating_add(retry_delay_ms(def.retry_delay_ms, run.attempt)))
}

/// A page of runs, newest first, and whether more matched.
pub type RunPage<'a> = (Vec<(&'a str, &'a Run)>, bool);

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Runs {
    /// Runs boxed: a table of millions resizes by moving pointers, not whole runs.
    spaces: HashMap<String, HashMap<String, Box<Run>>>,
    /// Last number used in `ACTION-N` run ids, per (namespace, action).
    counters: HashMap<(String, String), u64>,
    next_seq: u64,
}

/// The run id an idempotency key maps to: the same key always gives the same id (and so
/// the same shard).
pub fn idempotent_run_id(action: &str, key: &str) -> String {
    format!("{action}:{key}")
}

pub fn run_not_found(namespace: &str, run_id: &str) -> ErrorValue {
    ErrorValue::not_found(format!(
        "run {run_id:?} not found in namespace {namespace:?}"
    ))
}

impl Runs {
    pub fn get(&self, namespace: &str, run_id: &str) -> Option<&Run> {
        self.spaces.get(namespace)?.get(run_id).map(|r| &**r)
    }

    pub fn require(&self, namespace: &str, run_id: &str) -> Result<&Run, ErrorValue> {
        self.get(namespace, run_id)
            .ok_or_else(|| run_not_found(namespace, run_id))
    }

    /// Runs of `namespace` in memory (in flight, or finished and not yet archived).
    pub fn len_in(&self, namespace: &str) -> usize {
        self.spaces.get(namespace).map_or(0, HashMap::len)
    }

    pub fn len(&self) -> usize {
        self.spaces.values().map(|runs| runs.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Run)> {
        self.spaces.iter().flat_map(|(ns, runs)| {
            runs.iter()
                .map(move |(id, r)| (ns.as_str(), id.as_str(), &**r))
        })
    }

    /// A fresh `ACTION-N` id that `ok` accepts (ids hash to shards; this shard only
    /// hands out ids it owns, so shards never collide).
    pub fn next_run_id(&self, namespace: &str, action: &str, ok: impl Fn(&str) -> bool) -> String {
        let last = self
            .counters
            .get(crate::tables::pair(&(namespace, action)))
            .copied()
            .unwrap_or(0);
        crate::ids::fresh_run_id(last, &[action, "-"], ok)
    }

    /// Validates an invocation and builds its record. `run_id` is the id chosen for it.
    pub fn plan_create(
        &self,
        spec: InvokeSpec,
        def: &ActionDefRecord,
        run_id: String,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        if spec.input.len() > RUN_INPUT_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "input of {} bytes exceeds the maximum of {RUN_INPUT_BYTES_MAX} bytes",
                spec.input.len()
            )));
        }
        let delay = spec.delay_ms.unwrap_or(0);
        if delay > DELAY_MS_MAX {
            return Err(ErrorValue::bad_request(format!(
                "delay must be at most {DELAY_MS_MAX} ms"
            )));
        }
        if let Some(labels) = &spec.labels {
            check_labels(labels)?;
        }
        Ok(Record::RunCreated {
            namespace: spec.namespace,
            run_id,
            action: spec.action,
            action_version: def.version,
            input: spec.input,
            priority: spec.priority.unwrap_or(PRIORITY_DEFAULT),
            labels: spec.labels,
            idempotency_key: spec.idempotency_key,
            created_at_ms: now_ms,
            // Beyond the horizon: never available.
            available_at_ms: deadline_after(now_ms, delay).unwrap_or(u64::MAX),
            step: None,
        })
    }

    pub fn plan_cancel(
        &self,
        namespace: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        let run = self.require(namespace, run_id)?;
        if run.status.is_final() {
            return Err(ErrorValue::conflict(format!(
                "run {run_id:?} is already {}; only pending or running runs can be cancelled",
                run.status.as_str()
            )));
        }
        Ok(Record::RunCancelled {
            namespace: namespace.into(),
            run_id: run_id.into(),
            at_ms: now_ms,
        })
    }

    /// A redrive of the run in memory (`RunRedrive`): see `plan_redrive`.
    pub fn plan_redrive_live(
        &self,
        registry: &super::registry::Registry,
        namespace: &str,
        run_id: &str,
        action: Option<&str>,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        let run = self.require(namespace, run_id)?;
        let info = run_info(namespace, run_id, run, false);
        plan_redrive(registry, &info, action, None, now_ms)
    }

    /// Runs of `action` (empty: of every action) matching `query` after `from` (see
    /// `pages`), newest first.
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        namespace: &str,
        action: &str,
        status: Option<RunStatus>,
        dead_letter: bool,
        query: Option<&RunQuery>,
        limit: u32,
        from: &Pos,
    ) -> Result<RunPage<'_>, ErrorValue> {
        if limit == 0 || limit > RUN_LIST_LIMIT_MAX {
            return Err(ErrorValue::bad_request(format!(
                "limit must be 1 to {RUN_LIST_LIMIT_MAX}, got {limit}"
            )));
        }
        let Some(space) = self.spaces.get(namespace) else {
            return Ok((Vec::new(), false));
        };
        let out: Vec<(&str, &Run)> = space
            .iter()
            .filter(|(_, r)| action.is_empty() || r.action == action)
            .filter(|(_, r)| status.is_none_or(|s| r.status == s))
            .filter(|(_, r)| !dead_letter || r.dead_lettered)
            .filter(|(id, r)| from.live_after(r.created_at_ms, id))
            .filter(|(id, r)| query.is_none_or(|q| q.matches(&fields(id, r))))
            .map(|(id, r)| (id.as_str(), &**r))
            .collect();
        Ok(pages::newest(out, limit as usize, |(id, r)| {
            (r.created_at_ms, id)
        }))
    }

    pub fn apply_created(&mut self, namespace: String, run_id: String, run: Run) {
        if let Some(n) = run_id
            .strip_prefix(run.action.as_str())
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|n| n.parse::<u64>().ok())
        {
            let counter = self
                .counters
                .entry((namespace.clone(), run.action.clone()))
                .or_insert(0);
            *counter = (*counter).max(n);
        }
        self.spaces
            .entry(namespace)
            .or_default()
            .insert(run_id, Box::new(run));
    }

    /// Whether `run_id` is an `ACTION-N` id this shard handed out (a run that existed).
    pub fn was_issued(&self, namespace: &str, run_id: &str) -> bool {
        let Some((action, n)) = run_id.rsplit_once('-') else {
            return false;
        };
        let Ok(n) = n.parse::<u64>() else {
            return false;
        };
        self.counters
            .get(crate::tables::pair(&(namespace, action)))
            .is_some_and(|&last| n <= last)
    }

    /// Drops a run (archived).
    pub fn remove(&mut self, namespace: &str, run_id: &str) -> Option<Box<Run>> {
        self.spaces.get_mut(namespace)?.remove(run_id)
    }

    pub fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    pub fn get_mut(&mut self, namespace: &str, run_id: &str) -> Option<&mut Run> {
        self.spaces
            .get_mut(namespace)?
            .get_mut(run_id)
            .map(|r| &mut **r)
    }
}

/// The record that queues the dead-lettered run `info` again as a new attempt, if it may be
/// (`archived`: it left memory, and this is its document). Refused: another action's run
/// (`action`), a workflow step's (its workflow decides retries), a run not dead-lettered,
/// an action no longer registered or disabled.
pub fn plan_redrive(
    registry: &super::registry::Registry,
    info: &RunInfo,
    action: Option<&str>,
    archived: Option<RunInfo>,
    now_ms: u64,
) -> Result<Record, ErrorValue> {
    let id = &info.run_id;
    if let Some(action) = action
        && action != info.action
    {
        return Err(ErrorValue::bad_request(format!(
            "run {id:?} is a run of action {:?}, not {action:?}",
            info.action
        )));
    }
    if let Some(wf) = &info.workflow_run_id {
        return Err(ErrorValue::conflict(format!(
            "run {id:?} executed a step of workflow run {wf:?}: the step's retry: policy \
             decides about retries, it cannot be redriven"
        )));
    }
    if !info.dead_lettered {
        return Err(ErrorValue::conflict(format!(
            "run {id:?} is {} and not dead-lettered; only dead-lettered runs (failed or timed \
             out after their retries) can be redriven",
            info.status.as_str()
        )));
    }
    registry.invocable(&info.namespace, &info.action)?;
    Ok(Record::RunRedriven {
        namespace: info.namespace.clone(),
        run_id: id.clone(),
        attempt: info.attempt.saturating_add(1),
        at_ms: now_ms,
        archived: archived.map(Box::new),
    })
}

/// A run's fields as a query reads them.
fn fields<'a>(run_id: &'a str, run: &'a Run) -> RunFields<'a> {
    RunFields {
        run_id,
        action: &run.action,
        status: run.status,
        created_at_ms: run.created_at_ms,
        updated_at_ms: run.updated_at_ms,
        attempt: run.attempt,
        priority: run.priority,
        dead_lettered: run.dead_lettered,
        workflow_run_id: run.step.as_ref().map(|s| s.run_id.as_str()),
        outcome: run.outcome.as_deref(),
        labels: run.labels.as_deref(),
    }
}

pub fn run_info(namespace: &str, run_id: &str, run: &Run, running: bool) -> RunInfo {
    let mut info = run_info_leaving_out(namespace, run_id, run, (false, false));
    if running && run.status == RunStatus::Pending {
        info.status = RunStatus::Running;
    }
    info
}

/// The run's document for its archive record, without its input and/or output (`bare`:
/// left out, as the log holds them already: `archived::Refs::action_left_out`).
pub fn run_info_leaving_out(
    namespace: &str,
    run_id: &str,
    run: &Run,
    (bare_input, bare_output): (bool, bool),
) -> RunInfo {
    RunInfo {
        run_id: run_id.into(),
        namespace: namespace.into(),
        action: run.action.clone(),
        action_version: run.action_version,
        status: run.status,
        input: if bare_input {
            Vec::new()
        } else {
            run.input.clone()
        },
        output: if bare_output {
            None
        } else {
            run.output.clone()
        },
        outcome: run.outcome.clone(),
        error: run.error.clone(),
        attempt: run.attempt,
        priority: run.priority,
        labels: run.labels.clone(),
        idempotency_key: run.idempotency_key.clone(),
        dead_lettered: run.dead_lettered,
        workflow_run_id: run.step.as_ref().map(|s| s.run_id.clone()),
        created_at_ms: run.created_at_ms,
        updated_at_ms: run.updated_at_ms,
        available_at_ms: run.available_at_ms,
        error_code: run.error_code.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_attempt() {
        assert_eq!(retry_delay_ms(1000, 1), 1000);
        assert_eq!(retry_delay_ms(1000, 2), 2000);
        assert_eq!(retry_delay_ms(1000, 3), 4000);
        assert_eq!(retry_delay_ms(u64::MAX, 90), u64::MAX);
    }
}
