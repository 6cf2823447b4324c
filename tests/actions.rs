//! Actions end to end: WebAssembly actions registered, invoked and observed through the SDK
//! and the CLI against a real server (spec `flo-actions.md`).
//!
//! The guests are written as WAT text (the server accepts text as well as binary modules):
//! `flo_testkit::guests::guest` gives every module the same frame (host imports, one page of
//! memory, a bump `alloc`, a `$pack` helper) and each test supplies the body of `handle`.

mod common;

use common::{TestServer, cli_json, cli_ok, run_cli, temp_dir, wait_until};
use flo::protocol::{
    ActionInfo, ActionKind, ActionSpec, ErrorCode, InvokeSpec, Op, Reply, RunInfo, RunStatus,
    WorkflowRunStatus,
};
use flo::{Client, Error, InvokeOptions, PutOptions};
use flo_testkit::guests::{
    POLL_ONEOFF_IMPORT, code_guest, echo_guest, fixed_guest, guest, guest_with_imports, reusable,
    sleep_guest, sleep_wat, spin_guest, trap_guest, wat_string,
};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Guests
// ---------------------------------------------------------------------------------------------

/// Returns `{"input":INPUT}`.
fn wrap_guest() -> String {
    guest(
        &[(0, r#"{"input":"#)],
        r#"
    (local.set $out (call $alloc (i32.add (local.get $len) (i32.const 10))))
    (memory.copy (local.get $out) (i32.const 0) (i32.const 9))
    (memory.copy (i32.add (local.get $out) (i32.const 9)) (local.get $ptr) (local.get $len))
    (i32.store8 (i32.add (i32.add (local.get $out) (i32.const 9)) (local.get $len)) (i32.const 125))
    (call $pack (local.get $out) (i32.add (local.get $len) (i32.const 10)))"#,
    )
}

/// Input = a key: `kv_set(key, "value-of:" + key)`, then `kv_get(key)` and returns what it read.
fn kv_set_get_guest() -> String {
    guest(
        &[(0, "value-of:")],
        r#"
    (local.set $out (call $alloc (i32.add (local.get $len) (i32.const 9))))
    (memory.copy (local.get $out) (i32.const 0) (i32.const 9))
    (memory.copy (i32.add (local.get $out) (i32.const 9)) (local.get $ptr) (local.get $len))
    (if (i32.ne (call $kv_set (local.get $ptr) (local.get $len)
                              (local.get $out) (i32.add (local.get $len) (i32.const 9)))
                (i32.const 0))
      (then (return (i64.const -3))))
    (local.set $buf (call $alloc (i32.const 2048)))
    (local.set $n (call $kv_get (local.get $ptr) (local.get $len) (local.get $buf) (i32.const 2048)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i64.const -3))))
    (call $pack (local.get $buf) (local.get $n))"#,
    )
}

/// Sets every `(key, value)` from data segments in one execution; returns `{"written":N}`.
fn kv_multi_set_guest(pairs: &[(String, String)]) -> String {
    let done = format!(r#"{{"written":{}}}"#, pairs.len());
    let mut data: Vec<(u32, String)> = vec![(0, done.clone())];
    let mut body = String::new();
    let mut offset = 64;
    for (key, value) in pairs {
        let (k, v) = (offset, offset + key.len() as u32);
        data.push((k, key.clone()));
        data.push((v, value.clone()));
        offset = v + value.len() as u32;
        body.push_str(&format!(
            "(if (i32.ne (call $kv_set (i32.const {k}) (i32.const {}) (i32.const {v}) (i32.const {})) (i32.const 0)) (then (return (i64.const -3))))\n    ",
            key.len(),
            value.len()
        ));
    }
    body.push_str(&format!(
        "(call $pack (i32.const 0) (i32.const {}))",
        done.len()
    ));
    let data: Vec<(u32, &str)> = data.iter().map(|(o, s)| (*o, s.as_str())).collect();
    guest(&data, &body)
}

/// Input = a key: returns its value, or `<absent>`.
fn kv_reader_guest() -> String {
    guest(
        &[(0, "<absent>")],
        r#"
    (local.set $buf (call $alloc (i32.const 2048)))
    (local.set $n (call $kv_get (local.get $ptr) (local.get $len) (local.get $buf) (i32.const 2048)))
    (if (i32.eq (local.get $n) (i32.const -1)) (then (return (call $pack (i32.const 0) (i32.const 8)))))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i64.const -3))))
    (call $pack (local.get $buf) (local.get $n))"#,
    )
}

/// Input = a key: deletes it, then reads it back: returns `deleted` or `still-there`.
fn kv_deleter_guest() -> String {
    guest(
        &[(0, "deleted"), (16, "still-there")],
        r#"
    (if (i32.ne (call $kv_delete (local.get $ptr) (local.get $len)) (i32.const 0))
      (then (return (i64.const -3))))
    (local.set $buf (call $alloc (i32.const 64)))
    (if (i32.eq (call $kv_get (local.get $ptr) (local.get $len) (local.get $buf) (i32.const 64)) (i32.const -1))
      (then (return (call $pack (i32.const 0) (i32.const 7)))))
    (call $pack (i32.const 16) (i32.const 11))"#,
    )
}

/// Writes `KEY` = `written-by-a-failed-attempt`, then fails with -3.
fn kv_set_then_fail_guest(key: &str) -> String {
    let value = "written-by-a-failed-attempt";
    guest(
        &[(0, key), (512, value)],
        &format!(
            "(drop (call $kv_set (i32.const 0) (i32.const {}) (i32.const 512) (i32.const {})))\n    (i64.const -3)",
            key.len(),
            value.len()
        ),
    )
}

/// Fails (-3) unless KV key `gate` exists; then returns `opened`.
fn gate_guest() -> String {
    guest(
        &[(0, "gate"), (16, "opened")],
        r#"
    (if (i32.lt_s (call $kv_get (i32.const 0) (i32.const 4) (i32.const 512) (i32.const 64)) (i32.const 0))
      (then (return (i64.const -3))))
    (call $pack (i32.const 16) (i32.const 6))"#,
    )
}

/// Logs `message` at `level`, returns `{}`.
fn log_guest(level: u8, message: &str) -> String {
    guest(
        &[(0, message), (1000, "{}")],
        &format!(
            "(call $log (i32.const {level}) (i32.const 0) (i32.const {}))\n    (call $pack (i32.const 1000) (i32.const 2))",
            message.len()
        ),
    )
}

/// Names the outcome `name` and returns `{"decision":"NAME"}`, or fails with -3 afterwards
/// when `then_fail`.
fn outcome_guest(name: &str, then_fail: bool) -> String {
    let output = format!(r#"{{"decision":"{name}"}}"#);
    let end = if then_fail {
        "(i64.const -3)".to_string()
    } else {
        format!("(call $pack (i32.const 100) (i32.const {}))", output.len())
    };
    guest(
        &[(0, name), (100, &output)],
        &format!(
            "(call $outcome (i32.const 0) (i32.const {}))\n    {end}",
            name.len()
        ),
    )
}

/// Grows memory by `pages` pages (64 KiB each); traps if refused; returns `grown`.
fn grow_guest(pages: u32) -> String {
    guest(
        &[(0, "grown")],
        &format!(
            "(if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1)) (then (unreachable)))\n    (call $pack (i32.const 0) (i32.const 5))"
        ),
    )
}

/// Input = a key: holds its execution slot, checking every 5 ms, until the key exists in KV;
/// then returns `released`.
fn gated_guest() -> String {
    guest_with_imports(
        POLL_ONEOFF_IMPORT,
        &[(0, "released")],
        &format!(
            r#"
    (local.set $buf (call $alloc (i32.const 64)))
    (block $open
      (loop $wait
        (br_if $open (i32.ge_s (call $kv_get (local.get $ptr) (local.get $len) (local.get $buf) (i32.const 64))
                               (i32.const 0)))
        {}
        (br $wait)))
    (call $pack (i32.const 0) (i32.const 8))"#,
            sleep_wat(5)
        ),
    )
}

/// Fails (-3) when the input starts with `x`, else echoes it.
fn picky_guest() -> String {
    guest(
        &[],
        r#"
    (if (i32.and (i32.gt_u (local.get $len) (i32.const 0))
                 (i32.eq (i32.load8_u (local.get $ptr)) (i32.const 120)))
      (then (return (i64.const -3))))
    (call $pack (local.get $ptr) (local.get $len))"#,
    )
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Each key of `keys` comes to hold `value-of:KEY` (within 5 s: writes to another shard are
/// forwarded after the completion), written once (version 1).
fn assert_guest_writes_applied_once(c: &mut Client, keys: &[String], when: &str) {
    for key in keys {
        let want = format!("value-of:{key}");
        assert!(
            wait_until(Duration::from_secs(5), || kv_value(c, key).as_deref()
                == Some(want.as_str())),
            "guest write of {key} not visible{when}: {:?}",
            kv_value(c, key)
        );
        assert_eq!(c.kv_get(key).unwrap().unwrap().version, 1, "{key}");
    }
}

fn wasm_spec(name: &str, wat: &str) -> ActionSpec {
    ActionSpec {
        namespace: String::new(),
        name: name.into(),
        kind: ActionKind::Wasm,
        wasm: Some(wat.as_bytes().to_vec()),
        timeout_ms: None,
        max_retries: None,
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    }
}

fn user_spec(name: &str) -> ActionSpec {
    ActionSpec {
        kind: ActionKind::User,
        wasm: None,
        ..wasm_spec(name, "")
    }
}

fn register(c: &mut Client, spec: ActionSpec) -> ActionInfo {
    let name = spec.name.clone();
    c.register_action(spec)
        .unwrap_or_else(|e| panic!("register {name}: {e}"))
}

fn invoke(c: &mut Client, action: &str, input: &str) -> String {
    c.invoke(action, input.as_bytes(), InvokeOptions::default())
        .unwrap_or_else(|e| panic!("invoke {action}: {e}"))
}

fn invoke_with(c: &mut Client, action: &str, input: &str, opts: InvokeOptions) -> String {
    c.invoke(action, input.as_bytes(), opts)
        .unwrap_or_else(|e| panic!("invoke {action}: {e}"))
}

/// Invokes and waits (up to 10 s) for the run to be final.
fn run_to_end(c: &mut Client, action: &str, input: &str) -> RunInfo {
    let info = c
        .invoke_and_wait(action, input.as_bytes(), InvokeOptions::default(), 10_000)
        .unwrap_or_else(|e| panic!("invoke {action}: {e}"));
    assert!(
        info.status.is_final(),
        "run of {action} not final after 10 s: {info:?}"
    );
    info
}

/// Waits (up to 10 s) for the run to be final.
fn wait_final(c: &mut Client, run_id: &str) -> RunInfo {
    let info = c
        .wait_run(run_id, 10_000)
        .unwrap_or_else(|e| panic!("wait for {run_id}: {e}"));
    assert!(
        info.status.is_final(),
        "run {run_id} not final after 10 s: {info:?}"
    );
    info
}

/// Polls the run until `cond` holds (up to 10 s); returns it then.
fn wait_for_run(
    c: &mut Client,
    run_id: &str,
    what: &str,
    mut cond: impl FnMut(&RunInfo) -> bool,
) -> RunInfo {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = c
            .run(run_id)
            .unwrap_or_else(|e| panic!("status of {run_id}: {e}"));
        if cond(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} never became {what}: {info:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_still_serving(c: &mut Client, step: &str) {
    let run = run_to_end(c, "echo", step);
    assert_completed(&run, step);
}

fn output_text(info: &RunInfo) -> String {
    String::from_utf8(
        info.output
            .clone()
            .unwrap_or_else(|| panic!("no output: {info:?}")),
    )
    .expect("UTF-8 output")
}

fn assert_completed(info: &RunInfo, output: &str) {
    assert_eq!(info.status, RunStatus::Completed, "{info:?}");
    assert_eq!(output_text(info), output, "{info:?}");
    assert_eq!(info.error, None, "{info:?}");
}

/// The error code and message of a call that must fail with a server error.
fn server_error<T: std::fmt::Debug>(result: Result<T, Error>) -> (ErrorCode, String) {
    match result {
        Err(Error::Server(e)) => (e.code, e.message),
        other => panic!("expected a server error, got {other:?}"),
    }
}

fn expect_error<T: std::fmt::Debug>(result: Result<T, Error>, code: ErrorCode) -> String {
    let (got, message) = server_error(result);
    assert_eq!(got, code, "{message}");
    assert!(!message.is_empty());
    message
}

/// Invokes through the raw protocol: returns the run id and whether a run was created.
fn invoke_raw(c: &mut Client, action: &str, input: &str, key: Option<&str>) -> (String, bool) {
    let spec = InvokeSpec {
        namespace: c.namespace().to_string(),
        action: action.into(),
        input: input.as_bytes().to_vec(),
        priority: None,
        delay_ms: None,
        idempotency_key: key.map(str::to_string),
        labels: None,
        wait_ms: None,
    };
    match c.call(Op::ActionInvoke(spec)) {
        Ok(Reply::Invoked { run_id, created }) => (run_id, created),
        other => panic!("invoke {action}: {other:?}"),
    }
}

/// The shard owning `key` in `namespace`, from the server's shard map and its fixed hash.
fn shard_of(c: &mut Client, namespace: &str, key: &str) -> u32 {
    match c.call(Op::ShardMap).expect("shard map") {
        Reply::ShardMap(map) => {
            assert_eq!(map.hash, flo_engine::hash::HASH_NAME);
            let hash = flo_engine::hash::stable_hash(namespace, key);
            map.owners[(hash % u64::from(map.partitions)) as usize]
        }
        other => panic!("unexpected reply {other:?}"),
    }
}

fn put(c: &mut Client, key: &str, value: &str) {
    c.kv_put(key, value.as_bytes(), PutOptions::default())
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

fn kv_value(c: &mut Client, key: &str) -> Option<String> {
    c.kv_get(key)
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
        .map(|e| String::from_utf8(e.value).expect("UTF-8 value"))
}

/// Runs the CLI expecting failure; returns stderr.
fn cli_fails(addr: &str, args: &[&str]) -> String {
    let (status, stdout, stderr) = run_cli(addr, args);
    assert!(
        !status.success(),
        "flo {args:?} should fail; stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// An RFC 3339 UTC time as the CLI prints it.
fn assert_time_text(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    assert!(
        s.len() >= 20 && s.as_bytes()[4] == b'-' && s.contains('T') && s.ends_with('Z'),
        "not an RFC 3339 UTC time: {s}"
    );
}

/// The shard a run lives on (and, for runs created without an idempotency key, the shard
/// that accepted the invocation and executes it).
fn shard_of_run(c: &mut Client, run_id: &str) -> u32 {
    let ns = c.namespace().to_string();
    shard_of(c, &ns, run_id)
}

// ---------------------------------------------------------------------------------------------
// 1. JSON in, JSON out
// ---------------------------------------------------------------------------------------------

#[test]
fn wasm_action_turns_json_input_into_json_output() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();

    let info = register(&mut c, wasm_spec("wrap", &wrap_guest()));
    assert_eq!(info.kind, ActionKind::Wasm);
    assert_eq!(info.version, 1);
    let input = r#"{"name":"flo","n":3}"#;
    let run = run_to_end(&mut c, "wrap", input);
    assert_completed(&run, r#"{"input":{"name":"flo","n":3}}"#);
    let output: Value = serde_json::from_slice(run.output.as_ref().unwrap()).unwrap();
    assert_eq!(output, json!({"input": {"name": "flo", "n": 3}}));
    assert_eq!(run.attempt, 1);
    assert_eq!(run.action, "wrap");
    assert_eq!(run.action_version, 1);
    assert_eq!(run.input, input.as_bytes());
    assert!(!run.dead_lettered);
    assert!(run.created_at_ms <= run.updated_at_ms, "{run:?}");
    assert_eq!(
        c.run(&run.run_id).unwrap(),
        run,
        "status equals the waited result"
    );

    // A fixed-output action registered from a .wat file through the CLI.
    let wat = dir.path().join("hello.wat");
    std::fs::write(&wat, fixed_guest(r#"{"greeting":"hello"}"#)).unwrap();
    let out = cli_ok(
        &addr,
        &[
            "action",
            "register",
            "hello",
            "--wasm",
            wat.to_str().unwrap(),
        ],
    );
    assert_eq!(out.trim(), "registered wasm action hello (version 1)");
    let out = cli_ok(
        &addr,
        &["action", "invoke", "hello", r#"{"x":1}"#, "--wait"],
    );
    assert_eq!(out, "{\"greeting\":\"hello\"}\n");
    let out = cli_ok(&addr, &["action", "invoke", "wrap", r#"{"x":1}"#, "--wait"]);
    assert_eq!(out, "{\"input\":{\"x\":1}}\n");

    // Without --wait: the run id; then its status as JSON.
    let doc = cli_json(&addr, &["action", "invoke", "wrap", r#"{"a":[1,2]}"#]);
    let run_id = doc["run_id"].as_str().expect("run_id").to_string();
    assert!(run_id.starts_with("wrap-"), "{run_id}");
    wait_final(&mut c, &run_id);
    let doc = cli_json(&addr, &["action", "status", &run_id]);
    assert_eq!(doc["run_id"], json!(run_id));
    assert_eq!(doc["action"], json!("wrap"));
    assert_eq!(doc["status"], json!("completed"));
    assert_eq!(doc["input"], json!({"a": [1, 2]}));
    assert_eq!(doc["output"], json!({"input": {"a": [1, 2]}}));
    assert_eq!(doc["error"], Value::Null);
    assert_eq!(doc["attempt"], json!(1));
    assert_time_text(&doc["created_at"]);
    assert_time_text(&doc["updated_at"]);

    let out = cli_ok(&addr, &["action", "status", &run_id]);
    assert!(out.contains("status:   completed"), "{out}");
    assert!(out.contains(r#"output:   {"input":{"a":[1,2]}}"#), "{out}");

    // An empty input reaches the guest as an empty input.
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let run = run_to_end(&mut c, "echo", "");
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.output.as_deref(), Some(&b""[..]));
    // An input over 1 MiB is refused.
    let big = vec![b'x'; (1 << 20) + 1];
    let msg = expect_error(
        c.invoke("echo", &big, InvokeOptions::default()),
        ErrorCode::BadRequest,
    );
    assert!(msg.contains("input"), "{msg}");

    // Unknown run and unknown action: clear errors.
    let err = cli_fails(&addr, &["action", "status", "wrap-999999"]);
    assert!(err.contains("not found"), "{err}");
    let msg = expect_error(
        c.invoke("nope", b"{}", InvokeOptions::default()),
        ErrorCode::NotFound,
    );
    assert!(msg.contains("nope"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// 2. KV host calls
// ---------------------------------------------------------------------------------------------

#[test]
fn guest_kv_writes_reads_and_deletes_reach_every_shard() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    assert_eq!(c.shard_count(), 2);

    // kv_set then kv_get of the same key in one execution, for keys on both shards. All runs
    // of this connection execute on one shard, so some of the writes are to the other one.
    register(&mut c, wasm_spec("set-get", &kv_set_get_guest()));
    let keys: Vec<String> = (0..8).map(|i| format!("guest/key-{i}")).collect();
    let key_shards: Vec<u32> = keys
        .iter()
        .map(|k| shard_of(&mut c, "default", k))
        .collect();
    assert!(
        key_shards.contains(&0) && key_shards.contains(&1),
        "the keys must span both shards: {key_shards:?}"
    );
    let mut run_shards = HashSet::new();
    let mut remote_writes = 0;
    for (key, &key_shard) in keys.iter().zip(&key_shards) {
        let run = run_to_end(&mut c, "set-get", key);
        assert_completed(&run, &format!("value-of:{key}"));
        let run_shard = shard_of_run(&mut c, &run.run_id);
        run_shards.insert(run_shard);
        remote_writes += usize::from(run_shard != key_shard);
    }
    assert!(remote_writes > 0, "some writes crossed shards");
    // Writes to the other shard are forwarded after the completion: give them a moment.
    assert_guest_writes_applied_once(&mut c, &keys, "");
    assert_eq!(
        cli_ok(&addr, &["kv", "get", &keys[0]]),
        format!("value-of:{}\n", keys[0])
    );
    assert_eq!(
        cli_ok(&addr, &["kv", "get", &keys[7]]),
        format!("value-of:{}\n", keys[7])
    );

    // Several keys from data segments in one execution.
    let pairs: Vec<(String, String)> = (0..8)
        .map(|i| (format!("multi/{i}"), format!("m-{i}")))
        .collect();
    let multi_shards: HashSet<u32> = pairs
        .iter()
        .map(|(k, _)| shard_of(&mut c, "default", k))
        .collect();
    assert_eq!(multi_shards.len(), 2, "the keys must span both shards");
    register(&mut c, wasm_spec("multi-set", &kv_multi_set_guest(&pairs)));
    let run = run_to_end(&mut c, "multi-set", "{}");
    assert_completed(&run, r#"{"written":8}"#);
    for (key, value) in &pairs {
        assert!(
            wait_until(Duration::from_secs(5), || kv_value(&mut c, key).as_deref()
                == Some(value.as_str())),
            "guest write of {key} not visible: {:?}",
            kv_value(&mut c, key)
        );
    }
    // A second run bumps the versions.
    run_to_end(&mut c, "multi-set", "{}");
    for (key, _) in &pairs {
        assert!(
            wait_until(Duration::from_secs(5), || c
                .kv_get(key)
                .unwrap()
                .is_some_and(|e| e.version == 2)),
            "second guest write of {key} not applied: {:?}",
            c.kv_get(key)
        );
    }

    // Reads of keys put beforehand, on either shard; an absent key reads as not found.
    register(&mut c, wasm_spec("reader", &kv_reader_guest()));
    for i in 0..8 {
        let key = format!("pre/{i}");
        put(&mut c, &key, &format!("preset {i}"));
    }
    let mut remote_reads = 0;
    for i in 0..8 {
        let key = format!("pre/{i}");
        let run = run_to_end(&mut c, "reader", &key);
        assert_completed(&run, &format!("preset {i}"));
        let run_shard = shard_of_run(&mut c, &run.run_id);
        remote_reads += usize::from(run_shard != shard_of(&mut c, "default", &key));
    }
    assert!(remote_reads > 0, "some reads crossed shards");
    assert_completed(&run_to_end(&mut c, "reader", "pre/none"), "<absent>");

    // kv_delete, on keys of both shards.
    register(&mut c, wasm_spec("deleter", &kv_deleter_guest()));
    for i in 0..8 {
        let key = format!("pre/{i}");
        let run = run_to_end(&mut c, "deleter", &key);
        assert_completed(&run, "deleted");
    }
    for i in 0..8 {
        let key = format!("pre/{i}");
        assert!(
            wait_until(Duration::from_secs(5), || kv_value(&mut c, &key).is_none()),
            "guest delete of {key} not applied"
        );
    }
    let err = cli_fails(&addr, &["kv", "get", "pre/0"]);
    assert!(err.contains("not found"), "{err}");

    // The writes of a failed attempt are discarded.
    for key in ["discard/a", "discard/b", "discard/c", "discard/d"] {
        let name = key.replace('/', "-");
        let spec = ActionSpec {
            max_retries: Some(0),
            ..wasm_spec(&name, &kv_set_then_fail_guest(key))
        };
        register(&mut c, spec);
        let run = run_to_end(&mut c, &name, "{}");
        assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    }
    std::thread::sleep(Duration::from_millis(200));
    for key in ["discard/a", "discard/b", "discard/c", "discard/d"] {
        assert_eq!(
            kv_value(&mut c, key),
            None,
            "write of a failed attempt kept: {key}"
        );
    }
}

/// A client that waited for a run to complete reads the run's KV writes, wherever the keys
/// live (the writes are "committed in the same UAL batch as the run's completion").
#[test]
fn guest_kv_writes_are_visible_as_soon_as_the_run_completes() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("set-get", &kv_set_get_guest()));
    let mut stale = Vec::new();
    for i in 0..40 {
        let key = format!("visible/{i}");
        let run = run_to_end(&mut c, "set-get", &key);
        assert_completed(&run, &format!("value-of:{key}"));
        let run_shard = shard_of_run(&mut c, &run.run_id);
        let key_shard = shard_of(&mut c, "default", &key);
        if kv_value(&mut c, &key).is_none() {
            stale.push((key, run_shard, key_shard));
        }
    }
    assert!(
        stale.is_empty(),
        "writes not visible right after their run completed (key, run shard, key shard): {stale:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. log
// ---------------------------------------------------------------------------------------------

#[test]
fn guest_log_lines_appear_on_server_stderr() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(
        &mut c,
        wasm_spec("warner", &log_guest(2, "disk almost full 7f3a")),
    );
    register(
        &mut c,
        wasm_spec("yeller", &log_guest(3, "something broke 9c1d")),
    );

    // `TIME LEVEL flo::guest: TEXT shard=N namespace=NS action=NAME run=ID`.
    let logged = |level: &str, text: &str, action: &str, run_id: &str| {
        let found = wait_until(Duration::from_secs(5), || {
            server.stderr().lines().any(|l| {
                l.contains(&format!(" {level} flo::guest: {text} "))
                    && l.contains(&format!("namespace=default action={action} run={run_id}"))
            })
        });
        assert!(
            found,
            "server stderr lacks {text:?} at {level}:\n{}",
            server.stderr()
        );
    };
    let run = run_to_end(&mut c, "warner", "{}");
    assert_completed(&run, "{}");
    logged("WARN", "disk almost full 7f3a", "warner", &run.run_id);
    let run = run_to_end(&mut c, "yeller", "{}");
    assert_completed(&run, "{}");
    logged("ERROR", "something broke 9c1d", "yeller", &run.run_id);
}

/// A server whose stderr nobody reads: once the pipe's buffer (64 KiB) is full, a write to
/// it blocks. Guest log lines used to be written by the shard thread, which then stopped
/// serving everyone; now they wait in a bounded queue for a writer thread of their own.
#[test]
fn a_guest_logging_to_a_stderr_nobody_reads_does_not_stall_its_shard() {
    let dir = temp_dir();
    let (mut child, addr) = common::spawn_with_own_stderr(dir.path(), 1);
    let _unread_stderr = child.stderr.take();
    // A 900-byte line per run: 256 runs log 230 KB, over three times what the pipe holds.
    let line = "x".repeat(900);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = Client::connect(addr).unwrap();
        register(&mut c, wasm_spec("chatty", &log_guest(2, &line)));
        for i in 0..256 {
            let run = run_to_end(&mut c, "chatty", "{}");
            assert_completed(&run, "{}");
            c.kv_put(&format!("k{i}"), b"v", PutOptions::default())
                .unwrap();
        }
        done_tx.send(()).unwrap();
    });
    let served = done_rx.recv_timeout(Duration::from_secs(120));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        served.is_ok(),
        "the shard stopped serving once its stderr pipe was full"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Outcome
// ---------------------------------------------------------------------------------------------

#[test]
fn guest_outcome_is_recorded_on_the_run() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    register(
        &mut c,
        wasm_spec("approver", &outcome_guest("approved", false)),
    );
    let run = run_to_end(&mut c, "approver", "{}");
    assert_completed(&run, r#"{"decision":"approved"}"#);
    assert_eq!(run.outcome.as_deref(), Some("approved"));
    assert_eq!(
        c.run(&run.run_id).unwrap().outcome.as_deref(),
        Some("approved")
    );
    let doc = cli_json(&addr, &["action", "status", &run.run_id]);
    assert_eq!(doc["outcome"], json!("approved"));
    let out = cli_ok(&addr, &["action", "status", &run.run_id]);
    assert!(out.contains("outcome:  approved"), "{out}");

    // An outcome named by an attempt that then failed is not kept.
    let spec = ActionSpec {
        max_retries: Some(0),
        ..wasm_spec("flaky-approver", &outcome_guest("approved", true))
    };
    register(&mut c, spec);
    let run = run_to_end(&mut c, "flaky-approver", "{}");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.outcome, None, "{run:?}");
}

// ---------------------------------------------------------------------------------------------
// 5. Failure paths
// ---------------------------------------------------------------------------------------------

#[test]
fn failing_guests_fail_their_runs_with_clear_errors_and_the_server_keeps_serving() {
    let dir = temp_dir();
    let mut server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));

    // A trap: retried (immediately, base delay 0), then failed and dead-lettered.
    let spec = ActionSpec {
        max_retries: Some(1),
        retry_delay_ms: Some(0),
        ..wasm_spec("trapper", &trap_guest())
    };
    register(&mut c, spec);
    let run = run_to_end(&mut c, "trapper", "{}");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.attempt, 2, "one retry: {run:?}");
    assert!(run.dead_lettered, "{run:?}");
    assert_eq!(run.output, None);
    let error = run.error.clone().unwrap_or_default();
    assert!(
        error.contains("trap") && error.contains("unreachable"),
        "{error}"
    );
    assert_still_serving(&mut c, "after a trap");

    // Error codes returned by handle.
    for (code, words) in [
        (-1, &["invalid", "-1"][..]),
        (-2, &["allocate", "-2"][..]),
        (-3, &["execution error", "-3"][..]),
        (-7, &["error code -7"][..]),
    ] {
        let name = format!("code{code}");
        let spec = ActionSpec {
            max_retries: Some(0),
            ..wasm_spec(&name, &code_guest(code))
        };
        register(&mut c, spec);
        let run = run_to_end(&mut c, &name, "{}");
        assert_eq!(run.status, RunStatus::Failed, "{run:?}");
        assert_eq!(run.attempt, 1);
        assert!(run.dead_lettered);
        let error = run.error.clone().unwrap_or_default();
        for word in words {
            assert!(
                error.contains(word),
                "error for {code} lacks {word:?}: {error}"
            );
        }
    }
    assert_still_serving(&mut c, "after error codes");

    // Memory growth past the limit fails the run; growth within it is fine.
    let spec = ActionSpec {
        max_retries: Some(0),
        memory_limit_mb: Some(1),
        wasm_entrypoint: None,
        ..wasm_spec("hog", &grow_guest(64))
    };
    assert_eq!(register(&mut c, spec).memory_limit_mb, 1);
    let run = run_to_end(&mut c, "hog", "{}");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    let error = run.error.clone().unwrap_or_default();
    assert!(
        error.contains("memory limit") && error.contains("1 MiB"),
        "{error}"
    );
    let spec = ActionSpec {
        max_retries: Some(0),
        memory_limit_mb: Some(1),
        wasm_entrypoint: None,
        ..wasm_spec("grower", &grow_guest(8))
    };
    register(&mut c, spec);
    assert_completed(&run_to_end(&mut c, "grower", "{}"), "grown");
    assert_still_serving(&mut c, "after running out of memory");

    // An output outside guest memory.
    let spec = ActionSpec {
        max_retries: Some(0),
        ..wasm_spec(
            "liar",
            &guest(&[], "(call $pack (i32.const 60000) (i32.const 100000))"),
        )
    };
    register(&mut c, spec);
    let run = run_to_end(&mut c, "liar", "{}");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("outside guest memory"), "{error}");

    assert_still_serving(&mut c, "at the end");
    assert!(server.is_running());
}

/// A guest looping forever (or sleeping) times out at its deadline; other runs still complete,
/// and the server keeps serving.
#[test]
fn guest_looping_forever_times_out_and_the_server_keeps_serving() {
    let dir = temp_dir();
    let mut server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let spec = ActionSpec {
        timeout_ms: Some(200),
        max_retries: Some(0),
        ..wasm_spec("spinner", &spin_guest())
    };
    register(&mut c, spec);

    let spinner = invoke(&mut c, "spinner", "{}");
    // Runs invoked meanwhile, on the same shard (same connection), still complete.
    let during: Vec<String> = (0..3)
        .map(|i| invoke(&mut c, "echo", &format!("during {i}")))
        .collect();
    let run = wait_final(&mut c, &spinner);
    assert_eq!(run.status, RunStatus::TimedOut, "{run:?}");
    assert_eq!(run.attempt, 1);
    assert!(run.dead_lettered, "{run:?}");
    assert_eq!(run.output, None);
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("timed out after 200 ms"), "{error}");
    assert!(
        run.updated_at_ms >= run.created_at_ms + 200,
        "timed out too early: {run:?}"
    );
    for (i, id) in during.iter().enumerate() {
        assert_completed(&wait_final(&mut c, id), &format!("during {i}"));
    }
    let (timed_out, _) = c
        .list_runs("spinner", Some(RunStatus::TimedOut), false, None)
        .unwrap();
    assert_eq!(timed_out.len(), 1);
    assert_eq!(
        c.list_runs("spinner", None, true, None).unwrap().0.len(),
        1,
        "dead-lettered"
    );

    // A guest waiting on the host (sleeping) is cut off at its deadline too.
    let spec = ActionSpec {
        timeout_ms: Some(200),
        max_retries: Some(0),
        ..wasm_spec("sleeper", &sleep_guest(60_000))
    };
    register(&mut c, spec);
    let run = run_to_end(&mut c, "sleeper", "{}");
    assert_eq!(run.status, RunStatus::TimedOut, "{run:?}");
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("timed out after 200 ms"), "{error}");
    // A sleep within the deadline is fine.
    register(&mut c, wasm_spec("napper", &sleep_guest(20)));
    assert_completed(&run_to_end(&mut c, "napper", "{}"), r#"{"slept":20}"#);

    assert_completed(&run_to_end(&mut c, "echo", "after"), "after");
    assert!(server.is_running());
}

/// Counts its executions in its memory (byte 1000) and returns the count as one digit.
fn counting_guest() -> String {
    guest(
        &[],
        "(i32.store8 (i32.const 1000) (i32.add (i32.load8_u (i32.const 1000)) (i32.const 1)))
    (i32.store8 (i32.const 1001) (i32.add (i32.load8_u (i32.const 1000)) (i32.const 48)))
    (call $pack (i32.const 1001) (i32.const 1))",
    )
}

/// A module that exports `flo_reuse_instance` runs in the instance its last execution left
/// (its memory carries over), per action version; one that does not starts fresh each
/// time; kept instances live in memory only, so a restart starts over. The metrics count
/// the executions that ran in a kept instance.
#[test]
fn a_module_that_opts_in_reuses_its_instance_per_action_version() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("warm", &reusable(&counting_guest())));
    register(&mut c, wasm_spec("cold", &counting_guest()));
    let outputs = |c: &mut Client, action: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| output_text(&run_to_end(c, action, "{}")))
            .collect()
    };
    assert_eq!(outputs(&mut c, "warm", 4), ["1", "2", "3", "4"]);
    assert_eq!(outputs(&mut c, "cold", 3), ["1", "1", "1"]);
    // A new version of the action (the same module) starts over.
    register(&mut c, wasm_spec("warm", &reusable(&counting_guest())));
    assert_eq!(outputs(&mut c, "warm", 2), ["1", "2"]);
    let http = server.http.expect("the server serves HTTP");
    let metrics = flo_testkit::http::http_get(http, "/metrics", None).expect("metrics");
    assert!(
        metrics
            .body
            .lines()
            .any(|l| l == r#"flo_wasm_executions_reused_total{shard="0"} 4"#),
        "{}",
        metrics.body
    );
    server.stop();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    assert_eq!(outputs(&mut c, "warm", 2), ["1", "2"]);
}

/// While a guest spins on a shard, that shard keeps answering other requests within
/// milliseconds (DESIGN: "a guest that loops forever fails its run, the shard stays
/// responsive"; the guest yields to the executor every ~1 ms).
#[test]
fn shard_running_a_looping_guest_keeps_answering_quickly() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let spec = ActionSpec {
        timeout_ms: Some(30_000),
        max_retries: Some(0),
        ..wasm_spec("spinner", &spin_guest())
    };
    register(&mut c, spec);
    /// Runs `f`, asserting it took less than `max_ms` (idle, each of these takes ~1 ms).
    fn within<T>(max_ms: u64, what: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let value = f();
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(max_ms),
            "{what} took {took:?} while a guest spun"
        );
        value
    }

    // Idle, reads take about a millisecond and durable operations (an fsync) a few; the
    // bounds leave room for a loaded machine, while a shard the guest held would answer
    // only when the guest's 30 s timeout ended it.
    let spinner = within(3000, "an invocation", || invoke(&mut c, "spinner", "{}"));
    for _ in 0..5 {
        let status = within(1000, "a run's status", || c.run(&spinner).unwrap().status);
        assert_eq!(status, RunStatus::Running, "the spinner ended too soon");
        within(1000, "a KV read", || c.kv_get("some-key").unwrap());
        within(1000, "a server status", || c.status().unwrap());
        let run = within(3000, "an echo run", || run_to_end(&mut c, "echo", "ping"));
        assert_completed(&run, "ping");
    }
    assert_eq!(c.run(&spinner).unwrap().status, RunStatus::Running);
}

/// Writes the key `spun`, then loops forever.
fn writing_spin_guest() -> String {
    guest(
        &[(0, "spun")],
        "(drop (call $kv_set (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 4)))\n    (loop $forever (br $forever))\n    (i64.const 0)",
    )
}

/// `cancel` stops a guest that is executing — looping in wasm code or asleep in the host —
/// at once rather than at its timeout: the run stays cancelled, none of its KV writes is
/// applied, and its slot serves the runs waiting for one.
#[test]
fn cancel_stops_an_executing_guest_and_frees_its_slot() {
    let dir = temp_dir();
    let mut server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let forever = |name: &str, wat: String| ActionSpec {
        timeout_ms: Some(600_000),
        max_retries: Some(0),
        ..wasm_spec(name, &wat)
    };
    register(&mut c, forever("spinner", writing_spin_guest()));
    register(&mut c, forever("sleeper", sleep_guest(600_000)));

    // The shard's four slots: three guests spinning, one asleep.
    let blockers: Vec<String> = ["spinner", "spinner", "spinner", "sleeper"]
        .iter()
        .map(|action| invoke(&mut c, action, "{}"))
        .collect();
    for id in &blockers {
        wait_for_run(&mut c, id, "running", |r| r.status == RunStatus::Running);
    }
    assert_eq!(c.status().unwrap().shards[0].executions, 4);
    let queued: Vec<String> = (0..4)
        .map(|i| invoke(&mut c, "echo", &format!("queued {i}")))
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    for id in &queued {
        assert_eq!(
            c.run(id).unwrap().status,
            RunStatus::Pending,
            "no slot is free"
        );
    }

    let cancelled_at = Instant::now();
    for id in &blockers {
        assert_eq!(c.cancel_run(id).unwrap().status, RunStatus::Cancelled);
    }
    for (i, id) in queued.iter().enumerate() {
        assert_completed(&wait_final(&mut c, id), &format!("queued {i}"));
    }
    let took = cancelled_at.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the queued runs waited {took:?} for the stopped guests' slots"
    );
    assert!(
        wait_until(Duration::from_secs(5), || c.status().unwrap().shards[0]
            .executions
            == 0),
        "slots still in use"
    );
    for id in &blockers {
        let run = c.run(id).unwrap();
        assert_eq!(
            (run.status, run.output, run.error),
            (RunStatus::Cancelled, None, None),
            "{id}"
        );
    }
    assert_eq!(
        kv_value(&mut c, "spun"),
        None,
        "a stopped guest's write was applied"
    );
    // Echo, spinner, sleeper: compiled once each, cached under the default budget.
    let cache = c
        .status()
        .unwrap()
        .module_cache
        .expect("the cache is reported");
    assert_eq!(
        (cache.modules, cache.budget_bytes),
        (3, 512 << 20),
        "{cache:?}"
    );
    assert!(cache.bytes > 0, "{cache:?}");
    assert!(server.is_running());
}

/// A module of about `kib` KiB (a data segment that big) returning `name`.
fn bulky_guest(name: &str, kib: usize) -> String {
    let pages = kib / 64 + 2;
    let filler = "x".repeat(kib << 10);
    format!(
        r#"(module
  (memory (export "memory") {pages})
  (data (i32.const 0) {})
  (data (i32.const 1024) "{filler}")
  (func (export "alloc") (param i32) (result i32) (i32.const 512))
  (func (export "handle") (param i32 i32) (result i64) (i64.const {})))
"#,
        wat_string(name),
        name.len()
    )
}

/// With a cache too small for both modules (`--module-cache-mb 1`, modules of ~700 KiB),
/// two actions used in turn evict each other and are compiled again at each use: both
/// still run correctly, and the cache stays within its budget.
#[test]
fn actions_used_in_turn_run_correctly_with_a_module_cache_smaller_than_both() {
    let dir = temp_dir();
    let mut server = TestServer::start(dir.path(), &["--shards", "1", "--module-cache-mb", "1"]);
    let mut c = server.client();
    for name in ["bulky-a", "bulky-b"] {
        register(&mut c, wasm_spec(name, &bulky_guest(name, 700)));
    }
    for i in 0..6 {
        let name = ["bulky-a", "bulky-b"][i % 2];
        assert_completed(&run_to_end(&mut c, name, "{}"), name);
    }
    let cache = c
        .status()
        .unwrap()
        .module_cache
        .expect("the cache is reported");
    assert_eq!(cache.budget_bytes, 1 << 20, "{cache:?}");
    assert!(
        cache.bytes <= cache.budget_bytes && cache.modules <= 1,
        "{cache:?}"
    );
    // Two registrations and six executions, each compiling (and caching) its module.
    assert!(cache.generation >= 8, "{cache:?}");
    let out = cli_ok(&server.addr_string(), &["status"]);
    assert!(
        out.lines().next().unwrap().contains("module cache"),
        "{out}"
    );
    assert!(server.is_running());
}

// ---------------------------------------------------------------------------------------------
// 6. Registration refused
// ---------------------------------------------------------------------------------------------

#[test]
fn registration_refuses_bad_modules_and_bad_names() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();

    let bad = |c: &mut Client, spec: ActionSpec, words: &[&str]| {
        let name = spec.name.clone();
        let msg = expect_error(c.register_action(spec), ErrorCode::BadRequest);
        for word in words {
            assert!(
                msg.contains(word),
                "refusal of {name:?} lacks {word:?}: {msg}"
            );
        }
        msg
    };

    let no_handle = r#"(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024)))"#;
    bad(
        &mut c,
        wasm_spec("no-handle", no_handle),
        &["missing export `handle`"],
    );
    let no_alloc = r#"(module
  (memory (export "memory") 1)
  (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#;
    bad(
        &mut c,
        wasm_spec("no-alloc", no_alloc),
        &["missing export `alloc`"],
    );
    let no_memory = r#"(module
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#;
    bad(&mut c, wasm_spec("no-memory", no_memory), &["memory"]);
    let wrong_handle = r#"(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "handle") (param i32) (result i32) (i32.const 0)))"#;
    bad(
        &mut c,
        wasm_spec("wrong-handle", wrong_handle),
        &["`handle`", "i64"],
    );
    let unknown_import = r#"(module
  (import "env" "now" (func (result i64)))
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#;
    bad(
        &mut c,
        wasm_spec("bad-import", unknown_import),
        &["env.now"],
    );

    let mut garbage = wasm_spec("garbage", "");
    garbage.wasm = Some(b"\x00asm\x01\x00\x00\x00this is not a module".to_vec());
    bad(&mut c, garbage, &["invalid wasm module"]);
    let mut garbage = wasm_spec("garbage", "");
    garbage.wasm = Some((0..=255u8).cycle().take(1000).collect());
    bad(&mut c, garbage, &["invalid wasm module"]);
    bad(
        &mut c,
        wasm_spec("garbage", "(module (func"),
        &["invalid wasm module"],
    );

    let mut user_with_module = user_spec("user-with-module");
    user_with_module.wasm = Some(echo_guest().into_bytes());
    bad(&mut c, user_with_module, &["user action", "wasm module"]);
    let mut wasm_without_module = wasm_spec("wasm-without-module", "");
    wasm_without_module.wasm = None;
    bad(&mut c, wasm_without_module, &["module"]);

    let long = "a".repeat(257);
    bad(&mut c, wasm_spec(&long, &echo_guest()), &["invalid", "256"]);
    for name in [
        "",
        "has space",
        "slash/name",
        "semi;colon",
        "émoji",
        "tab\t",
    ] {
        bad(&mut c, wasm_spec(name, &echo_guest()), &["invalid"]);
        bad(&mut c, user_spec(name), &["invalid"]);
    }
    for (field, spec) in [
        (
            "timeout_ms",
            ActionSpec {
                timeout_ms: Some(0),
                ..user_spec("limits")
            },
        ),
        (
            "max_retries",
            ActionSpec {
                max_retries: Some(1_000_000),
                ..user_spec("limits")
            },
        ),
        (
            // A guest holds an execution slot: at most 10 minutes (a user action may
            // take a day).
            "at most 600000",
            ActionSpec {
                timeout_ms: Some(600_001),
                ..wasm_spec("limits", &echo_guest())
            },
        ),
        (
            "memory_limit_mb",
            ActionSpec {
                memory_limit_mb: Some(0),
                wasm_entrypoint: None,
                ..wasm_spec("limits", &echo_guest())
            },
        ),
        (
            "memory_limit_mb",
            ActionSpec {
                memory_limit_mb: Some(100_000),
                wasm_entrypoint: None,
                ..wasm_spec("limits", &echo_guest())
            },
        ),
    ] {
        bad(&mut c, spec, &[field]);
    }
    assert!(
        c.list_actions().unwrap().is_empty(),
        "nothing was registered"
    );

    // The CLI shows the refusal.
    let wat = dir.path().join("no-handle.wat");
    std::fs::write(&wat, no_handle).unwrap();
    let err = cli_fails(
        &addr,
        &[
            "action",
            "register",
            "no-handle",
            "--wasm",
            wat.to_str().unwrap(),
        ],
    );
    assert!(err.contains("missing export `handle`"), "{err}");
    let err = cli_fails(
        &addr,
        &["action", "register", "x", "--wasm", "/nonexistent/x.wasm"],
    );
    assert!(err.contains("cannot read"), "{err}");

    // Names at the limits are accepted; the server still serves.
    let longest = "b".repeat(256);
    assert_eq!(
        register(&mut c, wasm_spec(&longest, &echo_guest())).name,
        longest
    );
    register(&mut c, wasm_spec("A-z_0.9", &echo_guest()));
    assert_completed(&run_to_end(&mut c, &longest, "ok"), "ok");
    assert_completed(&run_to_end(&mut c, "A-z_0.9", "ok"), "ok");
}

// ---------------------------------------------------------------------------------------------
// 7. Registry
// ---------------------------------------------------------------------------------------------

#[test]
fn registry_versions_lists_deletes_disables_and_enables_actions() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();

    let spec = ActionSpec {
        description: Some("says v1".into()),
        ..wasm_spec("greeter", &fixed_guest(r#""v1""#))
    };
    let v1 = register(&mut c, spec);
    assert_eq!(
        (v1.version, v1.enabled, v1.kind),
        (1, true, ActionKind::Wasm)
    );
    // Defaults from the spec's table.
    assert_eq!(v1.timeout_ms, 30_000);
    assert_eq!(v1.max_retries, 3);
    assert_eq!(v1.retry_delay_ms, 1000);
    assert_eq!(v1.memory_limit_mb, 16);
    assert_eq!(v1.description.as_deref(), Some("says v1"));
    assert!(v1.wasm_bytes.is_some_and(|n| n > 0));
    let old_run = run_to_end(&mut c, "greeter", "{}");
    assert_completed(&old_run, r#""v1""#);
    assert_eq!(old_run.action_version, 1);

    let user = register(
        &mut c,
        ActionSpec {
            timeout_ms: Some(60_000),
            max_retries: Some(3),
            ..user_spec("send-email")
        },
    );
    assert_eq!(
        (user.kind, user.version, user.timeout_ms),
        (ActionKind::User, 1, 60_000)
    );
    assert_eq!(user.wasm_bytes, None);
    // A user action's run waits for a worker.
    let pending = invoke(&mut c, "send-email", r#"{"to":"alice@example.com"}"#);
    assert_eq!(c.run(&pending).unwrap().status, RunStatus::Pending);

    // Re-registration bumps the version; new runs use the new module, old ones keep theirs.
    let v2 = register(&mut c, wasm_spec("greeter", &fixed_guest(r#""v2""#)));
    assert_eq!(v2.version, 2);
    assert_eq!(v2.created_at_ms, v1.created_at_ms);
    assert!(v2.updated_at_ms >= v1.updated_at_ms);
    let run = run_to_end(&mut c, "greeter", "{}");
    assert_completed(&run, r#""v2""#);
    assert_eq!(run.action_version, 2);
    assert_eq!(c.run(&old_run.run_id).unwrap().action_version, 1);
    assert_eq!(
        register(&mut c, wasm_spec("greeter", &fixed_guest(r#""v3""#))).version,
        3
    );

    let names: Vec<String> = c
        .list_actions()
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["greeter", "send-email"]);
    let got = c.action("greeter").unwrap();
    assert_eq!((got.name.as_str(), got.version), ("greeter", 3));

    // Disabled: invocations refused with a conflict; existing runs stay queryable.
    let info = c.set_action_enabled("greeter", false).unwrap();
    assert!(!info.enabled);
    assert!(!c.action("greeter").unwrap().enabled);
    let msg = expect_error(
        c.invoke("greeter", b"{}", InvokeOptions::default()),
        ErrorCode::Conflict,
    );
    assert!(msg.contains("disabled"), "{msg}");
    let err = cli_fails(&addr, &["action", "invoke", "greeter", "{}"]);
    assert!(err.contains("disabled"), "{err}");
    assert_eq!(c.run(&old_run.run_id).unwrap().status, RunStatus::Completed);
    assert_eq!(
        c.list_runs("greeter", None, false, None).unwrap().0.len(),
        2,
        "runs of a disabled action are listed"
    );
    // Enabled again: works.
    assert!(c.set_action_enabled("greeter", true).unwrap().enabled);
    assert_completed(&run_to_end(&mut c, "greeter", "{}"), r#""v3""#);
    // Through the CLI too.
    let out = cli_ok(&addr, &["action", "disable", "greeter"]);
    assert!(out.contains("disabled"), "{out}");
    cli_fails(&addr, &["action", "invoke", "greeter", "{}"]);
    let out = cli_ok(&addr, &["action", "enable", "greeter"]);
    assert!(out.contains("enabled"), "{out}");
    assert_eq!(
        cli_ok(&addr, &["action", "invoke", "greeter", "{}", "--wait"]),
        "\"v3\"\n"
    );

    // Deleted: gone from get and list, invoke says not found; its runs stay queryable.
    c.delete_action("greeter").unwrap();
    let msg = expect_error(c.action("greeter"), ErrorCode::NotFound);
    assert!(msg.contains("greeter"), "{msg}");
    let msg = expect_error(
        c.invoke("greeter", b"{}", InvokeOptions::default()),
        ErrorCode::NotFound,
    );
    assert!(msg.contains("greeter"), "{msg}");
    expect_error(c.delete_action("greeter"), ErrorCode::NotFound);
    expect_error(c.set_action_enabled("greeter", true), ErrorCode::NotFound);
    let names: Vec<String> = c
        .list_actions()
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["send-email"]);
    let kept = c.run(&old_run.run_id).unwrap();
    assert_eq!(
        (kept.status, kept.output),
        (RunStatus::Completed, old_run.output.clone())
    );
    // Registering again continues the version sequence.
    let again = register(&mut c, wasm_spec("greeter", &fixed_guest(r#""v4""#)));
    assert!(again.version > 3, "{again:?}");
    assert!(again.enabled);
    assert_completed(&run_to_end(&mut c, "greeter", "{}"), r#""v4""#);
    let out = cli_ok(&addr, &["action", "delete", "send-email"]);
    assert!(out.contains("deleted"), "{out}");
    let err = cli_fails(&addr, &["action", "info", "send-email"]);
    assert!(err.contains("not registered"), "{err}");

    // The clock only moves on a --test-clock server.
    expect_error(c.advance_clock(1000), ErrorCode::Unauthorized);
}

#[test]
fn namespaces_isolate_actions_and_runs() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut prod = server.client().with_namespace("prod");
    let mut staging = server.client().with_namespace("staging");
    let mut default = server.client();

    register(
        &mut prod,
        wasm_spec("send-email", &fixed_guest(r#""prod""#)),
    );
    let staging_info = register(
        &mut staging,
        wasm_spec("send-email", &fixed_guest(r#""staging""#)),
    );
    assert_eq!(staging_info.version, 1, "separate registries");
    assert_eq!(staging_info.namespace, "staging");

    let p = run_to_end(&mut prod, "send-email", "{}");
    assert_completed(&p, r#""prod""#);
    let s1 = run_to_end(&mut staging, "send-email", "{}");
    let s2 = run_to_end(&mut staging, "send-email", "{}");
    assert_completed(&s1, r#""staging""#);
    assert_eq!(p.namespace, "prod");
    assert_eq!(s1.namespace, "staging");

    let (runs, _) = prod.list_runs("send-email", None, false, None).unwrap();
    assert_eq!(
        runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        [p.run_id.as_str()]
    );
    let (runs, _) = staging.list_runs("send-email", None, false, None).unwrap();
    let ids: HashSet<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, HashSet::from([s1.run_id.as_str(), s2.run_id.as_str()]));
    // A run id is looked up in the caller's namespace only.
    match staging.run(&p.run_id) {
        Ok(info) => assert_eq!(output_text(&info), r#""staging""#, "same id, other run"),
        Err(e) => assert_eq!(server_error::<()>(Err(e)).0, ErrorCode::NotFound),
    }
    expect_error(default.run(&p.run_id), ErrorCode::NotFound);
    expect_error(default.action("send-email"), ErrorCode::NotFound);
    expect_error(
        default.invoke("send-email", b"{}", InvokeOptions::default()),
        ErrorCode::NotFound,
    );
    assert!(default.list_actions().unwrap().is_empty());

    // Deleting in one namespace leaves the other alone.
    prod.delete_action("send-email").unwrap();
    expect_error(
        prod.invoke("send-email", b"{}", InvokeOptions::default()),
        ErrorCode::NotFound,
    );
    assert_completed(
        &run_to_end(&mut staging, "send-email", "{}"),
        r#""staging""#,
    );

    // The CLI's --namespace.
    let out = cli_ok(&addr, &["--namespace", "staging", "action", "list"]);
    assert!(out.contains("send-email"), "{out}");
    let out = cli_ok(&addr, &["--namespace", "prod", "action", "list"]);
    assert!(!out.contains("send-email"), "{out}");
    let out = cli_ok(
        &addr,
        &[
            "--namespace",
            "staging",
            "action",
            "invoke",
            "send-email",
            "{}",
            "--wait",
        ],
    );
    assert_eq!(out, "\"staging\"\n");
}

// ---------------------------------------------------------------------------------------------
// 8. Idempotency
// ---------------------------------------------------------------------------------------------

#[test]
fn idempotency_key_gives_one_run_even_across_restarts() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("charge-payment", &echo_guest()));
    let key = "order-123-charge";

    let (id, created) = invoke_raw(
        &mut c,
        "charge-payment",
        r#"{"order":"ORD-123"}"#,
        Some(key),
    );
    assert!(created);
    let (again, created) = invoke_raw(
        &mut c,
        "charge-payment",
        r#"{"order":"ORD-123"}"#,
        Some(key),
    );
    assert_eq!((again.as_str(), created), (id.as_str(), false));
    // Even with another input, from another connection, the same run comes back.
    let mut other = server.client();
    let (again, created) = invoke_raw(
        &mut other,
        "charge-payment",
        r#"{"order":"other"}"#,
        Some(key),
    );
    assert_eq!((again.as_str(), created), (id.as_str(), false));
    let run = wait_final(&mut c, &id);
    assert_completed(&run, r#"{"order":"ORD-123"}"#);
    assert_eq!(run.idempotency_key.as_deref(), Some(key));
    // invoke-and-wait with the key returns the existing run.
    let opts = InvokeOptions {
        idempotency_key: Some(key.into()),
        ..Default::default()
    };
    let waited = c
        .invoke_and_wait("charge-payment", b"{}", opts, 5000)
        .unwrap();
    assert_eq!(waited.run_id, id);
    // The CLI agrees.
    let addr = server.addr_string();
    let out = cli_ok(
        &addr,
        &[
            "action",
            "invoke",
            "charge-payment",
            "{}",
            "--idempotency-key",
            key,
        ],
    );
    assert_eq!(out.trim(), id);
    // Another key is another run.
    let (second, created) = invoke_raw(&mut c, "charge-payment", "{}", Some("order-456-charge"));
    assert!(created && second != id);
    wait_final(&mut c, &second);

    let check = |server: &TestServer, when: &str| {
        let mut c = server.client();
        let (again, created) = invoke_raw(&mut c, "charge-payment", "{}", Some(key));
        assert_eq!((again.as_str(), created), (id.as_str(), false), "{when}");
        let (runs, _) = c.list_runs("charge-payment", None, false, None).unwrap();
        let with_key: Vec<&RunInfo> = runs
            .iter()
            .filter(|r| r.idempotency_key.as_deref() == Some(key))
            .collect();
        assert_eq!(with_key.len(), 1, "{when}: {runs:?}");
        assert_eq!(runs.len(), 2, "{when}: {runs:?}");
        let run = c.run(&id).unwrap();
        assert_completed(&run, r#"{"order":"ORD-123"}"#);
        assert_eq!(run.attempt, 1, "{when}: executed once");
    };
    check(&server, "before a restart");

    server.stop();
    let server = TestServer::start(dir.path(), &[]);
    check(&server, "after a graceful restart");
    // A fresh key right before a kill -9.
    let mut c = server.client();
    let (fresh, created) = invoke_raw(&mut c, "charge-payment", "{}", Some("order-789-charge"));
    assert!(created);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    check_after_kill(&server, &id, &fresh, key);
}

fn check_after_kill(server: &TestServer, id: &str, fresh: &str, key: &str) {
    let mut c = server.client();
    let (again, created) = invoke_raw(&mut c, "charge-payment", "{}", Some(key));
    assert_eq!((again.as_str(), created), (id, false));
    let (again, created) = invoke_raw(&mut c, "charge-payment", "{}", Some("order-789-charge"));
    assert_eq!(
        (again.as_str(), created),
        (fresh, false),
        "acknowledged before the kill"
    );
    let (runs, _) = c.list_runs("charge-payment", None, false, None).unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let ids: HashSet<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert!(ids.contains(id) && ids.contains(fresh), "{ids:?}");
    assert_eq!(c.run(id).unwrap().status, RunStatus::Completed);
    assert_eq!(wait_final(&mut c, fresh).status, RunStatus::Completed);
}

// ---------------------------------------------------------------------------------------------
// 9. Priorities
// ---------------------------------------------------------------------------------------------

#[test]
fn higher_priority_runs_take_free_slots_first() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    // Runs of `gated` hold their slot until the KV key named by their input exists.
    let spec = ActionSpec {
        timeout_ms: Some(60_000),
        ..wasm_spec("gated", &gated_guest())
    };
    register(&mut c, spec);
    let invoke_prio = |c: &mut Client, gate: &str, priority: u8| {
        let opts = InvokeOptions {
            priority: Some(priority),
            ..Default::default()
        };
        invoke_with(c, "gated", gate, opts)
    };
    let status = |c: &mut Client, ids: &[String]| -> Vec<RunStatus> {
        ids.iter().map(|id| c.run(id).unwrap().status).collect()
    };

    // Occupy the four slots.
    let blockers: Vec<String> = (0..4)
        .map(|_| invoke_prio(&mut c, "go-blockers", 10))
        .collect();
    for id in &blockers {
        wait_for_run(&mut c, id, "running", |r| r.status == RunStatus::Running);
    }
    // Queue low-priority runs first, then high-priority ones; none can start.
    let low: Vec<String> = (0..4)
        .map(|_| invoke_prio(&mut c, "go-queued", 1))
        .collect();
    let high: Vec<String> = (0..4)
        .map(|_| invoke_prio(&mut c, "go-queued", 200))
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(status(&mut c, &low), [RunStatus::Pending; 4]);
    assert_eq!(status(&mut c, &high), [RunStatus::Pending; 4]);

    // Free the slots: the high-priority runs take all four, the low-priority ones wait.
    put(&mut c, "go-blockers", "1");
    for id in &blockers {
        assert_completed(&wait_final(&mut c, id), "released");
    }
    for id in &high {
        wait_for_run(&mut c, id, "running", |r| r.status == RunStatus::Running);
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        status(&mut c, &low),
        [RunStatus::Pending; 4],
        "low-priority runs must wait for the high-priority ones"
    );

    // Release them all: everything completes.
    put(&mut c, "go-queued", "1");
    let high_done: Vec<RunInfo> = high.iter().map(|id| wait_final(&mut c, id)).collect();
    let low_done: Vec<RunInfo> = low.iter().map(|id| wait_final(&mut c, id)).collect();
    for run in high_done.iter().chain(&low_done) {
        assert_completed(run, "released");
    }
    let priorities: Vec<u8> = high_done
        .iter()
        .chain(&low_done)
        .map(|r| r.priority)
        .collect();
    assert_eq!(priorities, [200, 200, 200, 200, 1, 1, 1, 1]);
    let first_high = high_done.iter().map(|r| r.updated_at_ms).min().unwrap();
    let first_low = low_done.iter().map(|r| r.updated_at_ms).min().unwrap();
    assert!(
        first_high <= first_low,
        "high-priority runs end from {first_high}, low-priority ones from {first_low}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Delay
// ---------------------------------------------------------------------------------------------

#[test]
fn delayed_run_waits_for_its_time() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));

    let opts = InvokeOptions {
        delay_ms: Some(60_000),
        ..Default::default()
    };
    let id = invoke_with(&mut c, "echo", "later", opts);
    let run = c.run(&id).unwrap();
    assert_eq!(run.status, RunStatus::Pending);
    assert_eq!(run.available_at_ms, run.created_at_ms + 60_000, "{run:?}");
    assert_eq!(run.attempt, 1);
    // An undelayed run is not held up by it.
    assert_completed(&run_to_end(&mut c, "echo", "now"), "now");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.run(&id).unwrap().status, RunStatus::Pending);

    c.advance_clock(30_000).unwrap();
    let run = c.wait_run(&id, 300).unwrap();
    assert_eq!(
        run.status,
        RunStatus::Pending,
        "due in 30 more seconds: {run:?}"
    );

    c.advance_clock(30_000).unwrap();
    let run = wait_final(&mut c, &id);
    assert_completed(&run, "later");
    assert!(run.updated_at_ms >= run.available_at_ms, "{run:?}");
}

// ---------------------------------------------------------------------------------------------
// 11. Retries with backoff
// ---------------------------------------------------------------------------------------------

#[test]
fn failed_attempts_retry_with_exponential_backoff_then_dead_letter() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let addr = server.addr_string();
    let mut c = server.client();
    let spec = ActionSpec {
        max_retries: Some(2),
        retry_delay_ms: Some(10_000),
        ..wasm_spec("always-fails", &code_guest(-3))
    };
    register(&mut c, spec);

    let id = invoke(&mut c, "always-fails", "{}");
    let run = wait_for_run(&mut c, &id, "waiting for attempt 2", |r| r.attempt == 2);
    assert_eq!(run.status, RunStatus::Pending, "{run:?}");
    assert!(
        run.error.as_deref().unwrap_or_default().contains("-3"),
        "{run:?}"
    );
    assert!(!run.dead_lettered);
    assert_eq!(run.available_at_ms, run.updated_at_ms + 10_000, "{run:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        c.run(&id).unwrap().attempt,
        2,
        "no retry before the backoff passed"
    );

    c.advance_clock(10_000).unwrap();
    let run = wait_for_run(&mut c, &id, "waiting for attempt 3", |r| r.attempt == 3);
    assert_eq!(run.status, RunStatus::Pending, "{run:?}");
    assert_eq!(
        run.available_at_ms,
        run.updated_at_ms + 20_000,
        "doubled: {run:?}"
    );
    c.advance_clock(10_000).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        c.run(&id).unwrap().attempt,
        3,
        "no retry before the doubled backoff"
    );

    c.advance_clock(10_000).unwrap();
    let run = wait_final(&mut c, &id);
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert_eq!(run.attempt, 3);
    assert!(run.dead_lettered);
    assert!(
        run.error.as_deref().unwrap_or_default().contains("-3"),
        "{run:?}"
    );

    // The dead-letter list holds it (and not runs that did not exhaust their retries).
    let pending = invoke(&mut c, "always-fails", "{}");
    wait_for_run(&mut c, &pending, "retrying", |r| r.attempt == 2);
    let (dlq, truncated) = c.list_runs("always-fails", None, true, None).unwrap();
    assert!(!truncated);
    assert_eq!(
        dlq.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    assert_eq!(
        c.list_runs("always-fails", None, false, None)
            .unwrap()
            .0
            .len(),
        2
    );
    let out = cli_ok(&addr, &["action", "dlq", "always-fails"]);
    assert!(out.contains(&id) && out.contains("failed"), "{out}");
    assert!(!out.contains(&pending), "{out}");
    let doc = cli_json(&addr, &["action", "dlq", "always-fails"]);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(doc["runs"][0]["run_id"], json!(id));
    assert_eq!(doc["runs"][0]["dead_lettered"], json!(true));
}

#[test]
fn run_that_fails_once_completes_on_retry() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let spec = ActionSpec {
        max_retries: Some(3),
        retry_delay_ms: Some(5_000),
        ..wasm_spec("gated", &gate_guest())
    };
    register(&mut c, spec);

    let id = invoke(&mut c, "gated", "{}");
    let run = wait_for_run(&mut c, &id, "waiting for attempt 2", |r| r.attempt == 2);
    assert_eq!(run.status, RunStatus::Pending, "{run:?}");
    put(&mut c, "gate", "open");
    c.advance_clock(5_000).unwrap();
    let run = wait_final(&mut c, &id);
    assert_completed(&run, "opened");
    assert_eq!(run.attempt, 2);
    assert!(!run.dead_lettered);
    assert!(c.list_runs("gated", None, true, None).unwrap().0.is_empty());
}

// ---------------------------------------------------------------------------------------------
// 12. Cancel
// ---------------------------------------------------------------------------------------------

#[test]
fn cancelled_runs_stay_cancelled_and_cannot_be_cancelled_twice() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let addr = server.addr_string();
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));

    let delayed = InvokeOptions {
        delay_ms: Some(60_000),
        ..Default::default()
    };
    let id = invoke_with(&mut c, "echo", "never", delayed.clone());
    let info = c.cancel_run(&id).unwrap();
    assert_eq!(info.status, RunStatus::Cancelled, "{info:?}");
    assert_eq!(c.run(&id).unwrap().status, RunStatus::Cancelled);
    assert_eq!(c.wait_run(&id, 5000).unwrap().status, RunStatus::Cancelled);
    let msg = expect_error(c.cancel_run(&id), ErrorCode::Conflict);
    assert!(msg.contains("cancelled"), "{msg}");
    let msg = expect_error(c.cancel_run("echo-987654"), ErrorCode::NotFound);
    assert!(msg.contains("echo-987654"), "{msg}");
    // Once due, a cancelled run does not execute.
    c.advance_clock(60_000).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let run = c.run(&id).unwrap();
    assert_eq!((run.status, run.output), (RunStatus::Cancelled, None));

    // A finished run cannot be cancelled.
    let done = run_to_end(&mut c, "echo", "done");
    let msg = expect_error(c.cancel_run(&done.run_id), ErrorCode::Conflict);
    assert!(msg.contains("completed"), "{msg}");

    // Through the CLI.
    let id2 = invoke_with(&mut c, "echo", "never", delayed);
    let out = cli_ok(&addr, &["action", "cancel", &id2]);
    assert_eq!(out.trim(), format!("cancelled {id2}"));
    let err = cli_fails(&addr, &["action", "cancel", &id2]);
    assert!(err.contains("already cancelled"), "{err}");

    // A running run: cancelled at once, its guest stopped, and nothing of its execution
    // recorded.
    register(&mut c, wasm_spec("gated", &gated_guest()));
    let running = invoke(&mut c, "gated", "gate");
    wait_for_run(&mut c, &running, "running", |r| {
        r.status == RunStatus::Running
    });
    assert_eq!(c.cancel_run(&running).unwrap().status, RunStatus::Cancelled);
    assert_eq!(
        c.wait_run(&running, 5000).unwrap().status,
        RunStatus::Cancelled
    );
    put(&mut c, "gate", "open");
    let other = run_to_end(&mut c, "gated", "gate");
    assert_completed(&other, "released");
    std::thread::sleep(Duration::from_millis(100));
    let run = c.run(&running).unwrap();
    assert_eq!((run.status, run.output), (RunStatus::Cancelled, None));
}

// ---------------------------------------------------------------------------------------------
// 13. Durability
// ---------------------------------------------------------------------------------------------

#[test]
fn registrations_and_runs_survive_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));
    register(&mut c, wasm_spec("wrap", &wrap_guest()));
    register(&mut c, wasm_spec("wrap", &wrap_guest()));
    register(&mut c, user_spec("send-email"));
    c.set_action_enabled("send-email", false).unwrap();

    let completed: Vec<RunInfo> = (0..3)
        .map(|i| {
            let run = run_to_end(&mut c, "wrap", &format!("[{i}]"));
            assert_completed(&run, &format!(r#"{{"input":[{i}]}}"#));
            run
        })
        .collect();
    // Invocations streaming in when the server is killed: every acknowledged one survives.
    let addr = server.addr;
    let acked_count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = acked_count.clone();
    let streamer = std::thread::spawn(move || {
        let mut c = Client::connect(addr).expect("connect");
        let mut acked = Vec::new();
        for i in 0.. {
            match c.invoke("echo", format!("s{i}").as_bytes(), InvokeOptions::default()) {
                Ok(id) => acked.push((id, format!("s{i}"))),
                Err(_) => break,
            }
            counter.store(acked.len(), std::sync::atomic::Ordering::SeqCst);
        }
        acked
    });
    assert!(
        wait_until(Duration::from_secs(10), || acked_count
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 20),
        "invocations are not being acknowledged"
    );
    // A delayed run, still pending when the server dies.
    let delayed_opts = InvokeOptions {
        delay_ms: Some(1500),
        ..Default::default()
    };
    let delayed = invoke_with(&mut c, "echo", "delayed", delayed_opts);
    assert_eq!(c.run(&delayed).unwrap().status, RunStatus::Pending);
    server.kill9();
    let acked = streamer.join().unwrap();
    assert!(acked.len() >= 20, "{} acknowledged", acked.len());

    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let actions: HashMap<String, ActionInfo> = c
        .list_actions()
        .unwrap()
        .into_iter()
        .map(|a| (a.name.clone(), a))
        .collect();
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert_eq!(actions["wrap"].version, 2);
    assert_eq!(actions["echo"].kind, ActionKind::Wasm);
    assert!(!actions["send-email"].enabled);
    for run in &completed {
        assert_eq!(
            &c.run(&run.run_id).unwrap(),
            run,
            "a completed run is unchanged"
        );
    }
    // The delayed run executes once due.
    let run = wait_final(&mut c, &delayed);
    assert_completed(&run, "delayed");
    assert!(run.updated_at_ms >= run.created_at_ms + 1500, "{run:?}");
    // Every acknowledged run is there and gets executed.
    for (id, input) in &acked {
        let run = wait_final(&mut c, id);
        assert_completed(&run, input);
    }
    let (runs, _) = c.list_runs("echo", None, false, Some(10_000)).unwrap();
    assert!(runs.len() > acked.len(), "{} runs listed", runs.len());
    // The registered modules work without registering again; new runs get fresh ids.
    let run = run_to_end(&mut c, "wrap", "7");
    assert_completed(&run, r#"{"input":7}"#);
    assert!(completed.iter().all(|r| r.run_id != run.run_id));
    let run = run_to_end(&mut c, "echo", "after");
    assert_completed(&run, "after");
    assert!(
        acked.iter().all(|(id, _)| *id != run.run_id),
        "run ids are not reused"
    );
    expect_error(
        c.invoke("send-email", b"{}", InvokeOptions::default()),
        ErrorCode::Conflict,
    );
}

/// A run interrupted by a stop (graceful or kill -9) while its guest executes runs again after
/// the restart; the interrupted attempt left no trace.
#[test]
fn run_executing_at_shutdown_runs_again_after_restart() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("gated", &gated_guest()));
    let first = invoke(&mut c, "gated", "gate");
    wait_for_run(&mut c, &first, "running", |r| {
        r.status == RunStatus::Running
    });
    // The gated guest never ends by itself (nobody writes its key): a stop that waited for
    // it would not end, and `stop` fails after its own limit.
    server.stop();

    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let second = invoke(&mut c, "gated", "gate");
    wait_for_run(&mut c, &first, "running again", |r| {
        r.status == RunStatus::Running
    });
    wait_for_run(&mut c, &second, "running", |r| {
        r.status == RunStatus::Running
    });
    server.kill9();

    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    put(&mut c, "gate", "open");
    for id in [&first, &second] {
        let run = wait_final(&mut c, id);
        assert_completed(&run, "released");
        assert_eq!(
            run.attempt, 1,
            "an interrupted execution is not a failed attempt"
        );
    }
}

/// A run nobody has been answered about yet (its invoke waits for it to end) is durable
/// within moments all the same: records no reply waits for are written at most a
/// millisecond later, with what follows them. Killed while its guest sleeps, the server
/// finds the run after the restart and runs it to the end.
#[test]
fn a_run_whose_invoke_still_waits_is_durable_before_its_answer() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    register(&mut c, wasm_spec("slow", &sleep_guest(3_000)));
    let mut waiting = server.client();
    let invoker = std::thread::spawn(move || {
        // Ends with an error when the server is killed under it.
        let _ = waiting.invoke_and_wait("slow", b"{}", InvokeOptions::default(), 10_000);
    });
    // Nothing is read meanwhile: a read would itself wait for the records it shows.
    std::thread::sleep(Duration::from_millis(300));
    server.kill9();
    let _ = invoker.join();

    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let (runs, _) = c.list_runs("slow", None, false, None).expect("list runs");
    assert_eq!(runs.len(), 1, "the invoked run survived the kill: {runs:?}");
    let run = wait_final(&mut c, &runs[0].run_id);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
}

/// The version a run reports is the version whose module produced its output.
#[test]
fn run_reports_the_action_version_that_executed_it() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("greeter", &fixed_guest(r#""v1""#)));
    let opts = InvokeOptions {
        delay_ms: Some(10_000),
        ..Default::default()
    };
    let id = invoke_with(&mut c, "greeter", "{}", opts);
    assert_eq!(c.run(&id).unwrap().action_version, 1);
    register(&mut c, wasm_spec("greeter", &fixed_guest(r#""v2""#)));
    c.advance_clock(10_000).unwrap();
    let run = wait_final(&mut c, &id);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let output = output_text(&run);
    assert_eq!(
        output,
        format!(r#""v{}""#, run.action_version),
        "output of one version reported as version {}",
        run.action_version
    );
}

/// Runs are listed newest first, also when several were created in the same millisecond, and
/// a page with a limit is the beginning of the full list.
#[test]
fn runs_created_in_the_same_millisecond_are_listed_newest_first() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    register(&mut c, user_spec("task"));

    // Pipeline many invocations so that several share a millisecond.
    const RUNS: u64 = 150;
    let mut conn = flo::Connection::connect(server.addr).unwrap();
    conn.queue(&flo::protocol::Request {
        id: 1,
        op: Op::Hello {
            protocol_version: flo::protocol::PROTOCOL_VERSION,
            client: "actions-test".into(),
            token: None,
        },
    })
    .unwrap();
    for i in 0..RUNS {
        let spec = InvokeSpec {
            namespace: "default".into(),
            action: "task".into(),
            input: format!("{i}").into_bytes(),
            priority: None,
            delay_ms: None,
            idempotency_key: None,
            labels: None,
            wait_ms: None,
        };
        conn.queue(&flo::protocol::Request {
            id: 2 + i,
            op: Op::ActionInvoke(spec),
        })
        .unwrap();
    }
    conn.flush().unwrap();
    for _ in 0..=RUNS {
        assert!(conn.recv().unwrap().result.is_ok());
    }

    let (all, truncated) = c.list_runs("task", None, false, Some(1000)).unwrap();
    assert!(!truncated);
    assert_eq!(all.len() as u64, RUNS);
    // One shard hands out task-1, task-2, ... in creation order.
    let numbers: Vec<u64> = all
        .iter()
        .map(|r| r.run_id.strip_prefix("task-").unwrap().parse().unwrap())
        .collect();
    let mut newest_first = numbers.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(numbers, newest_first, "not newest first");
    for limit in [1, 2, 5, 10, 50, 100] {
        let (page, _) = c.list_runs("task", None, false, Some(limit)).unwrap();
        assert_eq!(page, all[..limit as usize].to_vec(), "page of {limit}");
    }
}

// ---------------------------------------------------------------------------------------------
// 14. Status and lists
// ---------------------------------------------------------------------------------------------

/// Every page of a run list with its cursor: each run once, in-flight and finished ones.
fn all_pages(c: &mut Client, status: Option<RunStatus>, limit: u32) -> Vec<String> {
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = c
            .list_runs_page("echo", status, false, Some(limit), cursor.as_deref())
            .unwrap();
        assert!(page.items.len() <= limit as usize, "{page:?}");
        seen.extend(page.items.into_iter().map(|r| r.run_id));
        pages += 1;
        assert!(pages < 100, "the list does not end: {seen:?}");
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return seen,
        }
    }
}

#[test]
fn run_lists_page_through_every_run_with_a_cursor() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let mut finished = HashSet::new();
    for i in 0..13 {
        finished.insert(run_to_end(&mut c, "echo", &format!("done-{i}")).run_id);
    }
    let delayed = InvokeOptions {
        delay_ms: Some(600_000),
        ..Default::default()
    };
    let mut pending = HashSet::new();
    for i in 0..8 {
        pending.insert(invoke_with(
            &mut c,
            "echo",
            &format!("later-{i}"),
            delayed.clone(),
        ));
    }
    let everything: HashSet<String> = finished.union(&pending).cloned().collect();

    for limit in [1, 4, 7, 100] {
        let seen = all_pages(&mut c, None, limit);
        assert_eq!(
            seen.len(),
            everything.len(),
            "each run once (limit {limit}): {seen:?}"
        );
        assert_eq!(seen.into_iter().collect::<HashSet<_>>(), everything);
    }
    let seen = all_pages(&mut c, Some(RunStatus::Pending), 3);
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), pending);
    let seen = all_pages(&mut c, Some(RunStatus::Completed), 5);
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), finished);

    // A run that finishes while a client pages is not skipped.
    let first = c
        .list_runs_page("echo", None, false, Some(2), None)
        .unwrap();
    let mut seen: HashSet<String> = first.items.iter().map(|r| r.run_id.clone()).collect();
    let moved = pending
        .iter()
        .find(|id| !seen.contains(*id))
        .unwrap()
        .clone();
    c.cancel_run(&moved).unwrap();
    let mut cursor = first.next_cursor;
    while let Some(at) = cursor {
        let page = c
            .list_runs_page("echo", None, false, Some(5), Some(&at))
            .unwrap();
        seen.extend(page.items.into_iter().map(|r| r.run_id));
        cursor = page.next_cursor;
    }
    assert_eq!(seen, everything);

    for bad in ["r1.X.S", "r1.S", "nonsense"] {
        expect_error(
            c.list_runs_page("echo", None, false, Some(4), Some(bad)),
            ErrorCode::BadRequest,
        );
    }

    // The CLI says where the next page starts and takes it back.
    let doc = cli_json(&addr, &["action", "runs", "echo", "--limit", "15"]);
    let mut ids: Vec<String> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 15, "{doc}");
    let cursor = doc["next_cursor"].as_str().unwrap().to_string();
    assert_eq!(doc["truncated"], json!(true));
    let out = cli_ok(&addr, &["action", "runs", "echo", "--limit", "15"]);
    assert!(out.contains(&format!("--cursor {cursor}")), "{out}");
    let doc = cli_json(
        &addr,
        &[
            "action", "runs", "echo", "--limit", "15", "--cursor", &cursor,
        ],
    );
    assert_eq!(doc["next_cursor"], Value::Null, "{doc}");
    ids.extend(
        doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string()),
    );
    assert_eq!(ids.into_iter().collect::<HashSet<_>>(), everything);
    let err = cli_fails(&addr, &["action", "runs", "echo", "--cursor", "junk"]);
    assert!(err.contains("invalid cursor"), "{err}");
}

#[test]
fn runs_are_listed_and_filtered_by_status() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    let spec = ActionSpec {
        max_retries: Some(0),
        description: Some("echoes, except inputs starting with x".into()),
        ..wasm_spec("picky", &picky_guest())
    };
    register(&mut c, spec);
    register(&mut c, wasm_spec("echo", &echo_guest()));

    let mut by_status: HashMap<RunStatus, Vec<String>> = HashMap::new();
    for input in ["a", "b", "c"] {
        let run = run_to_end(&mut c, "picky", input);
        assert_completed(&run, input);
        by_status
            .entry(RunStatus::Completed)
            .or_default()
            .push(run.run_id);
    }
    for input in ["x1", "x2"] {
        let run = run_to_end(&mut c, "picky", input);
        assert_eq!(run.status, RunStatus::Failed);
        by_status
            .entry(RunStatus::Failed)
            .or_default()
            .push(run.run_id);
    }
    let delayed = InvokeOptions {
        delay_ms: Some(600_000),
        ..Default::default()
    };
    let pending = invoke_with(&mut c, "picky", "p", delayed.clone());
    by_status
        .entry(RunStatus::Pending)
        .or_default()
        .push(pending);
    let cancelled = invoke_with(&mut c, "picky", "q", delayed);
    c.cancel_run(&cancelled).unwrap();
    by_status
        .entry(RunStatus::Cancelled)
        .or_default()
        .push(cancelled);
    run_to_end(&mut c, "echo", "not picky");

    let (all, truncated) = c.list_runs("picky", None, false, None).unwrap();
    assert!(!truncated);
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(all.iter().all(|r| r.action == "picky"));
    assert!(
        all.windows(2)
            .all(|w| w[0].created_at_ms >= w[1].created_at_ms),
        "newest first: {all:?}"
    );
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Pending,
        RunStatus::Cancelled,
        RunStatus::TimedOut,
        RunStatus::Running,
    ] {
        let (runs, _) = c.list_runs("picky", Some(status), false, None).unwrap();
        let got: HashSet<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        let want: HashSet<String> = by_status
            .get(&status)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        assert_eq!(got, want, "runs with status {}", status.as_str());
        assert!(runs.iter().all(|r| r.status == status));
    }
    let (two, truncated) = c.list_runs("picky", None, false, Some(2)).unwrap();
    assert_eq!(two.len(), 2);
    assert!(truncated);
    assert_eq!(two, all[..2].to_vec());
    let (dlq, _) = c.list_runs("picky", None, true, None).unwrap();
    assert_eq!(dlq.len(), 2, "failed with no retries left: {dlq:?}");
    expect_error(
        c.list_runs("picky", None, false, Some(0)),
        ErrorCode::BadRequest,
    );
    assert!(
        c.list_runs("unknown", None, false, None)
            .unwrap()
            .0
            .is_empty()
    );

    // The CLI.
    let out = cli_ok(&addr, &["action", "runs", "picky", "--status", "completed"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three runs: {out}");
    assert!(
        lines[0].contains("RUN ID") && lines[0].contains("STATUS"),
        "{out}"
    );
    for id in &by_status[&RunStatus::Completed] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(id.as_str()) && l.contains("completed")),
            "{out}"
        );
    }
    let doc = cli_json(&addr, &["action", "runs", "picky", "--status", "failed"]);
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{doc}");
    assert!(
        runs.iter()
            .all(|r| r["status"] == json!("failed") && r["error"].is_string())
    );
    let doc = cli_json(&addr, &["action", "runs", "picky", "--limit", "3"]);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 3);
    assert_eq!(doc["truncated"], json!(true));
    let err = cli_fails(&addr, &["action", "runs", "picky", "--status", "bogus"]);
    assert!(err.contains("unknown status"), "{err}");

    let out = cli_ok(&addr, &["action", "list"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("NAME"), "{out}");
    assert!(
        lines[1].starts_with("echo") && lines[1].contains("wasm"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("picky") && lines[2].contains("echoes, except inputs starting with x"),
        "{out}"
    );
    let doc = cli_json(&addr, &["action", "list"]);
    let names: Vec<&str> = doc["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "picky"]);
    let doc = cli_json(&addr, &["action", "info", "picky"]);
    assert_eq!(doc["type"], json!("wasm"));
    assert_eq!(doc["max_retries"], json!(0));
    assert_eq!(doc["version"], json!(1));
    let out = cli_ok(&addr, &["action", "info", "picky"]);
    assert!(out.contains("type:        wasm"), "{out}");
}

/// An output too large for the run's completion record fails the attempt with a clear
/// error; the server keeps serving (the log's records are bounded).
#[test]
fn oversize_output_fails_the_run_instead_of_the_server() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    // 9 MiB of output: more than a log record may hold (8 MiB).
    let wat = r#"(module
      (memory (export "memory") 150)
      (func (export "alloc") (param i32) (result i32) (i32.const 1024))
      (func (export "handle") (param i32 i32) (result i64) (i64.const 9437184)))"#;
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let mut spec = wasm_spec("huge", wat);
    spec.max_retries = Some(0);
    register(&mut c, spec);
    let run = run_to_end(&mut c, "huge", "{}");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    let error = run.error.unwrap_or_default();
    assert!(error.contains("exceed the maximum"), "{error}");
    assert_still_serving(&mut c, "after an oversize output");
}

// ---------------------------------------------------------------------------------------------
// wasm_entrypoint and max_concurrent_executions (spec `flo-actions.md`)
// ---------------------------------------------------------------------------------------------

/// A WebAssembly action may name the export its executions call (`wasm_entrypoint`,
/// default `handle`): checked at registration, shown by `info`, kept across a restart.
#[test]
fn a_wasm_action_calls_the_entrypoint_it_names_even_after_a_restart() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    let run_only = echo_guest().replace("(export \"handle\")", "(export \"run\")");
    assert_ne!(run_only, echo_guest());

    // Not named: `handle` is required.
    let msg = expect_error(
        c.register_action(wasm_spec("runner", &run_only)),
        ErrorCode::BadRequest,
    );
    assert!(msg.contains("missing export `handle`"), "{msg}");
    // Named: checked and called.
    let info = register(
        &mut c,
        ActionSpec {
            wasm_entrypoint: Some("run".into()),
            ..wasm_spec("runner", &run_only)
        },
    );
    assert_eq!(info.wasm_entrypoint.as_deref(), Some("run"));
    assert_completed(&run_to_end(&mut c, "runner", r#"{"n":1}"#), r#"{"n":1}"#);
    // The default, shown.
    let info = register(&mut c, wasm_spec("echo", &echo_guest()));
    assert_eq!(info.wasm_entrypoint.as_deref(), Some("handle"));
    // Refused: an export it lacks, one of the ABI's others, a bad name, a user action.
    for (entrypoint, words) in [
        ("absent", vec!["missing export `absent`"]),
        ("alloc", vec!["alloc", "ABI"]),
        ("", vec!["wasm_entrypoint", "printable"]),
        ("has space", vec!["wasm_entrypoint", "printable"]),
    ] {
        let spec = ActionSpec {
            wasm_entrypoint: Some(entrypoint.into()),
            ..wasm_spec("refused", &run_only)
        };
        let msg = expect_error(c.register_action(spec), ErrorCode::BadRequest);
        for word in words {
            assert!(msg.contains(word), "{entrypoint:?}: {msg}");
        }
    }
    let user = ActionSpec {
        wasm_entrypoint: Some("run".into()),
        ..user_spec("manual")
    };
    let msg = expect_error(c.register_action(user), ErrorCode::BadRequest);
    assert!(msg.contains("user action"), "{msg}");

    // The CLI: --entrypoint, shown by info.
    let file = dir.path().join("run-only.wat");
    std::fs::write(&file, &run_only).unwrap();
    let path = file.to_str().unwrap();
    cli_ok(
        &addr,
        &[
            "action",
            "register",
            "cli-runner",
            "--wasm",
            path,
            "--entrypoint",
            "run",
        ],
    );
    let doc = cli_json(&addr, &["action", "info", "cli-runner"]);
    assert_eq!(doc["wasm_entrypoint"], "run", "{doc}");
    let text = cli_ok(&addr, &["action", "info", "cli-runner"]);
    assert!(text.contains("entrypoint:  run"), "{text}");

    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(
        c.action("runner").unwrap().wasm_entrypoint.as_deref(),
        Some("run")
    );
    assert_completed(&run_to_end(&mut c, "runner", r#"{"n":2}"#), r#"{"n":2}"#);
    assert_completed(
        &run_to_end(&mut c, "cli-runner", r#"{"n":3}"#),
        r#"{"n":3}"#,
    );
}

/// `--max-concurrent-executions N` (the spec's `max_concurrent_executions`, default 4):
/// at most N guests execute at once on a shard, the others wait for a slot (`pending`).
#[test]
fn max_concurrent_executions_bounds_the_guests_a_shard_runs_at_once() {
    let dir = temp_dir();
    let args = ["--shards", "1", "--max-concurrent-executions", "2"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    register(
        &mut c,
        ActionSpec {
            timeout_ms: Some(600_000),
            max_retries: Some(0),
            ..wasm_spec("spinner", &spin_guest())
        },
    );
    let runs: Vec<String> = (0..3)
        .map(|i| invoke(&mut c, "spinner", &i.to_string()))
        .collect();
    let statuses = |c: &mut Client| -> Vec<RunStatus> {
        runs.iter().map(|id| c.run(id).unwrap().status).collect()
    };
    let executing = |c: &mut Client| c.status().unwrap().shards[0].executions;
    assert!(wait_until(Duration::from_secs(10), || executing(&mut c) == 2));
    let mut now = statuses(&mut c);
    now.sort_by_key(|s| s.as_str());
    assert_eq!(
        now,
        [RunStatus::Pending, RunStatus::Running, RunStatus::Running]
    );
    // A slot frees: the waiting run takes it.
    let running = runs
        .iter()
        .find(|id| c.run(id).unwrap().status == RunStatus::Running)
        .unwrap()
        .clone();
    c.cancel_run(&running).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let now = statuses(&mut c);
        now.iter().filter(|s| **s == RunStatus::Running).count() == 2
            && now.contains(&RunStatus::Cancelled)
    }));
    assert_eq!(executing(&mut c), 2);
    for id in &runs {
        let _ = c.cancel_run(id);
    }
    drop(c);
    drop(server);

    // Out of range: refused at start.
    for bad in [
        ["--max-concurrent-executions", "0"],
        ["--max-concurrent-executions", "65"],
        ["--max-run-steps", "0"],
    ] {
        let dir = temp_dir();
        let refused = common::expect_refusal(dir.path(), &bad);
        assert!(refused.stderr.contains(bad[0]), "{}", refused.stderr);
    }
}

// ---------------------------------------------------------------------------------------------
// Dead letters redriven (`flo action dlq NAME --redrive [RUN...]`)
// ---------------------------------------------------------------------------------------------

fn dlq_worker(c: &mut Client, id: &str, actions: &[&str]) {
    c.register_worker(flo::protocol::WorkerSpec {
        namespace: String::new(),
        worker_id: id.into(),
        worker_type: flo::protocol::WorkerType::Action,
        max_concurrency: Some(100),
        processes: actions.iter().map(|a| a.to_string()).collect(),
        metadata: None,
        machine_id: None,
        labels: None,
    })
    .unwrap();
}

/// Takes the task of `run_id` (waiting up to 10 s) and fails it with `mode`.
fn fail_next(c: &mut Client, worker: &str, action: &str, mode: flo::FailMode) -> RunInfo {
    let task = c
        .await_tasks(worker, &[action], 1, 10_000)
        .unwrap()
        .pop()
        .unwrap_or_else(|| panic!("no task of {action} came"));
    c.fail_task(worker, &flo::TaskRef::from(&task), "gateway down", mode)
        .unwrap()
}

/// Dead-lettered runs are queued again as new attempts by `--redrive` (the named ones, or
/// all of the action's), through a logged record: after a crash they are still pending at
/// their new attempt, and a worker takes them. Runs not dead-lettered, or of a workflow
/// step, are refused with the reason.
#[test]
fn dead_lettered_runs_are_redriven_as_new_attempts_and_stay_so_after_a_restart() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    register(
        &mut c,
        ActionSpec {
            max_retries: Some(0),
            ..user_spec("charge")
        },
    );
    dlq_worker(&mut c, "w1", &["charge", "review"]);
    let mut dead = Vec::new();
    for i in 0..3 {
        let id = invoke(&mut c, "charge", &format!("{{\"n\":{i}}}"));
        let run = fail_next(&mut c, "w1", "charge", flo::FailMode::NoRetry);
        assert!(run.dead_lettered, "{run:?}");
        dead.push(id);
    }
    dead.sort();
    // Refused: a failure that was not dead-lettered, a completed run.
    let non_retryable = invoke(&mut c, "charge", "{}");
    fail_next(&mut c, "w1", "charge", flo::FailMode::NonRetryable);
    let msg = expect_error(c.redrive_run(&non_retryable, None), ErrorCode::Conflict);
    assert!(msg.contains("not dead-lettered"), "{msg}");
    register(&mut c, wasm_spec("echo", &echo_guest()));
    let done = run_to_end(&mut c, "echo", "{}").run_id;
    let msg = expect_error(c.redrive_run(&done, None), ErrorCode::Conflict);
    assert!(msg.contains("completed"), "{msg}");
    expect_error(c.redrive_run("charge-999", None), ErrorCode::NotFound);
    let msg = expect_error(c.redrive_run(&dead[0], Some("echo")), ErrorCode::BadRequest);
    assert!(msg.contains("not \"echo\""), "{msg}");
    // A workflow step's dead-lettered run: its workflow decides.
    register(&mut c, user_spec("review"));
    c.create_workflow(
        "kind: Workflow\nname: reviewed\nversion: \"1\"\nstart:\n  run: \"@actions/review\"\n  \
         transitions:\n    success: flo.Completed\n    failure: flo.Failed\n",
    )
    .unwrap();
    let wf = c
        .start_workflow("reviewed", b"{}", Default::default())
        .unwrap();
    let step_run = fail_next(&mut c, "w1", "review", flo::FailMode::NoRetry);
    assert_eq!(step_run.workflow_run_id.as_deref(), Some(wf.as_str()));
    let msg = expect_error(c.redrive_run(&step_run.run_id, None), ErrorCode::Conflict);
    assert!(msg.contains("workflow run"), "{msg}");

    // Named runs through the CLI: pending at their next attempt, off the dead-letter list.
    let doc = cli_json(&addr, &["action", "dlq", "charge", "--redrive", &dead[0]]);
    assert_eq!(doc["redriven"][0]["run_id"], dead[0].as_str(), "{doc}");
    assert_eq!(doc["redriven"][0]["status"], "pending", "{doc}");
    assert_eq!(doc["redriven"][0]["attempt"], 2, "{doc}");
    let run = c.run(&dead[0]).unwrap();
    assert_eq!(
        (run.status, run.attempt, run.dead_lettered),
        (RunStatus::Pending, 2, false)
    );
    // Again: it is pending now, refused.
    let stderr = common::cli_fails(&addr, &["action", "dlq", "charge", "--redrive", &dead[0]]);
    assert!(stderr.contains("not dead-lettered"), "{stderr}");
    // All the rest of the action's.
    let text = cli_ok(&addr, &["action", "dlq", "charge", "--redrive"]);
    for id in &dead[1..] {
        assert!(
            text.contains(&format!("redriven {id} (attempt 2, pending)")),
            "{text}"
        );
    }
    let (listed, _) = c.list_runs("charge", None, true, None).unwrap();
    assert!(
        listed.is_empty(),
        "the dead-letter list is empty: {listed:?}"
    );

    // Durable: after a crash they are pending at attempt 2, and a worker gets them.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for id in &dead {
        let run = c.run(id).unwrap();
        assert_eq!(
            (run.status, run.attempt, run.dead_lettered),
            (RunStatus::Pending, 2, false),
            "{run:?}"
        );
    }
    dlq_worker(&mut c, "w2", &["charge"]);
    let mut taken = Vec::new();
    while taken.len() < dead.len() {
        let tasks = c.await_tasks("w2", &["charge"], 3, 10_000).unwrap();
        assert!(!tasks.is_empty(), "the redriven runs come to a worker");
        for task in tasks {
            assert_eq!(task.attempt, 2);
            c.complete_task("w2", &flo::TaskRef::from(&task), b"{\"ok\":true}", None)
                .unwrap();
            taken.push(task.task_id);
        }
    }
    taken.sort();
    assert_eq!(taken, dead);
    for id in &dead {
        assert_eq!(c.wait_run(id, 10_000).unwrap().status, RunStatus::Completed);
    }
}

/// A workflow step on a WebAssembly action logs no action run: its guest's KV writes travel
/// in the step's record. Writes to keys the other shard owns reach it, each applied once,
/// also when the server is killed right after the runs completed.
#[test]
fn a_workflow_steps_guest_kv_writes_reach_every_shard_once_across_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    register(&mut c, wasm_spec("set-get", &kv_set_get_guest()));
    c.create_workflow(
        "kind: Workflow\nname: set-key\nversion: \"1\"\nstart:\n  run: \"@actions/set-get\"\n  \
         transitions:\n    success: flo.Completed\n",
    )
    .unwrap();
    // The run's input (a JSON number) is the step's input, so the guest's key.
    let keys: Vec<String> = (100..112).map(|i| i.to_string()).collect();
    let key_shards: HashSet<u32> = keys
        .iter()
        .map(|k| shard_of(&mut c, "default", k))
        .collect();
    assert_eq!(key_shards.len(), 2, "the keys must span both shards");
    for key in &keys {
        let id = c
            .start_workflow("set-key", key.as_bytes(), Default::default())
            .unwrap();
        let run = c.wait_workflow(&id, 10_000).unwrap();
        assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    }
    let (runs, _) = c.list_runs("set-get", None, false, None).unwrap();
    assert!(runs.is_empty(), "no action runs: {runs:?}");
    server.kill9();

    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    assert_guest_writes_applied_once(&mut c, &keys, " after the restart");
}
