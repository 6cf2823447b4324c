//! `Record::WfRunControl` applied to a run: a step deferred, the run held or released, a
//! step continued by hand.

use super::record::RunControl;
use super::workflows::{RunPhase, Workflows, impossible, missing};
use flo_protocol::HistoryEventType;

impl Workflows {
    pub fn apply_run_control(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: Option<String>,
        control: RunControl,
        at_ms: u64,
        lsn: u64,
    ) {
        let Some(run) = self.run_mut(namespace, run_id) else {
            return missing(lsn, run_id);
        };
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
        match control {
            RunControl::Hold => {
                run.held = true;
                run.event(HistoryEventType::WorkflowPaused, None, String::new(), at_ms);
            }
            RunControl::Release => {
                run.held = false;
                run.event(
                    HistoryEventType::WorkflowResumed,
                    None,
                    String::new(),
                    at_ms,
                );
            }
            RunControl::Defer { until_ms } => {
                let step = step.unwrap_or_default();
                let Some(cursor) = run.at_mut(&step) else {
                    return impossible(lsn, format_args!("run {run_id:?} defers {step:?}"));
                };
                cursor.phase = RunPhase::Sleeping {
                    step: step.clone(),
                    at_ms: until_ms,
                };
                let detail = until_ms.to_string();
                run.event(HistoryEventType::StepDeferred, Some(&step), detail, at_ms);
            }
            RunControl::State { state, replace } => {
                let fields = match serde_json::from_slice(&state) {
                    Ok(serde_json::Value::Object(fields)) => fields,
                    _ => {
                        return impossible(lsn, format_args!("run {run_id:?} state not an object"));
                    }
                };
                if replace {
                    run.state = serde_json::Value::Object(serde_json::Map::new());
                }
                flo_workflow::state::merge(&mut run.state, fields);
                run.state_bytes = run.state.to_string().len();
                let detail = match replace {
                    true => "replaced",
                    false => "merged",
                };
                run.event(
                    HistoryEventType::StateUpdated,
                    None,
                    detail.to_string(),
                    at_ms,
                );
            }
            RunControl::Continue { reset_visits } => {
                let step = step.unwrap_or_default();
                let Some(cursor) = run.at_mut(&step) else {
                    return impossible(lsn, format_args!("run {run_id:?} continues {step:?}"));
                };
                cursor.phase = RunPhase::Ready { step: step.clone() };
                cursor.executions = 0;
                cursor.polls = 0;
                cursor.plan = None;
                cursor.first_at_ms = at_ms;
                let stats = run.step_state_mut(&step);
                stats.visits = match reset_visits {
                    true => 1,
                    false => stats.visits + 1,
                };
                let detail = match reset_visits {
                    true => "visits reset".to_string(),
                    false => String::new(),
                };
                run.event(HistoryEventType::StepContinued, Some(&step), detail, at_ms);
            }
        }
    }
}
