//! A bound on the log lines something may write per second (denials of a client sending
//! refused requests in a loop, a chatty guest): the rest are counted, and the count goes
//! with the next line that may be written. Pure: the caller gives the time.

use std::cell::Cell;

const WINDOW_MS: u64 = 1000;

#[derive(Debug)]
pub struct LineBudget {
    per_second: u32,
    window_start_ms: Cell<u64>,
    lines: Cell<u32>,
    suppressed: Cell<u64>,
}

impl LineBudget {
    pub const fn new(per_second: u32) -> LineBudget {
        LineBudget {
            per_second,
            window_start_ms: Cell::new(0),
            lines: Cell::new(0),
            suppressed: Cell::new(0),
        }
    }

    /// A line at `now_ms`: Some(lines left unwritten since the last one written) when this
    /// one may be written, None when it is only counted.
    pub fn admit(&self, now_ms: u64) -> Option<u64> {
        if now_ms >= self.window_start_ms.get() + WINDOW_MS {
            self.window_start_ms.set(now_ms);
            self.lines.set(0);
        }
        if self.lines.get() >= self.per_second {
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
    fn at_most_the_limit_is_written_per_second_and_the_rest_counted() {
        let budget = LineBudget::new(10);
        let t = 5_000;
        for _ in 0..10 {
            assert_eq!(budget.admit(t), Some(0));
        }
        for i in 0..25 {
            assert_eq!(budget.admit(t + i), None);
        }
        assert_eq!(budget.admit(t + WINDOW_MS), Some(25));
        assert_eq!(budget.admit(t + WINDOW_MS + 1), Some(0));
    }
}
