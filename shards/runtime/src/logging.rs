//! The server's log: `tracing` events with a level and a target, filtered like `RUST_LOG`
//! (an `EnvFilter`), one line each as text or JSON, written by the off-shard stderr writer
//! (`stderr.rs`). The caller of `run_server` installs it (`flo server` does, from
//! `--log`/`RUST_LOG` and `--log-format`); without it the runtime's events go nowhere.
//!
//! Targets: `flo::boot` (start, ready, stop), `flo::recovery` (the log and snapshots read
//! back), `flo::shard` (a shard's panic, the watchdog), `flo::storage` (the log writer: disk
//! full, the acknowledged mark), `flo::snapshot`, `flo::net` (accepting connections),
//! `flo::auth` (denials), `flo::http`, `flo::guest` (WebAssembly guests' own lines),
//! `flo::schedule`, `flo::trigger`, `flo::mesh` (the engine's warnings) and `flo::stderr`
//! (lines dropped because stderr did not keep up).
//!
//! Cost on a shard: an event whose level is filtered out is one relaxed load of the global
//! maximum level (or a callsite's cached interest, for a filter by target); an event
//! written is formatted on the calling thread and handed over with one allocation.

use crate::stderr;
use std::io;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How each event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-11-27T10:00:00.123456Z  WARN flo::recovery: cut a torn log tail ... shard=0`
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields (`shard`, ...) beside them.
    Json,
}

/// The filter when none is given (`RUST_LOG` unset, no `--log`).
pub const LOG_FILTER_DEFAULT: &str = "info";

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(
        "{filter:?} is not a log filter ({reason}): give a level (error, warn, info, debug, \
         trace) or directives such as `info,flo::http=warn`"
    )]
    Filter { filter: String, reason: String },
    #[error("a logger is installed already in this process")]
    Installed,
}

/// Installs the process's logger: events passing `filter` (`RUST_LOG`'s syntax) written in
/// `format` through the stderr writer thread.
pub fn install(format: LogFormat, filter: &str) -> Result<(), LogError> {
    let filter = EnvFilter::builder()
        .parse(filter)
        .map_err(|e| LogError::Filter {
            filter: filter.to_string(),
            reason: e.to_string(),
        })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Queued)
        .with_ansi(false);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|_| LogError::Installed)
}

/// Waits (at most one second) for the lines logged so far to be written: before a
/// process says its last word some other way, or exits.
pub fn flush() {
    stderr::flush(std::time::Duration::from_secs(1));
}

/// The subscriber's writer: each event's line goes to the stderr writer thread's queue.
struct Queued;

impl<'a> MakeWriter<'a> for Queued {
    type Writer = QueuedLine;

    fn make_writer(&'a self) -> QueuedLine {
        QueuedLine(Vec::new())
    }
}

/// One event's bytes, queued as one line when dropped.
struct QueuedLine(Vec<u8>);

impl io::Write for QueuedLine {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.0);
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        stderr::queued(text);
    }
}
