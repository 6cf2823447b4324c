//! WebAssembly workflow steps executed in the shard's own slots, without an action run:
//! those waiting for a slot, in order, and which steps are taken (waiting or executing), so
//! that advancing their run does not start them twice. In memory only: nothing here is
//! durable. A step's one record is its `WfStepFinished`; after a restart its run is
//! advanced again (`Task::WfResume`) and the step queued anew.

use crate::ids::RunKey;
use crate::tables::HashMap;
use std::collections::VecDeque;

/// A step to execute: its run, its name, the action it runs and the input it was given.
#[derive(Debug)]
pub struct StepExec {
    pub run: RunKey,
    pub step: String,
    pub action: String,
    pub input: Vec<u8>,
    /// When it was queued (ms, the engine's clock): its wait for a slot is counted.
    pub queued_ms: u64,
}

#[derive(Default)]
pub struct StepQueue {
    waiting: VecDeque<StepExec>,
    /// The steps taken, by run id: (namespace, step) (a run has several only while it runs
    /// branches).
    taken: HashMap<String, Vec<(String, String)>>,
    /// How many steps of each namespace wait (for `waiting_elsewhere` without a scan).
    by_namespace: HashMap<String, usize>,
}

impl StepQueue {
    /// Queues `exec` for a slot; its step is taken until `release`.
    pub fn push(&mut self, exec: StepExec) {
        let steps = self.taken.entry(exec.run.1.clone()).or_default();
        let (namespace, step) = (&exec.run.0, &exec.step);
        if !steps.iter().any(|(ns, s)| ns == namespace && s == step) {
            steps.push((namespace.clone(), step.clone()));
        }
        match self.by_namespace.get_mut(namespace) {
            Some(n) => *n += 1,
            None => {
                self.by_namespace.insert(namespace.clone(), 1);
            }
        }
        self.waiting.push_back(exec);
    }

    /// Whether `step` of `run_id` is queued or executing.
    pub fn is_taken(&self, namespace: &str, run_id: &str, step: &str) -> bool {
        self.taken
            .get(run_id)
            .is_some_and(|steps| steps.iter().any(|(ns, s)| ns == namespace && s == step))
    }

    /// The step is no longer taken (it finished, or will never execute).
    pub fn release(&mut self, namespace: &str, run_id: &str, step: &str) {
        if let Some(steps) = self.taken.get_mut(run_id) {
            steps.retain(|(ns, s)| !(ns == namespace && s == step));
            if steps.is_empty() {
                self.taken.remove(run_id);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Steps waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Where the oldest waiting step whose namespace `fair` accepts is among the first
    /// `scan`, else the oldest one `acceptable` takes; None when none is.
    pub fn find_fair(
        &self,
        scan: usize,
        fair: impl Fn(&str) -> bool,
        acceptable: impl Fn(&str) -> bool,
    ) -> Option<usize> {
        let first = self.waiting.iter().take(scan);
        first
            .clone()
            .position(|e| fair(&e.run.0))
            .or_else(|| first.clone().position(|e| acceptable(&e.run.0)))
    }

    pub fn remove(&mut self, at: usize) -> Option<StepExec> {
        let exec = self.waiting.remove(at)?;
        if let Some(n) = self.by_namespace.get_mut(&exec.run.0) {
            *n -= 1;
            if *n == 0 {
                self.by_namespace.remove(&exec.run.0);
            }
        }
        Some(exec)
    }

    /// Whether a step of another namespace than `namespace` waits.
    pub fn waiting_elsewhere(&self, namespace: &str) -> bool {
        let here = self.by_namespace.get(namespace).copied().unwrap_or(0);
        self.waiting.len() > here
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(namespace: &str, run: &str) -> StepExec {
        StepExec {
            run: (namespace.to_string(), run.to_string()),
            step: "s".into(),
            action: "a".into(),
            input: Vec::new(),
            queued_ms: 0,
        }
    }

    #[test]
    fn another_namespace_waiting_is_counted_as_steps_come_and_go() {
        let mut q = StepQueue::default();
        assert!(!q.waiting_elsewhere("a"));
        q.push(exec("a", "1"));
        q.push(exec("a", "2"));
        assert!(!q.waiting_elsewhere("a"));
        assert!(q.waiting_elsewhere("b"));
        q.push(exec("b", "3"));
        assert!(q.waiting_elsewhere("a"));
        assert_eq!(q.remove(2).map(|e| e.run.1), Some("3".to_string()));
        assert!(!q.waiting_elsewhere("a"));
        q.remove(0);
        q.remove(0);
        assert!(q.is_empty());
        assert!(!q.waiting_elsewhere("b"));
        assert!(q.by_namespace.is_empty());
    }
}
