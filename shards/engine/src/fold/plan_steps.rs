//! Where a run's inline-plan step stands (`WfRun::plan`), folded from its `WfPlanEvent`
//! records: the executors' order, the one being tried and the attempts made on it.

use super::record::{PlanEvent, PlanSkip};
use super::workflows::{RunPhase, WfRun, Workflows};
use flo_protocol::HistoryEventType;
use serde::{Deserialize, Serialize};

/// A plan step in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanProgress {
    /// Executors (indexes into the plan's list) in the order this step tries them.
    pub order: Vec<u16>,
    /// Position in `order` of the executor being tried (`order.len()`: none left).
    pub pos: usize,
    /// Attempts started on it.
    pub attempts: u32,
    /// When its first attempt started (for its retries' `within_ms`).
    pub first_at_ms: u64,
    /// When the attempt in flight times out (`tracking: async`).
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// The last executor's error (the step fails with it when none is left).
    pub last_error: Option<String>,
}

impl PlanProgress {
    /// The executor being tried, if one is left.
    pub fn current(&self) -> Option<u16> {
        self.order.get(self.pos).copied()
    }

    fn next_executor(&mut self) {
        self.pos += 1;
        self.attempts = 0;
    }
}

/// The name of executor `index` of the plan `step` runs (for history).
fn executor_name(run: &WfRun, step: &str, index: u16) -> String {
    let name = run.def.as_ref().ok().and_then(|def| {
        let flo_workflow::StepAction::Run(flo_workflow::Target::Plan(plan)) =
            &def.step(step)?.action
        else {
            return None;
        };
        Some(
            def.plans
                .get(plan)?
                .executors
                .get(index as usize)?
                .name
                .clone(),
        )
    });
    name.unwrap_or_else(|| format!("#{index}"))
}

impl Workflows {
    pub fn apply_plan_event(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: &str,
        event: PlanEvent,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return super::workflows::missing(lsn, run_id);
        };
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
        let name = |run: &WfRun, i: u16| executor_name(run, step, i);
        let (kind, detail) = match event {
            PlanEvent::Begin { order } => {
                run.plan = Some(PlanProgress {
                    order,
                    pos: 0,
                    attempts: 0,
                    first_at_ms: at_ms,
                    deadline_ms: None,
                    last_error: None,
                });
                return;
            }
            PlanEvent::Start {
                executor,
                deadline_ms,
            } => {
                let attempts = run.plan.as_mut().map_or(1, |p| {
                    p.attempts += 1;
                    if p.attempts == 1 {
                        p.first_at_ms = at_ms;
                    }
                    p.deadline_ms = deadline_ms;
                    p.attempts
                });
                (
                    HistoryEventType::PlanExecutorStart,
                    format!("{} (attempt {attempts})", name(run, executor)),
                )
            }
            PlanEvent::Retry {
                executor,
                at_ms: due,
                error,
            } => {
                run.phase = RunPhase::Sleeping {
                    step: step.to_string(),
                    at_ms: due,
                };
                run.error = Some(error.clone());
                if let Some(p) = run.plan.as_mut() {
                    p.last_error = Some(error.clone());
                }
                (
                    HistoryEventType::PlanExecutorRetry,
                    format!("{}: {error}; again at {due}", name(run, executor)),
                )
            }
            PlanEvent::Exhausted {
                executor,
                fatal,
                error,
            } => {
                let who = name(run, executor);
                run.phase = RunPhase::Ready {
                    step: step.to_string(),
                };
                if let Some(p) = run.plan.as_mut() {
                    p.next_executor();
                    p.last_error = Some(format!("{who}: {error}"));
                }
                let why = if fatal { " (fatal)" } else { "" };
                (
                    HistoryEventType::PlanExecutorExhausted,
                    format!("{who}: {error}{why}"),
                )
            }
            PlanEvent::Skipped { executor, reason } => {
                if let Some(p) = run.plan.as_mut() {
                    p.next_executor();
                }
                let kind = match reason {
                    PlanSkip::BreakerOpen => HistoryEventType::PlanBreakerSkip,
                    PlanSkip::RateLimited => HistoryEventType::PlanRateLimitSkip,
                };
                (kind, name(run, executor))
            }
            PlanEvent::Succeeded { executor } => {
                (HistoryEventType::PlanExecutorSuccess, name(run, executor))
            }
            PlanEvent::CacheHit { key } => (HistoryEventType::PlanCacheHit, key),
            PlanEvent::Fallback => (
                HistoryEventType::PlanFallback,
                run.plan
                    .as_ref()
                    .and_then(|p| p.last_error.clone())
                    .unwrap_or_default(),
            ),
        };
        run.event(kind, Some(step), detail, at_ms);
    }
}
