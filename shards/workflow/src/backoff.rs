//! The retry and poll policies of a step (and of a plan's executors): their backoff and
//! the delays it gives.

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Constant,
    Linear,
    Exponential,
    ExponentialJitter,
}

/// `retry:` of a run step. `max_attempts` counts every attempt, the first included.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub initial_delay_ms: u64,
    pub max_delay_ms: Option<u64>,
    /// No retry starts later than this after the first attempt.
    pub within_ms: Option<u64>,
}

/// `poll:` of a run step: re-executions while the outcome is `pending`.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PollPolicy {
    pub initial_delay_ms: u64,
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub base_delay_ms: u64,
    pub max_delay_ms: Option<u64>,
}

/// Delay of backoff step `n` (0 = the first delay) from `base_ms`; `jitter` in [0, 1).
fn backoff_ms(backoff: Backoff, base_ms: u64, n: u32, jitter: f64) -> u64 {
    let exp = |n: u32| base_ms.saturating_mul(1u64 << n.min(40));
    match backoff {
        Backoff::Constant => base_ms,
        Backoff::Linear => base_ms.saturating_mul(u64::from(n) + 1),
        Backoff::Exponential => exp(n),
        Backoff::ExponentialJitter => {
            let d = exp(n);
            d.saturating_add((d as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u64)
        }
    }
}

impl RetryPolicy {
    /// Delay before retry `retry` (1 = the second attempt).
    pub fn delay_ms(&self, retry: u32, jitter: f64) -> u64 {
        let d = backoff_ms(
            self.backoff,
            self.initial_delay_ms,
            retry.saturating_sub(1),
            jitter,
        );
        self.max_delay_ms.map_or(d, |max| d.min(max))
    }
}

impl PollPolicy {
    /// Delay before poll `poll` (1 = the first re-execution).
    pub fn delay_ms(&self, poll: u32, jitter: f64) -> u64 {
        if poll <= 1 {
            return self.initial_delay_ms;
        }
        let d = backoff_ms(self.backoff, self.base_delay_ms, poll - 2, jitter);
        self.max_delay_ms.map_or(d, |max| d.min(max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(backoff: Backoff) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            backoff,
            initial_delay_ms: 100,
            max_delay_ms: Some(350),
            within_ms: None,
        }
    }

    #[test]
    fn retry_delays_follow_the_backoff_table() {
        let d = |b, r| retry(b).delay_ms(r, 0.0);
        assert_eq!([1, 2, 3].map(|r| d(Backoff::Constant, r)), [100, 100, 100]);
        assert_eq!([1, 2, 3].map(|r| d(Backoff::Linear, r)), [100, 200, 300]);
        assert_eq!(
            [1, 2, 3, 4].map(|r| d(Backoff::Exponential, r)),
            [100, 200, 350, 350]
        );
        let j = retry(Backoff::ExponentialJitter).delay_ms(2, 0.999);
        assert!((200..=250).contains(&j), "{j}");
    }

    #[test]
    fn poll_delays_start_with_the_initial_delay() {
        let p = PollPolicy {
            initial_delay_ms: 2000,
            max_attempts: 5,
            backoff: Backoff::Exponential,
            base_delay_ms: 100,
            max_delay_ms: Some(300),
        };
        assert_eq!(
            [1, 2, 3, 4].map(|n| p.delay_ms(n, 0.0)),
            [2000, 100, 200, 300]
        );
    }
}
