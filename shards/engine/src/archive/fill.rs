//! Reads of an archive record that points at its payloads (`Refs`: each payload written
//! once): the records it names are read too, and the payloads put back before the engine
//! decodes the record to answer from. The runtime's log reader (and the simulation) do this
//! between reading and handing the record over, so the engine's reads see it whole.

use crate::fold::archived::{ArchivedRun, Refs, WfArchived};
use crate::fold::record::Record;
use crate::fold::workflows::step_output_json;

/// The records an archive record's document points at instead of repeating their payloads
/// (`Refs`), if it points at any: a reader reads them and puts them back with
/// `fill_archived` before the record is decoded to answer from.
pub fn archived_refs(payload: &[u8]) -> Vec<u64> {
    match Record::decode(payload) {
        Ok(Record::RunArchived { run, .. }) => run.refs().map(Refs::lsns).unwrap_or_default(),
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
    let Some(mut compact) = doc.take_compact() else {
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
        } if id == *run_id => Ok(output.map(|o| step_output_json(&o))),
        // A worker step's output: its action run's completion (`output_of_run`).
        Record::RunCompleted { output, .. } => Ok(Some(step_output_json(&output))),
        _ => Err(format!("record {lsn} is not a step of run {run_id:?}")),
    })?;
    let (info, history) = compact.expand(namespace.clone(), run_id.clone());
    **doc = WfArchived::new(info, history);
    let mut out = Vec::with_capacity(payload.len() * 2);
    record.encode(&mut out);
    Ok(out)
}
