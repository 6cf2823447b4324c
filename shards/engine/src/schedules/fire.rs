//! Firing ticks: the schedules living on this shard, their next tick cached so that the
//! step loop's check costs a comparison, and what a due tick does.

use crate::core::Core;
use crate::core::io::{LogLine, LogSource};
use crate::fold::record::Record;
use crate::fold::schedules::{SCHEDULED_RUN_ID_PREFIX, ScheduleState, ScheduledBy, SkipReason};
use crate::fold::state::ShardState;
use crate::fold::workflow_defs::{WfEntry, WfVersion};
use crate::hash::stable_hash;
use crate::workflows::{self, Started};
use flo_protocol::{RUN_ID_BYTES_MAX, Reply, WorkflowStartSpec};
use flo_workflow::schedule::Ticker;
use flo_workflow::{Catchup, SCHEDULE_CATCHUP_MAX, Schedule};
use std::collections::VecDeque;

/// Most due ticks one schedule looks at per pass; more (a long outage of a frequent
/// schedule) are skipped in passes of this many, the loop serving other work between.
const DUE_SCAN_MAX: u64 = 10_000;
/// A tick later than this counts as missed (`catchup: none` skips it).
pub const MISSED_AFTER_MS: u64 = 5_000;

/// The schedules living here, as of the definitions at `seen_lsn`.
#[derive(Default)]
pub struct Tickers {
    seen_lsn: Option<u64>,
    list: Vec<Ticking>,
    /// Something changed (a pause, a tick fired): next ticks are computed again.
    dirty: bool,
    /// The earliest next tick (shard clock).
    next_due: Option<u64>,
}

struct Ticking {
    namespace: String,
    workflow: String,
    ticker: Ticker,
    next_ms: Option<u64>,
}

impl Tickers {
    /// When the next tick is due (shard clock), for the loop's wake-up.
    pub fn next_due(&self) -> Option<u64> {
        self.next_due
    }

    /// Next ticks are computed again before the next pass.
    pub fn touch(&mut self) {
        self.dirty = true;
    }
}

/// A schedule as it applies now: its definition, why it does not fire (if it does not),
/// and the time after which its ticks are due.
pub(super) struct View<'a> {
    pub version: &'a WfVersion,
    pub schedule: &'a Schedule,
    pub state: Option<&'a ScheduleState>,
    pub paused: Option<&'static str>,
    /// Ticks after this are due: the last tick fired or skipped, the definition's creation,
    /// the end of the last pause.
    pub base_ms: u64,
}

pub(super) fn view<'a>(
    state: &'a ShardState,
    namespace: &str,
    workflow: &str,
    entry: &'a WfEntry,
) -> Option<View<'a>> {
    let version = entry.versions.last()?;
    let schedule = version.def.as_ref().ok()?.schedule.as_ref()?;
    let st = state.schedules.get(namespace, workflow);
    // An operator's pause or resume applies to the versions created before it.
    let operator = st
        .and_then(|s| s.pause)
        .filter(|&(_, at)| at >= version.created_at_ms);
    let paused = if !entry.enabled {
        Some("workflow disabled")
    } else if let Some((p, _)) = operator {
        p.then_some("paused (flo schedule pause)")
    } else {
        schedule.paused.then_some("paused (definition)")
    };
    let mut base_ms = version.created_at_ms.max(entry.updated_at_ms);
    if let Some((false, at)) = operator {
        base_ms = base_ms.max(at);
    }
    if let Some(s) = st {
        base_ms = base_ms.max(s.last_tick_ms);
    }
    Some(View {
        version,
        schedule,
        state: st,
        paused,
        base_ms,
    })
}

/// The ticker of a workflow's latest version (an interval counts from its creation).
pub(super) fn ticker_of(v: &View<'_>) -> Option<Ticker> {
    Ticker::new(&v.schedule.every, v.version.created_at_ms).ok()
}

/// Fires what is due. `can_fire`: false while the shard stops or cannot log.
pub fn pump(core: &mut Core, tickers: &mut Tickers, can_fire: bool) {
    refresh(core, tickers);
    if tickers.dirty {
        recompute(core, tickers);
    }
    let now = core.now_ms();
    if !can_fire || tickers.next_due.is_none_or(|due| due > now) {
        return;
    }
    for i in 0..tickers.list.len() {
        if tickers.list[i].next_ms.is_some_and(|due| due <= now) {
            let t = &tickers.list[i];
            let (namespace, workflow) = (t.namespace.clone(), t.workflow.clone());
            let ticker = t.ticker.clone();
            fire_due(core, &namespace, &workflow, &ticker, now);
        }
    }
    recompute(core, tickers);
}

/// The schedules of this shard, rebuilt when a definition changed.
fn refresh(core: &Core, tickers: &mut Tickers) {
    let lsn = core.definitions_lsn();
    if tickers.seen_lsn == Some(lsn) {
        return;
    }
    tickers.seen_lsn = Some(lsn);
    tickers.dirty = true;
    let state = core.state();
    let me = core.shard();
    let partitioning = core.partitioning();
    let mut list = Vec::new();
    for ((ns, name), entry) in state.workflows.defs.iter() {
        if partitioning.shard_of(ns, name) != me {
            continue;
        }
        let Some(v) = view(state, ns, name, entry) else {
            continue;
        };
        let Some(ticker) = ticker_of(&v) else {
            continue;
        };
        list.push(Ticking {
            namespace: ns.clone(),
            workflow: name.clone(),
            ticker,
            next_ms: None,
        });
    }
    list.sort_by(|a, b| (&a.namespace, &a.workflow).cmp(&(&b.namespace, &b.workflow)));
    tickers.list = list;
}

fn recompute(core: &Core, tickers: &mut Tickers) {
    tickers.dirty = false;
    let state = core.state();
    for t in &mut tickers.list {
        t.next_ms = state
            .workflows
            .defs
            .def(&t.namespace, &t.workflow)
            .and_then(|entry| view(state, &t.namespace, &t.workflow, entry))
            .filter(|v| v.paused.is_none())
            .and_then(|v| t.ticker.next_after(v.base_ms));
    }
    tickers.next_due = tickers.list.iter().filter_map(|t| t.next_ms).min();
}

/// The due ticks of one schedule: the catch-up policy picks those that fire, the others
/// are recorded as skipped; each firing tick starts a run unless `max_concurrent` runs
/// still run.
fn fire_due(core: &mut Core, namespace: &str, workflow: &str, ticker: &Ticker, now: u64) {
    let state = core.state();
    let Some(entry) = state.workflows.defs.def(namespace, workflow) else {
        return;
    };
    let Some(v) = view(state, namespace, workflow, entry) else {
        return;
    };
    if v.paused.is_some() {
        return;
    }
    let (catchup, base_ms) = (v.schedule.catchup, v.base_ms);
    let input = v.schedule.input.clone().into_bytes();
    let max_concurrent = v.schedule.max_concurrent as usize;
    let keep = match catchup {
        Catchup::All => SCHEDULE_CATCHUP_MAX as usize,
        Catchup::Latest | Catchup::None => 1,
    };
    // The newest `keep` due ticks, and the last one dropped before them.
    let mut ring: VecDeque<u64> = VecDeque::with_capacity(keep);
    let (mut scanned, mut dropped) = (0u64, None);
    let mut next = ticker.next_after(base_ms);
    while let Some(t) = next.filter(|&t| t <= now) {
        if scanned == DUE_SCAN_MAX {
            break;
        }
        scanned += 1;
        if ring.len() == keep {
            dropped = ring.pop_front();
        }
        ring.push_back(t);
        next = ticker.next_after(t);
    }
    if next.is_some_and(|t| t <= now) {
        // More than one pass's worth: these are all missed; the next pass goes on.
        let last = ring.back().copied().unwrap_or(base_ms);
        skip(core, namespace, workflow, scanned, last, SkipReason::Missed);
        return;
    }
    if catchup == Catchup::None {
        while let Some(&t) = ring.front() {
            if now - t <= MISSED_AFTER_MS {
                break;
            }
            dropped = ring.pop_front();
        }
    }
    let missed = scanned - ring.len() as u64;
    if let (true, Some(last)) = (missed > 0, dropped) {
        skip(core, namespace, workflow, missed, last, SkipReason::Missed);
    }
    for tick in ring {
        let running = core
            .state()
            .schedules
            .get(namespace, workflow)
            .map_or(0, |s| s.running.len());
        if running >= max_concurrent {
            skip(core, namespace, workflow, 1, tick, SkipReason::Busy);
            continue;
        }
        let run_id = tick_run_id(core.state(), namespace, workflow, &tick.to_string(), false);
        let by = ScheduledBy {
            tick_ms: tick,
            manual: false,
        };
        let spec = start_spec(namespace, workflow, input.clone(), run_id);
        let refused = match workflows::start_scheduled(core, spec, by) {
            Started::Done(done) => match done.result {
                Ok(Reply::WorkflowStarted { created: true, .. }) => None,
                Ok(_) => Some("the run exists already".to_string()),
                Err(e) => Some(e.to_string()),
            },
            Started::CheckArchived { run_id, .. } => {
                Some(format!("run {run_id:?} exists already (archived)"))
            }
        };
        if let Some(why) = refused {
            skip(core, namespace, workflow, 1, tick, SkipReason::Refused);
            let line = format!(
                "the schedule of workflow {workflow:?} (namespace {namespace:?}) could not \
                 start the run of tick {}: {why}",
                flo_workflow::schedule::format_tick(tick),
            );
            core.emit(LogLine::warn(LogSource::Schedule, line));
        }
    }
}

fn skip(
    core: &mut Core,
    namespace: &str,
    workflow: &str,
    ticks: u64,
    last: u64,
    reason: SkipReason,
) {
    let at_ms = core.now_ms();
    core.commit(Record::ScheduleSkipped {
        namespace: namespace.to_string(),
        workflow: workflow.to_string(),
        ticks,
        last_tick_ms: last,
        reason,
        at_ms,
    });
}

pub(super) fn start_spec(
    namespace: &str,
    workflow: &str,
    input: Vec<u8>,
    run_id: String,
) -> WorkflowStartSpec {
    WorkflowStartSpec {
        namespace: namespace.to_string(),
        name: workflow.to_string(),
        version: None,
        input,
        // A workflow requiring keys gets the run id as its key.
        idempotency_key: Some(run_id.clone()),
        wait_ms: None,
        run_id: Some(run_id),
        group: None,
        webhook: None,
    }
}

/// The id of a scheduled run: `sched:WORKFLOW:TICK` (the workflow's hash when its name is
/// long), with `.K` added until this shard owns it — the same id for the same tick, always.
/// `fresh`: also until no run has it (manual triggers).
pub(super) fn tick_run_id(
    state: &ShardState,
    namespace: &str,
    workflow: &str,
    tick: &str,
    fresh: bool,
) -> String {
    let mut base = format!("{SCHEDULED_RUN_ID_PREFIX}{workflow}:{tick}");
    if base.len() + 12 > RUN_ID_BYTES_MAX {
        let h = stable_hash(namespace, workflow);
        base = format!("{SCHEDULED_RUN_ID_PREFIX}{h:016x}:{tick}");
    }
    let ok = |id: &str| {
        state.owns(namespace, id)
            && (!fresh || state.run_id_free(crate::fold::archive::RunKind::Workflow, namespace, id))
    };
    if ok(&base) {
        return base;
    }
    (1u64..)
        .map(|k| format!("{base}.{k}"))
        .find(|id| ok(id))
        .unwrap_or(base)
}
