//! The server's lines on stderr. Never a panic on a closed or broken stderr (`eprintln!`
//! panics when the write fails, and a panic stops the server); the engine's `Effect::Log`
//! lines (guest logs, warnings) are limited per shard so a chatty guest cannot flood the
//! terminal or stall its shard on a slow pipe.

use flo_engine::clock::{Clock, SystemClock};
use flo_engine::line_budget::LineBudget;
use std::fmt;
use std::io::Write;

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

/// Writes a line of the engine's, within this shard's `LOG_LINES_PER_SECOND`.
pub fn limited(shard: u32, text: &str) {
    BUDGET.with(|budget| match budget.admit(SystemClock.now_ms()) {
        None => {}
        Some(0) => line(format_args!("{text}")),
        Some(dropped) => {
            line(format_args!(
                "shard {shard}: {dropped} log lines dropped (over {LOG_LINES_PER_SECOND} per \
                 second)"
            ));
            line(format_args!("{text}"));
        }
    });
}
