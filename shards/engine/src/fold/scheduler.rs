//! Which action runs may execute or be leased now, and when the others come due. Derived
//! state, fed by `Index::observe` after every record (live and on replay alike). Entries
//! are hints: whoever pops one checks the run in the fold (it may have moved on since).

use super::runs::Run;
use crate::tables::{HashMap, HashSet, pair};
use flo_protocol::ActionKind;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

pub use crate::ids::RunKey;
/// (namespace, action).
pub type ActionKey = (String, String);
/// A queued user task: priority (higher first), then creation order (older first).
pub type TaskEntry = (u8, Reverse<u64>, String);

/// A runnable WASM run: priority (higher first), then creation order (older first).
pub type ReadyEntry = (u8, Reverse<u64>, RunKey);

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

/// `Scheduler::depths`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    pub wasm_ready: u64,
    pub user_ready: u64,
    pub delayed: u64,
    pub leases: u64,
}

#[derive(Default)]
pub struct Scheduler {
    /// Runnable WASM runs: highest priority first, then oldest.
    ready: BinaryHeap<ReadyEntry>,
    /// Entries of `ready` per namespace (stale ones included, like `ready`).
    ready_by_namespace: HashMap<String, usize>,
    /// Pending user tasks that may be leased now, per action.
    user_ready: HashMap<ActionKey, BinaryHeap<TaskEntry>>,
    /// Pending runs not yet due: (due ms, seq) → run.
    timers: BTreeMap<(u64, u64), RunKey>,
    /// Leases of running user tasks: (expiry ms, seq) → run.
    lease_timers: BTreeMap<(u64, u64), RunKey>,
    /// Actions whose user queue gained tasks since the dispatcher last looked.
    user_dirty: HashSet<ActionKey>,
}

impl Scheduler {
    /// A pending run: ready now (it is due at the time of the record that made it
    /// pending), or at its `available_at_ms`.
    pub fn queue(&mut self, key: RunKey, run: &Run, queue: Queue) {
        if run.available_at_ms > run.updated_at_ms {
            self.timers.insert((run.available_at_ms, run.seq), key);
        } else {
            self.make_ready(key, run, queue);
        }
    }

    pub fn make_ready(&mut self, key: RunKey, run: &Run, queue: Queue) {
        match queue {
            Queue::Wasm => self.push_ready((run.priority, Reverse(run.seq), key)),
            Queue::User => {
                let (namespace, run_id) = key;
                let entry = (run.priority, Reverse(run.seq), run_id);
                // The action's queue and mark are looked up borrowed; owned keys are made
                // only for a queue or a mark that is new.
                let action = (namespace.as_str(), run.action.as_str());
                match self.user_ready.get_mut(pair(&action)) {
                    Some(queue) => queue.push(entry),
                    None => {
                        let owned = (namespace.clone(), run.action.clone());
                        self.user_ready.insert(owned, BinaryHeap::from([entry]));
                    }
                }
                if !self.user_dirty.contains(pair(&action)) {
                    self.user_dirty.insert((namespace, run.action.clone()));
                }
            }
        }
    }

    /// Expires the lease of a running task at `expires_at_ms`.
    pub fn watch_lease(&mut self, key: RunKey, seq: u64, expires_at_ms: u64) {
        self.lease_timers.insert((expires_at_ms, seq), key);
    }

    pub fn pop_ready(&mut self) -> Option<RunKey> {
        self.pop_ready_entry().map(|(_, _, key)| key)
    }

    /// The best runnable WASM run, as queued (to be put back with `push_ready`).
    pub fn pop_ready_entry(&mut self) -> Option<ReadyEntry> {
        let entry = self.ready.pop()?;
        let namespace = &entry.2.0;
        if let Some(n) = self.ready_by_namespace.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                self.ready_by_namespace.remove(namespace);
            }
        }
        Some(entry)
    }

    pub fn push_ready(&mut self, entry: ReadyEntry) {
        match self.ready_by_namespace.get_mut(&entry.2.0) {
            Some(n) => *n += 1,
            None => {
                self.ready_by_namespace.insert(entry.2.0.clone(), 1);
            }
        }
        self.ready.push(entry);
    }

    /// Whether runs of namespaces other than `namespace` wait for a WASM slot.
    pub fn ready_elsewhere(&self, namespace: &str) -> bool {
        self.ready.len() > self.ready_by_namespace.get(namespace).copied().unwrap_or(0)
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

    /// Entries of the queues and timers, for the metrics (stale entries included: a run
    /// cancelled while queued keeps its entry until it is popped): WASM runs ready, user
    /// tasks ready, pending runs not yet due, leases watched.
    pub fn depths(&self) -> QueueDepths {
        QueueDepths {
            wasm_ready: self.ready.len() as u64,
            user_ready: self.user_ready.values().map(|q| q.len() as u64).sum(),
            delayed: self.timers.len() as u64,
            leases: self.lease_timers.len() as u64,
        }
    }

    /// Actions that gained ready tasks since the last call.
    pub fn take_user_dirty(&mut self) -> Vec<ActionKey> {
        self.user_dirty.drain().collect()
    }

    pub fn has_user_dirty(&self) -> bool {
        !self.user_dirty.is_empty()
    }

    /// Runs whose delay ended at `now_ms` (possibly stale: check the run).
    pub fn due_runs(&mut self, now_ms: u64) -> Vec<RunKey> {
        take_due(&mut self.timers, now_ms)
    }

    /// Leases due at `now_ms` (possibly stale: check the run's lease).
    pub fn due_leases(&mut self, now_ms: u64) -> Vec<RunKey> {
        take_due(&mut self.lease_timers, now_ms)
    }

    pub fn next_due_ms(&self) -> Option<u64> {
        [self.timers.keys().next(), self.lease_timers.keys().next()]
            .into_iter()
            .flatten()
            .map(|(due, _)| *due)
            .min()
    }

    /// Drops entries `live` rejects (stale after a replay) and repeated ones.
    pub fn retain(&mut self, live: impl Fn(&RunKey) -> bool) {
        let mut seen = HashSet::default();
        let ready = std::mem::take(&mut self.ready);
        self.ready_by_namespace.clear();
        for entry in ready.into_vec() {
            if live(&entry.2) && seen.insert(entry.2.clone()) {
                self.push_ready(entry);
            }
        }
        for ((ns, _), queue) in self.user_ready.iter_mut() {
            let mut seen = HashSet::default();
            let entries = std::mem::take(queue).into_vec();
            *queue = entries
                .into_iter()
                .filter(|(_, _, id)| {
                    let key = (ns.clone(), id.clone());
                    live(&key) && seen.insert(key)
                })
                .collect();
        }
        self.user_ready.retain(|_, q| !q.is_empty());
        self.timers.retain(|_, k| live(k));
    }

    /// Drops lease timers `live` rejects.
    pub fn retain_leases(&mut self, live: impl Fn(&RunKey) -> bool) {
        self.lease_timers.retain(|_, k| live(k));
    }

    /// Every run with an entry (ready, queued or timed), for checks.
    pub fn queued_runs(&self) -> HashSet<RunKey> {
        let mut out: HashSet<RunKey> = self.ready.iter().map(|(_, _, k)| k.clone()).collect();
        for ((ns, _), q) in &self.user_ready {
            out.extend(q.iter().map(|(_, _, id)| (ns.clone(), id.clone())));
        }
        out.extend(self.timers.values().cloned());
        out
    }

    /// Every run with a lease timer, for checks.
    pub fn leased_runs(&self) -> HashSet<RunKey> {
        self.lease_timers.values().cloned().collect()
    }
}

fn take_due(map: &mut BTreeMap<(u64, u64), RunKey>, now_ms: u64) -> Vec<RunKey> {
    let mut due = Vec::new();
    while let Some(entry) = map.first_entry() {
        if entry.key().0 > now_ms {
            break;
        }
        due.push(entry.remove());
    }
    due
}
