//! The checks of a definition's `webhook:` (E514; its `retry` as a step's, E501) and
//! `eventStream:` (E515).

use crate::issues::IssueCode;
use crate::parse::{RawEventStream, RawWebhook};
use crate::validate::Checker;
use crate::webhook::{
    EventStream, RUN_EVENT_NAMES, WEBHOOK_ATTEMPTS_DEFAULT, WEBHOOK_EVENTS_DEFAULT,
    WEBHOOK_HEADERS_MAX, WEBHOOK_INITIAL_DELAY_MS_DEFAULT, WEBHOOK_SECRET_BYTES_MAX,
    WEBHOOK_TIMEOUT_MS_DEFAULT, WEBHOOK_TIMEOUT_MS_MAX, Webhook, check_header, check_webhook_url,
    default_retry,
};

impl Checker {
    /// `webhook:` (E514; its `retry` is checked as a step's, E501).
    pub(crate) fn webhook(&mut self, raw: RawWebhook) -> Option<Webhook> {
        let code = IssueCode::E514;
        let errors = self.error_count();
        let url = match raw.url {
            Some(url) => {
                if let Err(why) = check_webhook_url(&url) {
                    self.error(code, "webhook.url", why);
                }
                url
            }
            None => {
                self.error(
                    code,
                    "webhook.url",
                    "missing `url`: where the events are POSTed, e.g. `url: https://example.com/hooks/flo`",
                );
                String::new()
            }
        };
        let events = self.run_events(
            code,
            "webhook.events",
            raw.events,
            &WEBHOOK_EVENTS_DEFAULT,
            "the run's end (completed, failed, cancelled, timed_out)",
        );
        let headers = raw.headers.map_or_else(Vec::new, |h| h.0);
        if headers.len() > WEBHOOK_HEADERS_MAX {
            self.error(
                code,
                "webhook.headers",
                format!("{} headers; at most {WEBHOOK_HEADERS_MAX}", headers.len()),
            );
        }
        for (name, value) in &headers {
            if let Err(why) = check_header(name, value) {
                self.error(code, format!("webhook.headers.{name}"), why);
            }
        }
        if let Some(secret) = &raw.secret
            && (secret.is_empty() || secret.len() > WEBHOOK_SECRET_BYTES_MAX)
        {
            self.error(
                code,
                "webhook.secret",
                format!(
                    "`secret` is {} bytes; use 1 to {WEBHOOK_SECRET_BYTES_MAX}",
                    secret.len()
                ),
            );
        }
        let retry = match raw.retry {
            None => default_retry(),
            Some(mut r) => {
                r.max_attempts
                    .get_or_insert(WEBHOOK_ATTEMPTS_DEFAULT.into());
                r.backoff.get_or_insert_with(|| "exponential".to_string());
                r.initial_delay_ms
                    .get_or_insert(WEBHOOK_INITIAL_DELAY_MS_DEFAULT);
                self.retry("webhook.retry", r)
            }
        };
        let timeout_ms = raw.timeout_ms.unwrap_or(WEBHOOK_TIMEOUT_MS_DEFAULT);
        if timeout_ms == 0 || timeout_ms > WEBHOOK_TIMEOUT_MS_MAX {
            self.error(
                code,
                "webhook.timeoutMs",
                format!("`timeoutMs` is {timeout_ms}; use 1 to {WEBHOOK_TIMEOUT_MS_MAX}"),
            );
        }
        (self.error_count() == errors).then_some(Webhook {
            url,
            events,
            headers,
            secret: raw.secret,
            retry,
            timeout_ms,
        })
    }

    /// `eventStream:` (E515).
    pub(crate) fn event_stream(&mut self, raw: RawEventStream) -> Option<EventStream> {
        let code = IssueCode::E515;
        let errors = self.error_count();
        let stream = raw.stream.unwrap_or_default();
        if let Err(e) = flo_protocol::check_stream_name(&stream) {
            self.error(
                code,
                "eventStream.stream",
                format!(
                    "`stream`: {} (the stream the run events are appended to)",
                    e.0
                ),
            );
        }
        let events = self.run_events(
            code,
            "eventStream.events",
            raw.events,
            &RUN_EVENT_NAMES,
            "every event",
        );
        (self.error_count() == errors).then_some(EventStream { stream, events })
    }

    /// An `events:` list: run event names, each once (left out: `default`, which the
    /// message for an empty list calls `default_text`).
    fn run_events(
        &mut self,
        code: IssueCode,
        path: &str,
        raw: Option<Vec<String>>,
        default: &[&str],
        default_text: &str,
    ) -> Vec<String> {
        let Some(events) = raw else {
            return default.iter().map(|e| e.to_string()).collect();
        };
        if events.is_empty() {
            self.error(
                code,
                path,
                format!("`events` is empty: leave it out for {default_text}"),
            );
        }
        let mut unique: Vec<String> = Vec::with_capacity(events.len());
        for e in events {
            if !RUN_EVENT_NAMES.contains(&e.as_str()) {
                self.error(
                    code,
                    path,
                    format!("unknown event {e:?}; one of {}", RUN_EVENT_NAMES.join(", ")),
                );
            } else if !unique.contains(&e) {
                unique.push(e);
            }
        }
        unique
    }
}
