//! Schedules: a workflow with `schedule:` starts runs at the ticks of its cron expression or
//! interval, on the shard its name hashes to (`Core::partitioning`), with run ids that
//! shard owns (so `max_concurrent` counts runs held here).
//!
//! A tick fires through the record that starts its run (`WfRunStarted` carrying the tick),
//! so a tick is durable exactly when its run is: a crash before the record leaves the tick
//! due (fired after recovery), a crash after finds it past. A tick while `max_concurrent`
//! runs still run, and ticks missed beyond the catch-up policy, are recorded as skipped
//! (`ScheduleSkipped`). Disabling the workflow or `flo schedule pause` stops the ticks;
//! the ticks of the paused time are not made up. Their state is `fold::schedules`; the
//! ticks are computed by `flo_workflow::schedule::Ticker`.

mod fire;
mod ops;

pub use fire::{Tickers, pump};
pub use ops::{list_part, merge_lists, pause, trigger};
