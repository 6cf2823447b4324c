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
