//! The run event feed (Codehooks' workflow events): what each workflow record means to the
//! outside world — a run started, a step started, waits or finished, the state changed, the
//! run was continued or ended — kept per shard in a bounded ring, each event placed by the
//! LSN of the record that says it. Derived in `apply` (no record of its own: an event is as
//! durable as its record, costs no log bytes, and replay rebuilds it), held in snapshots;
//! readers page through it by position (`workflows::events`, `flo workflow events`).
//!
//! The ring is kept in chunks of `CHUNK` events: a full chunk never changes, so a clone
//! shares the full ones (an `Arc` each) and copies only the open one; a snapshot takes such
//! a clone and encodes it on the writer's thread. Encoding the 65,536 events on the shard paused it ~7 ms
//! per snapshot (measured at 25,000 workflow runs/s: the most of a 9–12 ms pause).

use crate::fold::record::{Record, RunControl, StepNext, StepWait};
use crate::fold::workflows::Workflows;
use flo_protocol::WorkflowRunStatus;
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::VecDeque;
use std::sync::Arc;

/// Events each shard keeps; older ones are dropped (a reader behind them is told so).
pub const EVENTS_KEPT: usize = 65_536;

/// Events per chunk of the ring: a snapshot copies at most this many.
const CHUNK: usize = 512;

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

/// The ring: written as `[events, dropped_to]` (the events one array, oldest first),
/// however they are chunked.
#[derive(Debug, Default, Clone)]
pub struct RunEvents {
    /// Full chunks, oldest first; never changed (shared with snapshot images).
    sealed: VecDeque<Arc<[RunEvent]>>,
    /// Events at the front of the first full chunk that were dropped.
    skip: usize,
    /// The newest events, fewer than `CHUNK`.
    open: Vec<RunEvent>,
    /// Events kept.
    len: usize,
    /// The position of the newest event dropped (0: none yet).
    dropped_to: u64,
    /// The namespace and workflow names the last event took (shared, not copied again).
    names: (Option<Arc<str>>, Option<Arc<str>>),
    /// Events pushed since the process started (what `note` added is the difference).
    pushed: u64,
}

impl PartialEq for RunEvents {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.dropped_to == other.dropped_to && self.iter().eq(other.iter())
    }
}

impl Eq for RunEvents {}

/// Written as `[events, dropped_to]`, as when the ring was one `VecDeque`.
impl Serialize for RunEvents {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The events, one array.
        struct Events<'a>(&'a RunEvents);
        impl Serialize for Events<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.len))?;
                for event in self.0.iter() {
                    seq.serialize_element(event)?;
                }
                seq.end()
            }
        }
        let mut ring = serializer.serialize_struct("RunEvents", 2)?;
        ring.serialize_field("ring", &Events(self))?;
        ring.serialize_field("dropped_to", &self.dropped_to)?;
        ring.end()
    }
}

impl<'de> Deserialize<'de> for RunEvents {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            ring: Vec<RunEvent>,
            dropped_to: u64,
        }
        let wire = Wire::deserialize(deserializer)?;
        let mut events = RunEvents {
            dropped_to: wire.dropped_to,
            ..RunEvents::default()
        };
        for event in wire.ring {
            events.append(event);
        }
        Ok(events)
    }
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
    /// (Called after each record that says events, while webhooks are armed: it walks
    /// back from the newest chunk only as far as `n` reaches.)
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &RunEvent> {
        let mut tail: Vec<&[RunEvent]> = Vec::new();
        let mut left = n.min(self.len);
        for slice in self.slices().rev() {
            if left == 0 {
                break;
            }
            let take = left.min(slice.len());
            tail.push(&slice[slice.len() - take..]);
            left -= take;
        }
        tail.into_iter().rev().flatten()
    }

    /// The kept events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &RunEvent> {
        self.slices().flatten()
    }

    /// The kept events in runs of consecutive ones, oldest first.
    fn slices(&self) -> impl DoubleEndedIterator<Item = &[RunEvent]> {
        let skip = self.skip;
        self.sealed
            .iter()
            .enumerate()
            .map(move |(i, c)| if i == 0 { &c[skip..] } else { &c[..] })
            .chain(std::iter::once(&self.open[..]))
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

    /// `push` for tests of other modules.
    #[cfg(test)]
    pub(crate) fn push_for_tests(&mut self, event: RunEvent) {
        self.push(event);
    }

    fn push(&mut self, event: RunEvent) {
        self.pushed += 1;
        if self.len >= EVENTS_KEPT {
            self.drop_oldest();
        }
        self.append(event);
    }

    /// Adds `event` as the newest.
    fn append(&mut self, event: RunEvent) {
        if self.open.capacity() == 0 {
            self.open.reserve_exact(CHUNK);
        }
        self.open.push(event);
        self.len += 1;
        if self.open.len() >= CHUNK {
            let full = std::mem::take(&mut self.open);
            self.sealed.push_back(Arc::from(full));
        }
    }

    fn drop_oldest(&mut self) {
        let Some(first) = self.sealed.front() else {
            // Fewer events than a chunk holds.
            if !self.open.is_empty() {
                self.dropped_to = self.open.remove(0).pos;
                self.len -= 1;
            }
            return;
        };
        self.dropped_to = first[self.skip].pos;
        self.skip += 1;
        self.len -= 1;
        if self.skip == first.len() {
            self.sealed.pop_front();
            self.skip = 0;
        }
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
        let mut events = Vec::new();
        let mut next = after;
        let after_it = self
            .slices()
            .skip_while(|slice| slice.last().is_none_or(|e| e.pos <= after))
            .flat_map(|slice| &slice[slice.partition_point(|e| e.pos <= after)..]);
        for e in after_it {
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
        let newest = self
            .open
            .last()
            .or_else(|| self.sealed.back().and_then(|c| c.last()));
        newest.map_or(self.dropped_to, |e| e.pos)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    /// The ring as it was kept and written before chunks: one `VecDeque`.
    #[derive(Serialize)]
    struct OneDeque {
        ring: VecDeque<RunEvent>,
        dropped_to: u64,
    }

    fn encoded(value: &impl Serialize) -> Vec<u8> {
        let mut out = Vec::new();
        value
            .serialize(&mut rmp_serde::Serializer::new(&mut out))
            .unwrap();
        out
    }

    #[test]
    fn the_chunked_ring_keeps_reads_and_writes_what_one_deque_did() {
        let mut events = RunEvents::default();
        let mut model = OneDeque {
            ring: VecDeque::new(),
            dropped_to: 0,
        };
        // Past the bound and a few chunks on, checked at chunk edges and in between.
        let total = EVENTS_KEPT + 3 * CHUNK + 7;
        for n in 1..=total as u64 {
            let e = event(n << INDEX_BITS, "ns", if n % 3 == 0 { "a" } else { "b" });
            events.push(e.clone());
            if model.ring.len() >= EVENTS_KEPT {
                model.dropped_to = model.ring.pop_front().unwrap().pos;
            }
            model.ring.push_back(e);
            let n = n as usize;
            if n.is_multiple_of(CHUNK / 2) || n % CHUNK == 1 || n == total {
                assert_eq!(events.len(), model.ring.len());
                assert!(events.iter().eq(model.ring.iter()), "after {n}");
                assert_eq!(events.last_pos(), model.ring.back().unwrap().pos);
                let newest: Vec<u64> = events.newest(CHUNK + 3).map(|e| e.pos).collect();
                let want: Vec<u64> = model
                    .ring
                    .iter()
                    .rev()
                    .take(CHUNK + 3)
                    .rev()
                    .map(|e| e.pos)
                    .collect();
                assert_eq!(newest, want, "after {n}");
            }
        }
        assert_eq!(encoded(&events), encoded(&model), "the bytes of one deque");
        let back: RunEvents = rmp_serde::from_slice(&encoded(&events)).unwrap();
        assert_eq!(back, events);
        assert_eq!(back.last_pos(), events.last_pos());

        // A read from a position in the middle of a chunk, going across chunks.
        let from = model.ring[CHUNK + 5].pos;
        let read = events.read("ns", Some("a"), from, 2 * CHUNK);
        let want: Vec<u64> = model
            .ring
            .iter()
            .filter(|e| e.pos > from && &*e.workflow == "a")
            .take(2 * CHUNK)
            .map(|e| e.pos)
            .collect();
        let got: Vec<u64> = read.events.iter().map(|e| e.pos).collect();
        assert_eq!(got, want);
        assert!(!read.gap);
        assert!(events.read("ns", None, 0, 1).gap);
    }

    #[test]
    fn a_clone_is_not_changed_by_what_the_ring_does_after() {
        let mut events = RunEvents::default();
        for n in 1..=(2 * CHUNK as u64 + 10) {
            events.push(event(n << INDEX_BITS, "ns", "wf"));
        }
        let taken = events.clone();
        let before = encoded(&events);
        for n in 0..(EVENTS_KEPT as u64) {
            events.push(event((100_000 + n) << INDEX_BITS, "ns", "wf"));
        }
        assert_eq!(encoded(&taken), before);
    }
}
