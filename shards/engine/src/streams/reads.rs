//! Reads, descriptions and trims: each shard answers for the partitions it holds (one
//! partition when a read names it); the fan-out merges the shards' parts (`merge_*`).
//! Every answer waits until what it saw is durable.

use crate::core::Core;
use crate::core::io::{Done, ReplyResult};
use crate::fold::streams::owner_of;
use flo_protocol::{
    ErrorValue, Reply, STREAM_READ_COUNT_DEFAULT, STREAM_READ_COUNT_MAX, StreamId, StreamInfo,
    StreamReadSpec, StreamRecord,
};
use std::collections::BTreeMap;

fn read_count(count: Option<u32>) -> Result<usize, ErrorValue> {
    match count.unwrap_or(STREAM_READ_COUNT_DEFAULT) {
        0 => Err(ErrorValue::bad_request("a read's count must be above 0")),
        n if n > STREAM_READ_COUNT_MAX => Err(ErrorValue::bad_request(format!(
            "a read returns at most {STREAM_READ_COUNT_MAX} records, not {n}"
        ))),
        n => Ok(n as usize),
    }
}

/// This shard's part of a read: the records of the partitions it holds (of the one the
/// read names, if it names one), in id order.
pub fn read_part(core: &Core, spec: &StreamReadSpec) -> Done {
    match read(core, spec) {
        Ok(done) => done,
        Err(e) => Done::now(Err(e)),
    }
}

fn read(core: &Core, spec: &StreamReadSpec) -> Result<Done, ErrorValue> {
    let (ns, name) = (spec.namespace.as_str(), spec.stream.as_str());
    let streams = &core.state().streams;
    let def = streams.existing(ns, name)?;
    let count = read_count(spec.count)?;
    if let Some(p) = spec.partition.filter(|&p| p >= def.partitions) {
        return Err(ErrorValue::bad_request(format!(
            "stream {name:?} has partitions 0 to {}; there is no partition {p}",
            def.partitions - 1
        )));
    }
    let partitioning = core.partitioning();
    let mut records: Vec<StreamRecord> = Vec::new();
    let mut more = false;
    let mut wait_lsn = core.definitions_lsn();
    for (p, part) in streams.local_partitions(ns, name) {
        if spec.partition.is_some_and(|want| want != p)
            || owner_of(&partitioning, ns, name, p) != core.shard()
        {
            continue;
        }
        wait_lsn = wait_lsn.max(part.lsn);
        if spec.tail {
            records.extend(part.tail(count).map(|e| e.to_wire(p)));
            continue;
        }
        if let (Some(after), Some(removed)) = (spec.after, part.removed_up_to)
            && after < removed
        {
            return Err(ErrorValue::not_found(format!(
                "records of stream {name:?} (partition {p}) after {after} up to {removed} \
                 were removed by its retention or a trim; read from the start, or from the \
                 stream's first id (flo stream info)"
            )));
        }
        let before = records.len();
        records.extend(part.read(spec.after, count + 1).map(|e| e.to_wire(p)));
        if records.len() - before > count {
            records.pop();
            more = true;
        }
    }
    Ok(Done {
        wait_lsn,
        result: Ok(page(records, count, more, spec.tail)),
    })
}

/// Records from several partitions in id order, cut to `count` (the newest for a tail).
fn page(mut records: Vec<StreamRecord>, count: usize, more: bool, tail: bool) -> Reply {
    records.sort_by_key(|r| r.id);
    if tail {
        let skip = records.len().saturating_sub(count);
        records.drain(..skip);
        return Reply::StreamRecords {
            records,
            next_after: None,
        };
    }
    let more = more || records.len() > count;
    records.truncate(count);
    let next_after = more.then(|| records.last().map(|r| r.id)).flatten();
    Reply::StreamRecords {
        records,
        next_after,
    }
}

/// The shards' parts of a read, merged.
pub fn merge_reads(spec: &StreamReadSpec, parts: Vec<Reply>) -> ReplyResult {
    let count = read_count(spec.count)?;
    let mut all = Vec::new();
    let mut more = false;
    for part in parts {
        if let Reply::StreamRecords {
            records,
            next_after,
        } = part
        {
            more |= next_after.is_some();
            all.extend(records);
        }
    }
    Ok(page(all, count, more, spec.tail))
}

/// This shard's part of a description: the streams of `namespace` (or the one named) with
/// the records held here.
pub fn info_part(core: &Core, namespace: &str, name: Option<&str>) -> Done {
    let streams = &core.state().streams;
    let mut infos = Vec::new();
    let mut wait_lsn = core.definitions_lsn();
    if let Some(name) = name {
        let def = match streams.existing(namespace, name) {
            Ok(def) => def,
            Err(e) => return Done::now(Err(e)),
        };
        infos.push(streams.local_info(namespace, name, def));
    } else {
        if let Err(e) = flo_protocol::check_namespace(namespace) {
            return Done::now(Err(e.into()));
        }
        for (name, def) in streams.defs_in(namespace) {
            infos.push(streams.local_info(namespace, name, def));
        }
    }
    for info in &infos {
        for (_, part) in streams.local_partitions(namespace, &info.name) {
            wait_lsn = wait_lsn.max(part.lsn);
        }
    }
    Done {
        wait_lsn,
        result: Ok(Reply::Streams(infos)),
    }
}

/// The shards' descriptions of the same streams, summed.
pub fn merge_infos(parts: Vec<Reply>) -> Vec<StreamInfo> {
    let mut by_name: BTreeMap<String, StreamInfo> = BTreeMap::new();
    for info in parts.into_iter().flat_map(|p| match p {
        Reply::Streams(infos) => infos,
        _ => Vec::new(),
    }) {
        let Some(sum) = by_name.get_mut(&info.name) else {
            by_name.insert(info.name.clone(), info);
            continue;
        };
        sum.length += info.length;
        sum.bytes += info.bytes;
        sum.appended += info.appended;
        sum.first_id = min_id(sum.first_id, info.first_id);
        sum.last_id = sum.last_id.max(info.last_id);
    }
    by_name.into_values().collect()
}

fn min_id(a: Option<StreamId>, b: Option<StreamId>) -> Option<StreamId> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// This shard's part of a trim: removes (or, for a dry run, counts) the records below
/// `before` in the partitions held here.
pub fn trim_part(
    core: &mut Core,
    namespace: &str,
    stream: &str,
    before: StreamId,
    dry_run: bool,
) -> Done {
    let streams = &core.state().streams;
    if let Err(e) = streams.existing(namespace, stream) {
        return Done::now(Err(e));
    }
    let mut removed = 0;
    let mut wait_lsn = core.definitions_lsn();
    let mut records = Vec::new();
    for (p, part) in streams.local_partitions(namespace, stream) {
        let n = part.count_before(before);
        removed += n;
        wait_lsn = wait_lsn.max(part.lsn);
        if n > 0 && !dry_run {
            records.push(crate::fold::record::Record::StreamTrimmed {
                namespace: namespace.to_string(),
                stream: stream.to_string(),
                partition: p,
                before,
            });
        }
    }
    for record in records {
        wait_lsn = core.commit(record);
    }
    Done {
        wait_lsn,
        result: Ok(Reply::StreamTrimmed { removed }),
    }
}

/// The shards' trims, summed.
pub fn merge_trims(parts: Vec<Reply>) -> Reply {
    let removed = parts
        .iter()
        .map(|p| match p {
            Reply::StreamTrimmed { removed } => *removed,
            _ => 0,
        })
        .sum();
    Reply::StreamTrimmed { removed }
}

/// Logs the removal of records past their stream's age limit, in up to `max` partitions;
/// returns in how many.
pub fn sweep_expired(core: &mut Core, max: usize) -> usize {
    let records = core.state().streams.expired(core.now_ms(), max);
    let n = records.len();
    for record in records {
        core.commit(record);
    }
    n
}
