//! `flo workflow ...` and `flo validate workflow` end to end: definitions created from
//! files, runs started, inspected, signalled, cancelled and listed through the CLI against
//! a real server (spec `flo-workflows.md` Quick Start, Signals, Idempotency, Disable /
//! Enable, Validation), in human and `--json` form, and the mistakes a user can make.

mod common;

use common::{
    FLO_BIN, TestServer, cli_fails, cli_json, cli_ok, cli_usage_fails, temp_dir, wait_until,
};
use flo_testkit::guests::{echo_guest, fixed_guest};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn register_wasm(addr: &str, dir: &Path, name: &str, wat: &str) {
    let file = write(dir, &format!("{name}.wat"), wat);
    cli_ok(
        addr,
        &["action", "register", name, "--wasm", file.to_str().unwrap()],
    );
}

fn run_id(doc: &Value) -> String {
    doc["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {doc}"))
        .to_string()
}

fn start_json(addr: &str, args: &[&str]) -> String {
    let mut all = vec!["workflow", "start"];
    all.extend_from_slice(args);
    run_id(&cli_json(addr, &all))
}

fn status(addr: &str, run: &str) -> Value {
    cli_json(addr, &["workflow", "status", run])
}

fn wait_status(addr: &str, run: &str, want: &str) -> Value {
    assert!(
        wait_until(Duration::from_secs(10), || status(addr, run)["status"]
            == want),
        "run {run} never became {want}: {}",
        status(addr, run)
    );
    status(addr, run)
}

fn event_types(addr: &str, run: &str) -> Vec<String> {
    let doc = cli_json(addr, &["workflow", "history", run]);
    doc["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events: {doc}"))
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// `flo validate ...` runs without a server: any address will do.
fn validate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(FLO_BIN)
        .args(args)
        .env("FLO_ADDR", "127.0.0.1:1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

const PROCESS_ORDER: &str = r#"
kind: Workflow
name: process-order
version: "1.0.0"
idempotency: optional

start:
  run: "@actions/validate-order"
  transitions:
    success: charge
    failure: flo.Failed

steps:
  charge:
    run: "@actions/charge-payment"
    inputMapping: '{"amount": "$.input.amount", "valid": "$.steps._start.output.valid"}'
    transitions:
      success: ship
      failure: flo.Failed

  ship:
    run: "@actions/create-shipment"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#;

fn approval(version: &str) -> String {
    format!(
        r#"
kind: Workflow
name: approval
version: "{version}"
idempotency: optional
start:
  waitForSignal:
    type: manager_approval
    timeoutMs: 86400000
    onTimeout: Rejected
  transitions:
    success: flo.Completed
terminals:
  Rejected:
    status: failed
"#
    )
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn validate_reports_errors_and_warnings_without_a_server() {
    let dir = temp_dir();
    let good = write(
        dir.path(),
        "good.yaml",
        &format!(
            "{PROCESS_ORDER}\n  audit:\n    run: \"@actions/audit\"\n    transitions:\n      success: flo.Completed\n"
        ),
    );
    let (code, stdout, stderr) = validate(&["validate", "workflow", "-f", good.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("valid: workflow process-order version 1.0.0 (1 warning)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning W101 steps.audit:"),
        "the unreachable step is named: {stdout}"
    );
    let (code, stdout, _) = validate(&[
        "--json",
        "validate",
        "workflow",
        "--file",
        good.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["valid"], true);
    assert_eq!(doc["name"], "process-order");
    assert_eq!(doc["warnings"][0]["code"], "W101");
    assert_eq!(doc["warnings"][0]["path"], "steps.audit");

    let bad = write(
        dir.path(),
        "bad.yaml",
        &PROCESS_ORDER.replace("success: ship", "success: shipp"),
    );
    let (code, stdout, stderr) = validate(&["validate", "workflow", "-f", bad.to_str().unwrap()]);
    assert_eq!(
        code,
        Some(2),
        "a refused definition is a usage error: {stdout}{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("not a valid workflow definition"),
        "{stderr}"
    );
    assert!(
        stderr.contains("steps.charge.transitions.success") && stderr.contains("shipp"),
        "the error names the transition and its target: {stderr}"
    );
    let (code, stdout, _) = validate(&[
        "--json",
        "validate",
        "workflow",
        "-f",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["valid"], false);
    let err = &doc["errors"][0];
    assert!(err["code"].as_str().unwrap().starts_with('E'), "{doc}");
    assert_eq!(err["path"], "steps.charge.transitions.success");

    let (code, _, stderr) = validate(&["validate", "workflow", "-f", "/nonexistent/wf.yaml"]);
    assert_eq!(code, Some(2), "an unreadable file is a usage error");
    assert!(
        stderr.contains("cannot read workflow definition /nonexistent/wf.yaml"),
        "{stderr}"
    );
}

#[test]
fn create_start_status_history_list_and_definition_of_a_wasm_workflow() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let files = temp_dir();
    register_wasm(
        &addr,
        files.path(),
        "validate-order",
        &fixed_guest(r#"{"valid":true}"#),
    );
    register_wasm(&addr, files.path(), "charge-payment", &echo_guest());
    register_wasm(
        &addr,
        files.path(),
        "create-shipment",
        &fixed_guest(r#"{"shipment":"S-1"}"#),
    );
    let file = write(files.path(), "process-order.yaml", PROCESS_ORDER);
    let file = file.to_str().unwrap();

    let text = cli_ok(&addr, &["workflow", "create", "-f", file]);
    assert_eq!(text.trim(), "created workflow process-order version 1.0.0");
    let doc = cli_json(&addr, &["workflow", "create", "-f", file]);
    assert_eq!(
        doc,
        json!({"name": "process-order", "version": "1.0.0", "created": false, "warnings": []}),
        "creating the same version again changes nothing"
    );

    // Human start prints the run id alone (spec: `# → wfrun-1`).
    let text = cli_ok(
        &addr,
        &[
            "workflow",
            "start",
            "process-order",
            r#"{"order_id": "ORD-123", "amount": 99.99}"#,
        ],
    );
    let run = text.trim().to_string();
    assert!(run.starts_with("wfrun-"), "{text}");
    let doc = wait_status(&addr, &run, "completed");
    assert_eq!(doc["run_id"], run.as_str());
    assert_eq!(doc["workflow"], "process-order");
    assert_eq!(doc["version"], "1.0.0");
    assert_eq!(doc["terminal"], "flo.Completed");
    assert_eq!(
        doc["input"],
        json!({"order_id": "ORD-123", "amount": 99.99})
    );
    assert_eq!(
        doc["outputs"]["charge"],
        json!({"amount": 99.99, "valid": true})
    );
    assert_eq!(doc["outputs"]["ship"], json!({"shipment": "S-1"}));
    assert_eq!(doc["output"], json!({"shipment": "S-1"}));
    assert_eq!(doc["current_step"], Value::Null);
    assert_eq!(doc["steps"][0]["name"], "_start");
    assert_eq!(doc["steps"][0]["outcome"], "success");

    let text = cli_ok(&addr, &["workflow", "status", &run]);
    assert!(text.contains("status     completed"), "{text}");
    assert!(text.contains("terminal   flo.Completed"), "{text}");
    assert!(text.contains("charge"), "{text}");

    let events = event_types(&addr, &run);
    assert_eq!(events.first().map(String::as_str), Some("workflow_started"));
    assert_eq!(
        events.last().map(String::as_str),
        Some("workflow_completed")
    );
    assert_eq!(events.iter().filter(|e| *e == "step_completed").count(), 3);
    let history = cli_json(&addr, &["workflow", "history", &run]);
    let last = history["events"].as_array().unwrap().last().unwrap();
    assert_eq!(last["detail"], "flo.Completed", "{last}");
    assert!(last["at"].as_str().unwrap().ends_with('Z'), "{last}");
    let text = cli_ok(&addr, &["workflow", "history", &run]);
    let header = text.lines().next().unwrap();
    assert!(
        header.trim_start().starts_with("SEQ") && header.contains("TIME"),
        "{text}"
    );
    assert!(text.contains("workflow_completed"), "{text}");

    // start --wait prints the final status.
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "start",
            "process-order",
            r#"{"amount": 1}"#,
            "--wait",
        ],
    );
    assert_eq!(doc["status"], "completed");
    assert_eq!(
        doc["outputs"]["charge"],
        json!({"amount": 1, "valid": true})
    );

    let doc = cli_json(&addr, &["workflow", "list"]);
    let list = doc["workflows"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{doc}");
    assert_eq!(list[0]["name"], "process-order");
    assert_eq!(list[0]["versions"], json!(["1.0.0"]));
    assert_eq!(list[0]["enabled"], true);
    let text = cli_ok(&addr, &["workflow", "list"]);
    assert!(text.contains("process-order"), "{text}");

    let text = cli_ok(&addr, &["workflow", "definition", "process-order"]);
    assert_eq!(
        text.trim(),
        PROCESS_ORDER.trim(),
        "the definition as created"
    );
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "definition",
            "process-order",
            "--version",
            "1.0.0",
        ],
    );
    assert_eq!(doc["yaml"].as_str().unwrap().trim(), PROCESS_ORDER.trim());

    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "list-runs",
            "process-order",
            "--status",
            "completed",
        ],
    );
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{doc}");
    assert!(runs.iter().any(|r| r["run_id"] == run.as_str()));
    assert_eq!(doc["truncated"], false);
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "list-runs",
            "process-order",
            "--status",
            "failed",
        ],
    );
    assert_eq!(doc["runs"], json!([]));
    let doc = cli_json(
        &addr,
        &["workflow", "list-runs", "process-order", "--limit", "1"],
    );
    assert_eq!(doc["runs"].as_array().unwrap().len(), 1);
    assert_eq!(doc["truncated"], true);
    // The second page, with the first's cursor, holds the other run; then the list ends.
    let first = doc["runs"][0]["run_id"].as_str().unwrap().to_string();
    let cursor = doc["next_cursor"].as_str().unwrap().to_string();
    let mut seen = vec![first];
    let mut cursor = Some(cursor);
    while let Some(at) = cursor {
        let doc = cli_json(
            &addr,
            &[
                "workflow",
                "list-runs",
                "process-order",
                "--limit",
                "1",
                "--cursor",
                &at,
            ],
        );
        for r in doc["runs"].as_array().unwrap() {
            seen.push(r["run_id"].as_str().unwrap().to_string());
        }
        cursor = doc["next_cursor"].as_str().map(str::to_string);
        assert!(seen.len() <= 3, "the list does not end: {seen:?}");
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.contains(&run));
}

#[test]
fn signals_cancel_disable_enable_idempotency_and_versions() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let files = temp_dir();
    let v1 = write(files.path(), "v1.yaml", &approval("1"));
    let v2 = write(files.path(), "v2.yaml", &approval("2"));
    cli_ok(&addr, &["workflow", "create", "-f", v1.to_str().unwrap()]);

    // A signal sent with the CLI resumes the waiting run; its payload is the step output.
    let run = start_json(&addr, &["approval", r#"{"order": 7}"#]);
    let doc = wait_status(&addr, &run, "waiting");
    assert_eq!(doc["current_step"], "_start");
    assert!(
        doc["waiting_for"]
            .as_str()
            .unwrap()
            .contains("manager_approval"),
        "{doc}"
    );
    let text = cli_ok(
        &addr,
        &[
            "workflow",
            "signal",
            &run,
            "--type",
            "manager_approval",
            r#"{"decision": "approved"}"#,
        ],
    );
    assert_eq!(
        text.trim(),
        format!("sent signal manager_approval to {run}")
    );
    let doc = wait_status(&addr, &run, "completed");
    assert_eq!(doc["outputs"]["_start"], json!({"decision": "approved"}));
    let events = event_types(&addr, &run);
    for e in ["waiting_for_signal", "signal_received", "signal_matched"] {
        assert!(events.iter().any(|x| x == e), "{e} missing: {events:?}");
    }

    // Cancel with a reason.
    let run = start_json(&addr, &["approval"]);
    wait_status(&addr, &run, "waiting");
    let doc = cli_json(
        &addr,
        &["workflow", "cancel", &run, "--reason", "order withdrawn"],
    );
    assert_eq!(doc["status"], "cancelled");
    let history = cli_json(&addr, &["workflow", "history", &run]);
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "workflow_cancelled");
    assert_eq!(last["detail"], "order withdrawn");
    let err = cli_fails(&addr, &["workflow", "cancel", &run]);
    assert!(err.contains(&run), "{err}");

    // Disabled: starts refused, the waiting run continues and can still be signalled.
    let waiting = start_json(&addr, &["approval"]);
    wait_status(&addr, &waiting, "waiting");
    let text = cli_ok(&addr, &["workflow", "disable", "approval"]);
    assert_eq!(text.trim(), "workflow approval disabled");
    let err = cli_fails(&addr, &["workflow", "start", "approval"]);
    assert!(err.contains("disabled"), "{err}");
    cli_ok(
        &addr,
        &["workflow", "signal", &waiting, "--type", "manager_approval"],
    );
    wait_status(&addr, &waiting, "completed");
    let doc = cli_json(&addr, &["workflow", "enable", "approval"]);
    assert_eq!(doc["enabled"], true);
    start_json(&addr, &["approval"]);

    // Idempotency keys: the same key gives the same run.
    let a = start_json(&addr, &["approval", "{}", "--idempotency-key", "order-123"]);
    let b = start_json(&addr, &["approval", "{}", "--idempotency-key", "order-123"]);
    assert_eq!(a, b);
    assert_eq!(status(&addr, &a)["idempotency_key"], "order-123");

    // Versions coexist; start takes the latest unless --version is given.
    let doc = cli_json(&addr, &["workflow", "create", "-f", v2.to_str().unwrap()]);
    assert_eq!(
        (doc["version"].as_str(), doc["created"].as_bool()),
        (Some("2"), Some(true))
    );
    let latest = start_json(&addr, &["approval"]);
    assert_eq!(status(&addr, &latest)["version"], "2");
    let old = start_json(&addr, &["approval", "{}", "--version", "1"]);
    assert_eq!(status(&addr, &old)["version"], "1");
    let doc = cli_json(&addr, &["workflow", "definition", "approval"]);
    assert_eq!(doc["version"], "2");
    assert_eq!(doc["versions"], json!(["1", "2"]));
    let doc = cli_json(
        &addr,
        &["workflow", "list-runs", "approval", "--status", "waiting"],
    );
    assert_eq!(doc["runs"].as_array().unwrap().len(), 4, "{doc}");
}

#[test]
fn mistakes_get_clear_errors() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let files = temp_dir();

    // Judged before connecting: bad JSON, bad status (usage errors, exit 2).
    let err = cli_usage_fails("127.0.0.1:1", &["workflow", "start", "w", "{not json"]);
    assert!(err.contains("the input is not valid JSON"), "{err}");
    let err = cli_usage_fails(
        "127.0.0.1:1",
        &["workflow", "signal", "wfrun-1", "--type", "t", "nope"],
    );
    assert!(
        err.contains("the signal payload is not valid JSON"),
        "{err}"
    );
    let err = cli_usage_fails(
        "127.0.0.1:1",
        &["workflow", "list-runs", "w", "--status", "done"],
    );
    assert!(err.contains("unknown status \"done\""), "{err}");

    // Refused by the server with the validator's codes (exit 2); nothing created.
    let bad = write(
        files.path(),
        "bad.yaml",
        "kind: Workflow\nname: broken\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: nowhere\n",
    );
    let err = cli_usage_fails(&addr, &["workflow", "create", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("start.transitions.success"), "{err}");
    assert!(err.contains("nowhere"), "{err}");
    assert_eq!(
        cli_json(&addr, &["workflow", "list"])["workflows"],
        json!([])
    );
    // An empty file: the issue has no path to name.
    let empty = write(files.path(), "empty.yaml", "# nothing yet\n");
    let err = cli_usage_fails(
        &addr,
        &["workflow", "create", "-f", empty.to_str().unwrap()],
    );
    assert!(err.contains("E100: the definition is empty"), "{err}");
    let err = cli_usage_fails(&addr, &["workflow", "create", "-f", "/nonexistent.yaml"]);
    assert!(err.contains("cannot read workflow definition"), "{err}");

    // Unknown names (exit 1).
    let err = cli_fails(&addr, &["workflow", "start", "ghost"]);
    assert!(err.contains("ghost"), "{err}");
    let err = cli_fails(&addr, &["workflow", "status", "wfrun-999"]);
    assert!(err.contains("wfrun-999"), "{err}");
    let err = cli_fails(&addr, &["workflow", "definition", "ghost"]);
    assert!(err.contains("ghost"), "{err}");

    // Required idempotency without a key.
    let req = write(
        files.path(),
        "req.yaml",
        "kind: Workflow\nname: strict\nversion: \"1\"\nidempotency: required\nstart:\n  waitForSignal:\n    type: go\n    timeoutMs: 60000\n  transitions:\n    success: flo.Completed\n",
    );
    cli_ok(&addr, &["workflow", "create", "-f", req.to_str().unwrap()]);
    let err = cli_fails(&addr, &["workflow", "start", "strict"]);
    assert!(err.contains("idempotency"), "{err}");
    start_json(&addr, &["strict", "{}", "--idempotency-key", "k1"]);

    // The server kept serving through all of it.
    cli_ok(&addr, &["status"]);
}
