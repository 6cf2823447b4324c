//! `flo schedule list | pause | resume | trigger`.

use super::fire::{Tickers, View, start_spec, tick_run_id, ticker_of, view};
use crate::core::Core;
use crate::core::io::Done;
use crate::fold::record::Record;
use crate::fold::schedules::ScheduledBy;
use crate::workflows::{self, Started};
use flo_protocol::{ErrorValue, Reply, ScheduleInfo, check_namespace};
use flo_workflow::Every;
use flo_workflow::schedule::format_tick;

/// This shard's part of `flo schedule list`: the schedules living here.
pub fn list_part(core: &Core, namespace: &str) -> Done {
    if let Err(e) = check_namespace(namespace) {
        return Done::now(Err(e.into()));
    }
    let state = core.state();
    let me = core.shard();
    let partitioning = core.partitioning();
    let list = state
        .workflows
        .defs
        .iter()
        .filter(|((ns, name), _)| ns == namespace && partitioning.shard_of(ns, name) == me)
        .filter_map(|((ns, name), entry)| {
            view(state, ns, name, entry).map(|v| info(me, ns, name, &v))
        })
        .collect();
    Done::now(Ok(Reply::Schedules(list)))
}

/// The parts of every shard, in (namespace, workflow) order.
pub fn merge_lists(parts: Vec<Reply>) -> Vec<ScheduleInfo> {
    let mut all: Vec<ScheduleInfo> = parts
        .into_iter()
        .flat_map(|p| match p {
            Reply::Schedules(list) => list,
            _ => Vec::new(),
        })
        .collect();
    all.sort_by(|a, b| (&a.namespace, &a.workflow).cmp(&(&b.namespace, &b.workflow)));
    all
}

/// Pauses or resumes the schedule of `workflow` (this shard is its home).
pub fn pause(
    core: &mut Core,
    tickers: &mut Tickers,
    namespace: &str,
    workflow: &str,
    paused: bool,
) -> Done {
    if let Err(e) = find(core, namespace, workflow) {
        return Done::now(Err(e));
    }
    let at_ms = core.now_ms();
    core.commit(Record::SchedulePaused {
        namespace: namespace.to_string(),
        workflow: workflow.to_string(),
        paused,
        at_ms,
    });
    tickers.touch();
    let state = core.state();
    let reply = state
        .workflows
        .defs
        .def(namespace, workflow)
        .and_then(|entry| view(state, namespace, workflow, entry))
        .map(|v| info(core.shard(), namespace, workflow, &v))
        .ok_or_else(|| ErrorValue::internal("the schedule vanished"));
    Done {
        result: reply.map(Reply::Schedule),
        wait_lsn: core.last_lsn(),
    }
}

/// Fires the schedule of `workflow` now, whatever its pause and `max_concurrent` say
/// (a disabled workflow still starts nothing).
pub fn trigger(core: &mut Core, namespace: &str, workflow: &str) -> Done {
    let input = match find(core, namespace, workflow) {
        Ok(input) => input,
        Err(e) => return Done::now(Err(e)),
    };
    let now = core.now_ms();
    let run_id = tick_run_id(
        core.state(),
        namespace,
        workflow,
        &format!("manual-{now}"),
        true,
    );
    let by = ScheduledBy {
        tick_ms: now,
        manual: true,
    };
    match workflows::start_scheduled(core, start_spec(namespace, workflow, input, run_id), by) {
        Started::Done(done) => done,
        Started::CheckArchived { run_id, .. } => Done::now(Err(ErrorValue::conflict(format!(
            "workflow run {run_id:?} exists already"
        )))),
    }
}

/// The input of the schedule of `workflow`, or why it has none.
fn find(core: &Core, namespace: &str, workflow: &str) -> Result<Vec<u8>, ErrorValue> {
    check_namespace(namespace)?;
    let state = core.state();
    let entry = state
        .workflows
        .defs
        .def(namespace, workflow)
        .ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow {workflow:?} is not defined in namespace {namespace:?}"
            ))
        })?;
    let v = view(state, namespace, workflow, entry).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {workflow:?} has no schedule (its latest version has no `schedule:`)"
        ))
    })?;
    Ok(v.schedule.input.clone().into_bytes())
}

fn info(shard: u32, namespace: &str, workflow: &str, v: &View<'_>) -> ScheduleInfo {
    let s = v.schedule;
    let every = match &s.every {
        Every::Cron { expr, timezone } => {
            format!("cron {expr:?} {}", timezone.as_deref().unwrap_or("UTC"))
        }
        Every::Interval { ms } => format!("every {ms} ms"),
    };
    let next_fire_ms = match v.paused {
        Some(_) => None,
        None => ticker_of(v).and_then(|t| t.next_after(v.base_ms)),
    };
    let st = v.state;
    ScheduleInfo {
        namespace: namespace.to_string(),
        workflow: workflow.to_string(),
        version: v.version.version.clone(),
        every,
        max_concurrent: s.max_concurrent,
        catchup: s.catchup.as_str().to_string(),
        paused: v.paused.map(str::to_string),
        next_fire_ms,
        last_tick_ms: st.map(|s| s.last_tick_ms).filter(|&t| t > 0),
        running: st.map_or(0, |s| s.running.len() as u32),
        fired: st.map_or(0, |s| s.fired),
        skipped: st.map_or(0, |s| s.skipped),
        last_skip: st
            .and_then(|s| s.last_skip)
            .map(|(tick, why)| format!("{}: {}", format_tick(tick), why.as_str())),
        shard,
    }
}
