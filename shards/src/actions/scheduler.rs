//! Which runs may execute now, and when the others become due. Derived state: rebuilt
//! from the runs after recovery, never logged.

use super::runs::Runs;
use crate::actions::Registry;
use flo_protocol::{ActionKind, RunStatus};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};

pub type RunKey = (String, String);

#[derive(Default)]
pub struct Scheduler {
    /// Runnable WASM runs: highest priority first, then oldest.
    ready: BinaryHeap<(u8, Reverse<u64>, RunKey)>,
    /// Pending runs not yet due: (due ms, seq) → run.
    timers: BTreeMap<(u64, u64), RunKey>,
    /// Runs executing now (shown as `running`).
    pub executing: HashSet<RunKey>,
}

impl Scheduler {
    /// Queues a pending run: ready now, or at its `available_at_ms`.
    pub fn schedule(
        &mut self,
        key: RunKey,
        priority: u8,
        seq: u64,
        available_at_ms: u64,
        now_ms: u64,
    ) {
        if available_at_ms > now_ms {
            self.timers.insert((available_at_ms, seq), key);
        } else {
            self.ready.push((priority, Reverse(seq), key));
        }
    }

    pub fn pop_ready(&mut self) -> Option<RunKey> {
        self.ready.pop().map(|(_, _, key)| key)
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub fn next_due_ms(&self) -> Option<u64> {
        self.timers.keys().next().map(|(due, _)| *due)
    }

    /// Moves every timer due at `now_ms` to the ready queue; returns how many.
    pub fn fire_due(&mut self, now_ms: u64, runs: &Runs) -> usize {
        let mut fired = 0;
        while let Some((&(due, seq), _)) = self.timers.iter().next() {
            if due > now_ms {
                break;
            }
            let key = self.timers.remove(&(due, seq)).unwrap();
            if let Some(run) = runs.get(&key.0, &key.1) {
                self.ready.push((run.priority, Reverse(seq), key));
                fired += 1;
            }
        }
        fired
    }

    /// Schedules every pending run of a WASM action (after recovery).
    pub fn rebuild(&mut self, runs: &Runs, registry: &Registry, now_ms: u64) {
        for (ns, id, run) in runs.iter() {
            if run.status != RunStatus::Pending {
                continue;
            }
            let wasm = registry
                .get(ns, &run.action)
                .is_some_and(|d| d.kind == ActionKind::Wasm);
            if wasm {
                self.schedule(
                    (ns.into(), id.into()),
                    run.priority,
                    run.seq,
                    run.available_at_ms,
                    now_ms,
                );
            }
        }
    }
}
