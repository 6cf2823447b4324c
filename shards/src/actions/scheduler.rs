//! Which runs may execute now, and when the others become due. Derived state: rebuilt
//! from the runs after recovery, never logged.

use super::runs::{Run, Runs};
use crate::actions::Registry;
use ahash::{AHashMap as HashMap, AHashSet};
use flo_protocol::{ActionKind, RunStatus};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};

pub type RunKey = (String, String);
/// (namespace, action).
pub type ActionKey = (String, String);
/// A queued user task: priority (higher first), then creation order (older first).
pub type TaskEntry = (u8, Reverse<u64>, String);

/// Which queue a pending run waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Executed here as WebAssembly.
    Wasm,
    /// Leased to workers, per action.
    User,
}

impl Queue {
    pub fn of(kind: ActionKind) -> Queue {
        match kind {
            ActionKind::Wasm => Queue::Wasm,
            ActionKind::User => Queue::User,
        }
    }
}

#[derive(Default)]
pub struct Scheduler {
    /// Runnable WASM runs: highest priority first, then oldest.
    ready: BinaryHeap<(u8, Reverse<u64>, RunKey)>,
    /// Pending user tasks that may be leased now, per action.
    user_ready: HashMap<ActionKey, BinaryHeap<TaskEntry>>,
    /// Pending runs not yet due: (due ms, seq) → run.
    timers: BTreeMap<(u64, u64), (RunKey, Queue)>,
    /// Leases of running user tasks: (expiry ms, seq) → run. Stale entries (the lease was
    /// extended or ended) are skipped when they come due.
    lease_timers: BTreeMap<(u64, u64), RunKey>,
    /// Runs executing now (shown as `running`).
    pub executing: HashSet<RunKey>,
    /// Actions whose user queue gained tasks since the dispatcher last looked.
    user_dirty: AHashSet<ActionKey>,
    /// Workflow runs with a retry/poll timer or a signal deadline: (due ms, seq) → run.
    /// Stale entries are checked against the run when they come due.
    wf_timers: BTreeMap<(u64, u64), RunKey>,
}

impl Scheduler {
    /// Queues a pending run: ready now, or at its `available_at_ms`.
    pub fn schedule(&mut self, key: RunKey, run: &Run, queue: Queue, now_ms: u64) {
        if run.available_at_ms > now_ms {
            self.timers
                .insert((run.available_at_ms, run.seq), (key, queue));
        } else {
            self.make_ready(key, run, queue);
        }
    }

    fn make_ready(&mut self, key: RunKey, run: &Run, queue: Queue) {
        match queue {
            Queue::Wasm => self.ready.push((run.priority, Reverse(run.seq), key)),
            Queue::User => {
                let (namespace, run_id) = key;
                let action = (namespace, run.action.clone());
                self.user_ready.entry(action.clone()).or_default().push((
                    run.priority,
                    Reverse(run.seq),
                    run_id,
                ));
                self.user_dirty.insert(action);
            }
        }
    }

    pub fn pop_ready(&mut self) -> Option<RunKey> {
        self.ready.pop().map(|(_, _, key)| key)
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The best queued task of an action, without taking it.
    pub fn peek_user(&self, action: &ActionKey) -> Option<&TaskEntry> {
        self.user_ready.get(action)?.peek()
    }

    pub fn pop_user(&mut self, action: &ActionKey) -> Option<TaskEntry> {
        let queue = self.user_ready.get_mut(action)?;
        let entry = queue.pop();
        if queue.is_empty() {
            self.user_ready.remove(action);
        }
        entry
    }

    /// Puts back entries taken by `pop_user` and not leased.
    pub fn push_user(&mut self, action: ActionKey, entry: TaskEntry) {
        self.user_ready.entry(action).or_default().push(entry);
    }

    /// Tasks queued for an action (stale entries included).
    pub fn user_queued(&self, action: &ActionKey) -> usize {
        self.user_ready.get(action).map_or(0, BinaryHeap::len)
    }

    /// Actions that gained ready tasks since the last call.
    pub fn take_user_dirty(&mut self) -> Vec<ActionKey> {
        self.user_dirty.drain().collect()
    }

    pub fn has_user_dirty(&self) -> bool {
        !self.user_dirty.is_empty()
    }

    /// Expires the lease of a running task at `expires_at_ms`.
    pub fn watch_lease(&mut self, key: RunKey, seq: u64, expires_at_ms: u64) {
        self.lease_timers.insert((expires_at_ms, seq), key);
    }

    /// Leases due at `now_ms` (possibly stale: check the run's lease).
    pub fn due_leases(&mut self, now_ms: u64) -> Vec<RunKey> {
        let mut due = Vec::new();
        while let Some(entry) = self.lease_timers.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    pub fn next_due_ms(&self) -> Option<u64> {
        [
            self.timers.keys().next(),
            self.lease_timers.keys().next(),
            self.wf_timers.keys().next(),
        ]
        .into_iter()
        .flatten()
        .map(|(due, _)| *due)
        .min()
    }

    /// Wakes workflow run `key` at `due_ms`.
    pub fn watch_workflow(&mut self, key: RunKey, seq: u64, due_ms: u64) {
        self.wf_timers.insert((due_ms, seq), key);
    }

    /// Workflow runs with something due at `now_ms` (possibly stale).
    pub fn due_workflows(&mut self, now_ms: u64) -> Vec<RunKey> {
        let mut due = Vec::new();
        while let Some(entry) = self.wf_timers.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// Moves every timer due at `now_ms` to its ready queue; returns how many WASM runs
    /// became runnable.
    pub fn fire_due(&mut self, now_ms: u64, runs: &Runs) -> usize {
        let mut fired = 0;
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let (key, queue) = entry.remove();
            let Some(run) = runs.get(&key.0, &key.1) else {
                continue;
            };
            if run.status != RunStatus::Pending {
                continue;
            }
            if queue == Queue::Wasm {
                fired += 1;
            }
            self.make_ready(key, run, queue);
        }
        fired
    }

    /// Schedules every pending run and watches every lease (after recovery).
    pub fn rebuild(&mut self, runs: &Runs, registry: &Registry, now_ms: u64) {
        for (ns, id, run) in runs.iter() {
            let key = (ns.to_string(), id.to_string());
            match (run.status, &run.lease) {
                (RunStatus::Pending, _) => {
                    // A run whose action is gone waits in the user queue, as it does live
                    // (its action may be registered again).
                    let queue = registry
                        .get(ns, &run.action)
                        .map_or(Queue::User, |def| Queue::of(def.kind));
                    self.schedule(key, run, queue, now_ms);
                }
                (RunStatus::Running, Some(lease)) => {
                    self.watch_lease(key, run.seq, lease.expires_at_ms)
                }
                _ => {}
            }
        }
    }
}
