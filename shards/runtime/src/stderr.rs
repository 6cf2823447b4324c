//! The server's lines on stderr, written by one thread of their own. Every log event
//! (`logging.rs` formats them) is handed to a queue (at most [`QUEUED_LINES_MAX`]) that the
//! `flo-stderr` thread writes out, so no shard thread ever writes to stderr: a stderr pipe
//! nobody reads stalls no shard, and a closed or broken one panics nothing (`eprintln!`
//! panics when the write fails, and a panic stops the server). Lines the queue has no room
//! for are counted and the count reported. The engine's lines (`Effect::Log`: guest logs,
//! warnings) are also limited per shard, so a chatty guest cannot flood the terminal.

use flo_engine::clock::{Clock, SystemClock};
use flo_engine::line_budget::LineBudget;
use flo_engine::{LogLevel, LogLine, LogSource};
use std::fmt;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{Duration, Instant};
use tracing::level_filters::LevelFilter;

/// Lines waiting for the writer thread; beyond, lines are dropped and counted.
pub const QUEUED_LINES_MAX: usize = 4096;

/// Exit status of a server stopped by a fatal condition: a panic on any thread
/// (`boot::fail_stop_on_panic`), a shard that stays silent although woken (`kick`).
pub const FATAL_EXIT_CODE: i32 = 101;

/// `Effect::Log` lines one shard writes per second; beyond, they are counted and the count
/// is reported before the next line written.
pub const LOG_LINES_PER_SECOND: u32 = 1000;

/// How long a fatal stop waits for the lines queued before it (its own among them).
pub const FATAL_FLUSH: Duration = Duration::from_millis(500);

/// Writes one line directly, whatever becomes of it (only when the writer thread could
/// not be started).
fn line(text: fmt::Arguments<'_>) {
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

/// Logs a line of the engine's, within this shard's `LOG_LINES_PER_SECOND`: its level, a
/// target by what it is about (`flo::guest` with the run's namespace, action and id,
/// `flo::schedule`, `flo::trigger`, `flo::mesh`) and the shard.
pub fn engine_line(shard: u32, line: LogLine) {
    // A level filtered out costs no budget (nor the count of lines dropped).
    if level_filter(line.level) > LevelFilter::current() {
        return;
    }
    BUDGET.with(|budget| match budget.admit(SystemClock.now_ms()) {
        None => {}
        Some(0) => log_engine_line(shard, line),
        Some(dropped) => {
            tracing::warn!(
                target: "flo::shard",
                shard,
                dropped,
                "log lines dropped (over {LOG_LINES_PER_SECOND} per second)"
            );
            log_engine_line(shard, line);
        }
    });
}

fn level_filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    }
}

/// `tracing`'s macros want a level known where they stand: one call per level.
macro_rules! at_level {
    ($level:expr, $($event:tt)+) => {
        match $level {
            LogLevel::Info => tracing::info!($($event)+),
            LogLevel::Warn => tracing::warn!($($event)+),
            LogLevel::Error => tracing::error!($($event)+),
        }
    };
}

fn log_engine_line(shard: u32, line: LogLine) {
    let text = line.text;
    match line.source {
        LogSource::Guest {
            namespace,
            action,
            run_id,
        } => at_level!(
            line.level,
            target: "flo::guest",
            shard,
            namespace = %namespace,
            action = %action,
            run = %run_id,
            "{text}"
        ),
        LogSource::Schedule => at_level!(line.level, target: "flo::schedule", shard, "{text}"),
        LogSource::Trigger => at_level!(line.level, target: "flo::trigger", shard, "{text}"),
        LogSource::Peer => at_level!(line.level, target: "flo::mesh", shard, "{text}"),
        LogSource::Webhook => at_level!(line.level, target: "flo::webhook", shard, "{text}"),
    }
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

/// Hands one line (a formatted log event; its trailing newline is dropped) to the writer
/// thread without waiting; written directly if that thread could not be started. Control
/// characters are escaped (`one_line`).
pub fn queued(mut text: String) {
    while text.ends_with('\n') {
        text.pop();
    }
    if let std::borrow::Cow::Owned(escaped) = one_line(&text) {
        text = escaped;
    }
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
            // Queued behind the lines waiting now: it says how many went missing before.
            tracing::warn!(
                target: "flo::stderr",
                dropped,
                "log lines dropped: stderr did not keep up (at most {QUEUED_LINES_MAX} wait)"
            );
        }
        line(format_args!("{text}"));
        if let Some(q) = q() {
            q.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Waits up to `limit` for the queued lines to be written (a graceful stop, a fatal one).
pub fn flush(limit: Duration) {
    let Some(Some(q)) = QUEUE.get() else {
        return;
    };
    let until = Instant::now() + limit;
    while q.pending.load(Ordering::Relaxed) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops the process with `code` once the lines queued so far are written (at most
/// [`FATAL_FLUSH`]): the last line of a fatal stop says why.
pub fn exit_after_flush(code: i32) -> ! {
    flush(FATAL_FLUSH);
    std::process::exit(code)
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
