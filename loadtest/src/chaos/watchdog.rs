//! A phase of a cycle that overruns its time limit means a server that stopped answering
//! (a call the harness made never came back). The watchdog reports it with what the
//! server's threads were doing, then kills the server so the blocked calls end and the
//! cycle can start it again. A phase with no server to kill ends the campaign (exit 1).

use crate::report::Report;
use crate::server::{self, Server, StderrTail};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(500);

/// The phase being watched.
struct Armed {
    deadline: Instant,
    limit: Duration,
    cycle: u64,
    phase: &'static str,
    /// The server to diagnose and kill (None: nothing to kill).
    server: Option<(u32, StderrTail)>,
}

pub struct Watchdog {
    armed: Mutex<Option<Armed>>,
    /// How many times it fired (the main thread compares before and after a phase).
    fired: AtomicU64,
}

impl Watchdog {
    /// `dumps`: where thread backtraces go (`chaos-hang-cycle-N.txt`).
    pub fn start(report: Arc<Report>, dumps: PathBuf) -> Arc<Watchdog> {
        let watchdog = Arc::new(Watchdog {
            armed: Mutex::new(None),
            fired: AtomicU64::new(0),
        });
        let watching = watchdog.clone();
        thread::Builder::new()
            .name("chaos-watchdog".into())
            .spawn(move || {
                loop {
                    thread::sleep(TICK);
                    let overdue = {
                        let mut armed = watching.armed.lock().unwrap();
                        match &*armed {
                            Some(a) if Instant::now() >= a.deadline => armed.take(),
                            _ => None,
                        }
                    };
                    if let Some(armed) = overdue {
                        watching.fire(&report, &dumps, armed);
                    }
                }
            })
            .expect("cannot start the watchdog thread");
        watchdog
    }

    /// Watches a phase that must end within `limit`, on `server` (None: none to kill).
    pub fn arm(&self, cycle: u64, phase: &'static str, limit: Duration, server: Option<&Server>) {
        *self.armed.lock().unwrap() = Some(Armed {
            deadline: Instant::now() + limit,
            limit,
            cycle,
            phase,
            server: server.map(|s| (s.pid(), s.stderr_handle())),
        });
    }

    pub fn disarm(&self) {
        *self.armed.lock().unwrap() = None;
    }

    pub fn fired(&self) -> u64 {
        self.fired.load(Relaxed)
    }

    fn fire(&self, report: &Report, dumps: &std::path::Path, armed: Armed) {
        let Armed {
            limit,
            cycle,
            phase,
            server,
            ..
        } = armed;
        let what = format!(
            "{phase} took more than {} s: a server that stopped answering",
            limit.as_secs()
        );
        let Some((pid, stderr)) = server else {
            report.violation(cycle, &what, None);
            std::process::exit(1);
        };
        let file = dumps.join(format!("chaos-hang-cycle-{cycle}.txt"));
        let threads = server::diagnose(pid, &file);
        let detail = format!("server stderr (last lines):\n{}\n{threads}", stderr.text());
        report.violation(cycle, &format!("{what}; killed it"), Some(&detail));
        self.fired.fetch_add(1, Relaxed);
        // SAFETY: kill(2) on our own child's pid, not yet reaped (the main thread reaps it
        // once its blocked call ends).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}
