//! Inline plans: a step that runs `@plan/NAME` tries the plan's executors (actions) in the
//! order its `selection` gives, each with its own retries, circuit breaker and rate limit,
//! classifying failures by their error code, with a result cache and a fallback value.
//!
//! This floor decides and logs each move of a plan step (`Record::WfPlanEvent`) and tells
//! the workflow step what follows (`Move`); the workflow handlers (`workflows::plan_steps`)
//! commit the step's end. Where a step stands is the fold's (`fold::plan_steps`); the
//! breakers, health, rate windows and cache are the shard's memory (`plan_book`).

mod attempt;
mod next;
mod status;

pub use attempt::{attempt_timed_out, on_attempt_final};
pub use next::next;
pub use status::{invalidate_part, status_part};

use crate::fold::record::{PlanEvent, StepOutcome};

/// What a plan step does after the plan moved.
#[derive(Debug)]
pub enum Move {
    /// An attempt runs (its action run was created), or a retry waits for its timer.
    Wait,
    /// The plan moved on (it began, or skipped or gave up an executor): advance again.
    Continue,
    /// The step ends with this outcome; `events` are logged in the same group as its end.
    Finish {
        events: Vec<PlanEvent>,
        outcome: StepOutcome,
        output: Option<Vec<u8>>,
        error: Option<String>,
    },
}

/// The step's end when no executor is left: the fallback value (`exhausted` or
/// `any_error`), else a failure naming the last error.
fn out_of_executors(plan_name: &str, plan: &flo_workflow::Plan, last: Option<&str>) -> Move {
    match &plan.fallback {
        Some(fallback) => Move::Finish {
            events: vec![PlanEvent::Fallback],
            outcome: StepOutcome::Success,
            output: Some(fallback.value.clone().into_bytes()),
            error: None,
        },
        None => Move::Finish {
            events: Vec::new(),
            outcome: StepOutcome::Failure,
            output: None,
            error: Some(format!(
                "plan {plan_name:?}: no executor succeeded{}",
                last.map(|l| format!(" (last: {l})")).unwrap_or_default()
            )),
        },
    }
}
