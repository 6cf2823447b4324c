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
//! | E106 | unknown field |
//! | E107 | a step has both or neither of `run` and `waitForSignal` |
//! | E108 | `idempotency` not `none`, `optional` or `required` |
//! | E109 | a step or terminal name that is reserved (`_start`, `flo.` prefix) or invalid |
//! | E201 | malformed target (`@actions/NAME`, `@workflow/NAME[:VERSION]`, `@plan/NAME`) |
//! | E202 | `inputMapping` is not valid JSON (as text) or cannot be turned into JSON (as YAML) |
//! | E204 | an `@plan/NAME` target naming no plan of the definition |
//! | E203 | a `$.` path in `inputMapping` that is not an allowed form, names an unknown step or nests brackets too deep |
//! | E301 | a transition target that is not a step, custom terminal or built-in terminal |
//! | E302 | an `onTimeout` target that is not a step, custom terminal or built-in terminal |
//! | E303 | a `run` step without transitions |
//! | E304 | a `waitForSignal` step without a `success` transition |
//! | E305 | branches that never meet again at one step (no join), or a branch that leads past its join |
//! | E306 | a cycle through a fork (a branch leads back to the step that started it), or a step in two branches of one fork before their join |
//! | E307 | a transition to a terminal inside a branch (it would end the run while other branches run; a failing branch fails the run unless `onError: continue`) |
//! | E308 | a list of transition targets that is empty, longer than 16, names a step twice or names a terminal |
//! | E309 | invalid `dependsOn` (a name that is not a step, an empty list, the step itself, a cycle, a `success` transition beside it) |
//! | E401 | a duplicate key (steps, terminals, transitions, fields) |
//! | E402 | a custom terminal named like a step or a built-in terminal |
//! | E403 | a custom terminal `status` missing or not `completed`, `failed`, `cancelled`, `timed_out` |
//! | E501 | invalid `retry` (attempts not 1..=100, unknown backoff, a delay over 2^63-1 ms, `max_delay_ms` below `initial_delay_ms`, `within_ms` 0 or over 2^63-1) |
//! | E502 | invalid `poll` (the same checks; `maxDelayMs` below `baseDelayMs`) |
//! | E503 | invalid `waitForSignal` (`type` missing or empty, `timeoutMs` 0 or over 2^63-1) |
//! | E504 | `retry`, `poll` or `inputMapping` on a `waitForSignal` step |
//! | E505 | invalid `trigger` (`stream` missing or not a stream name, `namespace` or `consumer_group` invalid, `mode` not `shared`, `exclusive` or `key_shared`, `batch_size` not 1..=1000) |
//! | E506 | invalid `schedule` (neither or both of `cron` and `interval`, a cron expression that is not 5 valid fields, an unknown `timezone`, `interval` below 100 ms, `max_concurrent` not 1..=10000, `input` not JSON, `catchup` not `latest`, `none` or `all`) |
//! | E507 | invalid `searchAttributes` (a name missing, invalid, duplicated or a built-in field's; `type` not `string`, `number`, `timestamp`, `bool` or `keyword_list`; `from` not a path into the input or a step's output, or naming an unknown step; more than 32) |
//! | E508 | invalid plan (unknown `selection`, no executors or more than 32, `health-weighted` without `health`, `health` values out of range, `cache` TTL or key template, `fallback` value not JSON or unknown condition, an error code both retryable and fatal; `retry` or `poll` on an `@plan/` step) |
//! | E509 | invalid plan executor (name, `action` not `@actions/NAME`, `breaker`, `rate_limit` or `tracking` values out of range) |
//! | E510 | invalid `state` (not an object, over 1 MiB) or `outputMapping` (not an object, a path not into `$.output`, `$.state` or `$.input`, or beside `skipOutputMapping: true`) |
//! | E511 | invalid `onError` (not `fail`, `continue` or `skip`) |
//! | E512 | invalid `deferMs`, `timeoutMs` or `maxVisits` of a step or of `defaults:` (0 or too large; `timeoutMs` beside `waitForSignal`) |
//! | E513 | invalid `when`, `whenAll` or `whenAny` (an expression that is not CEL, with its line and column; empty; over 1 KiB or nesting over 32; more than 16 in one step) |
//! | E514 | invalid `webhook` (`url` missing, not `http://` or `https://` with a host, over 2 KiB; an unknown or empty `events`; a header name that is not a token or that the server sets, a value with control characters, over 1 KiB, more than 32; `secret` empty or over 256 bytes; `timeoutMs` not 1..=60000) |
//! | E515 | invalid `eventStream` (`stream` missing or not a stream name; an unknown or empty `events`) |
//! | W101 | (warning) a step unreachable from `start` |
//! | W102 | (warning) a `waitForSignal` step without `timeoutMs` |
//! | W103 | (warning) a `pending` transition on a step without `poll` (matched as a plain outcome) |
//! | W104 | (warning) a `timeout` transition on a `waitForSignal` step without `timeoutMs` (it can never fire) |
//!
//! Delays and timeouts may be anything up to 2^63-1 ms (`i64::MAX`); one beyond the timer
//! horizon (about 100 years, `clock::TIMER_HORIZON_MS`) never fires.

use crate::def::{
    BUILTIN_TERMINALS, Catchup, Every, Fork, Idempotency, OnError, START_STEP, Schedule,
    SignalWait, Step, StepAction, Target, Trigger, Validated, WorkflowDef,
};
use crate::filter::{FILTERS_MAX, StepFilter};
use crate::issues::{IssueCode, issue};
use crate::mapping::{is_mapping_path, mapping_paths};
use crate::parse::{
    Entries, RawSchedule, RawSearchAttribute, RawSignalWait, RawStateWait, RawStateWaitBlock,
    RawStep, RawTransition, RawTrigger, RawWorkflow,
};
use crate::schedule::{check_cron, parse_interval, parse_timezone};
use crate::step_limits::StepDefaults;
use flo_protocol::{ValidationIssue, WorkflowRunStatus};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use crate::bounds::{
    FORK_WIDTH_MAX, SCHEDULE_CONCURRENT_MAX, SCHEDULE_INTERVAL_MS_MIN, SIGNAL_TIMEOUT_MS_MAX,
    SIGNAL_TYPE_BYTES_MAX, TRIGGER_BATCH_MAX,
};
use crate::names::{
    check_mapping_path, check_step_name, check_version, check_workflow_name, listed, parse_target,
};

/// Checks the raw definition and builds the [`WorkflowDef`] if it has no error.
pub(super) fn validate(raw: RawWorkflow) -> Result<Validated, Vec<ValidationIssue>> {
    let mut c = Checker::default();
    let mut raw = raw;
    let made = crate::depends::compile(&mut raw, &mut c.errors);
    c.kind(raw.kind.as_deref());
    let name = c.name(raw.name);
    let version = c.version(raw.version);
    let idempotency = c.idempotency(raw.idempotency.as_deref());
    let raw_steps = c.unique("steps", entries(raw.steps));
    for (step, _) in raw_steps.iter().filter(|(s, _)| !made.contains(s)) {
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
    let raw_plan_names: Vec<String> = raw
        .plans
        .as_ref()
        .map(|p| p.0.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let plans = c.plans(raw.plans);
    let state = c.state_defaults(raw.state);
    let defaults = crate::step_limits::defaults(raw.defaults, &mut c.errors);
    let scope = Scope {
        defaults,
        steps: steps_known,
        terminals,
        plans: raw_plan_names,
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
    let trigger = raw
        .trigger
        .and_then(|t| c.trigger(t, name.as_deref().unwrap_or("")));
    let schedule = raw.schedule.and_then(|s| c.schedule(s));
    let search_attributes = c.search_attributes(raw.search_attributes.unwrap_or_default(), &scope);
    let webhook = raw.webhook.and_then(|w| c.webhook(w));
    let event_stream = raw.event_stream.and_then(|e| c.event_stream(e));
    let (Some(name), Some(version), Some(start), true) =
        (name, version, start, c.errors.is_empty())
    else {
        debug_assert!(!c.errors.is_empty());
        return Err(c.errors);
    };
    let mut def = WorkflowDef {
        name,
        version,
        idempotency,
        start,
        steps,
        terminals: scope.terminals,
        trigger,
        schedule,
        search_attributes,
        plans,
        state,
        webhook,
        event_stream,
    };
    let fork_issues = crate::graph::check_forks(&mut def);
    if !fork_issues.is_empty() {
        return Err(fork_issues);
    }
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
    /// `defaults:` of the definition's steps.
    defaults: StepDefaults,
    terminals: BTreeMap<String, WorkflowRunStatus>,
    /// The plans defined (valid or not: a step naming an invalid plan is not told twice).
    plans: Vec<String>,
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Run,
    Wait,
    /// Both or neither of `run` and `waitForSignal` (E107).
    Unclear,
}

#[derive(Default)]
pub(crate) struct Checker {
    errors: Vec<ValidationIssue>,
    warnings: Vec<ValidationIssue>,
}

impl Checker {
    pub(crate) fn error(
        &mut self,
        code: IssueCode,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.errors.push(issue(code, path, message));
    }

    pub(crate) fn warn(
        &mut self,
        code: IssueCode,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.warnings.push(issue(code, path, message));
    }

    pub(crate) fn error_count(&self) -> usize {
        self.errors.len()
    }

    fn trigger(&mut self, raw: RawTrigger, workflow: &str) -> Option<Trigger> {
        let errors = self.errors.len();
        let bad = |c: &mut Self, field: &str, message: String| {
            c.error(IssueCode::E505, format!("trigger.{field}"), message)
        };
        let stream = raw.stream.unwrap_or_default();
        if let Err(e) = flo_protocol::check_stream_name(&stream) {
            bad(
                self,
                "stream",
                format!("{e}: name the stream to read, e.g. `stream: orders`"),
            );
        }
        if let Some(ns) = &raw.namespace
            && let Err(e) = flo_protocol::check_namespace(ns)
        {
            bad(self, "namespace", e.to_string());
        }
        let group = raw
            .consumer_group
            .unwrap_or_else(|| format!("wf-{workflow}"));
        if let Err(e) = flo_protocol::check_group_name(&group) {
            bad(self, "consumer_group", e.to_string());
        }
        let mode = match raw.mode.as_deref() {
            None | Some("shared") => flo_protocol::GroupMode::Shared,
            Some("exclusive") => flo_protocol::GroupMode::Exclusive,
            Some("key_shared") => flo_protocol::GroupMode::KeyShared,
            Some(other) => {
                bad(
                    self,
                    "mode",
                    format!("found `mode: {other}`; use `shared`, `exclusive` or `key_shared`"),
                );
                flo_protocol::GroupMode::Shared
            }
        };
        let batch_size = raw.batch_size.unwrap_or(1);
        if batch_size == 0 || batch_size > TRIGGER_BATCH_MAX as u64 {
            bad(
                self,
                "batch_size",
                format!(
                    "`batch_size` is 1 to {TRIGGER_BATCH_MAX} records per run, not {batch_size}"
                ),
            );
        }
        (self.errors.len() == errors).then_some(Trigger {
            stream,
            namespace: raw.namespace,
            consumer_group: group,
            mode,
            batch_size: batch_size as u32,
        })
    }

    fn schedule(&mut self, raw: RawSchedule) -> Option<Schedule> {
        let errors = self.errors.len();
        let bad = |c: &mut Self, field: &str, message: String| {
            let path = match field {
                "" => "schedule".to_string(),
                f => format!("schedule.{f}"),
            };
            c.error(IssueCode::E506, path, message)
        };
        let every = match (raw.cron, raw.interval) {
            (Some(expr), None) => {
                if let Err(e) = check_cron(&expr) {
                    bad(self, "cron", e);
                }
                if let Err(e) = parse_timezone(raw.timezone.as_deref()) {
                    bad(self, "timezone", e);
                }
                Every::Cron {
                    expr,
                    timezone: raw.timezone,
                }
            }
            (None, Some(interval)) => {
                if raw.timezone.is_some() {
                    bad(
                        self,
                        "timezone",
                        "`timezone` applies to `cron` only; an interval counts milliseconds"
                            .to_string(),
                    );
                }
                let ms = match parse_interval(&interval) {
                    Ok(ms) if ms < SCHEDULE_INTERVAL_MS_MIN => {
                        bad(
                            self,
                            "interval",
                            format!(
                                "`interval` is at least {SCHEDULE_INTERVAL_MS_MIN} ms, not {ms}"
                            ),
                        );
                        ms
                    }
                    Ok(ms) => ms,
                    Err(e) => {
                        bad(self, "interval", e);
                        0
                    }
                };
                Every::Interval { ms }
            }
            (Some(_), Some(_)) => {
                bad(
                    self,
                    "",
                    "`cron` and `interval` are exclusive: keep one".to_string(),
                );
                return None;
            }
            (None, None) => {
                bad(
                    self,
                    "",
                    "a schedule needs `cron` (e.g. \"0 */6 * * *\") or `interval` (milliseconds)"
                        .to_string(),
                );
                return None;
            }
        };
        let max_concurrent = raw.max_concurrent.unwrap_or(1);
        if max_concurrent == 0 || max_concurrent > SCHEDULE_CONCURRENT_MAX {
            bad(
                self,
                "max_concurrent",
                format!(
                    "`max_concurrent` is 1 to {SCHEDULE_CONCURRENT_MAX} runs, not {max_concurrent}"
                ),
            );
        }
        let input = match raw.input {
            None | Some(serde_yaml::Value::Null) => "{}".to_string(),
            Some(serde_yaml::Value::String(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => v.to_string(),
                Err(e) => {
                    bad(
                        self,
                        "input",
                        format!(
                            "`input` is text but not JSON ({e}); write JSON such as '{{\"mode\": \"full\"}}', or a YAML mapping"
                        ),
                    );
                    String::new()
                }
            },
            Some(yaml) => match serde_json::to_value(&yaml) {
                Ok(v) => v.to_string(),
                Err(e) => {
                    bad(
                        self,
                        "input",
                        format!("`input` cannot be turned into JSON ({e})"),
                    );
                    String::new()
                }
            },
        };
        if input.len() > flo_protocol::RUN_INPUT_BYTES_MAX {
            bad(
                self,
                "input",
                format!(
                    "`input` is {} bytes; a run's input is at most {} bytes",
                    input.len(),
                    flo_protocol::RUN_INPUT_BYTES_MAX
                ),
            );
        }
        let catchup = match raw.catchup.as_deref() {
            None | Some("latest") => Catchup::Latest,
            Some("none") => Catchup::None,
            Some("all") => Catchup::All,
            Some(other) => {
                bad(
                    self,
                    "catchup",
                    format!("found `catchup: {other}`; use `latest`, `none` or `all`"),
                );
                Catchup::Latest
            }
        };
        (self.errors.len() == errors).then_some(Schedule {
            every,
            max_concurrent: max_concurrent as u32,
            input,
            paused: raw.paused.unwrap_or(false),
            catchup,
        })
    }

    fn search_attributes(
        &mut self,
        raw: Vec<RawSearchAttribute>,
        scope: &Scope,
    ) -> Vec<crate::search::SearchAttribute> {
        use crate::search::{
            AttrKind, AttrSource, BUILTIN_FIELDS, SEARCH_ATTRIBUTE_NAME_BYTES_MAX,
            SEARCH_ATTRIBUTES_MAX, SearchAttribute, parse_from,
        };
        if raw.len() > SEARCH_ATTRIBUTES_MAX {
            self.error(
                IssueCode::E507,
                "searchAttributes",
                format!(
                    "{} search attributes; at most {SEARCH_ATTRIBUTES_MAX}",
                    raw.len()
                ),
            );
        }
        let mut out: Vec<SearchAttribute> = Vec::new();
        for (i, a) in raw.into_iter().enumerate() {
            let path = format!("searchAttributes[{i}]");
            let errors = self.errors.len();
            let name = a.name.unwrap_or_default();
            let name_ok = !name.is_empty()
                && name.len() <= SEARCH_ATTRIBUTE_NAME_BYTES_MAX
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if !name_ok {
                self.error(
                    IssueCode::E507,
                    format!("{path}.name"),
                    format!(
                        "`name: {name}` is not an attribute name: 1 to                          {SEARCH_ATTRIBUTE_NAME_BYTES_MAX} letters, digits and `_`, not starting                          with a digit"
                    ),
                );
            } else if BUILTIN_FIELDS.contains(&name.as_str()) {
                self.error(
                    IssueCode::E507,
                    format!("{path}.name"),
                    format!("`{name}` is a field every run has; choose another name"),
                );
            } else if out.iter().any(|o| o.name == name) {
                self.error(
                    IssueCode::E507,
                    format!("{path}.name"),
                    format!("search attribute `{name}` is declared twice"),
                );
            }
            let kind = match a.kind.as_deref().and_then(AttrKind::parse) {
                Some(kind) => kind,
                None => {
                    self.error(
                        IssueCode::E507,
                        format!("{path}.type"),
                        format!(
                            "`type: {}` is not a search attribute type: use `string`, `number`,                              `timestamp`, `bool` or `keyword_list`",
                            a.kind.as_deref().unwrap_or("")
                        ),
                    );
                    AttrKind::String
                }
            };
            let from = a.from.unwrap_or_default();
            let (source, jpath) = match parse_from(&from) {
                Ok(v) => v,
                Err(e) => {
                    self.error(IssueCode::E507, format!("{path}.from"), e);
                    (AttrSource::Input, String::new())
                }
            };
            let (step, state) = match source {
                AttrSource::Input => (None, false),
                AttrSource::State => (None, true),
                AttrSource::Step(step) => (Some(step), false),
            };
            if let Some(step) = &step
                && step != START_STEP
                && !scope.steps.contains(step)
            {
                self.error(
                    IssueCode::E507,
                    format!("{path}.from"),
                    format!("`from: {from}` names step `{step}`, which is not defined"),
                );
            }
            if self.errors.len() == errors {
                out.push(SearchAttribute {
                    name,
                    kind,
                    from,
                    step,
                    path: jpath,
                    state,
                });
            }
        }
        out
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
    pub(crate) fn unique<V>(
        &mut self,
        section: &str,
        entries: Vec<(String, V)>,
    ) -> Vec<(String, V)> {
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
            pass,
            depends_on: _,
            wait_for_signal,
            wait_for_state,
            input_mapping,
            retry,
            poll,
            transitions,
            output_mapping,
            skip_output_mapping,
            on_error,
            defer_ms,
            timeout_ms,
            max_visits,
            when,
            when_all,
            when_any,
        } = raw;
        let (wait_for_signal, wait_field) = self.state_wait(path, wait_for_signal, wait_for_state);
        let filter = self.filter(path, when, when_all, when_any);
        let on_error = self.on_error(path, on_error.as_deref());
        let (defer_ms, timeout_ms, max_visits) = crate::step_limits::step_limits(
            path,
            (defer_ms, timeout_ms, max_visits),
            wait_for_signal.is_some(),
            scope.defaults,
            &mut self.errors,
        );
        let (output_mapping, skip_output_mapping) =
            self.output_mapping(path, output_mapping, skip_output_mapping);
        let pass = pass == Some(true);
        let kind = match (&run, &wait_for_signal, pass) {
            (Some(_), None, false) | (None, None, true) => StepKind::Run,
            (None, Some(_), false) => StepKind::Wait,
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
            (None, None) if pass => Some(StepAction::Pass),
            (Some(_), _) | (_, Some(_)) if pass => {
                self.error(
                    IssueCode::E107,
                    path,
                    "a `pass: true` step does nothing: it has no `run` nor `waitForSignal`; keep one",
                );
                None
            }
            (Some(run), None) => self
                .target(&format!("{path}.run"), &run, scope)
                .map(StepAction::Run),
            (None, Some(wait)) => Some(StepAction::WaitForSignal(self.signal_wait(
                &format!("{path}.{wait_field}"),
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
        if let Some(StepAction::Run(Target::Plan(plan))) = &action {
            let misplaced = [("retry", retry.is_some()), ("poll", poll.is_some())];
            for (field, _) in misplaced.iter().filter(|(_, present)| *present) {
                self.error(
                    IssueCode::E508,
                    format!("{path}.{field}"),
                    format!("`{field}` has no effect on a step running `@plan/{plan}`: its executors retry (each executor's `retry:`); remove it"),
                );
            }
        }
        let has_poll = poll.is_some();
        let retry = retry.map(|r| self.retry(&format!("{path}.retry"), r));
        let poll = poll.map(|p| self.poll(&format!("{path}.poll"), p));
        let input_mapping = input_mapping
            .and_then(|m| self.input_mapping(&format!("{path}.inputMapping"), m, scope));
        let (transitions, forks) =
            self.transitions(path, entries(transitions), scope, kind, has_poll);
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
            output_mapping,
            skip_output_mapping,
            forks,
            on_error,
            defer_ms,
            timeout_ms,
            max_visits,
            filter,
        })
    }

    /// `when:`, `whenAll:`, `whenAny:` (E513): each expression parsed now, its position
    /// named when it is not CEL.
    fn filter(
        &mut self,
        path: &str,
        when: Option<String>,
        all: Option<Vec<String>>,
        any: Option<Vec<String>>,
    ) -> Option<StepFilter> {
        let filter = StepFilter {
            when,
            all: all.unwrap_or_default(),
            any: any.unwrap_or_default(),
        };
        if filter == StepFilter::default() {
            return None;
        }
        let count = filter.all.len() + filter.any.len() + usize::from(filter.when.is_some());
        if count > FILTERS_MAX {
            self.error(
                IssueCode::E513,
                format!("{path}.when"),
                format!("{count} filter expressions; a step has at most {FILTERS_MAX}"),
            );
        }
        let listed = |field: &str, list: &[String]| -> Vec<(String, String)> {
            list.iter()
                .enumerate()
                .map(|(i, e)| (format!("{path}.{field}[{i}]"), e.clone()))
                .collect()
        };
        let mut all = listed("whenAll", &filter.all);
        all.extend(listed("whenAny", &filter.any));
        all.extend(
            filter
                .when
                .iter()
                .map(|e| (format!("{path}.when"), e.clone())),
        );
        for (at, expr) in all {
            if let Err(why) = crate::filter::check(&expr) {
                self.error(
                    IssueCode::E513,
                    at,
                    format!("`{expr}` is not a valid filter: {why}"),
                );
            }
        }
        Some(filter)
    }

    /// `onError:` (E511).
    fn on_error(&mut self, path: &str, raw: Option<&str>) -> OnError {
        match raw {
            None | Some("fail") => OnError::Fail,
            Some("continue") => OnError::Continue,
            Some("skip") => OnError::Skip,
            Some(other) => {
                self.error(
                    IssueCode::E511,
                    format!("{path}.onError"),
                    format!("`onError` is `{other}`; it is `fail` (the default: the run fails), `continue` (go on along `success`, the error kept) or `skip` (the step is marked skipped, go on along `success`)"),
                );
                OnError::Fail
            }
        }
    }

    fn target(&mut self, path: &str, run: &str, scope: &Scope) -> Option<Target> {
        match parse_target(run) {
            Ok(Target::Plan(name)) => self
                .plan_target(path, &name, &scope.plans)
                .then_some(Target::Plan(name)),
            Ok(target) => Some(target),
            Err(why) => {
                self.error(IssueCode::E201, path, why);
                None
            }
        }
    }

    /// `waitForState:` is a wait for the signal only `update-state --continue` sends
    /// (`STATE_SIGNAL`): the step's wait as a signal wait, and the field it was written as.
    fn state_wait(
        &mut self,
        path: &str,
        signal: Option<RawSignalWait>,
        state: Option<RawStateWait>,
    ) -> (Option<RawSignalWait>, &'static str) {
        let block = match state {
            None | Some(RawStateWait::Flag(false)) => return (signal, "waitForSignal"),
            Some(RawStateWait::Flag(true)) => RawStateWaitBlock {
                timeout_ms: None,
                on_timeout: None,
            },
            Some(RawStateWait::Block(block)) => block,
        };
        if signal.is_some() {
            self.error(
                IssueCode::E107,
                path,
                "the step has both `waitForSignal` and `waitForState`; a step waits for one of them: keep one",
            );
            return (signal, "waitForSignal");
        }
        let wait = RawSignalWait {
            signal_type: Some(crate::names::STATE_SIGNAL.to_string()),
            timeout_ms: block.timeout_ms,
            on_timeout: block.on_timeout,
        };
        (Some(wait), "waitForState")
    }

    fn signal_wait(&mut self, path: &str, raw: RawSignalWait, scope: &Scope) -> SignalWait {
        let signal_type = raw.signal_type.unwrap_or_default();
        let state = path.ends_with(".waitForState");
        if signal_type.trim().is_empty() {
            self.error(
                IssueCode::E503,
                format!("{path}.type"),
                "`waitForSignal` needs a `type`: the signal type to wait for, e.g. `type: approval`",
            );
        } else if !state && crate::names::reserved_signal_type(&signal_type) {
            self.error(
                IssueCode::E503,
                format!("{path}.type"),
                format!("signal types starting with `flo.` are the server's own (`{signal_type}`): choose another name (a step that waits for `update-state --continue` is `waitForState:`)"),
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
                let what = match state {
                    true => "`update-state --continue`".to_string(),
                    false => format!("a `{signal_type}` signal"),
                };
                self.warn(
                    IssueCode::W102,
                    path,
                    format!("no `timeoutMs`: the step waits for {what} forever{on_timeout}; add one unless that is intended"),
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

    /// The transitions of one target, and the forks (outcomes leading to several steps; their
    /// joins are found once every step is known, `graph::check_forks`).
    fn transitions(
        &mut self,
        step_path: &str,
        raw: Vec<(String, RawTransition)>,
        scope: &Scope,
        kind: StepKind,
        has_poll: bool,
    ) -> (BTreeMap<String, String>, BTreeMap<String, Fork>) {
        let path = format!("{step_path}.transitions");
        let mut transitions = BTreeMap::new();
        let mut forks = BTreeMap::new();
        for (outcome, target) in self.unique(&path, raw) {
            let targets = match target {
                RawTransition::One(target) => vec![target],
                RawTransition::Many(targets) => targets,
            };
            for target in &targets {
                if !scope.resolves(target) {
                    self.error(
                        IssueCode::E301,
                        format!("{path}.{outcome}"),
                        scope.unknown_target(target),
                    );
                }
            }
            match <[String; 1]>::try_from(targets) {
                Ok([target]) => {
                    transitions.insert(outcome, target);
                }
                Err(targets) => {
                    if let Some(why) = fork_problem(&targets, scope) {
                        self.error(IssueCode::E308, format!("{path}.{outcome}"), why);
                    }
                    let join = String::new();
                    forks.insert(
                        outcome,
                        Fork {
                            steps: targets,
                            join,
                        },
                    );
                }
            }
        }
        match kind {
            StepKind::Run if transitions.is_empty() && forks.is_empty() => self.error(
                IssueCode::E303,
                path,
                "a `run` step needs `transitions`: map its outcomes (`success`, `failure`, ...) to steps or terminals",
            ),
            StepKind::Run if !has_poll && transitions.contains_key("pending") => self.warn(
                IssueCode::W103,
                format!("{path}.pending"),
                "the step has no `poll`, so `pending` is matched as a plain outcome (no re-execution); add `poll:` to re-run the step while it is pending",
            ),
            StepKind::Wait
                if !transitions.contains_key("success") && !forks.contains_key("success") =>
            {
                self.error(
                IssueCode::E304,
                path,
                "a `waitForSignal` step needs a `success` transition: where to go once the signal arrives",
            )
            }
            _ => {}
        }
        (transitions, forks)
    }
}

/// Why a list of targets cannot be run at once (E308), if so: empty, too long, naming a
/// step twice or a terminal.
fn fork_problem(targets: &[String], scope: &Scope) -> Option<String> {
    if targets.is_empty() {
        return Some("an empty list of steps; name one step, or several to run at once".into());
    }
    if targets.len() > FORK_WIDTH_MAX {
        return Some(format!(
            "{} steps at once; at most {FORK_WIDTH_MAX} branches may start from one transition",
            targets.len()
        ));
    }
    let mut seen = BTreeSet::new();
    if let Some(twice) = targets.iter().find(|t| !seen.insert(t.as_str())) {
        return Some(format!("step `{twice}` is listed twice"));
    }
    targets
        .iter()
        .find(|t| !scope.steps.contains(t.as_str()))
        .map(|t| format!("`{t}` is not a step: a list of targets starts branches, each at a step (a terminal ends the whole run)"))
}

/// Named steps that no transition or `onTimeout` leads to from the start step.
fn unreachable_steps(def: &WorkflowDef) -> Vec<&str> {
    let mut reached = BTreeSet::new();
    let mut todo = vec![&def.start];
    while let Some(step) = todo.pop() {
        for target in step.targets() {
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
