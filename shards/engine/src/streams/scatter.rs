//! Operations split over a stream's partitions on the shard a client is connected to, each
//! part sent to its partition's owner and the answers gathered: appends, group reads, acks
//! and nacks.
//!
//! Appends: a record with a key goes to its key's partition; a batch without keys goes to
//! the next partition in turn. Each part's ids are at or above the next id after the last
//! this shard handed out for the stream, so one client's records read back in the order it
//! appended them (ids are unique across a stream's partitions: `fold::streams::next_ids`).
//! Group reads: the count is shared over the partitions (the remainder in turn); a read
//! that found nothing and may block is parked here and asked again — at once when this
//! shard appends to the stream, else after a short wait that doubles up to
//! `GROUP_POLL_MS_MAX` — until its time is up. Acks and nacks go by the partition each id
//! names.

use crate::core::io::{ConnId, Done, PeerRequest, ReplyResult, ReplyTo};
use crate::core::{Core, Waiting};
use crate::fold::record::{Record, StreamEntry};
use crate::fold::streams::{StreamKey, next_ids, owner_of, partition_of_key};
use crate::shares::{Shares, share_of};
use crate::tables::HashMap;
use flo_protocol::{
    DELAY_MS_ACCEPTED_MAX, ErrorValue, GROUP_ACK_IDS_MAX, GROUP_BLOCK_MS_MAX, GroupReadSpec, Op,
    Reply, STREAM_APPEND_RECORDS_MAX, STREAM_READ_COUNT_DEFAULT, STREAM_READ_COUNT_MAX, StreamId,
    StreamReadSpec, StreamRecord, StreamRecordIn, check_stream_record,
};
use std::collections::BTreeMap;

/// The first wait of a parked group read before it asks again, and the longest.
const GROUP_POLL_MS_MIN: u64 = 5;
const GROUP_POLL_MS_MAX: u64 = 100;
/// Rounds of one group read: partitions that gave their whole share are asked again for
/// what the others did not have.
const GROUP_READ_ROUNDS_MAX: u32 = 3;
/// Group reads parked on one shard at once; more are refused (`overloaded`).
pub const GROUP_READS_PARKED_MAX: usize = 4096;
/// Of those, one namespace's at most: a tenant filling the pool leaves room for others.
pub const GROUP_READS_PARKED_PER_NAMESPACE_MAX: usize = share_of(GROUP_READS_PARKED_MAX);

/// What a scattered operation gathers.
enum Gathered {
    /// Append: every id in request order; per part, the positions of its records.
    Ids {
        stream: StreamKey,
        ids: Vec<StreamId>,
        slots: Vec<Vec<usize>>,
    },
    /// Group read: the records delivered.
    Records {
        spec: GroupReadSpec,
        records: Vec<StreamRecord>,
        /// Wall-clock deadline of a blocking read (0: it does not block).
        deadline_ms: u64,
        poll_ms: u64,
        /// This round's (partition, count asked), and the partitions that gave all they
        /// were asked (they may have more).
        shares: Vec<(u32, u32)>,
        filled: Vec<u32>,
        round: u32,
        /// Why this shard could not log when the read came (for its parts of later rounds).
        refusal: Option<ErrorValue>,
    },
    /// Ack or nack: how many ids were pending.
    Count(u64),
    /// A blocking read: every shard's part (`reads::read_part`), merged.
    Read {
        spec: StreamReadSpec,
        parts: Vec<Reply>,
        deadline_ms: u64,
        poll_ms: u64,
    },
}

struct Gather {
    to: ReplyTo,
    what: Gathered,
    remaining: usize,
    error: Option<ErrorValue>,
    /// The LSN of the parts done here (others answer once theirs are durable).
    lsn: u64,
}

/// What a parked read asks again.
enum Again {
    Group(GroupReadSpec),
    Read(StreamReadSpec),
}

impl Again {
    fn stream(&self) -> (&str, &str) {
        match self {
            Again::Group(s) => (&s.namespace, &s.stream),
            Again::Read(s) => (&s.namespace, &s.stream),
        }
    }
}

/// A blocking read waiting to ask its partitions again.
struct Parked {
    to: ReplyTo,
    spec: Again,
    deadline_ms: u64,
    poll_ms: u64,
}

/// Scattered operations in progress on this shard, parked group reads, and per stream the
/// turn of the next unkeyed batch (or group read) and the last id handed out.
#[derive(Default)]
pub struct Scatter {
    open: HashMap<u64, Gather>,
    next_id: u64,
    turn: HashMap<StreamKey, u32>,
    last: HashMap<StreamKey, StreamId>,
    /// (next ask, id) → parked read.
    parked: BTreeMap<(u64, u64), Parked>,
    /// Parked reads per namespace (each holds at most `GROUP_READS_PARKED_PER_NAMESPACE_MAX`).
    shares: Shares,
}

impl Scatter {
    /// Operations waiting for parts, and parked reads.
    pub fn len(&self) -> usize {
        self.open.len() + self.parked.len()
    }

    /// When the earliest parked read asks again (wall clock).
    pub fn next_deadline(&self) -> Option<u64> {
        self.parked.keys().next().map(|(at, _)| *at)
    }

    fn open(&mut self, gather: Gather) -> u64 {
        self.next_id += 1;
        self.open.insert(self.next_id, gather);
        self.next_id
    }

    fn turn(&mut self, key: &StreamKey) -> u32 {
        let turn = self.turn.entry(key.clone()).or_insert(0);
        let t = *turn;
        *turn = turn.wrapping_add(1);
        t
    }
}

/// A client's operation on a stream's partitions, on the shard it is connected to.
/// `refusal`: why this shard cannot log now (disk full, log backlog), for parts it would
/// do itself.
pub fn scatter(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    op: Op,
    refusal: Option<ErrorValue>,
) {
    let result = match op {
        Op::StreamAppend {
            namespace,
            stream,
            records,
            partition,
        } => append(core, sc, to, namespace, stream, records, partition, refusal),
        Op::StreamGroupRead(spec) => {
            let block = spec.block_ms.unwrap_or(0).min(GROUP_BLOCK_MS_MAX);
            let deadline_ms = if block > 0 { core.wall_ms() + block } else { 0 };
            group_read(core, sc, to, spec, deadline_ms, GROUP_POLL_MS_MIN, refusal)
        }
        Op::StreamRead(spec) => {
            let block = spec.block_ms.unwrap_or(0).min(GROUP_BLOCK_MS_MAX);
            let deadline_ms = core.wall_ms() + block;
            blocking_read(core, sc, to, spec, deadline_ms, GROUP_POLL_MS_MIN);
            Ok(())
        }
        Op::StreamGroupAck {
            namespace,
            stream,
            group,
            ids,
        } => settle(core, sc, to, (namespace, stream, group), ids, None, refusal),
        Op::StreamGroupNack {
            namespace,
            stream,
            group,
            ids,
            delay_ms,
        } => {
            let delay = delay_ms.unwrap_or(0).min(DELAY_MS_ACCEPTED_MAX);
            let due = core.now_ms().saturating_add(delay);
            settle(
                core,
                sc,
                to,
                (namespace, stream, group),
                ids,
                Some(due),
                refusal,
            )
        }
        _ => Err(ErrorValue::internal(
            "not an operation on a stream's partitions",
        )),
    };
    if let Err(e) = result {
        core.reply_op(to, 0, Err(e));
    }
}

/// Sends part `i` of gather `id` to `owner`, or does it here.
fn send_part(
    core: &mut Core,
    sc: &mut Scatter,
    id: u64,
    i: usize,
    owner: u32,
    req: PeerRequest,
    refusal: &Option<ErrorValue>,
) {
    if owner != core.shard() {
        core.call(
            owner,
            0,
            req,
            Waiting::StreamPart {
                gather: id,
                part: i,
            },
        );
        return;
    }
    let done = match refusal {
        Some(e) => Done::now(Err(e.clone())),
        None => do_part(core, req),
    };
    if let Some(g) = sc.open.get_mut(&id) {
        g.lsn = g.lsn.max(done.wait_lsn);
    }
    on_part(core, sc, id, i, done.result);
}

/// On the partition's owner: one part of a scattered operation.
pub fn do_part(core: &mut Core, req: PeerRequest) -> Done {
    match req {
        PeerRequest::StreamAppend {
            namespace,
            stream,
            partition,
            records,
            min_id,
        } => append_part(core, &namespace, &stream, partition, records, min_id),
        PeerRequest::StreamDeliver {
            namespace,
            stream,
            group,
            partition,
            consumer,
            count,
        } => super::groups::deliver(
            core, &namespace, &stream, &group, partition, &consumer, count,
        ),
        PeerRequest::StreamSettle {
            namespace,
            stream,
            group,
            partition,
            ids,
            nack_due,
        } => super::groups::settle(core, &namespace, &stream, &group, partition, ids, nack_due),
        _ => Done::now(Err(ErrorValue::internal(
            "not a part of a stream operation",
        ))),
    }
}

#[allow(clippy::too_many_arguments)]
fn append(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    namespace: String,
    stream: String,
    records: Vec<StreamRecordIn>,
    partition: Option<u32>,
    refusal: Option<ErrorValue>,
) -> Result<(), ErrorValue> {
    let parts = split(core, sc, &namespace, &stream, records, partition)?;
    forget_deleted(core, sc);
    let key = (namespace.clone(), stream.clone());
    let min_id = sc.last.get(&key).map(|l| StreamId::new(l.ms, l.seq + 1));
    let n = parts.iter().map(|(_, slots, _)| slots.len()).sum();
    let id = sc.open(Gather {
        to,
        what: Gathered::Ids {
            stream: key,
            ids: vec![StreamId::ZERO; n],
            slots: parts.iter().map(|(_, slots, _)| slots.clone()).collect(),
        },
        remaining: parts.len(),
        error: None,
        lsn: 0,
    });
    // Streams this shard appends to wake its parked group reads of them.
    wake_parked(sc, &namespace, &stream, core.wall_ms());
    for (i, (p, _, records)) in parts.into_iter().enumerate() {
        let owner = owner_of(&core.partitioning(), &namespace, &stream, p);
        let req = PeerRequest::StreamAppend {
            namespace: namespace.clone(),
            stream: stream.clone(),
            partition: p,
            records,
            min_id,
        };
        send_part(core, sc, id, i, owner, req, &refusal);
    }
    Ok(())
}

/// Drops the turns and last ids of streams deleted since, once they could outnumber the
/// streams that exist: the two maps stay bounded through any create/delete churn.
fn forget_deleted(core: &Core, sc: &mut Scatter) {
    if sc.turn.len().max(sc.last.len()) <= flo_protocol::STREAMS_MAX {
        return;
    }
    let streams = &core.state().streams;
    sc.turn
        .retain(|(ns, name), _| streams.def(ns, name).is_some());
    sc.last
        .retain(|(ns, name), _| streams.def(ns, name).is_some());
}

/// The records by partition: (partition, their positions in the request, the records).
type Parts = Vec<(u32, Vec<usize>, Vec<StreamRecordIn>)>;

fn split(
    core: &Core,
    sc: &mut Scatter,
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
        return Err(no_partition(stream, p, partitions));
    }
    let key = (namespace.to_string(), stream.to_string());
    let unkeyed = partition.unwrap_or_else(|| sc.turn(&key) % partitions);
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

fn no_partition(stream: &str, p: u32, partitions: u32) -> ErrorValue {
    ErrorValue::bad_request(format!(
        "stream {stream:?} has partitions 0 to {}; there is no partition {p}",
        partitions - 1
    ))
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
        return Done::now(Err(no_partition(stream, partition, def.partitions)));
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

fn group_read(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    spec: GroupReadSpec,
    deadline_ms: u64,
    poll_ms: u64,
    refusal: Option<ErrorValue>,
) -> Result<(), ErrorValue> {
    let (ns, stream) = (spec.namespace.clone(), spec.stream.clone());
    let (def, _) = core.state().streams.group(&ns, &stream, &spec.group)?;
    flo_protocol::check_consumer_name(&spec.consumer)?;
    let partitions = def.partitions;
    let count = match spec.count.unwrap_or(STREAM_READ_COUNT_DEFAULT) {
        0 => return Err(ErrorValue::bad_request("a read's count must be above 0")),
        n if n > STREAM_READ_COUNT_MAX => {
            return Err(ErrorValue::bad_request(format!(
                "a read returns at most {STREAM_READ_COUNT_MAX} records, not {n}"
            )));
        }
        n => n,
    };
    // The count shared over the partitions, the remainder to the next in turn.
    let first = sc.turn(&(ns, stream)) % partitions;
    let order: Vec<u32> = (0..partitions).map(|i| (first + i) % partitions).collect();
    let round = Round {
        records: Vec::new(),
        lsn: 0,
        deadline_ms,
        poll_ms,
        round: 0,
    };
    deliver_round(core, sc, to, spec, &order, count, round, &refusal);
    Ok(())
}

/// What a group read carries from one round to the next.
struct Round {
    records: Vec<StreamRecord>,
    /// The LSN the records of earlier rounds wait for.
    lsn: u64,
    deadline_ms: u64,
    poll_ms: u64,
    round: u32,
}

/// Asks `partitions` (in this order) for `count` records between them.
#[allow(clippy::too_many_arguments)]
fn deliver_round(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    spec: GroupReadSpec,
    partitions: &[u32],
    count: u32,
    round: Round,
    refusal: &Option<ErrorValue>,
) {
    let n = partitions.len() as u32;
    let shares: Vec<(u32, u32)> = partitions
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, count / n + u32::from((i as u32) < count % n)))
        .filter(|(_, share)| *share > 0)
        .collect();
    let (ns, stream) = (spec.namespace.clone(), spec.stream.clone());
    let id = sc.open(Gather {
        to,
        what: Gathered::Records {
            spec: spec.clone(),
            records: round.records,
            deadline_ms: round.deadline_ms,
            poll_ms: round.poll_ms,
            shares: shares.clone(),
            filled: Vec::new(),
            round: round.round,
            refusal: refusal.clone(),
        },
        remaining: shares.len(),
        error: None,
        lsn: round.lsn,
    });
    for (i, (p, share)) in shares.into_iter().enumerate() {
        let owner = owner_of(&core.partitioning(), &ns, &stream, p);
        let req = PeerRequest::StreamDeliver {
            namespace: ns.clone(),
            stream: stream.clone(),
            group: spec.group.clone(),
            partition: p,
            consumer: spec.consumer.clone(),
            count: share,
        };
        send_part(core, sc, id, i, owner, req, refusal);
    }
}

/// Asks every shard for its part of a read (`reads::read_part`); the answer is the merge,
/// or, when it is empty, the read parks until its deadline.
fn blocking_read(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    spec: StreamReadSpec,
    deadline_ms: u64,
    poll_ms: u64,
) {
    let shards = core.partitioning().shards;
    let id = sc.open(Gather {
        to,
        what: Gathered::Read {
            spec: spec.clone(),
            parts: Vec::new(),
            deadline_ms,
            poll_ms,
        },
        remaining: shards as usize,
        error: None,
        lsn: 0,
    });
    let mut part = spec;
    part.block_ms = None;
    for (i, shard) in (0..shards).enumerate() {
        if shard == core.shard() {
            let done = super::reads::read_part(core, &part);
            if let Some(g) = sc.open.get_mut(&id) {
                g.lsn = g.lsn.max(done.wait_lsn);
            }
            on_part(core, sc, id, i, done.result);
        } else {
            let req = PeerRequest::Client(Op::StreamRead(part.clone()));
            core.call(
                shard,
                0,
                req,
                Waiting::StreamPart {
                    gather: id,
                    part: i,
                },
            );
        }
    }
}

type GroupRef = (String, String, String);

fn settle(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    (ns, stream, group): GroupRef,
    ids: Vec<StreamId>,
    nack_due: Option<u64>,
    refusal: Option<ErrorValue>,
) -> Result<(), ErrorValue> {
    let (def, _) = core.state().streams.group(&ns, &stream, &group)?;
    let partitions = def.partitions;
    if ids.is_empty() || ids.len() > GROUP_ACK_IDS_MAX {
        return Err(ErrorValue::bad_request(format!(
            "an ack or nack names 1 to {GROUP_ACK_IDS_MAX} ids, not {}",
            ids.len()
        )));
    }
    let mut by_partition: BTreeMap<u32, Vec<StreamId>> = BTreeMap::new();
    for id in ids {
        by_partition
            .entry(id.partition(partitions))
            .or_default()
            .push(id);
    }
    let id = sc.open(Gather {
        to,
        what: Gathered::Count(0),
        remaining: by_partition.len(),
        error: None,
        lsn: 0,
    });
    for (i, (p, ids)) in by_partition.into_iter().enumerate() {
        let owner = owner_of(&core.partitioning(), &ns, &stream, p);
        let req = PeerRequest::StreamSettle {
            namespace: ns.clone(),
            stream: stream.clone(),
            group: group.clone(),
            partition: p,
            ids,
            nack_due,
        };
        send_part(core, sc, id, i, owner, req, &refusal);
    }
    Ok(())
}

/// Part `part` of gather `gather` answered; the client is answered once all have.
pub fn on_part(core: &mut Core, sc: &mut Scatter, gather: u64, part: usize, result: ReplyResult) {
    let Some(g) = sc.open.get_mut(&gather) else {
        return;
    };
    g.remaining = g.remaining.saturating_sub(1);
    match (result, &mut g.what) {
        (
            Ok(Reply::StreamAppended { ids }),
            Gathered::Ids {
                ids: all, slots, ..
            },
        ) if ids.len() == slots[part].len() => {
            for (slot, id) in slots[part].iter().zip(ids) {
                all[*slot] = id;
            }
        }
        (
            Ok(Reply::StreamRecords { records, .. }),
            Gathered::Records {
                records: all,
                shares,
                filled,
                ..
            },
        ) => {
            if records.len() as u32 >= shares[part].1 {
                filled.push(shares[part].0);
            }
            all.extend(records);
        }
        (Ok(Reply::GroupAcked { count }), Gathered::Count(all)) => *all += count,
        (Ok(reply @ Reply::StreamRecords { .. }), Gathered::Read { parts, .. }) => {
            parts.push(reply)
        }
        (Ok(other), _) => {
            let e = ErrorValue::internal(format!("a partition answered {other:?}"));
            g.error.get_or_insert(e);
        }
        (Err(e), _) => {
            g.error.get_or_insert(e);
        }
    }
    if g.remaining > 0 {
        return;
    }
    let Some(g) = sc.open.remove(&gather) else {
        return;
    };
    let result = match (g.error, g.what) {
        (Some(e), Gathered::Ids { slots, .. }) if slots.len() > 1 => Err(ErrorValue::new(
            e.code,
            format!(
                "{} (the batch went to {} partitions; the records of the others may be \
                 appended)",
                e.message,
                slots.len()
            ),
        )),
        (Some(e), _) => Err(e),
        (None, Gathered::Ids { stream, ids, .. }) => {
            if let Some(max) = ids.iter().max() {
                let last = sc.last.entry(stream).or_default();
                *last = (*last).max(*max);
            }
            Ok(Reply::StreamAppended { ids })
        }
        (
            None,
            Gathered::Records {
                spec,
                mut records,
                deadline_ms,
                poll_ms,
                filled,
                round,
                refusal,
                ..
            },
        ) => {
            let count = spec.count.unwrap_or(STREAM_READ_COUNT_DEFAULT);
            let missing = count.saturating_sub(records.len() as u32);
            if missing > 0 && !filled.is_empty() && round + 1 < GROUP_READ_ROUNDS_MAX {
                let next = Round {
                    records,
                    lsn: g.lsn,
                    deadline_ms,
                    poll_ms,
                    round: round + 1,
                };
                deliver_round(core, sc, g.to, spec, &filled, missing, next, &refusal);
                return;
            }
            if records.is_empty() && core.wall_ms() < deadline_ms {
                park(core, sc, g.to, Again::Group(spec), deadline_ms, poll_ms);
                return;
            }
            records.sort_by_key(|r| r.id);
            Ok(Reply::StreamRecords {
                records,
                next_after: None,
            })
        }
        (None, Gathered::Count(count)) => Ok(Reply::GroupAcked { count }),
        (
            None,
            Gathered::Read {
                spec,
                parts,
                deadline_ms,
                poll_ms,
            },
        ) => match super::reads::merge_reads(&spec, parts) {
            Ok(Reply::StreamRecords { records, .. })
                if records.is_empty() && core.wall_ms() < deadline_ms =>
            {
                park(core, sc, g.to, Again::Read(spec), deadline_ms, poll_ms);
                return;
            }
            result => result,
        },
    };
    core.reply_op(g.to, g.lsn, result);
}

fn park(
    core: &mut Core,
    sc: &mut Scatter,
    to: ReplyTo,
    spec: Again,
    deadline_ms: u64,
    poll_ms: u64,
) {
    if sc.parked.len() >= GROUP_READS_PARKED_MAX {
        let e = ErrorValue::new(
            flo_protocol::ErrorCode::Overloaded,
            format!("{GROUP_READS_PARKED_MAX} group reads are waiting on this shard"),
        );
        core.reply_op(to, 0, Err(e));
        return;
    }
    let namespace = spec.stream().0;
    if sc.shares.held(namespace) >= GROUP_READS_PARKED_PER_NAMESPACE_MAX {
        let e = ErrorValue::new(
            flo_protocol::ErrorCode::Overloaded,
            format!(
                "namespace {namespace:?} has {GROUP_READS_PARKED_PER_NAMESPACE_MAX} blocking \
                 reads waiting on this shard already (its share of the shard's \
                 {GROUP_READS_PARKED_MAX}); retry later"
            ),
        );
        core.reply_op(to, 0, Err(e));
        return;
    }
    sc.shares.take(namespace);
    sc.next_id += 1;
    let at = (core.wall_ms() + poll_ms).min(deadline_ms);
    sc.parked.insert(
        (at, sc.next_id),
        Parked {
            to,
            spec,
            deadline_ms,
            poll_ms: (poll_ms * 2).min(GROUP_POLL_MS_MAX),
        },
    );
}

/// A parked read of this stream asks again at once.
fn wake_parked(sc: &mut Scatter, namespace: &str, stream: &str, now_ms: u64) {
    if sc.parked.is_empty() {
        return;
    }
    let due: Vec<(u64, u64)> = sc
        .parked
        .iter()
        .filter(|(_, p)| p.spec.stream() == (namespace, stream))
        .map(|(k, _)| *k)
        .filter(|(at, _)| *at > now_ms)
        .collect();
    for key in due {
        if let Some(mut p) = sc.parked.remove(&key) {
            p.poll_ms = GROUP_POLL_MS_MIN;
            sc.parked.insert((now_ms, key.1), p);
        }
    }
}

/// Parked reads whose time to ask again has come ask again; those past their deadline get
/// an empty answer.
pub fn poll_parked(core: &mut Core, sc: &mut Scatter, refusal: Option<ErrorValue>) {
    let now = core.wall_ms();
    while let Some(entry) = sc.parked.first_entry() {
        if entry.key().0 > now {
            return;
        }
        let p = entry.remove();
        sc.shares.give_back(p.spec.stream().0);
        if now >= p.deadline_ms {
            let empty = Reply::StreamRecords {
                records: Vec::new(),
                next_after: None,
            };
            core.reply_op(p.to, 0, Ok(empty));
            continue;
        }
        let to = p.to;
        match p.spec {
            Again::Group(spec) => {
                let (deadline, poll) = (p.deadline_ms, p.poll_ms);
                if let Err(e) = group_read(core, sc, to, spec, deadline, poll, refusal.clone()) {
                    core.reply_op(to, 0, Err(e));
                }
            }
            Again::Read(spec) => blocking_read(core, sc, to, spec, p.deadline_ms, p.poll_ms),
        }
    }
}

/// A connection closed: its parked reads go.
pub fn conn_closed(sc: &mut Scatter, conn: ConnId) {
    let shares = &mut sc.shares;
    sc.parked.retain(|_, p| {
        let gone = matches!(p.to, ReplyTo::Client(c) if c.conn == conn);
        if gone {
            shares.give_back(p.spec.stream().0);
        }
        !gone
    });
}
