//! Per-run state end to end: a run's state starts from the definition's defaults and its
//! input, takes each step's output (as it is, as `outputMapping` selects, or not with
//! `skipOutputMapping`), is read by later steps' `inputMapping` as `$.state`, is shown by
//! `flo workflow state`, survives kill -9, and a step whose output would take it past the
//! limit fails the run with the reason.

mod common;

use common::{TestServer, cli_json, fixed_wasm_action, temp_dir};
use flo::protocol::WorkflowRunStatus;
use flo::{ActionResult, ActionWorker, StartOptions};
use serde_json::{Value, json};

const FLOW: &str = r#"kind: Workflow
name: stateful
version: "1"
state:
  count: 0
  region: eu
start:
  run: "@actions/price"
  transitions:
    success: total
    failure: flo.Failed
steps:
  total:
    run: "@actions/sum"
    inputMapping: '{"price": "$.state.price", "count": "$.state.count"}'
    outputMapping: '{"total": "$.output.sum", "priced_at": "$.state.price"}'
    transitions:
      success: audit
      failure: flo.Failed
  audit:
    run: "@actions/audit"
    skipOutputMapping: true
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#;

fn state_of(c: &mut flo::Client, run_id: &str) -> Value {
    let run = c.workflow_run(run_id).unwrap();
    serde_json::from_slice(run.state.as_deref().expect("a state")).unwrap()
}

#[test]
fn state_takes_outputs_feeds_mappings_and_survives_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "price", r#"{"price": 7, "currency": "EUR"}"#);
    for a in ["sum", "audit"] {
        common::user_action(&mut c, a, 60_000, 0, 100);
    }
    c.create_workflow(FLOW).unwrap();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("state")
        .block_ms(100)
        .action("sum", |ctx| {
            let input: Value = ctx.json()?;
            // `$.state` in the input mapping: the first step's output and the run's input.
            assert_eq!(input, json!({"price": 7, "count": 3}));
            ActionResult::json(&json!({"sum": 21, "noise": true}))
        })
        .action("audit", |_| ActionResult::json(&json!({"audited": true})))
        .spawn()
        .unwrap();
    let run_id = c
        .start_workflow(
            "stateful",
            json!({"count": 3, "order": "o-1"}).to_string().as_bytes(),
            StartOptions::default(),
        )
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let want = json!({
        "count": 3, "region": "eu", "order": "o-1",     // defaults, then the input
        "price": 7, "currency": "EUR",                   // the first output, as it is
        "total": 21, "priced_at": 7,                     // the second, mapped
    }); // the third, skipped
    assert_eq!(state_of(&mut c, &run_id), want);
    let doc = cli_json(&server.addr_string(), &["workflow", "state", &run_id]);
    assert_eq!(doc["state"], want, "{doc}");
    assert_eq!(doc["steps"].as_array().unwrap().len(), 3, "{doc}");
    worker.stop();

    // The state is the log's: the same after kill -9 (the run archived or replayed).
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(state_of(&mut c, &run_id), want);
}

#[test]
fn a_step_that_would_overflow_the_state_fails_the_run_with_the_reason() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    common::user_action(&mut c, "big", 60_000, 0, 100);
    c.create_workflow(
        "kind: Workflow\nname: big\nversion: \"1\"\nstart:\n  run: \"@actions/big\"\n  transitions:\n    success: flo.Completed\n    failure: flo.Failed\n",
    )
    .unwrap();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("big")
        .block_ms(100)
        .action("big", |_| {
            ActionResult::json(&json!({"blob": "x".repeat(1_100_000)}))
        })
        .spawn()
        .unwrap();
    let run_id = c
        .start_workflow("big", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("run's state") && error.contains("1048576"),
        "{error}"
    );
    // The server goes on serving.
    assert_eq!(state_of(&mut c, &run_id), json!({}));
    worker.stop();
}

const APPROVAL: &str = r#"kind: Workflow
name: approval
version: "1"
start:
  run: "@actions/prepare"
  transitions:
    success: approve
steps:
  approve:
    waitForState:
      timeoutMs: 3600000
      onTimeout: reminded
    transitions:
      success: ship
  ship:
    run: "@actions/ship"
    inputMapping: '{"approved": "$.state.approved", "by": "$.state.by"}'
    transitions:
      success: flo.Completed
      failure: flo.Failed
  reminded:
    pass: true
    transitions:
      success: flo.Completed
"#;

fn waiting_for_state(c: &mut flo::Client, run_id: &str) -> bool {
    common::wait_until(std::time::Duration::from_secs(20), || {
        let run = c.workflow_run(run_id).unwrap();
        run.status == WorkflowRunStatus::Waiting
            && run
                .waiting_for
                .as_deref()
                .is_some_and(|w| w.contains("state update"))
    })
}

#[test]
fn update_state_merges_set_state_replaces_and_continue_moves_a_waiting_run_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    fixed_wasm_action(&mut c, "prepare", r#"{"prepared": true}"#);
    common::user_action(&mut c, "ship", 60_000, 0, 100);
    c.create_workflow(APPROVAL).unwrap();
    let run_id = c
        .start_workflow("approval", br#"{"order": "o-7"}"#, StartOptions::default())
        .unwrap();
    assert!(waiting_for_state(&mut c, &run_id));

    // Without --continue: the state changes, the run keeps waiting.
    let doc = cli_json(
        &addr,
        &["workflow", "update-state", &run_id, r#"{"count": 5}"#],
    );
    assert_eq!(doc["status"], "waiting", "{doc}");
    assert_eq!(doc["next_step"], "approve", "{doc}");
    assert_eq!(doc["previous_step"], "_start", "{doc}"); // `start:` is `_start` in runs
    let want = json!({"order": "o-7", "prepared": true, "count": 5});
    assert_eq!(doc["state"], want, "{doc}");

    // The update is durable: the run still waits, with it, after kill -9.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    assert!(waiting_for_state(&mut c, &run_id));
    assert_eq!(state_of(&mut c, &run_id), want);

    // Bad input: not JSON, not an object, a user's signal of the reserved type.
    let (status, _, stderr) = common::run_cli(&addr, &["workflow", "update-state", &run_id, "[1]"]);
    assert!(
        !status.success() && stderr.contains("JSON object"),
        "{stderr}"
    );
    let err = c
        .update_workflow_state(&run_id, b"nope", false)
        .unwrap_err();
    assert!(err.to_string().contains("must be JSON"), "{err}");
    let err = c.signal_workflow(&run_id, "flo.state", b"{}").unwrap_err();
    assert!(err.to_string().contains("server's own"), "{err}");
    assert_eq!(state_of(&mut c, &run_id), want);

    let worker = ActionWorker::builder(server.addr)
        .worker_id("ship")
        .block_ms(100)
        .action("ship", |ctx| {
            let input: Value = ctx.json()?;
            ActionResult::json(&json!({"shipped": input}))
        })
        .spawn()
        .unwrap();
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "update-state",
            &run_id,
            r#"{"approved": true, "by": "ann"}"#,
            "--continue",
        ],
    );
    assert_ne!(doc["status"], "waiting", "{doc}");
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let state = state_of(&mut c, &run_id);
    assert_eq!(
        state["shipped"],
        json!({"approved": true, "by": "ann"}),
        "{state}"
    );
    assert_eq!(state["count"], 5, "{state}");
    let history = c.workflow_history(&run_id).unwrap();
    let updates = history
        .iter()
        .filter(|e| e.event_type.as_str() == "state_updated")
        .count();
    assert_eq!(updates, 2, "{history:?}");

    // A final run's state no longer changes.
    let (status, _, stderr) = common::run_cli(
        &addr,
        &["workflow", "update-state", &run_id, r#"{"late": 1}"#],
    );
    assert!(
        !status.success() && stderr.contains("already completed"),
        "{stderr}"
    );

    // set-state replaces; --continue on a run not waiting in waitForState changes nothing.
    let second = c
        .start_workflow("approval", br#"{"order": "o-8"}"#, StartOptions::default())
        .unwrap();
    assert!(waiting_for_state(&mut c, &second));
    let run = c
        .set_workflow_state(&second, br#"{"only": 1}"#, false)
        .unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Waiting);
    assert_eq!(state_of(&mut c, &second), json!({"only": 1}));
    c.cancel_workflow(&second, None).unwrap();
    let err = c
        .update_workflow_state(&second, br#"{"x": 1}"#, true)
        .unwrap_err();
    assert!(err.to_string().contains("already cancelled"), "{err}");
    worker.stop();
}

#[test]
fn a_wait_for_state_that_times_out_takes_on_timeout() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "prepare", r#"{"prepared": true}"#);
    common::user_action(&mut c, "ship", 60_000, 0, 100);
    c.create_workflow(APPROVAL).unwrap();
    let run_id = c
        .start_workflow("approval", b"{}", StartOptions::default())
        .unwrap();
    assert!(waiting_for_state(&mut c, &run_id));
    c.advance_clock(3_600_001).unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let reminded = run.steps.iter().any(|s| s.name == "reminded");
    assert!(reminded, "{run:?}");
}

#[test]
fn continue_is_refused_with_nothing_changed_when_the_run_does_not_wait_for_state() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    common::user_action(&mut c, "ship", 60_000, 0, 100);
    c.create_workflow(
        "kind: Workflow\nname: busy\nversion: \"1\"\nstart:\n  run: \"@actions/ship\"\n  transitions:\n    success: flo.Completed\n",
    )
    .unwrap();
    let run_id = c
        .start_workflow("busy", br#"{"a": 1}"#, StartOptions::default())
        .unwrap();
    let err = c
        .update_workflow_state(&run_id, br#"{"b": 2}"#, true)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not waiting in a `waitForState` step"),
        "{err}"
    );
    assert_eq!(state_of(&mut c, &run_id), json!({"a": 1}));
    // Validation: a step waits for one thing; `flo.` signal types are the server's.
    let both = "kind: Workflow\nname: both\nversion: \"1\"\nstart:\n  waitForState: true\n  waitForSignal: {type: go}\n  transitions:\n    success: flo.Completed\n";
    let err = c.create_workflow(both).unwrap_err().to_string();
    assert!(err.contains("E107"), "{err}");
    let reserved = "kind: Workflow\nname: reserved\nversion: \"1\"\nstart:\n  waitForSignal: {type: flo.go}\n  transitions:\n    success: flo.Completed\n";
    let err = c.create_workflow(reserved).unwrap_err().to_string();
    assert!(err.contains("E503"), "{err}");
}

const HANDOFF: &str = r#"kind: Workflow
name: handoff
version: "1"
start:
  run: "@actions/stamp"
  skipOutputMapping: true
  transitions:
    success: tally
steps:
  tally:
    run: "@actions/tally"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#;

#[test]
fn guests_and_workers_read_the_run_state_and_set_fields_with_their_completion() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let guest = flo_testkit::guests::state_guest(r#"{"stamped": true, "count": 10}"#);
    common::guest_action(&mut c, "stamp", guest, None);
    common::user_action(&mut c, "tally", 60_000, 0, 100);
    c.create_workflow(HANDOFF).unwrap();
    let input = json!({"order": "o-1", "count": 1});
    let run_id = c
        .start_workflow(
            "handoff",
            input.to_string().as_bytes(),
            StartOptions::default(),
        )
        .unwrap();
    // The guest's step is done (it read the state, set two fields); the worker's waits.
    common::wait_until(std::time::Duration::from_secs(20), || {
        c.workflow_run(&run_id).unwrap().current_step.as_deref() == Some("tally")
    });
    let run = c.workflow_run(&run_id).unwrap();
    let read: Value = serde_json::from_slice(run.steps[0].output.as_deref().unwrap()).unwrap();
    assert_eq!(read, input, "the guest read the state the run started with");
    let stamped = json!({"order": "o-1", "count": 10, "stamped": true});
    assert_eq!(state_of(&mut c, &run_id), stamped);

    // The guest's fields came with its step's completion: both or neither after kill -9.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(state_of(&mut c, &run_id), stamped);

    // A worker sees the state with its task and sets fields beside its output; bad
    // state is refused with the task still leased.
    c.register_worker(flo::protocol::WorkerSpec {
        namespace: String::new(),
        worker_id: "raw".into(),
        worker_type: flo::protocol::WorkerType::Action,
        max_concurrency: None,
        processes: vec!["tally".into()],
        metadata: None,
        machine_id: None,
        labels: None,
    })
    .unwrap();
    let tasks = c.await_tasks("raw", &["tally"], 1, 5_000).unwrap();
    let task = &tasks[0];
    let seen: Value = serde_json::from_slice(task.state.as_deref().unwrap()).unwrap();
    assert_eq!(seen, stamped);
    let task_ref = flo::TaskRef::from(task);
    let err = c
        .complete_task_with_state("raw", &task_ref, b"{}", None, Some(b"[1]"))
        .unwrap_err();
    assert!(err.to_string().contains("JSON object"), "{err}");
    let patch = br#"{"count": 11, "by": "raw"}"#;
    c.complete_task_with_state("raw", &task_ref, br#"{"tallied": 1}"#, None, Some(patch))
        .unwrap();
    let run = c.wait_workflow(&run_id, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let done = json!({"order": "o-1", "count": 11, "stamped": true, "tallied": 1, "by": "raw"});
    assert_eq!(state_of(&mut c, &run_id), done);

    // A task that is no workflow step's has no state to set.
    let plain = c.invoke("tally", b"{}", Default::default()).unwrap();
    let tasks = c.await_tasks("raw", &["tally"], 1, 5_000).unwrap();
    assert_eq!(tasks[0].task_id, plain);
    assert_eq!(tasks[0].state, None);
    let err = c
        .complete_task_with_state(
            "raw",
            &flo::TaskRef::from(&tasks[0]),
            b"{}",
            None,
            Some(b"{}"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("not a workflow step"), "{err}");

    // The SDK worker: `ctx.state()` and `ActionResult::with_state`.
    let worker =
        ActionWorker::builder(server.addr)
            .worker_id("sdk")
            .block_ms(100)
            .action("tally", |ctx| {
                let state = ctx.state().unwrap_or_default();
                let count = state["count"].as_i64().unwrap_or(0);
                Ok(ActionResult::json(&json!({"tallied": 2}))?
                    .with_state(&json!({"count": count + 1})))
            })
            .spawn()
            .unwrap();
    let second = c
        .start_workflow("handoff", br#"{"count": 0}"#, StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&second, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(
        state_of(&mut c, &second),
        json!({"count": 11, "stamped": true, "tallied": 2})
    );
    worker.stop();
}

const COUNTED: &str = r#"kind: Workflow
name: counted
version: "1"
start:
  run: "@actions/count"
  skipOutputMapping: true
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;

#[test]
fn runs_of_a_group_share_fields_and_counters_across_shards() {
    use flo::protocol::SharedScope;
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    let fields =
        r#"{"flow_group:total": {"$increment": 1}, "flow:last": "x", "global:seen": true}"#;
    let guest = flo_testkit::guests::state_guest(fields);
    common::guest_action(&mut c, "count", guest, None);
    c.create_workflow(COUNTED).unwrap();
    // Ids of the caller's: the runs spread over both shards.
    let opts = |i: usize| StartOptions {
        group: Some("batch-1".into()),
        run_id: Some(format!("g-{i}")),
        ..StartOptions::default()
    };
    let runs: Vec<String> = (0..24)
        .map(|i| c.start_workflow("counted", b"{}", opts(i)).unwrap())
        .collect();
    for run_id in &runs {
        let run = c.wait_workflow(run_id, 20_000).unwrap();
        assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
        // The run's own field, its prefix gone; the shared ones are not in its state.
        assert_eq!(state_of(&mut c, run_id), json!({"seen": true}));
    }
    let events = c
        .workflow_events(Some("counted"), None, Some(1000))
        .unwrap();
    let owners: std::collections::BTreeSet<u32> = events.events.iter().map(|e| e.shard).collect();
    assert_eq!(owners.len(), 2, "runs on both shards increment one counter");
    let group = c.shared_state(SharedScope::Group, "batch-1").unwrap();
    assert_eq!(serde_json::Value::Object(group), json!({"total": 24}));
    let flow = c.shared_state(SharedScope::Flow, "counted").unwrap();
    assert_eq!(serde_json::Value::Object(flow), json!({"last": "x"}));

    // A run outside any group cannot set a group's field: its step fails with the reason.
    let lone = c
        .start_workflow("counted", b"{}", StartOptions::default())
        .unwrap();
    let run = c.wait_workflow(&lone, 20_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    assert!(run.error.unwrap_or_default().contains("--group"));

    // Shared fields are KV entries: durable across kill -9, shown by the CLI.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let doc = cli_json(
        &server.addr_string(),
        &["workflow", "shared-state", "--group", "batch-1"],
    );
    assert_eq!(doc, json!({"total": 24}));
}

const STAGED: &str = r#"kind: Workflow
name: staged
version: "1"
state: {stage: "new"}
searchAttributes:
  - {name: stage, type: string, from: state.stage}
  - {name: score, type: number, from: state.score}
start:
  run: "@actions/prepare"
  transitions:
    success: approve
steps:
  approve:
    waitForState: {}
    transitions:
      success: flo.Completed
"#;

/// The runs a query lists, sorted.
fn listed(addr: &str, query: &str) -> Vec<String> {
    let doc = cli_json(addr, &["workflow", "list-runs", "staged", "--query", query]);
    let mut ids: Vec<String> = doc["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("runs in {doc}"))
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn runs_are_listed_by_their_state_fields_as_steps_and_updates_change_them() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let addr = server.addr_string();
    let mut c = server.client();
    fixed_wasm_action(&mut c, "prepare", r#"{"stage": "prepared"}"#);
    c.create_workflow(STAGED).unwrap();
    for i in 0..4 {
        let opts = StartOptions {
            run_id: Some(format!("s-{i}")),
            ..StartOptions::default()
        };
        c.start_workflow("staged", b"{}", opts).unwrap();
    }
    for i in 0..4 {
        assert!(waiting_for_state(&mut c, &format!("s-{i}")));
    }
    // The step's output set the stage of every run.
    assert_eq!(
        listed(&addr, r#"stage = "prepared""#),
        ["s-0", "s-1", "s-2", "s-3"]
    );
    c.update_workflow_state("s-1", br#"{"stage": "review", "score": 7}"#, false)
        .unwrap();
    c.update_workflow_state("s-2", br#"{"stage": "review", "score": 3}"#, false)
        .unwrap();
    c.set_workflow_state("s-3", br#"{"stage": "done"}"#, true)
        .unwrap();
    assert_eq!(listed(&addr, r#"stage = "review""#), ["s-1", "s-2"]);
    assert_eq!(listed(&addr, "score > 5"), ["s-1"]);
    assert_eq!(
        listed(&addr, r#"stage = "done" AND status = "completed""#),
        ["s-3"]
    );
    assert_eq!(listed(&addr, r#"stage = "prepared""#), ["s-0"]);
    // The same after kill -9.
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let addr = server.addr_string();
    assert_eq!(listed(&addr, r#"stage = "review""#), ["s-1", "s-2"]);
    assert_eq!(listed(&addr, r#"stage = "done""#), ["s-3"]);
    let e = cli_json_fails(&addr, "stage = ");
    assert!(e.contains("query error"), "{e}");
    server.stop();
}

fn cli_json_fails(addr: &str, query: &str) -> String {
    common::cli_fails(addr, &["workflow", "list-runs", "staged", "--query", query])
}
