//! Workflow YAML → raw structs that mirror the file (field names as written in the spec) →
//! [`validate`](super::validate) → [`Validated`].
//!
//! The raw structs refuse unknown fields (so typos are caught) and keep every mapping of names
//! (`steps`, `terminals`, `transitions`) in file order with duplicates, so that validation can
//! report each duplicate. Values that validation judges (`kind`, `idempotency`, `backoff`,
//! terminal `status`, ...) are kept as text here; numbers are `u64`.

use crate::issues::{IssueCode, issue};
use flo_protocol::ValidationIssue;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// The YAML read into the raw structs; a syntax or shape error is the first one met.
pub(super) fn parse_raw(yaml: &str) -> Result<RawWorkflow, ValidationIssue> {
    let de = serde_yaml::Deserializer::from_str(yaml);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = known_path(&err.path().to_string());
        shape_issue(path, err.into_inner())
    })
}

/// The path as far as it is known: a syntax error deep in a value ends in segments the
/// reader never named (`?`), left out; the root is the empty path.
fn known_path(path: &str) -> String {
    let mut known = path;
    while let Some(parent) = known.strip_suffix(".?").or(known.strip_suffix('?')) {
        known = parent;
    }
    match known {
        "." => String::new(),
        known => known.to_string(),
    }
}

/// serde_yaml's text as a user reads it: without the path it starts with (the issue says
/// it), and with the shape asked for where it names a struct of ours (`struct RawStep`).
fn plain_text(text: &str, path: &str) -> String {
    let text = text
        .strip_prefix(path)
        .and_then(|rest| rest.strip_prefix(": "))
        .filter(|_| !path.is_empty())
        .unwrap_or(text);
    let mut plain = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("struct Raw") {
        plain.push_str(&rest[..at]);
        plain.push_str("a mapping");
        rest = rest[at..]["struct ".len()..].trim_start_matches(|c: char| c.is_alphanumeric());
    }
    plain.push_str(rest);
    plain
}

/// E100, or E106 / E401 when serde says so (an unknown field, a field given twice).
fn shape_issue(path: String, err: serde_yaml::Error) -> ValidationIssue {
    let text = err.to_string();
    let code = if text.contains("unknown field") {
        IssueCode::E106
    } else if text.contains("duplicate field") || text.contains("duplicate entry") {
        IssueCode::E401
    } else {
        IssueCode::E100
    };
    // An unknown field is reported on the object holding it (the message names it).
    let path = match code {
        IssueCode::E106 => path
            .rsplit_once('.')
            .map_or(String::new(), |(parent, _)| parent.to_string()),
        _ => path,
    };
    // serde_yaml's text carries, when known, `at line L column C`.
    let text = plain_text(&text, &path);
    let message = match err.location() {
        Some(_) => text,
        None => format!("{text} (the YAML could not be read)"),
    };
    issue(code, path, message)
}

/// A YAML mapping in file order, duplicate keys kept (validation reports them, E401).
#[derive(Debug, Default)]
pub(super) struct Entries<V>(pub(super) Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of names")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    entries.push((key, value));
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor(PhantomData))
    }
}

/// `trigger:` as written (the spec's field names are snake_case).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrigger {
    pub stream: Option<String>,
    pub namespace: Option<String>,
    pub consumer_group: Option<String>,
    pub mode: Option<String>,
    pub batch_size: Option<u64>,
}

/// One entry of `searchAttributes:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSearchAttribute {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub from: Option<String>,
}

/// `schedule:` as written (snake_case, as in the spec).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    pub cron: Option<String>,
    /// Milliseconds, or text with a unit (`30s`, `5m`, `1h`).
    pub interval: Option<serde_yaml::Value>,
    pub timezone: Option<String>,
    pub max_concurrent: Option<u64>,
    /// A string holding JSON, or YAML.
    pub input: Option<serde_yaml::Value>,
    pub paused: Option<bool>,
    pub catchup: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawWorkflow {
    pub kind: Option<String>,
    pub name: Option<String>,
    /// Any scalar, kept as written (`1.0` stays `"1.0"`).
    pub version: Option<String>,
    pub idempotency: Option<String>,
    pub start: Option<RawStep>,
    pub steps: Option<Entries<RawStep>>,
    pub terminals: Option<Entries<RawTerminal>>,
    pub plans: Option<Entries<RawPlan>>,
    /// A string holding JSON, or YAML.
    pub state: Option<serde_yaml::Value>,
    pub schedule: Option<RawSchedule>,
    pub trigger: Option<RawTrigger>,
    pub search_attributes: Option<Vec<RawSearchAttribute>>,
    pub defaults: Option<RawDefaults>,
    pub webhook: Option<RawWebhook>,
    pub event_stream: Option<RawEventStream>,
}

/// `defaults:` of a definition: what its steps have unless they say otherwise.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDefaults {
    pub timeout_ms: Option<u64>,
    pub max_visits: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawStep {
    pub run: Option<String>,
    /// `pass: true`: a step that does nothing and succeeds (a join's meeting point).
    pub pass: Option<bool>,
    /// flow8's graph form (`depends::compile` turns it into transitions).
    pub depends_on: Option<Vec<String>>,
    pub wait_for_signal: Option<RawSignalWait>,
    /// Codehooks' wait for `update-state --continue` (a signal wait of `STATE_SIGNAL`).
    pub wait_for_state: Option<RawStateWait>,
    /// A string holding JSON, or YAML.
    pub input_mapping: Option<serde_yaml::Value>,
    pub retry: Option<RawRetry>,
    pub poll: Option<RawPoll>,
    pub transitions: Option<Entries<RawTransition>>,
    /// A string holding JSON, or YAML.
    pub output_mapping: Option<serde_yaml::Value>,
    pub skip_output_mapping: Option<bool>,
    #[serde(alias = "on_error")]
    pub on_error: Option<String>,
    pub defer_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub max_visits: Option<u64>,
    pub when: Option<String>,
    pub when_all: Option<Vec<String>>,
    pub when_any: Option<Vec<String>>,
}

/// A transition's target as written: one step or terminal, or a list of steps run at once.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawTransition {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSignalWait {
    #[serde(rename = "type")]
    pub signal_type: Option<String>,
    pub timeout_ms: Option<u64>,
    pub on_timeout: Option<String>,
}

/// `waitForState: true` or `waitForState: {timeoutMs, onTimeout}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawStateWait {
    Flag(bool),
    Block(RawStateWaitBlock),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawStateWaitBlock {
    pub timeout_ms: Option<u64>,
    pub on_timeout: Option<String>,
}

/// `retry:` fields are snake_case in the spec.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub max_attempts: Option<u64>,
    pub backoff: Option<String>,
    pub initial_delay_ms: Option<u64>,
    pub max_delay_ms: Option<u64>,
    pub within_ms: Option<u64>,
}

/// `webhook:` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawWebhook {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub headers: Option<Entries<String>>,
    pub secret: Option<String>,
    pub retry: Option<RawRetry>,
    pub timeout_ms: Option<u64>,
}

/// `eventStream:` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEventStream {
    pub stream: Option<String>,
    pub events: Option<Vec<String>>,
}

/// `poll:` fields are camelCase in the spec.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPoll {
    pub initial_delay_ms: Option<u64>,
    pub max_attempts: Option<u64>,
    pub backoff: Option<String>,
    pub base_delay_ms: Option<u64>,
    pub max_delay_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTerminal {
    pub status: Option<String>,
}

/// `plans:` entries as written (snake_case, as in the spec).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    pub selection: Option<String>,
    pub executors: Option<Vec<RawExecutor>>,
    pub health: Option<RawHealth>,
    pub cache: Option<RawCache>,
    pub fallback: Option<RawFallback>,
    pub errors: Option<RawErrors>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExecutor {
    pub name: Option<String>,
    pub action: Option<String>,
    pub priority: Option<i64>,
    pub retry: Option<RawRetry>,
    pub breaker: Option<RawBreaker>,
    pub rate_limit: Option<RawRateLimit>,
    pub tracking: Option<RawTracking>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBreaker {
    pub failure_threshold: Option<u64>,
    pub cooldown_ms: Option<u64>,
    pub half_open_max_calls: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateLimit {
    pub max_per_second: Option<u64>,
    pub max_per_minute: Option<u64>,
    pub max_per_hour: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracking {
    pub mode: Option<String>,
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    pub window_ms: Option<u64>,
    pub decay: Option<f64>,
    pub min_samples: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub ttl_ms: Option<u64>,
    pub key: Option<String>,
    pub invalidate_on: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFallback {
    /// JSON text, or YAML.
    pub value: Option<serde_yaml::Value>,
    pub condition: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawErrors {
    pub retryable: Option<Vec<String>>,
    pub fatal: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backoff, Idempotency, PollPolicy, RetryPolicy, StepAction, Target};
    use crate::{
        DEFINITION_BYTES_MAX, DEFINITION_NESTING_MAX, MAPPING_PATH_NESTING_MAX, Validated,
        parse_workflow,
    };
    use flo_protocol::WorkflowRunStatus;
    use serde_json::json;

    const HEADER: &str = "kind: Workflow\nname: w\nversion: \"1\"\n";
    const START_OK: &str =
        "start:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n";

    /// A definition: the header, then `body`.
    fn wf(body: &str) -> String {
        format!("{HEADER}{body}")
    }

    fn ok(yaml: &str) -> Validated {
        match parse_workflow(yaml) {
            Ok(v) => v,
            Err(issues) => panic!("refused: {issues:#?}\n{yaml}"),
        }
    }

    fn errors(yaml: &str) -> Vec<ValidationIssue> {
        match parse_workflow(yaml) {
            Ok(v) => panic!("accepted (warnings {:#?}):\n{yaml}", v.warnings),
            Err(issues) => issues,
        }
    }

    #[track_caller]
    fn assert_issue(issues: &[ValidationIssue], code: &str, path: &str) {
        assert!(
            issues.iter().any(|i| i.code == code && i.path == path),
            "no {code} at `{path}` in {issues:#?}"
        );
    }

    /// `yaml` is refused with (at least) `code` at `path`.
    #[track_caller]
    fn refused(yaml: &str, code: &str, path: &str) -> Vec<ValidationIssue> {
        let issues = errors(yaml);
        assert_issue(&issues, code, path);
        issues
    }

    /// A shape or syntax error reads plainly: its path once, as far as it is known, and no
    /// name of ours.
    #[test]
    fn shape_and_syntax_errors_name_their_path_once_and_no_struct_of_ours() {
        let issues = errors(&wf("steps:\n  a: [1]\n"));
        let shape = issues.iter().find(|i| i.code == "E100").expect("E100");
        assert_eq!(shape.path, "steps.a");
        assert!(
            shape
                .message
                .starts_with("invalid type: sequence, expected a mapping"),
            "{}",
            shape.message
        );
        let syntax = errors(&wf("terminals:\n  done: {status: completed\n"));
        assert_eq!(syntax[0].path, "terminals.done", "{syntax:#?}");
        assert!(!syntax[0].message.contains("Raw"), "{}", syntax[0].message);
        assert_eq!(known_path("a.?.?"), "a");
        assert_eq!(known_path("?"), "");
        assert_eq!(known_path("."), "");
        assert_eq!(plain_text("x: struct RawPlan here", "x"), "a mapping here");
        assert_eq!(plain_text("y: z", "x"), "y: z");
    }

    fn codes(issues: &[ValidationIssue]) -> Vec<(&str, &str)> {
        issues
            .iter()
            .map(|i| (i.code.as_str(), i.path.as_str()))
            .collect()
    }

    const QUICK_START: &str = include_str!("../../../testdata/workflows/process-order.yaml");

    const ORDER_SIGNALS: &str = include_str!("../../../testdata/workflows/order-processing.yaml");

    const PAYMENT_PLANS: &str = r#"
plans:
  charge-payment:
    selection: health-weighted
    executors:
      - name: stripe-primary
        action: "@actions/charge-stripe"
        priority: 100
        retry:
          max_attempts: 3
          backoff: exponential
          initial_delay_ms: 1000
          max_delay_ms: 30000
          within_ms: 120000
        breaker:
          failure_threshold: 5
          cooldown_ms: 30000
          half_open_max_calls: 3
        rate_limit:
          max_per_second: 100
        tracking:
          mode: async
          timeout_ms: 300000
      - name: adyen-fallback
        action: "@actions/charge-adyen"
        priority: 50
        retry:
          max_attempts: 2
          backoff: exponential_jitter
    health:
      window_ms: 300000
      decay: 0.9
      min_samples: 10
    cache:
      ttl_ms: 3600000
      key: "charge:{input.customer_id}:{input.idempotency_key}"
      invalidate_on: ["payment.refunded"]
    fallback:
      value: '{"status": "declined", "reason": "all_providers_unavailable"}'
      condition: exhausted
    errors:
      retryable: ["timeout", "rate_limited"]
      fatal: ["invalid_card", "fraud_detected"]
"#;

    const PAYMENT_REST: &str = r#"
start:
  run: "@plan/charge-payment"
  inputMapping: '{"customer_id": "$.input.customer_id", "amount": "$.input.amount"}'
  transitions:
    success: notify_customer
    pending: check_payment_status
    failure: flo.Failed

steps:
  check_payment_status:
    run: "@actions/check-payment-status"
    inputMapping: '{"payment_id": "$.steps._start.output.payment_id"}'
    poll:
      initialDelayMs: 2000
      maxAttempts: 30
      backoff: exponential
      baseDelayMs: 2000
      maxDelayMs: 30000
    transitions:
      success: notify_customer
      failure: flo.Failed

  notify_customer:
    run: "@actions/send-notification"
    inputMapping: '{"customer_id": "$.input.customer_id", "template": "payment_success"}'
    transitions:
      success: flo.Completed
      failure: flo.Completed   # notification failure doesn't fail the workflow
"#;

    const PAYMENT_HEADER: &str =
        "kind: Workflow\nname: payment-processing\nversion: \"1.0.0\"\nidempotency: required\n";

    // --- the spec's examples ---

    #[test]
    fn the_quick_start_workflow_parses() {
        let v = ok(QUICK_START);
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
        let def = v.def;
        assert_eq!(
            (def.name.as_str(), def.version.as_str()),
            ("process-order", "1.0.0")
        );
        assert_eq!(def.idempotency, Idempotency::Required);
        assert_eq!(
            def.start.action,
            StepAction::Run(Target::Action("validate-order".into()))
        );
        assert_eq!(def.start.transitions["success"], "charge");
        assert_eq!(def.steps.keys().collect::<Vec<_>>(), ["charge", "ship"]);
        assert_eq!(
            def.steps["charge"].retry,
            Some(RetryPolicy {
                max_attempts: 3,
                backoff: Backoff::Exponential,
                initial_delay_ms: 1000,
                max_delay_ms: Some(30000),
                within_ms: None,
            })
        );
        assert!(def.terminals.is_empty());
    }

    #[test]
    fn the_order_processing_with_signals_workflow_parses() {
        let v = ok(ORDER_SIGNALS);
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
        let def = v.def;
        assert_eq!(
            def.terminals
                .iter()
                .map(|(n, s)| (n.as_str(), *s))
                .collect::<Vec<_>>(),
            [
                ("OrderCompleted", WorkflowRunStatus::Completed),
                ("OrderRejected", WorkflowRunStatus::Failed),
                ("PaymentFailed", WorkflowRunStatus::Failed),
            ]
        );
        assert_eq!(
            def.steps["await_approval"].action,
            StepAction::WaitForSignal(crate::SignalWait {
                signal_type: "approval".into(),
                timeout_ms: Some(3_600_000),
                on_timeout: Some("OrderRejected".into()),
            })
        );
        assert_eq!(
            def.steps["fulfill"].transitions["success"],
            "OrderCompleted"
        );
    }

    #[test]
    fn the_payment_processing_workflow_parses_with_its_plan() {
        use crate::{FallbackWhen, HealthPolicy, Selection};
        let v = ok(&format!("{PAYMENT_HEADER}{PAYMENT_PLANS}{PAYMENT_REST}"));
        assert_eq!(
            v.def.start.action,
            StepAction::Run(Target::Plan("charge-payment".into()))
        );
        let plan = &v.def.plans["charge-payment"];
        assert_eq!(plan.selection, Selection::HealthWeighted);
        assert_eq!(plan.health, Some(HealthPolicy::new(300_000, 0.9, 10)));
        let names: Vec<&str> = plan.executors.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["stripe-primary", "adyen-fallback"]);
        let stripe = &plan.executors[0];
        assert_eq!(stripe.action, "charge-stripe");
        assert_eq!(stripe.priority, 100);
        assert_eq!(stripe.retry.max_attempts, 3);
        assert_eq!(stripe.breaker.map(|b| b.failure_threshold), Some(5));
        assert_eq!(stripe.rate_limit.and_then(|r| r.per_second), Some(100));
        assert_eq!(stripe.async_timeout_ms, Some(300_000));
        let adyen = &plan.executors[1];
        assert_eq!(adyen.retry.backoff, Backoff::ExponentialJitter);
        assert!(adyen.breaker.is_none() && adyen.async_timeout_ms.is_none());
        let fallback = plan.fallback.as_ref().unwrap();
        assert_eq!(fallback.condition, FallbackWhen::Exhausted);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&fallback.value).unwrap(),
            json!({"status": "declined", "reason": "all_providers_unavailable"})
        );
        assert_eq!(plan.fatal, ["invalid_card", "fraud_detected"]);
        assert_eq!(
            plan.cache.as_ref().unwrap().invalidate_on,
            ["payment.refunded"]
        );
    }

    #[test]
    fn the_payment_processing_workflow_without_plans_parses() {
        let rest = PAYMENT_REST.replace("@plan/charge-payment", "@actions/charge-payment");
        let v = ok(&format!("{PAYMENT_HEADER}{rest}"));
        // `pending` on the start step, which has no `poll`.
        assert_eq!(codes(&v.warnings), [("W103", "start.transitions.pending")]);
        let check = &v.def.steps["check_payment_status"];
        assert_eq!(
            check.poll,
            Some(PollPolicy {
                initial_delay_ms: 2000,
                max_attempts: 30,
                backoff: Backoff::Exponential,
                base_delay_ms: 2000,
                max_delay_ms: Some(30000),
            })
        );
        assert_eq!(
            check.input_mapping,
            Some(json!({"payment_id": "$.steps._start.output.payment_id"}))
        );
    }

    // --- defaults and forms ---

    #[test]
    fn retry_and_poll_defaults_apply() {
        let v = ok(&wf(r#"
start:
  run: "@actions/a"
  retry: {}
  poll: {}
  transitions: {success: b}
steps:
  b:
    run: "@actions/b"
    poll: {baseDelayMs: 500}
    transitions: {success: flo.Completed}
"#));
        assert_eq!(v.def.idempotency, Idempotency::None);
        assert_eq!(
            v.def.start.retry,
            Some(RetryPolicy {
                max_attempts: 3,
                backoff: Backoff::Exponential,
                initial_delay_ms: 1000,
                max_delay_ms: None,
                within_ms: None,
            })
        );
        assert_eq!(
            v.def.start.poll,
            Some(PollPolicy {
                initial_delay_ms: 1000,
                max_attempts: 10,
                backoff: Backoff::Exponential,
                base_delay_ms: 1000,
                max_delay_ms: None,
            })
        );
        let b = v.def.steps["b"].poll.as_ref().unwrap();
        assert_eq!((b.initial_delay_ms, b.base_delay_ms), (500, 500));
    }

    #[test]
    fn a_numeric_version_keeps_its_text() {
        let v = ok(&format!(
            "kind: Workflow\nname: w\nversion: 1.10\n{START_OK}"
        ));
        assert_eq!(v.def.version, "1.10");
        let v = ok(&format!("kind: Workflow\nname: w\nversion: 2\n{START_OK}"));
        assert_eq!(v.def.version, "2");
    }

    #[test]
    fn input_mapping_may_be_json_text_or_yaml() {
        let text = ok(&wf(r#"
start:
  run: "@actions/a"
  inputMapping: '{"amount": "$.input.amount", "items": ["$.input.items[0]", 2], "fixed": "x"}'
  transitions: {success: flo.Completed}
"#));
        let yaml = ok(&wf(r#"
start:
  run: "@actions/a"
  inputMapping:
    amount: $.input.amount
    items: ["$.input.items[0]", 2]
    fixed: x
  transitions: {success: flo.Completed}
"#));
        let want =
            json!({"amount": "$.input.amount", "items": ["$.input.items[0]", 2], "fixed": "x"});
        assert_eq!(text.def.start.input_mapping, Some(want.clone()));
        assert_eq!(yaml.def.start.input_mapping, Some(want));
    }

    #[test]
    fn a_bare_path_is_a_whole_input_mapping() {
        let v = ok(&wf(
            "start:\n  run: \"@actions/a\"\n  inputMapping: $.input.order\n  transitions: {success: flo.Completed}\n",
        ));
        assert_eq!(v.def.start.input_mapping, Some(json!("$.input.order")));
    }

    #[test]
    fn child_workflow_targets_parse_with_and_without_version() {
        let v = ok(&wf(r#"
start:
  run: "@workflow/payment-flow:2.0.0"
  transitions: {success: child}
steps:
  child:
    run: "@workflow/payment-flow"
    transitions: {success: flo.Completed}
"#));
        assert_eq!(
            v.def.start.action,
            StepAction::Run(Target::Workflow {
                name: "payment-flow".into(),
                version: Some("2.0.0".into())
            })
        );
        assert_eq!(
            v.def.steps["child"].action,
            StepAction::Run(Target::Workflow {
                name: "payment-flow".into(),
                version: None
            })
        );
    }

    #[test]
    fn all_errors_are_reported_together() {
        let issues = errors(
            r#"
kind: Workflo
name: "bad name"
idempotency: always
start:
  run: "actions/a"
  transitions: {success: nowhere}
steps:
  b:
    run: "@actions/b"
"#,
        );
        assert_eq!(
            codes(&issues),
            [
                ("E101", "kind"),
                ("E102", "name"),
                ("E103", "version"),
                ("E108", "idempotency"),
                ("E201", "start.run"),
                ("E301", "start.transitions.success"),
                ("E303", "steps.b.transitions"),
            ]
        );
    }

    // --- E1xx structure ---

    #[test]
    fn e100_yaml_syntax_errors_carry_line_and_column() {
        let issues = errors("kind: Workflow\nname: [unclosed\n");
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_eq!(issues[0].code, "E100");
        assert!(issues[0].message.contains("line 2"), "{issues:#?}");
        refused("", "E100", "");
        refused("- a list\n", "E100", "");
    }

    #[test]
    fn e100_fields_of_the_wrong_shape_are_named() {
        let issues = refused(&wf("start: 5\n"), "E100", "start");
        assert!(issues[0].message.contains("line 4"), "{issues:#?}");
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  retry: {max_attempts: -1}\n  transitions: {success: flo.Completed}\n",
            ),
            "E100",
            "start.retry.max_attempts",
        );
        refused(&wf("start:\n  run: [x]\n"), "E100", "start.run");
    }

    #[test]
    fn e100_oversized_definitions_are_refused() {
        let big = format!("{}\n{}", wf(START_OK), "#".repeat(DEFINITION_BYTES_MAX));
        refused(&big, "E100", "");
    }

    /// Found by fuzzing (fuzz/regressions/yaml): libyaml took time quadratic in the
    /// nesting of `[[[…` (a second for 8,000 levels) before serde_yaml's depth limit saw it.
    #[test]
    fn e100_deeply_nested_definitions_are_refused_before_they_are_read() {
        let deep = |levels: usize| format!("{}x: {}\n", wf(START_OK), "[".repeat(levels));
        let issues = refused(&deep(DEFINITION_BYTES_MAX / 2), "E100", "");
        assert!(
            issues[0].message.contains("more than 128 levels"),
            "{issues:#?}"
        );
        // Below the limit, serde_yaml reads it (and finds the unknown field first).
        let issues = errors(&deep(DEFINITION_NESTING_MAX - 10));
        assert!(
            issues[0].message.contains("unknown field `x`"),
            "{issues:#?}"
        );
    }

    #[test]
    fn e101_kind_must_be_workflow() {
        refused(
            &format!("name: w\nversion: \"1\"\n{START_OK}"),
            "E101",
            "kind",
        );
        let issues = refused(
            &format!("kind: workflow\nname: w\nversion: \"1\"\n{START_OK}"),
            "E101",
            "kind",
        );
        assert!(
            issues[0].message.contains("`kind: workflow`"),
            "{issues:#?}"
        );
    }

    #[test]
    fn e102_name_missing_empty_or_invalid() {
        for name in [
            "",
            "name: \"\"\n",
            "name: \"two words\"\n",
            "name: \"a:b\"\n",
        ] {
            refused(
                &format!("kind: Workflow\n{name}version: \"1\"\n{START_OK}"),
                "E102",
                "name",
            );
        }
        let long = format!("name: {}\n", "n".repeat(257));
        refused(
            &format!("kind: Workflow\n{long}version: \"1\"\n{START_OK}"),
            "E102",
            "name",
        );
        ok(&format!(
            "kind: Workflow\nname: {}\nversion: \"1\"\n{START_OK}",
            "n".repeat(256)
        ));
    }

    #[test]
    fn e103_version_missing_or_empty() {
        refused(
            &format!("kind: Workflow\nname: w\n{START_OK}"),
            "E103",
            "version",
        );
        refused(
            &format!("kind: Workflow\nname: w\nversion: \"\"\n{START_OK}"),
            "E103",
            "version",
        );
        refused(
            &format!("kind: Workflow\nname: w\nversion:\n{START_OK}"),
            "E103",
            "version",
        );
    }

    #[test]
    fn e104_start_missing() {
        refused(HEADER, "E104", "start");
    }

    /// A definition whose start step runs `@plan/p`, with `plans:` as given.
    fn with_plan(plan: &str) -> String {
        wf(&format!(
            "plans:\n  p:\n{plan}start:\n  run: \"@plan/p\"\n  transitions: {{success: flo.Completed}}\n"
        ))
    }

    #[test]
    fn e204_a_plan_target_names_a_defined_plan() {
        let issues = refused(
            &wf("start:\n  run: \"@plan/payment\"\n  transitions: {success: flo.Completed}\n"),
            "E204",
            "start.run",
        );
        assert!(issues[0].message.contains("names no plan"), "{issues:#?}");
    }

    #[test]
    fn e508_e509_plans_and_executors_are_checked() {
        let ex = "    executors:\n      - {name: a, action: \"@actions/a\"}\n";
        refused(
            &with_plan("    selection: fastest\n"),
            "E508",
            "plans.p.selection",
        );
        refused(
            &with_plan("    executors: []\n"),
            "E508",
            "plans.p.executors",
        );
        refused(
            &with_plan(&format!("    selection: health-weighted\n{ex}")),
            "E508",
            "plans.p.health",
        );
        refused(
            &with_plan(&format!("{ex}    health: {{decay: 1.5}}\n")),
            "E508",
            "plans.p.health.decay",
        );
        refused(
            &with_plan(&format!(
                "{ex}    cache: {{ttl_ms: 10, key: \"k:{{id}}\"}}\n"
            )),
            "E508",
            "plans.p.cache.key",
        );
        refused(
            &with_plan(&format!("{ex}    fallback: {{value: \"{{nope\"}}\n")),
            "E508",
            "plans.p.fallback.value",
        );
        refused(
            &with_plan(&format!(
                "{ex}    fallback: {{value: 1, condition: sometimes}}\n"
            )),
            "E508",
            "plans.p.fallback.condition",
        );
        refused(
            &with_plan(&format!("{ex}    errors: {{retryable: [x], fatal: [x]}}\n")),
            "E508",
            "plans.p.errors",
        );
        refused(
            &with_plan("    executors:\n      - {name: a, action: \"@workflow/w\"}\n"),
            "E509",
            "plans.p.executors[0].action",
        );
        refused(
            &with_plan(
                "    executors:\n      - {name: a, action: \"@actions/a\", breaker: {failure_threshold: 0}}\n",
            ),
            "E509",
            "plans.p.executors[0].breaker.failure_threshold",
        );
        refused(
            &with_plan(
                "    executors:\n      - {name: a, action: \"@actions/a\", rate_limit: {}}\n",
            ),
            "E509",
            "plans.p.executors[0].rate_limit",
        );
        refused(
            &with_plan(
                "    executors:\n      - {name: a, action: \"@actions/a\", tracking: {mode: later}}\n",
            ),
            "E509",
            "plans.p.executors[0].tracking.mode",
        );
        refused(
            &with_plan(
                "    executors:\n      - {name: a, action: \"@actions/a\"}\n      - {name: a, action: \"@actions/b\"}\n",
            ),
            "E401",
            "plans.p.executors[1].name",
        );
        // A plan step retries through its executors.
        let text = wf(&format!(
            "plans:\n  p:\n{ex}start:\n  run: \"@plan/p\"\n  retry: {{max_attempts: 2}}\n  transitions: {{success: flo.Completed}}\n"
        ));
        refused(&text, "E508", "start.retry");
        // The smallest plan: one executor, static order, one attempt.
        let v = ok(&with_plan(ex));
        let plan = &v.def.plans["p"];
        assert_eq!(plan.executors[0].retry.max_attempts, 1);
    }

    #[test]
    fn e506_a_schedule_has_cron_or_interval_and_valid_settings() {
        let ok = |schedule: &str| {
            let v = crate::parse_workflow(&wf(&format!("schedule: {schedule}\n{START_OK}")))
                .unwrap_or_else(|e| panic!("{schedule}: {e:#?}"));
            v.def.schedule.unwrap()
        };
        let s = ok(r#"{cron: "0 */6 * * *", max_concurrent: 1, input: '{"mode": "full"}'}"#);
        assert_eq!(s.input, r#"{"mode":"full"}"#);
        assert_eq!(s.catchup, crate::Catchup::Latest);
        assert!(!s.paused);
        let s = ok("{interval: 30s, input: {mode: incremental}, paused: true, catchup: all}");
        assert_eq!(s.every, crate::Every::Interval { ms: 30_000 });
        assert_eq!(s.input, r#"{"mode":"incremental"}"#);
        assert_eq!(s.max_concurrent, 1);
        assert!(s.paused);
        let s = ok(r#"{cron: "0 9 * * 1-5", timezone: Europe/Paris}"#);
        assert_eq!(s.input, "{}");
        for (schedule, path, says) in [
            ("{max_concurrent: 1}", "schedule", "needs `cron`"),
            (
                "{cron: \"* * * * *\", interval: 1000}",
                "schedule",
                "exclusive",
            ),
            ("{cron: \"0 0 * *\"}", "schedule.cron", "4 fields"),
            ("{cron: \"99 * * * *\"}", "schedule.cron", "invalid"),
            (
                "{cron: \"0 0 * * *\", timezone: Nowhere/City}",
                "schedule.timezone",
                "unknown time zone",
            ),
            ("{interval: 10}", "schedule.interval", "at least 100 ms"),
            (
                "{interval: 3 fortnights}",
                "schedule.interval",
                "unknown unit",
            ),
            (
                "{interval: 1000, timezone: UTC}",
                "schedule.timezone",
                "applies to `cron` only",
            ),
            (
                "{interval: 1000, max_concurrent: 0}",
                "schedule.max_concurrent",
                "1 to",
            ),
            (
                "{interval: 1000, input: 'not json'}",
                "schedule.input",
                "not JSON",
            ),
            (
                "{interval: 1000, catchup: sometimes}",
                "schedule.catchup",
                "`latest`",
            ),
        ] {
            let issues = refused(
                &wf(&format!("schedule: {schedule}\n{START_OK}")),
                "E506",
                path,
            );
            assert!(issues[0].message.contains(says), "{schedule}: {issues:#?}");
        }
        refused(
            &wf(&format!(
                "schedule: {{interval: 1000, every: 2}}\n{START_OK}"
            )),
            "E106",
            "schedule",
        );
    }

    #[test]
    fn e507_search_attributes_have_a_name_a_type_and_a_path() {
        let v = crate::parse_workflow(&wf(&format!(
            "searchAttributes:\n  - {{name: customer_id, type: string, from: input.customer_id}}\n  - {{name: amount, type: number, from: \"$.input.amount\"}}\n  - {{name: tags, type: keyword_list, from: \"$.steps._start.output.tags\"}}\n{START_OK}"
        )))
        .unwrap();
        let attrs = &v.def.search_attributes;
        assert_eq!(attrs.len(), 3);
        assert_eq!(
            (attrs[0].step.as_deref(), attrs[0].path.as_str()),
            (None, "$.customer_id")
        );
        assert_eq!(attrs[2].step.as_deref(), Some("_start"));
        for (attr, path, says) in [
            (
                "{name: 1x, type: string, from: input.a}",
                "searchAttributes[0].name",
                "not an attribute name",
            ),
            (
                "{name: status, type: string, from: input.a}",
                "searchAttributes[0].name",
                "every run has",
            ),
            (
                "{name: a, type: text, from: input.a}",
                "searchAttributes[0].type",
                "keyword_list",
            ),
            (
                "{name: a, type: string, from: flo.run_id}",
                "searchAttributes[0].from",
                "not a path",
            ),
            (
                "{name: a, type: string, from: \"$.steps.nope.output.x\"}",
                "searchAttributes[0].from",
                "not defined",
            ),
        ] {
            let issues = refused(
                &wf(&format!("searchAttributes:\n  - {attr}\n{START_OK}")),
                "E507",
                path,
            );
            assert!(issues[0].message.contains(says), "{attr}: {issues:#?}");
        }
        refused(
            &wf(&format!(
                "searchAttributes:\n  - {{name: a, type: string, from: input.a}}\n  - {{name: a, type: number, from: input.b}}\n{START_OK}"
            )),
            "E507",
            "searchAttributes[1].name",
        );
    }

    #[test]
    fn e505_a_trigger_names_a_stream_and_valid_settings() {
        let ok = wf(&format!("trigger: {{stream: orders}}\n{START_OK}"));
        let def = crate::parse_workflow(&ok)
            .expect("a trigger with defaults")
            .def;
        let t = def.trigger.expect("the trigger kept");
        assert_eq!((t.stream.as_str(), t.batch_size), ("orders", 1));
        assert_eq!(t.consumer_group, format!("wf-{}", def.name));
        for (trigger, path) in [
            ("{namespace: prod}", "trigger.stream"),
            ("{stream: \"bad name\"}", "trigger.stream"),
            ("{stream: s, mode: fanout}", "trigger.mode"),
            ("{stream: s, batch_size: 0}", "trigger.batch_size"),
            (
                "{stream: s, consumer_group: \"a b\"}",
                "trigger.consumer_group",
            ),
        ] {
            refused(
                &wf(&format!("trigger: {trigger}\n{START_OK}")),
                "E505",
                path,
            );
        }
        let key_shared = wf(&format!(
            "trigger: {{stream: s, mode: key_shared}}\n{START_OK}"
        ));
        let def = crate::parse_workflow(&key_shared).expect("key_shared").def;
        assert_eq!(
            def.trigger.map(|t| t.mode),
            Some(flo_protocol::GroupMode::KeyShared)
        );
        refused(
            &wf(&format!("trigger: {{stream: s, colour: red}}\n{START_OK}")),
            "E106",
            "trigger",
        );
    }

    #[test]
    fn e106_unknown_fields_are_named() {
        let issues = refused(&wf(&format!("{START_OK}stpes: {{}}\n")), "E106", "");
        assert!(issues[0].message.contains("`stpes`"), "{issues:#?}");
        let issues = refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  retyr: {}\n  transitions: {success: flo.Completed}\n",
            ),
            "E106",
            "start",
        );
        assert!(issues[0].message.contains("`retyr`"), "{issues:#?}");
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  poll: {max_attempts: 3}\n  transitions: {success: flo.Completed}\n",
            ),
            "E106",
            "start.poll",
        );
        refused(
            &wf(&format!(
                "{START_OK}terminals:\n  Done: {{status: completed, color: red}}\n"
            )),
            "E106",
            "terminals.Done",
        );
    }

    #[test]
    fn e107_a_step_runs_or_waits() {
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  waitForSignal: {type: t, timeoutMs: 5}\n  transitions: {success: flo.Completed}\n",
            ),
            "E107",
            "start",
        );
        refused(
            &wf(&format!(
                "{START_OK}steps:\n  b:\n    transitions: {{success: flo.Completed}}\n"
            )),
            "E107",
            "steps.b",
        );
    }

    #[test]
    fn e108_idempotency_values() {
        for value in ["none", "optional", "required"] {
            ok(&wf(&format!("idempotency: {value}\n{START_OK}")));
        }
        refused(
            &wf(&format!("idempotency: always\n{START_OK}")),
            "E108",
            "idempotency",
        );
    }

    #[test]
    fn e109_reserved_or_invalid_step_names() {
        for name in ["_start", "flo.Mine", "\"a b\"", "\"$x\""] {
            let path = format!("steps.{}", name.trim_matches('"'));
            refused(
                &wf(&format!(
                    "{START_OK}steps:\n  {name}:\n    run: \"@actions/b\"\n    transitions: {{success: flo.Completed}}\n"
                )),
                "E109",
                &path,
            );
        }
        refused(
            &wf(&format!(
                "{START_OK}terminals:\n  flo.Mine: {{status: failed}}\n"
            )),
            "E109",
            "terminals.flo.Mine",
        );
    }

    // --- E2xx references ---

    #[test]
    fn e201_malformed_targets() {
        for target in [
            "actions/a",
            "@actions/",
            "@actions/a b",
            "@action/a",
            "@workflow/",
            "@workflow/w:",
            "@workflow/w x",
            "@plan/",
            "",
        ] {
            refused(
                &wf(&format!(
                    "start:\n  run: \"{target}\"\n  transitions: {{success: flo.Completed}}\n"
                )),
                "E201",
                "start.run",
            );
        }
    }

    #[test]
    fn e202_input_mapping_that_is_not_json() {
        for mapping in ["'{\"a\": '", "hello", "'{\"a\": 1} trailing'"] {
            refused(
                &wf(&format!(
                    "start:\n  run: \"@actions/a\"\n  inputMapping: {mapping}\n  transitions: {{success: flo.Completed}}\n"
                )),
                "E202",
                "start.inputMapping",
            );
        }
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  inputMapping: {[1, 2]: x}\n  transitions: {success: flo.Completed}\n",
            ),
            "E202",
            "start.inputMapping",
        );
    }

    #[test]
    fn e203_mapping_paths_must_be_allowed_forms_naming_known_steps() {
        let with_mapping = |path: &str| {
            wf(&format!(
                "start:\n  run: \"@actions/a\"\n  inputMapping: '{{\"x\": \"{path}\"}}'\n  transitions: {{success: b}}\nsteps:\n  b:\n    run: \"@actions/b\"\n    transitions: {{success: flo.Completed}}\n"
            ))
        };
        for good in [
            "$.input",
            "$.input.a.b[0]",
            "$.input['odd-key']",
            "$.steps.b.output",
            "$.steps.b.output.x[*]",
            "$.steps._start.outcome",
            "$.steps['b'].outcome",
            "$.flo.run_id",
            "$.flo.timestamp",
        ] {
            // Quotes doubled: the mapping sits in a single-quoted YAML scalar.
            ok(&with_mapping(&good.replace('\'', "''")));
        }
        for bad in [
            "$.inputs.a",
            "$.steps.nope.output",
            "$.steps.b",
            "$.steps.b.outcome.x",
            "$.steps.b.result",
            "$.steps.*.output",
            "$.flo.other",
            "$.flo.run_id.x",
            "$..x",
            "$.steps.check-status.output",
            "$.input[",
        ] {
            let issues = refused(&with_mapping(bad), "E203", "start.inputMapping");
            assert!(issues[0].message.contains(bad), "{issues:#?}");
        }
    }

    /// Found by fuzzing (fuzz/regressions/yaml): the JSONPath parser took time exponential
    /// in the nesting of filters (`$.s[?@[?@[?@…`, 20 levels: a second) and overflowed the
    /// shard thread's stack on about 1,000 levels of parentheses.
    #[test]
    fn e203_deeply_nested_mapping_paths_are_refused_not_parsed() {
        let with_mapping = |path: &str| {
            wf(&format!(
                "start:\n  run: \"@actions/a\"\n  inputMapping: '{{\"x\": \"{}\"}}'\n  transitions: {{success: flo.Completed}}\n",
                // Quotes doubled: the mapping sits in a single-quoted YAML scalar.
                path.replace('\'', "''")
            ))
        };
        let parens = |depth: usize| {
            format!(
                "$.input[?{}@.a{}]",
                "(".repeat(depth - 1),
                ")".repeat(depth - 1)
            )
        };
        ok(&with_mapping(&parens(MAPPING_PATH_NESTING_MAX)));
        ok(&with_mapping("$.input[?@.a[?@.b == ']]]]']]"));
        for deep in [
            parens(100_000),
            format!("$.input{}", "[?@".repeat(40)),
            // Closing brackets in string literals do not hide the nesting.
            format!("$.input{}", "[?@ == ']]]' && @".repeat(40)),
        ] {
            let start = std::time::Instant::now();
            let issues = refused(&with_mapping(&deep), "E203", "start.inputMapping");
            assert!(
                issues[0].message.contains("nests brackets and parentheses"),
                "{}",
                issues[0].message
            );
            // Milliseconds when the nesting is judged in one pass; a quadratic look at
            // 100,000 parentheses would take minutes. A bound, with room for a loaded machine.
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "judging the nesting took {:?}: not linear",
                start.elapsed()
            );
        }
    }

    // --- E3xx transitions ---

    #[test]
    fn e301_transition_targets_must_exist() {
        let issues = refused(
            &wf("start:\n  run: \"@actions/a\"\n  transitions: {success: flo.completed}\n"),
            "E301",
            "start.transitions.success",
        );
        assert!(
            issues[0].message.contains("did you mean `flo.Completed`"),
            "{issues:#?}"
        );
        refused(
            &wf("start:\n  run: \"@actions/a\"\n  transitions: {success: _start}\n"),
            "E301",
            "start.transitions.success",
        );
    }

    #[test]
    fn e302_on_timeout_targets_must_exist() {
        refused(
            &wf(
                "start:\n  waitForSignal: {type: t, timeoutMs: 5, onTimeout: Nowhere}\n  transitions: {success: flo.Completed}\n",
            ),
            "E302",
            "start.waitForSignal.onTimeout",
        );
    }

    #[test]
    fn e303_run_steps_need_transitions() {
        refused(
            &wf("start:\n  run: \"@actions/a\"\n"),
            "E303",
            "start.transitions",
        );
        refused(
            &wf("start:\n  run: \"@actions/a\"\n  transitions: {}\n"),
            "E303",
            "start.transitions",
        );
    }

    #[test]
    fn e304_signal_waits_need_a_success_transition() {
        refused(
            &wf(
                "start:\n  waitForSignal: {type: t, timeoutMs: 5}\n  transitions: {failure: flo.Failed}\n",
            ),
            "E304",
            "start.transitions",
        );
    }

    // --- E4xx duplicates ---

    #[test]
    fn e401_duplicate_keys() {
        let step = "    run: \"@actions/b\"\n    transitions: {success: flo.Completed}\n";
        refused(
            &wf(&format!("{START_OK}steps:\n  b:\n{step}  b:\n{step}")),
            "E401",
            "steps.b",
        );
        refused(
            &wf(&format!(
                "{START_OK}terminals:\n  T: {{status: failed}}\n  T: {{status: completed}}\n"
            )),
            "E401",
            "terminals.T",
        );
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n    success: flo.Failed\n",
            ),
            "E401",
            "start.transitions.success",
        );
        let issues = refused(&format!("{HEADER}name: again\n{START_OK}"), "E401", "");
        assert!(issues[0].message.contains("`name`"), "{issues:#?}");
        refused(
            &wf(
                "start:\n  run: \"@actions/a\"\n  inputMapping: {a: 1, a: 2}\n  transitions: {success: flo.Completed}\n",
            ),
            "E401",
            "start.inputMapping",
        );
    }

    #[test]
    fn e402_terminals_named_like_steps_or_builtins() {
        refused(
            &wf(&format!(
                "{START_OK}terminals:\n  flo.Failed: {{status: failed}}\n"
            )),
            "E402",
            "terminals.flo.Failed",
        );
        refused(
            &wf(&format!(
                "{START_OK}steps:\n  b:\n    run: \"@actions/b\"\n    transitions: {{success: flo.Completed}}\nterminals:\n  b: {{status: failed}}\n"
            )),
            "E402",
            "terminals.b",
        );
    }

    #[test]
    fn e403_terminal_status_values() {
        refused(
            &wf(&format!("{START_OK}terminals:\n  T: {{status: done}}\n")),
            "E403",
            "terminals.T.status",
        );
        refused(
            &wf(&format!("{START_OK}terminals:\n  T: {{}}\n")),
            "E403",
            "terminals.T.status",
        );
        let v = ok(&wf(&format!(
            "{START_OK}terminals:\n  A: {{status: completed}}\n  B: {{status: cancelled}}\n  C: {{status: timed_out}}\n"
        )));
        assert_eq!(v.def.terminals["C"], WorkflowRunStatus::TimedOut);
        assert_eq!(v.def.terminals["B"], WorkflowRunStatus::Cancelled);
    }

    // --- E5xx policies ---

    fn with_retry(retry: &str) -> String {
        wf(&format!(
            "start:\n  run: \"@actions/a\"\n  retry: {{{retry}}}\n  transitions: {{success: flo.Completed}}\n"
        ))
    }

    fn with_poll(poll: &str) -> String {
        wf(&format!(
            "start:\n  run: \"@actions/a\"\n  poll: {{{poll}}}\n  transitions: {{success: flo.Completed}}\n"
        ))
    }

    #[test]
    fn e501_invalid_retry() {
        refused(
            &with_retry("max_attempts: 0"),
            "E501",
            "start.retry.max_attempts",
        );
        refused(
            &with_retry("max_attempts: 101"),
            "E501",
            "start.retry.max_attempts",
        );
        refused(
            &with_retry("backoff: fibonacci"),
            "E501",
            "start.retry.backoff",
        );
        refused(
            &with_retry("initial_delay_ms: 9223372036854775808"),
            "E501",
            "start.retry.initial_delay_ms",
        );
        refused(
            &with_retry("max_delay_ms: 9223372036854775808"),
            "E501",
            "start.retry.max_delay_ms",
        );
        refused(
            &with_retry("initial_delay_ms: 500, max_delay_ms: 100"),
            "E501",
            "start.retry.max_delay_ms",
        );
        refused(&with_retry("within_ms: 0"), "E501", "start.retry.within_ms");
        refused(
            &with_retry("within_ms: 9223372036854775808"),
            "E501",
            "start.retry.within_ms",
        );
        // Up to i64::MAX ms is accepted (beyond the timer horizon: never).
        let far = ok(&with_retry(
            "initial_delay_ms: 9223372036854775807, max_delay_ms: 9223372036854775807, within_ms: 9223372036854775807",
        ));
        assert_eq!(
            far.def.start.retry.unwrap().initial_delay_ms,
            i64::MAX as u64
        );
        let v = ok(&with_retry(
            "max_attempts: 100, backoff: exponential_jitter, within_ms: 5000",
        ));
        let retry = v.def.start.retry.unwrap();
        assert_eq!(
            (retry.max_attempts, retry.backoff, retry.within_ms),
            (100, Backoff::ExponentialJitter, Some(5000))
        );
    }

    #[test]
    fn e502_invalid_poll() {
        refused(
            &with_poll("maxAttempts: 0"),
            "E502",
            "start.poll.maxAttempts",
        );
        refused(
            &with_poll("maxAttempts: 1000"),
            "E502",
            "start.poll.maxAttempts",
        );
        refused(&with_poll("backoff: slow"), "E502", "start.poll.backoff");
        refused(
            &with_poll("baseDelayMs: 9223372036854775808"),
            "E502",
            "start.poll.baseDelayMs",
        );
        refused(
            &with_poll("initialDelayMs: 9223372036854775808"),
            "E502",
            "start.poll.initialDelayMs",
        );
        refused(
            &with_poll("baseDelayMs: 500, maxDelayMs: 100"),
            "E502",
            "start.poll.maxDelayMs",
        );
        let v = ok(&with_poll("backoff: linear"));
        assert_eq!(v.def.start.poll.unwrap().backoff, Backoff::Linear);
    }

    #[test]
    fn e503_invalid_signal_wait() {
        let wait = |w: &str| {
            wf(&format!(
                "start:\n  waitForSignal: {{{w}}}\n  transitions: {{success: flo.Completed}}\n"
            ))
        };
        refused(&wait("timeoutMs: 5"), "E503", "start.waitForSignal.type");
        refused(
            &wait("type: \"\", timeoutMs: 5"),
            "E503",
            "start.waitForSignal.type",
        );
        refused(
            &wait("type: t, timeoutMs: 0"),
            "E503",
            "start.waitForSignal.timeoutMs",
        );
        refused(
            &wait("type: t, timeoutMs: 9223372036854775808"),
            "E503",
            "start.waitForSignal.timeoutMs",
        );
        let v = ok(&wait("type: t, timeoutMs: 9223372036854775807"));
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
    }

    #[test]
    fn e504_run_step_policies_on_a_signal_wait() {
        for (field, value) in [("retry", "{}"), ("poll", "{}"), ("inputMapping", "'{}'")] {
            refused(
                &wf(&format!(
                    "start:\n  waitForSignal: {{type: t, timeoutMs: 5}}\n  {field}: {value}\n  transitions: {{success: flo.Completed}}\n"
                )),
                "E504",
                &format!("start.{field}"),
            );
        }
    }

    // --- warnings ---

    #[test]
    fn w101_unreachable_steps_warn() {
        let v = ok(&wf(&format!(
            "{START_OK}steps:\n  lonely:\n    run: \"@actions/b\"\n    transitions: {{success: flo.Completed}}\n"
        )));
        assert_eq!(codes(&v.warnings), [("W101", "steps.lonely")]);
    }

    #[test]
    fn w101_on_timeout_targets_are_reachable() {
        let v = ok(&wf(r#"
start:
  waitForSignal: {type: t, timeoutMs: 5, onTimeout: late}
  transitions: {success: flo.Completed}
steps:
  late:
    run: "@actions/b"
    transitions: {success: flo.Completed}
"#));
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
    }

    #[test]
    fn w102_signal_wait_without_timeout_warns() {
        let v = ok(&wf(
            "start:\n  waitForSignal: {type: approval}\n  transitions: {success: flo.Completed}\n",
        ));
        assert_eq!(codes(&v.warnings), [("W102", "start.waitForSignal")]);
        assert_eq!(
            v.def.start.action,
            StepAction::WaitForSignal(crate::SignalWait {
                signal_type: "approval".into(),
                timeout_ms: None,
                on_timeout: None,
            })
        );
    }

    #[test]
    fn w104_timeout_transition_on_a_wait_without_timeout_warns() {
        let v = ok(&wf(
            "start:\n  waitForSignal: {type: t}\n  transitions: {success: flo.Completed, timeout: flo.Failed}\n",
        ));
        assert_eq!(
            codes(&v.warnings),
            [
                ("W102", "start.waitForSignal"),
                ("W104", "start.transitions.timeout")
            ]
        );
        let v = ok(&wf(
            "start:\n  waitForSignal: {type: t, timeoutMs: 5}\n  transitions: {success: flo.Completed, timeout: flo.Failed}\n",
        ));
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
    }

    #[test]
    fn w103_pending_without_poll_warns() {
        let v = ok(&wf(
            "start:\n  run: \"@actions/a\"\n  transitions: {success: flo.Completed, pending: flo.Failed}\n",
        ));
        assert_eq!(codes(&v.warnings), [("W103", "start.transitions.pending")]);
        let v = ok(&wf(
            "start:\n  run: \"@actions/a\"\n  poll: {}\n  transitions: {success: flo.Completed, pending: flo.Failed}\n",
        ));
        assert!(v.warnings.is_empty(), "{:#?}", v.warnings);
    }
}
