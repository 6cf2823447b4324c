//! The server under test: `flo server` on a fixed data directory and port, killed with
//! SIGKILL and started again on both (the process itself: `flo_testkit::server`).

use flo_testkit::Rng;
use flo_testkit::server::{ServerCommand, ServerProcess, StderrLog, StderrMode};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a start has to print its `listening` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop (SIGTERM) may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of the server's stderr kept for a violation's message.
const STDERR_TAIL_LINES: usize = 30;
/// Ports tried for the first start before giving up.
const PORT_ATTEMPTS_MAX: u64 = 20;

/// The servers' notes of a shard thread woken by the watchdog (`shards/runtime/src/kick.rs`): at
/// run time, and during a start-up. A stall the wake-up ended is no violation, but it is
/// counted for the summary and each note is printed as it comes.
pub static WOKEN_AT_RUN_TIME: AtomicU64 = AtomicU64::new(0);
pub static WOKEN_AT_START_UP: AtomicU64 = AtomicU64::new(0);

fn count_wake_up(line: &str) {
    let counter = if line.contains("showed no sign of life") {
        &WOKEN_AT_RUN_TIME
    } else if line.contains("start-up made no progress") {
        &WOKEN_AT_START_UP
    } else {
        return;
    };
    counter.fetch_add(1, Ordering::Relaxed);
    println!("server stderr: {line}");
}

/// How to start the server.
pub struct ServerSpec {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub shards: u32,
    /// More `flo server` arguments.
    pub extra: Vec<String>,
}

/// A running server.
pub struct Server {
    process: ServerProcess,
    /// Where it listens, `127.0.0.1:PORT`.
    pub addr: String,
    /// From spawning it to its `listening` line.
    pub ready_in: Duration,
}

/// A start that did not give a ready server.
#[derive(Debug)]
pub struct StartFailure {
    pub what: String,
    /// The last lines of its stderr.
    pub stderr: String,
}

/// What a kill found.
pub struct Killed {
    /// The server had exited by itself before the kill.
    pub exited_before: Option<ExitStatus>,
    pub stderr: String,
}

/// The last lines a server wrote on stderr, readable from another thread.
pub type StderrTail = StderrLog;

impl Server {
    /// The first start: on a loopback port below the kernel's ephemeral range, so that no
    /// client connection (ours or another process's) takes the port while the server is
    /// down between a kill and the restart. Another port is tried when one is taken.
    pub fn start_first(spec: &ServerSpec) -> Result<Server, StartFailure> {
        let (low, high) = free_port_range();
        let mut rng = Rng::from_time();
        let mut attempt = 0;
        loop {
            let port = rng.between(low, high);
            match Server::start(spec, &format!("127.0.0.1:{port}")) {
                Err(failure)
                    if failure.stderr.contains("in use") && attempt + 1 < PORT_ATTEMPTS_MAX =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Starts `flo server --data-dir DIR --listen LISTEN --shards N EXTRA...` and waits for
    /// its `listening` line.
    pub fn start(spec: &ServerSpec, listen: &str) -> Result<Server, StartFailure> {
        let mut args: Vec<String> = vec![
            "--listen".into(),
            listen.into(),
            "--shards".into(),
            spec.shards.to_string(),
        ];
        args.extend(spec.extra.iter().cloned());
        let command = ServerCommand {
            bin: spec.bin.clone(),
            data_dir: spec.data_dir.clone(),
            args,
            env: Vec::new(),
            stderr: StderrMode::Capture {
                log: StderrLog::tail(STDERR_TAIL_LINES),
                on_line: Some(count_wake_up),
            },
        };
        match ServerProcess::start(&command, READY_TIMEOUT) {
            Ok(process) => Ok(Server {
                addr: process.listening.addr.clone(),
                ready_in: process.ready_in,
                process,
            }),
            Err(e) => Err(StartFailure {
                what: e.to_string(),
                stderr: e.stderr().to_string(),
            }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGKILL, then reap it.
    pub fn kill(self) -> Killed {
        let ended = self.process.kill();
        Killed {
            exited_before: ended.status.filter(|_| ended.exited_before),
            stderr: ended.stderr,
        }
    }

    /// SIGTERM and wait: `Err` (with the stderr tail) unless it exits 0 in time.
    pub fn stop(self) -> Result<(), StartFailure> {
        let ended = self.process.stop(STOP_TIMEOUT);
        match ended.status {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(StartFailure {
                what: format!("a graceful stop (SIGTERM) exited with {status}"),
                stderr: ended.stderr,
            }),
            None => Err(StartFailure {
                what: format!(
                    "did not exit within {} s of SIGTERM",
                    STOP_TIMEOUT.as_secs()
                ),
                stderr: ended.stderr,
            }),
        }
    }

    /// The last lines of its stderr so far.
    pub fn stderr_tail(&self) -> String {
        self.process.stderr()
    }

    /// A handle on its stderr tail for another thread.
    pub fn stderr_handle(&self) -> StderrTail {
        self.process
            .stderr_log()
            .expect("the server's stderr is captured")
    }
}

/// What the threads of process `pid` are doing: each thread's name, state and kernel wait
/// channel, one line each; with gdb installed, a backtrace of every thread is written to
/// `backtrace_file` too (named in the answer).
pub fn diagnose(pid: u32, backtrace_file: &Path) -> String {
    let mut lines = Vec::new();
    let tasks = format!("/proc/{pid}/task");
    let mut tids: Vec<String> = std::fs::read_dir(&tasks)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    tids.sort();
    for tid in &tids {
        let read = |file: &str| {
            std::fs::read_to_string(format!("{tasks}/{tid}/{file}"))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        // The state is the field after the parenthesised name in `stat`.
        let stat = read("stat");
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        lines.push(format!(
            "thread {tid} {:?}: state {state}, waiting in {}",
            read("comm"),
            read("wchan")
        ));
    }
    let gdb = Command::new("timeout")
        .args([
            "60",
            "gdb",
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "thread apply all bt",
        ])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            match std::fs::write(backtrace_file, &out.stdout) {
                Ok(()) => lines.push(format!(
                    "backtraces of every thread: {}",
                    backtrace_file.display()
                )),
                Err(e) => lines.push(format!("cannot write {}: {e}", backtrace_file.display())),
            }
        }
        _ => lines.push("no backtraces (gdb missing or not allowed to attach)".into()),
    }
    lines.join("\n")
}

/// Ports below the kernel's ephemeral range (`ip_local_port_range`), where no outgoing
/// connection is given a port.
fn free_port_range() -> (u64, u64) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    let high = ephemeral_low.saturating_sub(1).max(2048);
    let low = high.saturating_sub(12_000).max(1024);
    (low, high)
}
