//! The server's lines on stderr. Never a panic on a closed or broken stderr (`eprintln!`
//! panics when the write fails, and a panic stops the server); the engine's `Effect::Log`
//! lines (guest logs, warnings) are limited per shard so a chatty guest cannot flood the
//! terminal or stall its shard on a slow pipe.

use std::cell::Cell;
use std::fmt;
use std::io::Write;
use std::time::{Duration, Instant};

/// `Effect::Log` lines one shard writes per second; beyond, they are counted and the count
/// is reported once the second is over.
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

/// A shard's window: its start, lines written, lines dropped.
type Window = (Option<Instant>, u32, u64);

thread_local! {
    static WINDOW: Cell<Window> = const { Cell::new((None, 0, 0)) };
}

/// One more line at `now`: the window after it, whether to write the line, and the count
/// of lines dropped in a window that just ended (to report).
fn admit(w: Window, now: Instant, per_second: u32) -> (Window, bool, u64) {
    let (start, written, dropped) = w;
    let (start, written, ended) = match start {
        Some(s) if now.duration_since(s) < Duration::from_secs(1) => (s, written, 0),
        _ => (now, 0, dropped),
    };
    let dropped = if start == now { 0 } else { dropped };
    if written < per_second {
        ((Some(start), written + 1, dropped), true, ended)
    } else {
        ((Some(start), written, dropped + 1), false, ended)
    }
}

/// Writes a line of the engine's, within this shard's `LOG_LINES_PER_SECOND`.
pub fn limited(shard: u32, text: &str) {
    WINDOW.with(|w| {
        let (next, write, ended) = admit(w.get(), Instant::now(), LOG_LINES_PER_SECOND);
        w.set(next);
        if ended > 0 {
            line(format_args!(
                "shard {shard}: {ended} log lines dropped (over {LOG_LINES_PER_SECOND} per \
                 second)"
            ));
        }
        if write {
            line(format_args!("{text}"));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_at_the_limit_counted_and_reported_when_the_second_ends() {
        let t0 = Instant::now();
        let mut w: Window = (None, 0, 0);
        let mut writes = 0;
        for i in 0..15 {
            let (next, write, ended) = admit(w, t0 + Duration::from_millis(i), 10);
            assert_eq!(ended, 0);
            writes += u32::from(write);
            w = next;
        }
        assert_eq!((writes, w.1, w.2), (10, 10, 5));
        let (next, write, ended) = admit(w, t0 + Duration::from_millis(1500), 10);
        assert!(write);
        assert_eq!(ended, 5);
        assert_eq!((next.1, next.2), (1, 0));
    }
}
