//! `flo worker ...` end to end: a user-hosted action registered, invoked, and worked through
//! the CLI against a real server (spec `flo-actions.md` "Worker Lifecycle" and
//! `flo-workers.md`): register, await, complete, fail, touch, heartbeat, drain, deregister,
//! list and info, in human and `--json` form, and the errors a worker can make.

mod common;

use common::{TestServer, cli_fails, cli_json, cli_ok, cli_usage_fails, temp_dir};
use serde_json::{Value, json};

/// How long an await that should receive a task may wait.
const AWAIT_TASK_MS: &str = "5000";
/// How long an await that should receive nothing waits.
const AWAIT_NOTHING_MS: &str = "300";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn start() -> (tempfile::TempDir, TestServer, String) {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    (dir, server, addr)
}

/// An RFC 3339 UTC time as the CLI prints it.
fn assert_time_text(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    assert!(
        s.len() >= 20 && s.as_bytes()[4] == b'-' && s.contains('T') && s.ends_with('Z'),
        "not an RFC 3339 UTC time: {s}"
    );
}

fn ms(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not milliseconds: {v}"))
}

fn register_action(addr: &str, name: &str, extra: &[&str]) {
    let mut args = vec!["action", "register", name];
    args.extend_from_slice(extra);
    cli_ok(addr, &args);
}

fn register_worker(addr: &str, worker: &str, actions: &[&str]) -> Value {
    let mut args = vec!["worker", "register", worker];
    args.extend_from_slice(actions);
    cli_json(addr, &args)
}

/// `flo action invoke ACTION INPUT --json` → the run id.
fn invoke(addr: &str, action: &str, input: &str) -> String {
    let doc = cli_json(addr, &["action", "invoke", action, input]);
    doc["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {doc}"))
        .to_string()
}

/// `flo worker await ACTION --worker-id W --json` that must lease a task; returns it.
fn await_task(addr: &str, worker: &str, action: &str) -> Value {
    let task = cli_json(
        addr,
        &[
            "worker",
            "await",
            action,
            "--worker-id",
            worker,
            "--block",
            AWAIT_TASK_MS,
        ],
    );
    assert!(task.is_object(), "{worker} got no task of {action}: {task}");
    task
}

/// `flo worker await` by a worker that must get nothing: `null`.
fn await_nothing(addr: &str, worker: &str, action: &str) {
    let doc = cli_json(
        addr,
        &[
            "worker",
            "await",
            action,
            "--worker-id",
            worker,
            "--block",
            AWAIT_NOTHING_MS,
        ],
    );
    assert_eq!(doc, Value::Null, "{worker} should get no task");
}

fn complete(addr: &str, worker: &str, action: &str, task_id: &str, result: &str) {
    cli_ok(
        addr,
        &[
            "worker",
            "complete",
            task_id,
            "--worker-id",
            worker,
            "--action",
            action,
            "--result",
            result,
        ],
    );
}

/// `flo worker fail` (extra flags: `--retry`, `--non-retryable`) → the run afterwards.
fn fail(
    addr: &str,
    worker: &str,
    action: &str,
    task_id: &str,
    error: &str,
    extra: &[&str],
) -> Value {
    let mut args = vec![
        "worker",
        "fail",
        task_id,
        "--worker-id",
        worker,
        "--action",
        action,
        "--error",
        error,
    ];
    args.extend_from_slice(extra);
    cli_json(addr, &args)
}

fn run_status(addr: &str, run_id: &str) -> Value {
    cli_json(addr, &["action", "status", run_id])
}

fn worker_info(addr: &str, worker: &str) -> Value {
    cli_json(addr, &["worker", "info", worker])
}

fn process<'a>(worker: &'a Value, name: &str) -> &'a Value {
    worker["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no processes: {worker}"))
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no process {name}: {worker}"))
}

fn task_id(task: &Value) -> String {
    task["task_id"].as_str().expect("a task id").to_string()
}

// ---------------------------------------------------------------------------------------------
// Register, await, complete
// ---------------------------------------------------------------------------------------------

#[test]
fn registered_worker_awaits_a_task_and_completes_it_with_its_result() {
    let (_dir, server, addr) = start();
    register_action(&addr, "process-order", &["--timeout", "60000"]);

    // Human registration: the worker, its status and what it processes.
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "register",
            "worker-0",
            "process-order",
            "send-email",
        ],
    );
    assert!(
        out.contains("worker-0") && out.contains("active"),
        "register prints the worker and its status: {out}"
    );
    assert!(
        out.contains("process-order") && out.contains("send-email"),
        "register prints the processes: {out}"
    );

    // --json registration: every field the spec lists.
    let w = cli_json(
        &addr,
        &[
            "worker",
            "register",
            "worker-1",
            "process-order",
            "send-email",
            "--max-concurrency",
            "4",
            "--machine-id",
            "m-1",
            "--labels",
            r#"{"region":"eu","gpu":true}"#,
            "--metadata",
            r#"{"version":"1.2"}"#,
        ],
    );
    assert_eq!(w["worker_id"], "worker-1", "{w}");
    assert_eq!(w["namespace"], "default", "{w}");
    assert_eq!(w["worker_type"], "action", "{w}");
    assert_eq!(w["status"], "active", "{w}");
    assert_eq!(w["max_concurrency"], 4, "{w}");
    assert_eq!(w["current_load"], 0, "{w}");
    assert_eq!(w["tasks_completed"], 0, "{w}");
    assert_eq!(w["tasks_failed"], 0, "{w}");
    assert_eq!(w["machine_id"], "m-1", "{w}");
    assert_eq!(w["labels"], json!({"region": "eu", "gpu": true}), "{w}");
    assert_eq!(w["metadata"], json!({"version": "1.2"}), "{w}");
    assert_time_text(&w["registered_at"]);
    assert_time_text(&w["last_heartbeat"]);
    let names: Vec<&Value> = w["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert_eq!(
        names,
        [&json!("process-order"), &json!("send-email")],
        "{w}"
    );
    for p in w["processes"].as_array().unwrap() {
        assert_eq!(p["kind"], "action", "{w}");
        assert_eq!((&p["run_count"], &p["fail_count"]), (&json!(0), &json!(0)));
        assert_eq!(p["last_run_at"], Value::Null, "{w}");
    }

    // Invoke; the worker's await leases the task.
    let run_id = invoke(&addr, "process-order", r#"{"order":"ORD-1"}"#);
    let task = await_task(&addr, "worker-1", "process-order");
    assert_eq!(task["task_id"], run_id.as_str(), "{task}");
    assert_eq!(task["action"], "process-order", "{task}");
    assert_eq!(task["namespace"], "default", "{task}");
    assert_eq!(task["attempt"], 1, "{task}");
    assert_eq!(task["payload"], json!({"order": "ORD-1"}), "{task}");
    assert_eq!(task["priority"], 10, "{task}");
    assert_time_text(&task["created_at"]);
    assert_time_text(&task["lease_expires_at"]);
    assert!(
        ms(&task["lease_expires_at_ms"]) > ms(&task["created_at_ms"]),
        "the lease ends after the task was created: {task}"
    );
    let run = run_status(&addr, &run_id);
    assert_eq!(run["status"], "running", "a leased task is running: {run}");
    assert_eq!(run["attempt"], 1, "{run}");

    // Complete (human output), then the run holds the result.
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "complete",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
            "--result",
            r#"{"status":"done"}"#,
        ],
    );
    assert!(out.contains("completed") && out.contains(&run_id), "{out}");
    let run = run_status(&addr, &run_id);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!({"status": "done"}), "{run}");
    assert_eq!(run["error"], Value::Null, "{run}");

    // A named outcome, through --json.
    let run_id = invoke(&addr, "process-order", r#"{"order":"ORD-2"}"#);
    assert_eq!(
        task_id(&await_task(&addr, "worker-1", "process-order")),
        run_id
    );
    let doc = cli_json(
        &addr,
        &[
            "worker",
            "complete",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
            "--result",
            r#"{"decision":"auto"}"#,
            "--outcome",
            "approved",
        ],
    );
    assert_eq!(doc["task_id"], run_id.as_str(), "{doc}");
    assert_eq!(doc["status"], "completed", "{doc}");
    assert_eq!(doc["outcome"], "approved", "{doc}");
    let run = run_status(&addr, &run_id);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["outcome"], "approved", "{run}");
    assert_eq!(run["output"], json!({"decision": "auto"}), "{run}");

    // Human await: the task's id, attempt and payload; complete without a result.
    let run_id = invoke(&addr, "process-order", r#"{"order":"ORD-3"}"#);
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "await",
            "process-order",
            "--worker-id",
            "worker-1",
            "--block",
            AWAIT_TASK_MS,
        ],
    );
    assert!(out.contains(&run_id), "await prints the task id: {out}");
    assert!(out.contains("process-order"), "{out}");
    assert!(out.contains("attempt:  1"), "{out}");
    assert!(
        out.contains(r#"{"order":"ORD-3"}"#),
        "await prints the payload: {out}"
    );
    cli_ok(
        &addr,
        &[
            "worker",
            "complete",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
        ],
    );
    assert_eq!(run_status(&addr, &run_id)["status"], "completed");

    // --max 2: an array, possibly one task at a time when they live on different shards.
    let expected = [
        invoke(&addr, "process-order", r#"{"order":"ORD-4"}"#),
        invoke(&addr, "process-order", r#"{"order":"ORD-5"}"#),
    ];
    let mut leased = Vec::new();
    while leased.len() < 2 {
        let doc = cli_json(
            &addr,
            &[
                "worker",
                "await",
                "process-order",
                "--worker-id",
                "worker-1",
                "--block",
                AWAIT_TASK_MS,
                "--max",
                "2",
            ],
        );
        let tasks = doc
            .as_array()
            .unwrap_or_else(|| panic!("--max 2 prints an array: {doc}"));
        assert!(
            !tasks.is_empty() && tasks.len() <= 2 - leased.len(),
            "{doc}"
        );
        leased.extend(tasks.iter().map(task_id));
    }
    leased.sort();
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(leased, expected);
    for id in &leased {
        complete(&addr, "worker-1", "process-order", id, r#""ok""#);
        assert_eq!(run_status(&addr, id)["output"], "ok");
    }
    // Nothing left: --max 2 prints an empty array, --max 1 prints null.
    let doc = cli_json(
        &addr,
        &[
            "worker",
            "await",
            "process-order",
            "--worker-id",
            "worker-1",
            "--block",
            AWAIT_NOTHING_MS,
            "--max",
            "2",
        ],
    );
    assert_eq!(doc, json!([]));
    await_nothing(&addr, "worker-1", "process-order");
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "await",
            "process-order",
            "--worker-id",
            "worker-1",
            "--block",
            AWAIT_NOTHING_MS,
        ],
    );
    assert_eq!(out.trim(), "no task");

    // The worker counted its five completions, all of process-order.
    let w = worker_info(&addr, "worker-1");
    assert_eq!(w["tasks_completed"], 5, "{w}");
    assert_eq!(w["tasks_failed"], 0, "{w}");
    let p = process(&w, "process-order");
    assert_eq!(p["run_count"], 5, "{w}");
    assert_eq!(p["fail_count"], 0, "{w}");
    assert_time_text(&p["last_run_at"]);
    assert_eq!(process(&w, "send-email")["run_count"], 0, "{w}");
    assert_eq!(process(&w, "send-email")["last_run_at"], Value::Null, "{w}");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// Fail
// ---------------------------------------------------------------------------------------------

#[test]
fn failing_with_retry_requeues_the_task_and_failing_without_fails_the_run() {
    let (_dir, server, addr) = start();
    register_action(
        &addr,
        "process-order",
        &["--max-retries", "3", "--retry-delay", "100"],
    );
    register_worker(&addr, "worker-1", &["process-order"]);

    // --retry: back to pending, next attempt, available after the backoff.
    let run_id = invoke(&addr, "process-order", r#"{"order":"ORD-1"}"#);
    assert_eq!(
        task_id(&await_task(&addr, "worker-1", "process-order")),
        run_id
    );
    let run = fail(
        &addr,
        "worker-1",
        "process-order",
        &run_id,
        "Temporary failure",
        &["--retry"],
    );
    assert_eq!(run["run_id"], run_id.as_str(), "{run}");
    assert_eq!(run["status"], "pending", "{run}");
    assert_eq!(run["attempt"], 2, "{run}");
    assert_time_text(&run["available_at"]);
    assert!(
        ms(&run["available_at_ms"]) > ms(&run["created_at_ms"]),
        "a retry waits for its backoff: {run}"
    );
    assert_eq!(run["dead_lettered"], false, "{run}");

    // The next await gets attempt 2 of the same task.
    let task = await_task(&addr, "worker-1", "process-order");
    assert_eq!(task["task_id"], run_id.as_str(), "{task}");
    assert_eq!(task["attempt"], 2, "{task}");
    assert_eq!(task["payload"], json!({"order": "ORD-1"}), "{task}");
    assert_eq!(run_status(&addr, &run_id)["status"], "running");

    // Without --retry (human output): failed for good, error recorded, dead-lettered.
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "fail",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
            "--error",
            "Invalid input",
        ],
    );
    assert!(
        out.contains(&run_id) && out.contains("failed") && out.contains("Invalid input"),
        "{out}"
    );
    let run = run_status(&addr, &run_id);
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"], "Invalid input", "{run}");
    assert_eq!(run["attempt"], 2, "{run}");
    assert_eq!(run["dead_lettered"], true, "{run}");
    await_nothing(&addr, "worker-1", "process-order");

    // --non-retryable: failed at once, not dead-lettered.
    let run_id = invoke(&addr, "process-order", r#"{"order":"ORD-2"}"#);
    assert_eq!(
        task_id(&await_task(&addr, "worker-1", "process-order")),
        run_id
    );
    let run = fail(
        &addr,
        "worker-1",
        "process-order",
        &run_id,
        "missing orderId",
        &["--non-retryable"],
    );
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["attempt"], 1, "{run}");
    assert_eq!(run["error"], "missing orderId", "{run}");
    assert_eq!(run["dead_lettered"], false, "{run}");

    // --retry with no retries left: failed and dead-lettered.
    register_action(&addr, "no-retries", &["--max-retries", "0"]);
    register_worker(&addr, "worker-2", &["no-retries"]);
    let run_id = invoke(&addr, "no-retries", "{}");
    assert_eq!(
        task_id(&await_task(&addr, "worker-2", "no-retries")),
        run_id
    );
    let run = fail(
        &addr,
        "worker-2",
        "no-retries",
        &run_id,
        "boom",
        &["--retry"],
    );
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["dead_lettered"], true, "{run}");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// Touch
// ---------------------------------------------------------------------------------------------

#[test]
fn touch_extends_the_lease_and_never_shortens_it() {
    let (_dir, server, addr) = start();
    register_action(&addr, "generate-report", &["--timeout", "30000"]);
    register_worker(&addr, "worker-1", &["generate-report"]);
    let run_id = invoke(&addr, "generate-report", "{}");
    let task = await_task(&addr, "worker-1", "generate-report");
    let leased_until = ms(&task["lease_expires_at_ms"]);

    let touch = |extend: &str| {
        cli_json(
            &addr,
            &[
                "worker",
                "touch",
                &run_id,
                "--worker-id",
                "worker-1",
                "--action",
                "generate-report",
                "--extend",
                extend,
            ],
        )
    };
    let doc = touch("600000");
    assert_eq!(doc["task_id"], run_id.as_str(), "{doc}");
    assert_time_text(&doc["lease_expires_at"]);
    let extended = ms(&doc["lease_expires_at_ms"]);
    assert!(
        extended > leased_until,
        "touch moves the expiry later: {leased_until} -> {doc}"
    );
    let doc = touch("1000");
    assert!(
        ms(&doc["lease_expires_at_ms"]) >= extended,
        "a shorter touch does not shorten the lease: {extended} -> {doc}"
    );

    let out = cli_ok(
        &addr,
        &[
            "worker",
            "touch",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "generate-report",
            "--extend",
            "900000",
        ],
    );
    assert!(out.contains(&run_id) && out.contains("lease"), "{out}");
    assert_eq!(run_status(&addr, &run_id)["status"], "running");

    complete(
        &addr,
        "worker-1",
        "generate-report",
        &run_id,
        r#"{"pages":3}"#,
    );
    assert_eq!(run_status(&addr, &run_id)["status"], "completed");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// Heartbeat, drain, deregister
// ---------------------------------------------------------------------------------------------

#[test]
fn drained_worker_finishes_its_task_but_gets_no_new_ones() {
    let (_dir, server, addr) = start();
    register_action(&addr, "send-email", &[]);
    register_worker(&addr, "worker-a", &["send-email"]);
    register_worker(&addr, "worker-b", &["send-email"]);

    let doc = cli_json(
        &addr,
        &[
            "worker",
            "heartbeat",
            "--worker-id",
            "worker-a",
            "--load",
            "1",
        ],
    );
    assert_eq!(doc, json!({"worker_id": "worker-a", "status": "active"}));
    let out = cli_ok(&addr, &["worker", "heartbeat", "--worker-id", "worker-a"]);
    assert!(out.contains("worker-a") && out.contains("active"), "{out}");
    // At load 0 too: heartbeat → active (the spec's diagram), in the registry as well.
    let w = cli_json(&addr, &["worker", "info", "worker-a"]);
    assert_eq!(
        (&w["status"], &w["current_load"]),
        (&json!("active"), &json!(0)),
        "{w}"
    );

    // worker-a holds a task when it is drained.
    let first = invoke(&addr, "send-email", r#"{"to":"alice@example.com"}"#);
    assert_eq!(task_id(&await_task(&addr, "worker-a", "send-email")), first);
    let w = cli_json(&addr, &["worker", "drain", "--worker-id", "worker-a"]);
    assert_eq!(w["worker_id"], "worker-a", "{w}");
    assert_eq!(w["status"], "draining", "{w}");
    let out = cli_ok(&addr, &["worker", "heartbeat", "--worker-id", "worker-a"]);
    assert!(
        out.contains("draining"),
        "heartbeats now say draining: {out}"
    );

    // No new task for worker-a; worker-b takes it. worker-a still completes its own.
    let second = invoke(&addr, "send-email", r#"{"to":"bob@example.com"}"#);
    await_nothing(&addr, "worker-a", "send-email");
    let out = cli_ok(
        &addr,
        &[
            "worker",
            "await",
            "send-email",
            "--worker-id",
            "worker-a",
            "--block",
            AWAIT_NOTHING_MS,
        ],
    );
    assert_eq!(out.trim(), "no task");
    complete(&addr, "worker-a", "send-email", &first, r#"{"sent":true}"#);
    assert_eq!(run_status(&addr, &first)["status"], "completed");
    let task = await_task(&addr, "worker-b", "send-email");
    assert_eq!(task_id(&task), second, "{task}");
    complete(&addr, "worker-b", "send-email", &second, r#"{"sent":true}"#);

    // Drain is sticky: a heartbeat does not make the worker active again.
    let doc = cli_json(&addr, &["worker", "heartbeat", "--worker-id", "worker-a"]);
    assert_eq!(doc["status"], "draining", "{doc}");

    // Deregister removes it from the registry.
    let doc = cli_json(&addr, &["worker", "deregister", "--worker-id", "worker-a"]);
    assert_eq!(doc, json!({"worker_id": "worker-a", "deregistered": true}));
    let ids: Vec<Value> = cli_json(&addr, &["worker", "list"])
        .as_array()
        .expect("worker list --json prints an array")
        .iter()
        .map(|w| w["worker_id"].clone())
        .collect();
    assert_eq!(ids, [json!("worker-b")]);
    let stderr = cli_fails(&addr, &["worker", "info", "worker-a"]);
    assert!(stderr.contains("worker-a"), "{stderr}");
    let out = cli_ok(&addr, &["worker", "deregister", "--worker-id", "worker-b"]);
    assert!(out.contains("worker-b"), "{out}");
    assert_eq!(cli_json(&addr, &["worker", "list"]), json!([]));
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// List and info
// ---------------------------------------------------------------------------------------------

#[test]
fn list_and_info_show_each_workers_load_and_counts() {
    let (_dir, server, addr) = start();
    register_action(&addr, "count-me", &[]);
    register_worker(&addr, "worker-x", &["count-me"]);
    register_worker(&addr, "worker-y", &["count-me"]);

    // worker-x: two completed, one failed; worker-y: one completed.
    for (worker, outcome) in [
        ("worker-x", "complete"),
        ("worker-x", "complete"),
        ("worker-x", "fail"),
        ("worker-y", "complete"),
    ] {
        let run_id = invoke(&addr, "count-me", "{}");
        assert_eq!(task_id(&await_task(&addr, worker, "count-me")), run_id);
        if outcome == "complete" {
            complete(&addr, worker, "count-me", &run_id, "{}");
        } else {
            let run = fail(&addr, worker, "count-me", &run_id, "nope", &[]);
            assert_eq!(run["status"], "failed", "{run}");
        }
    }
    cli_ok(
        &addr,
        &[
            "worker",
            "heartbeat",
            "--worker-id",
            "worker-x",
            "--load",
            "2",
        ],
    );

    let list = cli_json(&addr, &["worker", "list"]);
    let list = list.as_array().expect("worker list --json prints an array");
    let ids: Vec<&Value> = list.iter().map(|w| &w["worker_id"]).collect();
    assert_eq!(
        ids,
        [&json!("worker-x"), &json!("worker-y")],
        "sorted by id"
    );
    let (x, y) = (&list[0], &list[1]);
    assert_eq!(
        (
            &x["tasks_completed"],
            &x["tasks_failed"],
            &x["current_load"]
        ),
        (&json!(2), &json!(1), &json!(2)),
        "{x}"
    );
    assert_eq!(x["max_concurrency"], 10, "the default concurrency: {x}");
    assert_eq!(
        (&y["tasks_completed"], &y["tasks_failed"]),
        (&json!(1), &json!(0)),
        "{y}"
    );

    let out = cli_ok(&addr, &["worker", "list"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one line per worker: {out}");
    assert!(
        lines[0].contains("WORKER ID") && lines[0].contains("STATUS"),
        "{out}"
    );
    assert!(lines[1].starts_with("worker-x"), "{out}");
    assert!(
        lines[1].contains("2/10") && lines[1].contains("count-me"),
        "{out}"
    );
    assert!(lines[2].starts_with("worker-y"), "{out}");

    let w = worker_info(&addr, "worker-x");
    assert_eq!(w["tasks_completed"], 2, "{w}");
    assert_eq!(w["tasks_failed"], 1, "{w}");
    let p = process(&w, "count-me");
    assert_eq!(
        (&p["run_count"], &p["fail_count"]),
        (&json!(2), &json!(1)),
        "{w}"
    );
    assert_time_text(&p["last_run_at"]);
    assert!(
        ms(&p["last_run_at_ms"]) >= ms(&w["registered_at_ms"]),
        "{w}"
    );
    assert!(
        ms(&w["last_heartbeat_ms"]) >= ms(&w["registered_at_ms"]),
        "{w}"
    );

    let out = cli_ok(&addr, &["worker", "info", "worker-x"]);
    for needle in ["worker-x", "action", "2/10", "count-me"] {
        assert!(out.contains(needle), "info shows {needle}: {out}");
    }

    // Workers live in their namespace.
    assert_eq!(
        cli_json(&addr, &["--namespace", "other", "worker", "list"]),
        json!([])
    );
    assert_eq!(
        cli_ok(&addr, &["--namespace", "other", "worker", "list"])
            .lines()
            .count(),
        1,
        "just the header"
    );
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn worker_mistakes_fail_with_a_clear_message_and_exit_code_1_or_2_for_usage() {
    let (_dir, server, addr) = start();
    register_action(&addr, "process-order", &[]);

    // An await by a worker that never registered.
    let stderr = cli_fails(
        &addr,
        &[
            "worker",
            "await",
            "process-order",
            "--worker-id",
            "ghost",
            "--block",
            AWAIT_NOTHING_MS,
        ],
    );
    assert!(
        stderr.contains("ghost"),
        "the message names the worker: {stderr}"
    );

    // A complete (or touch, or fail) by a worker that does not hold the lease.
    register_worker(&addr, "worker-1", &["process-order"]);
    register_worker(&addr, "worker-2", &["process-order"]);
    let run_id = invoke(&addr, "process-order", "{}");
    assert_eq!(
        task_id(&await_task(&addr, "worker-1", "process-order")),
        run_id
    );
    let by_worker_2 = |command: &str, extra: &[&str]| {
        let mut args = vec![
            "worker",
            command,
            &run_id,
            "--worker-id",
            "worker-2",
            "--action",
            "process-order",
        ];
        args.extend_from_slice(extra);
        let stderr = cli_fails(&addr, &args);
        assert!(
            stderr.contains(&run_id) || stderr.contains("worker-2"),
            "{command} by the wrong worker names the task or the worker: {stderr}"
        );
    };
    by_worker_2("complete", &["--result", "{}"]);
    by_worker_2("touch", &["--extend", "1000"]);
    by_worker_2("fail", &["--error", "not mine"]);
    assert_eq!(run_status(&addr, &run_id)["status"], "running");
    complete(&addr, "worker-1", "process-order", &run_id, r#""mine""#);
    assert_eq!(run_status(&addr, &run_id)["output"], "mine");

    // A task that was never leased, or does not exist.
    let stderr = cli_fails(
        &addr,
        &[
            "worker",
            "complete",
            "process-order-999",
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
        ],
    );
    assert!(stderr.contains("process-order-999"), "{stderr}");

    // Info on a worker that does not exist.
    let stderr = cli_fails(&addr, &["worker", "info", "nobody"]);
    assert!(stderr.contains("nobody"), "{stderr}");

    // JSON arguments are checked by the CLI before anything is sent: usage errors.
    let stderr = cli_usage_fails(
        &addr,
        &[
            "worker",
            "complete",
            &run_id,
            "--worker-id",
            "worker-1",
            "--action",
            "process-order",
            "--result",
            "{not json",
        ],
    );
    assert!(
        stderr.contains("--result") && stderr.contains("JSON"),
        "{stderr}"
    );
    let stderr = cli_usage_fails(
        &addr,
        &[
            "worker",
            "register",
            "worker-3",
            "process-order",
            "--labels",
            "[1,2]",
        ],
    );
    assert!(stderr.contains("--labels"), "{stderr}");
    let stderr = cli_usage_fails(
        &addr,
        &[
            "worker",
            "register",
            "worker-3",
            "process-order",
            "--metadata",
            "{oops",
        ],
    );
    assert!(stderr.contains("--metadata"), "{stderr}");
    let stderr = cli_fails(&addr, &["worker", "info", "worker-3"]);
    assert!(
        stderr.contains("worker-3"),
        "a refused registration registers nothing: {stderr}"
    );
    server.stop();
}

/// `flo worker await --home-only`: only the tasks of the worker's home shard are leased
/// (the other shard is not asked); a plain await then takes the other shard's.
#[test]
fn a_home_only_await_takes_only_the_tasks_of_the_workers_home_shard() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let addr = server.addr_string();
    register_action(&addr, "resize", &["--timeout", "30000"]);
    // Room for every task: an await splits its room between the shards it asks.
    let mut args = vec!["worker", "register", "resizer", "resize"];
    args.extend_from_slice(&["--max-concurrency", "64"]);
    cli_ok(&addr, &args);
    let mut client = server.client();
    let map = client.shard_map().unwrap();
    let home = map.shard_of("default", "resizer").unwrap();
    let on_shard = |shard: u32| {
        let mut on = flo::Client::connect_on_shard(server.addr, None, shard).unwrap();
        (0..4)
            .map(|n| {
                let input = format!(r#"{{"image":{n}}}"#);
                let opts = flo::InvokeOptions::default();
                let run_id = on.invoke("resize", input.as_bytes(), opts).unwrap();
                assert_eq!(map.shard_of("default", &run_id), Some(shard));
                run_id
            })
            .collect::<Vec<String>>()
    };
    let mut homes = on_shard(home);
    let mut others = on_shard(1 - home);
    let await_ids = |extra: &[&str]| {
        let mut args = vec![
            "worker",
            "await",
            "resize",
            "--worker-id",
            "resizer",
            "--max",
            "16",
            "--block",
            AWAIT_NOTHING_MS,
        ];
        args.extend_from_slice(extra);
        let tasks = cli_json(&addr, &args);
        let mut ids: Vec<String> = tasks
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {tasks}"))
            .iter()
            .map(task_id)
            .collect();
        ids.sort();
        ids
    };
    homes.sort();
    others.sort();
    assert_eq!(
        await_ids(&["--home-only"]),
        homes,
        "the home shard's tasks only"
    );
    assert_eq!(await_ids(&["--home-only"]), Vec::<String>::new());
    assert_eq!(await_ids(&[]), others, "a plain await asks the other shard");
}
