//! A step's time and visit limits (`deferMs`, `timeoutMs`, `maxVisits`) and the
//! definition's `defaults:` for them, checked (E512).

use crate::bounds::{DELAY_MS_MAX, STEP_VISITS_MAX};
use crate::issues::{IssueCode, issue};
use crate::parse::RawDefaults;
use flo_protocol::ValidationIssue;

/// `defaults:` once checked.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StepDefaults {
    pub timeout_ms: Option<u64>,
    pub max_visits: Option<u32>,
}

/// A step's limits once checked: (deferMs, timeoutMs, maxVisits), defaults applied.
pub(crate) type Limits = (Option<u64>, Option<u64>, Option<u32>);

pub(crate) fn defaults(
    raw: Option<RawDefaults>,
    issues: &mut Vec<ValidationIssue>,
) -> StepDefaults {
    let Some(raw) = raw else {
        return StepDefaults::default();
    };
    StepDefaults {
        timeout_ms: raw
            .timeout_ms
            .filter(|ms| duration("defaults.timeoutMs", *ms, issues)),
        max_visits: raw
            .max_visits
            .and_then(|n| visits("defaults.maxVisits", n, issues)),
    }
}

/// The limits of the step at `path`; `waits`: a `waitForSignal` step (its timeout is
/// `waitForSignal.timeoutMs`).
pub(crate) fn step_limits(
    path: &str,
    (defer_ms, timeout_ms, max_visits): (Option<u64>, Option<u64>, Option<u64>),
    waits: bool,
    defaults: StepDefaults,
    issues: &mut Vec<ValidationIssue>,
) -> Limits {
    let defer_ms = defer_ms.filter(|ms| duration(&format!("{path}.deferMs"), *ms, issues));
    if waits && timeout_ms.is_some() {
        issues.push(issue(
            IssueCode::E512,
            format!("{path}.timeoutMs"),
            "`timeoutMs` beside `waitForSignal` has no effect: a signal wait's timeout is `waitForSignal.timeoutMs`",
        ));
    }
    let timeout_ms = match waits {
        true => None,
        false => timeout_ms
            .filter(|ms| duration(&format!("{path}.timeoutMs"), *ms, issues))
            .or(defaults.timeout_ms),
    };
    let max_visits = max_visits
        .and_then(|n| visits(&format!("{path}.maxVisits"), n, issues))
        .or(defaults.max_visits);
    (defer_ms, timeout_ms, max_visits)
}

fn duration(path: &str, ms: u64, issues: &mut Vec<ValidationIssue>) -> bool {
    let ok = (1..=DELAY_MS_MAX).contains(&ms);
    if !ok {
        issues.push(issue(
            IssueCode::E512,
            path,
            format!("`{ms}` ms: give a duration from 1 to {DELAY_MS_MAX} ms"),
        ));
    }
    ok
}

fn visits(path: &str, n: u64, issues: &mut Vec<ValidationIssue>) -> Option<u32> {
    let ok = (1..=u64::from(STEP_VISITS_MAX)).contains(&n);
    if !ok {
        issues.push(issue(
            IssueCode::E512,
            path,
            format!("`{n}` visits: give a count from 1 to {STEP_VISITS_MAX}"),
        ));
    }
    ok.then_some(n as u32)
}
