//! A step's time and visit limits and manual control of runs, end to end: `deferMs` on the
//! test clock, `timeoutMs` of a WebAssembly step (the guest interrupted) and of a worker
//! step (its lease revoked, the late result refused, the step's retry deciding),
//! `maxVisits`, per-step statistics, pause/resume, `continue`, the timed-out listing and
//! `continue-timed-out`, each surviving kill -9 where it holds state.

mod common;

use common::{
    TestServer, cli_json, cli_ok, fixed_wasm_action, guest_action, temp_dir, user_action,
    wait_until,
};
use flo::protocol::{RunStatus, WorkflowRunStatus};
use flo::{ActionResult, ActionWorker, StartOptions};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn history_types(c: &mut flo::Client, run_id: &str) -> Vec<String> {
    c.workflow_history(run_id)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type.to_string())
        .collect()
}

#[test]
fn a_deferred_step_waits_its_time_on_the_test_clock_and_across_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    c.create_workflow(
        "kind: Workflow\nname: later\nversion: \"1\"\nstart:\n  run: \"@actions/go\"\n  transitions: {success: later}\nsteps:\n  later:\n    run: \"@actions/go\"\n    deferMs: 600000\n    transitions: {success: flo.Completed}\n",
    )
    .unwrap();
    let run_id = c
        .start_workflow("later", b"{}", StartOptions::default())
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let run = c.workflow_run(&run_id).unwrap();
        run.waiting_for
            .as_deref()
            .unwrap_or("")
            .starts_with("deferred until")
    }));
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Waiting, "{run:?}");
    assert_eq!(run.current_step.as_deref(), Some("later"));
    assert!(history_types(&mut c, &run_id).contains(&"step_deferred".to_string()));

    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    // The restarted server's clock starts again from the wall clock: the first advance leaves
    // a wide margin for the time the restart took.
    c.advance_clock(540_000).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!c.workflow_run(&run_id).unwrap().status.is_final());
    c.advance_clock(70_000).unwrap();
    let run = c.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let later = run.steps.iter().find(|s| s.name == "later").unwrap();
    assert_eq!((later.executions, later.visits), (1, 1), "{later:?}");
}

#[test]
fn step_timeouts_interrupt_a_guest_and_revoke_a_workers_lease() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let spin = flo_testkit::guests::spin_guest();
    guest_action(&mut c, "spin", spin, Some(60_000));
    user_action(&mut c, "slow", 60_000, 0, 100);
    // The guest spins for ever: each attempt is cut at 300 ms (not the action's 60 s).
    c.create_workflow(
        "kind: Workflow\nname: spins\nversion: \"1\"\nstart:\n  run: \"@actions/spin\"\n  timeoutMs: 300\n  retry: {max_attempts: 2, initial_delay_ms: 10}\n  transitions: {success: flo.Completed}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let run_id = c
        .start_workflow("spins", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("execution timeout exceeded"), "{error}");
    assert_eq!(run.steps[0].executions, 2, "{run:?}");

    // A worker that holds its first task past the step's 500 ms: the lease is revoked,
    // the late result refused, the step's retry runs it again.
    c.create_workflow(
        "kind: Workflow\nname: slow\nversion: \"1\"\ndefaults: {timeoutMs: 500}\nstart:\n  run: \"@actions/slow\"\n  retry: {max_attempts: 2, initial_delay_ms: 10}\n  transitions: {success: flo.Completed}\n",
    )
    .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("slow")
        .block_ms(100)
        .concurrency(2)
        .action("slow", move |_| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1500));
                return ActionResult::json(&json!({"late": true}));
            }
            ActionResult::json(&json!({"on_time": true}))
        })
        .spawn()
        .unwrap();
    let run_id = c
        .start_workflow("slow", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let output: serde_json::Value = serde_json::from_slice(run.output.as_deref().unwrap()).unwrap();
    assert_eq!(
        output,
        json!({"on_time": true}),
        "the late result was refused"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (runs, _) = c.list_runs("slow", None, false, None).unwrap();
    let statuses: Vec<RunStatus> = runs.iter().map(|r| r.status).collect();
    assert!(statuses.contains(&RunStatus::TimedOut), "{statuses:?}");
    assert!(statuses.contains(&RunStatus::Completed), "{statuses:?}");
    worker.stop();
}

#[test]
fn max_visits_fails_a_loop_and_statistics_count_visits() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    guest_action(&mut c, "no", flo_testkit::guests::failing_guest(), None);
    c.create_workflow(
        "kind: Workflow\nname: loops\nversion: \"1\"\nstart:\n  run: \"@actions/no\"\n  transitions: {failure: again}\nsteps:\n  again:\n    run: \"@actions/no\"\n    maxVisits: 3\n    transitions: {failure: again}\n",
    )
    .unwrap();
    let run_id = c
        .start_workflow("loops", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("maxVisits is 3"), "{error}");
    let again = run.steps.iter().find(|s| s.name == "again").unwrap();
    // The fourth visit ends the run before it executes (its end is recorded as one).
    assert_eq!(again.visits, 4, "{again:?}");
    assert!(again.first_started_ms > 0 && again.last_finished_ms >= again.first_started_ms);
    let doc = cli_json(&server.addr_string(), &["workflow", "status", &run_id]);
    assert_eq!(doc["steps"][1]["visits"], 4, "{doc}");
}

#[test]
fn pause_resume_continue_and_the_timed_out_listing() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    fixed_wasm_action(&mut c, "go", r#"{"ok": true}"#);
    user_action(&mut c, "work", 60_000, 0, 100);
    c.create_workflow(
        "kind: Workflow\nname: held\nversion: \"1\"\nstart:\n  waitForSignal: {type: go}\n  transitions: {success: next}\nsteps:\n  next:\n    run: \"@actions/go\"\n    transitions: {success: flo.Completed}\n",
    )
    .unwrap();
    let run_id = c
        .start_workflow("held", b"{}", StartOptions::default())
        .unwrap();
    let doc = cli_json(&addr, &["workflow", "pause", &run_id]);
    assert_eq!(doc["status"], "on_hold", "{doc}");
    // The signal finishes the waiting step; the next does not start while paused.
    c.signal_workflow(&run_id, "go", b"{}").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::OnHold, "{run:?}");
    assert_eq!(run.current_step.as_deref(), Some("next"), "{run:?}");
    // Paused across kill -9.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    assert_eq!(
        c.workflow_run(&run_id).unwrap().status,
        WorkflowRunStatus::OnHold
    );
    cli_ok(&addr, &["workflow", "resume", &run_id]);
    let run = c.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let types = history_types(&mut c, &run_id);
    assert!(types.contains(&"workflow_paused".to_string()), "{types:?}");
    assert!(types.contains(&"workflow_resumed".to_string()), "{types:?}");

    // A worker step no worker takes: listed once it waited past --older-than, continued
    // (its task cancelled, a new one queued), then done by a worker.
    c.create_workflow(
        "kind: Workflow\nname: stuck\nversion: \"1\"\nstart:\n  run: \"@actions/work\"\n  transitions: {success: flo.Completed}\n",
    )
    .unwrap();
    let stuck: Vec<String> = (0..3)
        .map(|_| {
            c.start_workflow("stuck", b"{}", StartOptions::default())
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let doc = cli_json(
        &addr,
        &["workflow", "timed-out", "stuck", "--older-than", "100ms"],
    );
    assert_eq!(doc["runs"].as_array().unwrap().len(), 3, "{doc}");
    let none = cli_json(&addr, &["workflow", "timed-out", "--older-than", "1h"]);
    assert_eq!(none["runs"].as_array().unwrap().len(), 0, "{none}");
    let doc = cli_json(
        &addr,
        &["workflow", "continue-timed-out", "--older-than", "100ms"],
    );
    assert_eq!(doc["continued"], 3, "{doc}");
    // Continuing a run with nothing stuck is refused with the reason.
    let err = c.continue_workflow(&run_id, false).unwrap_err().to_string();
    assert!(err.contains("already completed"), "{err}");
    let worker = ActionWorker::builder(server.addr)
        .worker_id("work")
        .block_ms(100)
        .action("work", |_| ActionResult::json(&json!({"done": true})))
        .spawn()
        .unwrap();
    for id in &stuck {
        let run = c.wait_workflow(id, 10_000).unwrap();
        assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
        assert_eq!(run.steps[0].visits, 2, "{run:?}");
        assert!(history_types(&mut c, id).contains(&"step_continued".to_string()));
    }
    // Each run's first task was cancelled, its second completed.
    let (runs, _) = c.list_runs("work", None, false, None).unwrap();
    let cancelled = runs
        .iter()
        .filter(|r| r.status == RunStatus::Cancelled)
        .count();
    let completed = runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed)
        .count();
    assert_eq!((cancelled, completed), (3, 3), "{runs:?}");
    worker.stop();
}
