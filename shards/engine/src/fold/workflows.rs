//! Workflow definitions (every shard) and runs (the shard a run id hashes to), changed only
//! by `ShardState::apply` of the workflow records. History is part of the fold: each record
//! appends the events it stands for.

pub use crate::fold::cursor::{Cursor, RunPhase};
use crate::fold::plan_steps::{self, PhaseAfter};
use crate::fold::record::{PlanEvent, StepNext, StepOutcome, StepRef, StepWait};
use crate::fold::workflow_defs::{WfEntry, WorkflowDefs};
use crate::pages::{self, Pos};
use crate::tables::HashMap;
use flo_protocol::{HistoryEvent, HistoryEventType, WorkflowRunStatus};
use flo_workflow::state::STATE_SIGNAL;
use flo_workflow::{START_STEP, StepAction, Target, WorkflowDef};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;

/// The ids a shard hands out to runs started without one: `wfrun-N` (reserved: callers
/// cannot choose them).
pub const GENERATED_RUN_ID_PREFIX: &str = "wfrun-";

#[derive(serde::Serialize, serde::Deserialize)]
pub struct StepState {
    pub name: String,
    /// The last execution's outcome and output (none before the step first finished).
    pub outcome: Option<StepOutcome>,
    pub output: Option<Value>,
    pub executions: u32,
    /// Times a cursor entered the step (Codehooks' `stepCount.visits`), the first entry,
    /// the last visit's end and the time its visits took in all (first execution's start
    /// to last finish, summed). Absent from runs written before.
    #[serde(default)]
    pub visits: u32,
    #[serde(default)]
    pub first_started_ms: u64,
    #[serde(default)]
    pub last_finished_ms: u64,
    #[serde(default)]
    pub total_ms: u64,
    /// The `WfStepFinished` whose output `output` is, when it is (0: none, or not known
    /// since a snapshot was loaded): the archive may point there instead of repeating it.
    #[serde(skip)]
    pub output_lsn: u64,
}

impl StepState {
    fn new(name: String) -> StepState {
        StepState {
            name,
            outcome: None,
            output: None,
            executions: 0,
            visits: 0,
            first_started_ms: 0,
            last_finished_ms: 0,
            total_ms: 0,
            output_lsn: 0,
        }
    }
}

/// A workflow run in memory. In a snapshot it is written as `RunImage` says (the fields it
/// had before `RunPhase`: images written before stay readable).
pub struct WfRun {
    pub workflow: String,
    pub version: String,
    /// Its version's definition (shared; set again by `relink` after a snapshot is loaded).
    pub def: Result<Arc<WorkflowDef>, String>,
    /// Where the run is (`Forked` while it runs branches).
    pub lead: Cursor,
    /// The run's branches while its lead is `Forked` (else empty).
    pub branches: Vec<Cursor>,
    /// Paused (`flo workflow pause`): no step starts until released.
    pub held: bool,
    /// `input_bytes` parsed (set again by `relink`).
    pub input: Value,
    pub input_bytes: Vec<u8>,
    pub idempotency_key: Option<String>,
    pub parent: Option<StepRef>,
    /// Nesting depth (0 for a top-level run).
    pub depth: u32,
    pub steps: Vec<StepState>,
    /// The last step's error, or why the run ended.
    pub error: Option<String>,
    /// Signals received and not consumed: (sequence, type, payload).
    pub signals: VecDeque<(u64, String, Value)>,
    pub next_signal_seq: u64,
    pub history: Vec<HistoryEvent>,
    /// Child runs started by this run.
    pub children: Vec<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub seq: u64,
    pub lsn: u64,
    /// Its `WfRunStarted` (which holds its input); 0 when not known (the run came from a
    /// snapshot).
    pub started_lsn: u64,
    /// The run's state document (a JSON object: `flo_workflow::state`).
    pub state: Value,
    /// At least its size as JSON (exact near the limit: `state_bytes_bound`); the step
    /// that would take it past the limit fails (`workflows::finish`).
    pub state_bytes: usize,
    /// `--group` at its start (a child run's is its parent's): whose `flow_group:` state
    /// fields it shares.
    pub group: Option<String>,
    /// `--webhook URL` at its start: where its events go.
    pub webhook_url: Option<String>,
}

impl WfRun {
    /// Running while any cursor runs a step, waiting when every one waits (for an action,
    /// a signal, a timer or a join), final once ended.
    pub fn status(&self) -> WorkflowRunStatus {
        if self.held && !matches!(self.lead.phase, RunPhase::Ended { .. }) {
            return WorkflowRunStatus::OnHold;
        }
        match self.lead.phase {
            RunPhase::Forked => {
                match self
                    .branches
                    .iter()
                    .any(|b| b.phase.status() == WorkflowRunStatus::Running)
                {
                    true => WorkflowRunStatus::Running,
                    false => WorkflowRunStatus::Waiting,
                }
            }
            ref phase => phase.status(),
        }
    }

    /// The cursors that run: the lead, or its branches once forked.
    pub fn cursors(&self) -> impl Iterator<Item = &Cursor> {
        let forked = self.lead.phase == RunPhase::Forked;
        let lead = (!forked).then_some(&self.lead);
        lead.into_iter()
            .chain(self.branches.iter().filter(move |_| forked))
    }

    /// The cursor at `step` (that runs it, waits for it or sleeps until it runs again).
    pub fn at(&self, step: &str) -> Option<&Cursor> {
        self.cursors().find(|c| c.phase.step() == Some(step))
    }

    /// What the cursor at `step` waits for.
    pub fn wait_at(&self, step: &str) -> Option<&StepWait> {
        self.at(step).and_then(|c| c.phase.wait())
    }

    /// Every wait of the run's cursors, with the step that waits.
    pub fn waits(&self) -> impl Iterator<Item = (&str, &StepWait)> {
        self.cursors()
            .filter_map(|c| Some((c.phase.step()?, c.phase.wait()?)))
    }

    pub(super) fn at_mut(&mut self, step: &str) -> Option<&mut Cursor> {
        if self.lead.phase != RunPhase::Forked {
            return (self.lead.phase.step() == Some(step)).then_some(&mut self.lead);
        }
        self.branches
            .iter_mut()
            .find(|c| c.phase.step() == Some(step))
    }

    /// The step a cursor is ready to start, or whose sleep ended by `now`.
    pub fn ready_step(&self, now: u64) -> Option<&str> {
        self.ready_steps(now).next()
    }

    /// Whether the run, not final, is at `step` to start it (ready, or sleeping before a
    /// retry or poll): what a WebAssembly step waiting for a slot or executing checks
    /// before it starts and when it ends.
    pub fn is_to_start(&self, step: &str) -> bool {
        !self.status().is_final()
            && self.at(step).is_some_and(|c| {
                matches!(c.phase, RunPhase::Ready { .. } | RunPhase::Sleeping { .. })
            })
    }

    /// Every step a cursor is to start now.
    pub fn ready_steps(&self, now: u64) -> impl Iterator<Item = &str> {
        self.cursors()
            .filter(move |c| match c.phase {
                RunPhase::Ready { .. } => true,
                RunPhase::Sleeping { at_ms, .. } => at_ms <= now,
                _ => false,
            })
            .filter_map(|c| c.phase.step())
    }

    /// The values of its definition's search attributes (those found), from its input and
    /// its steps' outputs.
    pub fn search_attrs(&self) -> Vec<(String, flo_workflow::search::AttrValue)> {
        let Ok(def) = &self.def else {
            return Vec::new();
        };
        def.search_attributes
            .iter()
            .filter_map(|a| {
                let doc = match &a.step {
                    None if a.state => Some(&self.state),
                    None => Some(&self.input),
                    Some(step) => self.step_state(step).and_then(|s| s.output.as_ref()),
                }?;
                flo_workflow::search::evaluate(a, doc).map(|v| (a.name.clone(), v))
            })
            .collect()
    }

    /// Steps the run executed so far, in all (every finished execution of every step:
    /// retries, polls and each visit of a loop count).
    pub fn steps_executed(&self) -> u64 {
        self.steps.iter().map(|s| u64::from(s.executions)).sum()
    }

    pub fn step_state(&self, name: &str) -> Option<&StepState> {
        self.steps.iter().find(|s| s.name == name)
    }

    pub(super) fn step_state_mut(&mut self, name: &str) -> &mut StepState {
        let i = match self.steps.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                self.steps.push(StepState::new(name.to_string()));
                self.steps.len() - 1
            }
        };
        &mut self.steps[i]
    }

    /// A cursor entered `step` (a visit).
    pub(super) fn visit(&mut self, step: &str, at_ms: u64) {
        let s = self.step_state_mut(step);
        s.visits += 1;
        if s.first_started_ms == 0 {
            s.first_started_ms = at_ms;
        }
    }

    pub(super) fn event(
        &mut self,
        event_type: HistoryEventType,
        step: Option<&str>,
        detail: String,
        at_ms: u64,
    ) {
        self.history.push(HistoryEvent {
            event_type,
            step: step.map(str::to_string),
            detail,
            at_ms,
            // Numbered by position where a reply is built (`pages::history_page`).
            seq: 0,
        });
    }
}

/// An upper bound of `state`'s size as JSON from `bound`: measured only once the bound
/// passes half the limit (a small state is never serialized on the run path).
fn state_bytes_bound(bound: usize, state: &Value) -> usize {
    if bound <= flo_workflow::state::STATE_BYTES_MAX / 2 {
        return bound;
    }
    state.to_string().len()
}

/// JSON bytes as a value (text that is not JSON becomes a string).
/// How a step ended, as its `WfStepFinished` says: outcome, output (JSON), error, and the
/// fields its worker or guest set in the run's state (a JSON object).
pub type StepEnd = (
    StepOutcome,
    Option<Vec<u8>>,
    Option<String>,
    Option<Vec<u8>>,
);

/// An action's output as a step's output: JSON bytes (an output that is not JSON becomes a
/// JSON string: `json_value`).
pub fn step_output_json(output: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&json_value(output)).unwrap_or_default()
}

pub fn json_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A record about a run that is not in memory: a bug, not bad input (records are planned
/// against this same state). Debug builds stop; release builds skip the record.
pub(super) fn missing(lsn: u64, run_id: &str) {
    impossible(lsn, format_args!("workflow run {run_id:?} does not exist"));
}

pub(super) fn impossible(lsn: u64, what: std::fmt::Arguments) {
    debug_assert!(false, "record {lsn}: {what}");
}

pub(super) fn unlinked() -> Result<Arc<WorkflowDef>, String> {
    Err("the run's definition was not linked after a snapshot".to_string())
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Workflows {
    pub defs: WorkflowDefs,
    /// Namespace → run id → run (boxed: resizing a large table moves pointers only).
    runs: HashMap<String, HashMap<String, Box<WfRun>>>,
    /// Last number used in `wfrun-N` ids, per namespace.
    counters: HashMap<String, u64>,
    next_seq: u64,
}

impl Workflows {
    pub fn def(&self, namespace: &str, name: &str) -> Option<&WfEntry> {
        self.defs.def(namespace, name)
    }

    pub fn run(&self, namespace: &str, run_id: &str) -> Option<&WfRun> {
        self.runs.get(namespace)?.get(run_id).map(|r| &**r)
    }

    /// Whether any definition or run has a webhook or an event stream (events must be
    /// looked at).
    pub fn any_webhooks(&self) -> bool {
        let defs = self.defs.iter().flat_map(|(_, e)| e.versions.iter());
        defs.filter_map(|v| v.def.as_ref().ok())
            .any(|d| d.webhook.is_some() || d.event_stream.is_some())
            || self.all_runs().any(|(_, _, r)| r.webhook_url.is_some())
    }

    /// Every run: (namespace, run id, run).
    pub fn all_runs(&self) -> impl Iterator<Item = (&str, &str, &WfRun)> {
        self.runs.iter().flat_map(|(ns, runs)| {
            runs.iter()
                .map(move |(id, r)| (ns.as_str(), id.as_str(), &**r))
        })
    }

    /// Rebuilds what a snapshot does not carry: each run's definition and parsed input.
    pub fn relink(&mut self) {
        let defs = &self.defs;
        for (ns, runs) in self.runs.iter_mut() {
            for run in runs.values_mut() {
                // As `apply_started` found it.
                run.def = defs
                    .def(ns, &run.workflow)
                    .and_then(|e| e.get(Some(&run.version)))
                    .map(|v| v.def.clone())
                    .unwrap_or_else(|| {
                        Err(format!(
                            "workflow {:?} version {:?} is gone",
                            run.workflow, run.version
                        ))
                    });
                run.input = json_value(&run.input_bytes);
                // A run from an image written before runs had state starts from its
                // defaults and input.
                if run.state.is_null()
                    && let Ok(def) = &run.def
                {
                    run.state = flo_workflow::state::initial_state(def, &run.input);
                }
                run.state_bytes = run.state.to_string().len();
            }
        }
    }

    /// Whether `run_id` is a `wfrun-N` id this shard handed out (a run that existed).
    pub fn was_issued(&self, namespace: &str, run_id: &str) -> bool {
        run_id
            .strip_prefix(GENERATED_RUN_ID_PREFIX)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| self.counters.get(namespace).is_some_and(|&last| n <= last))
    }

    /// Runs in memory.
    /// Runs of `namespace` in memory (in flight, or finished and not yet archived).
    pub fn run_count_in(&self, namespace: &str) -> usize {
        self.runs.get(namespace).map_or(0, HashMap::len)
    }

    pub fn run_count(&self) -> usize {
        self.runs.values().map(|r| r.len()).sum()
    }

    /// Drops a run (archived).
    pub fn remove(&mut self, namespace: &str, run_id: &str) -> Option<Box<WfRun>> {
        self.runs.get_mut(namespace)?.remove(run_id)
    }

    pub(super) fn run_mut(&mut self, namespace: &str, run_id: &str) -> Option<&mut WfRun> {
        self.runs
            .get_mut(namespace)?
            .get_mut(run_id)
            .map(|r| &mut **r)
    }

    /// A fresh `wfrun-N` id that `ok` accepts (owned here, free).
    pub fn next_run_id(&self, namespace: &str, ok: impl Fn(&str) -> bool) -> String {
        let last = self.counters.get(namespace).copied().unwrap_or(0);
        crate::ids::fresh_run_id(last, &[GENERATED_RUN_ID_PREFIX], ok)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn apply_started(
        &mut self,
        namespace: String,
        run_id: String,
        workflow: String,
        version: String,
        input: Vec<u8>,
        idempotency_key: Option<String>,
        parent: Option<StepRef>,
        at_ms: u64,
        lsn: u64,
        search: &mut crate::fold::search::SearchIndex,
    ) {
        if let Some(n) = run_id
            .strip_prefix(GENERATED_RUN_ID_PREFIX)
            .and_then(|n| n.parse::<u64>().ok())
        {
            let counter = self.counters.entry(namespace.clone()).or_insert(0);
            *counter = (*counter).max(n);
        }
        let def = self
            .def(&namespace, &workflow)
            .and_then(|e| e.get(Some(&version)))
            .map(|v| v.def.clone())
            .unwrap_or_else(|| Err(format!("workflow {workflow:?} version {version:?} is gone")));
        let depth = parent
            .as_ref()
            .and_then(|p| self.run(&namespace, &p.run_id))
            .map_or(0, |p| p.depth + 1);
        if let Some(p) = &parent
            && let Some(parent_run) = self.run_mut(&namespace, &p.run_id)
        {
            parent_run.children.push(run_id.clone());
        }
        self.next_seq += 1;
        let mut run = WfRun {
            workflow,
            version,
            def,
            lead: Cursor::ready(START_STEP.to_string(), at_ms, Vec::new()),
            branches: Vec::new(),
            held: false,
            input: json_value(&input),
            input_bytes: input,
            idempotency_key,
            parent,
            depth,
            steps: Vec::new(),
            error: None,
            signals: VecDeque::new(),
            next_signal_seq: 1,
            history: Vec::new(),
            children: Vec::new(),
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            seq: self.next_seq,
            lsn,
            started_lsn: lsn,
            state: Value::Null,
            state_bytes: 0,
            group: None,
            webhook_url: None,
        };
        if let Ok(def) = &run.def {
            run.state = flo_workflow::state::initial_state(def, &run.input);
            let defaults = def.state.as_ref().map_or(0, |d| d.to_string().len());
            let bound = run
                .input_bytes
                .len()
                .saturating_add(defaults)
                .saturating_add(2);
            run.state_bytes = state_bytes_bound(bound, &run.state);
        }
        let detail = String::from_utf8_lossy(&run.input_bytes).into_owned();
        run.event(HistoryEventType::WorkflowStarted, None, detail, at_ms);
        run.visit(START_STEP, at_ms);
        if run
            .def
            .as_ref()
            .is_ok_and(|d| !d.search_attributes.is_empty())
        {
            let attrs = run.search_attrs();
            search.insert(&namespace, run.seq, &run_id, &run.workflow, at_ms, attrs);
        }
        self.runs
            .entry(namespace)
            .or_default()
            .insert(run_id, Box::new(run));
    }

    pub fn apply_step_started(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: String,
        wait: StepWait,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        let Some(cursor) = run.at_mut(&step) else {
            return impossible(
                lsn,
                format_args!("run {run_id:?} starts step {step:?} it is not at"),
            );
        };
        // Logs written before the action run's creation started its step carry a
        // WfStepStarted after the RunCreated: the step has started already.
        if let (
            StepWait::ActionRun { run_id: new, .. },
            Some(StepWait::ActionRun { run_id: cur, .. }),
        ) = (&wait, cursor.phase.wait())
            && new == cur
        {
            return;
        }
        match &cursor.phase {
            RunPhase::Ready { .. } | RunPhase::Sleeping { .. } if cursor.executions == 0 => {
                cursor.first_at_ms = at_ms
            }
            RunPhase::Ready { .. } | RunPhase::Sleeping { .. } => {}
            phase => {
                return impossible(
                    lsn,
                    format_args!("run {run_id:?} starts a step while {phase:?}"),
                );
            }
        }
        cursor.phase = RunPhase::Waiting {
            step: step.clone(),
            wait: wait.clone(),
        };
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
        run.event(
            HistoryEventType::StepStarted,
            Some(&step),
            step.clone(),
            at_ms,
        );
        match &wait {
            StepWait::ActionRun {
                run_id: id,
                worker: true,
            } => {
                run.event(
                    HistoryEventType::AwaitingAction,
                    Some(&step),
                    id.clone(),
                    at_ms,
                );
            }
            StepWait::ActionRun { .. } | StepWait::ChildRun { .. } => {}
            StepWait::Signal { signal_type, .. } => {
                run.event(
                    HistoryEventType::WaitingForSignal,
                    Some(&step),
                    signal_type.clone(),
                    at_ms,
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn apply_step_finished(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: String,
        (outcome, output, error, state_patch): StepEnd,
        consumed_signal: Option<u64>,
        next: StepNext,
        (started_ms, at_ms): (Option<u64>, u64),
        (lsn, output_lsn): (u64, u64),
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        let Some(cursor) = run.at_mut(&step) else {
            return impossible(
                lsn,
                format_args!("run {run_id:?} finishes step {step:?} it is not at"),
            );
        };
        let wait = match &cursor.phase {
            RunPhase::Ready { .. } | RunPhase::Sleeping { .. } if cursor.executions == 0 => {
                cursor.first_at_ms = started_ms.unwrap_or(at_ms);
                None
            }
            RunPhase::Waiting { wait, .. } => Some(wait.clone()),
            _ => None,
        };
        // A step executed in the shard's slots (`started_ms`) has no record of its start:
        // this one says it started, as an action run's creation does.
        let executed = started_ms.is_some() || matches!(wait, Some(StepWait::ActionRun { .. }));
        cursor.executions += 1;
        cursor.plan = None;
        let visit_from = cursor.first_at_ms;
        if let Some(started_ms) = started_ms {
            run.event(
                HistoryEventType::StepStarted,
                Some(&step),
                step.clone(),
                started_ms,
            );
        }
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
        let output_len = output.as_ref().map_or(0, Vec::len);
        let output = output.map(|b| json_value(&b));
        if let (Some(out), Ok(def)) = (&output, &run.def)
            && let Some(step_def) = def.step(&step)
            && let Some(fields) =
                flo_workflow::state::mapped_output(step_def, out, &run.state, &run.input)
        {
            flo_workflow::state::merge(&mut run.state, fields);
            // The output's fields as they are add at most its bytes; a mapping may copy
            // anything, so it is measured.
            let bound = match step_def.output_mapping {
                None => run.state_bytes.saturating_add(output_len),
                Some(_) => usize::MAX,
            };
            run.state_bytes = state_bytes_bound(bound, &run.state);
        }
        if let Some(patch) = state_patch {
            if let Value::Object(fields) = json_value(&patch) {
                flo_workflow::state::merge(&mut run.state, fields);
            }
            let bound = run.state_bytes.saturating_add(patch.len());
            run.state_bytes = state_bytes_bound(bound, &run.state);
        }
        match outcome {
            StepOutcome::TargetNotFound => run.event(
                HistoryEventType::ActionNotFound,
                Some(&step),
                error.clone().unwrap_or_default(),
                at_ms,
            ),
            StepOutcome::TargetDisabled => run.event(
                HistoryEventType::ActionDisabled,
                Some(&step),
                error.clone().unwrap_or_default(),
                at_ms,
            ),
            _ => {}
        }
        if let Some(seq) = consumed_signal
            && let Some(pos) = run.signals.iter().position(|(s, _, _)| *s == seq)
        {
            let (_, signal_type, _) = run.signals.remove(pos).expect("found");
            run.event(
                HistoryEventType::SignalMatched,
                Some(&step),
                signal_type,
                at_ms,
            );
        }
        if executed {
            run.event(
                HistoryEventType::ActionCompleted,
                Some(&step),
                outcome.to_string(),
                at_ms,
            );
        }
        if let Some(StepWait::Signal { .. }) = wait
            && outcome == StepOutcome::Timeout
        {
            let target = match &next {
                StepNext::Step(s) => s.clone(),
                StepNext::End { terminal, .. } => terminal.clone(),
                _ => String::new(),
            };
            run.event(HistoryEventType::SignalTimeout, Some(&step), target, at_ms);
        }
        let s = run.step_state_mut(&step);
        s.outcome = Some(outcome.clone());
        s.output = output.clone();
        s.output_lsn = if s.output.is_some() { output_lsn } else { 0 };
        s.executions += 1;
        if !matches!(next, StepNext::Retry { .. } | StepNext::Poll { .. }) {
            s.last_finished_ms = at_ms;
            s.total_ms += at_ms.saturating_sub(visit_from);
        }
        run.event(
            HistoryEventType::StepCompleted,
            Some(&step),
            outcome.to_string(),
            at_ms,
        );
        match next {
            StepNext::Step(next_step) => {
                run.error = error;
                run.move_on(&step, next_step, at_ms);
            }
            StepNext::Fork { steps, join } => {
                run.error = error;
                run.event(
                    HistoryEventType::BranchesStarted,
                    Some(&step),
                    steps.join(","),
                    at_ms,
                );
                run.fork(&step, steps, join, at_ms, lsn);
            }
            StepNext::Retry { at_ms: due } => {
                let Some(cursor) = run.at_mut(&step) else {
                    return;
                };
                cursor.phase = RunPhase::Sleeping {
                    step: step.clone(),
                    at_ms: due,
                };
                let attempt = cursor.executions + 1;
                run.error = error;
                run.event(
                    HistoryEventType::StepRetry,
                    Some(&step),
                    format!("attempt {attempt} at {due}"),
                    at_ms,
                );
            }
            StepNext::Poll { at_ms: due } => {
                let Some(cursor) = run.at_mut(&step) else {
                    return;
                };
                cursor.phase = RunPhase::Sleeping { step, at_ms: due };
                cursor.polls += 1;
            }
            StepNext::End {
                terminal,
                status,
                reason,
            } => {
                debug_assert!(
                    status.is_final(),
                    "record {lsn}: ends run {run_id:?} {status:?}"
                );
                run.error = reason.or(error);
                let event = match status {
                    WorkflowRunStatus::Completed => HistoryEventType::WorkflowCompleted,
                    WorkflowRunStatus::Cancelled => HistoryEventType::WorkflowCancelled,
                    WorkflowRunStatus::TimedOut => HistoryEventType::WorkflowTimedOut,
                    _ => HistoryEventType::WorkflowFailed,
                };
                let detail = match &run.error {
                    Some(e) if status != WorkflowRunStatus::Completed => format!("{terminal}: {e}"),
                    _ => terminal.clone(),
                };
                run.event(event, None, detail, at_ms);
                run.end(terminal, status, output);
            }
        }
    }

    /// A plan step moved (`Record::WfPlanEvent`): its progress, and the run's phase,
    /// error and history as `plan_steps::apply` says.
    pub fn apply_plan_event(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: &str,
        event: PlanEvent,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
        // The definition is shared: a handle on it, not a copy of the plan.
        let def = run.def.clone().ok();
        let plan = def.as_deref().and_then(|def| {
            let StepAction::Run(Target::Plan(plan)) = &def.step(step)?.action else {
                return None;
            };
            def.plans.get(plan)
        });
        let name = |i: u16| {
            plan.and_then(|p| p.executors.get(i as usize))
                .map_or_else(|| format!("#{i}"), |e| e.name.clone())
        };
        let Some(cursor) = run.at_mut(step) else {
            return impossible(
                lsn,
                format_args!("run {run_id:?} plans step {step:?} it is not at"),
            );
        };
        let effect = plan_steps::apply(&mut cursor.plan, event, at_ms, name);
        let step = step.to_string();
        match effect.phase {
            PhaseAfter::Unchanged => {}
            PhaseAfter::Ready => cursor.phase = RunPhase::Ready { step: step.clone() },
            PhaseAfter::Sleeping(due) => {
                cursor.phase = RunPhase::Sleeping {
                    step: step.clone(),
                    at_ms: due,
                }
            }
        }
        if effect.error.is_some() {
            run.error = effect.error;
        }
        if let Some((kind, detail)) = effect.history {
            run.event(kind, Some(&step), detail, at_ms);
        }
    }

    pub fn apply_signal(
        &mut self,
        namespace: &str,
        run_id: &str,
        signal_type: String,
        payload: Vec<u8>,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        let seq = run.next_signal_seq;
        run.next_signal_seq += 1;
        let waiting = run.waits().find_map(|(step, wait)| match wait {
            StepWait::Signal { signal_type: t, .. } if *t == signal_type => Some(step),
            _ => None,
        });
        let step = waiting
            .or_else(|| run.lead.phase.step())
            .map(str::to_string);
        run.event(
            HistoryEventType::SignalReceived,
            step.as_deref(),
            signal_type.clone(),
            at_ms,
        );
        run.signals
            .push_back((seq, signal_type, json_value(&payload)));
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
    }

    pub fn apply_cancelled(
        &mut self,
        namespace: &str,
        run_id: &str,
        reason: Option<String>,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        run.end(
            "flo.Cancelled".to_string(),
            WorkflowRunStatus::Cancelled,
            None,
        );
        let detail = reason.clone().unwrap_or_else(|| "cancelled".to_string());
        run.error = reason;
        run.event(HistoryEventType::WorkflowCancelled, None, detail, at_ms);
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
    }

    /// Runs of a workflow after `from` (see `pages`) that `wanted` keeps, newest first: at
    /// most `limit`, and whether more remain.
    pub fn list(
        &self,
        namespace: &str,
        name: &str,
        wanted: impl Fn(&str, &WfRun) -> bool,
        limit: usize,
        from: &Pos,
    ) -> (Vec<(&str, &WfRun)>, bool) {
        let Some(runs) = self.runs.get(namespace) else {
            return (Vec::new(), false);
        };
        let out: Vec<(&str, &WfRun)> = runs
            .iter()
            .filter(|(_, r)| r.workflow == name)
            .filter(|(id, r)| wanted(id, r))
            .filter(|(id, r)| from.live_after(r.created_at_ms, id))
            .map(|(id, r)| (id.as_str(), &**r))
            .collect();
        pages::newest(out, limit, |(id, r)| (r.created_at_ms, id))
    }
}

/// The runs of one namespace+workflow are keyed by id; this keeps the wire form in one place.
/// `status`: what the run shows (`run.status()`, or `pending` while its step's action run
/// waits for a worker or a WebAssembly slot: `workflows::shown_status`).
pub fn run_info(
    namespace: &str,
    run_id: &str,
    run: &WfRun,
    status: WorkflowRunStatus,
) -> flo_protocol::WorkflowRunInfo {
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    let (terminal, output) = match &run.lead.phase {
        RunPhase::Ended {
            terminal, output, ..
        } => (Some(terminal.clone()), output.as_ref().map(bytes)),
        _ => (None, None),
    };
    flo_protocol::WorkflowRunInfo {
        run_id: run_id.to_string(),
        namespace: namespace.to_string(),
        workflow: run.workflow.clone(),
        version: run.version.clone(),
        status,
        current_step: run.lead.phase.step().map(str::to_string),
        step_since_ms: run.lead.phase.step().map(|_| run.lead.first_at_ms),
        waiting_for: waiting_for(&run.lead),
        branches: match run.lead.phase {
            RunPhase::Forked => run
                .branches
                .iter()
                .map(|b| flo_protocol::WorkflowBranchInfo {
                    step: match &b.phase {
                        RunPhase::Joined { step } => step.clone(),
                        phase => phase.step().unwrap_or_default().to_string(),
                    },
                    status: b.phase.status(),
                    waiting_for: waiting_for(b),
                    since_ms: b.first_at_ms,
                })
                .collect(),
            _ => Vec::new(),
        },
        input: run.input_bytes.clone(),
        output,
        // The steps that ran (a step entered and not yet finished once is not listed).
        steps: run
            .steps
            .iter()
            .filter(|s| s.executions > 0)
            .map(|s| flo_protocol::WorkflowStepInfo {
                name: s.name.clone(),
                outcome: s.outcome.as_ref().map(|o| o.to_string()),
                output: s.output.as_ref().map(bytes),
                executions: s.executions,
                visits: s.visits,
                first_started_ms: s.first_started_ms,
                last_finished_ms: s.last_finished_ms,
                total_ms: s.total_ms,
            })
            .collect(),
        terminal,
        error: run.error.clone(),
        idempotency_key: run.idempotency_key.clone(),
        parent_run_id: run.parent.as_ref().map(|p| p.run_id.clone()),
        created_at_ms: run.created_at_ms,
        updated_at_ms: run.updated_at_ms,
        search_attributes: run
            .def
            .as_ref()
            .is_ok_and(|d| !d.search_attributes.is_empty())
            .then(|| {
                let attrs = run.search_attrs();
                crate::fold::search::attrs_json(attrs.iter().map(|(n, v)| (n.as_str(), v)))
            }),
        state: (!run.state.is_null()).then(|| bytes(&run.state)),
    }
}

/// What a cursor waits for, in words (none while it runs or once ended).
fn waiting_for(cursor: &Cursor) -> Option<String> {
    // Sleeping before its first execution: its `deferMs`.
    let deferred = cursor.executions == 0;
    match &cursor.phase {
        RunPhase::Waiting { wait, .. } => Some(match wait {
            StepWait::ActionRun { run_id, .. } => format!("action run {run_id}"),
            StepWait::ChildRun { run_id } => format!("workflow run {run_id}"),
            StepWait::Signal { signal_type, .. } if signal_type == STATE_SIGNAL => {
                "a state update (update-state --continue)".to_string()
            }
            StepWait::Signal { signal_type, .. } => format!("signal {signal_type}"),
        }),
        RunPhase::Sleeping { at_ms, .. } if deferred => Some(format!("deferred until {at_ms} ms")),
        RunPhase::Sleeping { at_ms, .. } => Some(format!("timer at {at_ms} ms")),
        RunPhase::Joined { step } => Some(format!("the other branches at {step}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> Option<Box<WorkflowDef>> {
        flo_workflow::parse_workflow(yaml)
            .ok()
            .map(|v| Box::new(v.def))
    }

    fn yaml(version: &str) -> String {
        format!(
            "kind: Workflow\nname: w\nversion: \"{version}\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n"
        )
    }

    /// A run's phase is written to snapshots as the fields runs had before `RunPhase`
    /// and read back the same, in every phase.
    #[test]
    fn every_run_phase_survives_a_snapshot() {
        let mut w = Workflows::default();
        w.defs.apply_defined(
            "ns".into(),
            "w".into(),
            "1".into(),
            yaml("1"),
            1,
            parsed(&yaml("1")),
        );
        let start = |w: &mut Workflows, id: &str| {
            let id = id.to_string();
            w.apply_started(
                "ns".into(),
                id,
                "w".into(),
                "1".into(),
                b"{}".to_vec(),
                None,
                None,
                2,
                1,
                &mut Default::default(),
            );
        };
        let signal = StepWait::Signal {
            signal_type: "go".into(),
            deadline_ms: Some(9),
        };
        start(&mut w, "ready");
        start(&mut w, "waiting");
        w.apply_step_started("ns", "waiting", START_STEP.into(), signal, 3, 2);
        start(&mut w, "sleeping");
        let finish = |w: &mut Workflows, id: &str, next: StepNext| {
            let (outcome, output) = (StepOutcome::Failure, Some(b"{\"a\":1}".to_vec()));
            w.apply_step_finished(
                "ns",
                id,
                START_STEP.into(),
                (outcome, output, None, None),
                None,
                next,
                (None, 4),
                (3, 3),
            );
        };
        finish(&mut w, "sleeping", StepNext::Retry { at_ms: 50 });
        start(&mut w, "ended");
        let end = StepNext::End {
            terminal: "flo.Failed".into(),
            status: WorkflowRunStatus::Failed,
            reason: Some("no".into()),
        };
        finish(&mut w, "ended", end);
        for id in ["ready", "waiting", "sleeping", "ended"] {
            let run = w.run("ns", id).unwrap();
            let bytes = rmp_serde::to_vec(run).unwrap();
            let back: WfRun = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(back.lead, run.lead, "{id}");
            assert_eq!(back.status(), run.status(), "{id}");
        }
        let phase = |id| w.run("ns", id).unwrap().lead.phase.clone();
        assert!(matches!(phase("ready"), RunPhase::Ready { .. }));
        assert!(matches!(phase("waiting"), RunPhase::Waiting { .. }));
        assert_eq!(phase("sleeping").timer_ms(), Some(50));
        assert_eq!(
            w.run("ns", "ended").unwrap().status(),
            WorkflowRunStatus::Failed
        );
    }
}
