//! How an archive record writes a workflow run's final document (`Record::RunArchived`):
//! compactly. The run's namespace and id are the record's own (filled in by
//! `Record::decode`); times are offsets from the run's creation; history events name their
//! type by a number and their step by its place among the run's steps; a detail that says
//! what the document says already (the input, the step's name, its outcome, the
//! terminal) is left out; the run's output, when it is a step's, names that step. A
//! document this form cannot carry exactly (an event type this version does not know, a
//! numbered event) is written whole, as records written before this form were.

use flo_protocol::{
    HistoryEvent, HistoryEventType, WorkflowBranchInfo, WorkflowRunInfo, WorkflowRunStatus,
    WorkflowStepInfo,
};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// History event types by their number here (append only: records keep the numbers).
const EVENT_TYPES: [&str; 31] = [
    "workflow_started",
    "step_started",
    "step_completed",
    "step_retry",
    "waiting_for_signal",
    "signal_received",
    "signal_matched",
    "signal_timeout",
    "action_not_found",
    "action_disabled",
    "awaiting_action",
    "action_completed",
    "workflow_completed",
    "workflow_failed",
    "workflow_cancelled",
    "workflow_timed_out",
    "plan_executor_start",
    "plan_executor_success",
    "plan_executor_retry",
    "plan_executor_exhausted",
    "plan_breaker_skip",
    "plan_rate_limit_skip",
    "plan_cache_hit",
    "plan_fallback",
    "step_deferred",
    "workflow_paused",
    "workflow_resumed",
    "step_continued",
    "branches_started",
    "branches_joined",
    "state_updated",
];

/// A step named by its place among the run's steps, or by its name when it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum StepName {
    At(u32),
    Name(String),
}

/// The run's output: a step's (by its place), or its own bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Output {
    Step(u32),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Event {
    kind: u8,
    step: Option<StepName>,
    /// None: the detail the document implies (`implied_detail`).
    detail: Option<String>,
    /// ms after the run's creation.
    at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Step {
    name: String,
    outcome: Option<String>,
    #[serde(with = "serde_bytes")]
    output: Option<Vec<u8>>,
    executions: u32,
    visits: u32,
    /// ms after the run's creation (wrapping: 0 stays exact).
    first_started: i64,
    last_finished: i64,
    total_ms: u64,
}

/// Where the payloads an archive record leaves out are in the log (each payload written
/// once): the run's input is in its `WfRunStarted`, each step's output in the
/// `WfStepFinished` that gave it. 0: the document holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Refs {
    /// LSN of the run's `WfRunStarted`.
    pub input: u64,
    /// Per step (the document's steps, in order): LSN of the step's `WfStepFinished`.
    pub outputs: Vec<u64>,
    /// The document's `state` holds only the fields that differ from the input's
    /// (`state_over_input`): the input, once put back, gives the rest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub state_over_input: bool,
}

/// Inputs smaller than this are kept in the state as they are: parsing the two documents
/// would cost more than the bytes it saves.
const STATE_OVER_INPUT_MIN_BYTES: usize = 128;

/// `state` (a JSON object) as the fields that differ from `input`'s, when `input` is an
/// object whose every field the state holds and the two give `state` back byte for byte
/// (`state_with_input`); None: the state is written whole.
fn state_over_input(state: &[u8], input: &[u8]) -> Option<Vec<u8>> {
    use serde_json::Value;
    if input.len() < STATE_OVER_INPUT_MIN_BYTES {
        return None;
    }
    let Ok(Value::Object(fields)) = serde_json::from_slice(state) else {
        return None;
    };
    let Ok(Value::Object(mut whole)) = serde_json::from_slice(input) else {
        return None;
    };
    if !whole.keys().all(|k| fields.contains_key(k)) {
        return None;
    }
    let diff: serde_json::Map<String, Value> = fields
        .into_iter()
        .filter(|(k, v)| whole.get(k) != Some(v))
        .collect();
    let bytes = serde_json::to_vec(&diff).ok()?;
    // What a read makes of it (`state_with_input`), from what is parsed already.
    whole.extend(diff);
    (serde_json::to_vec(&whole).ok()?.as_slice() == state).then_some(bytes)
}

/// The state a difference (`state_over_input`) stands for: the input's fields with the
/// difference's laid over them.
fn state_with_input(diff: &[u8], input: &[u8]) -> Option<Vec<u8>> {
    let Ok(serde_json::Value::Object(diff)) = serde_json::from_slice(diff) else {
        return None;
    };
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(input) else {
        return None;
    };
    fields.extend(diff);
    serde_json::to_vec(&serde_json::Value::Object(fields)).ok()
}

impl Refs {
    /// An action run's document without the payloads these point at (they read as empty
    /// until a reader puts them back).
    pub fn leave_out_of(&self, info: &mut flo_protocol::RunInfo) {
        let (input, output) = self.action_left_out();
        if input {
            info.input.clear();
        }
        if output {
            info.output = None;
        }
    }

    /// Whether an action run's document leaves out its input, its output.
    pub fn action_left_out(&self) -> (bool, bool) {
        (self.input > 0, self.outputs.first().is_some_and(|&l| l > 0))
    }

    /// The earliest record the document refers to (the log must keep it as long as the
    /// run is retained), if any.
    pub fn floor(&self) -> Option<u64> {
        std::iter::once(self.input)
            .chain(self.outputs.iter().copied())
            .filter(|&l| l > 0)
            .min()
    }

    /// Every record the document refers to, each once, in order.
    pub fn lsns(&self) -> Vec<u64> {
        let mut all: Vec<u64> = std::iter::once(self.input)
            .chain(self.outputs.iter().copied())
            .filter(|&l| l > 0)
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// A workflow run's final document as an archive record writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactWf {
    workflow: String,
    version: String,
    status: u8,
    #[serde(with = "serde_bytes")]
    input: Vec<u8>,
    output: Option<Output>,
    steps: Vec<Step>,
    terminal: Option<String>,
    error: Option<String>,
    idempotency_key: Option<String>,
    parent_run_id: Option<String>,
    created_at_ms: u64,
    /// ms after the run's creation.
    updated: i64,
    #[serde(with = "serde_bytes")]
    search_attributes: Option<Vec<u8>>,
    #[serde(with = "serde_bytes")]
    state: Option<Vec<u8>>,
    current_step: Option<String>,
    waiting_for: Option<String>,
    branches: Vec<WorkflowBranchInfo>,
    step_since_ms: Option<u64>,
    history: Vec<Event>,
    /// The payloads left out (`input` empty, those steps' `output` none), until `fill`
    /// puts them back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refs: Option<Refs>,
}

/// A workflow run's status as the run index and the archive keep it.
pub fn workflow_status_code(s: WorkflowRunStatus) -> u8 {
    match s {
        WorkflowRunStatus::Pending => 0,
        WorkflowRunStatus::Running => 1,
        WorkflowRunStatus::Waiting => 2,
        WorkflowRunStatus::Completed => 3,
        WorkflowRunStatus::Failed => 4,
        WorkflowRunStatus::Cancelled => 5,
        WorkflowRunStatus::TimedOut => 6,
        WorkflowRunStatus::OnHold => 7,
    }
}

pub fn workflow_status(code: u8) -> WorkflowRunStatus {
    match code {
        0 => WorkflowRunStatus::Pending,
        1 => WorkflowRunStatus::Running,
        2 => WorkflowRunStatus::Waiting,
        3 => WorkflowRunStatus::Completed,
        4 => WorkflowRunStatus::Failed,
        5 => WorkflowRunStatus::Cancelled,
        7 => WorkflowRunStatus::OnHold,
        _ => WorkflowRunStatus::TimedOut,
    }
}

fn offset(at: u64, from: u64) -> i64 {
    at.wrapping_sub(from) as i64
}

fn at(offset: i64, from: u64) -> u64 {
    from.wrapping_add(offset as u64)
}

/// The detail an event of `kind` at `step` has unless it says otherwise.
fn implied_detail<'a>(
    kind: &str,
    step: Option<&'a WorkflowStepInfo>,
    info: &'a WorkflowRunInfo,
) -> Cow<'a, str> {
    match kind {
        "workflow_started" => String::from_utf8_lossy(&info.input),
        "step_started" => step.map_or("", |s| &s.name).into(),
        "step_completed" | "action_completed" => {
            step.and_then(|s| s.outcome.as_deref()).unwrap_or("").into()
        }
        "workflow_completed" => info.terminal.as_deref().unwrap_or("").into(),
        _ => "".into(),
    }
}

impl CompactWf {
    /// Whether the form carries `events` exactly (else the document is written whole).
    pub fn carries(events: &[HistoryEvent]) -> bool {
        events.iter().all(|e| {
            e.seq == 0
                && !matches!(e.event_type, HistoryEventType::Other(_))
                && EVENT_TYPES.contains(&e.event_type.as_str())
        })
    }

    /// A document (`info`, `events`) in the compact form, unless the form cannot carry it
    /// exactly; the payloads `refs` places in the log are left out.
    pub fn of(
        info: &WorkflowRunInfo,
        events: &[HistoryEvent],
        refs: Option<&Refs>,
    ) -> Option<CompactWf> {
        let from = info.created_at_ms;
        let place = |name: &str| info.steps.iter().position(|s| s.name == name);
        let mut history = Vec::with_capacity(events.len());
        for e in events {
            let name = e.event_type.as_str();
            let kind = EVENT_TYPES.iter().position(|t| *t == name)?;
            if e.seq != 0 || matches!(e.event_type, HistoryEventType::Other(_)) {
                return None;
            }
            let (step, step_info) = match &e.step {
                None => (None, None),
                Some(s) => match place(s) {
                    Some(i) => (Some(StepName::At(i as u32)), info.steps.get(i)),
                    None => (Some(StepName::Name(s.clone())), None),
                },
            };
            // A named step that is not among the steps implies no detail of its own.
            let implied = match (&e.step, step_info) {
                (Some(_), None) => None,
                _ => Some(implied_detail(name, step_info, info)),
            };
            history.push(Event {
                kind: kind as u8,
                step,
                detail: (implied.as_deref() != Some(&e.detail)).then(|| e.detail.clone()),
                at: offset(e.at_ms, from),
            });
        }
        let output = info.output.as_ref().map(|o| {
            match info
                .steps
                .iter()
                .rposition(|s| s.output.as_ref() == Some(o))
            {
                Some(i) => Output::Step(i as u32),
                None => Output::Bytes(o.clone()),
            }
        });
        let output_here = |i: usize| refs.is_none_or(|r| r.outputs.get(i).is_none_or(|&l| l == 0));
        let steps = info
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| Step {
                name: s.name.clone(),
                outcome: s.outcome.clone(),
                output: s.output.clone().filter(|_| output_here(i)),
                executions: s.executions,
                visits: s.visits,
                first_started: offset(s.first_started_ms, from),
                last_finished: offset(s.last_finished_ms, from),
                total_ms: s.total_ms,
            })
            .collect();
        let mut refs = refs.filter(|r| r.floor().is_some()).cloned();
        // With the input left out, the state leaves out the input's fields too.
        let state = match (refs.as_mut(), &info.state) {
            (Some(r), Some(state)) if r.input > 0 => match state_over_input(state, &info.input) {
                Some(diff) => {
                    r.state_over_input = true;
                    Some(diff)
                }
                None => Some(state.clone()),
            },
            _ => info.state.clone(),
        };
        Some(CompactWf {
            workflow: info.workflow.clone(),
            version: info.version.clone(),
            status: workflow_status_code(info.status),
            input: match &refs {
                Some(r) if r.input > 0 => Vec::new(),
                _ => info.input.clone(),
            },
            output,
            steps,
            terminal: info.terminal.clone(),
            error: info.error.clone(),
            idempotency_key: info.idempotency_key.clone(),
            parent_run_id: info.parent_run_id.clone(),
            created_at_ms: from,
            updated: offset(info.updated_at_ms, from),
            search_attributes: info.search_attributes.clone(),
            state,
            current_step: info.current_step.clone(),
            waiting_for: info.waiting_for.clone(),
            branches: info.branches.clone(),
            step_since_ms: info.step_since_ms,
            history,
            refs,
        })
    }

    /// Where the payloads left out are, if any are.
    pub fn refs(&self) -> Option<&Refs> {
        self.refs.as_ref()
    }

    /// Puts back the payloads left out: `input` is the run's input (from the record at
    /// `refs.input`), `output_of(lsn)` the output the record at `lsn` gave its step.
    pub fn fill(
        &mut self,
        input: Option<Vec<u8>>,
        mut output_of: impl FnMut(u64) -> Result<Option<Vec<u8>>, String>,
    ) -> Result<(), String> {
        let Some(refs) = self.refs.take() else {
            return Ok(());
        };
        if refs.input > 0 {
            self.input = input.ok_or("the run's start record holds no input")?;
            if refs.state_over_input {
                let diff = self.state.take().ok_or("the run's state is missing")?;
                self.state = Some(
                    state_with_input(&diff, &self.input)
                        .ok_or("the run's state cannot be rebuilt from its input")?,
                );
            }
        }
        for (step, &lsn) in self.steps.iter_mut().zip(&refs.outputs) {
            if lsn > 0 {
                step.output = output_of(lsn)?;
            }
        }
        Ok(())
    }

    /// The document again (info, history), with `namespace` and `run_id` (the record's);
    /// payloads left out (`refs`) read as empty.
    pub fn expand(self, namespace: String, run_id: String) -> (WorkflowRunInfo, Vec<HistoryEvent>) {
        let from = self.created_at_ms;
        let steps: Vec<WorkflowStepInfo> = self
            .steps
            .into_iter()
            .map(|s| WorkflowStepInfo {
                name: s.name,
                outcome: s.outcome,
                output: s.output,
                executions: s.executions,
                visits: s.visits,
                first_started_ms: at(s.first_started, from),
                last_finished_ms: at(s.last_finished, from),
                total_ms: s.total_ms,
            })
            .collect();
        let output = match self.output {
            None => None,
            Some(Output::Bytes(b)) => Some(b),
            Some(Output::Step(i)) => steps.get(i as usize).and_then(|s| s.output.clone()),
        };
        let info = WorkflowRunInfo {
            run_id,
            namespace,
            workflow: self.workflow,
            version: self.version,
            status: workflow_status(self.status),
            current_step: self.current_step,
            waiting_for: self.waiting_for,
            input: self.input,
            output,
            steps,
            terminal: self.terminal,
            error: self.error,
            idempotency_key: self.idempotency_key,
            parent_run_id: self.parent_run_id,
            created_at_ms: from,
            updated_at_ms: at(self.updated, from),
            search_attributes: self.search_attributes,
            state: self.state,
            branches: self.branches,
            step_since_ms: self.step_since_ms,
        };
        let history = self
            .history
            .into_iter()
            .map(|e| {
                let name = EVENT_TYPES.get(usize::from(e.kind)).copied();
                let event_type = match name {
                    Some(name) => HistoryEventType::from_name(name),
                    None => HistoryEventType::Other(format!("type {}", e.kind)),
                };
                let step_info = match &e.step {
                    Some(StepName::At(i)) => info.steps.get(*i as usize),
                    _ => None,
                };
                let step = match e.step {
                    None => None,
                    Some(StepName::Name(n)) => Some(n),
                    Some(StepName::At(_)) => step_info.map(|s| s.name.clone()),
                };
                let detail = e.detail.unwrap_or_else(|| {
                    implied_detail(name.unwrap_or(""), step_info, &info).into_owned()
                });
                HistoryEvent {
                    event_type,
                    step,
                    detail,
                    at_ms: at(e.at, from),
                    seq: 0,
                }
            })
            .collect();
        (info, history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: HistoryEventType, step: Option<&str>, detail: &str, at_ms: u64) -> HistoryEvent {
        HistoryEvent {
            event_type: kind,
            step: step.map(str::to_string),
            detail: detail.to_string(),
            at_ms,
            seq: 0,
        }
    }

    fn step(name: &str, outcome: &str, output: &[u8]) -> WorkflowStepInfo {
        WorkflowStepInfo {
            name: name.into(),
            outcome: Some(outcome.into()),
            output: Some(output.to_vec()),
            executions: 2,
            visits: 1,
            first_started_ms: 1_000_005,
            last_finished_ms: 1_000_009,
            total_ms: 4,
        }
    }

    fn doc() -> (WorkflowRunInfo, Vec<HistoryEvent>) {
        let info = WorkflowRunInfo {
            run_id: "wfrun-7".into(),
            namespace: "ns".into(),
            workflow: "order".into(),
            version: "3".into(),
            status: WorkflowRunStatus::Completed,
            current_step: None,
            waiting_for: None,
            input: b"{\"n\":1}".to_vec(),
            output: Some(b"{\"ok\":true}".to_vec()),
            steps: vec![
                step("charge", "success", b"{\"paid\":1}"),
                step("ship", "approved", b"{\"ok\":true}"),
            ],
            terminal: Some("flo.Completed".into()),
            error: None,
            idempotency_key: Some("k".into()),
            parent_run_id: None,
            created_at_ms: 1_000_000,
            updated_at_ms: 1_000_010,
            search_attributes: None,
            state: Some(b"{\"n\":1,\"ok\":true}".to_vec()),
            branches: Vec::new(),
            step_since_ms: None,
        };
        let history = vec![
            event(
                HistoryEventType::WorkflowStarted,
                None,
                "{\"n\":1}",
                1_000_000,
            ),
            event(
                HistoryEventType::StepStarted,
                Some("charge"),
                "charge",
                1_000_005,
            ),
            event(
                HistoryEventType::StepRetry,
                Some("charge"),
                "attempt 2 at 7",
                1_000_006,
            ),
            // Not the step's last outcome: said in full.
            event(
                HistoryEventType::StepCompleted,
                Some("charge"),
                "failure",
                1_000_006,
            ),
            event(
                HistoryEventType::ActionCompleted,
                Some("charge"),
                "success",
                1_000_008,
            ),
            event(
                HistoryEventType::StepCompleted,
                Some("ship"),
                "approved",
                1_000_009,
            ),
            // A step that never ran names itself.
            event(
                HistoryEventType::StepDeferred,
                Some("later"),
                "until 5",
                1_000_009,
            ),
            // Before the run's creation (a clock that went back): still exact.
            event(
                HistoryEventType::WorkflowCompleted,
                None,
                "flo.Completed",
                999_990,
            ),
        ];
        (info, history)
    }

    fn round_trip(compact: &CompactWf) -> CompactWf {
        let bytes = rmp_serde::to_vec(compact).unwrap();
        rmp_serde::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_document_comes_back_exactly() {
        let (info, history) = doc();
        let compact = CompactWf::of(&info, &history, None).expect("carried");
        assert_eq!(compact.output, Some(Output::Step(1)));
        let implied = compact
            .history
            .iter()
            .filter(|e| e.detail.is_none())
            .count();
        assert_eq!(implied, 5, "{:?}", compact.history);
        let back = round_trip(&compact).expand(info.namespace.clone(), info.run_id.clone());
        assert_eq!(back, (info.clone(), history.clone()));
        // Its own output, times of 0 and an empty document.
        let mut other = info.clone();
        other.output = Some(b"[1]".to_vec());
        other.steps[0].first_started_ms = 0;
        other.steps[1].output = None;
        let compact = CompactWf::of(&other, &[], None).unwrap();
        let back = round_trip(&compact).expand(other.namespace.clone(), other.run_id.clone());
        assert_eq!(back, (other, Vec::new()));
    }

    /// With the input pointed at, the state leaves out the input's fields it holds
    /// unchanged, and comes back whole once the input is put back.
    #[test]
    fn a_state_leaves_out_its_inputs_fields_and_comes_back_whole() {
        let (mut info, history) = doc();
        let note = "x".repeat(300);
        info.input =
            serde_json::to_vec(&serde_json::json!({"n": 1, "note": note, "qty": 2})).unwrap();
        // A default, a step's field, an input field laid over.
        let state = serde_json::json!({"n": 1, "note": note, "qty": 5, "ok": true, "region": "eu"});
        info.state = Some(serde_json::to_vec(&state).unwrap());
        let refs = Refs {
            input: 7,
            outputs: vec![0, 0],
            ..Refs::default()
        };
        let compact = CompactWf::of(&info, &history, Some(&refs)).unwrap();
        assert!(compact.refs.as_ref().unwrap().state_over_input);
        assert!(compact.input.is_empty());
        assert_eq!(
            compact.state.as_deref(),
            Some(&br#"{"ok":true,"qty":5,"region":"eu"}"#[..])
        );
        let mut back = round_trip(&compact);
        back.fill(Some(info.input.clone()), |_| Ok(None)).unwrap();
        let back = back.expand(info.namespace.clone(), info.run_id.clone());
        assert_eq!(back, (info.clone(), history.clone()));

        // Written whole: a state without one of the input's fields, a small input.
        let mut without = info.clone();
        without.state = Some(br#"{"n":1,"ok":true}"#.to_vec());
        let mut small = info.clone();
        small.input = br#"{"n":1}"#.to_vec();
        for whole in [without, small] {
            let compact = CompactWf::of(&whole, &history, Some(&refs)).unwrap();
            assert!(!compact.refs.as_ref().unwrap().state_over_input);
            assert_eq!(compact.state, whole.state);
            let mut back = round_trip(&compact);
            back.fill(Some(whole.input.clone()), |_| Ok(None)).unwrap();
            let back = back.expand(whole.namespace.clone(), whole.run_id.clone());
            assert_eq!(back, (whole, history.clone()));
        }
    }

    #[test]
    fn what_the_form_cannot_carry_is_refused() {
        let (info, mut history) = doc();
        history[1].seq = 4;
        assert!(CompactWf::of(&info, &history, None).is_none());
        let (info, mut history) = doc();
        history.push(event(HistoryEventType::Other("new".into()), None, "", 1));
        assert!(CompactWf::of(&info, &history, None).is_none());
    }

    /// The numbers are the protocol's names, each once.
    #[test]
    fn every_event_type_has_one_number() {
        for (i, name) in EVENT_TYPES.iter().enumerate() {
            assert!(!matches!(
                HistoryEventType::from_name(name),
                HistoryEventType::Other(_)
            ));
            assert_eq!(EVENT_TYPES.iter().position(|n| n == name), Some(i));
        }
    }
}
