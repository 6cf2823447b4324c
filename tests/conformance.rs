//! Conformance with the reference product's CLI behaviour, end to end through the `flo`
//! CLI (and the SDK where it has the call) against a real server: concurrent awaits of one
//! worker, caller-chosen run ids, history paging, KV conditions and expiry, blocking KV
//! reads, exit codes, far-future timeouts. One test per item.

mod common;

use common::{TestServer, cli_command, cli_json, cli_ok, run_cli, temp_dir, wait_until};
use flo::PutOptions;
use flo::protocol::{ErrorCode, KV_WAIT_MS_MAX};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn start() -> (tempfile::TempDir, TestServer, String) {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    (dir, server, addr)
}

/// Runs the CLI expecting exit `code`, nothing on stdout and `error: ...` on stderr;
/// returns stderr.
fn cli_exit(addr: &str, args: &[&str], code: i32) -> String {
    let (status, stdout, stderr) = run_cli(addr, args);
    assert_eq!(
        status.code(),
        Some(code),
        "flo {args:?} should exit {code}; stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.is_empty(), "flo {args:?} printed: {stdout}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// `flo --addr ADDR --json ARGS...` started in the background, stdout piped.
fn spawn_json(addr: &str, args: &[&str]) -> Child {
    let mut cmd = cli_command();
    cmd.arg("--addr")
        .arg(addr)
        .arg("--json")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn the flo binary")
}

/// Waits for a background CLI run: (exit code, stdout, stderr).
fn finish(mut child: Child) -> (Option<i32>, String, String) {
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), stdout, stderr)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn create_workflow(addr: &str, dir: &Path, name: &str, yaml: &str) -> Value {
    let file = write(dir, &format!("{name}.yaml"), yaml);
    cli_json(addr, &["workflow", "create", "-f", file.to_str().unwrap()])
}

fn run_status(addr: &str, run: &str) -> Value {
    cli_json(addr, &["workflow", "status", run])
}

fn wait_status(addr: &str, run: &str, want: &str) -> Value {
    assert!(
        wait_until(Duration::from_secs(10), || run_status(addr, run)["status"]
            == want),
        "run {run} never became {want}: {}",
        run_status(addr, run)
    );
    run_status(addr, run)
}

/// Two signal waits in a row: a run with a handful of history events, no action needed.
const TWO_WAITS: &str = r#"
kind: Workflow
name: two-waits
version: "1"
idempotency: optional
start:
  waitForSignal: {type: first, timeoutMs: 600000}
  transitions: {success: second}
steps:
  second:
    waitForSignal: {type: second, timeoutMs: 600000}
    transitions: {success: flo.Completed}
"#;

// ---------------------------------------------------------------------------------------------
// 1. Concurrent awaits of one worker
// ---------------------------------------------------------------------------------------------

/// Two `worker await` calls of the same worker id open at once (two slots) each receive a
/// task of their own, through the CLI and through the SDK (two threads).
#[test]
fn concurrent_awaits_of_one_worker_each_receive_their_own_task() {
    let (_dir, server, addr) = start();
    cli_ok(
        &addr,
        &["action", "register", "slots", "--timeout", "60000"],
    );
    cli_ok(&addr, &["worker", "register", "w-slots", "slots"]);

    let await_args = [
        "worker",
        "await",
        "slots",
        "--worker-id",
        "w-slots",
        "--block",
        "20000",
    ];
    let first = spawn_json(&addr, &await_args);
    std::thread::sleep(Duration::from_millis(400));
    let second = spawn_json(&addr, &await_args);
    // The second await must not answer the first one empty.
    std::thread::sleep(Duration::from_millis(400));
    for i in 0..2 {
        cli_ok(
            &addr,
            &["action", "invoke", "slots", &format!("{{\"n\":{i}}}")],
        );
    }
    let mut ids = BTreeSet::new();
    for child in [first, second] {
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let task: Value = serde_json::from_str(&stdout).unwrap();
        let id = task["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("an await got no task: {stdout}"));
        ids.insert(id.to_string());
    }
    assert_eq!(ids.len(), 2, "each await got its own task: {ids:?}");

    // The SDK: two threads awaiting as the same worker.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || c.await_tasks("w-slots", &["slots"], 1, 20_000).unwrap())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(600));
    let mut c = server.client();
    for i in 2..4 {
        let input = format!("{{\"n\":{i}}}");
        c.invoke("slots", input.as_bytes(), Default::default())
            .unwrap();
    }
    let mut sdk_ids = BTreeSet::new();
    for t in threads {
        let tasks = t.join().unwrap();
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        sdk_ids.insert(tasks[0].task_id.clone());
    }
    assert_eq!(sdk_ids.len(), 2, "{sdk_ids:?}");
    assert!(ids.is_disjoint(&sdk_ids), "a task went to one await only");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 2. Caller-chosen run ids
// ---------------------------------------------------------------------------------------------

#[test]
fn a_run_started_with_a_run_id_has_exactly_that_id_and_a_second_start_conflicts() {
    let (dir, server, addr) = start();
    create_workflow(&addr, dir.path(), "two-waits", TWO_WAITS);

    // Several ids, so that both shards own some of them.
    for id in ["order-42", "order:43", "ORD_44.a", "x"] {
        let out = cli_ok(
            &addr,
            &["workflow", "start", "two-waits", "{}", "--run-id", id],
        );
        assert_eq!(out.trim(), id);
        let run = wait_status(&addr, id, "waiting");
        assert_eq!(run["run_id"], id);
        let again = cli_exit(
            &addr,
            &["workflow", "start", "two-waits", "{}", "--run-id", id],
            1,
        );
        assert!(again.contains("exists already"), "{again}");
    }

    // An idempotency key that matches the existing run's gives that run back.
    let args = [
        "workflow",
        "start",
        "two-waits",
        "{}",
        "--run-id",
        "keyed-1",
        "--idempotency-key",
        "k-1",
    ];
    assert_eq!(cli_json(&addr, &args)["run_id"], "keyed-1");
    assert_eq!(cli_json(&addr, &args)["run_id"], "keyed-1");
    assert_eq!(run_status(&addr, "keyed-1")["idempotency_key"], "k-1");
    let mut other_key = args.to_vec();
    other_key[7] = "k-2";
    cli_exit(&addr, &other_key, 1);

    // Refused before reaching the server: charset, length, the reserved prefix.
    let long = "a".repeat(257);
    for bad in ["has space", "semi;colon", "", long.as_str(), "wfrun:mine"] {
        let err = cli_exit(
            &addr,
            &["workflow", "start", "two-waits", "{}", "--run-id", bad],
            2,
        );
        assert!(err.contains("--run-id"), "{err}");
    }

    // The SDK's field; the server checks it too.
    let mut c = server.client();
    let opts = flo::StartOptions {
        run_id: Some("sdk-run".into()),
        ..Default::default()
    };
    assert_eq!(
        c.start_workflow("two-waits", b"{}", opts.clone()).unwrap(),
        "sdk-run"
    );
    match c.start_workflow("two-waits", b"{}", opts) {
        Err(flo::Error::Server(e)) => assert_eq!(e.code, ErrorCode::Conflict, "{e}"),
        other => panic!("a second start must conflict: {other:?}"),
    }
    let bad = flo::StartOptions {
        run_id: Some("no spaces".into()),
        ..Default::default()
    };
    match c.start_workflow("two-waits", b"{}", bad) {
        Err(flo::Error::Server(e)) => assert_eq!(e.code, ErrorCode::BadRequest, "{e}"),
        other => panic!("an invalid id must be refused: {other:?}"),
    }
    // Server-picked ids are untouched.
    let picked = cli_ok(&addr, &["workflow", "start", "two-waits", "{}"]);
    assert!(picked.trim().starts_with("wfrun-"), "{picked}");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 3. History paging
// ---------------------------------------------------------------------------------------------

#[test]
fn history_pages_with_limit_and_after_cover_the_whole_history_in_order() {
    let (dir, server, addr) = start();
    create_workflow(&addr, dir.path(), "two-waits", TWO_WAITS);
    let run = cli_ok(
        &addr,
        &["workflow", "start", "two-waits", "{}", "--run-id", "paged"],
    );
    assert_eq!(run.trim(), "paged");
    wait_status(&addr, "paged", "waiting");
    for signal in ["first", "second"] {
        cli_ok(&addr, &["workflow", "signal", "paged", "--type", signal]);
    }
    wait_status(&addr, "paged", "completed");

    let full = cli_json(&addr, &["workflow", "history", "paged"]);
    let full = full["events"].as_array().unwrap().clone();
    assert!(full.len() >= 7, "{full:?}");
    let seqs: Vec<u64> = full.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=full.len() as u64).collect::<Vec<_>>());

    let mut paged = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let mut args = vec![
            "workflow".to_string(),
            "history".into(),
            "paged".into(),
            "--limit".into(),
            "3".into(),
        ];
        if let Some(a) = after {
            args.extend(["--after".into(), a.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = cli_json(&addr, &args);
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 3 && !events.is_empty(), "{page}");
        paged.extend(events.iter().cloned());
        pages += 1;
        match page["next_after"].as_u64() {
            Some(next) => {
                assert_eq!(Some(next), events.last().unwrap()["seq"].as_u64());
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(paged, full, "the pages, in order, are the whole history");
    assert_eq!(pages, full.len().div_ceil(3));

    // Human form: the cursor of the next page is printed.
    let text = cli_ok(&addr, &["workflow", "history", "paged", "--limit", "2"]);
    assert!(
        text.contains("flo workflow history paged --limit 2 --after 2"),
        "{text}"
    );
    // Its columns line up: each event's type is padded to the header's EVENT column, so
    // the step column begins where the header's STEP does.
    let header = text.lines().next().unwrap();
    let step_at = header.find("STEP").unwrap();
    for line in text.lines().skip(1).take(2) {
        assert_eq!(&line[step_at - 1..step_at], " ", "{text}");
        assert_ne!(&line[step_at..=step_at], " ", "{text}");
    }
    // Past the end: an empty page without a cursor.
    let end = cli_json(&addr, &["workflow", "history", "paged", "--after", "1000"]);
    assert_eq!(end["events"], Value::Array(Vec::new()));
    assert_eq!(end["next_after"], Value::Null);
    cli_exit(&addr, &["workflow", "history", "paged", "--limit", "0"], 2);

    // The SDK.
    let mut c = server.client();
    let page = c.workflow_history_page("paged", Some(4), Some(2)).unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![3, 4, 5, 6]);
    assert_eq!(page.next_after, Some(6));
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 4. KV conditions and expiry
// ---------------------------------------------------------------------------------------------

#[test]
fn kv_put_conditions_nx_xx_cas_and_ttl_durations() {
    let (_dir, server, addr) = start();
    let put = |args: &[&str]| {
        let mut all = vec!["kv", "put"];
        all.extend_from_slice(args);
        cli_json(&addr, &all)["version"].as_u64().unwrap()
    };
    let get = |key: &str| cli_json(&addr, &["kv", "get", key]);

    // --nx: only if absent (the same as --if-version 0).
    assert_eq!(put(&["k", "v1", "--nx"]), 1);
    let err = cli_exit(&addr, &["kv", "put", "k", "v2", "--nx"], 1);
    assert!(err.contains("exists"), "{err}");
    cli_exit(&addr, &["kv", "put", "k", "v2", "--if-version", "0"], 1);
    // --xx: only if present.
    let err = cli_exit(&addr, &["kv", "put", "absent", "v", "--xx"], 1);
    assert!(err.contains("not found"), "{err}");
    assert_eq!(put(&["k", "v2", "--xx"]), 2);
    // --cas V: --if-version V.
    assert_eq!(put(&["k", "v3", "--cas", "2"]), 3);
    let err = cli_exit(&addr, &["kv", "put", "k", "v4", "--cas", "2"], 1);
    assert!(err.contains("expected 2, current is 3"), "{err}");
    assert_eq!(put(&["k", "v4", "--xx", "--cas", "3"]), 4);
    assert_eq!(get("k")["value"], "v4");
    // --nx with --xx or --cas: a usage error, nothing sent.
    for args in [
        ["kv", "put", "n", "v", "--nx", "--xx"],
        ["kv", "put", "n", "v", "--nx", "--cas"],
    ] {
        let mut args = args.to_vec();
        if args[5] == "--cas" {
            args.push("1");
        }
        cli_exit(&addr, &args, 2);
    }
    cli_exit(&addr, &["kv", "get", "n"], 1);

    // --ttl durations; a bare number is milliseconds; 0 is no expiry.
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let before = now_ms();
    put(&["t5m", "v", "--ttl", "5m"]);
    let at = get("t5m")["expires_at_ms"].as_u64().unwrap();
    assert!(
        (before + 300_000..=now_ms() + 300_000).contains(&at),
        "{at} vs {before}"
    );
    put(&["t1s", "v", "--ttl", "1s"]);
    let at = get("t1s")["expires_at_ms"].as_u64().unwrap();
    assert!((before + 1000..=now_ms() + 1000).contains(&at));
    put(&["tbare", "v", "--ttl", "60000"]);
    let at = get("tbare")["expires_at_ms"].as_u64().unwrap();
    assert!((before + 60_000..=now_ms() + 60_000).contains(&at));
    put(&["t0", "v", "--ttl", "0"]);
    assert_eq!(get("t0")["expires_at_ms"], Value::Null);
    put(&["short", "v", "--ttl", "500ms"]);
    assert!(get("short")["expires_at_ms"].is_u64());
    assert!(
        wait_until(Duration::from_secs(10), || run_cli(
            &addr,
            &["kv", "get", "short"]
        )
        .0
        .code()
            == Some(1)),
        "a 500ms key expires"
    );
    cli_exit(&addr, &["kv", "put", "bad", "v", "--ttl", "soon"], 2);

    // An overwrite without a TTL clears the old one.
    put(&["keep", "v1", "--ttl", "5m"]);
    assert!(get("keep")["expires_at_ms"].is_u64());
    put(&["keep", "v2"]);
    assert_eq!(get("keep")["expires_at_ms"], Value::Null);

    // The SDK's flag.
    let mut c = server.client();
    let xx = PutOptions {
        if_exists: true,
        ..Default::default()
    };
    match c.kv_put("nowhere", b"v", xx) {
        Err(flo::Error::Server(e)) => assert_eq!(e.code, ErrorCode::NotFound, "{e}"),
        other => panic!("--xx on an absent key: {other:?}"),
    }
    assert_eq!(c.kv_put("keep", b"v3", xx).unwrap(), 3);
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 5. Blocking KV reads
// ---------------------------------------------------------------------------------------------

#[test]
fn kv_get_wait_returns_when_the_key_is_written_and_times_out_cleanly() {
    let (_dir, server, addr) = start();
    // Several keys: some owned by the shard a CLI connects to, some by the other.
    for i in 0..4 {
        let key = format!("late-{i}");
        let waiting = spawn_json(&addr, &["kv", "get", &key, "--wait", "20000"]);
        std::thread::sleep(Duration::from_millis(300));
        cli_ok(&addr, &["kv", "put", &key, &format!("value-{i}")]);
        let (code, stdout, stderr) = finish(waiting);
        // Answered by the write: the value is in the answer (the wait's own 20 s limit
        // answers without one).
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let doc: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(doc["value"], format!("value-{i}"));
    }

    // A key that exists: answered with it, not after the wait.
    let doc = cli_json(&addr, &["kv", "get", "late-0", "--wait", "20000"]);
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["value"], "value-0");

    // --block with --after-version: the next version.
    let waiting = spawn_json(
        &addr,
        &[
            "kv",
            "get",
            "late-1",
            "--block",
            "20000",
            "--after-version",
            "1",
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    cli_ok(&addr, &["kv", "put", "late-1", "newer"]);
    let (code, stdout, stderr) = finish(waiting);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (doc["value"].as_str(), doc["version"].as_u64()),
        (Some("newer"), Some(2))
    );
    // A version already newer: at once.
    let doc = cli_json(
        &addr,
        &[
            "kv",
            "get",
            "late-1",
            "--block",
            "20000",
            "--after-version",
            "1",
        ],
    );
    assert_eq!(doc["version"], 2);

    // 0 answers at once; a wait that ends without a value: not found, timed out.
    let started = Instant::now();
    let err = cli_exit(&addr, &["kv", "get", "never", "--wait", "0"], 1);
    assert!(err.contains("not found"), "{err}");
    let err = cli_exit(&addr, &["kv", "get", "never", "--wait", "400"], 1);
    assert!(
        err.contains("not found") && err.contains("timed out"),
        "{err}"
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    let err = cli_exit(
        &addr,
        &[
            "kv",
            "get",
            "late-1",
            "--block",
            "300",
            "--after-version",
            "2",
        ],
        1,
    );
    assert!(err.contains("newer than 2"), "{err}");
    // Above the maximum: a usage error; through the SDK a clear refusal.
    let over = (KV_WAIT_MS_MAX + 1).to_string();
    cli_exit(&addr, &["kv", "get", "never", "--wait", &over], 2);
    let mut c = server.client();
    match c.kv_get_wait("never", KV_WAIT_MS_MAX + 1, None) {
        Err(flo::Error::Server(e)) => {
            assert_eq!(e.code, ErrorCode::BadRequest);
            assert!(e.message.contains("300000"), "{e}");
        }
        other => panic!("a wait over the maximum: {other:?}"),
    }
    // The SDK: waits, then gets the value written meanwhile.
    let mut writer = server.client();
    let reader = std::thread::spawn(move || c.kv_get_wait("sdk-late", 20_000, None).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    writer
        .kv_put("sdk-late", b"here", PutOptions::default())
        .unwrap();
    let entry = reader
        .join()
        .unwrap()
        .expect("the value written while waiting");
    assert_eq!(entry.value, b"here");
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 6. Exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn exit_codes_tell_refused_usage_and_unreachable_apart_and_a_closed_pipe_is_quiet() {
    let (dir, server, addr) = start();
    // 0: success.
    cli_ok(&addr, &["kv", "put", "k", "v"]);
    // 1: the server refused, or nothing found.
    cli_exit(&addr, &["kv", "get", "missing"], 1);
    cli_exit(&addr, &["workflow", "status", "wfrun-999999"], 1);
    cli_exit(&addr, &["kv", "put", "k", "v", "--if-version", "7"], 1);
    // 2: usage errors, and a definition refused by validation.
    cli_exit(&addr, &["kv", "put", "only-a-key"], 2);
    cli_exit(&addr, &["workflow", "start", "w", "{not json"], 2);
    cli_exit(&addr, &["no-such-command"], 2);
    let bad = write(
        dir.path(),
        "bad.yaml",
        "kind: Workflow\nname: bad\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n",
    );
    let err = cli_exit(
        &addr,
        &["workflow", "create", "-f", bad.to_str().unwrap()],
        2,
    );
    assert!(err.contains("E303"), "{err}");
    let err = cli_exit(
        &addr,
        &["validate", "workflow", "-f", bad.to_str().unwrap()],
        2,
    );
    assert!(err.contains("E303"), "{err}");
    // 3: the server cannot be reached.
    let err = cli_exit("127.0.0.1:1", &["status"], 3);
    assert!(err.contains("cannot connect"), "{err}");
    cli_exit("127.0.0.1:1", &["kv", "get", "k"], 3);

    // Writing to a closed pipe (`flo ... | head -1`): a quiet exit, no panic.
    for i in 0..200 {
        cli_ok(
            &addr,
            &["kv", "put", &format!("many-{i:03}"), &"x".repeat(600)],
        );
    }
    for args in [
        &["kv", "list"][..],
        &["--json", "kv", "list"][..],
        &["status"][..],
    ] {
        let mut cmd = cli_command();
        cmd.arg("--addr")
            .arg(&addr)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        // The reader goes away before the command writes (like `head` after a line).
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "flo {args:?}: {stderr}");
        assert!(stderr.is_empty(), "flo {args:?} wrote: {stderr}");
    }
    // And through a shell pipe, as a user types it.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} --addr {addr} kv list | head -1",
            common::FLO_BIN
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// 7. Far-future timeouts
// ---------------------------------------------------------------------------------------------

const FAR: &str = "9223372036854775807";

#[test]
fn far_future_delays_are_accepted_as_never_and_the_server_keeps_serving() {
    let (dir, server, addr) = start();
    // A signal wait and retry delays of i64::MAX ms: valid, and the run waits.
    let yaml = format!(
        r#"
kind: Workflow
name: far
version: "1"
start:
  waitForSignal: {{type: go, timeoutMs: {FAR}}}
  transitions: {{success: work}}
steps:
  work:
    run: "@actions/far-task"
    retry: {{max_attempts: 3, initial_delay_ms: {FAR}, max_delay_ms: {FAR}}}
    poll: {{initialDelayMs: {FAR}, baseDelayMs: {FAR}}}
    transitions: {{success: flo.Completed, failure: flo.Failed}}
"#
    );
    let file = write(dir.path(), "far.yaml", &yaml);
    let valid = cli_json(
        &addr,
        &["validate", "workflow", "-f", file.to_str().unwrap()],
    );
    assert_eq!(valid["valid"], true, "{valid}");
    let created = create_workflow(&addr, dir.path(), "far", &yaml);
    assert_eq!(created["created"], true, "{created}");
    cli_ok(&addr, &["action", "register", "far-task"]);
    cli_ok(&addr, &["worker", "register", "far-worker", "far-task"]);
    let run = cli_ok(
        &addr,
        &["workflow", "start", "far", "{}", "--run-id", "far-1"],
    );
    assert_eq!(run.trim(), "far-1");
    wait_status(&addr, "far-1", "waiting");
    let text = cli_ok(&addr, &["workflow", "status", "far-1"]);
    assert!(text.contains("waiting"), "{text}");
    // The step's task fails: its retry is due "never", the run waits and stays readable.
    cli_ok(&addr, &["workflow", "signal", "far-1", "--type", "go"]);
    let task = cli_json(
        &addr,
        &[
            "worker",
            "await",
            "far-task",
            "--worker-id",
            "far-worker",
            "--block",
            "10000",
        ],
    );
    let task_id = task["task_id"].as_str().unwrap();
    cli_ok(
        &addr,
        &[
            "worker",
            "fail",
            task_id,
            "--worker-id",
            "far-worker",
            "--action",
            "far-task",
            "--error",
            "try later",
        ],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        let run = run_status(&addr, "far-1");
        run["status"] == "waiting" && run["steps"][1]["outcome"] == "failure"
    }));
    cli_ok(&addr, &["workflow", "history", "far-1"]);

    // An invocation delayed by i64::MAX ms: pending, available "never".
    let run = cli_json(
        &addr,
        &["action", "invoke", "far-task", "{}", "--delay", FAR],
    );
    let run_id = run["run_id"].as_str().unwrap();
    let status = cli_json(&addr, &["action", "status", run_id]);
    assert_eq!(status["status"], "pending", "{status}");
    assert_eq!(status["available_at"], "never", "{status}");
    // A TTL of i64::MAX ms: no expiry.
    cli_ok(&addr, &["kv", "put", "forever", "v", "--ttl", FAR]);
    assert_eq!(
        cli_json(&addr, &["kv", "get", "forever"])["expires_at_ms"],
        Value::Null
    );
    // Beyond i64::MAX: a clear refusal, not an overflow.
    let too_far = "9223372036854775808";
    let over = yaml.replacen(
        &format!("timeoutMs: {FAR}"),
        &format!("timeoutMs: {too_far}"),
        1,
    );
    let file = write(dir.path(), "too-far.yaml", &over);
    let err = cli_exit(
        &addr,
        &["validate", "workflow", "-f", file.to_str().unwrap()],
        2,
    );
    assert!(err.contains("E503"), "{err}");

    // `worker await` for an action not registered, by a worker registered for it: no
    // task after its block time, not an error.
    cli_ok(
        &addr,
        &["worker", "register", "early-worker", "not-yet-registered"],
    );
    let started = Instant::now();
    let doc = cli_json(
        &addr,
        &[
            "worker",
            "await",
            "not-yet-registered",
            "--worker-id",
            "early-worker",
            "--block",
            "400",
        ],
    );
    assert_eq!(doc, Value::Null);
    assert!(started.elapsed() >= Duration::from_millis(400));
    let text = cli_ok(
        &addr,
        &[
            "worker",
            "await",
            "not-yet-registered",
            "--worker-id",
            "early-worker",
            "--block",
            "0",
        ],
    );
    assert_eq!(text.trim(), "no task");
    // ...and an action the worker is not registered for is still an error.
    cli_exit(
        &addr,
        &[
            "worker",
            "await",
            "nobody-does-this",
            "--worker-id",
            "early-worker",
            "--block",
            "0",
        ],
        1,
    );

    // A `timeout` transition on a wait step without `timeoutMs`: a warning (W104); with
    // `timeoutMs`, it is followed when the time is up.
    let never = r#"
kind: Workflow
name: never-times-out
version: "1"
start:
  waitForSignal: {type: go}
  transitions: {success: flo.Completed, timeout: Late}
terminals:
  Late: {status: failed}
"#;
    let file = write(dir.path(), "never.yaml", never);
    let valid = cli_json(
        &addr,
        &["validate", "workflow", "-f", file.to_str().unwrap()],
    );
    let codes: Vec<&str> = valid["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"W104"), "{valid}");
    let timed = never
        .replace("never-times-out", "times-out")
        .replace("{type: go}", "{type: go, timeoutMs: 300}");
    create_workflow(&addr, dir.path(), "times-out", &timed);
    let run = cli_ok(&addr, &["workflow", "start", "times-out", "{}"]);
    let done = wait_status(&addr, run.trim(), "failed");
    assert_eq!(done["terminal"], "Late", "{done}");

    // Through all of it the server kept serving.
    cli_ok(&addr, &["status"]);
    server.stop();
}
