//! Appends. The shard a client is connected to splits the records by partition (a record
//! with a key goes to its key's partition; a batch without keys goes to the next partition
//! in turn), sends each part to its partition's owner, which gives the ids and commits
//! them, and answers the client with every id in the order given once every part is
//! durable. Each part's ids are at or above the next id after the last this shard handed
//! out for the stream, so one client's records read back in the order it appended them
//! (ids are unique across a stream's partitions: `fold::streams::next_ids`).

use crate::core::io::{Done, PeerRequest, ReplyResult, ReplyTo};
use crate::core::{Core, Waiting};
use crate::fold::record::{Record, StreamEntry};
use crate::fold::streams::{StreamKey, next_ids, owner_of, partition_of_key};
use crate::tables::HashMap;
use flo_protocol::{
    ErrorValue, Op, Reply, STREAM_APPEND_RECORDS_MAX, StreamId, StreamRecordIn, check_stream_record,
};
use std::collections::BTreeMap;

/// An append waiting for its parts.
struct Gather {
    to: ReplyTo,
    stream: StreamKey,
    ids: Vec<StreamId>,
    /// Per part: the positions of its records in the request.
    slots: Vec<Vec<usize>>,
    remaining: usize,
    error: Option<ErrorValue>,
    /// The LSN of the part appended here (others answer once theirs is durable).
    lsn: u64,
}

/// Appends in progress on this shard, and per stream the turn of the next batch without
/// keys and the last id handed out (the floor of the next).
#[derive(Default)]
pub struct Appends {
    open: HashMap<u64, Gather>,
    next_id: u64,
    turn: HashMap<StreamKey, u32>,
    last: HashMap<StreamKey, StreamId>,
}

impl Appends {
    pub fn len(&self) -> usize {
        self.open.len()
    }
}

/// A client's append, on the shard it is connected to. `refusal`: why this shard cannot
/// log now (disk full, log backlog), for a part it would append itself.
pub fn append(
    core: &mut Core,
    appends: &mut Appends,
    to: ReplyTo,
    op: Op,
    refusal: Option<ErrorValue>,
) {
    let Op::StreamAppend {
        namespace,
        stream,
        records,
        partition,
    } = op
    else {
        core.reply_op(to, 0, Err(ErrorValue::internal("not a stream append")));
        return;
    };
    let parts = match split(core, appends, &namespace, &stream, records, partition) {
        Ok(parts) => parts,
        Err(e) => return core.reply_op(to, 0, Err(e)),
    };
    let key = (namespace.clone(), stream.clone());
    let min_id = appends
        .last
        .get(&key)
        .map(|l| StreamId::new(l.ms, l.seq + 1));
    appends.next_id += 1;
    let id = appends.next_id;
    let n = parts.iter().map(|(_, slots, _)| slots.len()).sum();
    appends.open.insert(
        id,
        Gather {
            to,
            stream: key,
            ids: vec![StreamId::ZERO; n],
            slots: parts.iter().map(|(_, slots, _)| slots.clone()).collect(),
            remaining: parts.len(),
            error: None,
            lsn: 0,
        },
    );
    for (i, (p, _, records)) in parts.into_iter().enumerate() {
        let owner = owner_of(&core.partitioning(), &namespace, &stream, p);
        if owner != core.shard() {
            let req = PeerRequest::StreamAppend {
                namespace: namespace.clone(),
                stream: stream.clone(),
                partition: p,
                records,
                min_id,
            };
            core.call(
                owner,
                0,
                req,
                Waiting::StreamAppend {
                    gather: id,
                    part: i,
                },
            );
            continue;
        }
        let done = match &refusal {
            Some(e) => Done::now(Err(e.clone())),
            None => append_part(core, &namespace, &stream, p, records, min_id),
        };
        if let Some(g) = appends.open.get_mut(&id) {
            g.lsn = g.lsn.max(done.wait_lsn);
        }
        on_part_appended(core, appends, id, i, done.result);
    }
}

/// The records by partition: (partition, their positions in the request, the records).
type Parts = Vec<(u32, Vec<usize>, Vec<StreamRecordIn>)>;

fn split(
    core: &Core,
    appends: &mut Appends,
    namespace: &str,
    stream: &str,
    records: Vec<StreamRecordIn>,
    partition: Option<u32>,
) -> Result<Parts, ErrorValue> {
    let def = core.state().streams.existing(namespace, stream)?;
    let partitions = def.partitions;
    if records.is_empty() || records.len() > STREAM_APPEND_RECORDS_MAX {
        return Err(ErrorValue::bad_request(format!(
            "an append carries 1 to {STREAM_APPEND_RECORDS_MAX} records, not {}",
            records.len()
        )));
    }
    for r in &records {
        check_stream_record(r)?;
    }
    if let Some(p) = partition.filter(|&p| p >= partitions) {
        return Err(ErrorValue::bad_request(format!(
            "stream {stream:?} has partitions 0 to {}; there is no partition {p}",
            partitions - 1
        )));
    }
    let unkeyed = partition.unwrap_or_else(|| {
        let turn = appends
            .turn
            .entry((namespace.to_string(), stream.to_string()))
            .or_insert(0);
        let p = *turn % partitions;
        *turn = turn.wrapping_add(1);
        p
    });
    let mut by_partition: BTreeMap<u32, (Vec<usize>, Vec<StreamRecordIn>)> = BTreeMap::new();
    for (i, r) in records.into_iter().enumerate() {
        let p = match (&partition, &r.key) {
            (None, Some(key)) => partition_of_key(namespace, key, partitions),
            _ => unkeyed,
        };
        let part = by_partition.entry(p).or_default();
        part.0.push(i);
        part.1.push(r);
    }
    Ok(by_partition
        .into_iter()
        .map(|(p, (slots, records))| (p, slots, records))
        .collect())
}

/// On the partition's owner: gives the records their ids and commits them.
pub fn append_part(
    core: &mut Core,
    namespace: &str,
    stream: &str,
    partition: u32,
    records: Vec<StreamRecordIn>,
    min_id: Option<StreamId>,
) -> Done {
    let streams = &core.state().streams;
    let def = match streams.existing(namespace, stream) {
        Ok(def) => def,
        Err(e) => return Done::now(Err(e)),
    };
    if partition >= def.partitions {
        return Done::now(Err(ErrorValue::internal(format!(
            "an append reached partition {partition} of a stream of {}",
            def.partitions
        ))));
    }
    let last = streams
        .partition(namespace, stream, partition)
        .and_then(|p| p.last_id);
    let ids = next_ids(
        last,
        min_id,
        core.now_ms(),
        partition,
        def.partitions,
        records.len(),
    );
    let entries = records
        .into_iter()
        .zip(&ids)
        .map(|(r, id)| StreamEntry {
            id: *id,
            key: r.key.map(String::into_boxed_str),
            headers: r.headers,
            payload: r.payload.into_boxed_slice(),
        })
        .collect();
    let lsn = core.commit(Record::StreamAppended {
        namespace: namespace.to_string(),
        stream: stream.to_string(),
        partition,
        entries,
    });
    Done {
        wait_lsn: lsn,
        result: Ok(Reply::StreamAppended { ids }),
    }
}

/// Part `part` of append `gather` answered; the client is answered once all have.
pub fn on_part_appended(
    core: &mut Core,
    appends: &mut Appends,
    gather: u64,
    part: usize,
    result: ReplyResult,
) {
    let Some(g) = appends.open.get_mut(&gather) else {
        return;
    };
    g.remaining = g.remaining.saturating_sub(1);
    match result {
        Ok(Reply::StreamAppended { ids }) if ids.len() == g.slots[part].len() => {
            for (slot, id) in g.slots[part].iter().zip(ids) {
                g.ids[*slot] = id;
            }
        }
        Ok(other) => {
            let e = ErrorValue::internal(format!("a partition answered an append with {other:?}"));
            g.error.get_or_insert(e);
        }
        Err(e) => {
            g.error.get_or_insert(e);
        }
    }
    if g.remaining > 0 {
        return;
    }
    let Some(g) = appends.open.remove(&gather) else {
        return;
    };
    let result = match g.error {
        // Parts that were appended stay: say so.
        Some(e) if g.slots.len() > 1 => Err(ErrorValue::new(
            e.code,
            format!(
                "{} (the batch went to {} partitions; the records of the others may be \
                 appended)",
                e.message,
                g.slots.len()
            ),
        )),
        Some(e) => Err(e),
        None => {
            if let Some(max) = g.ids.iter().max() {
                let last = appends.last.entry(g.stream).or_default();
                *last = (*last).max(*max);
            }
            Ok(Reply::StreamAppended { ids: g.ids })
        }
    };
    core.reply_op(g.to, g.lsn, result);
}
