//! Wakes shard threads that sleep in `io_uring_enter` although they have work.
//!
//! Seen about once in 500 starts on this machine (a Firecracker VM, kernel 6.18): a shard's
//! executor thread sleeps in `io_uring_enter` waiting for a completion and is never woken —
//! neither by the completion of its own I/O nor by the timer `poke::poked` arms, and once
//! before the thread had run its first task at all (the dump of `scripts/start-loop.sh`:
//! every shard thread in `io_cqring_wait`, the io-wq worker idle, the blocking-pool thread
//! idle). A signal interrupts that wait (`EINTR`); glommio then goes round its loop and
//! runs what is runnable. The handler does nothing: the interruption is the point.

use std::sync::Once;

/// The signal used: ignored by default, so a stray one does no harm.
const KICK_SIGNAL: libc::c_int = libc::SIGURG;

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the handler (without `SA_RESTART`, so a wait returns `EINTR`). Once per process.
pub(crate) fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction with a handler that does nothing (async-signal-safe)
        // and an empty mask is valid; sigaction only reads it.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_kick as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            libc::sigaction(KICK_SIGNAL, &action, std::ptr::null_mut());
        }
    });
}

/// Sends the signal to every thread of this process named `flo-shard-*` (executors and
/// their blocking pools). Returns how many were signalled.
pub(crate) fn kick_shards() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut kicked = 0;
    for task in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with("flo-shard-") {
            continue;
        }
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<libc::c_int>().ok())
        else {
            continue;
        };
        // SAFETY: tgkill with this process's id and one of its thread ids; a thread that
        // exited meanwhile makes it fail with ESRCH, which is fine.
        if unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, KICK_SIGNAL) } == 0 {
            kicked += 1;
        }
    }
    kicked
}

/// A shard's sign of life for the watchdog: its alarm task counts every wake-up (at least
/// one a second on a live executor, busy or idle), and the executor thread's id.
#[derive(Default)]
pub(crate) struct Pulse {
    pub beats: std::sync::atomic::AtomicU64,
    pub tid: std::sync::atomic::AtomicI32,
}

impl Pulse {
    /// Called on the shard's executor thread as it starts.
    pub fn started(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.tid.store(tid, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn beat(&self) {
        self.beats
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A shard whose pulse stopped this long is woken (its alarm task wakes every second).
const STALL_KICK_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// A shard still silent this long, woken every `STALL_KICK_AFTER` meanwhile, stops the
/// server (fail-stop, exit 101): its clients' calls would hang, and a restart recovers
/// everything acknowledged in well under a second — a supervisor's restart beats a hang.
/// No work of a live shard keeps its executor from its alarm task this long (guests yield
/// at every epoch tick, a snapshot's image pauses it for well under a second).
pub const STALL_EXIT_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Test knob: `FLO_STALL_EXIT_MS` shortens `STALL_EXIT_AFTER`.
fn stall_exit_after() -> std::time::Duration {
    std::env::var("FLO_STALL_EXIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(STALL_EXIT_AFTER, std::time::Duration::from_millis)
}

/// Watches the shards' pulses until `stop`: a shard silent for `STALL_KICK_AFTER` is sent
/// the signal (again every `STALL_KICK_AFTER` while it stays silent) and a line says so; one
/// silent for `STALL_EXIT_AFTER` stops the server.
pub(crate) fn watch(
    pulses: std::sync::Arc<Vec<Pulse>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    use std::time::Instant;
    let exit_after = stall_exit_after();
    std::thread::Builder::new()
        .name("flo-watchdog".into())
        .spawn(move || {
            // Per shard: the beats last seen, since when they have not moved, and the last
            // wake-up sent.
            let mut seen: Vec<(u64, Instant, Instant)> = pulses
                .iter()
                .map(|p| {
                    (
                        p.beats.load(Ordering::Relaxed),
                        Instant::now(),
                        Instant::now(),
                    )
                })
                .collect();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(250));
                for (shard, (pulse, (last, silent, since))) in
                    pulses.iter().zip(&mut seen).enumerate()
                {
                    let beats = pulse.beats.load(Ordering::Relaxed);
                    let tid = pulse.tid.load(Ordering::Relaxed);
                    if beats != *last || tid == 0 {
                        (*last, *silent, *since) = (beats, Instant::now(), Instant::now());
                        continue;
                    }
                    if silent.elapsed() >= exit_after && !stop.load(Ordering::Relaxed) {
                        tracing::error!(
                            target: "flo::shard",
                            shard,
                            "shard {shard} showed no sign of life for {} ms although woken \
                             every {} ms; stopping the server (a restart recovers everything \
                             acknowledged)",
                            silent.elapsed().as_millis(),
                            STALL_KICK_AFTER.as_millis()
                        );
                        crate::stderr::exit_after_flush(crate::stderr::FATAL_EXIT_CODE);
                    }
                    if since.elapsed() < STALL_KICK_AFTER {
                        continue;
                    }
                    // SAFETY: tgkill with this process's id and a thread id of it.
                    unsafe {
                        libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, KICK_SIGNAL);
                    }
                    tracing::warn!(
                        target: "flo::shard",
                        shard,
                        "shard {shard} showed no sign of life for {} ms; woke it",
                        since.elapsed().as_millis()
                    );
                    *since = Instant::now();
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_kick_interrupts_a_shard_thread_blocked_in_a_system_call() {
        install();
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: a pipe into a two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let blocked = std::thread::Builder::new()
            .name("flo-shard-kick-test".into())
            .spawn(move || {
                let mut byte = 0u8;
                // SAFETY: a read of one byte into a local from the pipe's read end; nothing
                // is ever written, so only a signal ends it.
                let n = unsafe { libc::read(fds[0], (&mut byte as *mut u8).cast(), 1) };
                (n, std::io::Error::last_os_error().raw_os_error())
            })
            .unwrap();
        let started = Instant::now();
        let mut kicked = 0;
        while !blocked.is_finished() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
            kicked += kick_shards();
        }
        let (n, errno) = blocked.join().unwrap();
        assert!(kicked >= 1);
        assert_eq!((n, errno), (-1, Some(libc::EINTR)));
        // SAFETY: closing the pipe's two descriptors, used by no one now.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
