//! The bounds and defaults of the workflow language.

use flo_protocol::DELAY_MS_ACCEPTED_MAX;

pub const WORKFLOW_NAME_BYTES_MAX: usize = 256;
pub const VERSION_BYTES_MAX: usize = 128;
/// Step and custom terminal names.
pub const STEP_NAME_BYTES_MAX: usize = 256;
pub const SIGNAL_TYPE_BYTES_MAX: usize = 256;
/// `max_attempts` / `maxAttempts` of retries and polls.
pub const ATTEMPTS_MAX: u64 = 100;
/// Any retry or poll delay (beyond the timer horizon: never).
pub const DELAY_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
pub const RETRY_WITHIN_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
pub const SIGNAL_TIMEOUT_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;
/// Deepest nesting of brackets and parentheses in an `inputMapping` path. The JSONPath
/// parser backtracks through nested filters: its time doubles with each level of `[?@[?@…`
/// (20 levels took a second, 30 would take a quarter of an hour), and it recurses once per
/// level (about 1,000 overflow a shard thread's stack) — found by fuzzing. Real paths nest
/// two or three.
pub const MAPPING_PATH_NESTING_MAX: usize = 4;
pub const RETRY_ATTEMPTS_DEFAULT: u32 = 3;
pub const RETRY_INITIAL_DELAY_MS_DEFAULT: u64 = 1000;
pub const POLL_ATTEMPTS_DEFAULT: u32 = 10;
pub const POLL_BASE_DELAY_MS_DEFAULT: u64 = 1000;

/// The largest `maxVisits`.
pub const STEP_VISITS_MAX: u32 = 1_000_000;
/// Most steps one transition starts at once (`success: [a, b, ...]`).
pub const FORK_WIDTH_MAX: usize = 16;
/// Most branches of one run active at once (forks nest): a fork past it fails the run.
pub const BRANCHES_MAX: usize = 64;

/// Most records one triggered run takes (`trigger.batch_size`).
pub const TRIGGER_BATCH_MAX: u32 = 1000;

/// The shortest `schedule.interval`.
pub const SCHEDULE_INTERVAL_MS_MIN: u64 = 100;
/// Most runs of one schedule at once (`schedule.max_concurrent`).
pub const SCHEDULE_CONCURRENT_MAX: u64 = 10_000;
/// Most missed ticks `catchup: all` fires (the newest; older ones are skipped).
pub const SCHEDULE_CATCHUP_MAX: u64 = 100;
