//! Shard state is a fold of the log: `apply` is the one place it changes, used by live
//! requests (right after their records are appended) and by recovery alike.

use crate::fold::archive::{Entry, RunKind, run_key};
use crate::fold::kv::KvStore;
use crate::fold::record::{GuestKvWrite, Record};
use crate::fold::registry::Registry;
use crate::fold::runs::{Lease, Run, Runs};
use crate::hash::Partitioning;
use crate::tables::HashMap;
use flo_protocol::RunStatus;
use std::collections::VecDeque;

/// Guest KV writes of a completion that belong to other shards, not yet delivered.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PendingForward {
    pub lsn: u64,
    pub namespace: String,
    pub writes: Vec<GuestKvWrite>,
}

pub struct ShardState {
    pub shard: u32,
    pub partitioning: Partitioning,
    pub kv: KvStore,
    pub registry: Registry,
    pub runs: Runs,
    /// Remote guest KV writes waiting to be forwarded, in LSN order.
    pub forwards: VecDeque<PendingForward>,
    /// Highest origin LSN applied from each other shard's forwarded writes.
    pub remote_applied: HashMap<u32, u64>,
    pub workflows: crate::fold::workflows::Workflows,
    /// Finished runs: where their archive records are.
    pub archive: crate::fold::archive::RunIndex,
    /// LSN of the last record applied.
    pub applied_lsn: u64,
}

/// A record that cannot follow the records before it: a bug, not bad input (records are
/// planned against this same state). Debug builds stop; release builds skip the record.
fn impossible(lsn: u64, what: std::fmt::Arguments) {
    debug_assert!(false, "record {lsn}: {what}");
}

impl Default for ShardState {
    fn default() -> Self {
        ShardState::new(0, Partitioning::new(crate::hash::PARTITIONS_DEFAULT, 1))
    }
}

impl ShardState {
    pub fn new(shard: u32, partitioning: Partitioning) -> Self {
        ShardState {
            shard,
            partitioning,
            kv: KvStore::default(),
            registry: Registry::default(),
            runs: Runs::default(),
            forwards: VecDeque::new(),
            remote_applied: HashMap::default(),
            workflows: Default::default(),
            archive: Default::default(),
            applied_lsn: 0,
        }
    }

    pub fn owns(&self, namespace: &str, key: &str) -> bool {
        self.partitioning.shard_of(namespace, key) == self.shard
    }

    /// The index entry of a run that is archived (not in memory).
    pub fn archived(&self, kind: RunKind, namespace: &str, run_id: &str) -> Option<Entry> {
        let live = match kind {
            RunKind::Action => self.runs.get(namespace, run_id).is_some(),
            RunKind::Workflow => self.workflows.run(namespace, run_id).is_some(),
        };
        if live {
            return None;
        }
        self.archive.get(run_key(kind, namespace, run_id))
    }

    /// Applies the record at `lsn` (the next one: LSNs have no gaps). Never reads the clock
    /// or validates anything: the record says what happened.
    pub fn apply(&mut self, lsn: u64, record: Record) {
        debug_assert!(
            self.applied_lsn == 0 || lsn == self.applied_lsn + 1,
            "record {lsn} applied after {}",
            self.applied_lsn
        );
        self.applied_lsn = lsn;
        match record {
            Record::KvPut {
                namespace,
                key,
                value,
                version,
                expires_at_ms,
            } => self
                .kv
                .apply_put(namespace, key, value, version, expires_at_ms, lsn),
            Record::KvDelete { namespace, key } => self.kv.apply_delete(&namespace, &key),
            Record::ActionDefined {
                namespace,
                name,
                def,
            } => self.registry.apply_defined(namespace, name, def),
            Record::ActionRemoved {
                namespace,
                name,
                at_ms,
            } => self.registry.apply_removed(&namespace, &name, at_ms),
            Record::ActionEnabled {
                namespace,
                name,
                enabled,
                at_ms,
            } => self
                .registry
                .apply_enabled(&namespace, &name, enabled, at_ms),
            Record::RunCreated {
                namespace,
                run_id,
                action,
                action_version,
                input,
                priority,
                labels,
                idempotency_key,
                created_at_ms,
                available_at_ms,
                step,
            } => {
                // A workflow step's action run: the step starts with it (one record).
                let step_started = step.as_ref().map(|sr| {
                    let worker = self
                        .registry
                        .get(&namespace, &action)
                        .is_some_and(|d| d.kind == flo_protocol::ActionKind::User);
                    (
                        sr.clone(),
                        crate::fold::record::StepWait::ActionRun {
                            run_id: run_id.clone(),
                            worker,
                        },
                    )
                });
                let run = Run {
                    action,
                    action_version,
                    status: RunStatus::Pending,
                    input,
                    output: None,
                    outcome: None,
                    error: None,
                    attempt: 1,
                    priority,
                    labels,
                    idempotency_key,
                    dead_lettered: false,
                    created_at_ms,
                    updated_at_ms: created_at_ms,
                    available_at_ms,
                    seq: self.runs.next_seq(),
                    lsn,
                    lease: None,
                    step,
                };
                if let Some((sr, wait)) = step_started {
                    self.workflows.apply_step_started(
                        &namespace,
                        &sr.run_id,
                        sr.step,
                        wait,
                        created_at_ms,
                        lsn,
                    );
                }
                self.runs.apply_created(namespace, run_id, run);
            }
            Record::AttemptFailed {
                namespace,
                run_id,
                attempt,
                action_version,
                error,
                timed_out,
                retry_at_ms,
                at_ms,
                dead_letter,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.lease = None;
                run.action_version = action_version;
                run.error = Some(error);
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
                match retry_at_ms {
                    Some(at) => {
                        run.attempt = attempt + 1;
                        run.available_at_ms = at;
                        run.status = RunStatus::Pending;
                    }
                    None => {
                        run.attempt = attempt;
                        run.status = if timed_out {
                            RunStatus::TimedOut
                        } else {
                            RunStatus::Failed
                        };
                        run.dead_lettered = dead_letter;
                    }
                }
            }
            Record::RunCompleted {
                namespace,
                run_id,
                attempt,
                action_version,
                output,
                outcome,
                kv_writes,
                at_ms,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.status = RunStatus::Completed;
                run.lease = None;
                run.action_version = action_version;
                run.attempt = attempt;
                run.output = Some(output);
                run.outcome = outcome;
                run.error = None;
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
                let (local, remote): (Vec<_>, Vec<_>) = kv_writes
                    .into_iter()
                    .partition(|w| self.partitioning.shard_of(&namespace, &w.key) == self.shard);
                for w in local {
                    self.kv
                        .apply_guest_write(&namespace, w.key, w.value, at_ms, lsn);
                }
                if !remote.is_empty() {
                    self.forwards.push_back(PendingForward {
                        lsn,
                        namespace,
                        writes: remote,
                    });
                }
            }
            Record::RunCancelled {
                namespace,
                run_id,
                at_ms,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.status = RunStatus::Cancelled;
                run.lease = None;
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
            }
            Record::TasksLeased {
                namespace,
                worker_id,
                tasks,
                at_ms,
            } => {
                for task in tasks {
                    let Some(run) = self.runs.get_mut(&namespace, &task.run_id) else {
                        impossible(
                            lsn,
                            format_args!("leased run {:?} does not exist", task.run_id),
                        );
                        continue;
                    };
                    run.status = RunStatus::Running;
                    run.attempt = task.attempt;
                    run.lease = Some(Lease {
                        worker_id: worker_id.clone(),
                        expires_at_ms: task.expires_at_ms,
                    });
                    run.updated_at_ms = at_ms;
                    run.lsn = lsn;
                }
            }
            Record::LeaseExtended {
                namespace,
                run_id,
                expires_at_ms,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                if let Some(lease) = &mut run.lease {
                    lease.expires_at_ms = lease.expires_at_ms.max(expires_at_ms);
                    run.lsn = lsn;
                }
            }
            Record::LeasesReleased {
                namespace,
                run_ids,
                at_ms,
            } => {
                for run_id in run_ids {
                    let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                        continue;
                    };
                    if run.status == RunStatus::Running {
                        run.status = RunStatus::Pending;
                        run.lease = None;
                        run.updated_at_ms = at_ms;
                        run.lsn = lsn;
                    }
                }
            }
            Record::WorkflowDefined {
                namespace,
                name,
                version,
                yaml,
                at_ms,
                def,
            } => self
                .workflows
                .apply_defined(namespace, name, version, yaml, at_ms, def),
            Record::WorkflowEnabled {
                namespace,
                name,
                enabled,
                at_ms,
            } => self
                .workflows
                .apply_enabled(&namespace, &name, enabled, at_ms),
            Record::WfRunStarted {
                namespace,
                run_id,
                workflow,
                version,
                input,
                idempotency_key,
                parent,
                at_ms,
            } => self.workflows.apply_started(
                namespace,
                run_id,
                workflow,
                version,
                input,
                idempotency_key,
                parent,
                at_ms,
                lsn,
            ),
            Record::WfStepStarted {
                namespace,
                run_id,
                step,
                wait,
                at_ms,
            } => self
                .workflows
                .apply_step_started(&namespace, &run_id, step, wait, at_ms, lsn),
            Record::WfStepFinished {
                namespace,
                run_id,
                step,
                outcome,
                output,
                error,
                consumed_signal,
                next,
                at_ms,
            } => self.workflows.apply_step_finished(
                &namespace,
                &run_id,
                step,
                outcome,
                output,
                error,
                consumed_signal,
                next,
                at_ms,
                lsn,
            ),
            Record::WfSignalReceived {
                namespace,
                run_id,
                signal_type,
                payload,
                at_ms,
            } => self
                .workflows
                .apply_signal(&namespace, &run_id, signal_type, payload, at_ms, lsn),
            Record::WfRunCancelled {
                namespace,
                run_id,
                reason,
                at_ms,
            } => self
                .workflows
                .apply_cancelled(&namespace, &run_id, reason, at_ms, lsn),
            Record::RunArchived {
                namespace,
                run_id,
                run,
            } => {
                let gone = match run.kind() {
                    crate::fold::archive::RunKind::Action => {
                        self.runs.remove(&namespace, &run_id).is_some()
                    }
                    crate::fold::archive::RunKind::Workflow => {
                        self.workflows.remove(&namespace, &run_id).is_some()
                    }
                };
                if !gone {
                    impossible(lsn, format_args!("archived run {run_id:?} does not exist"));
                }
                let (key, entry) = run.entry(lsn);
                self.archive.insert(key, entry, run.finished_at_ms());
            }
            Record::RunsForgotten { before_lsn } => self.archive.forget(before_lsn),
            Record::KvForwarded { up_to_lsn } => {
                while self.forwards.front().is_some_and(|f| f.lsn <= up_to_lsn) {
                    self.forwards.pop_front();
                }
            }
            Record::KvRemoteWrites {
                origin_shard,
                origin_lsn,
                namespace,
                writes,
                at_ms,
            } => {
                let seen = self.remote_applied.entry(origin_shard).or_insert(0);
                if origin_lsn <= *seen {
                    return;
                }
                *seen = origin_lsn;
                for w in writes {
                    self.kv
                        .apply_guest_write(&namespace, w.key, w.value, at_ms, lsn);
                }
            }
        }
    }
}

impl ShardState {
    /// A canonical description of the fold (sorted, one line per object), for checks that
    /// two states are equal: the live state and the one replay rebuilds, say.
    pub fn digest(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (ns, key, e) in self.kv.iter() {
            lines.push(format!(
                "kv {ns}/{key} v{} {:?} exp {:?}",
                e.version, e.value, e.expires_at_ms
            ));
        }
        for (ns, name, a) in self.registry.all() {
            lines.push(format!(
                "action {ns}/{name} v{} {:?} enabled {} removed {}",
                a.def.version, a.def.kind, a.def.enabled, a.removed
            ));
        }
        for (ns, id, r) in self.runs.iter() {
            lines.push(format!(
                "run {ns}/{id} {:?} attempt {} output {:?} outcome {:?} error {:?} dlq {} \
                 available {} lease {:?} step {:?}",
                r.status,
                r.attempt,
                r.output,
                r.outcome,
                r.error,
                r.dead_lettered,
                r.available_at_ms,
                r.lease.as_ref().map(|l| (&l.worker_id, l.expires_at_ms)),
                r.step,
            ));
        }
        for ((ns, name), e) in &self.workflows.defs {
            let versions: Vec<&str> = e.versions.iter().map(|v| v.version.as_str()).collect();
            lines.push(format!(
                "workflow {ns}/{name} enabled {} versions {versions:?}",
                e.enabled
            ));
        }
        for (ns, id, r) in self.workflows.all_runs() {
            lines.push(format!(
                "wfrun {ns}/{id} {:?} execs {} polls {} error {:?} signals {} history {}",
                r.phase,
                r.step_executions,
                r.step_polls,
                r.error,
                r.signals.len(),
                r.history.len(),
            ));
        }
        for (key, e) in self.archive.iter() {
            lines.push(format!(
                "archived {key:016x} lsn {} status {} dlq {} tag {}",
                e.lsn, e.status, e.dead_lettered, e.name_tag
            ));
        }
        for f in &self.forwards {
            lines.push(format!("forward {} {} writes", f.lsn, f.writes.len()));
        }
        for (shard, lsn) in &self.remote_applied {
            lines.push(format!("remote_applied {shard} {lsn}"));
        }
        lines.sort();
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::record::{StepRef, StepWait};

    /// Logs from before the action run's creation started its step hold a WfStepStarted
    /// after the RunCreated; replaying them starts the step once.
    #[test]
    fn an_older_logs_step_started_after_the_run_created_is_not_applied_twice() {
        let mut state = ShardState::default();
        let yaml = "kind: Workflow\nname: w\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n";
        let records = [
            Record::WorkflowDefined {
                namespace: "ns".into(),
                name: "w".into(),
                version: "1".into(),
                yaml: yaml.into(),
                at_ms: 1,
                def: flo_workflow::parse_workflow(yaml)
                    .ok()
                    .map(|v| Box::new(v.def)),
            },
            Record::WfRunStarted {
                namespace: "ns".into(),
                run_id: "wfrun-1".into(),
                workflow: "w".into(),
                version: "1".into(),
                input: b"{}".to_vec(),
                idempotency_key: None,
                parent: None,
                at_ms: 2,
            },
            Record::RunCreated {
                namespace: "ns".into(),
                run_id: "a-1".into(),
                action: "a".into(),
                action_version: 1,
                input: b"{}".to_vec(),
                priority: 0,
                labels: None,
                idempotency_key: None,
                created_at_ms: 3,
                available_at_ms: 3,
                step: Some(StepRef {
                    run_id: "wfrun-1".into(),
                    step: "_start".into(),
                }),
            },
            Record::WfStepStarted {
                namespace: "ns".into(),
                run_id: "wfrun-1".into(),
                step: "_start".into(),
                wait: StepWait::ActionRun {
                    run_id: "a-1".into(),
                    worker: false,
                },
                at_ms: 3,
            },
        ];
        for (lsn, r) in records.into_iter().enumerate() {
            state.apply(lsn as u64 + 1, r);
        }
        let run = state.workflows.run("ns", "wfrun-1").unwrap();
        let started = run
            .history
            .iter()
            .filter(|e| e.event_type == "step_started")
            .count();
        assert_eq!(started, 1, "{:?}", run.history);
        assert!(
            matches!(run.phase.wait(), Some(StepWait::ActionRun { run_id, .. }) if run_id == "a-1")
        );
        assert_eq!(run.phase.step(), Some("_start"));
    }
}
