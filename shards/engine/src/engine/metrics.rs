//! What the engine counts for the server's metrics, read by the runtime about once a
//! second (`Engine::gauges`, `Engine::runs_ended`, `Engine::counts`): numbers the shard
//! already keeps, the runs that became final here since the process started, and what the
//! handlers counted (`core::Counts`). Counting costs a few additions per run that ends;
//! nothing here is durable or decides anything.

use super::Engine;
use crate::core::Counts;
use crate::core::io::DiskSpace;
use crate::fold::state::ShardState;
use flo_protocol::{RunStatus, WorkflowRunStatus};
use std::collections::{BTreeMap, HashMap};

/// Upper bounds (ms) of the buckets of a run's time from created to final; one more bucket
/// holds the longer ones.
pub const RUN_LATENCY_BOUNDS_MS: [u64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000, 600_000, 3_600_000,
];

/// Action and workflow names counted apart per kind and shard; the runs of any name beyond
/// are counted under `RunsEnded::OTHER_NAME` (names are the users', their number unbounded).
pub const RUN_NAMES_MAX: usize = 100;

/// The final statuses a run ends in, in the order of `RunsEnded::counts`.
pub const FINAL_STATUSES: [&str; 4] = ["completed", "failed", "cancelled", "timed_out"];

/// The kinds of run, in the order of `RunsEnded::counts`.
pub const RUN_KINDS: [&str; 2] = ["action", "workflow"];
const ACTION: usize = 0;
const WORKFLOW: usize = 1;

/// Runs that became final on this shard since the process started (a restart starts again
/// from zero, as Prometheus counters may).
#[derive(Debug, Clone, Default)]
pub struct RunsEnded {
    /// By kind (`RUN_KINDS`), then final status (`FINAL_STATUSES`).
    pub counts: [[u64; 4]; 2],
    /// By kind: runs per bucket of `RUN_LATENCY_BOUNDS_MS` (the last: beyond them), and the
    /// sum of their times (ms).
    pub latency: [[u64; RUN_LATENCY_BOUNDS_MS.len() + 1]; 2],
    pub latency_sum_ms: [u64; 2],
    /// By kind and action or workflow name (at most `RUN_NAMES_MAX` per kind, then
    /// `OTHER_NAME`): counts by final status.
    pub by_name: [HashMap<String, [u64; 4]>; 2],
}

impl RunsEnded {
    /// The name the runs of names beyond `RUN_NAMES_MAX` are counted under.
    pub const OTHER_NAME: &'static str = "_other";

    fn note(&mut self, kind: usize, name: &str, status: usize, latency_ms: u64) {
        self.counts[kind][status] += 1;
        let bucket = RUN_LATENCY_BOUNDS_MS.partition_point(|&b| b < latency_ms);
        self.latency[kind][bucket] += 1;
        self.latency_sum_ms[kind] += latency_ms;
        let names = &mut self.by_name[kind];
        if let Some(counts) = names.get_mut(name) {
            counts[status] += 1;
            return;
        }
        let name = match names.len() < RUN_NAMES_MAX {
            true => name,
            false => Self::OTHER_NAME,
        };
        names.entry(name.to_string()).or_default()[status] += 1;
    }
}

/// (stream, group) pairs counted apart per shard; the groups beyond are summed under
/// `GroupDepth::OTHER` (names are the users', their number unbounded).
pub const STREAM_GROUPS_MAX: usize = 100;

/// Runs in memory the census by status looks at, at most, per kind and publication: the
/// shard pauses for it, 5 to 25 ns a run (a pointer chased per run; the more runs, the
/// fewer in the cache): 0.05 to 0.08 ms at this bound, 0.25 to 0.65 ms at 25,000, 1.2 ms
/// at 50,000 (`census_cost` in `tests/metrics_numbers.rs`). With more, that kind is not
/// counted by status.
pub const RUNS_CENSUS_MAX: usize = 10_000;

/// The statuses a run in memory may have, in the order of `Gauges::runs_by_status` (an
/// action run is never `waiting` nor `on_hold`).
pub const LIVE_STATUSES: [&str; 8] = [
    "pending",
    "running",
    "waiting",
    "on_hold",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
];

/// A consumer group's records on this shard's partitions: delivered and not acked
/// (`pending`), and not yet delivered (`lag`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupDepth {
    pub stream: String,
    pub group: String,
    pub pending: u64,
    pub lag: u64,
}

impl GroupDepth {
    /// The stream and group name the groups beyond `STREAM_GROUPS_MAX` are summed under.
    pub const OTHER: &'static str = "_other";
}

/// Numbers the shard keeps anyway, as of now: what `flo status` shows and the depths of its
/// queues held outside the fold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    pub last_lsn: u64,
    pub durable_lsn: u64,
    pub segments: u32,
    /// Bytes of log segments and snapshots on disk.
    pub disk_bytes: u64,
    pub disk_full: bool,
    /// The newest snapshot's LSN (0: none) and when it was written (wall clock, ms).
    pub snapshot_lsn: u64,
    pub snapshot_at_ms: u64,
    pub kv_keys: u64,
    /// Runs in memory (not archived yet).
    pub action_runs: u64,
    pub workflow_runs: u64,
    /// Finished runs retained, found through the run index.
    pub archived_runs: u64,
    /// WebAssembly executions in progress, and the slots the shard has for them.
    pub executions: u64,
    pub wasm_slots: u64,
    /// Clients waiting for a run to become final.
    pub run_waits: u64,
    /// KV reads parked until their key is written.
    pub kv_waits: u64,
    /// Webhook deliveries waiting for an attempt (or in flight), and given up on (kept).
    pub webhooks_pending: u64,
    pub webhooks_failed: u64,
    /// Worker awaits open on this shard (the workers' home).
    pub awaits: u64,
    /// Workers homed here, by status (`WorkerStatus` order: active, idle, draining,
    /// unhealthy).
    pub workers: [u64; 4],
    pub stream_records: u64,
    pub stream_bytes: u64,
    /// Entries of the action runs' queues (stale ones included: a run cancelled while
    /// queued keeps its entry until popped): WASM runs and workflow steps waiting for a
    /// slot, user tasks waiting for a worker.
    pub wasm_ready: u64,
    pub tasks_ready: u64,
    /// Timers set: pending runs not yet due (delays, retries), leases of tasks out,
    /// workflow timers (retries, polls, signal deadlines; one whose run moved on stays
    /// until it comes due).
    pub delayed_runs: u64,
    pub leases: u64,
    pub workflow_timers: u64,
    /// Runs in memory by kind (`RUN_KINDS`), then status (`LIVE_STATUSES`); a kind is None
    /// when more than `RUNS_CENSUS_MAX` of its runs are in memory.
    pub runs_by_status: [Option<[u64; LIVE_STATUSES.len()]>; 2],
    /// The consumer groups of the partitions held here, by (stream, group), summed over
    /// namespaces and partitions; at most `STREAM_GROUPS_MAX` and `GroupDepth::OTHER`.
    pub stream_groups: Vec<GroupDepth>,
}

impl Engine {
    /// The shard's numbers as of now (cheap: counts kept by each store; the workers are
    /// counted, a registry bounded per shard).
    pub fn gauges(&self) -> Gauges {
        let core = &self.core;
        let state = core.state();
        let (stream_records, stream_bytes) = state.streams.totals();
        let queues = core.index().runs.depths();
        Gauges {
            last_lsn: core.last_lsn(),
            durable_lsn: core.durable_lsn(),
            segments: self.segments,
            disk_bytes: self.storage.disk_bytes,
            disk_full: core.disk() == DiskSpace::Full,
            snapshot_lsn: self.storage.snapshot_lsn,
            snapshot_at_ms: self.storage.snapshot_at_ms,
            kv_keys: state.kv.key_count(),
            action_runs: state.runs.len() as u64,
            workflow_runs: state.workflows.run_count() as u64,
            archived_runs: state.archive.len() as u64,
            executions: self.executions.len() as u64,
            wasm_slots: core.limits().wasm_slots as u64,
            run_waits: (self.watches.len() + self.watches.relayed_len()) as u64,
            kv_waits: self.kv_waits.len() as u64,
            webhooks_pending: state.webhooks.counts().0 as u64,
            webhooks_failed: state.webhooks.counts().1 as u64,
            awaits: self.awaits.open_awaits() as u64,
            workers: self.workers.count_by_status(),
            stream_records,
            stream_bytes,
            wasm_ready: queues.wasm_ready + core.steps().waiting() as u64,
            tasks_ready: queues.user_ready,
            delayed_runs: queues.delayed,
            leases: queues.leases,
            workflow_timers: core.index().workflow_timers(),
            runs_by_status: runs_by_status(state),
            stream_groups: stream_groups(state),
        }
    }

    /// What the handlers counted since the process started.
    pub fn counts(&self) -> &Counts {
        self.core.counts()
    }

    /// The runs that became final here since the process started.
    pub fn runs_ended(&self) -> &RunsEnded {
        &self.runs_ended
    }

    /// Counts the action run `(namespace, run_id)` as ended, if it is final (called as its
    /// `Task::ActionFinal` runs, before it may be archived).
    pub(super) fn note_action_ended(&mut self, namespace: &str, run_id: &str) {
        let Some(run) = self.core.state().runs.get(namespace, run_id) else {
            return;
        };
        let Some(status) = action_status(run.status) else {
            return;
        };
        let latency_ms = run.updated_at_ms.saturating_sub(run.created_at_ms);
        self.runs_ended
            .note(ACTION, &run.action, status, latency_ms);
    }

    /// Counts the workflow run `(namespace, run_id)` as ended, if it is final (called as its
    /// `Task::WfFinal` runs, before it may be archived).
    pub(super) fn note_workflow_ended(&mut self, namespace: &str, run_id: &str) {
        let Some(run) = self.core.state().workflows.run(namespace, run_id) else {
            return;
        };
        let Some(status) = workflow_status(run.status()) else {
            return;
        };
        let latency_ms = run.updated_at_ms.saturating_sub(run.created_at_ms);
        self.runs_ended
            .note(WORKFLOW, &run.workflow, status, latency_ms);
    }
}

/// The runs in memory by kind and status (`Gauges::runs_by_status`).
fn runs_by_status(state: &ShardState) -> [Option<[u64; LIVE_STATUSES.len()]>; 2] {
    let mut out = [None, None];
    if state.runs.len() <= RUNS_CENSUS_MAX {
        let mut counts = [0; LIVE_STATUSES.len()];
        for (_, _, run) in state.runs.iter() {
            counts[action_live_status(run.status)] += 1;
        }
        out[ACTION] = Some(counts);
    }
    if state.workflows.run_count() <= RUNS_CENSUS_MAX {
        let mut counts = [0; LIVE_STATUSES.len()];
        for (_, _, run) in state.workflows.all_runs() {
            counts[workflow_live_status(run.status())] += 1;
        }
        out[WORKFLOW] = Some(counts);
    }
    out
}

fn action_live_status(status: RunStatus) -> usize {
    match status {
        RunStatus::Pending => 0,
        RunStatus::Running => 1,
        RunStatus::Completed => 4,
        RunStatus::Failed => 5,
        RunStatus::Cancelled => 6,
        RunStatus::TimedOut => 7,
    }
}

fn workflow_live_status(status: WorkflowRunStatus) -> usize {
    match status {
        WorkflowRunStatus::Pending => 0,
        WorkflowRunStatus::Running => 1,
        WorkflowRunStatus::Waiting => 2,
        WorkflowRunStatus::OnHold => 3,
        WorkflowRunStatus::Completed => 4,
        WorkflowRunStatus::Failed => 5,
        WorkflowRunStatus::Cancelled => 6,
        WorkflowRunStatus::TimedOut => 7,
    }
}

/// The consumer groups of the partitions held here: pending and lag by (stream, group),
/// summed over namespaces and partitions; past the first `STREAM_GROUPS_MAX` pairs in name
/// order (the same ones from one publication to the next), the rest together.
fn stream_groups(state: &ShardState) -> Vec<GroupDepth> {
    let mut by_name: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for ((_, stream, _), part) in state.streams.partitions() {
        for (group, g) in &part.groups {
            let sum = by_name
                .entry((stream.as_str(), group.as_str()))
                .or_default();
            sum.0 += g.pending.len() as u64;
            sum.1 += part.count_after(g.cursor);
        }
    }
    let depth = |stream: &str, group: &str, (pending, lag): (u64, u64)| GroupDepth {
        stream: stream.to_string(),
        group: group.to_string(),
        pending,
        lag,
    };
    let beyond = by_name.len() > STREAM_GROUPS_MAX;
    let mut pairs = by_name.into_iter();
    let mut out: Vec<GroupDepth> = pairs
        .by_ref()
        .take(STREAM_GROUPS_MAX)
        .map(|((stream, group), sum)| depth(stream, group, sum))
        .collect();
    if beyond {
        let other = pairs.fold((0, 0), |(p, l), (_, (dp, dl))| (p + dp, l + dl));
        out.push(depth(GroupDepth::OTHER, GroupDepth::OTHER, other));
    }
    out
}

/// A final action status's index in `FINAL_STATUSES`; None while the run goes on.
fn action_status(status: RunStatus) -> Option<usize> {
    match status {
        RunStatus::Pending | RunStatus::Running => None,
        RunStatus::Completed => Some(0),
        RunStatus::Failed => Some(1),
        RunStatus::Cancelled => Some(2),
        RunStatus::TimedOut => Some(3),
    }
}

/// A final workflow status's index in `FINAL_STATUSES`; None while the run goes on.
fn workflow_status(status: WorkflowRunStatus) -> Option<usize> {
    match status {
        WorkflowRunStatus::Pending
        | WorkflowRunStatus::Running
        | WorkflowRunStatus::Waiting
        | WorkflowRunStatus::OnHold => None,
        WorkflowRunStatus::Completed => Some(0),
        WorkflowRunStatus::Failed => Some(1),
        WorkflowRunStatus::Cancelled => Some(2),
        WorkflowRunStatus::TimedOut => Some(3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_ends_is_counted_by_kind_status_name_and_time() {
        let mut ended = RunsEnded::default();
        ended.note(0, "charge", 0, 7);
        ended.note(0, "charge", 1, 7_000);
        assert_eq!(ended.counts[0], [1, 1, 0, 0]);
        assert_eq!(ended.latency[0][1], 1, "7 ms is in the bucket up to 10 ms");
        assert_eq!(ended.latency[0][10], 1, "7 s is in the bucket up to 10 s");
        assert_eq!(ended.latency_sum_ms[0], 7_007);
        assert_eq!(ended.by_name[0]["charge"], [1, 1, 0, 0]);
    }

    #[test]
    fn names_beyond_the_bound_are_counted_together() {
        let mut ended = RunsEnded::default();
        for i in 0..RUN_NAMES_MAX + 5 {
            ended.note(1, &format!("wf-{i}"), 0, 1);
        }
        assert_eq!(ended.by_name[1].len(), RUN_NAMES_MAX + 1);
        assert_eq!(ended.by_name[1][RunsEnded::OTHER_NAME], [5, 0, 0, 0]);
    }

    #[test]
    fn a_time_beyond_the_last_bound_lands_in_the_last_bucket() {
        let mut ended = RunsEnded::default();
        ended.note(0, "slow", 3, u64::MAX / 4);
        assert_eq!(ended.latency[0][RUN_LATENCY_BOUNDS_MS.len()], 1);
    }
}
