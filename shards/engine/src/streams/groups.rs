//! Consumer groups on the partition's owner: deliveries to a consumer, acks and nacks
//! (`scatter` splits them over the partitions), and each shard's part of a group's
//! description and pending list (merged by the fan-out).

use crate::core::Core;
use crate::core::io::{Done, ReplyResult};
use crate::fold::record::Record;
use crate::fold::stream_group_ops::GroupAt;
use flo_protocol::{GroupInfo, PendingRecord, Reply, STREAM_READ_COUNT_DEFAULT, StreamId};
use std::collections::BTreeMap;

/// Delivers up to `count` records of `partition` to `consumer`; answers with them once the
/// delivery is durable.
pub fn deliver(
    core: &mut Core,
    namespace: &str,
    stream: &str,
    group: &str,
    partition: u32,
    consumer: &str,
    count: u32,
) -> Done {
    let now = core.now_ms();
    let streams = &core.state().streams;
    let at = GroupAt {
        namespace,
        stream,
        partition,
        group,
    };
    let planned = streams.plan_delivery(at, consumer, count as usize, now, false);
    let records = match planned {
        Ok(records) => records,
        Err(e) => return Done::now(Err(e)),
    };
    let mut wait_lsn = streams
        .partition(namespace, stream, partition)
        .map_or(core.definitions_lsn(), |p| p.lsn);
    let mut ids: Vec<StreamId> = Vec::new();
    for record in records {
        if let Record::StreamDelivered { ids: delivered, .. } = &record {
            ids.clone_from(delivered);
        }
        wait_lsn = core.commit(record);
    }
    let part = core.state().streams.partition(namespace, stream, partition);
    let records = ids
        .iter()
        .filter_map(|id| part.and_then(|p| p.entry(*id)))
        .map(|e| e.to_wire(partition))
        .collect();
    Done {
        wait_lsn,
        result: Ok(Reply::StreamRecords {
            records,
            next_after: None,
        }),
    }
}

/// Acks (`nack_due` None) or nacks `ids` of `partition`.
pub fn settle(
    core: &mut Core,
    namespace: &str,
    stream: &str,
    group: &str,
    partition: u32,
    ids: Vec<StreamId>,
    nack_due: Option<u64>,
) -> Done {
    let streams = &core.state().streams;
    let wait_lsn = streams
        .partition(namespace, stream, partition)
        .map_or(core.definitions_lsn(), |p| p.lsn);
    match streams.plan_settle(namespace, stream, group, partition, ids, nack_due) {
        Ok((Some(record), count)) => Done {
            wait_lsn: core.commit(record),
            result: Ok(Reply::GroupAcked { count }),
        },
        Ok((None, count)) => Done {
            wait_lsn,
            result: Ok(Reply::GroupAcked { count }),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// This shard's part of the description of a stream's groups (or the one named).
pub fn info_part(core: &Core, namespace: &str, stream: &str, group: Option<&str>) -> Done {
    let streams = &core.state().streams;
    let def = match streams.existing(namespace, stream) {
        Ok(def) => def,
        Err(e) => return Done::now(Err(e)),
    };
    let mut infos = Vec::new();
    for (name, g) in &def.groups {
        if group.is_none_or(|want| want == name) {
            infos.push(streams.local_group_info(namespace, stream, name, g));
        }
    }
    if let Some(want) = group
        && infos.is_empty()
    {
        return Done::now(streams.group(namespace, stream, want).map(|_| Reply::Done));
    }
    Done {
        wait_lsn: wait_lsn(core, namespace, stream),
        result: Ok(Reply::Groups(infos)),
    }
}

fn wait_lsn(core: &Core, namespace: &str, stream: &str) -> u64 {
    core.state()
        .streams
        .local_partitions(namespace, stream)
        .map(|(_, p)| p.lsn)
        .fold(core.definitions_lsn(), u64::max)
}

/// The shards' descriptions of the same groups, summed.
pub fn merge_infos(parts: Vec<Reply>) -> Vec<GroupInfo> {
    let mut by_name: BTreeMap<String, GroupInfo> = BTreeMap::new();
    for info in parts.into_iter().flat_map(|p| match p {
        Reply::Groups(infos) => infos,
        _ => Vec::new(),
    }) {
        let Some(sum) = by_name.get_mut(&info.group) else {
            by_name.insert(info.group.clone(), info);
            continue;
        };
        sum.pending += info.pending;
        sum.lag += info.lag;
        sum.delivered += info.delivered;
        sum.acked += info.acked;
        sum.dead_lettered += info.dead_lettered;
        sum.consumers.extend(info.consumers);
        sum.consumers.sort();
        sum.consumers.dedup();
    }
    by_name.into_values().collect()
}

/// This shard's part of a group's pending records, oldest first.
pub fn pending_part(
    core: &Core,
    namespace: &str,
    stream: &str,
    group: &str,
    count: Option<u32>,
) -> Done {
    let streams = &core.state().streams;
    if let Err(e) = streams.group(namespace, stream, group) {
        return Done::now(Err(e));
    }
    let count = count.unwrap_or(STREAM_READ_COUNT_DEFAULT) as usize;
    let mut pending: Vec<PendingRecord> = Vec::new();
    for (_, part) in streams.local_partitions(namespace, stream) {
        if let Some(g) = part.groups.get(group) {
            pending.extend(g.pending_wire().take(count));
        }
    }
    pending.sort_by_key(|p| p.id);
    pending.truncate(count);
    Done {
        wait_lsn: wait_lsn(core, namespace, stream),
        result: Ok(Reply::GroupPending(pending)),
    }
}

/// The shards' pending records, oldest first, cut to `count`.
pub fn merge_pending(count: Option<u32>, parts: Vec<Reply>) -> ReplyResult {
    let count = count.unwrap_or(STREAM_READ_COUNT_DEFAULT) as usize;
    let mut all: Vec<PendingRecord> = parts
        .into_iter()
        .flat_map(|p| match p {
            Reply::GroupPending(list) => list,
            _ => Vec::new(),
        })
        .collect();
    all.sort_by_key(|p| p.id);
    all.truncate(count);
    Ok(Reply::GroupPending(all))
}
