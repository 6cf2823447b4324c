//! The server's lines on stderr. Never a panic on a closed or broken stderr (`eprintln!`
//! panics when the write fails, and a panic stops the server). The lines input can cause —
//! the engine's `Effect::Log` lines (guest logs, warnings) and the auth gate's denials — are
//! limited per shard so a chatty guest cannot flood the terminal, and never written by a
//! shard thread: they are queued (at most [`QUEUED_LINES_MAX`]) for one writer thread, so a
//! stderr pipe nobody reads stalls no shard. Lines the queue has no room for are counted and
//! the count reported. Start-up, shutdown and fatal lines are written directly.

use flo_engine::clock::{Clock, SystemClock};
use flo_engine::line_budget::LineBudget;
use std::fmt;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{Duration, Instant};

/// Lines waiting for the writer thread; beyond, lines are dropped and counted.
pub const QUEUED_LINES_MAX: usize = 4096;

/// Exit status of a server stopped by a fatal condition: a panic on any thread
/// (`boot::fail_stop_on_panic`), a shard that stays silent although woken (`kick`).
pub const FATAL_EXIT_CODE: i32 = 101;

/// `Effect::Log` lines one shard writes per second; beyond, they are counted and the count
/// is reported before the next line written.
pub const LOG_LINES_PER_SECOND: u32 = 1000;

/// `eprintln!` that never panics: `say!("...", args)`.
macro_rules! say {
    ($($t:tt)*) => {
        $crate::stderr::line(format_args!($($t)*))
    };
}
pub(crate) use say;

/// Writes one line, whatever becomes of it.
pub fn line(text: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(text);
    let _ = err.write_all(b"\n");
}

thread_local! {
    /// This thread's (shard's) budget for the engine's lines.
    static BUDGET: LineBudget = const { LineBudget::new(LOG_LINES_PER_SECOND) };
}

/// `text` as one line: control characters (a line break a guest logs, an escape sequence
/// in a name) written as Rust escapes, so no input forges a line of the server's own.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c.is_control() {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out.into()
}

/// Queues a line of the engine's, within this shard's `LOG_LINES_PER_SECOND`.
pub fn limited(shard: u32, text: &str) {
    BUDGET.with(|budget| match budget.admit(SystemClock.now_ms()) {
        None => {}
        Some(0) => queued(text.to_owned()),
        Some(dropped) => {
            queued(format!(
                "shard {shard}: {dropped} log lines dropped (over {LOG_LINES_PER_SECOND} per \
                 second)"
            ));
            queued(text.to_owned());
        }
    });
}

/// The writer thread's queue, started by the first queued line.
struct Queue {
    lines: SyncSender<String>,
    /// Lines dropped because the queue was full, not yet reported.
    dropped: AtomicU64,
    /// Lines queued and not yet written (for [`flush`]).
    pending: AtomicU64,
}

static QUEUE: OnceLock<Option<Queue>> = OnceLock::new();

fn queue() -> Option<&'static Queue> {
    QUEUE
        .get_or_init(|| {
            let (lines, rx) = mpsc::sync_channel(QUEUED_LINES_MAX);
            std::thread::Builder::new()
                .name("flo-stderr".into())
                .spawn(move || write_queued(rx))
                .ok()?;
            Some(Queue {
                lines,
                dropped: AtomicU64::new(0),
                pending: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Hands a line to the writer thread without waiting; written directly if that thread
/// could not be started. Control characters are escaped (`one_line`).
pub fn queued(text: String) {
    let text = match one_line(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    };
    let Some(q) = queue() else {
        return line(format_args!("{text}"));
    };
    q.pending.fetch_add(1, Ordering::Relaxed);
    if q.lines.try_send(text).is_err() {
        q.pending.fetch_sub(1, Ordering::Relaxed);
        q.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn write_queued(rx: Receiver<String>) {
    // The queue is a static; `QUEUE` is set before the first line arrives.
    let q = || QUEUE.get().and_then(Option::as_ref);
    for text in rx {
        if let Some(dropped) = q().map(|q| q.dropped.swap(0, Ordering::Relaxed))
            && dropped > 0
        {
            line(format_args!(
                "{dropped} log lines dropped (stderr did not keep up; at most \
                 {QUEUED_LINES_MAX} wait)"
            ));
        }
        line(format_args!("{text}"));
        if let Some(q) = q() {
            q.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Waits up to `limit` for the queued lines to be written (a graceful stop).
pub fn flush(limit: Duration) {
    let Some(Some(q)) = QUEUE.get() else {
        return;
    };
    let until = Instant::now() + limit;
    while q.pending.load(Ordering::Relaxed) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_cannot_forge_a_line() {
        assert_eq!(one_line("plain text é"), "plain text é");
        assert_eq!(
            one_line("ns\nfatal: shard 0 panicked\x1b[2J"),
            "ns\\nfatal: shard 0 panicked\\u{1b}[2J"
        );
    }
}
