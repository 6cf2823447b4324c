//! The final document of a run, as its archive record holds it (`Record::RunArchived`), and
//! the status codes the run index keeps for it.

use super::archive::{Entry, RunKind, name_tag, run_key};
use super::archived_wire::CompactWf;
pub use super::archived_wire::Refs;

/// Whether the compact form carries a history exactly (`archived_wire`).
pub fn carries(history: &[HistoryEvent]) -> bool {
    CompactWf::carries(history)
}
pub use super::archived_wire::{workflow_status, workflow_status_code};
use super::record::Record;
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
    pub fn new(info: WorkflowRunInfo, history: Vec<HistoryEvent>) -> WfArchived {
        WfArchived {
            info,
            history,
            refs: None,
            compact: None,
        }
    }
}

/// The records an archive record's document points at instead of repeating their payloads
/// (`Refs`), if it points at any: a reader reads them and puts them back with
/// `fill_archived` before the record is decoded to answer from.
pub fn archived_refs(payload: &[u8]) -> Vec<u64> {
    match Record::decode(payload) {
        Ok(Record::RunArchived {
            run: ArchivedRun::Workflow(doc),
            ..
        }) => doc.refs.as_ref().map(Refs::lsns).unwrap_or_default(),
        Ok(Record::RunArchived {
            run: ArchivedRun::Action(_, Some(refs)),
            ..
        }) => refs.lsns(),
        _ => Vec::new(),
    }
}

/// The archive record `payload` with the payloads its document points at put back, from
/// `records` (each LSN `archived_refs` gave, with its record's payload): the record as if it
/// had been written whole.
pub fn fill_archived(payload: &[u8], records: &[(u64, Vec<u8>)]) -> Result<Vec<u8>, String> {
    let mut record = Record::decode(payload).map_err(|e| e.to_string())?;
    let at = |lsn: u64| -> Result<Record, String> {
        let (_, bytes) = records
            .iter()
            .find(|(l, _)| *l == lsn)
            .ok_or_else(|| format!("record {lsn}, which an archive points at, was not read"))?;
        Record::decode(bytes).map_err(|e| format!("record {lsn}: {e}"))
    };
    let Record::RunArchived {
        namespace,
        run_id,
        run,
    } = &mut record
    else {
        return Ok(payload.to_vec());
    };
    let doc = match run {
        ArchivedRun::Action(info, refs) => {
            let Some(refs) = refs.take() else {
                return Ok(payload.to_vec());
            };
            if refs.input > 0 {
                match at(refs.input)? {
                    Record::RunCreated {
                        run_id: id, input, ..
                    } if id == *run_id => info.input = input,
                    _ => {
                        return Err(format!(
                            "record {} is not the creation of run {run_id:?}",
                            refs.input
                        ));
                    }
                }
            }
            if let Some(&lsn) = refs.outputs.first().filter(|&&l| l > 0) {
                match at(lsn)? {
                    Record::RunCompleted {
                        run_id: id, output, ..
                    } if id == *run_id => info.output = Some(output),
                    _ => {
                        return Err(format!(
                            "record {lsn} is not the completion of run {run_id:?}"
                        ));
                    }
                }
            }
            let mut out = Vec::with_capacity(payload.len() * 2);
            record.encode(&mut out);
            return Ok(out);
        }
        ArchivedRun::Workflow(doc) => doc,
    };
    let Some(mut compact) = doc.compact.take() else {
        return Ok(payload.to_vec());
    };
    let input = match compact.refs().map_or(0, |r| r.input) {
        0 => None,
        lsn => match at(lsn)? {
            Record::WfRunStarted {
                run_id: id, input, ..
            } if id == *run_id => Some(input),
            _ => return Err(format!("record {lsn} is not the start of run {run_id:?}")),
        },
    };
    compact.fill(input, |lsn| match at(lsn)? {
        Record::WfStepFinished {
            run_id: id, output, ..
        } if id == *run_id => Ok(output.map(|o| {
            serde_json::to_vec(&crate::fold::workflows::json_value(&o)).unwrap_or_default()
        })),
        _ => Err(format!("record {lsn} is not a step of run {run_id:?}")),
    })?;
    let (info, history) = compact.expand(namespace.clone(), run_id.clone());
    **doc = WfArchived::new(info, history);
    let mut out = Vec::with_capacity(payload.len() * 2);
    record.encode(&mut out);
    Ok(out)
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
