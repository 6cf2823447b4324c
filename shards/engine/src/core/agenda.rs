//! Work the engine queues for itself instead of calling deeper, drained by the step loop
//! with one budget per input (`Engine::step`): a handler never calls into another run.

use crate::fold::archive::RunKind;
use crate::ids::{RunKey, WorkerKey};
use crate::tables::HashMap;
use flo_protocol::TaskAssignment;
use std::collections::VecDeque;

/// Steps one input may take before the rest is continued by `Input::Continue`.
pub const STEPS_PER_INPUT_MAX: u32 = 4096;

#[derive(Debug)]
pub enum Task {
    /// An action run became final: answer its waiters, finish the step it executes.
    ActionFinal(RunKey),
    /// A workflow run may move on.
    WfAdvance(RunKey),
    /// A workflow run became final: answer its waiters, finish its parent's step.
    WfFinal(RunKey),
    /// After recovery: an in-flight workflow run continues where it was.
    WfResume(RunKey),
    /// A run may be final and unreferenced: archive it (`archive::plan_archive`).
    Archive(RunKind, RunKey),
    /// Tasks leased here (now durable) for an await of a worker homed here.
    Delivered {
        worker: WorkerKey,
        want_id: u64,
        from: u32,
        tasks: Vec<TaskAssignment>,
    },
}

/// The queue of tasks and the budgets that bound how much one input does: steps per input
/// (`STEPS_PER_INPUT_MAX`) and workflow steps per root run in one burst of work.
#[derive(Default)]
pub struct Agenda {
    queue: VecDeque<Task>,
    /// Steps left for the input being handled.
    steps_left: u32,
    /// Workflow steps taken per root run since the agenda was last empty.
    root_steps: HashMap<RunKey, u32>,
}

impl Agenda {
    /// A new input: a fresh step budget.
    pub fn new_input(&mut self) {
        self.steps_left = STEPS_PER_INPUT_MAX;
    }

    pub fn push(&mut self, task: Task) {
        self.queue.push_back(task);
    }

    /// The next task, charged to the input's budget; None once the queue is empty (a burst
    /// of work ended: the next one gets fresh per-run budgets) or the budget is spent.
    pub fn next(&mut self) -> Option<Task> {
        if self.steps_left == 0 {
            return None;
        }
        let Some(task) = self.queue.pop_front() else {
            self.root_steps.clear();
            return None;
        };
        self.steps_left -= 1;
        Some(task)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether the input's budget is spent (what is left waits for `Input::Continue`).
    pub fn spent(&self) -> bool {
        self.steps_left == 0
    }

    /// Charges one workflow step to the input and to `root`'s budget; false once the
    /// root's `max` is spent.
    pub fn charge_root(&mut self, root: &RunKey, max: u32) -> bool {
        self.steps_left = self.steps_left.saturating_sub(1);
        match self.root_steps.get_mut(root) {
            Some(n) => {
                *n += 1;
                *n <= max
            }
            None => {
                self.root_steps.insert(root.clone(), 1);
                true
            }
        }
    }
}
