//! Where a run is: one cursor for a run that follows one step at a time (`WfRun::lead`),
//! several once a transition forked it into branches (`WfRun::branches`, the lead then
//! `Forked`). Each cursor is at one step with that step's attempts, polls and plan; a
//! branch also knows the joins it must reach (a stack: forks nest). A branch that reaches
//! its join waits there (`Joined`) until every branch of its fork did; then they become
//! one cursor at the join again.

use super::plan_steps::PlanProgress;
use super::record::StepWait;
use flo_protocol::WorkflowRunStatus;
use serde_json::Value;

/// Where a cursor is: at a step (to start it now, waiting for what it started, or sleeping
/// until the step runs again), at a join waiting for its sibling branches, forked into
/// branches (the lead only), or ended (the lead only). One value, so that a cursor cannot
/// wait and sleep at once, nor end and still be at a step.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RunPhase {
    /// At `step`, to start it now.
    Ready { step: String },
    /// At `step`, waiting for what it started.
    Waiting { step: String, wait: StepWait },
    /// At `step`, to run it again at `at_ms` (a retry after a failure, or a poll).
    Sleeping { step: String, at_ms: u64 },
    /// Ended at `terminal` with `status` (final) and the last step's output.
    Ended {
        terminal: String,
        status: WorkflowRunStatus,
        output: Option<Value>,
    },
    /// A branch at its join `step`, waiting until every branch of its fork is there.
    Joined { step: String },
    /// The run's lead while it runs branches (`WfRun::branches`).
    Forked,
}

impl RunPhase {
    /// The step the cursor is at and runs (none once ended, forked or joined).
    pub fn step(&self) -> Option<&str> {
        match self {
            RunPhase::Ready { step }
            | RunPhase::Waiting { step, .. }
            | RunPhase::Sleeping { step, .. } => Some(step),
            RunPhase::Ended { .. } | RunPhase::Joined { .. } | RunPhase::Forked => None,
        }
    }

    pub fn wait(&self) -> Option<&StepWait> {
        match self {
            RunPhase::Waiting { wait, .. } => Some(wait),
            _ => None,
        }
    }

    /// When a sleeping cursor's step runs again.
    pub fn timer_ms(&self) -> Option<u64> {
        match self {
            RunPhase::Sleeping { at_ms, .. } => Some(*at_ms),
            _ => None,
        }
    }

    /// A cursor's status: running while it has a step to start or a WebAssembly action
    /// executing it, waiting on anything else (a join among them), final once ended. A
    /// forked lead is as its branches say (`WfRun::status`).
    pub fn status(&self) -> WorkflowRunStatus {
        match self {
            RunPhase::Ready { .. } | RunPhase::Forked => WorkflowRunStatus::Running,
            RunPhase::Waiting {
                wait: StepWait::ActionRun { worker: false, .. },
                ..
            } => WorkflowRunStatus::Running,
            RunPhase::Waiting { .. } | RunPhase::Sleeping { .. } | RunPhase::Joined { .. } => {
                WorkflowRunStatus::Waiting
            }
            RunPhase::Ended { status, .. } => *status,
        }
    }
}

/// A join a branch must reach: the step, and the fork that started the branch (the log
/// position of the record that forked: unique in the run, the same on replay).
pub type JoinFrame = (String, u64);

/// One line of execution of a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub phase: RunPhase,
    /// Executions of the current step in this visit, and polls among them.
    pub executions: u32,
    pub polls: u32,
    /// When the current visit's first execution started (for `within_ms`).
    pub first_at_ms: u64,
    /// The current step's inline plan, while it runs one.
    pub plan: Option<PlanProgress>,
    /// The joins this branch must reach, innermost last (empty for the lead).
    pub joins: Vec<JoinFrame>,
}

impl Cursor {
    /// A cursor about to start `step`.
    pub fn ready(step: String, at_ms: u64, joins: Vec<JoinFrame>) -> Cursor {
        Cursor {
            phase: RunPhase::Ready { step },
            executions: 0,
            polls: 0,
            first_at_ms: at_ms,
            plan: None,
            joins,
        }
    }

    /// Moves on to `step`: the first visit's counters again.
    pub fn enter(&mut self, step: String) {
        self.phase = RunPhase::Ready { step };
        self.executions = 0;
        self.polls = 0;
    }
}

/// The branches of a run after `branches[i]` moved to `step`: a branch that reached its
/// join waits there; once every branch of its fork did, they become one cursor at the join
/// (itself at an outer join perhaps, so this goes on outwards). Returns the joins passed,
/// innermost first; once the outermost fork joined no branch is left.
pub(super) fn arrive(
    branches: &mut Vec<Cursor>,
    i: usize,
    step: String,
    at_ms: u64,
) -> Vec<String> {
    let mut joined = Vec::new();
    let (mut i, mut step) = (i, step);
    loop {
        let cursor = &mut branches[i];
        let Some((join, fork)) = cursor.joins.last().cloned() else {
            cursor.enter(step);
            return joined;
        };
        if join != step {
            cursor.enter(step);
            return joined;
        }
        cursor.phase = RunPhase::Joined { step: step.clone() };
        let of_fork = |c: &Cursor| c.joins.iter().any(|(_, f)| *f == fork);
        let at_join = RunPhase::Joined { step: join.clone() };
        let all_there = branches
            .iter()
            .filter(|c| of_fork(c))
            .all(|c| c.phase == at_join && c.joins.last().is_some_and(|(_, f)| *f == fork));
        if !all_there {
            return joined;
        }
        let mut outer = branches[i].joins.clone();
        outer.pop();
        branches.retain(|c| !of_fork(c));
        joined.push(join.clone());
        if outer.is_empty() {
            return joined;
        }
        // The joined branches go on as one, which may itself be at its outer join.
        branches.push(Cursor::ready(join.clone(), at_ms, outer));
        i = branches.len() - 1;
        step = join;
    }
}
