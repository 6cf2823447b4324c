//! Test harness: runs the real `flo` binary as a server (and as the CLI) in a temporary
//! data directory on a free port. Every server is killed when its handle is dropped, so a
//! failing test never leaves a process behind.

#![allow(dead_code)]

use flo::Client;
use flo::protocol::{ActionKind, ActionSpec};
use flo_testkit::server::{
    ServerCommand, ServerProcess, StartError, StderrLog, StderrMode, parse_listening, wait_exit,
};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const FLO_BIN: &str = env!("CARGO_BIN_EXE_flo");
/// How long a server may take to say it is listening.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop (or a CLI run) may take.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longer than any reply a test waits for (blocking reads and waits take seconds).
pub const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Segment size used unless a test asks for another: small, so parallel tests stay light
/// on disk, large enough that most tests never roll a segment.
pub const TEST_SEGMENT_BYTES: u64 = 4 << 20;

/// A running `flo server`.
pub struct TestServer {
    process: ServerProcess,
    pub addr: SocketAddr,
    /// Where it serves HTTP (an ephemeral port unless the test gave `--http`); None with
    /// `--http off`.
    pub http: Option<SocketAddr>,
    pub dir: PathBuf,
    /// The ready line the server printed.
    pub ready_line: String,
}

/// A server that exited instead of becoming ready.
#[derive(Debug)]
pub struct Refused {
    pub status: ExitStatus,
    pub stderr: String,
}

fn has_flag(args: &[&str], flag: &str) -> bool {
    args.iter()
        .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
}

impl TestServer {
    /// Starts a server on `dir`: `--listen 127.0.0.1:0 --shards 2` and a small segment size
    /// unless `extra` sets them. Panics (with the server's stderr) if it does not start.
    pub fn start(dir: &Path, extra: &[&str]) -> TestServer {
        match Self::try_start(dir, extra) {
            Ok(server) => server,
            Err(r) => panic!("server did not start: {}\nstderr:\n{}", r.status, r.stderr),
        }
    }

    /// Like `start`, but a server that exits before it is ready is returned as `Refused`.
    pub fn try_start(dir: &Path, extra: &[&str]) -> Result<TestServer, Refused> {
        let mut args: Vec<String> = Vec::new();
        if !has_flag(extra, "--listen") {
            args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        }
        if !has_flag(extra, "--shards") {
            args.extend(["--shards".into(), "2".into()]);
        }
        if !has_flag(extra, "--segment-bytes") {
            args.extend(["--segment-bytes".into(), TEST_SEGMENT_BYTES.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        match Self::try_start_exact(dir, &args) {
            // A start-up that stalls is reported by the server (a rare, not yet understood
            // hang, seen under heavy load); note it and try once more.
            Err(r) if r.stderr.contains("start-up made no progress") => {
                eprintln!(
                    "warning: server start-up stalled, retrying once:\n{}",
                    r.stderr
                );
                Self::try_start_exact(dir, &args)
            }
            // Port 0: the server takes a free port, then each shard listens on it; another
            // process may take it between the two (seen under a loaded test run). The
            // next start asks for another.
            Err(r)
                if !has_flag(extra, "--listen") && r.stderr.contains("Address already in use") =>
            {
                eprintln!("warning: the free port was taken meanwhile, retrying once");
                Self::try_start_exact(dir, &args)
            }
            other => other,
        }
    }

    /// Starts `flo server --data-dir DIR ARGS...` with exactly these arguments.
    pub fn try_start_exact(dir: &Path, args: &[String]) -> Result<TestServer, Refused> {
        Self::try_start_with_env(dir, args, &[])
    }

    /// Like `try_start_exact`, with these environment variables set for the server.
    pub fn try_start_with_env(
        dir: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<TestServer, Refused> {
        let command = ServerCommand {
            bin: FLO_BIN.into(),
            data_dir: dir.to_path_buf(),
            args: args.to_vec(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stderr: StderrMode::Capture {
                log: StderrLog::all(),
                on_line: None,
            },
        };
        let process = match ServerProcess::start(&command, READY_TIMEOUT) {
            Ok(process) => process,
            Err(StartError::Exited { status, stderr }) => return Err(Refused { status, stderr }),
            Err(e) => panic!("server did not start: {e}; stderr:\n{}", e.stderr()),
        };
        let listening = &process.listening;
        let addr = listening
            .addr
            .parse()
            .unwrap_or_else(|_| panic!("unexpected ready line: {:?}", listening.line));
        let http = listening.http.as_ref().map(|h| {
            h.parse()
                .unwrap_or_else(|_| panic!("unexpected ready line: {:?}", listening.line))
        });
        Ok(TestServer {
            addr,
            http,
            dir: dir.to_path_buf(),
            ready_line: listening.line.clone(),
            process,
        })
    }

    /// A new SDK client (handshake done) in the `default` namespace.
    /// A client of this server. A reply it waits for longer than `CLIENT_READ_TIMEOUT`
    /// fails the test (a lost reply must not hang the suite).
    pub fn client(&self) -> Client {
        let mut client = Client::connect(self.addr).expect("connect to the test server");
        client
            .set_read_timeout(Some(CLIENT_READ_TIMEOUT))
            .expect("set the client's read timeout");
        client
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn pid(&self) -> i32 {
        self.process.pid() as i32
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// SIGTERM, wait for the exit, assert it was a clean one. Returns the server's stderr.
    pub fn stop(self) -> String {
        let ended = self.process.stop(EXIT_TIMEOUT);
        let stderr = ended.stderr;
        let status = ended.status.unwrap_or_else(|| {
            panic!("server did not stop within {EXIT_TIMEOUT:?} of SIGTERM; stderr:\n{stderr}")
        });
        assert!(
            status.success(),
            "graceful stop must exit 0, got {status}; stderr:\n{stderr}"
        );
        stderr
    }

    /// Waits for the server to exit by itself; its status and stderr. Panics after
    /// `timeout`.
    pub fn wait_exit(self, timeout: Duration) -> (ExitStatus, String) {
        let ended = self.process.wait_exit(timeout);
        let status = ended
            .status
            .unwrap_or_else(|| panic!("server still running after {timeout:?}"));
        (status, ended.stderr)
    }

    /// SIGKILL and reap. Returns the server's stderr.
    pub fn kill9(self) -> String {
        let ended = self.process.kill();
        if let Some(status) = ended.status {
            assert!(
                !status.success(),
                "a SIGKILLed server cannot exit cleanly: {status}"
            );
        }
        ended.stderr
    }
}

/// Starts `flo server --listen 127.0.0.1:0 --shards N` on `dir` whose stderr the caller
/// handles (`child.stderr`: left unread, or closed), unlike `TestServer`, which drains it.
/// Returns once the server says it listens. The caller kills or stops the child.
pub fn spawn_with_own_stderr(dir: &Path, shards: u32) -> (Child, SocketAddr) {
    let command = ServerCommand {
        bin: FLO_BIN.into(),
        data_dir: dir.to_path_buf(),
        args: vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--shards".into(),
            shards.to_string(),
        ],
        env: Vec::new(),
        stderr: StderrMode::Piped,
    };
    let process = ServerProcess::start(&command, READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("server did not start: {e}"));
    let addr = process.listening.addr.parse().unwrap_or_else(|_| {
        panic!("ready line: {:?}", process.listening.line);
    });
    (process.into_child(), addr)
}

/// `flo 0.1.0 listening on 127.0.0.1:PORT (2 shards, durability sync, data DIR)` → address.
pub fn parse_ready_line(line: &str) -> Option<SocketAddr> {
    parse_listening(line)?.addr.parse().ok()
}

/// Starts a server that must be refused; returns its exit status and stderr.
pub fn expect_refusal(dir: &Path, extra: &[&str]) -> Refused {
    match TestServer::try_start(dir, extra) {
        Ok(server) => {
            let line = server.ready_line.clone();
            drop(server);
            panic!("the server started but should have been refused: {line}")
        }
        Err(r) => {
            assert!(
                !r.status.success(),
                "a refused start must exit non-zero: {}\n{}",
                r.status,
                r.stderr
            );
            assert!(
                r.stderr.contains("error: "),
                "a refused start says `error: ...` on stderr:\n{}",
                r.stderr
            );
            r
        }
    }
}

/// Output of one CLI run.
#[derive(Debug)]
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A `flo` command with no FLO_* variables inherited from the test's environment.
pub fn cli_command() -> Command {
    let mut cmd = Command::new(FLO_BIN);
    cmd.env_remove("FLO_ADDR")
        .env_remove("FLO_NAMESPACE")
        .env_remove("FLO_TOKEN");
    cmd
}

/// Runs `flo --addr ADDR ARGS...`.
pub fn run_cli(addr: &str, args: &[&str]) -> (ExitStatus, String, String) {
    let mut cmd = cli_command();
    cmd.arg("--addr").arg(addr).args(args);
    let out = run_command(cmd);
    (out.status, out.stdout, out.stderr)
}

/// Runs a command to completion (with a time limit), capturing its output.
pub fn run_command(mut cmd: Command) -> CliOutput {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the flo binary");
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let status = wait_exit(&mut child, EXIT_TIMEOUT).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("command {cmd:?} did not finish within {EXIT_TIMEOUT:?}")
    });
    CliOutput {
        status,
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
    }
}

/// A new temporary data directory (removed when dropped).
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("flo-it-")
        .tempdir()
        .expect("create a temp dir")
}

/// Segment files of one shard, in LSN order.
pub fn segment_files(data_dir: &Path, shard: u32) -> Vec<PathBuf> {
    let dir = data_dir.join(format!("shard-{shard:03}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ual"))
        .collect();
    files.sort();
    files
}

/// Removes every shard's snapshots: the data directory then looks as if the server had
/// crashed before taking any, and recovery replays the whole log (tests of the log's own
/// recovery; a graceful stop writes a snapshot of the final state).
pub fn remove_snapshots(data_dir: &Path) {
    for shard in std::fs::read_dir(data_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
    {
        if !shard.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&shard)
            .unwrap()
            .map(|e| e.unwrap().path())
        {
            if file.extension().is_some_and(|x| x == "snap") {
                std::fs::remove_file(&file).unwrap();
            }
        }
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The seeded RNG shared by every test and harness.
#[allow(unused_imports)] // Not every test file draws random numbers.
pub use flo_testkit::Rng;

/// Runs the CLI, asserts success and an empty stderr, returns stdout.
pub fn cli_ok(addr: &str, args: &[&str]) -> String {
    let (status, stdout, stderr) = run_cli(addr, args);
    assert!(
        status.success(),
        "flo {args:?} failed ({status}); stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.is_empty(), "flo {args:?} wrote to stderr: {stderr}");
    stdout
}

/// Runs the CLI with `--json`; stdout must be exactly one JSON document, on one line.
pub fn cli_json(addr: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    one_json_document(&cli_ok(addr, &all))
}

/// Parses stdout that must hold exactly one JSON document on one line.
pub fn one_json_document(stdout: &str) -> serde_json::Value {
    assert!(
        stdout.ends_with('\n'),
        "output should end with a newline: {stdout:?}"
    );
    assert_eq!(
        stdout.trim_end().lines().count(),
        1,
        "expected one line of JSON: {stdout:?}"
    );
    // from_str refuses trailing content, so this also proves there is one document only.
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {stdout:?}"))
}

/// Registers a user-hosted action (executed by workers).
pub fn user_action(
    client: &mut Client,
    name: &str,
    timeout_ms: u64,
    max_retries: u32,
    retry_ms: u64,
) {
    client
        .register_action(ActionSpec {
            namespace: String::new(),
            name: name.into(),
            kind: ActionKind::User,
            wasm: None,
            timeout_ms: Some(timeout_ms),
            max_retries: Some(max_retries),
            retry_delay_ms: Some(retry_ms),
            description: None,
            memory_limit_mb: None,
            wasm_entrypoint: None,
        })
        .unwrap_or_else(|e| panic!("register action {name}: {e}"));
}

/// Registers the WebAssembly action `name` running `guest` (WAT text), without retries;
/// `timeout_ms`: its own execution limit (None: the default).
#[allow(dead_code)]
pub fn guest_action(client: &mut Client, name: &str, guest: String, timeout_ms: Option<u64>) {
    client
        .register_action(ActionSpec {
            namespace: String::new(),
            name: name.into(),
            kind: ActionKind::Wasm,
            wasm: Some(guest.into_bytes()),
            timeout_ms,
            max_retries: Some(0),
            retry_delay_ms: None,
            description: None,
            memory_limit_mb: None,
            wasm_entrypoint: None,
        })
        .unwrap_or_else(|e| panic!("register action {name}: {e}"));
}

/// Registers a WebAssembly action that returns `output` (JSON) whatever its input, without
/// retries.
#[allow(dead_code)]
pub fn fixed_wasm_action(client: &mut Client, name: &str, output: &str) {
    client
        .register_action(ActionSpec {
            namespace: String::new(),
            name: name.into(),
            kind: ActionKind::Wasm,
            wasm: Some(flo_testkit::guests::fixed_guest(output).into_bytes()),
            timeout_ms: None,
            max_retries: Some(0),
            retry_delay_ms: None,
            description: None,
            memory_limit_mb: None,
            wasm_entrypoint: None,
        })
        .unwrap_or_else(|e| panic!("register action {name}: {e}"));
}

/// Every run of `workflow` (all pages of its list).
#[allow(dead_code)]
pub fn all_workflow_runs(
    client: &mut Client,
    workflow: &str,
) -> Vec<flo::protocol::WorkflowRunInfo> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client
            .list_workflow_runs_page(workflow, None, Some(1000), cursor.as_deref())
            .unwrap();
        out.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

/// Runs the CLI expecting a failure the server reported (refused, not found): exit code 1,
/// nothing on stdout, `error: ...` on stderr. Returns stderr.
pub fn cli_fails(addr: &str, args: &[&str]) -> String {
    cli_fails_with(addr, args, 1)
}

/// Runs the CLI expecting a usage error (bad arguments, a definition refused by
/// validation): exit code 2, nothing on stdout, `error: ...` on stderr. Returns stderr.
pub fn cli_usage_fails(addr: &str, args: &[&str]) -> String {
    cli_fails_with(addr, args, 2)
}

/// Runs the CLI expecting exit code `code`, nothing on stdout, `error: ...` on stderr.
pub fn cli_fails_with(addr: &str, args: &[&str], code: i32) -> String {
    let (status, stdout, stderr) = run_cli(addr, args);
    assert_eq!(
        status.code(),
        Some(code),
        "flo {args:?} should exit {code}; stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "flo {args:?} printed on failure: {stdout}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}
