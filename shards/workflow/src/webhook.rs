//! `webhook:` of a definition (flow8's `WebhookURL`): where the server `POST`s the events of
//! each run — by default its end — with which headers, signed with which secret, retried
//! how. `flo workflow start --webhook URL` gives one run a URL of its own
//! ([`Webhook::for_run`]); [`check_webhook_url`] is the check both use.

use crate::backoff::{Backoff, RetryPolicy};

/// The run events a webhook may ask for (the event feed's names, `flo workflow events`).
pub const RUN_EVENT_NAMES: [&str; 10] = [
    "workflow_started",
    "step_started",
    "step_waiting",
    "step_finished",
    "state_updated",
    "workflow_continued",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
];
/// The events a webhook without `events:` is sent: the run's end, however it ends.
pub const WEBHOOK_EVENTS_DEFAULT: [&str; 4] = ["completed", "failed", "cancelled", "timed_out"];
pub const WEBHOOK_URL_BYTES_MAX: usize = 2048;
pub const WEBHOOK_HEADERS_MAX: usize = 32;
/// A header's name and value together.
pub const WEBHOOK_HEADER_BYTES_MAX: usize = 1024;
pub const WEBHOOK_SECRET_BYTES_MAX: usize = 256;
/// How long one attempt waits for the receiver's answer (connect included).
pub const WEBHOOK_TIMEOUT_MS_DEFAULT: u64 = 10_000;
pub const WEBHOOK_TIMEOUT_MS_MAX: u64 = 60_000;
/// `retry:` left out: 6 attempts, 1 s doubling to at most 5 min (about 31 s in all).
pub const WEBHOOK_ATTEMPTS_DEFAULT: u32 = 6;
pub const WEBHOOK_INITIAL_DELAY_MS_DEFAULT: u64 = 1000;
pub const WEBHOOK_MAX_DELAY_MS_DEFAULT: u64 = 300_000;

/// Header names the server sets itself (compared without case; `x-flo-` is a prefix).
const RESERVED_HEADERS: [&str; 7] = [
    "x-flo-",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "user-agent",
];

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    /// Names from [`RUN_EVENT_NAMES`].
    pub events: Vec<String>,
    pub headers: Vec<(String, String)>,
    /// Signs each body: `X-Flo-Signature: sha256=<hex of HMAC-SHA256(secret, body)>`.
    pub secret: Option<String>,
    /// `max_attempts` counts every attempt, the first included.
    pub retry: RetryPolicy,
    pub timeout_ms: u64,
}

impl Webhook {
    /// The webhook of a run started with `--webhook url`: the definition's (its events,
    /// headers, secret, retry) sent to `url` instead, or the defaults when it has none.
    pub fn for_run(def: Option<&Webhook>, url: &str) -> Webhook {
        match def {
            Some(w) => Webhook {
                url: url.to_string(),
                ..w.clone()
            },
            None => Webhook {
                url: url.to_string(),
                events: WEBHOOK_EVENTS_DEFAULT.map(String::from).to_vec(),
                headers: Vec::new(),
                secret: None,
                retry: default_retry(),
                timeout_ms: WEBHOOK_TIMEOUT_MS_DEFAULT,
            },
        }
    }

    /// Whether the event named `event` is sent.
    pub fn wants(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == event)
    }
}

/// `eventStream:` of a definition: each run's events (those named) appended to a stream
/// of the namespace, keyed by run id (a run's events in order on one partition), read
/// through consumer groups like any stream.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct EventStream {
    pub stream: String,
    /// Names from [`RUN_EVENT_NAMES`] (default: all).
    pub events: Vec<String>,
}

impl EventStream {
    pub fn wants(&self, event: &str) -> bool {
        self.events.iter().any(|e| e == event)
    }
}

/// How a delivery is tried again when its webhook says nothing (and how an event is
/// appended again to its `eventStream` when that fails).
pub fn default_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: WEBHOOK_ATTEMPTS_DEFAULT,
        backoff: Backoff::Exponential,
        initial_delay_ms: WEBHOOK_INITIAL_DELAY_MS_DEFAULT,
        max_delay_ms: Some(WEBHOOK_MAX_DELAY_MS_DEFAULT),
        within_ms: None,
    }
}

/// Why `url` cannot be a webhook's: not `http://` or `https://` with a host, too long, or
/// holding spaces or control characters.
pub fn check_webhook_url(url: &str) -> Result<(), String> {
    if url.len() > WEBHOOK_URL_BYTES_MAX {
        return Err(format!(
            "the webhook URL is {} bytes; at most {WEBHOOK_URL_BYTES_MAX}",
            url.len()
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the webhook URL {url:?} holds spaces or control characters"
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("the webhook URL {url:?} is not http:// or https://, e.g. https://example.com/hooks/flo")
        })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("the webhook URL {url:?} names no host"));
    }
    Ok(())
}

/// Why `name: value` cannot be one of a webhook's headers.
pub(crate) fn check_header(name: &str, value: &str) -> Result<(), String> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(tchar) {
        return Err(format!(
            "header name {name:?} is not a valid HTTP header name"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS
        .iter()
        .any(|r| lower == *r || (r.ends_with('-') && lower.starts_with(r)))
    {
        return Err(format!(
            "header {name:?} is set by the server (X-Flo-*, Content-Type, Content-Length, Host, Transfer-Encoding, Connection, User-Agent)"
        ));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!(
            "the value of header {name:?} holds control characters"
        ));
    }
    if name.len() + value.len() > WEBHOOK_HEADER_BYTES_MAX {
        return Err(format!(
            "header {name:?} is {} bytes with its value; at most {WEBHOOK_HEADER_BYTES_MAX}",
            name.len() + value.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_workflow;

    fn def(webhook: &str) -> Result<crate::WorkflowDef, Vec<flo_protocol::ValidationIssue>> {
        let yaml = format!(
            "kind: Workflow\nname: w\nversion: \"1\"\nwebhook:\n{webhook}\nstart:\n  run: \"@actions/a\"\n  transitions: {{success: flo.Completed}}\n"
        );
        parse_workflow(&yaml).map(|v| v.def)
    }

    fn codes(e: &[flo_protocol::ValidationIssue]) -> Vec<(String, String)> {
        e.iter().map(|i| (i.code.clone(), i.path.clone())).collect()
    }

    #[test]
    fn a_webhook_with_defaults_and_one_with_every_field() {
        let d = def("  url: http://127.0.0.1:9000/hook").unwrap();
        let w = d.webhook.unwrap();
        assert_eq!(w.url, "http://127.0.0.1:9000/hook");
        assert_eq!(w.events, WEBHOOK_EVENTS_DEFAULT.map(String::from).to_vec());
        assert_eq!(w.retry.max_attempts, WEBHOOK_ATTEMPTS_DEFAULT);
        assert_eq!(w.timeout_ms, WEBHOOK_TIMEOUT_MS_DEFAULT);
        assert!(w.wants("failed") && !w.wants("step_started"));
        let d = def(
            "  url: https://hooks.example.com/flo?x=1\n  events: [completed, step_finished]\n  headers: {X-Team: payments, Authorization: Bearer t}\n  secret: s3cret\n  retry: {max_attempts: 3, initial_delay_ms: 50}\n  timeoutMs: 2000",
        )
        .unwrap();
        let w = d.webhook.unwrap();
        assert_eq!(w.events, ["completed", "step_finished"]);
        assert_eq!(w.headers[0], ("X-Team".into(), "payments".into()));
        assert_eq!(w.secret.as_deref(), Some("s3cret"));
        assert_eq!(
            (
                w.retry.max_attempts,
                w.retry.initial_delay_ms,
                w.retry.backoff
            ),
            (3, 50, Backoff::Exponential)
        );
        assert_eq!(w.timeout_ms, 2000);
        let run = Webhook::for_run(Some(&w), "http://other:1/x");
        assert_eq!(
            (run.url.as_str(), run.secret),
            ("http://other:1/x", w.secret.clone())
        );
        assert_eq!(Webhook::for_run(None, "http://h/").events.len(), 4);
    }

    #[test]
    fn e514_bad_webhooks_are_refused_with_each_reason() {
        let e = def("  events: [done]\n  headers: {X-Flo-Event: x, \"bad name\": y}\n  secret: \"\"\n  timeoutMs: 0").unwrap_err();
        let found = codes(&e);
        for path in [
            "webhook.url",
            "webhook.events",
            "webhook.headers.X-Flo-Event",
            "webhook.headers.bad name",
            "webhook.secret",
            "webhook.timeoutMs",
        ] {
            assert!(
                found.contains(&("E514".to_string(), path.to_string())),
                "{path}: {found:?}"
            );
        }
        let e = def("  url: ftp://x/\n  retry: {max_attempts: 0}").unwrap_err();
        assert_eq!(
            codes(&e),
            [
                ("E514".to_string(), "webhook.url".to_string()),
                ("E501".to_string(), "webhook.retry.max_attempts".to_string())
            ]
        );
        assert!(def("  url: http://h/\n  colour: red").is_err());
    }

    #[test]
    fn an_event_stream_names_a_stream_and_its_events() {
        let yaml = |es: &str| {
            format!(
                "kind: Workflow\nname: w\nversion: \"1\"\neventStream: {es}\nstart:\n  run: \"@actions/a\"\n  transitions: {{success: flo.Completed}}\n"
            )
        };
        let d = parse_workflow(&yaml("{stream: run-events}")).unwrap().def;
        let es = d.event_stream.unwrap();
        assert_eq!((es.stream.as_str(), es.events.len()), ("run-events", 10));
        let d = parse_workflow(&yaml("{stream: ev, events: [completed]}"))
            .unwrap()
            .def;
        assert!(d.event_stream.unwrap().wants("completed"));
        let e = parse_workflow(&yaml("{stream: \"bad name\", events: [done]}")).unwrap_err();
        let found = codes(&e);
        assert!(
            found.contains(&("E515".into(), "eventStream.stream".into())),
            "{found:?}"
        );
        assert!(
            found.contains(&("E515".into(), "eventStream.events".into())),
            "{found:?}"
        );
    }

    #[test]
    fn urls_are_checked() {
        for good in ["http://h", "https://h:8443/a?b=c", "http://user@h/x"] {
            assert_eq!(check_webhook_url(good), Ok(()), "{good}");
        }
        for bad in [
            "h/x",
            "http://",
            "http:///x",
            "http://:80/",
            "https://h/a b",
            "mailto:x",
        ] {
            assert!(check_webhook_url(bad).is_err(), "{bad}");
        }
        assert!(check_webhook_url(&format!("http://h/{}", "a".repeat(3000))).is_err());
    }
}
