//! A workflow run as snapshots hold it: its `RunPhase` spread over the fields runs had
//! before the phase existed, so images written before stay readable.

use super::plan_steps::PlanProgress;
use super::record::{StepRef, StepWait};
use super::workflows::{Cursor, RunPhase, StepState, WfRun, unlinked};
use flo_protocol::{HistoryEvent, WorkflowRunStatus};
use serde_json::Value;
use std::collections::VecDeque;

/// A run as snapshots hold it: the phase spread over the fields runs had before it.
#[derive(serde::Serialize)]
struct RunImageRef<'a> {
    workflow: &'a str,
    version: &'a str,
    status: WorkflowRunStatus,
    #[serde(with = "serde_bytes")]
    input_bytes: &'a Vec<u8>,
    idempotency_key: &'a Option<String>,
    parent: &'a Option<StepRef>,
    depth: u32,
    current_step: Option<&'a str>,
    wait: Option<&'a StepWait>,
    timer_ms: Option<u64>,
    step_executions: u32,
    step_polls: u32,
    step_first_at_ms: u64,
    steps: &'a Vec<StepState>,
    terminal: Option<&'a str>,
    error: &'a Option<String>,
    output: Option<&'a Value>,
    signals: &'a VecDeque<(u64, String, Value)>,
    next_signal_seq: u64,
    history: &'a Vec<HistoryEvent>,
    children: &'a Vec<String>,
    created_at_ms: u64,
    updated_at_ms: u64,
    seq: u64,
    lsn: u64,
    plan: &'a Option<PlanProgress>,
    state: &'a Value,
    branches: &'a Vec<Cursor>,
    held: bool,
    group: &'a Option<String>,
    webhook_url: &'a Option<String>,
}

/// `RunImageRef` read back.
#[derive(serde::Deserialize)]
struct RunImage {
    workflow: String,
    version: String,
    status: WorkflowRunStatus,
    #[serde(with = "serde_bytes")]
    input_bytes: Vec<u8>,
    idempotency_key: Option<String>,
    parent: Option<StepRef>,
    depth: u32,
    current_step: Option<String>,
    wait: Option<StepWait>,
    timer_ms: Option<u64>,
    step_executions: u32,
    step_polls: u32,
    step_first_at_ms: u64,
    steps: Vec<StepState>,
    terminal: Option<String>,
    error: Option<String>,
    output: Option<Value>,
    signals: VecDeque<(u64, String, Value)>,
    next_signal_seq: u64,
    history: Vec<HistoryEvent>,
    children: Vec<String>,
    created_at_ms: u64,
    updated_at_ms: u64,
    seq: u64,
    lsn: u64,
    /// Absent from images written before plans ran.
    #[serde(default)]
    plan: Option<PlanProgress>,
    /// Absent from images written before runs had state (then rebuilt by `relink`).
    #[serde(default)]
    state: Value,
    /// Absent from images written before runs forked.
    #[serde(default)]
    branches: Vec<Cursor>,
    /// Absent from images written before runs could be paused.
    #[serde(default)]
    held: bool,
    /// Absent from images written before runs had groups.
    #[serde(default)]
    group: Option<String>,
    /// Absent from images written before runs had webhooks.
    #[serde(default)]
    webhook_url: Option<String>,
}

impl serde::Serialize for WfRun {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lead = &self.lead;
        let (terminal, output) = match &lead.phase {
            RunPhase::Ended {
                terminal, output, ..
            } => (Some(terminal.as_str()), output.as_ref()),
            _ => (None, None),
        };
        RunImageRef {
            workflow: &self.workflow,
            version: &self.version,
            status: self.status(),
            input_bytes: &self.input_bytes,
            idempotency_key: &self.idempotency_key,
            parent: &self.parent,
            depth: self.depth,
            current_step: lead.phase.step(),
            wait: lead.phase.wait(),
            timer_ms: lead.phase.timer_ms(),
            step_executions: lead.executions,
            step_polls: lead.polls,
            step_first_at_ms: lead.first_at_ms,
            steps: &self.steps,
            terminal,
            error: &self.error,
            output,
            signals: &self.signals,
            next_signal_seq: self.next_signal_seq,
            history: &self.history,
            children: &self.children,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            seq: self.seq,
            lsn: self.lsn,
            plan: &lead.plan,
            state: &self.state,
            branches: &self.branches,
            held: self.held,
            group: &self.group,
            webhook_url: &self.webhook_url,
        }
        .serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for WfRun {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = RunImage::deserialize(d)?;
        let phase = match (r.terminal, r.current_step, r.wait, r.timer_ms) {
            (Some(terminal), ..) => RunPhase::Ended {
                terminal,
                status: r.status,
                output: r.output,
            },
            (None, Some(step), Some(wait), _) => RunPhase::Waiting { step, wait },
            (None, Some(step), None, Some(at_ms)) => RunPhase::Sleeping { step, at_ms },
            (None, Some(step), None, None) => RunPhase::Ready { step },
            (None, None, ..) if !r.branches.is_empty() => RunPhase::Forked,
            (None, None, ..) => {
                return Err(serde::de::Error::custom(
                    "a workflow run with neither a step nor a terminal",
                ));
            }
        };
        Ok(WfRun {
            workflow: r.workflow,
            version: r.version,
            def: unlinked(),
            lead: Cursor {
                phase,
                executions: r.step_executions,
                polls: r.step_polls,
                first_at_ms: r.step_first_at_ms,
                plan: r.plan,
                joins: Vec::new(),
            },
            branches: r.branches,
            held: r.held,
            input: Value::Null,
            input_bytes: r.input_bytes,
            idempotency_key: r.idempotency_key,
            parent: r.parent,
            depth: r.depth,
            steps: r.steps,
            error: r.error,
            signals: r.signals,
            next_signal_seq: r.next_signal_seq,
            history: r.history,
            children: r.children,
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
            seq: r.seq,
            lsn: r.lsn,
            started_lsn: 0,
            state: r.state,
            state_bytes: 0,
            group: r.group,
            webhook_url: r.webhook_url,
        })
    }
}
