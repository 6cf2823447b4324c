//! The final document of a run, as its archive record holds it (`Record::RunArchived`), and
//! the status codes the run index keeps for it.

use super::archive::{Entry, RunKind, name_tag, run_key};
use flo_protocol::{HistoryEvent, RunInfo, RunStatus, WorkflowRunInfo, WorkflowRunStatus};
use serde::{Deserialize, Serialize};

/// The final document of a run, as status, history and lists show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchivedRun {
    Action(Box<RunInfo>),
    Workflow(Box<WfArchived>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WfArchived {
    pub info: WorkflowRunInfo,
    pub history: Vec<HistoryEvent>,
}

pub fn action_status_code(s: RunStatus) -> u8 {
    match s {
        RunStatus::Pending => 0,
        RunStatus::Running => 1,
        RunStatus::Completed => 2,
        RunStatus::Failed => 3,
        RunStatus::Cancelled => 4,
        RunStatus::TimedOut => 5,
    }
}

pub fn action_status(code: u8) -> RunStatus {
    match code {
        0 => RunStatus::Pending,
        1 => RunStatus::Running,
        2 => RunStatus::Completed,
        3 => RunStatus::Failed,
        4 => RunStatus::Cancelled,
        _ => RunStatus::TimedOut,
    }
}

pub fn workflow_status_code(s: WorkflowRunStatus) -> u8 {
    match s {
        WorkflowRunStatus::Pending => 0,
        WorkflowRunStatus::Running => 1,
        WorkflowRunStatus::Waiting => 2,
        WorkflowRunStatus::Completed => 3,
        WorkflowRunStatus::Failed => 4,
        WorkflowRunStatus::Cancelled => 5,
        WorkflowRunStatus::TimedOut => 6,
        WorkflowRunStatus::OnHold => 7,
    }
}

pub fn workflow_status(code: u8) -> WorkflowRunStatus {
    match code {
        0 => WorkflowRunStatus::Pending,
        1 => WorkflowRunStatus::Running,
        2 => WorkflowRunStatus::Waiting,
        3 => WorkflowRunStatus::Completed,
        4 => WorkflowRunStatus::Failed,
        5 => WorkflowRunStatus::Cancelled,
        7 => WorkflowRunStatus::OnHold,
        _ => WorkflowRunStatus::TimedOut,
    }
}

impl ArchivedRun {
    pub fn kind(&self) -> RunKind {
        match self {
            ArchivedRun::Action(_) => RunKind::Action,
            ArchivedRun::Workflow(_) => RunKind::Workflow,
        }
    }

    /// When the run finished.
    pub fn finished_at_ms(&self) -> u64 {
        match self {
            ArchivedRun::Action(r) => r.updated_at_ms,
            ArchivedRun::Workflow(w) => w.info.updated_at_ms,
        }
    }

    /// (namespace, run id) the document is about.
    pub fn id(&self) -> (&str, &str) {
        match self {
            ArchivedRun::Action(r) => (&r.namespace, &r.run_id),
            ArchivedRun::Workflow(w) => (&w.info.namespace, &w.info.run_id),
        }
    }

    /// The index entry of this document archived at `lsn`.
    pub fn entry(&self, lsn: u64) -> (u64, Entry) {
        let (namespace, run_id) = self.id();
        let (status, dead_lettered, name) = match self {
            ArchivedRun::Action(r) => (action_status_code(r.status), r.dead_lettered, &r.action),
            ArchivedRun::Workflow(w) => {
                (workflow_status_code(w.info.status), false, &w.info.workflow)
            }
        };
        let entry = Entry {
            lsn,
            status,
            dead_lettered,
            name_tag: name_tag(namespace, name),
        };
        (run_key(self.kind(), namespace, run_id), entry)
    }
}
