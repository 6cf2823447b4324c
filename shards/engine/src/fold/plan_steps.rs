//! Where a run's inline-plan step stands (`WfRun::plan`), folded from its `WfPlanEvent`
//! records: the executors' order, the one being tried and the attempts made on it. The
//! run itself (`fold::workflows`) applies what a record says to its phase and history.

use super::record::{PlanEvent, PlanSkip};
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

/// What a plan event does to its run besides its progress.
pub struct PlanEffect {
    /// The history event it adds (none for `Begin`).
    pub history: Option<(HistoryEventType, String)>,
    /// The step's phase after it.
    pub phase: PhaseAfter,
    /// The run's error after it (a failed attempt's).
    pub error: Option<String>,
}

/// Where a plan event leaves the step.
pub enum PhaseAfter {
    /// As it was (an attempt's start and end go with other records).
    Unchanged,
    /// Ready to go on (the next executor).
    Ready,
    /// Sleeping until a retry at this time.
    Sleeping(u64),
}

/// Applies `event` to the run's `progress`; `name` names an executor for history.
pub fn apply(
    progress: &mut Option<PlanProgress>,
    event: PlanEvent,
    at_ms: u64,
    name: impl Fn(u16) -> String,
) -> PlanEffect {
    let effect = |kind, detail: String| PlanEffect {
        history: Some((kind, detail)),
        phase: PhaseAfter::Unchanged,
        error: None,
    };
    match event {
        PlanEvent::Begin { order } => {
            *progress = Some(PlanProgress {
                order,
                pos: 0,
                attempts: 0,
                first_at_ms: at_ms,
                deadline_ms: None,
                last_error: None,
            });
            PlanEffect {
                history: None,
                phase: PhaseAfter::Unchanged,
                error: None,
            }
        }
        PlanEvent::Start {
            executor,
            deadline_ms,
        } => {
            let attempts = progress.as_mut().map_or(1, |p| {
                p.attempts += 1;
                if p.attempts == 1 {
                    p.first_at_ms = at_ms;
                }
                p.deadline_ms = deadline_ms;
                p.attempts
            });
            effect(
                HistoryEventType::PlanExecutorStart,
                format!("{} (attempt {attempts})", name(executor)),
            )
        }
        PlanEvent::Retry {
            executor,
            at_ms: due,
            error,
        } => {
            if let Some(p) = progress.as_mut() {
                p.last_error = Some(error.clone());
            }
            PlanEffect {
                history: Some((
                    HistoryEventType::PlanExecutorRetry,
                    format!("{}: {error}; again at {due}", name(executor)),
                )),
                phase: PhaseAfter::Sleeping(due),
                error: Some(error),
            }
        }
        PlanEvent::Exhausted {
            executor,
            fatal,
            error,
        } => {
            let who = name(executor);
            if let Some(p) = progress.as_mut() {
                p.next_executor();
                p.last_error = Some(format!("{who}: {error}"));
            }
            let why = if fatal { " (fatal)" } else { "" };
            PlanEffect {
                history: Some((
                    HistoryEventType::PlanExecutorExhausted,
                    format!("{who}: {error}{why}"),
                )),
                phase: PhaseAfter::Ready,
                error: None,
            }
        }
        PlanEvent::Skipped { executor, reason } => {
            if let Some(p) = progress.as_mut() {
                p.next_executor();
            }
            let kind = match reason {
                PlanSkip::BreakerOpen => HistoryEventType::PlanBreakerSkip,
                PlanSkip::RateLimited => HistoryEventType::PlanRateLimitSkip,
            };
            effect(kind, name(executor))
        }
        PlanEvent::Succeeded { executor } => {
            effect(HistoryEventType::PlanExecutorSuccess, name(executor))
        }
        PlanEvent::CacheHit { key } => effect(HistoryEventType::PlanCacheHit, key),
        PlanEvent::Fallback => effect(
            HistoryEventType::PlanFallback,
            progress
                .as_ref()
                .and_then(|p| p.last_error.clone())
                .unwrap_or_default(),
        ),
    }
}
