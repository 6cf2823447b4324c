//! The server under test: `flo server` on a fixed data directory and port, killed with
//! SIGKILL and started again on both.

use crate::rng::Rng;
use flo_loadtest::spawn::{NotListening, wait_exit, wait_listening};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
    child: Option<Child>,
    /// Where it listens, `127.0.0.1:PORT`.
    pub addr: String,
    /// From spawning it to its `listening` line.
    pub ready_in: Duration,
    stderr: Arc<Mutex<Tail>>,
    reader: Option<JoinHandle<()>>,
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
#[derive(Clone)]
pub struct StderrTail(Arc<Mutex<Tail>>);

impl StderrTail {
    pub fn text(&self) -> String {
        self.0.lock().unwrap().text()
    }
}

/// The last lines the server wrote on stderr.
#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    fn push(&mut self, line: String) {
        if self.lines.len() == STDERR_TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        lines.join("\n")
    }
}

impl Server {
    /// The first start: on a loopback port below the kernel's ephemeral range, so that no
    /// client connection (ours or another process's) takes the port while the server is
    /// down between a kill and the restart. Another port is tried when one is taken.
    pub fn start_first(spec: &ServerSpec) -> Result<Server, StartFailure> {
        let (low, high) = free_port_range();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut rng = Rng::derive(nanos, u64::from(std::process::id()), 0);
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
        let started = Instant::now();
        let mut child = Command::new(&spec.bin)
            .arg("server")
            .arg("--data-dir")
            .arg(&spec.data_dir)
            .args(["--listen", listen, "--shards", &spec.shards.to_string()])
            .args(&spec.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StartFailure {
                what: format!("cannot run {}: {e}", spec.bin.display()),
                stderr: String::new(),
            })?;
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        let reader = thread::Builder::new()
            .name("flo-stderr".into())
            .spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    count_wake_up(&line);
                    sink.lock().unwrap().push(line);
                }
            })
            .ok();
        let mut server = Server {
            child: Some(child),
            addr: String::new(),
            ready_in: Duration::ZERO,
            stderr,
            reader,
        };
        let child = server.child.as_mut().expect("just started");
        match wait_listening(child, READY_TIMEOUT) {
            Ok(listening) => {
                server.addr = listening.addr;
                server.ready_in = started.elapsed();
                Ok(server)
            }
            Err(why) => {
                let what = match why {
                    NotListening::Exited(status) => {
                        format!("exited before it was ready ({status})")
                    }
                    NotListening::ClosedStdout => "closed its stdout before it was ready".into(),
                    NotListening::TimedOut => format!(
                        "not ready within {} s (no `listening` line)",
                        READY_TIMEOUT.as_secs()
                    ),
                    NotListening::NoThread(e) => format!("cannot read its stdout: {e}"),
                };
                let stderr = server.kill().stderr;
                Err(StartFailure { what, stderr })
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL, then reap it.
    pub fn kill(mut self) -> Killed {
        let mut child = self.child.take().expect("a server not yet stopped");
        let exited_before = child.try_wait().ok().flatten();
        if exited_before.is_none() {
            let _ = child.kill();
        }
        let _ = child.wait();
        Killed {
            exited_before,
            stderr: self.finish_stderr(),
        }
    }

    /// SIGTERM and wait: `Err` (with the stderr tail) unless it exits 0 in time.
    pub fn stop(mut self) -> Result<(), StartFailure> {
        let mut child = self.child.take().expect("a server not yet stopped");
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = wait_exit(&mut child, STOP_TIMEOUT);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let stderr = self.finish_stderr();
        match status {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(StartFailure {
                what: format!("a graceful stop (SIGTERM) exited with {status}"),
                stderr,
            }),
            None => Err(StartFailure {
                what: format!(
                    "did not exit within {} s of SIGTERM",
                    STOP_TIMEOUT.as_secs()
                ),
                stderr,
            }),
        }
    }

    /// The last lines of its stderr so far.
    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().unwrap().text()
    }

    /// A handle on its stderr tail for another thread.
    pub fn stderr_handle(&self) -> StderrTail {
        StderrTail(self.stderr.clone())
    }

    /// Once the process is gone: the stderr reader ends with the pipe.
    fn finish_stderr(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.stderr_tail()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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
