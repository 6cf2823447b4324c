//! Step filters end to end: `when:` (CEL over the input, earlier steps' outputs, the run's
//! state and the time), `whenAll`/`whenAny`, a filtered step's `filtered` transition (else
//! `success`, with no output), a filter that cannot be evaluated (the step fails with the
//! reason; the server goes on), and expressions refused at create time with their position.

mod common;

use common::{TestServer, fixed_wasm_action, temp_dir};
use flo::StartOptions;
use flo::protocol::WorkflowRunStatus;
use serde_json::json;

const ROUTED: &str = r#"kind: Workflow
name: routed
version: "1"
start:
  run: "@actions/score"
  transitions: {success: big}
steps:
  big:
    run: "@actions/mark"
    when: "input.amount > 100 && steps._start.output.score >= 0.9"
    transitions: {success: notify, filtered: small}
  small:
    run: "@actions/mark"
    whenAny: ["input.amount < 10", "has(state.vip) && state.vip == true"]
    transitions: {success: notify}
  notify:
    run: "@actions/mark"
    whenAll: ["now > 0", "size(input.emails) > 0"]
    transitions: {success: flo.Completed}
"#;

fn outcomes(run: &flo::protocol::WorkflowRunInfo) -> Vec<(String, String)> {
    run.steps
        .iter()
        .map(|s| (s.name.clone(), s.outcome.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn filters_route_runs_and_bad_ones_fail_the_step_or_the_definition() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "score", r#"{"score": 0.95}"#);
    fixed_wasm_action(&mut c, "mark", r#"{"marked": true}"#);
    c.create_workflow(ROUTED).unwrap();
    let start = |c: &mut flo::Client, input: serde_json::Value| {
        let id = c
            .start_workflow(
                "routed",
                input.to_string().as_bytes(),
                StartOptions::default(),
            )
            .unwrap();
        c.wait_workflow(&id, 10_000).unwrap()
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());

    // Big: `big` runs, `small` is never reached, `notify` runs.
    let run = start(&mut c, json!({"amount": 500, "emails": ["a@x"]}));
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(
        outcomes(&run),
        [
            s("_start", "success"),
            s("big", "success"),
            s("notify", "success")
        ]
    );
    // Small: `big` filtered (its `filtered` transition), `small` runs (any), `notify`
    // filtered (no emails) and goes on along `success` with no output.
    let run = start(&mut c, json!({"amount": 5, "emails": []}));
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(
        outcomes(&run),
        [
            s("_start", "success"),
            s("big", "filtered"),
            s("small", "success"),
            s("notify", "filtered")
        ]
    );
    let notify = run.steps.iter().find(|s| s.name == "notify").unwrap();
    assert_eq!(notify.output, None);
    // Neither big nor small: `small` filtered goes on along `success` too.
    let run = start(&mut c, json!({"amount": 50, "emails": ["a@x"]}));
    assert_eq!(
        outcomes(&run),
        [
            s("_start", "success"),
            s("big", "filtered"),
            s("small", "filtered"),
            s("notify", "success")
        ]
    );

    // A filter that cannot be evaluated fails its step with the reason (the expression
    // library's panic on a division by zero is caught).
    c.create_workflow(
        "kind: Workflow\nname: broken\nversion: \"1\"\nstart:\n  run: \"@actions/mark\"\n  when: \"input.count / input.zero == 1\"\n  transitions: {success: flo.Completed, failure: flo.Failed}\n",
    )
    .unwrap();
    let id = c
        .start_workflow(
            "broken",
            br#"{"count": 3, "zero": 0}"#,
            StartOptions::default(),
        )
        .unwrap();
    let run = c.wait_workflow(&id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("filter") && error.contains("divide by zero"),
        "{error}"
    );
    let id = c
        .start_workflow("broken", br#"{"nothing": 3}"#, StartOptions::default())
        .unwrap();
    assert_eq!(
        c.wait_workflow(&id, 10_000).unwrap().status,
        WorkflowRunStatus::Failed
    );

    // Expressions that are not CEL are refused at create time, with their position.
    let err = c
        .create_workflow(
            "kind: Workflow\nname: bad\nversion: \"1\"\nstart:\n  run: \"@actions/mark\"\n  when: \"input.amount >\"\n  transitions: {success: flo.Completed}\n",
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("E513") && err.contains("line 1, column"),
        "{err}"
    );
    // The server goes on.
    assert!(c.list_workflows().unwrap().len() >= 2);
}
