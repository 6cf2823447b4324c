//! A bound on the log lines that denials write: a client sending refused requests in a
//! loop must not flood the server's stderr.

use std::cell::Cell;

/// Denials logged per second and shard; the rest are counted and the count is logged with
/// the next line that may be written.
pub const DENIAL_LINES_PER_SECOND_MAX: u32 = 10;
const WINDOW_MS: u64 = 1000;

#[derive(Debug, Default)]
pub struct DenialLog {
    window_start_ms: Cell<u64>,
    lines: Cell<u32>,
    suppressed: Cell<u64>,
}

impl DenialLog {
    /// A denial at `now_ms`: Some(denials left unlogged since the last line) when this one
    /// may be logged, None when it is only counted.
    pub fn admit(&self, now_ms: u64) -> Option<u64> {
        if now_ms >= self.window_start_ms.get() + WINDOW_MS {
            self.window_start_ms.set(now_ms);
            self.lines.set(0);
        }
        if self.lines.get() >= DENIAL_LINES_PER_SECOND_MAX {
            self.suppressed.set(self.suppressed.get() + 1);
            return None;
        }
        self.lines.set(self.lines.get() + 1);
        Some(self.suppressed.replace(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_limit_is_logged_per_second_and_the_rest_counted() {
        let log = DenialLog::default();
        let t = 5_000;
        for _ in 0..DENIAL_LINES_PER_SECOND_MAX {
            assert_eq!(log.admit(t), Some(0));
        }
        for i in 0..25 {
            assert_eq!(log.admit(t + i), None);
        }
        assert_eq!(log.admit(t + WINDOW_MS), Some(25));
        assert_eq!(log.admit(t + WINDOW_MS + 1), Some(0));
    }
}
