//! What the CLI reads and writes around its commands, against a real server: the server's
//! structured log lines (`--log-format json`, `RUST_LOG`), `flo workflow status --watch`,
//! shell completions, and values given as `@FILE` or `-` (stdin), beyond what a command
//! line holds.

mod common;

use common::{TestServer, cli_command, cli_json, cli_ok, run_cli, temp_dir, wait_until};
use flo_testkit::guests::guest;
use flo_testkit::server::wait_exit;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// Larger than one command-line argument may be (Linux: 128 KiB).
const BIG_BYTES: usize = 200 * 1024;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A guest that logs `message` at `level` (2 warn) and returns `{}`.
fn log_guest(level: u8, message: &str) -> String {
    guest(
        &[(0, message), (1000, "{}")],
        &format!(
            "(call $log (i32.const {level}) (i32.const 0) (i32.const {}))\n    (call $pack (i32.const 1000) (i32.const 2))",
            message.len()
        ),
    )
}

/// Registers the guest `warner` (it logs "disk almost full 7f3a" as a warning) and runs it
/// once; returns the run id.
fn run_warner(server: &TestServer, files: &Path) -> String {
    let addr = server.addr_string();
    let wat = write(
        files,
        "warner.wat",
        log_guest(2, "disk almost full 7f3a").as_bytes(),
    );
    cli_ok(
        &addr,
        &[
            "action",
            "register",
            "warner",
            "--wasm",
            wat.to_str().unwrap(),
        ],
    );
    let run = cli_json(&addr, &["action", "invoke", "warner", "--wait"]);
    run["run_id"].as_str().unwrap().to_string()
}

#[test]
fn json_logs_are_one_object_a_line_with_level_target_and_message() {
    let dir = temp_dir();
    let files = temp_dir();
    let server = TestServer::start(dir.path(), &["--log-format", "json"]);
    let addr = server.addr_string();
    let run_id = run_warner(&server, files.path());
    assert!(
        wait_until(Duration::from_secs(5), || server
            .stderr()
            .contains("disk almost full 7f3a")),
        "{}",
        server.stderr()
    );
    let stderr = server.stop();

    let events: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    for e in &events {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(e[field].is_string(), "no {field}: {e}");
        }
        assert!(e["target"].as_str().unwrap().starts_with("flo::"), "{e}");
    }
    let find = |message: &str| {
        events
            .iter()
            .find(|e| e["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} event:\n{stderr}"))
    };
    let listening = find("listening");
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["target"], "flo::boot");
    assert_eq!(listening["shards"], 2, "{listening}");
    assert_eq!(listening["addr"], addr.as_str(), "{listening}");
    let guest = find("disk almost full 7f3a");
    assert_eq!(guest["level"], "WARN", "{guest}");
    assert_eq!(guest["target"], "flo::guest", "{guest}");
    assert_eq!(guest["action"], "warner", "{guest}");
    assert_eq!(guest["namespace"], "default", "{guest}");
    assert_eq!(guest["run"], run_id.as_str(), "{guest}");
    assert!(guest["shard"].is_u64(), "{guest}");
    assert_eq!(find("flo stopped")["target"], "flo::boot");
}

#[test]
fn rust_log_hides_the_levels_it_filters_out() {
    let dir = temp_dir();
    let files = temp_dir();
    let segment_bytes = common::TEST_SEGMENT_BYTES.to_string();
    let args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--shards",
        "2",
        "--segment-bytes",
        &segment_bytes,
    ]
    .map(String::from)
    .to_vec();
    let server = TestServer::try_start_with_env(dir.path(), &args, &[("RUST_LOG", "warn")])
        .unwrap_or_else(|r| panic!("{}", r.stderr));
    run_warner(&server, files.path());
    assert!(
        wait_until(Duration::from_secs(5), || server
            .stderr()
            .contains("disk almost full 7f3a")),
        "{}",
        server.stderr()
    );
    let stderr = server.stop();
    assert!(!stderr.contains("listening"), "{stderr}");
    assert!(!stderr.contains(" INFO "), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("disk almost full 7f3a"))
        .unwrap();
    assert!(
        line.contains(" WARN flo::guest: disk almost full 7f3a"),
        "{line}"
    );
    assert!(line.contains("action=warner"), "{line}");

    // `--log` wins over RUST_LOG; a filter that does not parse is a usage error.
    let out = common::run_command({
        let mut cmd = cli_command();
        cmd.args(["server", "--data-dir"])
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0", "--http", "off"])
            .args(["--log", "flo=loud"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--log") && out.stderr.contains("flo=loud"),
        "{out:?}"
    );
}

const APPROVAL: &str = r#"kind: Workflow
name: approval
version: "1"
start:
  waitForSignal:
    type: go
    timeoutMs: 60000
  transitions:
    success: flo.Completed
"#;

/// `flo --json workflow status RUN --watch` in the background, its stdout piped.
fn watch(addr: &str, run_id: &str) -> Child {
    cli_command()
        .args(["--addr", addr, "--json", "workflow", "status", run_id])
        .args(["--watch", "--interval", "100ms"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the watcher's lines until it exits (within 20 s); its exit code and documents.
fn watched(mut child: Child, first: &mut dyn FnMut(&Value)) -> (Option<i32>, Vec<Value>) {
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut docs = Vec::new();
    for line in stdout.lines() {
        let doc: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if docs.is_empty() {
            first(&doc);
        }
        docs.push(doc);
    }
    let status = wait_exit(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the watcher did not end: {docs:?}")
    });
    (status.code(), docs)
}

#[test]
fn status_watch_follows_a_run_until_its_end() {
    let dir = temp_dir();
    let files = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let def = write(files.path(), "approval.yaml", APPROVAL.as_bytes());
    cli_ok(&addr, &["workflow", "create", "-f", def.to_str().unwrap()]);

    // Completed by a signal sent while it watches: exit 0, the last document completed.
    let run = cli_json(&addr, &["workflow", "start", "approval"]);
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let (code, docs) = watched(watch(&addr, &run_id), &mut |first| {
        assert_eq!(first["status"], "waiting", "{first}");
        cli_ok(
            &addr,
            &["workflow", "signal", &run_id, "--type", "go", r#"{"ok":1}"#],
        );
    });
    assert_eq!(code, Some(0), "{docs:?}");
    assert!(docs.len() >= 2, "{docs:?}");
    let last = docs.last().unwrap();
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["run_id"], run_id.as_str());
    assert!(docs.windows(2).all(|w| w[0] != w[1]), "one per change");

    // Cancelled: exit 1, as `start --wait` for a run that did not complete.
    let run = cli_json(&addr, &["workflow", "start", "approval"]);
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let (code, docs) = watched(watch(&addr, &run_id), &mut |_| {
        cli_ok(&addr, &["workflow", "cancel", &run_id]);
    });
    assert_eq!(code, Some(1), "{docs:?}");
    assert_eq!(docs.last().unwrap()["status"], "cancelled");

    // A run that does not exist: not found.
    let (status, _, stderr) = run_cli(&addr, &["workflow", "status", "nope-1", "--watch"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    // --interval is bounded.
    let (status, _, stderr) = run_cli(
        &addr,
        &[
            "workflow",
            "status",
            &run_id,
            "--watch",
            "--interval",
            "1ms",
        ],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = common::run_command({
            let mut cmd = cli_command();
            cmd.args(["completions", shell]);
            cmd
        });
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(out.stderr.is_empty(), "{shell}: {}", out.stderr);
        assert!(out.stdout.len() > 1000, "{shell}: {}", out.stdout);
        assert!(out.stdout.contains("flo"), "{shell}");
        assert!(out.stdout.contains("workflow"), "{shell}");
        assert!(out.stdout.contains("--watch"), "{shell}");
    }
    let (status, _, stderr) = run_cli("127.0.0.1:1", &["completions", "tcsh"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
}

/// Runs `flo --addr ADDR ARGS...` with `stdin` on its standard input.
fn cli_with_stdin(addr: &str, args: &[&str], stdin: &[u8]) -> common::CliOutput {
    let mut child = cli_command()
        .arg("--addr")
        .arg(addr)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    common::CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `{"blob":"xxx..."}` of about `bytes`.
fn big_json(bytes: usize, fill: char) -> String {
    format!(r#"{{"blob":"{}"}}"#, fill.to_string().repeat(bytes))
}

#[test]
fn values_over_128_kib_come_from_a_file_or_stdin() {
    let dir = temp_dir();
    let files = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();

    // KV: a file's bytes, then stdin's.
    let value: String = "0123456789abcdef".repeat(BIG_BYTES / 16);
    let file = write(files.path(), "value.txt", value.as_bytes());
    cli_ok(
        &addr,
        &["kv", "put", "from-file", &format!("@{}", file.display())],
    );
    let got = cli_json(&addr, &["kv", "get", "from-file"]);
    assert_eq!(got["value"].as_str().unwrap().len(), value.len());
    assert!(got["value"] == value.as_str());
    let out = cli_with_stdin(&addr, &["kv", "put", "from-stdin", "-"], value.as_bytes());
    assert!(out.status.success(), "{out:?}");
    assert!(cli_json(&addr, &["kv", "get", "from-stdin"])["value"] == value.as_str());

    // A workflow's input from stdin, its signal's payload from a file.
    let def = write(files.path(), "approval.yaml", APPROVAL.as_bytes());
    cli_ok(&addr, &["workflow", "create", "-f", def.to_str().unwrap()]);
    let input = big_json(BIG_BYTES, 'i');
    let out = cli_with_stdin(
        &addr,
        &["--json", "workflow", "start", "approval", "-"],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let run: Value = serde_json::from_str(&out.stdout).unwrap();
    let run_id = run["run_id"].as_str().unwrap();
    let payload = big_json(BIG_BYTES, 'p');
    let file = write(files.path(), "payload.json", payload.as_bytes());
    cli_ok(
        &addr,
        &[
            "workflow",
            "signal",
            run_id,
            "--type",
            "go",
            &format!("@{}", file.display()),
        ],
    );
    let watched = cli_ok(&addr, &["--json", "workflow", "status", run_id, "--watch"]);
    let status: Value = serde_json::from_str(watched.lines().last().unwrap()).unwrap();
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(
        status["input"]["blob"].as_str().unwrap().len(),
        BIG_BYTES,
        "the input came whole"
    );
    assert_eq!(
        status["steps"][0]["output"]["blob"].as_str().unwrap().len(),
        BIG_BYTES,
        "the signal's payload came whole"
    );

    // `@@` is a literal `@`.
    cli_ok(&addr, &["kv", "put", "handle", "@@flo"]);
    assert_eq!(cli_json(&addr, &["kv", "get", "handle"])["value"], "@flo");
}

#[test]
fn a_missing_file_or_a_second_stdin_is_a_clear_usage_error() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let (status, stdout, stderr) = run_cli(&addr, &["kv", "put", "k", "@/no/such/value.json"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("cannot read file \"/no/such/value.json\"")
            && stderr.contains("No such file"),
        "{stderr}"
    );
    let (status, _, _) = run_cli(&addr, &["kv", "get", "k"]);
    assert_eq!(status.code(), Some(1), "nothing was stored");

    let out = cli_with_stdin(
        &addr,
        &["action", "invoke", "any", "-", "--labels", "-"],
        b"{}",
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("read once"), "{out:?}");
}
