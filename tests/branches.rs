//! Parallel branches end to end: a transition that names several steps runs them at once;
//! they meet at their join, which sees every branch's output by step name. Nested forks,
//! a failing branch (the run fails and the other branches' work is cancelled, or with
//! `onError: continue` the join goes on without it), `onError: skip`, cancelling a run
//! with branches, the status of each branch, the shapes validation refuses, and kill -9
//! in the middle of a fork (each branch's step runs once).

mod common;

use common::{TestServer, cli_json, fixed_wasm_action, temp_dir, user_action, wait_until};
use flo::protocol::{RunStatus, WorkflowRunStatus};
use flo::{ActionResult, ActionWorker, StartOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// start → [a, b, c]; b → [b1, b2] → bj; a, bj and c meet at `merge` (a worker's step that
/// checks it sees every branch's output).
const NESTED: &str = r#"kind: Workflow
name: nested
version: "1"
start:
  run: "@actions/split"
  transitions:
    success: [a, b, c]
steps:
  a:
    run: "@actions/wa"
    transitions: {success: merge}
  b:
    run: "@actions/wb"
    transitions:
      success: [b1, b2]
  b1:
    run: "@actions/wb1"
    transitions: {success: bj}
  b2:
    run: "@actions/wb2"
    transitions: {success: bj}
  bj:
    run: "@actions/wbj"
    transitions: {success: merge}
  c:
    run: "@actions/wc"
    transitions: {success: merge}
  merge:
    run: "@actions/merge"
    inputMapping: '{"a": "$.steps.a.output.v", "b1": "$.steps.b1.output.v", "b2": "$.steps.b2.output.v", "bj": "$.steps.bj.output.v", "c": "$.steps.c.output.v"}'
    transitions: {success: flo.Completed}
"#;

fn events(c: &mut flo::Client, run_id: &str) -> Vec<(String, Option<String>)> {
    c.workflow_history(run_id)
        .unwrap()
        .into_iter()
        .map(|e| (e.event_type.to_string(), e.step))
        .collect()
}

/// Whether the run has two branches and each waits for something.
fn both_wait(c: &mut flo::Client, run_id: &str) -> bool {
    let run = c.workflow_run(run_id).unwrap();
    run.branches.len() == 2 && run.branches.iter().all(|b| b.waiting_for.is_some())
}

#[test]
fn nested_forks_join_with_every_branch_output() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "split", r#"{"split": true}"#);
    for (name, v) in [
        ("wa", 1),
        ("wb", 2),
        ("wb1", 3),
        ("wb2", 4),
        ("wbj", 5),
        ("wc", 6),
    ] {
        fixed_wasm_action(&mut c, name, &format!(r#"{{"v": {v}}}"#));
    }
    user_action(&mut c, "merge", 60_000, 0, 100);
    c.create_workflow(NESTED).unwrap();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("merge")
        .block_ms(100)
        .action("merge", |ctx| {
            let input: Value = ctx.json()?;
            assert_eq!(input, json!({"a": 1, "b1": 3, "b2": 4, "bj": 5, "c": 6}));
            ActionResult::json(&json!({"merged": true}))
        })
        .spawn()
        .unwrap();
    let run_id = c
        .start_workflow("nested", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert!(run.branches.is_empty(), "{run:?}");
    for s in &run.steps {
        assert_eq!(s.executions, 1, "{s:?}");
    }
    assert_eq!(run.steps.len(), 8, "{:?}", run.steps);
    let history = events(&mut c, &run_id);
    let count = |t: &str| history.iter().filter(|(e, _)| e == t).count();
    assert_eq!(count("branches_started"), 2, "{history:?}");
    assert_eq!(count("branches_joined"), 2, "{history:?}");
    let joined: Vec<_> = history
        .iter()
        .filter(|(e, _)| e == "branches_joined")
        .map(|(_, s)| s.clone().unwrap_or_default())
        .collect();
    assert_eq!(joined, ["bj", "merge"]);
    // The join started once, after every branch.
    let merge_started = history
        .iter()
        .filter(|(e, s)| e == "step_started" && s.as_deref() == Some("merge"))
        .count();
    assert_eq!(merge_started, 1);
    worker.stop();
}

/// start → [left, right] → done; each branch waits for a signal of its own.
const SIGNALLED: &str = r#"kind: Workflow
name: signalled
version: "1"
start:
  run: "@actions/go"
  transitions:
    success: [left, right]
steps:
  left:
    waitForSignal: {type: l}
    transitions: {success: done}
  right:
    waitForSignal: {type: r}
    transitions: {success: done}
  done:
    run: "@actions/go"
    transitions: {success: flo.Completed}
"#;

#[test]
fn branches_wait_and_show_in_status_until_each_joined() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    c.create_workflow(SIGNALLED).unwrap();
    let run_id = c
        .start_workflow("signalled", b"{}", StartOptions::default())
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || both_wait(
        &mut c, &run_id
    )));
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Waiting, "{run:?}");
    assert_eq!(run.current_step, None);
    let doc = cli_json(&server.addr_string(), &["workflow", "status", &run_id]);
    let branches = doc["branches"].as_array().unwrap();
    let steps: Vec<&str> = branches
        .iter()
        .map(|b| b["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["left", "right"], "{doc}");
    assert_eq!(branches[0]["waiting_for"], "signal l", "{doc}");

    c.signal_workflow(&run_id, "r", b"{}").unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let run = c.workflow_run(&run_id).unwrap();
        run.branches.iter().any(|b| b.step == "done")
    }));
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Waiting, "{run:?}");
    let right = run.branches.iter().find(|b| b.step == "done").unwrap();
    assert!(
        right
            .waiting_for
            .as_deref()
            .unwrap_or("")
            .contains("other branches"),
        "{right:?}"
    );
    // `done` has not started: the join waits for `left`.
    assert!(run.steps.iter().all(|s| s.name != "done"), "{run:?}");

    // The run and its branches survive kill -9.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.branches.len(), 2, "{run:?}");
    c.signal_workflow(&run_id, "l", b"{}").unwrap();
    let run = c.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let done = run.steps.iter().find(|s| s.name == "done").unwrap();
    assert_eq!(done.executions, 1);
}

/// start → [fast, slow] → join; `fast` fails (its `onError` given), `slow` waits for a
/// worker.
fn failing(on_error: &str) -> String {
    format!(
        r#"kind: Workflow
name: failing-{on_error}
version: "1"
start:
  run: "@actions/go"
  transitions:
    success: [fast, slow]
steps:
  fast:
    run: "@actions/broken"
    onError: {on_error}
    transitions: {{success: join}}
  slow:
    run: "@actions/slow"
    transitions: {{success: join}}
  join:
    run: "@actions/go"
    transitions: {{success: flo.Completed}}
"#
    )
}

#[test]
fn a_failing_branch_fails_the_run_or_lets_the_join_go_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    user_action(&mut c, "broken", 60_000, 0, 100);
    user_action(&mut c, "slow", 60_000, 0, 100);
    for policy in ["fail", "continue", "skip"] {
        c.create_workflow(&failing(policy)).unwrap();
    }
    // `broken` fails at once; `slow` is only leased once asked to (below).
    let worker = ActionWorker::builder(server.addr)
        .worker_id("broken")
        .block_ms(100)
        .action("broken", |_| Err("the branch broke".into()))
        .spawn()
        .unwrap();

    // fail (the default): the run fails, the other branch's action run is cancelled.
    let run_id = c
        .start_workflow("failing-fail", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    assert!(
        run.error.as_deref().unwrap_or("").contains("no transition"),
        "{run:?}"
    );
    let slow_runs = c.list_runs("slow", None, false, None).unwrap().0;
    assert_eq!(slow_runs.len(), 1, "{slow_runs:?}");
    assert_eq!(slow_runs[0].status, RunStatus::Cancelled, "{slow_runs:?}");

    // continue / skip: the join waits for `slow`, then goes on without `fast`'s output.
    let slow = ActionWorker::builder(server.addr)
        .worker_id("slow")
        .block_ms(100)
        .action("slow", |_| ActionResult::json(&json!({"slow": true})))
        .spawn()
        .unwrap();
    for (policy, outcome) in [("continue", "failure"), ("skip", "skipped")] {
        let run_id = c
            .start_workflow(&format!("failing-{policy}"), b"{}", StartOptions::default())
            .unwrap();
        let run = c.wait_workflow(&run_id, 20_000).unwrap();
        assert_eq!(
            run.status,
            WorkflowRunStatus::Completed,
            "{policy}: {run:?}"
        );
        let fast = run.steps.iter().find(|s| s.name == "fast").unwrap();
        assert_eq!(fast.outcome.as_deref(), Some(outcome), "{policy}: {run:?}");
        let join = run.steps.iter().find(|s| s.name == "join").unwrap();
        assert_eq!(join.executions, 1, "{policy}: {run:?}");
    }
    worker.stop();
    slow.stop();
}

#[test]
fn cancelling_a_run_cancels_every_branch() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    user_action(&mut c, "broken", 60_000, 0, 100);
    user_action(&mut c, "slow", 60_000, 0, 100);
    c.create_workflow(&failing("fail")).unwrap();
    let run_id = c
        .start_workflow("failing-fail", b"{}", StartOptions::default())
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || both_wait(
        &mut c, &run_id
    )));
    c.cancel_workflow(&run_id, None).unwrap();
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Cancelled, "{run:?}");
    assert!(run.branches.is_empty(), "{run:?}");
    for action in ["broken", "slow"] {
        let runs = c.list_runs(action, None, false, None).unwrap().0;
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].status, RunStatus::Cancelled, "{action}: {runs:?}");
    }
}

#[test]
fn kill_9_in_the_middle_of_a_fork_runs_each_branch_once() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    user_action(&mut c, "broken", 60_000, 0, 100);
    user_action(&mut c, "slow", 60_000, 0, 100);
    c.create_workflow(&failing("continue")).unwrap();
    let run_ids: Vec<String> = (0..5)
        .map(|_| {
            c.start_workflow("failing-continue", b"{}", StartOptions::default())
                .unwrap()
        })
        .collect();
    // Each run waits in both branches for a worker.
    assert!(wait_until(Duration::from_secs(10), || {
        run_ids.iter().all(|id| both_wait(&mut c, id))
    }));
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("both")
        .block_ms(100)
        .action("broken", |_| ActionResult::json(&json!({"fixed": true})))
        .action("slow", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            ActionResult::json(&json!({"slow": true}))
        })
        .spawn()
        .unwrap();
    for id in &run_ids {
        let run = c.wait_workflow(id, 20_000).unwrap();
        assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
        for s in &run.steps {
            assert_eq!(s.executions, 1, "{id}: {s:?}");
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    worker.stop();
}

#[test]
fn shapes_a_run_could_not_follow_are_refused() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let head = "kind: Workflow\nname: bad\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n";
    let cases = [
        // Branches that never meet.
        (
            "  transitions: {success: [x, y]}\nsteps:\n  x:\n    run: \"@actions/a\"\n    transitions: {success: flo.Failed}\n  y:\n    run: \"@actions/a\"\n    transitions: {success: flo.Failed}\n",
            "E305",
        ),
        // A cycle through the fork.
        (
            "  transitions: {success: f}\nsteps:\n  f:\n    run: \"@actions/a\"\n    transitions: {success: [x, y]}\n  x:\n    run: \"@actions/a\"\n    transitions: {success: j, failure: f}\n  y:\n    run: \"@actions/a\"\n    transitions: {success: j}\n  j:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed}\n",
            "E306",
        ),
        // A terminal inside a branch.
        (
            "  transitions: {success: [x, y]}\nsteps:\n  x:\n    run: \"@actions/a\"\n    transitions: {success: j, failure: flo.Completed}\n  y:\n    run: \"@actions/a\"\n    transitions: {success: j}\n  j:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed}\n",
            "E307",
        ),
        // A list naming a terminal.
        (
            "  transitions: {success: [x, flo.Completed]}\nsteps:\n  x:\n    run: \"@actions/a\"\n    transitions: {success: flo.Completed}\n",
            "E308",
        ),
        // dependsOn naming no step.
        (
            "  transitions: {success: flo.Completed}\nsteps:\n  x:\n    run: \"@actions/a\"\n    dependsOn: [nowhere]\n",
            "E309",
        ),
        // An unknown onError.
        (
            "  onError: ignore\n  transitions: {success: flo.Completed}\n",
            "E511",
        ),
    ];
    for (rest, code) in cases {
        let yaml = format!("{head}{rest}");
        let err = c.create_workflow(&yaml).unwrap_err().to_string();
        assert!(err.contains(code), "{code}: {err}");
    }
    // The server goes on serving.
    assert!(c.list_workflows().is_ok());
}

/// flow8's DAG: A → {B, C} → {D, E}, written with `dependsOn`.
const DAG: &str = r#"kind: Workflow
name: dag
version: "1"
start:
  run: "@actions/go"
steps:
  b:
    run: "@actions/go"
    dependsOn: [start]
  c:
    run: "@actions/go"
    dependsOn: [start]
  d:
    run: "@actions/go"
    dependsOn: [b, c]
  e:
    run: "@actions/go"
    dependsOn: [b, c]
"#;

#[test]
fn depends_on_runs_a_dag_in_waves() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    c.create_workflow(DAG).unwrap();
    let run_id = c
        .start_workflow("dag", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    for step in ["_start", "b", "c", "d", "e"] {
        let s = run.steps.iter().find(|s| s.name == step).unwrap();
        assert_eq!(s.executions, 1, "{step}: {run:?}");
    }
    // d and e start only once b and c finished.
    let history = events(&mut c, &run_id);
    let at = |t: &str, step: &str| {
        history
            .iter()
            .position(|(e, s)| e == t && s.as_deref() == Some(step))
            .unwrap_or_else(|| panic!("no {t} of {step}: {history:?}"))
    };
    for late in ["d", "e"] {
        for early in ["b", "c"] {
            assert!(
                at("step_completed", early) < at("step_started", late),
                "{history:?}"
            );
        }
    }
}
