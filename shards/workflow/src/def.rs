//! A validated workflow definition (see `definition::parse_workflow` for YAML → this type).

use crate::backoff::{PollPolicy, RetryPolicy};
use flo_protocol::{ValidationIssue, WorkflowRunStatus};
use serde_json::Value;
use std::collections::BTreeMap;

/// The name of the start step in run state, history and `$.steps._start...`.
pub const START_STEP: &str = "_start";
/// Built-in terminals and the status each ends a run with.
pub const BUILTIN_TERMINALS: [(&str, WorkflowRunStatus); 4] = [
    ("flo.Completed", WorkflowRunStatus::Completed),
    ("flo.Failed", WorkflowRunStatus::Failed),
    ("flo.Cancelled", WorkflowRunStatus::Cancelled),
    ("flo.TimedOut", WorkflowRunStatus::TimedOut),
];

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WorkflowDef {
    pub name: String,
    pub version: String,
    pub idempotency: Idempotency,
    pub start: Step,
    /// Named steps (the start step is not among them).
    pub steps: BTreeMap<String, Step>,
    /// Custom terminals and their base status.
    pub terminals: BTreeMap<String, WorkflowRunStatus>,
    /// Starts a run per record of a stream (absent from definitions stored before).
    #[serde(default)]
    pub trigger: Option<Trigger>,
    /// Starts runs on a cron or interval schedule (absent from definitions stored before).
    #[serde(default)]
    pub schedule: Option<Schedule>,
    /// Typed values each run carries for queries (absent from definitions stored before).
    #[serde(default)]
    pub search_attributes: Vec<crate::search::SearchAttribute>,
    /// Inline plans by name, run by `@plan/NAME` steps (absent from definitions stored
    /// before).
    #[serde(default)]
    pub plans: BTreeMap<String, crate::plan::Plan>,
    /// `state:` — the defaults of each run's state document (a JSON object; the run's input
    /// fields are laid over them). Absent from definitions stored before.
    #[serde(default)]
    pub state: Option<Value>,
    /// `webhook:` — where each run's events are POSTed (absent from definitions stored
    /// before).
    #[serde(default)]
    pub webhook: Option<crate::webhook::Webhook>,
    /// `eventStream:` — the stream each run's events are appended to (absent from
    /// definitions stored before).
    #[serde(default)]
    pub event_stream: Option<crate::webhook::EventStream>,
}

/// `schedule:` of a definition: runs started at each tick of a cron expression or an
/// interval (`crate::schedule::Ticker` computes the ticks).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub every: Every,
    /// A tick while this many runs of the schedule still run is skipped (and recorded).
    pub max_concurrent: u32,
    /// The input of scheduled runs (JSON text).
    pub input: String,
    /// Whether the schedule starts paused (`flo schedule resume` starts it).
    pub paused: bool,
    pub catchup: Catchup,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Every {
    /// A 5-field cron expression as written (or `@daily`, ...), in `timezone` (None: UTC).
    Cron {
        expr: String,
        timezone: Option<String>,
    },
    /// Every `ms` milliseconds, counted from the definition's creation.
    Interval { ms: u64 },
}

/// What a schedule does with the ticks it missed (the server was down, or busy past them).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Catchup {
    /// Fire the latest missed tick, skip the others.
    #[default]
    Latest,
    /// Skip every missed tick.
    None,
    /// Fire every missed tick (the newest `SCHEDULE_CATCHUP_MAX`; older ones are skipped).
    All,
}

impl Catchup {
    pub fn as_str(self) -> &'static str {
        match self {
            Catchup::Latest => "latest",
            Catchup::None => "none",
            Catchup::All => "all",
        }
    }
}

/// A stream trigger: the server reads the stream through a consumer group and starts one
/// run per record (or per batch of `batch_size`, the input then an array).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub stream: String,
    /// The stream's namespace (None: the workflow's).
    pub namespace: Option<String>,
    /// The group the server reads through (default `wf-{name}`).
    pub consumer_group: String,
    pub mode: flo_protocol::GroupMode,
    pub batch_size: u32,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Idempotency {
    #[default]
    None,
    Optional,
    Required,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub action: StepAction,
    /// A JSON value whose strings starting with `$.` are paths resolved at run time.
    pub input_mapping: Option<Value>,
    pub retry: Option<RetryPolicy>,
    pub poll: Option<PollPolicy>,
    /// Outcome → step name or terminal.
    pub transitions: BTreeMap<String, String>,
    /// `outputMapping:` — what of the step's output goes into the run's state (an object
    /// of names and `$.output` / `$.state` / `$.input` paths); None: the output object's
    /// fields as they are (absent from definitions stored before).
    #[serde(default)]
    pub output_mapping: Option<Value>,
    /// `skipOutputMapping: true` — the output stays in the step only.
    #[serde(default)]
    pub skip_output_mapping: bool,
    /// Outcome → several steps run at once (`success: [a, b]`), and where they meet again.
    /// An outcome is in `transitions` or here, never both (absent from definitions stored
    /// before).
    #[serde(default)]
    pub forks: BTreeMap<String, Fork>,
    /// `onError:` — what a failure with no transition of its own does (absent from
    /// definitions stored before: `fail`).
    #[serde(default)]
    pub on_error: OnError,
    /// `deferMs:` — the step waits this long each time it becomes ready (`deferred`).
    #[serde(default)]
    pub defer_ms: Option<u64>,
    /// `timeoutMs:` (else `defaults.timeoutMs`) of a `run` step: an execution past it fails
    /// with `execution timeout exceeded` and its `retry:` decides (None: the action's own
    /// timeout).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// `maxVisits:` (else `defaults.maxVisits`): the run fails when the step would be
    /// entered once more.
    #[serde(default)]
    pub max_visits: Option<u32>,
    /// `when:` / `whenAll:` / `whenAny:` — false: the step is `filtered` (not run).
    #[serde(default)]
    pub filter: Option<crate::filter::StepFilter>,
}

/// `transitions: {success: [a, b]}`: the branches an outcome starts at once and the step
/// they all reach again, where the run waits for each of them (found by validation,
/// `graph::check_forks`).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Fork {
    pub steps: Vec<String>,
    pub join: String,
}

/// `onError:` of a step: what a failure that no transition takes does (flow8's `OnError`).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// The run fails (in a branch: the whole run, its other branches cancelled).
    #[default]
    Fail,
    /// The run goes on along `success`, the error kept on the step.
    Continue,
    /// The step is marked `skipped` and the run goes on along `success`.
    Skip,
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Fail => "fail",
            OnError::Continue => "continue",
            OnError::Skip => "skip",
        }
    }
}

impl Step {
    /// Every step or terminal this step may lead to: its transitions, its forks' branches
    /// and its `onTimeout`.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.single_targets().chain(
            self.forks
                .values()
                .flat_map(|f| f.steps.iter().map(String::as_str)),
        )
    }

    /// The targets of its transitions to one step or terminal and its `onTimeout`.
    pub fn single_targets(&self) -> impl Iterator<Item = &str> {
        let on_timeout = match &self.action {
            StepAction::WaitForSignal(wait) => wait.on_timeout.as_deref(),
            StepAction::Run(_) | StepAction::Pass => None,
        };
        self.transitions
            .values()
            .map(String::as_str)
            .chain(on_timeout)
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum StepAction {
    Run(Target),
    WaitForSignal(SignalWait),
    /// `pass: true`: does nothing and succeeds (a meeting point, e.g. a join `dependsOn`
    /// made).
    Pass,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignalWait {
    pub signal_type: String,
    pub timeout_ms: Option<u64>,
    /// Step or terminal to go to on timeout (None: the run ends `timed_out`).
    pub on_timeout: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `@actions/NAME`
    Action(String),
    /// `@workflow/NAME[:VERSION]`
    Workflow {
        name: String,
        version: Option<String>,
    },
    /// `@plan/NAME`: a plan of the definition (`WorkflowDef::plans`).
    Plan(String),
}

/// Where a transition leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    Step(&'a str),
    Terminal {
        name: &'a str,
        status: WorkflowRunStatus,
    },
}

/// A definition that passed validation, with its warnings.
#[derive(Debug, Clone)]
pub struct Validated {
    pub def: WorkflowDef,
    pub warnings: Vec<ValidationIssue>,
}

impl WorkflowDef {
    /// The step named `name` (`_start` is the start step).
    pub fn step(&self, name: &str) -> Option<&Step> {
        if name == START_STEP {
            Some(&self.start)
        } else {
            self.steps.get(name)
        }
    }

    /// What a transition target names: a step, a custom terminal or a built-in one.
    pub fn resolve<'a>(&'a self, target: &'a str) -> Option<Next<'a>> {
        if let Some((name, status)) = BUILTIN_TERMINALS.iter().find(|(n, _)| *n == target) {
            return Some(Next::Terminal {
                name,
                status: *status,
            });
        }
        if let Some((name, status)) = self.terminals.get_key_value(target) {
            return Some(Next::Terminal {
                name,
                status: *status,
            });
        }
        self.steps
            .get_key_value(target)
            .map(|(name, _)| Next::Step(name))
    }
}
