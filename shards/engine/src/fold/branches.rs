//! A run's cursors moved by a step's finish: on to the next step (a branch may reach its
//! join there, and its fork join), into branches, or to the run's end.

use super::cursor::{Cursor, RunPhase, arrive};
use super::workflows::WfRun;
use flo_protocol::{HistoryEventType, WorkflowRunStatus};
use serde_json::Value;

impl WfRun {
    /// The cursor at `from` moves on to `next` (a branch may reach its join there).
    pub(super) fn move_on(&mut self, from: &str, next: String, at_ms: u64) {
        if self.lead.phase != RunPhase::Forked {
            self.visit(&next, at_ms);
            self.lead.enter(next);
            return;
        }
        let Some(i) = self
            .branches
            .iter()
            .position(|c| c.phase.step() == Some(from))
        else {
            return;
        };
        let at_join = self.branches[i]
            .joins
            .last()
            .is_some_and(|(join, _)| *join == next);
        if !at_join {
            self.visit(&next, at_ms);
        }
        let joined = arrive(&mut self.branches, i, next, at_ms);
        for join in &joined {
            let detail = join.clone();
            self.event(HistoryEventType::BranchesJoined, Some(join), detail, at_ms);
        }
        // The joined branches enter their join once, however many forks met there.
        if let Some(join) = joined.last() {
            self.visit(join, at_ms);
            if self.branches.is_empty() {
                self.lead.enter(join.clone());
            }
        }
    }

    /// The cursor at `from` forks into `steps`, which meet again at `join`; `fork` (the
    /// record's position) tells this fork's branches from any other's.
    pub(super) fn fork(
        &mut self,
        from: &str,
        steps: Vec<String>,
        join: String,
        at_ms: u64,
        fork: u64,
    ) {
        let (mut joins, at) = match self.lead.phase {
            RunPhase::Forked => {
                let Some(i) = self
                    .branches
                    .iter()
                    .position(|c| c.phase.step() == Some(from))
                else {
                    return;
                };
                (self.branches[i].joins.clone(), Some(i))
            }
            _ => (Vec::new(), None),
        };
        joins.push((join, fork));
        for step in &steps {
            self.visit(step, at_ms);
        }
        let new = steps
            .into_iter()
            .map(|s| Cursor::ready(s, at_ms, joins.clone()));
        match at {
            Some(i) => {
                self.branches.remove(i);
                self.branches.extend(new);
            }
            None => {
                self.lead = Cursor {
                    phase: RunPhase::Forked,
                    ..Cursor::ready(String::new(), at_ms, Vec::new())
                };
                self.branches = new.collect();
            }
        }
    }

    /// The run ended: no cursor runs any more.
    pub(super) fn end(
        &mut self,
        terminal: String,
        status: WorkflowRunStatus,
        output: Option<Value>,
    ) {
        self.lead = Cursor {
            phase: RunPhase::Ended {
                terminal,
                status,
                output,
            },
            ..Cursor::ready(String::new(), self.lead.first_at_ms, Vec::new())
        };
        self.branches.clear();
    }
}
