//! The final document of a run, as its archive record holds it (`Record::RunArchived`), and
//! the status codes the run index keeps for it.

use super::archive::{Entry, RunKind, name_tag, run_key};
pub(crate) use super::archived_wire::CompactWf;
pub use super::archived_wire::Refs;

/// Whether the compact form carries a history exactly (`archived_wire`).
pub fn carries(history: &[HistoryEvent]) -> bool {
    CompactWf::carries(history)
}
pub use super::archived_wire::{workflow_status, workflow_status_code};
use flo_protocol::{HistoryEvent, RunInfo, RunStatus, WorkflowRunInfo};
use serde::{Deserialize, Serialize};

/// The final document of a run, as status, history and lists show it. A workflow run's is
/// written in the compact form (`archived_wire`), read in either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchivedRun {
    /// An action run's document; with `Refs` (its input in its `RunCreated`, its output,
    /// `outputs[0]`, in its `RunCompleted`) it holds neither (they read as empty) until a
    /// reader puts them back (`fill_archived`).
    Action(Box<RunInfo>, Option<Refs>),
    Workflow(Box<WfArchived>),
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum WireOut<'a> {
    Action(&'a RunInfo),
    /// An action run's document without the payloads `Refs` points at.
    ActionAt(&'a RunInfo, &'a Refs),
    Workflow(&'a WfArchived),
    Wf(Box<CompactWf>),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireIn {
    Action(Box<RunInfo>),
    ActionAt(Box<RunInfo>, Refs),
    /// Written before the compact form, or a document it cannot carry.
    Workflow(Box<WfArchived>),
    Wf(Box<CompactWf>),
}

impl Serialize for ArchivedRun {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ArchivedRun::Action(r, None) => WireOut::Action(r).serialize(s),
            // The payloads it points at are left out already (`archive::plan`).
            ArchivedRun::Action(r, Some(refs)) => WireOut::ActionAt(r, refs).serialize(s),
            ArchivedRun::Workflow(w) => match CompactWf::of(&w.info, &w.history, w.refs.as_ref()) {
                Some(compact) => WireOut::Wf(Box::new(compact)).serialize(s),
                None => WireOut::Workflow(w).serialize(s),
            },
        }
    }
}

impl<'de> Deserialize<'de> for ArchivedRun {
    /// A compact document comes back without its namespace and run id: `Record::decode`
    /// gives it the record's.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match WireIn::deserialize(d)? {
            WireIn::Action(r) => ArchivedRun::Action(r, None),
            WireIn::ActionAt(r, refs) => ArchivedRun::Action(r, Some(refs)),
            WireIn::Workflow(w) => ArchivedRun::Workflow(w),
            WireIn::Wf(c) => {
                let refs = c.refs().cloned();
                // Kept to be filled in (`fill_archived`): the document's payloads, and what
                // is derived from them, are only right once they are back.
                let compact = refs.is_some().then(|| c.clone());
                let (info, history) = c.expand(String::new(), String::new());
                ArchivedRun::Workflow(Box::new(WfArchived {
                    info,
                    history,
                    refs,
                    compact,
                }))
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WfArchived {
    pub info: WorkflowRunInfo,
    pub history: Vec<HistoryEvent>,
    /// Payloads the record leaves out, being in the log already (the compact form only:
    /// the whole form holds every payload). A document read back for a client has them
    /// put back (`fill_archived`) before it is decoded.
    #[serde(skip)]
    pub refs: Option<Refs>,
    /// As read, while payloads are left out (`fill_archived` fills it in).
    #[serde(skip)]
    compact: Option<Box<CompactWf>>,
}

impl WfArchived {
    /// The document as read, while payloads are left out (`archive::fill`).
    pub(crate) fn take_compact(&mut self) -> Option<Box<CompactWf>> {
        self.compact.take()
    }

    pub fn new(info: WorkflowRunInfo, history: Vec<HistoryEvent>) -> WfArchived {
        WfArchived {
            info,
            history,
            refs: None,
            compact: None,
        }
    }
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

impl ArchivedRun {
    pub fn kind(&self) -> RunKind {
        match self {
            ArchivedRun::Action(..) => RunKind::Action,
            ArchivedRun::Workflow(_) => RunKind::Workflow,
        }
    }

    /// Where the log holds the payloads the document leaves out, if it points at any.
    pub fn refs(&self) -> Option<&Refs> {
        match self {
            ArchivedRun::Action(_, refs) => refs.as_ref(),
            ArchivedRun::Workflow(w) => w.refs.as_ref(),
        }
    }

    /// When the run finished.
    pub fn finished_at_ms(&self) -> u64 {
        match self {
            ArchivedRun::Action(r, _) => r.updated_at_ms,
            ArchivedRun::Workflow(w) => w.info.updated_at_ms,
        }
    }

    /// (namespace, run id) the document is about.
    pub fn id(&self) -> (&str, &str) {
        match self {
            ArchivedRun::Action(r, _) => (&r.namespace, &r.run_id),
            ArchivedRun::Workflow(w) => (&w.info.namespace, &w.info.run_id),
        }
    }

    /// The index entry of this document archived at `lsn`.
    pub fn entry(&self, lsn: u64) -> (u64, Entry) {
        let (namespace, run_id) = self.id();
        let (status, dead_lettered, name) = match self {
            ArchivedRun::Action(r, _) => (action_status_code(r.status), r.dead_lettered, &r.action),
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
