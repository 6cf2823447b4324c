//! The shape of parallel branches: each fork (`transitions: {success: [a, b]}`) must meet
//! again at one step, its join, where the run waits for every branch. `check_forks` finds
//! each fork's join and reports the shapes a run could not follow (E305–E307).
//!
//! A branch is what its first step reaches before the join (its region). The join is the
//! step every branch reaches that reaches every other step they all reach, the nearest
//! to the first branch when several do (a loop after the join).

use crate::def::{Step, WorkflowDef};
use crate::issues::{IssueCode, issue};
use flo_protocol::ValidationIssue;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The one terminal a branch may lead to: a failing branch fails the run.
const BRANCH_TERMINAL: &str = "flo.Failed";

/// Fills in each fork's join; the issues of the forks that have none or whose branches a
/// run could not follow.
pub(crate) fn check_forks(def: &mut WorkflowDef) -> Vec<ValidationIssue> {
    let mut issues = Vec::new();
    let mut joins = Vec::new();
    let forks: Vec<(String, String, Vec<String>)> = def
        .steps
        .iter()
        .map(|(name, step)| (name.as_str(), step))
        .chain([(crate::START_STEP, &def.start)])
        .flat_map(|(name, step)| {
            step.forks
                .iter()
                .map(move |(outcome, f)| (name.to_string(), outcome.clone(), f.steps.clone()))
        })
        .collect();
    for (step, outcome, branches) in forks {
        let path = match step.as_str() {
            crate::START_STEP => format!("start.transitions.{outcome}"),
            _ => format!("steps.{step}.transitions.{outcome}"),
        };
        match fork_join(def, &step, &branches) {
            Ok(join) => joins.push((step, outcome, join)),
            Err((code, why)) => issues.push(issue(code, path, why)),
        }
    }
    for (step, outcome, join) in joins {
        let step = match step.as_str() {
            crate::START_STEP => &mut def.start,
            name => def.steps.get_mut(name).expect("a step of the definition"),
        };
        if let Some(fork) = step.forks.get_mut(&outcome) {
            fork.join = join;
        }
    }
    issues
}

/// The join of the fork at `fork` into `branches`, or why there is none.
fn fork_join(
    def: &WorkflowDef,
    fork: &str,
    branches: &[String],
) -> Result<String, (IssueCode, String)> {
    let reached: Vec<BTreeMap<String, usize>> = branches
        .iter()
        .map(|b| reach(def, b, None, Edges::All))
        .collect();
    let mut common: BTreeSet<&String> = reached[0].keys().collect();
    for r in &reached[1..] {
        common.retain(|s| r.contains_key(*s));
    }
    // A branch's first step reached again (through a loop) is not where they meet.
    common.retain(|s| !branches.contains(s));
    if common.is_empty() {
        return Err((
            IssueCode::E305,
            format!(
                "the branches {} never meet again at one step: give them a common next step (the join, where the run waits for every branch)",
                listed(branches)
            ),
        ));
    }
    let join = common
        .iter()
        .filter(|s| {
            let from = reach(def, s, None, Edges::All);
            common.iter().all(|c| from.contains_key(*c))
        })
        .min_by_key(|s| (reached[0][**s], s.as_str()))
        .map(|s| s.to_string())
        .ok_or_else(|| {
            (
                IssueCode::E305,
                format!(
                    "the branches {} meet at {} but none of these comes first on every path: lead each branch to one step where they all meet",
                    listed(branches),
                    listed(common.iter().map(|s| s.as_str()))
                ),
            )
        })?;
    // What the join leads to before any fork starts branches again (a loop through a fork
    // step starts new branches: not a way back into these).
    let after_join = reach(def, &join, None, Edges::Single);
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    for branch in branches {
        let region = reach(def, branch, Some(&join), Edges::All);
        if region.contains_key(fork) {
            return Err((
                IssueCode::E306,
                format!(
                    "branch `{branch}` leads back to `{fork}`, the step that started it, before reaching the join `{join}`: a cycle through a fork"
                ),
            ));
        }
        for step in region.keys() {
            if let Some(other) = owner.insert(step.clone(), branch) {
                return Err((
                    IssueCode::E306,
                    format!(
                        "step `{step}` is in branch `{other}` and in branch `{branch}` before their join `{join}`: each step belongs to one branch"
                    ),
                ));
            }
            if after_join.contains_key(step) {
                return Err((
                    IssueCode::E305,
                    format!(
                        "branch `{branch}` reaches `{step}` without passing its join `{join}`, and so does the join: a branch may not lead past its join, nor the join back into a branch (lead it back to a step that forks instead)"
                    ),
                ));
            }
            let Some(step_def) = def.step(step) else {
                continue;
            };
            if let Some(terminal) = terminal_target(def, step_def) {
                return Err((
                    IssueCode::E307,
                    format!(
                        "step `{step}` of branch `{branch}` leads to the terminal `{terminal}`, which would end the run while the other branches run: lead it to the join `{join}` (a branch that fails with no transition of its own fails the run; `{BRANCH_TERMINAL}` is allowed)"
                    ),
                ));
            }
        }
    }
    Ok(join)
}

/// A terminal other than `flo.Failed` that `step` leads to.
fn terminal_target<'a>(def: &WorkflowDef, step: &'a Step) -> Option<&'a str> {
    step.targets()
        .find(|t| *t != BRANCH_TERMINAL && !def.steps.contains_key(*t))
}

/// Which transitions `reach` follows.
#[derive(Clone, Copy, PartialEq)]
enum Edges {
    All,
    /// Not the forks'.
    Single,
}

/// The steps reachable from `from` (itself included) and their distance, not going
/// through `stop`.
fn reach(
    def: &WorkflowDef,
    from: &str,
    stop: Option<&str>,
    edges: Edges,
) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    let mut todo = VecDeque::from([(from.to_string(), 0)]);
    while let Some((name, distance)) = todo.pop_front() {
        if Some(name.as_str()) == stop || seen.contains_key(&name) {
            continue;
        }
        let Some(step) = def.steps.get(&name) else {
            continue;
        };
        let targets: Vec<&str> = match edges {
            Edges::All => step.targets().collect(),
            Edges::Single => step.single_targets().collect(),
        };
        for target in targets {
            todo.push_back((target.to_string(), distance + 1));
        }
        seen.insert(name, distance);
    }
    seen
}

fn listed<'a>(names: impl IntoIterator<Item = &'a (impl AsRef<str> + 'a + ?Sized)>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use crate::parse_workflow;

    const HEAD: &str = "kind: Workflow\nname: g\nversion: \"1\"\n";

    fn codes(yaml: &str) -> Vec<String> {
        match parse_workflow(&format!("{HEAD}{yaml}")) {
            Ok(_) => Vec::new(),
            Err(issues) => issues.into_iter().map(|i| i.code).collect(),
        }
    }

    #[test]
    fn each_fork_finds_its_join_nested_ones_too() {
        let yaml = "start:\n  run: \"@actions/a\"\n  transitions: {success: [a, b]}\nsteps:\n  a:\n    run: \"@actions/a\"\n    transitions: {success: j, failure: flo.Failed}\n  b:\n    run: \"@actions/a\"\n    transitions: {success: [b1, b2]}\n  b1:\n    run: \"@actions/a\"\n    transitions: {success: bj}\n  b2:\n    run: \"@actions/a\"\n    transitions: {success: bj}\n  bj:\n    run: \"@actions/a\"\n    transitions: {success: j}\n  j:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed, failure: again}\n  again:\n    run: \"@actions/a\"\n    transitions: {success: [a, b]}\n";
        let def = parse_workflow(&format!("{HEAD}{yaml}")).unwrap().def;
        assert_eq!(def.start.forks["success"].join, "j");
        assert_eq!(def.steps["b"].forks["success"].join, "bj");
        assert_eq!(def.steps["again"].forks["success"].join, "j");
    }

    #[test]
    fn shapes_a_run_could_not_follow_are_refused() {
        let fork = "start:\n  run: \"@actions/a\"\n  transitions: {success: [x, y]}\nsteps:\n";
        let step = |name: &str, transitions: &str| {
            format!("  {name}:\n    run: \"@actions/a\"\n    transitions: {transitions}\n")
        };
        let end = step("j", "{success: flo.Completed}");
        // Never meet.
        let never = format!(
            "{fork}{}{}",
            step("x", "{success: flo.Failed}"),
            step("y", "{success: flo.Completed}")
        );
        assert!(
            codes(&never).contains(&"E305".into()),
            "{:?}",
            codes(&never)
        );
        // A branch past its join.
        let past = format!(
            "{fork}{}{}{}{}",
            step("x", "{success: j, failure: k}"),
            step("y", "{success: j}"),
            step("j", "{success: k}"),
            step("k", "{success: flo.Completed}")
        );
        assert_eq!(codes(&past), ["E305"], "{past}");
        // Two branches share a step.
        let shared = format!(
            "{fork}{}{}{}{end}",
            step("x", "{success: s}"),
            step("y", "{success: s}"),
            step("s", "{success: t}"),
        );
        let shared = format!("{shared}{}", step("t", "{success: j}"));
        // `s` is where they meet first: its join; `t` then is no branch's. No issue.
        assert_eq!(codes(&shared), Vec::<String>::new());
        let crossed = format!(
            "{fork}{}{}{end}",
            step("x", "{success: j, failure: y}"),
            step("y", "{success: j}"),
        );
        assert_eq!(codes(&crossed), ["E306"]);
        // A terminal inside a branch; a list naming a terminal.
        let terminal = format!(
            "{fork}{}{}{end}",
            step("x", "{success: j, failure: flo.Cancelled}"),
            step("y", "{success: j}"),
        );
        assert_eq!(codes(&terminal), ["E307"]);
        let failed_is_fine = terminal.replace("flo.Cancelled", "flo.Failed");
        assert_eq!(codes(&failed_is_fine), Vec::<String>::new());
        let listed = "start:\n  run: \"@actions/a\"\n  transitions: {success: [x, flo.Completed]}\nsteps:\n  x:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed}\n";
        assert_eq!(codes(listed), ["E308"]);
        let twice = "start:\n  run: \"@actions/a\"\n  transitions: {success: [x, x]}\nsteps:\n  x:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed}\n";
        assert_eq!(codes(twice), ["E308"]);
        let on_error = "start:\n  run: \"@actions/a\"\n  onError: maybe\n  transitions: {success: flo.Completed}\n";
        assert_eq!(codes(on_error), ["E511"]);
    }
}
