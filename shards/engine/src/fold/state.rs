//! Shard state is a fold of the log: `apply` is the one place it changes, used by live
//! requests (right after their records are appended) and by recovery alike.

use crate::fold::archive::{Entry, RunKind, run_key};
use crate::fold::kv::KvStore;
use crate::fold::record::GuestKvWrite;
use crate::fold::registry::Registry;
use crate::fold::runs::Runs;
use crate::hash::Partitioning;
use crate::tables::HashMap;
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
    /// Stream definitions, and the records of the partitions held here.
    pub streams: crate::fold::streams::Streams,
    /// Finished runs: where their archive records are.
    pub archive: crate::fold::archive::RunIndex,
    /// The schedules living on this shard.
    pub schedules: crate::fold::schedules::Schedules,
    /// The run query index (runs of definitions with search attributes).
    pub search: crate::fold::search::SearchIndex,
    /// The run event feed (derived from the workflow records).
    pub events: crate::fold::events::RunEvents,
    /// Webhook deliveries pending and failed (derived from the events, and their own
    /// records).
    pub webhooks: crate::fold::webhooks::Webhooks,
    /// LSN of the last record applied.
    pub applied_lsn: u64,
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
            streams: Default::default(),
            schedules: Default::default(),
            search: Default::default(),
            events: Default::default(),
            webhooks: Default::default(),
            applied_lsn: 0,
        }
    }

    /// The `timeoutMs` of the workflow step an action run executes, if it has one.
    pub fn step_timeout_ms(
        &self,
        namespace: &str,
        step: Option<&crate::fold::record::StepRef>,
    ) -> Option<u64> {
        let step = step?;
        let run = self.workflows.run(namespace, &step.run_id)?;
        run.def.as_ref().ok()?.step(&step.step)?.timeout_ms
    }

    /// The state (JSON) of the workflow run whose step an action run executes: what its
    /// worker's task and its guest's `flo.state_get` see.
    pub fn step_run_state(
        &self,
        namespace: &str,
        step: Option<&crate::fold::record::StepRef>,
    ) -> Option<Vec<u8>> {
        let run = self.workflows.run(namespace, &step?.run_id)?;
        serde_json::to_vec(&run.state).ok()
    }

    /// The fields (a JSON object) a step's worker or guest sets, split by scope (flow8's
    /// KV scoping, `flo_workflow::state::split_scopes`): the run's own, for the step's
    /// finish, and the shared scopes' (`flow:`, `flow_group:`) as KV writes on their keys
    /// (applied where each key lives, forwarded with the completion). Err: why they cannot
    /// be set.
    pub fn scoped_patch(
        &self,
        namespace: &str,
        step: &crate::fold::record::StepRef,
        patch: &[u8],
    ) -> Result<(Option<Vec<u8>>, Vec<crate::fold::record::GuestKvWrite>), String> {
        use flo_workflow::state::{Scope, ScopedWrite, scoped_key, split_scopes};
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(patch) else {
            return Err("the state fields must be a JSON object of names and values".into());
        };
        let Some(run) = self.workflows.run(namespace, &step.run_id) else {
            return Err(format!("workflow run {:?} is gone", step.run_id));
        };
        let scoped = split_scopes(fields);
        let group = match (&run.group, scoped.group.first()) {
            (Some(group), _) => group.as_str(),
            (None, Some((name, _))) => {
                return Err(format!(
                    "`flow_group:{name}` is shared by the runs of a group, and run {:?} has                      none: start it with --group G",
                    step.run_id
                ));
            }
            (None, None) => "",
        };
        let writes = (scoped
            .flow
            .into_iter()
            .map(|w| (Scope::Flow, run.workflow.as_str(), w)))
        .chain(scoped.group.into_iter().map(|w| (Scope::Group, group, w)))
        .map(|(scope, owner, (name, write))| {
            let key = scoped_key(scope, owner, &name);
            match write {
                ScopedWrite::Set(v) => crate::fold::record::GuestKvWrite {
                    key,
                    value: Some(v.to_string().into_bytes()),
                    add: None,
                },
                ScopedWrite::Add(n) => crate::fold::record::GuestKvWrite {
                    key,
                    value: None,
                    add: Some(n),
                },
            }
        })
        .collect();
        let own = (!scoped.run.is_empty()).then(|| {
            serde_json::Value::Object(scoped.run)
                .to_string()
                .into_bytes()
        });
        Ok((own, writes))
    }

    pub fn owns(&self, namespace: &str, key: &str) -> bool {
        self.partitioning.shard_of(namespace, key) == self.shard
    }

    /// Whether no run, live or archived, has this id.
    pub fn run_id_free(&self, kind: RunKind, namespace: &str, run_id: &str) -> bool {
        let live = match kind {
            RunKind::Action => self.runs.get(namespace, run_id).is_some(),
            RunKind::Workflow => self.workflows.run(namespace, run_id).is_some(),
        };
        !live && self.archive.get(run_key(kind, namespace, run_id)).is_none()
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
        for ((ns, name), e) in self.workflows.defs.iter() {
            let versions: Vec<&str> = e.versions.iter().map(|v| v.version.as_str()).collect();
            lines.push(format!(
                "workflow {ns}/{name} enabled {} versions {versions:?}",
                e.enabled
            ));
        }
        for (ns, id, r) in self.workflows.all_runs() {
            lines.push(format!(
                "wfrun {ns}/{id} {:?} branches {:?} error {:?} signals {} history {} state {}",
                r.lead,
                r.branches,
                r.error,
                r.signals.len(),
                r.history.len(),
                r.state,
            ));
        }
        lines.push(format!(
            "events {} last {}",
            self.events.len(),
            self.events.last_pos()
        ));
        for failed in [false, true] {
            for (id, d) in self.webhooks.list(failed) {
                lines.push(format!(
                    "webhook {id} failed {failed} {} attempts {} at {} error {:?} body {}",
                    d.event.as_str(),
                    d.attempts,
                    d.at_ms,
                    d.last_error,
                    d.body.len()
                ));
            }
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
        self.streams.digest(&mut lines);
        self.schedules.digest(&mut lines);
        self.search.digest(&mut lines);
        lines.sort();
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::record::{Record, StepRef, StepWait};

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
                schedule: None,
                group: None,
                webhook: None,
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
            matches!(run.lead.phase.wait(), Some(StepWait::ActionRun { run_id, .. }) if run_id == "a-1")
        );
        assert_eq!(run.lead.phase.step(), Some("_start"));
    }
}
