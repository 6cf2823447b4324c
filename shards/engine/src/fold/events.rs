//! The run event feed (Codehooks' workflow events): what each workflow record means to the
//! outside world — a run started, a step started, waits or finished, the state changed, the
//! run was continued or ended — kept per shard in a bounded ring, each event placed by the
//! LSN of the record that says it. Derived in `apply` (no record of its own: an event is as
//! durable as its record, costs no log bytes, and replay rebuilds it), held in snapshots;
//! readers page through it by position (`workflows::events`, `flo workflow events`).

use crate::fold::record::{Record, RunControl, StepNext, StepWait};
use crate::fold::workflows::Workflows;
use flo_protocol::WorkflowRunStatus;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;

/// Events each shard keeps; older ones are dropped (a reader behind them is told so).
pub const EVENTS_KEPT: usize = 65_536;

/// Bits of a position below the record's LSN: the event's index among its record's.
const INDEX_BITS: u32 = 3;

/// The LSN of the record that says the event at `pos`.
pub fn lsn_of(pos: u64) -> u64 {
    pos >> INDEX_BITS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    WorkflowStarted,
    StepStarted,
    /// Waiting for a signal or a state update (`waitForSignal`, `waitForState`).
    StepWaiting,
    StepFinished,
    StateUpdated,
    /// Resumed after a pause, or a step continued by hand.
    WorkflowContinued,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::WorkflowStarted => "workflow_started",
            EventKind::StepStarted => "step_started",
            EventKind::StepWaiting => "step_waiting",
            EventKind::StepFinished => "step_finished",
            EventKind::StateUpdated => "state_updated",
            EventKind::WorkflowContinued => "workflow_continued",
            EventKind::Completed => "completed",
            EventKind::Failed => "failed",
            EventKind::Cancelled => "cancelled",
            EventKind::TimedOut => "timed_out",
        }
    }

    /// The kind named `name` (as `as_str` spells it).
    pub fn from_name(name: &str) -> Option<EventKind> {
        ALL.iter().copied().find(|k| k.as_str() == name)
    }

    fn of_end(status: WorkflowRunStatus) -> EventKind {
        match status {
            WorkflowRunStatus::Completed => EventKind::Completed,
            WorkflowRunStatus::Cancelled => EventKind::Cancelled,
            WorkflowRunStatus::TimedOut => EventKind::TimedOut,
            _ => EventKind::Failed,
        }
    }
}

/// Every kind, in the order the docs list them.
pub const ALL: [EventKind; 10] = [
    EventKind::WorkflowStarted,
    EventKind::StepStarted,
    EventKind::StepWaiting,
    EventKind::StepFinished,
    EventKind::StateUpdated,
    EventKind::WorkflowContinued,
    EventKind::Completed,
    EventKind::Failed,
    EventKind::Cancelled,
    EventKind::TimedOut,
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvent {
    /// `(lsn << 3) | index`: increasing on the shard.
    pub pos: u64,
    pub kind: EventKind,
    pub at_ms: u64,
    /// Shared with the events before it (most events name the namespace and workflow
    /// the previous one did).
    pub namespace: Arc<str>,
    pub run_id: Box<str>,
    pub workflow: Arc<str>,
    pub step: Option<Box<str>>,
}

/// What a read of the ring found.
pub struct EventsRead<'a> {
    pub events: Vec<&'a RunEvent>,
    /// The position the next read goes on from (past every event looked at).
    pub next: u64,
    /// Events after the reader's position were dropped before it read them.
    pub gap: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvents {
    ring: VecDeque<RunEvent>,
    /// The position of the newest event dropped (0: none yet).
    dropped_to: u64,
    /// The namespace and workflow names the last event took (shared, not copied again).
    #[serde(skip)]
    names: (Option<Arc<str>>, Option<Arc<str>>),
    /// Events pushed since the process started (what `note` added is the difference).
    #[serde(skip)]
    pushed: u64,
}

/// `name` as an `Arc`, the one in `last` if it is the same.
fn shared(last: &mut Option<Arc<str>>, name: &str) -> Arc<str> {
    match last {
        Some(a) if &**a == name => a.clone(),
        _ => last.insert(Arc::from(name)).clone(),
    }
}

impl RunEvents {
    /// The events `record` (at `lsn`) says, before it is applied to `workflows`: how many.
    pub fn note(&mut self, lsn: u64, record: &Record, workflows: &Workflows) -> usize {
        let before = self.pushed;
        self.note_events(lsn, record, workflows);
        (self.pushed - before) as usize
    }

    /// The newest `n` events, oldest first.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &RunEvent> {
        self.ring.range(self.ring.len().saturating_sub(n)..)
    }

    fn note_events(&mut self, lsn: u64, record: &Record, workflows: &Workflows) {
        let mut index = 0;
        let mut push =
            |kind: EventKind, namespace: &str, run_id: &str, step: Option<&str>, at_ms| {
                let workflow = match record {
                    Record::WfRunStarted { workflow, .. } => Some(workflow.as_str()),
                    _ => workflows
                        .run(namespace, run_id)
                        .map(|r| r.workflow.as_str()),
                };
                let Some(workflow) = workflow else {
                    return;
                };
                let event = RunEvent {
                    pos: (lsn << INDEX_BITS) | index,
                    kind,
                    at_ms,
                    namespace: shared(&mut self.names.0, namespace),
                    run_id: run_id.into(),
                    workflow: shared(&mut self.names.1, workflow),
                    step: step.map(Into::into),
                };
                self.push(event);
                index = (index + 1).min((1 << INDEX_BITS) - 1);
            };
        match record {
            Record::WfRunStarted {
                namespace,
                run_id,
                at_ms,
                ..
            } => push(EventKind::WorkflowStarted, namespace, run_id, None, *at_ms),
            Record::RunCreated {
                namespace,
                step: Some(step),
                created_at_ms,
                ..
            } => push(
                EventKind::StepStarted,
                namespace,
                &step.run_id,
                Some(&step.step),
                *created_at_ms,
            ),
            Record::WfStepStarted {
                namespace,
                run_id,
                step,
                wait,
                at_ms,
            } => {
                let kind = match wait {
                    StepWait::Signal { .. } => EventKind::StepWaiting,
                    StepWait::ActionRun { .. } | StepWait::ChildRun { .. } => {
                        EventKind::StepStarted
                    }
                };
                push(kind, namespace, run_id, Some(step), *at_ms);
            }
            Record::WfStepFinished {
                namespace,
                run_id,
                step,
                next,
                at_ms,
                ran,
                ..
            } => {
                // A step executed in the shard's slots started without a record of its own.
                if let Some(ran) = ran {
                    let started_ms = at_ms.saturating_sub(ran.ran_ms);
                    push(
                        EventKind::StepStarted,
                        namespace,
                        run_id,
                        Some(step),
                        started_ms,
                    );
                }
                push(
                    EventKind::StepFinished,
                    namespace,
                    run_id,
                    Some(step),
                    *at_ms,
                );
                if let StepNext::End { status, .. } = next {
                    push(EventKind::of_end(*status), namespace, run_id, None, *at_ms);
                }
            }
            Record::WfRunCancelled {
                namespace,
                run_id,
                at_ms,
                ..
            } => push(EventKind::Cancelled, namespace, run_id, None, *at_ms),
            Record::WfRunControl {
                namespace,
                run_id,
                step,
                control,
                at_ms,
            } => {
                let kind = match control {
                    RunControl::State { .. } => EventKind::StateUpdated,
                    RunControl::Release | RunControl::Continue { .. } => {
                        EventKind::WorkflowContinued
                    }
                    RunControl::Defer { .. } | RunControl::Hold => return,
                };
                push(kind, namespace, run_id, step.as_deref(), *at_ms);
            }
            _ => {}
        }
    }

    fn push(&mut self, event: RunEvent) {
        self.pushed += 1;
        if self.ring.len() >= EVENTS_KEPT
            && let Some(old) = self.ring.pop_front()
        {
            self.dropped_to = old.pos;
        }
        self.ring.push_back(event);
    }

    /// Up to `limit` events of `namespace` (and `workflow`, when given) after position
    /// `after`, oldest first.
    pub fn read(
        &self,
        namespace: &str,
        workflow: Option<&str>,
        after: u64,
        limit: usize,
    ) -> EventsRead<'_> {
        let start = self.ring.partition_point(|e| e.pos <= after);
        let mut events = Vec::new();
        let mut next = after;
        for e in self.ring.range(start..) {
            if events.len() >= limit {
                break;
            }
            next = e.pos;
            if &*e.namespace == namespace && workflow.is_none_or(|w| &*e.workflow == w) {
                events.push(e);
            }
        }
        EventsRead {
            events,
            next,
            gap: after < self.dropped_to,
        }
    }

    /// The position of the newest event (0: none).
    pub fn last_pos(&self) -> u64 {
        self.ring.back().map_or(self.dropped_to, |e| e.pos)
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pos: u64, ns: &str, wf: &str) -> RunEvent {
        RunEvent {
            pos,
            kind: EventKind::StepStarted,
            at_ms: pos,
            namespace: ns.into(),
            run_id: "r".into(),
            workflow: wf.into(),
            step: None,
        }
    }

    #[test]
    fn reads_go_on_past_what_they_looked_at_and_see_a_gap_once_dropped() {
        let mut events = RunEvents::default();
        for pos in 1..=(EVENTS_KEPT as u64 + 5) {
            let wf = if pos % 2 == 0 { "even" } else { "odd" };
            events.push(event(pos << INDEX_BITS, "ns", wf));
        }
        assert_eq!(events.len(), EVENTS_KEPT);
        let read = events.read("ns", Some("even"), 0, 4);
        assert!(read.gap, "the first five were dropped");
        let positions: Vec<u64> = read.events.iter().map(|e| e.pos >> INDEX_BITS).collect();
        assert_eq!(positions, vec![6, 8, 10, 12]);
        // The next read starts after the last one taken (13 was not looked at).
        assert_eq!(read.next >> INDEX_BITS, 12);
        let read = events.read("ns", Some("even"), read.next, 4);
        assert!(!read.gap);
        assert_eq!(read.events[0].pos >> INDEX_BITS, 14);
        let read = events.read("other", None, 0, 10);
        assert!(read.events.is_empty());
        let end = events.read("ns", None, events.last_pos(), 10);
        assert!(end.events.is_empty() && end.next == events.last_pos());
    }
}
