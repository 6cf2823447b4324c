//! What a finished workflow run's history must show: every step started, then completed,
//! once per execution (never completed twice, never two starts without a completion); one
//! terminal event, the last; the signals it received no fewer than acknowledged and no
//! more than sent.

use flo::protocol::{HistoryEvent, WorkflowStepInfo};
use std::collections::HashMap;

/// The events that end a run.
const TERMINAL_EVENTS: [&str; 4] = [
    "workflow_completed",
    "workflow_failed",
    "workflow_cancelled",
    "workflow_timed_out",
];

/// Everything wrong with a finished run's history (empty: nothing).
pub fn problems(
    events: &[HistoryEvent],
    steps: &[WorkflowStepInfo],
    signals_acked: u32,
    signals_in_doubt: u32,
) -> Vec<String> {
    let mut problems = Vec::new();
    let names: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    if names.first() != Some(&"workflow_started")
        || names.iter().filter(|&&n| n == "workflow_started").count() != 1
    {
        problems.push("it does not start with one workflow_started".to_string());
    }
    for pair in events.windows(2) {
        if pair[1].seq != pair[0].seq + 1 {
            problems.push(format!(
                "event seq {} follows seq {}",
                pair[1].seq, pair[0].seq
            ));
            break;
        }
    }
    let terminals = names.iter().filter(|n| TERMINAL_EVENTS.contains(n)).count();
    if terminals != 1 || !names.last().is_some_and(|n| TERMINAL_EVENTS.contains(n)) {
        problems.push(format!(
            "{terminals} terminal events, and the last event is {:?}",
            names.last()
        ));
    }
    problems.extend(step_problems(events, steps));
    let received = names.iter().filter(|&&n| n == "signal_received").count() as u32;
    if received < signals_acked || received > signals_acked + signals_in_doubt {
        problems.push(format!(
            "{received} signals received; {signals_acked} were acknowledged and \
             {signals_in_doubt} in doubt"
        ));
    }
    problems
}

/// Starts and completions alternate per run (one step at a time), and each step's
/// completions are its executions. A signal wait whose signal was queued already completes
/// without a start: its completion follows its `signal_matched`.
fn step_problems(events: &[HistoryEvent], steps: &[WorkflowStepInfo]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut open: Option<&str> = None;
    let mut completions: HashMap<&str, u32> = HashMap::new();
    let mut previous: Option<&HistoryEvent> = None;
    for event in events {
        let step = event.step.as_deref().unwrap_or("?");
        match event.event_type.as_str() {
            "step_started" => {
                if let Some(other) = open {
                    problems.push(format!(
                        "step {step} started (seq {}) while step {other} was not completed",
                        event.seq
                    ));
                }
                open = Some(step);
            }
            "step_completed" => {
                // A signal wait that finds its signal queued consumes it at once: the step
                // completes without a start (no wait was logged).
                let took_queued_signal = previous.is_some_and(|p: &HistoryEvent| {
                    p.event_type == "signal_matched" && p.step.as_deref() == Some(step)
                });
                if open != Some(step) && !(open.is_none() && took_queued_signal) {
                    problems.push(format!(
                        "step {step} completed (seq {}) without a start since its last \
                         completion",
                        event.seq
                    ));
                }
                open = None;
                *completions.entry(step).or_default() += 1;
            }
            _ => {}
        }
        previous = Some(event);
    }
    if let Some(step) = open {
        problems.push(format!("step {step} started but never completed"));
    }
    for info in steps {
        let completed = completions.get(info.name.as_str()).copied().unwrap_or(0);
        if completed != info.executions {
            problems.push(format!(
                "step {} completed {completed} times in the history, {} executions in the \
                 status",
                info.name, info.executions
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(events: &[(&str, Option<&str>)]) -> Vec<HistoryEvent> {
        events
            .iter()
            .enumerate()
            .map(|(i, (event_type, step))| HistoryEvent {
                event_type: flo::protocol::HistoryEventType::from_name(event_type),
                step: step.map(str::to_string),
                detail: String::new(),
                at_ms: 0,
                seq: i as u64 + 1,
            })
            .collect()
    }

    fn step(name: &str, executions: u32) -> WorkflowStepInfo {
        WorkflowStepInfo {
            name: name.into(),
            outcome: Some("success".into()),
            output: None,
            executions,
            visits: 1,
            first_started_ms: 0,
            last_finished_ms: 0,
            total_ms: 0,
        }
    }

    const GOOD: &[(&str, Option<&str>)] = &[
        ("workflow_started", None),
        ("step_started", Some("_start")),
        ("action_completed", Some("_start")),
        ("step_completed", Some("_start")),
        ("signal_received", Some("approve")),
        ("step_started", Some("approve")),
        ("waiting_for_signal", Some("approve")),
        ("signal_matched", Some("approve")),
        ("step_completed", Some("approve")),
        ("step_started", Some("child")),
        ("step_completed", Some("child")),
        ("step_retry", Some("child")),
        ("step_started", Some("child")),
        ("step_completed", Some("child")),
        ("workflow_completed", None),
    ];

    #[test]
    fn a_history_with_each_step_completed_once_per_execution_passes() {
        let steps = [step("_start", 1), step("approve", 1), step("child", 2)];
        assert_eq!(problems(&history(GOOD), &steps, 1, 0), Vec::<String>::new());
        assert_eq!(problems(&history(GOOD), &steps, 0, 1), Vec::<String>::new());
    }

    #[test]
    fn a_signal_wait_that_finds_its_signal_queued_completes_without_a_start() {
        let queued: Vec<(&str, Option<&str>)> = vec![
            ("workflow_started", None),
            ("step_started", Some("_start")),
            ("signal_received", Some("_start")),
            ("step_completed", Some("_start")),
            ("signal_matched", Some("approve")),
            ("step_completed", Some("approve")),
            ("workflow_completed", None),
        ];
        let steps = [step("_start", 1), step("approve", 1)];
        assert_eq!(
            problems(&history(&queued), &steps, 1, 0),
            Vec::<String>::new()
        );
        let mut unmatched = queued.clone();
        unmatched.remove(4);
        let found = problems(&history(&unmatched), &steps, 1, 0);
        assert!(
            found.iter().any(|p| p.contains("step approve completed")),
            "{found:?}"
        );
    }

    #[test]
    fn a_step_completed_twice_a_lost_signal_or_a_second_terminal_is_reported() {
        let steps = [step("_start", 1), step("approve", 1), step("child", 2)];
        let mut twice = GOOD.to_vec();
        twice.insert(4, ("step_completed", Some("_start")));
        let found = problems(&history(&twice), &steps, 1, 0);
        assert!(
            found.iter().any(|p| p.contains("step _start completed")),
            "{found:?}"
        );
        assert!(found.iter().any(|p| p.contains("2 times")), "{found:?}");

        let lost = problems(&history(GOOD), &steps, 2, 0);
        assert!(
            lost.iter().any(|p| p.contains("1 signals received")),
            "{lost:?}"
        );

        let mut two_ends = GOOD.to_vec();
        two_ends.push(("workflow_failed", None));
        let found = problems(&history(&two_ends), &steps, 1, 0);
        assert!(
            found.iter().any(|p| p.contains("2 terminal events")),
            "{found:?}"
        );
    }
}
