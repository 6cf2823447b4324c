//! A workflow definition as a graph for the console to draw: its steps (the start step
//! `_start` first), the terminals its transitions reach, and an edge per transition (and
//! per signal timeout). Parsed from the definition's YAML by the workflow language itself,
//! so the page needs no YAML of its own.

use flo_workflow::{BUILTIN_TERMINALS, START_STEP, Step, StepAction, Target, WorkflowDef};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The graph of the definition `yaml`, or why there is none.
pub(crate) fn graph(yaml: &str) -> Value {
    match flo_workflow::parse_workflow(yaml) {
        Ok(validated) => graph_of(&validated.def),
        Err(issues) => {
            let first = issues
                .first()
                .map(|i| match i.path.as_str() {
                    "" => format!("{}: {}", i.code, i.message),
                    path => format!("{} at {path}: {}", i.code, i.message),
                })
                .unwrap_or_default();
            json!({"error": format!("the definition does not parse here: {first}")})
        }
    }
}

fn graph_of(def: &WorkflowDef) -> Value {
    let steps = std::iter::once((START_STEP, &def.start))
        .chain(def.steps.iter().map(|(name, step)| (name.as_str(), step)));
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    let mut terminals = BTreeSet::new();
    for (name, step) in steps {
        nodes.push(step_node(name, step));
        for (outcome, to) in &step.transitions {
            edges.push(json!({"from": name, "to": to, "label": outcome}));
            terminals.insert(to.as_str());
        }
        // A fork: an edge to each branch's first step (all steps: no terminal).
        for (outcome, fork) in &step.forks {
            for to in &fork.steps {
                edges.push(json!({"from": name, "to": to, "label": outcome}));
            }
        }
        if let StepAction::WaitForSignal(wait) = &step.action
            && let Some(to) = &wait.on_timeout
        {
            edges.push(json!({"from": name, "to": to, "label": "timeout"}));
            terminals.insert(to.as_str());
        }
    }
    for name in terminals {
        if let Some(status) = terminal_status(def, name) {
            nodes.push(json!({"id": name, "kind": "terminal", "label": name, "status": status}));
        }
    }
    json!({"start": START_STEP, "nodes": nodes, "edges": edges})
}

fn step_node(name: &str, step: &Step) -> Value {
    let (kind, target) = match &step.action {
        StepAction::Run(Target::Action(action)) => ("step", format!("@actions/{action}")),
        StepAction::Run(Target::Workflow { name, version }) => match version {
            Some(v) => ("step", format!("@workflow/{name}:{v}")),
            None => ("step", format!("@workflow/{name}")),
        },
        StepAction::Run(Target::Plan(plan)) => ("step", format!("@plan/{plan}")),
        StepAction::WaitForSignal(wait) => ("signal", format!("signal {}", wait.signal_type)),
        StepAction::Pass => ("step", "pass".to_string()),
    };
    let label = if name == START_STEP { "start" } else { name };
    json!({"id": name, "kind": kind, "label": label, "target": target})
}

/// The status a terminal ends a run with; None for a step.
fn terminal_status(def: &WorkflowDef, name: &str) -> Option<&'static str> {
    BUILTIN_TERMINALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, status)| status.as_str())
        .or_else(|| def.terminals.get(name).map(|status| status.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPROVAL: &str = r#"
kind: Workflow
name: approval
version: "1"
start:
  run: "@actions/review"
  transitions:
    success: wait
    failure: flo.Failed
steps:
  wait:
    waitForSignal:
      type: approve
      timeoutMs: 5000
      onTimeout: Expired
    transitions:
      success: flo.Completed
terminals:
  Expired:
    status: failed
"#;

    #[test]
    fn a_definition_becomes_steps_terminals_and_an_edge_per_transition() {
        let g = graph(APPROVAL);
        let ids: Vec<&str> = g["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["_start", "wait", "Expired", "flo.Completed", "flo.Failed"]
        );
        assert_eq!(g["nodes"][0]["target"], "@actions/review");
        assert_eq!(g["nodes"][1]["kind"], "signal");
        assert_eq!(g["nodes"][2]["status"], "failed");
        let edges = g["edges"].as_array().unwrap();
        assert_eq!(edges.len(), 4);
        assert!(edges.contains(&json!({"from": "wait", "to": "Expired", "label": "timeout"})));
    }

    #[test]
    fn a_definition_that_does_not_parse_says_why() {
        assert!(graph("kind: Workflow\n").get("error").is_some());
    }
}
