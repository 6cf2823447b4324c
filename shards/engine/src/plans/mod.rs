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

use crate::core::Core;
use crate::fold::plan_steps::PlanProgress;
use crate::fold::record::{PlanEvent, Record, StepOutcome};
use crate::plan_book::{PlanKey, plan_key};
use flo_workflow::{Plan, WorkflowDef};
use std::sync::Arc;

/// Logs a move of plan step `step` of run `run_id`.
pub fn log(core: &mut Core, namespace: &str, run_id: &str, step: &str, event: PlanEvent) {
    let at_ms = core.now_ms();
    core.commit(Record::WfPlanEvent {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        step: step.to_string(),
        event,
        at_ms,
    });
}

/// A plan step's run, as the plan's moves read it.
struct StepRun {
    key: PlanKey,
    seq: u64,
    progress: Option<PlanProgress>,
    /// The plan's cache key for the run's input, if it caches.
    cache_key: Option<String>,
    /// The definition (shared), which holds the plan.
    def: Arc<WorkflowDef>,
    plan_name: String,
}

impl StepRun {
    fn read(
        core: &Core,
        namespace: &str,
        run_id: &str,
        step: &str,
        plan_name: &str,
    ) -> Option<StepRun> {
        let run = core.state().workflows.run(namespace, run_id)?;
        let def = run.def.clone().ok()?;
        let cache_key = def.plans.get(plan_name)?.cache_key(&run.input);
        Some(StepRun {
            key: plan_key(namespace, &run.workflow, &run.version, plan_name),
            seq: run.seq,
            progress: run.at(step).and_then(|c| c.plan.clone()),
            cache_key,
            def,
            plan_name: plan_name.to_string(),
        })
    }

    fn plan(&self) -> &Plan {
        &self.def.plans[&self.plan_name]
    }
}

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
