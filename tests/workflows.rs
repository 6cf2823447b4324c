//! Workflows end to end: definitions from YAML, the engine walking steps on WASM actions and
//! worker-hosted actions, data flow, retries, polls, signals, child workflows, cancel,
//! disable, idempotency and restarts (spec `flo-workflows.md`, DESIGN "Workflow rules").

mod common;

use common::{TestServer, temp_dir, user_action, wait_until};
use flo::protocol::{
    ActionKind, ActionSpec, ErrorCode, Op, Reply, RunStatus, TaskAssignment, WorkerSpec,
    WorkerType, WorkflowRunInfo, WorkflowRunStatus, WorkflowStartSpec,
};
use flo::{Client, Error, FailMode, MuxClient, StartOptions, TaskRef};
use flo_testkit::guests::{echo_guest, failing_guest, fixed_guest, spin_guest};
use serde_json::{Value, json};
use std::time::Duration;

// ---- guests and helpers ----

fn wasm_action(c: &mut Client, name: &str, wat: &str) {
    c.register_action(ActionSpec {
        namespace: String::new(),
        name: name.into(),
        kind: ActionKind::Wasm,
        wasm: Some(wat.as_bytes().to_vec()),
        timeout_ms: None,
        max_retries: Some(3),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
    .unwrap_or_else(|e| panic!("register {name}: {e}"));
}

fn worker(c: &mut Client, id: &str, actions: &[&str]) {
    c.register_worker(WorkerSpec {
        namespace: String::new(),
        worker_id: id.into(),
        worker_type: WorkerType::Action,
        max_concurrency: None,
        processes: actions.iter().map(|a| a.to_string()).collect(),
        metadata: None,
        machine_id: None,
        labels: None,
    })
    .unwrap();
}

fn next_task(c: &mut Client, worker_id: &str, action: &str) -> TaskAssignment {
    c.await_tasks(worker_id, &[action], 1, 10_000)
        .unwrap()
        .pop()
        .unwrap_or_else(|| panic!("no task of {action} came"))
}

fn create(c: &mut Client, yaml: &str) {
    c.create_workflow(yaml)
        .unwrap_or_else(|e| panic!("create workflow: {e}\n{yaml}"));
}

fn start(c: &mut Client, name: &str, input: Value) -> String {
    c.start_workflow(name, input.to_string().as_bytes(), StartOptions::default())
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

fn wait_final(c: &mut Client, run_id: &str) -> WorkflowRunInfo {
    let run = c.wait_workflow(run_id, 20_000).unwrap();
    assert!(
        run.status.is_final(),
        "run {run_id} still {:?}: {run:?}",
        run.status
    );
    run
}

fn wait_status(c: &mut Client, run_id: &str, status: WorkflowRunStatus) -> WorkflowRunInfo {
    assert!(
        wait_until(Duration::from_secs(10), || {
            c.workflow_run(run_id).unwrap().status == status
        }),
        "run {run_id} never became {status:?}: {:?}",
        c.workflow_run(run_id)
    );
    c.workflow_run(run_id).unwrap()
}

fn step_output(run: &WorkflowRunInfo, step: &str) -> Value {
    let s = run
        .steps
        .iter()
        .find(|s| s.name == step)
        .unwrap_or_else(|| panic!("no step {step} in {run:?}"));
    serde_json::from_slice(s.output.as_deref().unwrap_or(b"null")).unwrap()
}

fn events(c: &mut Client, run_id: &str) -> Vec<String> {
    c.workflow_history(run_id)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type.to_string())
        .collect()
}

fn code(e: Error) -> ErrorCode {
    match e {
        Error::Server(v) => v.code,
        other => panic!("expected a server error, got {other}"),
    }
}

/// Three WASM steps passing data along, the second retried (shared with the engine's tests).
const PROCESS_ORDER: &str = include_str!("../testdata/workflows/process-order-data-flow.yaml");

// ---- tests ----

#[test]
fn a_three_step_workflow_of_wasm_actions_completes_with_its_data_flow() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    wasm_action(&mut c, "validate-order", &fixed_guest(r#"{"valid":true}"#));
    wasm_action(&mut c, "charge-payment", &echo_guest());
    wasm_action(
        &mut c,
        "create-shipment",
        &fixed_guest(r#"{"shipment":"S-1"}"#),
    );
    create(&mut c, PROCESS_ORDER);
    let run_id = start(
        &mut c,
        "process-order",
        json!({"order_id": "ORD-123", "amount": 99.99}),
    );
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(run.terminal.as_deref(), Some("flo.Completed"));
    assert_eq!(
        (run.workflow.as_str(), run.version.as_str()),
        ("process-order", "1.0.0")
    );
    assert_eq!(step_output(&run, "_start"), json!({"valid": true}));
    assert_eq!(
        step_output(&run, "charge"),
        json!({"amount": 99.99, "valid": true, "run": run_id}),
        "inputMapping resolved input, a previous step's output and the run id"
    );
    assert_eq!(step_output(&run, "ship"), json!({"shipment": "S-1"}));
    let history = events(&mut c, &run_id);
    assert_eq!(
        history.first().map(String::as_str),
        Some("workflow_started")
    );
    assert_eq!(
        history.last().map(String::as_str),
        Some("workflow_completed")
    );
    assert_eq!(history.iter().filter(|e| *e == "step_completed").count(), 3);
}

#[test]
fn a_failing_step_is_retried_with_backoff_then_fails_the_run() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    wasm_action(&mut c, "validate-order", &fixed_guest(r#"{"valid":true}"#));
    wasm_action(&mut c, "charge-payment", &failing_guest());
    wasm_action(&mut c, "create-shipment", &echo_guest());
    create(&mut c, PROCESS_ORDER);
    let run_id = start(&mut c, "process-order", json!({"amount": 5}));
    let run = wait_status(&mut c, &run_id, WorkflowRunStatus::Waiting);
    assert_eq!(run.current_step.as_deref(), Some("charge"));
    // The server clock is wall time plus the test offset, so the backoff is
    // checked on the retry events: retry 1 is due 1000 ms after the first
    // failure, retry 2 2000 ms after the second (exponential).
    let retry_delays = |c: &mut Client| -> Vec<u64> {
        c.workflow_history(&run_id)
            .unwrap()
            .into_iter()
            .filter(|e| e.event_type == "step_retry")
            .map(|e| {
                let due: u64 = e.detail.rsplit(' ').next().unwrap().parse().unwrap();
                due - e.at_ms
            })
            .collect()
    };
    assert_eq!(retry_delays(&mut c), vec![1000]);
    assert_eq!(
        c.workflow_run(&run_id)
            .unwrap()
            .steps
            .iter()
            .find(|s| s.name == "charge")
            .unwrap()
            .executions,
        1
    );
    c.advance_clock(1000).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        c.workflow_run(&run_id)
            .unwrap()
            .steps
            .iter()
            .find(|s| s.name == "charge")
            .unwrap()
            .executions
            == 2
    }));
    assert_eq!(retry_delays(&mut c), vec![1000, 2000]);
    c.advance_clock(2000).unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Failed);
    assert_eq!(
        run.steps
            .iter()
            .find(|s| s.name == "charge")
            .unwrap()
            .executions,
        3
    );
    let history = events(&mut c, &run_id);
    assert_eq!(history.iter().filter(|e| *e == "step_retry").count(), 2);
    assert_eq!(history.last().map(String::as_str), Some("workflow_failed"));
}

#[test]
fn worker_steps_park_the_run_and_named_outcomes_choose_the_transition() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "review-order", 60_000, 3, 1000);
    worker(&mut c, "w1", &["review-order"]);
    create(
        &mut c,
        r#"
kind: Workflow
name: review
version: "1"
start:
  run: "@actions/review-order"
  transitions:
    approved: fulfil
    rejected: Rejected
    failure: flo.Failed
steps:
  fulfil:
    waitForSignal:
      type: shipped
      timeoutMs: 60000
    transitions:
      success: flo.Completed
terminals:
  Rejected:
    status: failed
"#,
    );
    let approved = start(&mut c, "review", json!({"amount": 50}));
    let rejected = start(&mut c, "review", json!({"amount": 900}));
    for _ in 0..2 {
        let task = next_task(&mut c, "w1", "review-order");
        let input: Value = serde_json::from_slice(&task.payload).unwrap();
        let outcome = if input["amount"].as_i64() < Some(100) {
            "approved"
        } else {
            "rejected"
        };
        c.complete_task(
            "w1",
            &TaskRef::from(&task),
            br#"{"by":"w1"}"#,
            Some(outcome),
        )
        .unwrap();
    }
    let run = wait_final(&mut c, &rejected);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("Rejected"))
    );
    let run = wait_status(&mut c, &approved, WorkflowRunStatus::Waiting);
    assert_eq!(run.current_step.as_deref(), Some("fulfil"));
    assert_eq!(run.waiting_for.as_deref(), Some("signal shipped"));
    c.signal_workflow(&approved, "shipped", br#"{"tracking":"T-9"}"#)
        .unwrap();
    let run = wait_final(&mut c, &approved);
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    assert_eq!(step_output(&run, "fulfil"), json!({"tracking": "T-9"}));
    let history = events(&mut c, &approved);
    for e in [
        "awaiting_action",
        "action_completed",
        "waiting_for_signal",
        "signal_received",
        "signal_matched",
    ] {
        assert!(
            history.iter().any(|h| h == e),
            "{e} missing from {history:?}"
        );
    }
}

/// Two waits for `approval`, the first ending in `Expired` after 5 s (shared with the
/// engine's tests and its simulation).
const SIGNALS: &str = include_str!("../testdata/workflows/approval-two-waits.yaml");

#[test]
fn signals_before_the_wait_are_kept_and_each_wait_consumes_one() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    create(&mut c, SIGNALS);
    let run_id = start(&mut c, "approval", json!({}));
    c.signal_workflow(&run_id, "approval", br#"{"n":1}"#)
        .unwrap();
    let run = wait_status(&mut c, &run_id, WorkflowRunStatus::Waiting);
    assert_eq!(
        run.current_step.as_deref(),
        Some("second"),
        "the first wait consumed one"
    );
    c.signal_workflow(&run_id, "other", b"{}").unwrap();
    c.signal_workflow(&run_id, "approval", br#"{"n":2}"#)
        .unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    assert_eq!(step_output(&run, "_start"), json!({"n": 1}));
    assert_eq!(step_output(&run, "second"), json!({"n": 2}));
    // Two signals sent before a run waits are both kept, in order.
    let early = start(&mut c, "approval", json!({}));
    let err = c.signal_workflow(&run_id, "approval", b"{}").unwrap_err();
    assert_eq!(
        code(err),
        ErrorCode::Conflict,
        "a finished run takes no signal"
    );
    let _ = early;
    let err = c
        .signal_workflow("wfrun-999", "approval", b"{}")
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::NotFound);
}

#[test]
fn a_signal_timeout_follows_on_timeout_or_times_the_run_out() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    create(&mut c, SIGNALS);
    let run_id = start(&mut c, "approval", json!({}));
    wait_status(&mut c, &run_id, WorkflowRunStatus::Waiting);
    c.advance_clock(5000).unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("Expired"))
    );
    assert!(
        events(&mut c, &run_id)
            .iter()
            .any(|e| e == "signal_timeout")
    );

    create(
        &mut c,
        r#"
kind: Workflow
name: no-target
version: "1"
start:
  waitForSignal:
    type: approval
    timeoutMs: 1000
  transitions:
    success: flo.Completed
"#,
    );
    let run_id = start(&mut c, "no-target", json!({}));
    wait_status(&mut c, &run_id, WorkflowRunStatus::Waiting);
    c.advance_clock(1000).unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::TimedOut);
}

#[test]
fn pending_outcomes_are_polled_until_they_settle_or_time_out() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    user_action(&mut c, "check-status", 60_000, 3, 1000);
    worker(&mut c, "w1", &["check-status"]);
    create(
        &mut c,
        r#"
kind: Workflow
name: poller
version: "1"
start:
  run: "@actions/check-status"
  poll:
    initialDelayMs: 2000
    maxAttempts: 2
    backoff: constant
    baseDelayMs: 500
  transitions:
    success: flo.Completed
    timeout: TooSlow
terminals:
  TooSlow:
    status: failed
"#,
    );
    // Settles on the first poll.
    let settles = start(&mut c, "poller", json!({}));
    let t = next_task(&mut c, "w1", "check-status");
    c.complete_task("w1", &TaskRef::from(&t), b"{}", Some("pending"))
        .unwrap();
    wait_status(&mut c, &settles, WorkflowRunStatus::Waiting);
    c.advance_clock(2000).unwrap();
    let t = next_task(&mut c, "w1", "check-status");
    c.complete_task("w1", &TaskRef::from(&t), br#"{"paid":true}"#, None)
        .unwrap();
    let run = wait_final(&mut c, &settles);
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    assert_eq!(step_output(&run, "_start"), json!({"paid": true}));

    // Still pending after maxAttempts polls: the outcome becomes timeout.
    let slow = start(&mut c, "poller", json!({}));
    for delay in [2000, 500] {
        let t = next_task(&mut c, "w1", "check-status");
        c.complete_task("w1", &TaskRef::from(&t), b"{}", Some("pending"))
            .unwrap();
        wait_status(&mut c, &slow, WorkflowRunStatus::Waiting);
        c.advance_clock(delay).unwrap();
    }
    let t = next_task(&mut c, "w1", "check-status");
    c.complete_task("w1", &TaskRef::from(&t), b"{}", Some("pending"))
        .unwrap();
    let run = wait_final(&mut c, &slow);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("TooSlow"))
    );
    assert_eq!(run.steps[0].executions, 3);
}

#[test]
fn execution_level_outcomes_fall_back_to_execution_failure_then_failure() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    create(
        &mut c,
        r#"
kind: Workflow
name: fallback
version: "1"
start:
  run: "@actions/missing"
  transitions:
    execution_failure: Broken
    failure: flo.Failed
terminals:
  Broken:
    status: failed
"#,
    );
    create(
        &mut c,
        r#"
kind: Workflow
name: fallback2
version: "1"
start:
  run: "@actions/missing"
  transitions:
    failure: Plain
terminals:
  Plain:
    status: failed
"#,
    );
    let id = start(&mut c, "fallback", json!({}));
    let run = wait_final(&mut c, &id);
    assert_eq!(run.terminal.as_deref(), Some("Broken"));
    let id = start(&mut c, "fallback2", json!({}));
    let run = wait_final(&mut c, &id);
    assert_eq!(run.terminal.as_deref(), Some("Plain"));
    let history = events(&mut c, &run.run_id);
    assert!(
        history.iter().any(|e| e == "action_not_found"),
        "{history:?}"
    );
}

#[test]
fn child_workflows_run_to_their_end_and_the_parent_follows() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    wasm_action(&mut c, "pay", &fixed_guest(r#"{"paid":"v1"}"#));
    wasm_action(&mut c, "pay2", &fixed_guest(r#"{"paid":"v2"}"#));
    wasm_action(&mut c, "broken", &failing_guest());
    for (version, action) in [("1.0.0", "pay"), ("2.0.0", "pay2")] {
        create(
            &mut c,
            &format!(
                r#"
kind: Workflow
name: payment-flow
version: "{version}"
start:
  run: "@actions/{action}"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#
            ),
        );
    }
    create(
        &mut c,
        r#"
kind: Workflow
name: parent
version: "1"
start:
  run: "@workflow/payment-flow:1.0.0"
  transitions:
    success: latest
    failure: flo.Failed
steps:
  latest:
    run: "@workflow/payment-flow"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#,
    );
    let id = start(&mut c, "parent", json!({}));
    let run = wait_final(&mut c, &id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(
        step_output(&run, "_start"),
        json!({"paid": "v1"}),
        "the pinned version ran"
    );
    assert_eq!(
        step_output(&run, "latest"),
        json!({"paid": "v2"}),
        "the latest version ran"
    );
    let (children, _) = c.list_workflow_runs("payment-flow", None, None).unwrap();
    assert_eq!(children.len(), 2);
    assert!(
        children
            .iter()
            .all(|r| r.parent_run_id.as_deref() == Some(run.run_id.as_str()))
    );

    create(
        &mut c,
        r#"
kind: Workflow
name: bad-child
version: "1"
start:
  run: "@actions/broken"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#,
    );
    create(
        &mut c,
        r#"
kind: Workflow
name: parent2
version: "1"
start:
  run: "@workflow/bad-child"
  transitions:
    success: flo.Completed
    failure: ChildFailed
terminals:
  ChildFailed:
    status: failed
"#,
    );
    let id = start(&mut c, "parent2", json!({}));
    let run = wait_final(&mut c, &id);
    assert_eq!(run.terminal.as_deref(), Some("ChildFailed"));
}

#[test]
fn cancel_stops_a_waiting_run_and_its_children() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "slow", 60_000, 3, 1000);
    create(
        &mut c,
        r#"
kind: Workflow
name: inner
version: "1"
start:
  run: "@actions/slow"
  transitions:
    success: flo.Completed
"#,
    );
    create(
        &mut c,
        r#"
kind: Workflow
name: outer
version: "1"
start:
  run: "@workflow/inner"
  transitions:
    success: flo.Completed
"#,
    );
    let run_id = start(&mut c, "outer", json!({}));
    wait_status(&mut c, &run_id, WorkflowRunStatus::Waiting);
    let run = c.cancel_workflow(&run_id, Some("customer asked")).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Cancelled);
    let (children, _) = c.list_workflow_runs("inner", None, None).unwrap();
    assert_eq!(children[0].status, WorkflowRunStatus::Cancelled);
    let (tasks, _) = c.list_runs("slow", None, false, None).unwrap();
    assert_eq!(
        tasks[0].status,
        RunStatus::Cancelled,
        "the child's action run is cancelled"
    );
    let history = events(&mut c, &run_id);
    assert_eq!(
        history.last().map(String::as_str),
        Some("workflow_cancelled")
    );
    let err = c.cancel_workflow(&run_id, None).unwrap_err();
    assert_eq!(code(err), ErrorCode::Conflict);
}

#[test]
fn disable_blocks_new_starts_and_idempotency_keys_dedup() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    create(&mut c, SIGNALS);
    let running = start(&mut c, "approval", json!({}));
    c.set_workflow_enabled("approval", false).unwrap();
    let err = c
        .start_workflow("approval", b"{}", StartOptions::default())
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::Conflict);
    c.signal_workflow(&running, "approval", b"{}").unwrap();
    c.signal_workflow(&running, "approval", b"{}").unwrap();
    assert_eq!(
        wait_final(&mut c, &running).status,
        WorkflowRunStatus::Completed,
        "running runs continue"
    );
    c.set_workflow_enabled("approval", true).unwrap();

    let required = SIGNALS
        .replace("name: approval", "name: keyed")
        .replace("version: \"1\"", "version: \"1\"\nidempotency: required");
    create(&mut c, &required);
    let err = c
        .start_workflow("keyed", b"{}", StartOptions::default())
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    let opts = || StartOptions {
        idempotency_key: Some("order-123".into()),
        ..Default::default()
    };
    let a = c.start_workflow("keyed", b"{}", opts()).unwrap();
    let b = c.start_workflow("keyed", b"{}", opts()).unwrap();
    assert_eq!(a, b);
    let (runs, _) = c.list_workflow_runs("keyed", None, None).unwrap();
    assert_eq!(runs.len(), 1);
}

#[test]
fn definitions_are_validated_and_versions_coexist() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let err = c
        .create_workflow("kind: Workflow\nname: bad\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: nowhere\n")
        .unwrap_err();
    let Error::Server(e) = err else { panic!() };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("E301"), "{}", e.message);
    // Found by fuzzing: a mapping path ending inside a `\u` escape made the JSONPath
    // parser panic, and the panic stopped the server.
    let err = c
        .create_workflow("kind: Workflow\nname: bad\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  inputMapping: '$.input[\"\\u'\n  transitions:\n    success: flo.Completed\n")
        .unwrap_err();
    let Error::Server(e) = err else { panic!() };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("escape"), "{}", e.message);
    create(&mut c, SIGNALS);
    let (_, _, created, _) = c.create_workflow(SIGNALS).unwrap();
    assert!(!created, "the same definition twice is a no-op");
    let v2 = SIGNALS.replace("version: \"1\"", "version: \"2\"");
    create(&mut c, &v2);
    let info = c.workflow("approval", None).unwrap();
    assert_eq!((info.version.as_str(), info.versions.len()), ("2", 2));
    assert_eq!(c.workflow("approval", Some("1")).unwrap().yaml, SIGNALS);
    let err = c
        .create_workflow(&v2.replace("type: approval", "type: other"))
        .unwrap_err();
    assert_eq!(
        code(err),
        ErrorCode::Conflict,
        "a version's definition cannot change"
    );
    let v1_run = c
        .start_workflow(
            "approval",
            b"{}",
            StartOptions {
                version: Some("1".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(c.workflow_run(&v1_run).unwrap().version, "1");
    assert_eq!(c.list_workflows().unwrap().len(), 1);
}

#[test]
fn runs_resume_after_kill_9_mid_wait_mid_worker_step_and_mid_retry() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    create(&mut c, SIGNALS);
    user_action(&mut c, "manual", 60_000, 3, 1000);
    wasm_action(&mut c, "broken", &failing_guest());
    create(
        &mut c,
        r#"
kind: Workflow
name: manual-step
version: "1"
start:
  run: "@actions/manual"
  transitions:
    success: flo.Completed
"#,
    );
    create(
        &mut c,
        r#"
kind: Workflow
name: retrying
version: "1"
start:
  run: "@actions/broken"
  retry:
    max_attempts: 2
    backoff: constant
    initial_delay_ms: 1500
  transitions:
    success: flo.Completed
    failure: Gave-Up
terminals:
  Gave-Up:
    status: failed
"#,
    );
    // A finished run with an idempotency key, and a disabled workflow.
    wasm_action(&mut c, "validate-order", &fixed_guest(r#"{"valid":true}"#));
    wasm_action(&mut c, "charge-payment", &echo_guest());
    wasm_action(&mut c, "create-shipment", &echo_guest());
    create(&mut c, PROCESS_ORDER);
    let keyed = StartOptions {
        idempotency_key: Some("order-9".into()),
        ..Default::default()
    };
    let done = c
        .start_workflow("process-order", br#"{"amount": 9}"#, keyed.clone())
        .unwrap();
    assert_eq!(
        wait_final(&mut c, &done).status,
        WorkflowRunStatus::Completed
    );
    c.set_workflow_enabled("manual-step", false).unwrap();

    let waiting = start(&mut c, "approval", json!({}));
    c.signal_workflow(&waiting, "approval", br#"{"n":1}"#)
        .unwrap();
    c.set_workflow_enabled("manual-step", true).unwrap();
    let manual = start(&mut c, "manual-step", json!({"job": 7}));
    c.set_workflow_enabled("manual-step", false).unwrap();
    let retrying = start(&mut c, "retrying", json!({}));
    wait_status(&mut c, &waiting, WorkflowRunStatus::Waiting);
    // No worker has its step's task: pending.
    wait_status(&mut c, &manual, WorkflowRunStatus::Pending);
    wait_status(&mut c, &retrying, WorkflowRunStatus::Waiting);
    server.kill9();

    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    // The finished run: same id for its key, nothing executed again.
    assert_eq!(
        c.start_workflow("process-order", br#"{"amount": 9}"#, keyed)
            .unwrap(),
        done
    );
    let run = c.workflow_run(&done).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    assert!(run.steps.iter().all(|s| s.executions == 1), "{run:?}");
    // WebAssembly steps execute without action runs: none was made, before or after.
    for action in ["validate-order", "charge-payment", "create-shipment"] {
        let (runs, _) = c.list_runs(action, None, false, None).unwrap();
        assert!(runs.is_empty(), "{action}: {runs:?}");
    }
    assert!(!c.workflow("manual-step", None).unwrap().enabled);
    let run = c.workflow_run(&waiting).unwrap();
    assert_eq!(
        (run.status, run.current_step.as_deref()),
        (WorkflowRunStatus::Waiting, Some("second"))
    );
    c.signal_workflow(&waiting, "approval", br#"{"n":2}"#)
        .unwrap();
    assert_eq!(
        wait_final(&mut c, &waiting).status,
        WorkflowRunStatus::Completed
    );

    worker(&mut c, "w-after", &["manual"]);
    let task = next_task(&mut c, "w-after", "manual");
    assert_eq!(
        serde_json::from_slice::<Value>(&task.payload).unwrap(),
        json!({"job": 7})
    );
    c.complete_task("w-after", &TaskRef::from(&task), br#"{"done":true}"#, None)
        .unwrap();
    let run = wait_final(&mut c, &manual);
    assert_eq!(run.status, WorkflowRunStatus::Completed);

    let run = wait_final(&mut c, &retrying);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("Gave-Up"))
    );
    assert_eq!(
        run.steps[0].executions, 2,
        "the retry timer survived the crash"
    );
    let _ = FailMode::Retry;
}

#[test]
fn a_burst_of_pipelined_runs_all_complete() {
    // Regression: each WASM completion started the next queued execution inline (glommio
    // polls a spawned task at once), so a deep queue of steps overflowed the shard's stack.
    const RUNS: usize = 3000;
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    wasm_action(&mut c, "validate-order", &fixed_guest(r#"{"valid":true}"#));
    wasm_action(&mut c, "charge-payment", &echo_guest());
    wasm_action(&mut c, "create-shipment", &echo_guest());
    create(&mut c, PROCESS_ORDER);
    let mux = MuxClient::connect(server.addr_string()).unwrap();
    let pending: Vec<_> = (0..RUNS)
        .map(|i| {
            mux.send(Op::WorkflowStart(WorkflowStartSpec {
                namespace: "default".into(),
                name: "process-order".into(),
                version: None,
                input: format!(r#"{{"amount": {i}}}"#).into_bytes(),
                idempotency_key: None,
                wait_ms: Some(60_000),
                run_id: None,
                group: None,
                webhook: None,
            }))
            .unwrap()
        })
        .collect();
    let mut last = String::new();
    for (i, p) in pending.into_iter().enumerate() {
        match p.wait() {
            Ok(Reply::WorkflowRun(run)) => {
                assert_eq!(run.status, WorkflowRunStatus::Completed, "run {i}: {run:?}");
                assert_eq!(step_output(&run, "charge")["amount"], json!(i));
                last = run.run_id;
            }
            other => panic!("run {i}: {other:?}"),
        }
    }
    assert_eq!(
        c.workflow_run(&last).unwrap().status,
        WorkflowRunStatus::Completed,
        "the server still serves"
    );
}

/// Regression: a parent whose `failure` transition loops back to a step running a child
/// that always fails (its only step runs an unregistered action) used to recurse
/// advance → child → parent → … on the shard's stack until every shard died. Now the work
/// is queued, the loop is caught by the step budget, the parent ends `failed` with the
/// reason, and the server keeps serving — also after a restart.
#[test]
fn a_parent_looping_through_a_failing_child_fails_and_the_server_stays_up() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    create(
        &mut c,
        "kind: Workflow\nname: loop-child\nversion: \"1\"\nstart:\n  run: \"@actions/not-registered\"\n  transitions:\n    success: flo.Completed\n",
    );
    create(
        &mut c,
        "kind: Workflow\nname: loop-parent\nversion: \"1\"\nstart:\n  run: \"@workflow/loop-child\"\n  transitions:\n    success: flo.Completed\n    failure: again\nsteps:\n  again:\n    run: \"@workflow/loop-child\"\n    transitions:\n      success: flo.Completed\n      failure: again\n",
    );
    let run_id = start(&mut c, "loop-parent", json!({}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("more than 256 steps"), "{run:?}");
    // The server still answers, on every shard.
    c.kv_put("still-up", b"yes", Default::default()).unwrap();
    assert_eq!(
        c.kv_get("still-up").unwrap().map(|e| e.value),
        Some(b"yes".to_vec())
    );

    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let run = c.workflow_run(&run_id).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    c.kv_put("after-restart", b"yes", Default::default())
        .unwrap();
}

/// Finished runs leave memory: their final documents are archived in the log and status,
/// history, lists, idempotency and conflicts are answered from there, also after a restart.
#[test]
fn finished_runs_are_archived_and_read_back_from_the_log_after_a_restart() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    wasm_action(&mut c, "validate-order", &fixed_guest(r#"{"valid":true}"#));
    wasm_action(&mut c, "charge-payment", &echo_guest());
    wasm_action(
        &mut c,
        "create-shipment",
        &fixed_guest(r#"{"shipment":"S-1"}"#),
    );
    create(&mut c, PROCESS_ORDER);
    const RUNS: usize = 12;
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let opts = StartOptions {
            idempotency_key: (i == 0).then(|| "order-0".to_string()),
            ..StartOptions::default()
        };
        let input = json!({"order_id": format!("ORD-{i}"), "amount": i});
        let id = c
            .start_workflow("process-order", input.to_string().as_bytes(), opts)
            .unwrap();
        ids.push(id);
    }
    for id in &ids {
        assert_eq!(wait_final(&mut c, id).status, WorkflowRunStatus::Completed);
    }
    // The steps executed without action runs; one run of the action, invoked.
    let (actions, _) = c
        .list_runs("charge-payment", None, false, Some(100))
        .unwrap();
    assert!(actions.is_empty(), "{actions:?}");
    let action_run = c
        .invoke("charge-payment", b"{}", Default::default())
        .unwrap();
    let done = c.wait_run(&action_run, 5_000).unwrap();
    assert_eq!(done.status, RunStatus::Completed);

    let check = |c: &mut Client, when: &str| {
        // Nothing finished is left in memory: everything is in the run index.
        assert!(
            wait_until(Duration::from_secs(5), || {
                let status = c.status().unwrap();
                let live: u64 = status.shards.iter().map(|s| s.runs + s.workflow_runs).sum();
                let archived: u64 = status.shards.iter().map(|s| s.archived_runs).sum();
                live == 0 && archived == (RUNS + 1) as u64
            }),
            "{when}: {:?}",
            c.status().unwrap()
        );
        for (i, id) in ids.iter().enumerate() {
            let run = c.workflow_run(id).unwrap();
            assert_eq!(run.status, WorkflowRunStatus::Completed, "{when}: {run:?}");
            assert_eq!(
                step_output(&run, "charge"),
                json!({"amount": i, "valid": true, "run": id}),
                "{when}"
            );
            let history = events(c, id);
            assert_eq!(
                history.first().map(String::as_str),
                Some("workflow_started")
            );
            assert_eq!(
                history.last().map(String::as_str),
                Some("workflow_completed"),
                "{when}"
            );
            // A wait on a finished run answers at once.
            assert_eq!(
                c.wait_workflow(id, 5_000).unwrap().status,
                WorkflowRunStatus::Completed
            );
        }
        let (runs, truncated) = c
            .list_workflow_runs("process-order", Some(WorkflowRunStatus::Completed), Some(5))
            .unwrap();
        assert_eq!((runs.len(), truncated), (5, true), "{when}");
        let (runs, truncated) = c
            .list_workflow_runs("process-order", None, Some(100))
            .unwrap();
        assert_eq!((runs.len(), truncated), (RUNS, false), "{when}");
        let (runs, _) = c
            .list_workflow_runs("process-order", Some(WorkflowRunStatus::Failed), None)
            .unwrap();
        assert!(runs.is_empty(), "{when}: {runs:?}");
        let run = c.run(&action_run).unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{when}");
        // Changes to a finished run conflict; an idempotent repeat finds it.
        let e = c.cancel_workflow(&ids[1], None).unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "{when}");
        let e = c.signal_workflow(&ids[1], "go", b"{}").unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "{when}");
        let e = c.cancel_run(&action_run).unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "{when}");
        let opts = StartOptions {
            idempotency_key: Some("order-0".into()),
            ..StartOptions::default()
        };
        let again = c.start_workflow("process-order", b"{}", opts).unwrap();
        assert_eq!(again, ids[0], "{when}");
    };
    check(&mut c, "live");
    drop(c);
    server.stop();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    check(&mut c, "after a restart");
}

/// `--retention`: finished runs older than the window are forgotten (status says they
/// expired, their idempotency keys are free again); runs still in flight are kept however
/// old; a restart forgets nothing more and brings nothing back.
#[test]
fn retention_forgets_finished_runs_and_keeps_runs_in_flight() {
    let dir = temp_dir();
    let args = ["--test-clock", "--retention", "60s"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    wasm_action(&mut c, "echo", &echo_guest());
    user_action(&mut c, "manual", 3_600_000, 0, 1000);
    let opts = flo::InvokeOptions {
        idempotency_key: Some("k1".into()),
        ..Default::default()
    };
    let done = c.invoke("echo", b"{\"n\":1}", opts.clone()).unwrap();
    assert_eq!(
        c.wait_run(&done, 5_000).unwrap().status,
        RunStatus::Completed
    );
    let plain = c.invoke("echo", b"{\"n\":2}", Default::default()).unwrap();
    assert_eq!(
        c.wait_run(&plain, 5_000).unwrap().status,
        RunStatus::Completed
    );
    let waiting = c.invoke("manual", b"{}", Default::default()).unwrap();
    let archived = |c: &mut Client| -> u64 {
        c.status()
            .unwrap()
            .shards
            .iter()
            .map(|s| s.archived_runs)
            .sum()
    };
    assert!(wait_until(Duration::from_secs(5), || archived(&mut c) == 2));

    // Inside the window: still there.
    c.advance_clock(30_000).unwrap();
    assert_eq!(c.run(&plain).unwrap().status, RunStatus::Completed);
    // Past it: forgotten.
    c.advance_clock(32_000).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || archived(&mut c) == 0),
        "{:?}",
        c.status()
    );
    let e = c.run(&plain).unwrap_err();
    assert!(e.to_string().contains("retention window"), "{e}");
    assert_eq!(code(e), ErrorCode::NotFound);
    // The run in flight is as old, and kept.
    assert_eq!(c.run(&waiting).unwrap().status, RunStatus::Pending);
    // The idempotency key expired with its run: the same key starts a new run.
    let again = c.invoke("echo", b"{\"n\":3}", opts.clone()).unwrap();
    assert_eq!(again, done);
    let run = c.wait_run(&again, 5_000).unwrap();
    assert_eq!(
        run.input,
        b"{\"n\":3}".to_vec(),
        "a new run, not the forgotten one"
    );

    drop(c);
    server.stop();
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert_eq!(code(c.run(&plain).unwrap_err()), ErrorCode::NotFound);
    assert_eq!(c.run(&waiting).unwrap().status, RunStatus::Pending);
    assert_eq!(c.run(&again).unwrap().input, b"{\"n\":3}".to_vec());
}

/// A worker's non-retryable failure (the SDK's `NonRetryableError`, `flo worker fail
/// --non-retryable`) routes the run through the step's `failure` transition at once: the
/// step's `retry:` policy does not run it again. An ordinary failure is retried (spec
/// `flo-workers.md`, "NonRetryableError").
#[test]
fn a_non_retryable_failure_skips_the_steps_retries_and_takes_the_failure_transition() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    user_action(&mut c, "check-order", 60_000, 3, 1000);
    worker(&mut c, "w1", &["check-order"]);
    create(
        &mut c,
        r#"
kind: Workflow
name: checked
version: "1"
start:
  run: "@actions/check-order"
  retry:
    max_attempts: 3
    backoff: constant
    initial_delay_ms: 10
  transitions:
    success: flo.Completed
    failure: Rejected
terminals:
  Rejected:
    status: failed
"#,
    );
    let rejected = |c: &mut Client, run_id: &str| {
        let run = wait_final(c, run_id);
        assert_eq!(
            (run.status, run.terminal.as_deref()),
            (WorkflowRunStatus::Failed, Some("Rejected")),
            "{run:?}"
        );
        assert_eq!(run.steps[0].executions, 1, "not retried: {run:?}");
        let history = events(c, run_id);
        assert!(
            !history.iter().any(|e| e == "step_retry"),
            "no retry: {history:?}"
        );
    };

    // Through the SDK.
    let sdk = start(&mut c, "checked", json!({"order": 1}));
    let task = next_task(&mut c, "w1", "check-order");
    let run = c
        .fail_task(
            "w1",
            &TaskRef::from(&task),
            "missing orderId",
            FailMode::NonRetryable,
        )
        .unwrap();
    assert!(!run.dead_lettered, "{run:?}");
    rejected(&mut c, &sdk);
    assert!(
        c.workflow_run(&sdk)
            .unwrap()
            .error
            .is_some_and(|e| e.contains("missing orderId"))
    );

    // Through the CLI.
    let cli = start(&mut c, "checked", json!({"order": 2}));
    let task = next_task(&mut c, "w1", "check-order");
    common::cli_ok(
        &addr,
        &[
            "worker",
            "fail",
            &task.task_id,
            "--worker-id",
            "w1",
            "--action",
            "check-order",
            "--error",
            "over the limit",
            "--non-retryable",
        ],
    );
    rejected(&mut c, &cli);

    // An ordinary failure is retried by the step's policy.
    let retried = start(&mut c, "checked", json!({"order": 3}));
    let task = next_task(&mut c, "w1", "check-order");
    c.fail_task("w1", &TaskRef::from(&task), "flaky", FailMode::Retry)
        .unwrap();
    let task = next_task(&mut c, "w1", "check-order");
    c.complete_task("w1", &TaskRef::from(&task), b"{}", None)
        .unwrap();
    let run = wait_final(&mut c, &retried);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(run.steps[0].executions, 2);
    assert!(events(&mut c, &retried).iter().any(|e| e == "step_retry"));
}

/// A loop through action steps is bounded: past `--max-run-steps` steps in all the run
/// fails saying so, instead of running forever. The count is the run's durable state: steps
/// executed before a crash count after it.
#[test]
fn a_run_looping_through_action_steps_fails_past_max_run_steps_even_across_a_restart() {
    let dir = temp_dir();
    let args = ["--max-run-steps", "5"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    wasm_action(&mut c, "spin", &echo_guest());
    user_action(&mut c, "tick", 60_000, 0, 1000);
    worker(&mut c, "w1", &["tick"]);
    let looping = |name: &str, action: &str| {
        format!(
            "kind: Workflow\nname: {name}\nversion: \"1\"\nstart:\n  run: \"@actions/{action}\"\n  \
             transitions:\n    success: ping\n    failure: flo.Failed\nsteps:\n  ping:\n    \
             run: \"@actions/{action}\"\n    transitions:\n      success: pong\n      \
             failure: flo.Failed\n  pong:\n    run: \"@actions/{action}\"\n    \
             transitions:\n      success: ping\n      failure: flo.Failed\n"
        )
    };
    create(&mut c, &looping("spinning", "spin"));
    create(&mut c, &looping("ticking", "tick"));

    // WebAssembly steps loop on their own: stopped at the bound.
    let spinning = start(&mut c, "spinning", json!({}));
    let run = wait_final(&mut c, &spinning);
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("executed 5 steps") && error.contains("--max-run-steps"),
        "{error}"
    );
    let history = events(&mut c, &spinning);
    let spins = history.iter().filter(|e| *e == "action_completed").count();
    assert_eq!(
        spins, 5,
        "five executions, then the run failed: {history:?}"
    );

    // Worker steps: three before a crash, two after it, then the bound.
    let ticking = start(&mut c, "ticking", json!({}));
    for _ in 0..3 {
        let task = next_task(&mut c, "w1", "tick");
        c.complete_task("w1", &TaskRef::from(&task), b"{}", None)
            .unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || {
        let run = c.workflow_run(&ticking).unwrap();
        run.steps.iter().map(|s| s.executions).sum::<u32>() == 3
    }));
    drop(c);
    server.kill9();

    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    worker(&mut c, "w1", &["tick"]);
    for _ in 0..2 {
        let task = next_task(&mut c, "w1", "tick");
        c.complete_task("w1", &TaskRef::from(&task), b"{}", None)
            .unwrap();
    }
    let run = wait_final(&mut c, &ticking);
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    assert!(
        run.error
            .as_deref()
            .is_some_and(|e| e.contains("executed 5 steps")),
        "{run:?}"
    );
    assert!(
        c.await_tasks("w1", &["tick"], 1, 300).unwrap().is_empty(),
        "no sixth step"
    );
    let (ticks, _) = c.list_runs("tick", None, false, None).unwrap();
    assert_eq!(ticks.len(), 5);
}

/// A run whose step waits for a worker to take its task, or for a WebAssembly slot, is
/// `pending` (spec: "queued, waiting for a worker (or WASM execution)"); `waiting` once a
/// worker holds the task, `running` while a guest executes it. Lists filter on it.
#[test]
fn a_run_waiting_for_a_worker_or_a_wasm_slot_is_pending() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--max-concurrent-executions", "1"]);
    let mut c = server.client();
    user_action(&mut c, "review", 60_000, 0, 1000);
    wasm_action(&mut c, "quick", &echo_guest());
    let hog = ActionSpec {
        namespace: String::new(),
        name: "hog".into(),
        kind: ActionKind::Wasm,
        wasm: Some(spin_guest().into_bytes()),
        timeout_ms: Some(600_000),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    };
    c.register_action(hog).unwrap();
    let one_step = |name: &str, action: &str| {
        format!(
            "kind: Workflow\nname: {name}\nversion: \"1\"\nstart:\n  run: \"@actions/{action}\"\n  \
             transitions:\n    success: flo.Completed\n"
        )
    };
    create(&mut c, &one_step("manual", "review"));
    create(&mut c, &one_step("inline", "quick"));

    // A worker step: pending until a worker takes the task, then waiting.
    let manual = start(&mut c, "manual", json!({}));
    let run = wait_status(&mut c, &manual, WorkflowRunStatus::Pending);
    assert!(run.waiting_for.is_some_and(|w| w.starts_with("action run")));
    let (listed, _) = c
        .list_workflow_runs("manual", Some(WorkflowRunStatus::Pending), None)
        .unwrap();
    assert_eq!(listed.len(), 1);
    worker(&mut c, "w1", &["review"]);
    let task = next_task(&mut c, "w1", "review");
    wait_status(&mut c, &manual, WorkflowRunStatus::Waiting);
    c.complete_task("w1", &TaskRef::from(&task), b"{}", None)
        .unwrap();
    assert_eq!(
        wait_final(&mut c, &manual).status,
        WorkflowRunStatus::Completed
    );

    // A WebAssembly step behind the shard's one slot, which a spinning guest holds (runs
    // started without an id live on the shard of their connection: both on `c`'s).
    let spinning = c.invoke("hog", b"{}", Default::default()).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        c.run(&spinning).unwrap().status == RunStatus::Running
    }));
    let inline = start(&mut c, "inline", json!({"n": 1}));
    wait_status(&mut c, &inline, WorkflowRunStatus::Pending);
    c.cancel_run(&spinning).unwrap();
    assert_eq!(
        wait_final(&mut c, &inline).status,
        WorkflowRunStatus::Completed
    );
}
