//! Derived state: queues and timers computed from the fold. `observe` is called after
//! every record is applied — by the live commit path and by replay alike — so the index
//! after a restart holds what it held live (up to stale entries, which every reader checks
//! against the fold and `compact` drops).

use crate::fold::record::{Record, StepWait};
use crate::fold::scheduler::{Queue, Scheduler};
use crate::fold::state::ShardState;
use crate::ids::RunKey;
use flo_protocol::RunStatus;
use std::collections::BTreeMap;

/// What a record touched, taken before `apply` consumes it.
pub enum Touch {
    Nothing,
    /// An action run.
    Run(RunKey),
    /// Several action runs of one namespace.
    Runs(String, Vec<String>),
    /// A workflow run.
    WfRun(RunKey),
    /// An action run that starts a workflow step.
    RunAndStep(RunKey, RunKey),
}

impl Touch {
    pub fn of(record: &Record) -> Touch {
        let key = |ns: &String, id: &String| (ns.clone(), id.clone());
        match record {
            Record::RunCreated {
                namespace,
                run_id,
                step: Some(step),
                ..
            } => Touch::RunAndStep(key(namespace, run_id), key(namespace, &step.run_id)),
            Record::RunCreated {
                namespace, run_id, ..
            }
            | Record::AttemptFailed {
                namespace, run_id, ..
            }
            | Record::RunCompleted {
                namespace, run_id, ..
            }
            | Record::RunCancelled {
                namespace, run_id, ..
            }
            | Record::RunRedriven {
                namespace, run_id, ..
            }
            | Record::LeaseExtended {
                namespace, run_id, ..
            } => Touch::Run(key(namespace, run_id)),
            Record::TasksLeased {
                namespace, tasks, ..
            } => Touch::Runs(
                namespace.clone(),
                tasks.iter().map(|t| t.run_id.clone()).collect(),
            ),
            Record::LeasesReleased {
                namespace, run_ids, ..
            } => Touch::Runs(namespace.clone(), run_ids.clone()),
            Record::WfRunStarted {
                namespace, run_id, ..
            }
            | Record::WfStepStarted {
                namespace, run_id, ..
            }
            | Record::WfStepFinished {
                namespace, run_id, ..
            }
            | Record::WfSignalReceived {
                namespace, run_id, ..
            }
            | Record::WfRunCancelled {
                namespace, run_id, ..
            }
            | Record::WfPlanEvent {
                namespace, run_id, ..
            }
            | Record::WfRunControl {
                namespace, run_id, ..
            } => Touch::WfRun(key(namespace, run_id)),
            _ => Touch::Nothing,
        }
    }
}

#[derive(Default)]
pub struct Index {
    /// Action runs: ready queues, delays, leases.
    pub runs: Scheduler,
    /// Workflow runs with a retry/poll timer or a signal deadline: (due ms, seq) → run.
    wf_timers: BTreeMap<(u64, u64), RunKey>,
}

impl Index {
    pub fn observe(&mut self, touch: &Touch, state: &ShardState) {
        match touch {
            Touch::Nothing => {}
            Touch::Run((ns, id)) => self.observe_run(ns, id, state),
            Touch::Runs(ns, ids) => {
                for id in ids {
                    self.observe_run(ns, id, state);
                }
            }
            Touch::WfRun(key) => self.observe_wf_run(key, state),
            Touch::RunAndStep((ns, id), wf) => {
                self.observe_run(ns, id, state);
                self.observe_wf_run(wf, state);
            }
        }
    }

    fn observe_run(&mut self, namespace: &str, run_id: &str, state: &ShardState) {
        let Some(run) = state.runs.get(namespace, run_id) else {
            return;
        };
        let key = || (namespace.to_string(), run_id.to_string());
        match (run.status, &run.lease) {
            (RunStatus::Pending, _) => {
                // A run whose action is gone waits in the user queue (its action may be
                // registered again).
                let queue = state
                    .registry
                    .get(namespace, &run.action)
                    .map_or(Queue::User, |def| Queue::of(def.kind));
                self.runs.queue(key(), run, queue);
            }
            (RunStatus::Running, Some(lease)) => {
                self.runs.watch_lease(key(), run.seq, lease.expires_at_ms)
            }
            _ => {}
        }
    }

    fn observe_wf_run(&mut self, key: &RunKey, state: &ShardState) {
        let Some(run) = state.workflows.run(&key.0, &key.1) else {
            return;
        };
        if run.status().is_final() {
            return;
        }
        for cursor in run.cursors() {
            if let Some(at) = cursor.phase.timer_ms() {
                self.wf_timers.insert((at, run.seq), key.clone());
            }
            if let Some(StepWait::Signal {
                deadline_ms: Some(at),
                ..
            }) = cursor.phase.wait()
            {
                self.wf_timers.insert((*at, run.seq), key.clone());
            }
            // An inline plan's attempt tracked `async`: its timeout.
            if let (Some(StepWait::ActionRun { .. }), Some(at)) = (
                cursor.phase.wait(),
                cursor.plan.as_ref().and_then(|p| p.deadline_ms),
            ) {
                self.wf_timers.insert((at, run.seq), key.clone());
            }
        }
    }

    /// Moves runs whose delay ended to their ready queue.
    pub fn fire_due_runs(&mut self, now_ms: u64, state: &ShardState) {
        for key in self.runs.due_runs(now_ms) {
            let Some(run) = state.runs.get(&key.0, &key.1) else {
                continue;
            };
            if run.status != RunStatus::Pending {
                continue;
            }
            let queue = state
                .registry
                .get(&key.0, &run.action)
                .map_or(Queue::User, |def| Queue::of(def.kind));
            self.runs.make_ready(key, run, queue);
        }
    }

    /// Workflow runs with something due at `now_ms` (possibly stale).
    pub fn due_workflows(&mut self, now_ms: u64, max: usize) -> Vec<RunKey> {
        let mut due = Vec::new();
        while due.len() < max
            && let Some(entry) = self.wf_timers.first_entry()
        {
            if entry.key().0 > now_ms {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    pub fn next_due_ms(&self) -> Option<u64> {
        let wf = self.wf_timers.keys().next().map(|(due, _)| *due);
        match (self.runs.next_due_ms(), wf) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The index of a fold loaded from a snapshot: every live run observed.
    pub fn rebuild(state: &ShardState) -> Index {
        let mut index = Index::default();
        for (ns, id, _) in state.runs.iter() {
            index.observe_run(ns, id, state);
        }
        for (ns, id, _) in state.workflows.all_runs() {
            index.observe_wf_run(&(ns.to_string(), id.to_string()), state);
        }
        index
    }

    /// Drops entries the fold no longer backs (after a replay, most runs are final).
    pub fn compact(&mut self, state: &ShardState) {
        self.runs.retain(|(ns, id)| {
            state
                .runs
                .get(ns, id)
                .is_some_and(|r| r.status == RunStatus::Pending)
        });
        self.runs.retain_leases(|(ns, id)| {
            state
                .runs
                .get(ns, id)
                .is_some_and(|r| r.status == RunStatus::Running)
        });
        self.wf_timers.retain(|_, (ns, id)| {
            state
                .workflows
                .run(ns, id)
                .is_some_and(|r| !r.status().is_final())
        });
    }

    /// Workflow timers set (retries, polls, signal deadlines; stale ones included), for
    /// the metrics.
    pub fn workflow_timers(&self) -> u64 {
        self.wf_timers.len() as u64
    }

    /// Workflow runs with a timer, for checks.
    pub fn timed_workflows(&self) -> crate::tables::HashSet<RunKey> {
        self.wf_timers.values().cloned().collect()
    }
}
