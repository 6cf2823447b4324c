//! Validation of a parsed definition ([`RawWorkflow`]) into a [`WorkflowDef`]. Every problem is
//! collected (not just the first); any error refuses the definition, warnings never do.
//!
//! Each issue has a stable code, the path of the field concerned (`start.run`,
//! `steps.charge.transitions.success`, ...) and a message saying what was found and what is
//! allowed.
//!
//! | Code | Meaning |
//! |---|---|
//! | E100 | YAML syntax or shape error (a field of the wrong type, ...), with line and column; or the definition is too large |
//! | E101 | `kind` missing or not `Workflow` |
//! | E102 | `name` missing, empty or invalid (1 to 256 bytes, no whitespace, no `:`) |
//! | E103 | `version` missing, empty or invalid (1 to 128 bytes, no whitespace) |
//! | E104 | `start` missing |
//! | E105 | a feature not supported yet: `plans`, `schedule`, `trigger`, `searchAttributes`, `@plan/` targets |
//! | E106 | unknown field |
//! | E107 | a step has both or neither of `run` and `waitForSignal` |
//! | E108 | `idempotency` not `none`, `optional` or `required` |
//! | E109 | a step or terminal name that is reserved (`_start`, `flo.` prefix) or invalid |
//! | E201 | malformed target (`@actions/NAME`, `@workflow/NAME[:VERSION]`, `@plan/NAME`) |
//! | E202 | `inputMapping` is not valid JSON (as text) or cannot be turned into JSON (as YAML) |
//! | E203 | a `$.` path in `inputMapping` that is not an allowed form, names an unknown step or nests brackets too deep |
//! | E301 | a transition target that is not a step, custom terminal or built-in terminal |
//! | E302 | an `onTimeout` target that is not a step, custom terminal or built-in terminal |
//! | E303 | a `run` step without transitions |
//! | E304 | a `waitForSignal` step without a `success` transition |
//! | E401 | a duplicate key (steps, terminals, transitions, fields) |
//! | E402 | a custom terminal named like a step or a built-in terminal |
//! | E403 | a custom terminal `status` missing or not `completed`, `failed`, `cancelled`, `timed_out` |
//! | E501 | invalid `retry` (attempts not 1..=100, unknown backoff, a delay over 2^63-1 ms, `max_delay_ms` below `initial_delay_ms`, `within_ms` 0 or over 2^63-1) |
//! | E502 | invalid `poll` (the same checks; `maxDelayMs` below `baseDelayMs`) |
//! | E503 | invalid `waitForSignal` (`type` missing or empty, `timeoutMs` 0 or over 2^63-1) |
//! | E504 | `retry`, `poll` or `inputMapping` on a `waitForSignal` step |
//! | W101 | (warning) a step unreachable from `start` |
//! | W102 | (warning) a `waitForSignal` step without `timeoutMs` |
//! | W103 | (warning) a `pending` transition on a step without `poll` (matched as a plain outcome) |
//! | W104 | (warning) a `timeout` transition on a `waitForSignal` step without `timeoutMs` (it can never fire) |
//!
//! Delays and timeouts may be anything up to 2^63-1 ms (`i64::MAX`); one beyond the timer
//! horizon (about 100 years, `clock::TIMER_HORIZON_MS`) never fires.

use crate::def::{
    BUILTIN_TERMINALS, Backoff, Idempotency, PollPolicy, RetryPolicy, START_STEP, SignalWait, Step,
    StepAction, Target, Validated, WorkflowDef,
};
use crate::issues::{IssueCode, issue};
use crate::mapping::{is_mapping_path, mapping_paths};
use crate::parse::{Entries, RawPoll, RawRetry, RawSignalWait, RawStep, RawWorkflow};
use flo_protocol::{DELAY_MS_ACCEPTED_MAX, check_action_name};
use flo_protocol::{ValidationIssue, WorkflowRunStatus};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub const WORKFLOW_NAME_BYTES_MAX: usize = 256;
pub const VERSION_BYTES_MAX: usize = 128;
/// Step and custom terminal names.
pub const STEP_NAME_BYTES_MAX: usize = 256;
pub const SIGNAL_TYPE_BYTES_MAX: usize = 256;
/// `max_attempts` / `maxAttempts` of retries and polls.
pub const ATTEMPTS_MAX: u64 = 100;
/// Any retry or poll delay (beyond the timer horizon: never).
pub const DELAY_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
pub const RETRY_WITHIN_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
pub const SIGNAL_TIMEOUT_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
/// Deepest nesting of brackets and parentheses in an `inputMapping` path. The JSONPath
/// parser backtracks through nested filters: its time doubles with each level of `[?@[?@…`
/// (20 levels took a second, 30 would take a quarter of an hour), and it recurses once per
/// level (about 1,000 overflow a shard thread's stack) — found by fuzzing. Real paths nest
/// two or three.
pub const MAPPING_PATH_NESTING_MAX: usize = 4;
pub const RETRY_ATTEMPTS_DEFAULT: u32 = 3;
pub const RETRY_INITIAL_DELAY_MS_DEFAULT: u64 = 1000;
pub const POLL_ATTEMPTS_DEFAULT: u32 = 10;
pub const POLL_BASE_DELAY_MS_DEFAULT: u64 = 1000;
/// Names listed in a message before it says "...".
const NAMES_LISTED_MAX: usize = 20;

/// Checks the raw definition and builds the [`WorkflowDef`] if it has no error.
pub(super) fn validate(raw: RawWorkflow) -> Result<Validated, Vec<ValidationIssue>> {
    let mut c = Checker::default();
    c.unsupported(&raw);
    c.kind(raw.kind.as_deref());
    let name = c.name(raw.name);
    let version = c.version(raw.version);
    let idempotency = c.idempotency(raw.idempotency.as_deref());
    let raw_steps = c.unique("steps", entries(raw.steps));
    for (step, _) in &raw_steps {
        if let Err(why) = check_step_name(step) {
            c.error(
                IssueCode::E109,
                format!("steps.{step}"),
                format!("step `{step}`: {why}"),
            );
        }
    }
    let steps_known = raw_steps.iter().map(|(n, _)| n.clone()).collect();
    let terminals = c.terminals(entries(raw.terminals), &steps_known);
    let scope = Scope {
        steps: steps_known,
        terminals,
    };
    let start = match raw.start {
        Some(start) => c.step("start", start, &scope),
        None => {
            c.error(
                IssueCode::E104,
                "start",
                "missing `start`: the entry-point step, e.g. `start: {run: \"@actions/NAME\", transitions: {success: flo.Completed}}`",
            );
            None
        }
    };
    let mut steps = BTreeMap::new();
    for (step_name, raw_step) in raw_steps {
        if let Some(step) = c.step(&format!("steps.{step_name}"), raw_step, &scope) {
            steps.insert(step_name, step);
        }
    }
    let (Some(name), Some(version), Some(start), true) =
        (name, version, start, c.errors.is_empty())
    else {
        debug_assert!(!c.errors.is_empty());
        return Err(c.errors);
    };
    let def = WorkflowDef {
        name,
        version,
        idempotency,
        start,
        steps,
        terminals: scope.terminals,
    };
    for step in unreachable_steps(&def) {
        c.warn(
            IssueCode::W101,
            format!("steps.{step}"),
            format!("step `{step}` is never reached from `start`: no transition or `onTimeout` leads to it"),
        );
    }
    Ok(Validated {
        def,
        warnings: c.warnings,
    })
}

fn entries<V>(map: Option<Entries<V>>) -> Vec<(String, V)> {
    map.map_or_else(Vec::new, |e| e.0)
}

/// What a transition may name.
struct Scope {
    steps: BTreeSet<String>,
    terminals: BTreeMap<String, WorkflowRunStatus>,
}

impl Scope {
    fn resolves(&self, target: &str) -> bool {
        BUILTIN_TERMINALS.iter().any(|(n, _)| *n == target)
            || self.terminals.contains_key(target)
            || self.steps.contains(target)
    }

    /// Why `target` does not resolve, with what would.
    fn unknown_target(&self, target: &str) -> String {
        let builtins = BUILTIN_TERMINALS.iter().map(|(n, _)| *n);
        let mut candidates = self
            .steps
            .iter()
            .chain(self.terminals.keys())
            .map(String::as_str)
            .chain(builtins.clone());
        let hint = if let Some(near) = candidates.find(|c| c.eq_ignore_ascii_case(target)) {
            format!("; did you mean `{near}`?")
        } else if target == START_STEP {
            "; the start step cannot be a transition target".to_owned()
        } else if target.starts_with('@') {
            "; transitions lead to steps or terminals, targets such as `@actions/NAME` belong in a step's `run`".to_owned()
        } else {
            String::new()
        };
        format!(
            "`{target}` is not a step, a custom terminal or a built-in terminal (steps: {}; custom terminals: {}; built-in terminals: {}){hint}",
            listed(self.steps.iter().map(String::as_str)),
            listed(self.terminals.keys().map(String::as_str)),
            listed(builtins),
        )
    }
}

/// `a, b, c` (at most [`NAMES_LISTED_MAX`], then `...`), or `none`.
fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut names = names.peekable();
    if names.peek().is_none() {
        return "none".to_owned();
    }
    let mut out: Vec<String> = names
        .by_ref()
        .take(NAMES_LISTED_MAX)
        .map(str::to_owned)
        .collect();
    if names.next().is_some() {
        out.push("...".to_owned());
    }
    out.join(", ")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Run,
    Wait,
    /// Both or neither of `run` and `waitForSignal` (E107).
    Unclear,
}

#[derive(Default)]
struct Checker {
    errors: Vec<ValidationIssue>,
    warnings: Vec<ValidationIssue>,
}

impl Checker {
    fn error(&mut self, code: IssueCode, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(issue(code, path, message));
    }

    fn warn(&mut self, code: IssueCode, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(issue(code, path, message));
    }

    fn unsupported(&mut self, raw: &RawWorkflow) {
        let fields = [
            ("plans", raw.plans.is_some()),
            ("schedule", raw.schedule.is_some()),
            ("trigger", raw.trigger.is_some()),
            ("searchAttributes", raw.search_attributes.is_some()),
        ];
        for (field, _) in fields.iter().filter(|(_, present)| *present) {
            self.error(
                IssueCode::E105,
                *field,
                format!("`{field}` is not supported yet: remove it"),
            );
        }
    }

    fn kind(&mut self, kind: Option<&str>) {
        match kind {
            Some("Workflow") => {}
            Some(other) => self.error(
                IssueCode::E101,
                "kind",
                format!("found `kind: {other}`; a workflow definition has `kind: Workflow`"),
            ),
            None => self.error(
                IssueCode::E101,
                "kind",
                "missing `kind`: a workflow definition has `kind: Workflow`",
            ),
        }
    }

    fn name(&mut self, name: Option<String>) -> Option<String> {
        let Some(name) = name else {
            self.error(
                IssueCode::E102,
                "name",
                "missing `name`: name the workflow, e.g. `name: process-order`",
            );
            return None;
        };
        if let Err(why) = check_workflow_name(&name) {
            self.error(IssueCode::E102, "name", format!("`name` {why}"));
        }
        Some(name)
    }

    fn version(&mut self, version: Option<String>) -> Option<String> {
        let Some(version) = version else {
            self.error(
                IssueCode::E103,
                "version",
                "missing `version`: give the definition a version, e.g. `version: \"1.0.0\"`",
            );
            return None;
        };
        if let Err(why) = check_version(&version) {
            self.error(IssueCode::E103, "version", format!("`version` {why}"));
        }
        Some(version)
    }

    fn idempotency(&mut self, idempotency: Option<&str>) -> Idempotency {
        match idempotency {
            None | Some("none") => Idempotency::None,
            Some("optional") => Idempotency::Optional,
            Some("required") => Idempotency::Required,
            Some(other) => {
                self.error(
                    IssueCode::E108,
                    "idempotency",
                    format!("found `idempotency: {other}`; use `none`, `optional` or `required`"),
                );
                Idempotency::None
            }
        }
    }

    /// `entries` without repeated names (the first wins); each repeat is an E401 at
    /// `SECTION.NAME`.
    fn unique<V>(&mut self, section: &str, entries: Vec<(String, V)>) -> Vec<(String, V)> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(entries.len());
        for (name, value) in entries {
            if !seen.insert(name.clone()) {
                self.error(
                    IssueCode::E401,
                    format!("{section}.{name}"),
                    format!("`{name}` appears more than once under `{section}`; keep one"),
                );
                continue;
            }
            out.push((name, value));
        }
        out
    }

    fn terminals(
        &mut self,
        raw: Vec<(String, crate::parse::RawTerminal)>,
        steps: &BTreeSet<String>,
    ) -> BTreeMap<String, WorkflowRunStatus> {
        let mut terminals = BTreeMap::new();
        for (name, terminal) in self.unique("terminals", raw) {
            let path = format!("terminals.{name}");
            if BUILTIN_TERMINALS.iter().any(|(n, _)| *n == name) {
                self.error(
                    IssueCode::E402,
                    &path,
                    format!("`{name}` is a built-in terminal: use it directly without defining it, or pick another name"),
                );
            } else if steps.contains(&name) {
                self.error(
                    IssueCode::E402,
                    &path,
                    format!("terminal `{name}` has the name of a step, so transitions could not tell them apart: rename one"),
                );
            } else if let Err(why) = check_step_name(&name) {
                self.error(IssueCode::E109, &path, format!("terminal `{name}`: {why}"));
            }
            let status = match terminal.status.as_deref() {
                Some("completed") => WorkflowRunStatus::Completed,
                Some("failed") => WorkflowRunStatus::Failed,
                Some("cancelled") => WorkflowRunStatus::Cancelled,
                Some("timed_out") => WorkflowRunStatus::TimedOut,
                found => {
                    let found =
                        found.map_or("no `status`".to_owned(), |s| format!("`status: {s}`"));
                    self.error(
                        IssueCode::E403,
                        format!("{path}.status"),
                        format!("terminal `{name}` has {found}; use `completed`, `failed`, `cancelled` or `timed_out`"),
                    );
                    WorkflowRunStatus::Failed
                }
            };
            terminals.insert(name, status);
        }
        terminals
    }

    /// One step at `path` (`start` or `steps.NAME`); `None` when it has no valid action.
    fn step(&mut self, path: &str, raw: RawStep, scope: &Scope) -> Option<Step> {
        let RawStep {
            run,
            wait_for_signal,
            input_mapping,
            retry,
            poll,
            transitions,
        } = raw;
        let kind = match (&run, &wait_for_signal) {
            (Some(_), None) => StepKind::Run,
            (None, Some(_)) => StepKind::Wait,
            _ => StepKind::Unclear,
        };
        if kind == StepKind::Wait {
            let misplaced = [
                ("retry", retry.is_some()),
                ("poll", poll.is_some()),
                ("inputMapping", input_mapping.is_some()),
            ];
            for (field, _) in misplaced.iter().filter(|(_, present)| *present) {
                self.error(
                    IssueCode::E504,
                    format!("{path}.{field}"),
                    format!("`{field}` has no effect on a `waitForSignal` step (it applies to `run` steps): remove it"),
                );
            }
        }
        let action = match (run, wait_for_signal) {
            (Some(run), None) => self
                .target(&format!("{path}.run"), &run)
                .map(StepAction::Run),
            (None, Some(wait)) => Some(StepAction::WaitForSignal(self.signal_wait(
                &format!("{path}.waitForSignal"),
                wait,
                scope,
            ))),
            (Some(_), Some(_)) => {
                self.error(
                    IssueCode::E107,
                    path,
                    "the step has both `run` and `waitForSignal`; a step does one of them: keep one",
                );
                None
            }
            (None, None) => {
                self.error(
                    IssueCode::E107,
                    path,
                    "the step has neither `run` nor `waitForSignal`; add `run: \"@actions/NAME\"` or a `waitForSignal:` block",
                );
                None
            }
        };
        let has_poll = poll.is_some();
        let retry = retry.map(|r| self.retry(&format!("{path}.retry"), r));
        let poll = poll.map(|p| self.poll(&format!("{path}.poll"), p));
        let input_mapping = input_mapping
            .and_then(|m| self.input_mapping(&format!("{path}.inputMapping"), m, scope));
        let transitions = self.transitions(path, entries(transitions), scope, kind, has_poll);
        if let Some(StepAction::WaitForSignal(wait)) = &action
            && wait.timeout_ms.is_none()
            && transitions.contains_key("timeout")
        {
            self.warn(
                IssueCode::W104,
                format!("{path}.transitions.timeout"),
                "the step has no `waitForSignal.timeoutMs`, so its `timeout` transition can never fire (the step waits forever); add `timeoutMs` or remove the transition",
            );
        }
        Some(Step {
            action: action?,
            input_mapping,
            retry,
            poll,
            transitions,
        })
    }

    fn target(&mut self, path: &str, run: &str) -> Option<Target> {
        match parse_target(run) {
            Ok(Target::Plan(_)) => {
                self.error(
                    IssueCode::E105,
                    path,
                    format!("`{run}`: plans (`@plan/NAME`) are not supported yet; run an action (`@actions/NAME`) or a child workflow (`@workflow/NAME`)"),
                );
                None
            }
            Ok(target) => Some(target),
            Err(why) => {
                self.error(IssueCode::E201, path, why);
                None
            }
        }
    }

    fn signal_wait(&mut self, path: &str, raw: RawSignalWait, scope: &Scope) -> SignalWait {
        let signal_type = raw.signal_type.unwrap_or_default();
        if signal_type.trim().is_empty() {
            self.error(
                IssueCode::E503,
                format!("{path}.type"),
                "`waitForSignal` needs a `type`: the signal type to wait for, e.g. `type: approval`",
            );
        } else if signal_type.len() > SIGNAL_TYPE_BYTES_MAX {
            self.error(
                IssueCode::E503,
                format!("{path}.type"),
                format!(
                    "the signal `type` is {} bytes; at most {SIGNAL_TYPE_BYTES_MAX} are allowed",
                    signal_type.len()
                ),
            );
        }
        match raw.timeout_ms {
            Some(0) => self.error(
                IssueCode::E503,
                format!("{path}.timeoutMs"),
                "`timeoutMs` is 0; give a timeout above 0 or leave it out to wait without one",
            ),
            Some(ms) if ms > SIGNAL_TIMEOUT_MS_MAX => self.error(
                IssueCode::E503,
                format!("{path}.timeoutMs"),
                format!("`timeoutMs` is {ms}; at most {SIGNAL_TIMEOUT_MS_MAX} is allowed (a timeout beyond about 100 years never fires)"),
            ),
            Some(_) => {}
            None => {
                let on_timeout = if raw.on_timeout.is_some() {
                    " (`onTimeout` has no effect without it)"
                } else {
                    ""
                };
                // A `timeout` transition that can never fire has its own warning (W104).
                self.warn(
                    IssueCode::W102,
                    path,
                    format!("no `timeoutMs`: the step waits for a `{signal_type}` signal forever{on_timeout}; add one unless that is intended"),
                );
            }
        }
        if let Some(target) = &raw.on_timeout
            && !scope.resolves(target)
        {
            self.error(
                IssueCode::E302,
                format!("{path}.onTimeout"),
                scope.unknown_target(target),
            );
        }
        SignalWait {
            signal_type,
            timeout_ms: raw.timeout_ms,
            on_timeout: raw.on_timeout,
        }
    }

    fn retry(&mut self, path: &str, raw: RawRetry) -> RetryPolicy {
        let code = IssueCode::E501;
        let max_attempts = self.attempts(
            code,
            path,
            "max_attempts",
            raw.max_attempts,
            RETRY_ATTEMPTS_DEFAULT,
        );
        let backoff = self.backoff(code, path, raw.backoff.as_deref());
        let initial_delay_ms = raw
            .initial_delay_ms
            .unwrap_or(RETRY_INITIAL_DELAY_MS_DEFAULT);
        self.delay(code, path, "initial_delay_ms", initial_delay_ms);
        if let Some(max) = raw.max_delay_ms {
            self.delay(code, path, "max_delay_ms", max);
            self.cap(
                code,
                path,
                ("max_delay_ms", max),
                ("initial_delay_ms", initial_delay_ms),
            );
        }
        match raw.within_ms {
            Some(ms) if ms == 0 || ms > RETRY_WITHIN_MS_MAX => self.error(
                code,
                format!("{path}.within_ms"),
                format!("`within_ms` is {ms}; use 1 to {RETRY_WITHIN_MS_MAX}, or leave it out for no time budget"),
            ),
            _ => {}
        }
        RetryPolicy {
            max_attempts,
            backoff,
            initial_delay_ms,
            max_delay_ms: raw.max_delay_ms,
            within_ms: raw.within_ms,
        }
    }

    fn poll(&mut self, path: &str, raw: RawPoll) -> PollPolicy {
        let code = IssueCode::E502;
        let max_attempts = self.attempts(
            code,
            path,
            "maxAttempts",
            raw.max_attempts,
            POLL_ATTEMPTS_DEFAULT,
        );
        let backoff = self.backoff(code, path, raw.backoff.as_deref());
        let base_delay_ms = raw.base_delay_ms.unwrap_or(POLL_BASE_DELAY_MS_DEFAULT);
        self.delay(code, path, "baseDelayMs", base_delay_ms);
        let initial_delay_ms = raw.initial_delay_ms.unwrap_or(base_delay_ms);
        self.delay(code, path, "initialDelayMs", initial_delay_ms);
        if let Some(max) = raw.max_delay_ms {
            self.delay(code, path, "maxDelayMs", max);
            self.cap(
                code,
                path,
                ("maxDelayMs", max),
                ("baseDelayMs", base_delay_ms),
            );
        }
        PollPolicy {
            initial_delay_ms,
            max_attempts,
            backoff,
            base_delay_ms,
            max_delay_ms: raw.max_delay_ms,
        }
    }

    fn attempts(
        &mut self,
        code: IssueCode,
        path: &str,
        field: &str,
        value: Option<u64>,
        default: u32,
    ) -> u32 {
        let Some(n) = value else {
            return default;
        };
        if n == 0 || n > ATTEMPTS_MAX {
            self.error(
                code,
                format!("{path}.{field}"),
                format!("`{field}` is {n}; use 1 to {ATTEMPTS_MAX}"),
            );
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn backoff(&mut self, code: IssueCode, path: &str, backoff: Option<&str>) -> Backoff {
        match backoff {
            None | Some("exponential") => Backoff::Exponential,
            Some("constant") => Backoff::Constant,
            Some("linear") => Backoff::Linear,
            Some("exponential_jitter") => Backoff::ExponentialJitter,
            Some(other) => {
                self.error(
                    code,
                    format!("{path}.backoff"),
                    format!("found `backoff: {other}`; use `constant`, `linear`, `exponential` or `exponential_jitter`"),
                );
                Backoff::Exponential
            }
        }
    }

    fn delay(&mut self, code: IssueCode, path: &str, field: &str, ms: u64) {
        if ms > DELAY_MS_MAX {
            self.error(
                code,
                format!("{path}.{field}"),
                format!("`{field}` is {ms} ms; at most {DELAY_MS_MAX} is allowed"),
            );
        }
    }

    /// A cap on delays must not be below the delay it caps.
    fn cap(&mut self, code: IssueCode, path: &str, cap: (&str, u64), base: (&str, u64)) {
        if cap.1 < base.1 {
            self.error(
                code,
                format!("{path}.{}", cap.0),
                format!(
                    "`{}` ({}) is below `{}` ({}); raise it or lower `{}`",
                    cap.0, cap.1, base.0, base.1, base.0
                ),
            );
        }
    }

    /// The mapping as JSON, its paths checked (E203); `None` if absent or not JSON.
    fn input_mapping(
        &mut self,
        path: &str,
        raw: serde_yaml::Value,
        scope: &Scope,
    ) -> Option<Value> {
        let value = match raw {
            serde_yaml::Value::Null => return None,
            serde_yaml::Value::String(text) => match serde_json::from_str::<Value>(&text) {
                Ok(value) => value,
                // A bare path (`inputMapping: $.input`) maps the step input to what it selects.
                Err(_) if is_mapping_path(text.trim()) => Value::String(text.trim().to_owned()),
                Err(err) => {
                    self.error(
                        IssueCode::E202,
                        path,
                        format!("`inputMapping` is text but not JSON ({err}); write JSON such as '{{\"amount\": \"$.input.amount\"}}', or a YAML mapping"),
                    );
                    return None;
                }
            },
            yaml => match serde_json::to_value(&yaml) {
                Ok(value) => value,
                Err(err) => {
                    self.error(
                        IssueCode::E202,
                        path,
                        format!("`inputMapping` cannot be turned into JSON ({err}); use string keys and plain values"),
                    );
                    return None;
                }
            },
        };
        for mapping_path in mapping_paths(&value) {
            if let Err(why) = check_mapping_path(&mapping_path, &scope.steps) {
                self.error(IssueCode::E203, path, format!("`{mapping_path}` {why}"));
            }
        }
        Some(value)
    }

    fn transitions(
        &mut self,
        step_path: &str,
        raw: Vec<(String, String)>,
        scope: &Scope,
        kind: StepKind,
        has_poll: bool,
    ) -> BTreeMap<String, String> {
        let path = format!("{step_path}.transitions");
        let mut transitions = BTreeMap::new();
        for (outcome, target) in self.unique(&path, raw) {
            if !scope.resolves(&target) {
                self.error(
                    IssueCode::E301,
                    format!("{path}.{outcome}"),
                    scope.unknown_target(&target),
                );
            }
            transitions.insert(outcome, target);
        }
        match kind {
            StepKind::Run if transitions.is_empty() => self.error(
                IssueCode::E303,
                path,
                "a `run` step needs `transitions`: map its outcomes (`success`, `failure`, ...) to steps or terminals",
            ),
            StepKind::Run if !has_poll && transitions.contains_key("pending") => self.warn(
                IssueCode::W103,
                format!("{path}.pending"),
                "the step has no `poll`, so `pending` is matched as a plain outcome (no re-execution); add `poll:` to re-run the step while it is pending",
            ),
            StepKind::Wait if !transitions.contains_key("success") => self.error(
                IssueCode::E304,
                path,
                "a `waitForSignal` step needs a `success` transition: where to go once the signal arrives",
            ),
            _ => {}
        }
        transitions
    }
}

/// A run target: `@actions/NAME`, `@workflow/NAME`, `@workflow/NAME:VERSION` or `@plan/NAME`.
pub fn parse_target(run: &str) -> Result<Target, String> {
    if let Some(name) = run.strip_prefix("@actions/") {
        check_action_name(name).map_err(|e| format!("`{run}`: {e}"))?;
        return Ok(Target::Action(name.to_owned()));
    }
    if let Some(rest) = run.strip_prefix("@workflow/") {
        let (name, version) = match rest.split_once(':') {
            Some((name, version)) => (name, Some(version)),
            None => (rest, None),
        };
        check_workflow_name(name).map_err(|why| format!("`{run}`: the workflow name {why}"))?;
        if let Some(version) = version {
            check_version(version).map_err(|why| format!("`{run}`: the version {why}"))?;
        }
        return Ok(Target::Workflow {
            name: name.to_owned(),
            version: version.map(str::to_owned),
        });
    }
    if let Some(name) = run.strip_prefix("@plan/") {
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!(
                "`{run}`: the plan name must be non-empty and without whitespace"
            ));
        }
        return Ok(Target::Plan(name.to_owned()));
    }
    Err(format!(
        "`{run}` is not a target: use `@actions/NAME`, `@workflow/NAME`, `@workflow/NAME:VERSION` or `@plan/NAME`"
    ))
}

/// Workflow names: 1 to [`WORKFLOW_NAME_BYTES_MAX`] bytes, no whitespace or control characters,
/// no `:` (it separates the version in `@workflow/NAME:VERSION`). Err: why, to follow "the name".
pub fn check_workflow_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    if name.len() > WORKFLOW_NAME_BYTES_MAX {
        return Err(format!(
            "is {} bytes; at most {WORKFLOW_NAME_BYTES_MAX} are allowed",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{name:?} contains whitespace or control characters; use e.g. `-` instead"
        ));
    }
    if name.contains(':') {
        return Err(format!(
            "{name:?} contains `:`, which separates the version in `@workflow/NAME:VERSION`"
        ));
    }
    Ok(())
}

/// Versions: 1 to [`VERSION_BYTES_MAX`] bytes, no whitespace or control characters.
pub fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("is empty".to_owned());
    }
    if version.len() > VERSION_BYTES_MAX {
        return Err(format!(
            "is {} bytes; at most {VERSION_BYTES_MAX} are allowed",
            version.len()
        ));
    }
    if version.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{version:?} contains whitespace or control characters"
        ));
    }
    Ok(())
}

/// Step and custom terminal names: 1 to [`STEP_NAME_BYTES_MAX`] ASCII letters, digits, `_`,
/// `-`, `.`; not `_start`, not starting with `flo.`.
fn check_step_name(name: &str) -> Result<(), String> {
    if name == START_STEP {
        return Err(
            "`_start` is reserved for the start step, which is defined under `start:`".to_owned(),
        );
    }
    if name.starts_with("flo.") {
        return Err("names starting with `flo.` are reserved for built-in terminals".to_owned());
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if name.is_empty() || name.len() > STEP_NAME_BYTES_MAX || !ok_chars {
        return Err(format!(
            "the name is invalid: use 1 to {STEP_NAME_BYTES_MAX} letters, digits, `_`, `-` or `.`"
        ));
    }
    Ok(())
}

const MAPPING_PATH_FORMS: &str = "`$.input...`, `$.steps.NAME.output...`, `$.steps.NAME.outcome`, `$.flo.run_id`, `$.flo.timestamp`";

/// Whether a `$.` mapping string is valid JSONPath of an allowed form naming a known step.
fn check_mapping_path(path: &str, steps: &BTreeSet<String>) -> Result<(), String> {
    let nesting = nesting(path);
    if nesting > MAPPING_PATH_NESTING_MAX {
        return Err(format!(
            "nests brackets and parentheses {nesting} deep; at most {MAPPING_PATH_NESTING_MAX} \
             levels are allowed"
        ));
    }
    if let Err(err) = crate::mapping::parse_json_path(path) {
        return Err(format!(
            "is not valid JSONPath (RFC 9535): {err}; names with characters other than letters, digits and `_` need brackets, e.g. `$.steps['check-status'].output`"
        ));
    }
    let known_step = |step: &str| {
        if step == START_STEP || steps.contains(step) {
            Ok(())
        } else {
            Err(format!(
                "names step `{step}`, which is not defined (steps: {})",
                listed(std::iter::once(START_STEP).chain(steps.iter().map(String::as_str)))
            ))
        }
    };
    let (names, rest) = leading_names(&path[1..], 3);
    match names[..] {
        ["input", ..] => Ok(()),
        ["steps", step, "output", ..] => known_step(step),
        ["steps", step, "outcome"] if rest.is_empty() => known_step(step),
        ["flo", "run_id" | "timestamp"] if rest.is_empty() => Ok(()),
        _ => Err(format!(
            "is not one of the paths allowed: {MAPPING_PATH_FORMS}"
        )),
    }
}

/// How deep `(` and `[` nest in `path`. Never less than the parser's nesting: every opening
/// bracket counts (even in a string literal), a closing one only outside string literals.
fn nesting(path: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote = None::<char>;
    let mut escaped = false;
    for c in path.chars() {
        if matches!(c, '(' | '[') {
            depth += 1;
            deepest = deepest.max(depth);
        }
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, ')' | ']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Up to `max` leading member names of a JSONPath after its `$` (`.name`, `['name']`,
/// `["name"]`), and the rest of it.
fn leading_names(mut rest: &str, max: usize) -> (Vec<&str>, &str) {
    let mut names = Vec::new();
    while names.len() < max {
        let (name, after) = if let Some(r) = rest.strip_prefix('.') {
            if r.starts_with('.') {
                break; // `..`: descendants
            }
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        } else if let Some(r) = rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")) {
            let quote = if rest.as_bytes()[1] == b'\'' {
                '\''
            } else {
                '"'
            };
            let Some(end) = r.find(quote) else { break };
            let Some(after) = r[end + 1..].strip_prefix(']') else {
                break;
            };
            if r[..end].contains('\\') {
                break;
            }
            (&r[..end], after)
        } else {
            break;
        };
        names.push(name);
        rest = after;
    }
    (names, rest)
}

/// Named steps that no transition or `onTimeout` leads to from the start step.
fn unreachable_steps(def: &WorkflowDef) -> Vec<&str> {
    fn next(step: &Step) -> impl Iterator<Item = &str> {
        let on_timeout = match &step.action {
            StepAction::WaitForSignal(wait) => wait.on_timeout.as_deref(),
            StepAction::Run(_) => None,
        };
        step.transitions
            .values()
            .map(String::as_str)
            .chain(on_timeout)
    }
    let mut reached = BTreeSet::new();
    let mut todo = vec![&def.start];
    while let Some(step) = todo.pop() {
        for target in next(step) {
            if let Some((name, next_step)) = def.steps.get_key_value(target)
                && reached.insert(name.as_str())
            {
                todo.push(next_step);
            }
        }
    }
    def.steps
        .keys()
        .map(String::as_str)
        .filter(|name| !reached.contains(name))
        .collect()
}
