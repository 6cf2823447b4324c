//! When a run is archived and what its archive record holds.

use crate::core::{Core, Task};
use crate::fold::archive::RunKind;
use crate::fold::archived::{ArchivedRun, Refs, WfArchived, carries};
use crate::fold::record::{Record, StepWait};
use crate::fold::runs::Run;
use crate::fold::state::ShardState;
use crate::fold::workflows::WfRun;
use crate::ids::RunKey;

/// The archive record of a run that is final and that nothing waits on (the workflow
/// step an action run executes, or the parent step of a child run, moved on), if so.
pub fn plan_archive(
    state: &ShardState,
    imaged_lsn: u64,
    kind: RunKind,
    namespace: &str,
    run_id: &str,
) -> Option<Record> {
    let run = match kind {
        RunKind::Action => {
            let run = state.runs.get(namespace, run_id)?;
            if !run.status.is_final() {
                return None;
            }
            if let Some(step) = &run.step
                && let Some(wf) = state.workflows.run(namespace, &step.run_id)
                && !wf.status().is_final()
                && matches!(wf.wait_at(&step.step), Some(StepWait::ActionRun { run_id: r, .. }) if r == run_id)
            {
                return None;
            }
            let refs = action_refs(run, imaged_lsn);
            // The payloads the refs point at are left out, not copied to be dropped.
            let bare = refs.as_ref().map_or((false, false), Refs::action_left_out);
            let info = crate::fold::runs::run_info_leaving_out(namespace, run_id, run, bare);
            ArchivedRun::Action(Box::new(info), refs)
        }
        RunKind::Workflow => {
            let run = state.workflows.run(namespace, run_id)?;
            if !run.status().is_final() {
                return None;
            }
            if let Some(parent) = &run.parent
                && let Some(p) = state.workflows.run(namespace, &parent.run_id)
                && !p.status().is_final()
                && matches!(p.wait_at(&parent.step), Some(StepWait::ChildRun { run_id: c }) if c == run_id)
            {
                return None;
            }
            let mut doc = WfArchived::new(
                crate::fold::workflows::run_info(namespace, run_id, run, run.status()),
                run.history.clone(),
            );
            fit(&mut doc);
            doc.refs = refs_of(run, &doc, imaged_lsn);
            ArchivedRun::Workflow(Box::new(doc))
        }
    };
    Some(Record::RunArchived {
        namespace: namespace.to_string(),
        run_id: run_id.to_string(),
        run,
    })
}

/// Where the log already holds the document's payloads, for the record to point there
/// instead of repeating them (each payload written once): the run's input in its start,
/// each step's output in the record that gave it. Only for a run that started after the
/// last snapshot image: segments are deleted only below an image's LSN, and from then on
/// the run index keeps the log from the earliest record a retained document points at
/// (`RunIndex::insert`). None when the document is written whole (a history the compact
/// form cannot carry, or a run loaded from a snapshot, whose records are not known).
fn refs_of(run: &WfRun, doc: &WfArchived, imaged_lsn: u64) -> Option<Refs> {
    if run.started_lsn <= imaged_lsn || !carries(&doc.history) {
        return None;
    }
    let ran = run.steps.iter().filter(|s| s.executions > 0);
    let outputs = ran
        .zip(&doc.info.steps)
        .map(|(s, shown)| match shown.output {
            Some(_) if s.output_lsn > imaged_lsn => s.output_lsn,
            _ => 0,
        })
        .collect();
    Some(Refs {
        input: run.started_lsn,
        outputs,
        ..Refs::default()
    })
}

/// `refs_of` for an action run: its input in its `RunCreated`, its output in the
/// `RunCompleted` that gave it (`outputs[0]`).
fn action_refs(run: &Run, imaged_lsn: u64) -> Option<Refs> {
    if run.created_lsn <= imaged_lsn {
        return None;
    }
    let output = match &run.output {
        Some(_) if run.output_lsn > imaged_lsn => run.output_lsn,
        _ => 0,
    };
    Some(Refs {
        input: run.created_lsn,
        outputs: vec![output],
        ..Refs::default()
    })
}

/// An archive record stays this far under the log's record limit.
const ARCHIVE_BYTES_MAX: usize = flo_ual::RECORD_PAYLOAD_BYTES_MAX - (1 << 20);
/// History details are cut to this many bytes when a document must shrink.
const DETAIL_BYTES_CUT: usize = 1024;

/// An upper bound of the encoded size of `doc` (MessagePack adds a few bytes per field).
fn size_bound(doc: &WfArchived) -> usize {
    let info = &doc.info;
    let steps: usize = info
        .steps
        .iter()
        .map(|s| 64 + s.name.len() + s.output.as_ref().map_or(0, Vec::len))
        .sum();
    let history: usize = doc
        .history
        .iter()
        .map(|e| {
            64 + e.event_type.as_str().len()
                + e.step.as_ref().map_or(0, String::len)
                + e.detail.len()
        })
        .sum();
    let texts = [
        &info.error,
        &info.terminal,
        &info.waiting_for,
        &info.current_step,
    ];
    1024 + info.input.len()
        + info.output.as_ref().map_or(0, Vec::len)
        + texts
            .iter()
            .map(|t| t.as_ref().map_or(0, String::len))
            .sum::<usize>()
        + steps
        + history
}

/// Shrinks a workflow run's document that would not fit in one record (many large step
/// outputs): step outputs go first (largest first), then long history details are cut.
/// The run's own input, output and error stay.
fn fit(doc: &mut WfArchived) {
    if size_bound(doc) <= ARCHIVE_BYTES_MAX {
        return;
    }
    let mut by_size: Vec<usize> = (0..doc.info.steps.len()).collect();
    by_size
        .sort_by_key(|&i| std::cmp::Reverse(doc.info.steps[i].output.as_ref().map_or(0, Vec::len)));
    for i in by_size {
        if size_bound(doc) <= ARCHIVE_BYTES_MAX {
            return;
        }
        doc.info.steps[i].output = None;
    }
    for e in &mut doc.history {
        if e.detail.len() > DETAIL_BYTES_CUT {
            let mut cut = DETAIL_BYTES_CUT;
            while !e.detail.is_char_boundary(cut) {
                cut -= 1;
            }
            e.detail.truncate(cut);
            e.detail.push_str("… (cut when archived)");
        }
    }
    // Tens of thousands of events: keep the first and the last ones.
    while size_bound(doc) > ARCHIVE_BYTES_MAX && doc.history.len() > 2 {
        let keep = doc.history.len() / 2;
        let tail = doc.history.split_off(doc.history.len() - keep / 2);
        doc.history.truncate(keep - keep / 2);
        doc.history.extend(tail);
    }
}

/// Archives the run if it is done (see `plan_archive`).
pub fn archive_if_done(core: &mut Core, kind: RunKind, namespace: &str, run_id: &str) {
    let imaged_lsn = core.imaged_lsn();
    if let Some(record) = plan_archive(core.state(), imaged_lsn, kind, namespace, run_id) {
        core.commit(record);
    }
}

/// Forgets the archived runs that finished more than `retention_ms` ago (one record).
pub fn forget_expired(core: &mut Core, retention_ms: u64) {
    let cutoff = core.now_ms().saturating_sub(retention_ms);
    if let Some(before_lsn) = core.state().archive.forget_before(cutoff) {
        core.commit(Record::RunsForgotten { before_lsn });
    }
}

/// Final runs still in memory (after recovery: a crash came between a run's final record
/// and its archive record), as the tasks that archive them.
pub fn final_runs(state: &ShardState) -> Vec<Task> {
    let key = |ns: &str, id: &str| -> RunKey { (ns.to_string(), id.to_string()) };
    let mut tasks: Vec<Task> = state
        .runs
        .iter()
        .filter(|(_, _, r)| r.status.is_final())
        .map(|(ns, id, _)| Task::Archive(RunKind::Action, key(ns, id)))
        .collect();
    tasks.extend(
        state
            .workflows
            .all_runs()
            .filter(|(_, _, r)| r.status().is_final())
            .map(|(ns, id, _)| Task::Archive(RunKind::Workflow, key(ns, id))),
    );
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use flo_protocol::{HistoryEvent, WorkflowRunInfo, WorkflowRunStatus, WorkflowStepInfo};

    #[test]
    fn a_document_of_many_large_step_outputs_shrinks_under_the_record_limit() {
        let step = |i: usize| WorkflowStepInfo {
            name: format!("s{i}"),
            outcome: Some("success".into()),
            output: Some(vec![b'x'; (3 << 20) + i]),
            executions: 1,
            visits: 1,
            first_started_ms: 0,
            last_finished_ms: 0,
            total_ms: 0,
        };
        let mut doc = WfArchived::new(
            WorkflowRunInfo {
                run_id: "wfrun-1".into(),
                namespace: "ns".into(),
                workflow: "w".into(),
                version: "1".into(),
                status: WorkflowRunStatus::Completed,
                current_step: None,
                waiting_for: None,
                input: vec![b'i'; 1 << 20],
                output: Some(vec![b'o'; 3 << 20]),
                steps: (0..5).map(step).collect(),
                terminal: Some("flo.Completed".into()),
                error: None,
                idempotency_key: None,
                parent_run_id: None,
                created_at_ms: 1,
                updated_at_ms: 2,
                search_attributes: None,
                state: None,
                branches: Vec::new(),
                step_since_ms: None,
            },
            (0..100_000)
                .map(|i| HistoryEvent {
                    seq: 0,
                    event_type: flo_protocol::HistoryEventType::StepCompleted,
                    step: Some("s".into()),
                    detail: "d".repeat(if i % 100 == 0 { 5000 } else { 10 }),
                    at_ms: i,
                })
                .collect(),
        );
        fit(&mut doc);
        let record = Record::RunArchived {
            namespace: "ns".into(),
            run_id: "wfrun-1".into(),
            run: ArchivedRun::Workflow(Box::new(doc.clone())),
        };
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        assert!(
            bytes.len() <= flo_ual::RECORD_PAYLOAD_BYTES_MAX,
            "{}",
            bytes.len()
        );
        assert_eq!(doc.info.output.as_ref().map(Vec::len), Some(3 << 20));
        assert_eq!(doc.info.input.len(), 1 << 20);
        assert_eq!(doc.history.first().map(|e| e.at_ms), Some(0));
        assert_eq!(doc.history.last().map(|e| e.at_ms), Some(99_999));
        // Every step is still listed (only outputs went).
        assert_eq!(doc.info.steps.len(), 5);
    }
}
