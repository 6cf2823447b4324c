//! Schedules' durable state on the shard each one lives on (the shard its workflow's name
//! hashes to): the last tick fired or skipped, the runs of the schedule still running, the
//! pause an operator set, and counts for `flo schedule list`.
//!
//! A tick is fired by the record that starts its run (`WfRunStarted` with `schedule`), so
//! a tick and its run are durable together: after a crash a tick is either fired (its run
//! exists and the tick is past) or not (fired again, once).

use crate::tables::HashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The prefix of the ids of scheduled runs (reserved: callers cannot choose them).
pub const SCHEDULED_RUN_ID_PREFIX: &str = "sched:";

/// Why ticks were skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    /// `max_concurrent` runs of the schedule were still running.
    Busy,
    /// Missed (the server was down or the shard behind) and the catch-up policy skips
    /// them.
    Missed,
    /// The run could not start (a quota, the input refused): the reason was logged.
    Refused,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Busy => "max_concurrent runs still running",
            SkipReason::Missed => "missed (catchup policy)",
            SkipReason::Refused => "the run could not start",
        }
    }
}

/// What the record starting a scheduled run says about its tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledBy {
    /// The tick's time (a manual trigger: when it was asked).
    pub tick_ms: u64,
    /// `flo schedule trigger`: does not move the schedule's ticks.
    pub manual: bool,
}

/// One schedule's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// The last tick fired or skipped (0: none yet).
    pub last_tick_ms: u64,
    /// `flo schedule pause|resume`: (paused, when). It applies to the definitions created
    /// before it; a newer version's `paused:` replaces it.
    pub pause: Option<(bool, u64)>,
    /// Runs of this schedule that are not final.
    pub running: BTreeSet<String>,
    pub fired: u64,
    pub skipped: u64,
    /// The last skip: (tick, why).
    pub last_skip: Option<(u64, SkipReason)>,
}

/// Every schedule living on this shard, by (namespace, workflow). In a snapshot, the map.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Schedules {
    entries: HashMap<(String, String), ScheduleState>,
}

impl Schedules {
    pub fn get(&self, namespace: &str, workflow: &str) -> Option<&ScheduleState> {
        self.entries
            .get(crate::tables::pair(&(namespace, workflow)))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&(String, String), &ScheduleState)> {
        self.entries.iter()
    }

    fn entry(&mut self, namespace: String, workflow: String) -> &mut ScheduleState {
        self.entries.entry((namespace, workflow)).or_default()
    }

    /// A scheduled run started.
    pub fn apply_fired(
        &mut self,
        namespace: String,
        workflow: String,
        run_id: String,
        by: ScheduledBy,
    ) {
        let s = self.entry(namespace, workflow);
        s.running.insert(run_id);
        s.fired += 1;
        if !by.manual {
            s.last_tick_ms = s.last_tick_ms.max(by.tick_ms);
        }
    }

    /// `ticks` ticks up to `last_tick_ms` were skipped.
    pub fn apply_skipped(
        &mut self,
        namespace: String,
        workflow: String,
        ticks: u64,
        last_tick_ms: u64,
        reason: SkipReason,
    ) {
        let s = self.entry(namespace, workflow);
        s.last_tick_ms = s.last_tick_ms.max(last_tick_ms);
        s.skipped = s.skipped.saturating_add(ticks);
        s.last_skip = Some((last_tick_ms, reason));
    }

    pub fn apply_paused(&mut self, namespace: String, workflow: String, paused: bool, at_ms: u64) {
        self.entry(namespace, workflow).pause = Some((paused, at_ms));
    }

    /// A run of `workflow` became final: no longer counts against `max_concurrent`.
    pub fn run_final(&mut self, namespace: &str, workflow: &str, run_id: &str) {
        if let Some(s) = self
            .entries
            .get_mut(crate::tables::pair(&(namespace, workflow)))
        {
            s.running.remove(run_id);
        }
    }

    /// Canonical lines for `ShardState::digest`.
    pub fn digest(&self, lines: &mut Vec<String>) {
        for ((ns, wf), s) in &self.entries {
            lines.push(format!(
                "schedule {ns}/{wf} last {} pause {:?} running {:?} fired {} skipped {} {:?}",
                s.last_tick_ms, s.pause, s.running, s.fired, s.skipped, s.last_skip
            ));
        }
    }
}
