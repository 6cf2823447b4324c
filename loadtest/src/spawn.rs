//! `--spawn`: a flo server of our own, in a temporary data directory; and the pieces
//! `flo-chaos` shares to run one (the `listening` line, waiting for an exit).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long the server has to print its `listening` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server has to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server that closed its stdout has to exit.
const EXIT_AFTER_STDOUT_CLOSED: Duration = Duration::from_secs(5);

pub struct SpawnOptions {
    pub flo_bin: PathBuf,
    pub shards: Option<u32>,
    pub durability: &'static str,
}

/// The `flo` executable next to the current one.
pub fn default_flo_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("this executable has no parent directory")?;
    Ok(dir.join(format!("flo{}", std::env::consts::EXE_SUFFIX)))
}

/// A running server. Stopped (SIGTERM, then waited for) by [`Server::stop`] or on drop.
pub struct Server {
    child: Child,
    stopped: bool,
    pub addr: String,
    pub shards: u32,
    pub durability: String,
    // Dropped after the child is stopped (fields drop after `Drop::drop` runs).
    _data_dir: tempfile::TempDir,
}

/// What the server's `listening` line says.
#[derive(Debug, PartialEq, Eq)]
pub struct Listening {
    pub addr: String,
    pub shards: u32,
    pub durability: String,
}

/// Parses `flo 0.1.0 listening on 127.0.0.1:PORT (2 shards, durability sync, data DIR)`.
pub fn parse_listening(line: &str) -> Option<Listening> {
    let rest = line.split_once(" listening on ")?.1;
    let (addr, rest) = rest.split_once(" (")?;
    let (shards, rest) = rest.split_once(" shards, durability ")?;
    let durability = rest.split([',', ')']).next()?;
    Some(Listening {
        addr: addr.to_string(),
        shards: shards.parse().ok()?,
        durability: durability.to_string(),
    })
}

impl Server {
    pub fn start(opts: &SpawnOptions) -> Result<Server, String> {
        let bin = &opts.flo_bin;
        if !bin.is_file() {
            return Err(format!(
                "flo executable not found at {} (build it: `cargo build --release -p flo`, or pass --flo-bin)",
                bin.display()
            ));
        }
        let data_dir = tempfile::Builder::new()
            .prefix("flo-loadtest-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary data directory: {e}"))?;
        let mut cmd = Command::new(bin);
        cmd.arg("server")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir.path())
            .arg("--durability")
            .arg(opts.durability);
        if let Some(shards) = opts.shards {
            cmd.arg("--shards").arg(shards.to_string());
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut server = Server {
            child,
            stopped: false,
            addr: String::new(),
            shards: 0,
            durability: String::new(),
            _data_dir: data_dir,
        };
        match wait_listening(&mut server.child, START_TIMEOUT) {
            Ok(listening) => {
                server.addr = listening.addr;
                server.shards = listening.shards;
                server.durability = listening.durability;
                Ok(server)
            }
            Err(NotListening::Exited(status)) => {
                server.stopped = true;
                Err(format!("the flo server exited before serving ({status})"))
            }
            Err(NotListening::ClosedStdout) => {
                Err("the flo server closed its stdout before serving".to_string())
            }
            Err(NotListening::NoThread(e)) => Err(format!("cannot start a thread: {e}")),
            // Dropping `server` stops it.
            Err(NotListening::TimedOut) => Err(format!(
                "the flo server printed no `listening` line within {} s",
                START_TIMEOUT.as_secs()
            )),
        }
    }

    /// Sends SIGTERM and waits for the server to exit; `Err` if it fails to exit cleanly.
    pub fn stop(mut self) -> Result<(), String> {
        self.stopped = true;
        match self.terminate() {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(format!(
                "the flo server exited badly after SIGTERM ({status})"
            )),
            None => Err(format!(
                "the flo server did not exit within {} s of SIGTERM; killed it",
                STOP_TIMEOUT.as_secs()
            )),
        }
    }

    /// SIGTERM, wait, SIGKILL if needed. The exit status if it exited after SIGTERM.
    fn terminate(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscall on the pid of our own child, which we have not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = self.wait_for(STOP_TIMEOUT);
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        status
    }

    fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, timeout)
    }
}

/// Why a server printed no `listening` line.
#[derive(Debug)]
pub enum NotListening {
    /// It exited first.
    Exited(ExitStatus),
    /// It closed its stdout but did not exit (it never does that).
    ClosedStdout,
    /// Nothing came within the time given.
    TimedOut,
    /// No thread could be started to read its stdout.
    NoThread(std::io::Error),
}

/// Waits up to `timeout` for the `listening` line on the child's (piped) stdout. A thread
/// reads stdout: it hands over the lines until the `listening` one, then forwards anything
/// else to stderr as `[flo] LINE` (keeping our stdout clean) until the server exits.
pub fn wait_listening(child: &mut Child, timeout: Duration) -> Result<Listening, NotListening> {
    let stdout = child.stdout.take().expect("stdout is piped");
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
        });
    if let Err(e) = reader {
        return Err(NotListening::NoThread(e));
    }
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some(line)) => match parse_listening(&line) {
                Some(listening) => return Ok(listening),
                None => eprintln!("[flo] {line}"),
            },
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stdout closed: the server exited (or closed it, which it never does).
                return Err(match wait_exit(child, EXIT_AFTER_STDOUT_CLOSED) {
                    Some(status) => NotListening::Exited(status),
                    None => NotListening::ClosedStdout,
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(NotListening::TimedOut),
        }
    }
}

/// Polls the child until it exits or `timeout` passes; its status if it exited.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            self.terminate();
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
                durability: "sync".into()
            })
        );
        assert_eq!(parse_listening("flo stopped"), None);
    }
}
