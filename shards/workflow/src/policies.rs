//! The checks of a step's policies: `retry` (E501) and `poll` (E502) — attempts, backoff,
//! delays and their caps.

use crate::backoff::{Backoff, PollPolicy, RetryPolicy};
use crate::bounds::{
    ATTEMPTS_MAX, DELAY_MS_MAX, POLL_ATTEMPTS_DEFAULT, POLL_BASE_DELAY_MS_DEFAULT,
    RETRY_ATTEMPTS_DEFAULT, RETRY_INITIAL_DELAY_MS_DEFAULT, RETRY_WITHIN_MS_MAX,
};
use crate::issues::IssueCode;
use crate::parse::{RawPoll, RawRetry};
use crate::validate::Checker;

impl Checker {
    pub(crate) fn retry(&mut self, path: &str, raw: RawRetry) -> RetryPolicy {
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

    pub(crate) fn poll(&mut self, path: &str, raw: RawPoll) -> PollPolicy {
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
}
