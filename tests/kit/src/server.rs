//! `flo server` as a child process: the command line, the start (waiting for the ready line
//! on stdout), the capture of stderr, a graceful stop or a kill, and a kill on drop so a
//! failing test never leaves a process behind.
//!
//! The integration tests (`tests/common`), `flo-loadtest --spawn` and `flo-chaos` build on
//! it; each keeps its own policy (what a failure is, what its drop does).

use std::collections::VecDeque;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a server that closed its stdout has to exit.
const EXIT_AFTER_STDOUT_CLOSED: Duration = Duration::from_secs(5);
/// How often `wait_exit` looks.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// How to start a server: `BIN server --data-dir DATA_DIR ARGS...` with `env` set. Unless
/// `args` name `--http`, the server serves HTTP on an ephemeral loopback port
/// (`HTTP_EPHEMERAL`), not the fixed default every server would want.
pub struct ServerCommand {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub stderr: StderrMode,
}

/// What becomes of the server's stderr.
pub enum StderrMode {
    /// A thread reads it into this log, calling `on_line` (if any) on each line.
    Capture {
        log: StderrLog,
        on_line: Option<fn(&str)>,
    },
    /// The server writes to ours.
    Inherit,
    /// Piped and left to the caller: `ServerProcess::into_child` hands the pipe over.
    Piped,
}

/// What a server wrote on stderr, readable from any thread while it runs.
#[derive(Clone)]
pub struct StderrLog(Arc<Mutex<Kept>>);

enum Kept {
    All(String),
    Tail {
        lines: VecDeque<String>,
        lines_max: usize,
    },
}

impl StderrLog {
    /// Keeps everything.
    pub fn all() -> StderrLog {
        StderrLog(Arc::new(Mutex::new(Kept::All(String::new()))))
    }

    /// Keeps the last `lines_max` lines.
    pub fn tail(lines_max: usize) -> StderrLog {
        assert!(lines_max > 0, "a tail of no lines keeps nothing");
        StderrLog(Arc::new(Mutex::new(Kept::Tail {
            lines: VecDeque::with_capacity(lines_max),
            lines_max,
        })))
    }

    /// What was kept: all of it as written, or the tail's lines joined by newlines.
    pub fn text(&self) -> String {
        match &*self.0.lock().unwrap() {
            Kept::All(text) => text.clone(),
            Kept::Tail { lines, .. } => {
                let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                lines.join("\n")
            }
        }
    }

    /// `line` as read, its newline included.
    fn push(&self, line: &str) {
        match &mut *self.0.lock().unwrap() {
            Kept::All(text) => text.push_str(line),
            Kept::Tail { lines, lines_max } => {
                if lines.len() == *lines_max {
                    lines.pop_front();
                }
                lines.push_back(line.trim_end_matches('\n').to_string());
            }
        }
    }
}

/// `--http` for servers the kit starts: an ephemeral loopback port (many servers start at
/// once in the tests).
pub const HTTP_EPHEMERAL: &str = "127.0.0.1:0";

/// The arguments to give a server: `args`, with `--http HTTP_EPHEMERAL` unless they say.
pub fn with_http_default(args: &[String]) -> Vec<String> {
    let mut args = args.to_vec();
    if !args
        .iter()
        .any(|a| a == "--http" || a.starts_with("--http="))
    {
        args.extend(["--http".to_string(), HTTP_EPHEMERAL.to_string()]);
    }
    args
}

/// What the server's ready line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub shards: u32,
    pub durability: String,
    /// Where it serves HTTP (`127.0.0.1:PORT`); None with `--http off` (or a server that
    /// does not say).
    pub http: Option<String>,
    /// The line itself.
    pub line: String,
}

/// Parses `flo 0.1.0 listening on 127.0.0.1:PORT (2 shards, durability sync, http
/// 127.0.0.1:PORT, data DIR)` (`http off`; older servers said no `http`).
pub fn parse_listening(line: &str) -> Option<Listening> {
    let rest = line.split_once(" listening on ")?.1;
    let (addr, rest) = rest.split_once(" (")?;
    let (shards, rest) = rest.split_once(" shards, durability ")?;
    let durability = rest.split([',', ')']).next()?;
    let http = rest[durability.len()..]
        .strip_prefix(", http ")
        .and_then(|r| r.split([',', ')']).next())
        .filter(|h| *h != "off")
        .map(str::to_string);
    Some(Listening {
        addr: addr.to_string(),
        shards: shards.parse().ok()?,
        durability: durability.to_string(),
        http,
        line: line.trim_end().to_string(),
    })
}

/// A start that gave no ready server. The process is gone (reaped) in every case.
#[derive(Debug)]
pub enum StartError {
    /// The binary could not be run.
    Spawn { bin: PathBuf, error: std::io::Error },
    /// No thread could be started to read its output.
    NoThread(std::io::Error),
    /// It exited before it was ready.
    Exited { status: ExitStatus, stderr: String },
    /// It closed its stdout but did not exit (it never does that); killed.
    ClosedStdout { stderr: String },
    /// No ready line within the time given; killed.
    TimedOut { timeout: Duration, stderr: String },
}

impl StartError {
    /// What the server wrote on stderr (empty unless captured).
    pub fn stderr(&self) -> &str {
        match self {
            StartError::Spawn { .. } | StartError::NoThread(_) => "",
            StartError::Exited { stderr, .. }
            | StartError::ClosedStdout { stderr }
            | StartError::TimedOut { stderr, .. } => stderr,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Spawn { bin, error } => write!(f, "cannot run {}: {error}", bin.display()),
            StartError::NoThread(e) => write!(f, "cannot start a thread to read its output: {e}"),
            StartError::Exited { status, .. } => write!(f, "exited before it was ready ({status})"),
            StartError::ClosedStdout { .. } => write!(f, "closed its stdout before it was ready"),
            StartError::TimedOut { timeout, .. } => write!(
                f,
                "not ready within {} s (no `listening` line)",
                timeout.as_secs()
            ),
        }
    }
}

/// How a process ended when we ended it, and what it wrote on stderr.
#[derive(Debug)]
pub struct Ended {
    /// Its exit status; `None` if a graceful stop timed out (it was then killed).
    pub status: Option<ExitStatus>,
    /// It had exited by itself before we signalled it (then `status` is that exit).
    pub exited_before: bool,
    pub stderr: String,
}

/// A running `flo server`, killed (SIGKILL) and reaped when dropped.
pub struct ServerProcess {
    child: Option<Child>,
    pub listening: Listening,
    /// From spawning it to its ready line.
    pub ready_in: Duration,
    stderr: Option<StderrLog>,
    threads: Vec<JoinHandle<()>>,
}

impl ServerProcess {
    /// Starts the server and waits up to `ready_timeout` for its ready line.
    pub fn start(
        cmd: &ServerCommand,
        ready_timeout: Duration,
    ) -> Result<ServerProcess, StartError> {
        let started = Instant::now();
        let stderr_stdio = match cmd.stderr {
            StderrMode::Inherit => Stdio::inherit(),
            StderrMode::Capture { .. } | StderrMode::Piped => Stdio::piped(),
        };
        let child = Command::new(&cmd.bin)
            .arg("server")
            .arg("--data-dir")
            .arg(&cmd.data_dir)
            .args(with_http_default(&cmd.args))
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_stdio)
            .spawn()
            .map_err(|error| StartError::Spawn {
                bin: cmd.bin.clone(),
                error,
            })?;
        let mut server = ServerProcess {
            child: Some(child),
            listening: Listening {
                addr: String::new(),
                shards: 0,
                durability: String::new(),
                http: None,
                line: String::new(),
            },
            ready_in: Duration::ZERO,
            stderr: None,
            threads: Vec::new(),
        };
        if let StderrMode::Capture { log, on_line } = &cmd.stderr {
            let pipe = server.child_mut().stderr.take().expect("stderr is piped");
            let reader = read_stderr(pipe, log.clone(), *on_line).map_err(StartError::NoThread)?;
            server.threads.push(reader);
            server.stderr = Some(log.clone());
        }
        match server.wait_listening(ready_timeout) {
            Ok(listening) => {
                server.listening = listening;
                server.ready_in = started.elapsed();
                Ok(server)
            }
            Err(NotReady::Exited(status)) => Err(StartError::Exited {
                status,
                stderr: server.finish(),
            }),
            Err(NotReady::ClosedStdout) => Err(StartError::ClosedStdout {
                stderr: server.kill().stderr,
            }),
            Err(NotReady::TimedOut) => Err(StartError::TimedOut {
                timeout: ready_timeout,
                stderr: server.kill().stderr,
            }),
            Err(NotReady::NoThread(e)) => {
                server.kill();
                Err(StartError::NoThread(e))
            }
        }
    }

    /// Waits for the ready line on the child's stdout. A thread reads stdout: it hands over
    /// the lines until the ready one, then forwards anything else to our stderr as
    /// `[flo] LINE` until the server exits (the server prints nothing else there).
    fn wait_listening(&mut self, timeout: Duration) -> Result<Listening, NotReady> {
        let stdout = self.child_mut().stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel::<Option<String>>();
        let reader = thread::Builder::new()
            .name("flo-stdout".into())
            .spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                let mut handing_over = true;
                for line in lines.by_ref() {
                    let Ok(line) = line else { break };
                    if handing_over {
                        handing_over = tx.send(Some(line)).is_ok();
                    } else {
                        eprintln!("[flo] {line}");
                    }
                }
                let _ = tx.send(None);
            })
            .map_err(NotReady::NoThread)?;
        self.threads.push(reader);
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Some(line)) => match parse_listening(&line) {
                    Some(listening) => return Ok(listening),
                    None => eprintln!("[flo] {line}"),
                },
                Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(
                        match wait_exit(self.child_mut(), EXIT_AFTER_STDOUT_CLOSED) {
                            Some(status) => NotReady::Exited(status),
                            None => NotReady::ClosedStdout,
                        },
                    );
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Err(NotReady::TimedOut),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// What it wrote on stderr so far (empty unless captured).
    pub fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .map(StderrLog::text)
            .unwrap_or_default()
    }

    /// A handle on its stderr for another thread (`None` unless captured).
    pub fn stderr_log(&self) -> Option<StderrLog> {
        self.stderr.clone()
    }

    /// Sends `sig` (kill(2)) to the process.
    pub fn signal(&self, sig: libc::c_int) -> std::io::Result<()> {
        // SAFETY: plain kill(2) on the pid of our own child, which we have not reaped yet
        // (`child` is `Some` until it is).
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        match rc {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// SIGKILL (unless it already exited), then reap it.
    pub fn kill(mut self) -> Ended {
        let mut child = self.child.take().expect("a server not yet ended");
        let exited = child.try_wait().ok().flatten();
        if exited.is_none() {
            let _ = child.kill();
        }
        let status = child.wait().ok();
        Ended {
            status: exited.or(status),
            exited_before: exited.is_some(),
            stderr: self.finish(),
        }
    }

    /// SIGTERM (unless it already exited) and wait up to `timeout` for the exit; after that,
    /// SIGKILL, and `status` is `None`.
    pub fn stop(mut self, timeout: Duration) -> Ended {
        let exited = self.child_mut().try_wait().ok().flatten();
        if exited.is_none() {
            let _ = self.signal(libc::SIGTERM);
        }
        let status = exited.or_else(|| wait_exit(self.child_mut(), timeout));
        let mut child = self.child.take().expect("a server not yet ended");
        if status.is_none() {
            let _ = child.kill();
        }
        // Reaps it, or gives back the status already reaped.
        let _ = child.wait();
        Ended {
            status,
            exited_before: exited.is_some(),
            stderr: self.finish(),
        }
    }

    /// Waits up to `timeout` for it to exit by itself; after that, SIGKILL, and `status`
    /// is `None`.
    pub fn wait_exit(mut self, timeout: Duration) -> Ended {
        let status = wait_exit(self.child_mut(), timeout);
        let mut child = self.child.take().expect("a server not yet ended");
        if status.is_none() {
            let _ = child.kill();
        }
        // Reaps it, or gives back the status already reaped.
        let _ = child.wait();
        Ended {
            status,
            exited_before: false,
            stderr: self.finish(),
        }
    }

    /// The process itself, for a caller that handles it from here (its stderr too, if
    /// `StderrMode::Piped`). Dropping the `Child` no longer kills it.
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("a server not yet ended")
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a server not yet ended")
    }

    /// Once the process is gone (its pipes closed): the readers end; what stderr held.
    fn finish(&mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.stderr()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Why no ready line came.
enum NotReady {
    Exited(ExitStatus),
    ClosedStdout,
    TimedOut,
    NoThread(std::io::Error),
}

/// A thread that reads `pipe` line by line into `log`.
fn read_stderr(
    pipe: std::process::ChildStderr,
    log: StderrLog,
    on_line: Option<fn(&str)>,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("flo-stderr".into())
        .spawn(move || {
            let mut pipe = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match pipe.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        if let Some(on_line) = on_line {
                            on_line(line.trim_end_matches('\n'));
                        }
                        log.push(&line);
                    }
                }
            }
        })
}

/// Polls the child until it exits or `timeout` passes; its status if it exited.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(EXIT_POLL),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_listening_line() {
        let line =
            "flo 0.1.0 listening on 127.0.0.1:40123 (2 shards, durability sync, data /tmp/x y)";
        assert_eq!(
            parse_listening(line),
            Some(Listening {
                addr: "127.0.0.1:40123".into(),
                shards: 2,
                durability: "sync".into(),
                http: None,
                line: line.into(),
            })
        );
        assert_eq!(parse_listening("flo stopped"), None);
    }

    #[test]
    fn parses_the_http_address_of_the_listening_line() {
        let line = "flo 0.1.0 listening on 127.0.0.1:40123 (1 shards, durability async, http \
                    127.0.0.1:40999, data /tmp/d)";
        let listening = parse_listening(line).expect("parsed");
        assert_eq!(listening.durability, "async");
        assert_eq!(listening.http.as_deref(), Some("127.0.0.1:40999"));
        let off = line.replace("http 127.0.0.1:40999", "http off");
        assert_eq!(parse_listening(&off).expect("parsed").http, None);
    }

    #[test]
    fn servers_the_kit_starts_serve_http_on_an_ephemeral_port_unless_told() {
        let given = |args: &[&str]| {
            with_http_default(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            given(&["--shards", "1"]),
            ["--shards", "1", "--http", HTTP_EPHEMERAL]
        );
        assert_eq!(given(&["--http", "off"]), ["--http", "off"]);
        assert_eq!(given(&["--http=off"]), ["--http=off"]);
    }

    #[test]
    fn a_tail_keeps_the_last_lines_and_all_keeps_everything() {
        let (tail, all) = (StderrLog::tail(2), StderrLog::all());
        for line in ["a\n", "b\n", "c"] {
            tail.push(line);
            all.push(line);
        }
        assert_eq!(tail.text(), "b\nc");
        assert_eq!(all.text(), "a\nb\nc");
    }
}
