//! flow8's form of a graph: `dependsOn: [a, b]` on a step, compiled to the transitions a
//! run follows (forks and joins) before the definition is checked. A step runs once every
//! step it depends on succeeded:
//!
//! - each step's `success` leads to its dependents (several: a fork);
//! - steps that depend on the same several steps meet at a join: the dependent itself
//!   when it is the only one, else a `pass` step `flo.join-N` that forks to them;
//! - the steps no other depends on end the run: the last itself, or, when several, a
//!   `pass` step `flo.end` they all lead to.
//!
//! `start` names the start step. A step of the graph keeps its other transitions
//! (`failure:`...); a `success:` of its own beside `dependsOn` is an error (E309), as are
//! names that are not steps and cycles.

use crate::issues::{IssueCode, issue};
use crate::parse::{Entries, RawStep, RawTransition, RawWorkflow};
use flo_protocol::ValidationIssue;
use std::collections::{BTreeMap, BTreeSet};

/// The start step, as `dependsOn` names it.
const START: &str = "start";

/// Rewrites `raw`'s steps that use `dependsOn` into transitions (and `pass` steps, whose
/// names it returns: reserved names no definition may give).
pub(crate) fn compile(raw: &mut RawWorkflow, issues: &mut Vec<ValidationIssue>) -> Vec<String> {
    let mut made = Vec::new();
    compile_into(raw, issues, &mut made);
    made
}

fn compile_into(raw: &mut RawWorkflow, issues: &mut Vec<ValidationIssue>, made: &mut Vec<String>) {
    let Some(steps) = raw.steps.as_mut() else {
        return;
    };
    let deps: BTreeMap<String, Vec<String>> = steps
        .0
        .iter_mut()
        .filter_map(|(name, s)| Some((name.clone(), s.depends_on.take()?)))
        .collect();
    if deps.is_empty() {
        return;
    }
    let names: BTreeSet<String> = steps.0.iter().map(|(n, _)| n.clone()).collect();
    let mut ok = true;
    for (step, on) in &deps {
        for d in on {
            if d != START && !names.contains(d) {
                ok = false;
                issues.push(issue(
                    IssueCode::E309,
                    format!("steps.{step}.dependsOn"),
                    format!("`{d}` is not a step (`start` names the start step)"),
                ));
            }
            if d == step {
                ok = false;
                issues.push(issue(
                    IssueCode::E309,
                    format!("steps.{step}.dependsOn"),
                    format!("step `{step}` depends on itself"),
                ));
            }
        }
        if on.is_empty() {
            ok = false;
            issues.push(issue(
                IssueCode::E309,
                format!("steps.{step}.dependsOn"),
                "an empty `dependsOn`: name the steps this one waits for (`start` for the start step)",
            ));
        }
    }
    if !ok || has_cycle(&deps) {
        if ok {
            issues.push(issue(
                IssueCode::E309,
                "steps",
                "`dependsOn` goes round in a cycle: a step cannot wait for itself through others",
            ));
        }
        return;
    }
    // Where each step's success leads: its sole dependents, and one join per set of
    // several steps depended on together.
    let mut success: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut joins: BTreeMap<BTreeSet<String>, Vec<String>> = BTreeMap::new();
    for (step, on) in &deps {
        let on: BTreeSet<String> = on.iter().cloned().collect();
        match on.len() {
            1 => {
                let d = on.iter().next().expect("one").clone();
                success.entry(d).or_default().insert(step.clone());
            }
            _ => joins.entry(on).or_default().push(step.clone()),
        }
    }
    let mut added: Vec<(String, RawStep)> = Vec::new();
    for (n, (on, dependents)) in joins.into_iter().enumerate() {
        let join = match dependents.as_slice() {
            [only] => only.clone(),
            _ => {
                let join = format!("flo.join-{}", n + 1);
                added.push((join.clone(), pass_to(&dependents)));
                join
            }
        };
        for d in on {
            success.entry(d).or_default().insert(join.clone());
        }
    }
    // The graph's last steps: those no step depends on.
    let depended: BTreeSet<&String> = success.keys().collect();
    let sinks: Vec<String> = deps
        .keys()
        .filter(|s| !depended.contains(s))
        .cloned()
        .collect();
    match sinks.as_slice() {
        [only] => {
            success.insert(only.clone(), BTreeSet::from(["flo.Completed".to_string()]));
        }
        _ => {
            added.push(("flo.end".into(), pass_to(&["flo.Completed".to_string()])));
            for s in sinks {
                success.insert(s, BTreeSet::from(["flo.end".to_string()]));
            }
        }
    }
    for (step, targets) in success {
        let (path, raw_step) = match step.as_str() {
            START => ("start".to_string(), raw.start.as_mut()),
            name => (
                format!("steps.{name}"),
                raw.steps
                    .as_mut()
                    .and_then(|s| s.0.iter_mut().find(|(n, _)| n == name).map(|(_, s)| s)),
            ),
        };
        let Some(raw_step) = raw_step else {
            continue;
        };
        let transitions = raw_step
            .transitions
            .get_or_insert_with(|| Entries(Vec::new()));
        if transitions.0.iter().any(|(o, _)| o == "success") {
            issues.push(issue(
                IssueCode::E309,
                format!("{path}.transitions.success"),
                "a `success` transition beside `dependsOn`: where a step of the graph goes on success is what depends on it; remove one of them",
            ));
            continue;
        }
        transitions
            .0
            .push(("success".into(), many(targets.into_iter().collect())));
    }
    made.extend(added.iter().map(|(n, _)| n.clone()));
    if let Some(steps) = raw.steps.as_mut() {
        steps.0.extend(added);
    }
}

fn many(targets: Vec<String>) -> RawTransition {
    match <[String; 1]>::try_from(targets) {
        Ok([one]) => RawTransition::One(one),
        Err(targets) => RawTransition::Many(targets),
    }
}

/// A `pass` step leading to `targets`.
fn pass_to(targets: &[String]) -> RawStep {
    RawStep {
        pass: Some(true),
        transitions: Some(Entries(vec![("success".into(), many(targets.to_vec()))])),
        ..RawStep::default()
    }
}

fn has_cycle(deps: &BTreeMap<String, Vec<String>>) -> bool {
    // Kahn's algorithm over "step waits for d".
    let mut waiting: BTreeMap<&str, usize> = deps
        .iter()
        .map(|(s, on)| {
            (
                s.as_str(),
                on.iter().filter(|d| deps.contains_key(*d)).count(),
            )
        })
        .collect();
    let mut ready: Vec<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(s, _)| *s)
        .collect();
    let mut done = 0;
    while let Some(step) = ready.pop() {
        done += 1;
        for (other, on) in deps {
            if on.iter().any(|d| d == step)
                && let Some(n) = waiting.get_mut(other.as_str())
            {
                *n -= on.iter().filter(|d| *d == step).count();
                if *n == 0 {
                    ready.push(other);
                }
            }
        }
    }
    done < deps.len()
}
