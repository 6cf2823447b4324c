//! Calls to other shards waiting for their answer: what each answer continues.

use super::io::ReplyTo;
use crate::ids::WorkerKey;
use crate::tables::HashMap;

/// What a reply from another shard continues.
#[derive(Debug)]
pub enum Waiting {
    /// A client operation forwarded to its owner: pass the answer on.
    Relay(ReplyTo),
    /// A forwarded await: pass the answer on, or hand its tasks back if nobody listens.
    AwaitRelay { to: ReplyTo, worker: WorkerKey },
    /// A blocking read forwarded to the key's owner: pass the answer on.
    KvWaitRelay(ReplyTo),
    /// A wait for a run forwarded to its owner: pass the answer on.
    WatchRelay(ReplyTo),
    /// A part of fan-out `id`.
    FanOut(u64),
    /// A shard's acknowledgement of definition change `id`.
    Definition(u64),
    /// A shard's first answer to a worker's want.
    WantShare {
        worker: WorkerKey,
        want_id: u64,
        from: u32,
    },
    /// A guest's read of a key on another shard.
    GuestRead { exec: u64, read: u64 },
    /// Delivery of guest KV writes of the completion at `origin_lsn`.
    Forward { origin_lsn: u64 },
    /// Part `part` of a stream operation split over partitions (`streams::scatter`).
    StreamPart { gather: u64, part: usize },
    /// The start of a run a stream trigger asked for.
    TriggerStart(Box<TriggerStart>),
    /// Attempt `attempt` of delivery `id`: a run event appended to its `eventStream`.
    SinkAppend { id: u64, attempt: u32 },
    /// Nothing to continue (a start-up sync, a clock move).
    Nothing,
}

/// What a triggered run's start continues: the records of a trigger's group to ack (or nack)
/// once the run's owner answered.
#[derive(Debug)]
pub struct TriggerStart {
    pub namespace: String,
    pub stream: String,
    pub partition: u32,
    pub group: String,
    pub ids: Vec<flo_protocol::StreamId>,
}

/// Calls made and not answered: by tag, the continuation, the shard asked and when (wall
/// clock).
pub struct Calls {
    open: HashMap<u64, (Waiting, u32, u64)>,
    next_tag: u64,
}

impl Default for Calls {
    fn default() -> Self {
        Calls {
            open: HashMap::default(),
            // Tag 0 means "no answer wanted".
            next_tag: 1,
        }
    }
}

impl Calls {
    /// A new call to `shard` at `wall_ms`: its tag.
    pub fn open(&mut self, shard: u32, wall_ms: u64, waiting: Waiting) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.open.insert(tag, (waiting, shard, wall_ms));
        tag
    }

    /// The continuation of call `tag` (once).
    pub fn take(&mut self, tag: u64) -> Option<Waiting> {
        self.open.remove(&tag).map(|(waiting, _, _)| waiting)
    }

    /// Calls a client waits on (a relayed operation, a part of a fan-out) made at or
    /// before `sent_by_ms` and still unanswered, as (tag, shard asked). Other calls wait as
    /// long as they must: a blocking read or an await has its own time limit, and internal
    /// deliveries must not be given up.
    pub fn overdue_client_calls(&self, sent_by_ms: u64) -> Vec<(u64, u32)> {
        self.open
            .iter()
            .filter(|(_, (w, _, at))| {
                *at <= sent_by_ms
                    && matches!(
                        w,
                        Waiting::Relay(_)
                            | Waiting::WatchRelay(_)
                            | Waiting::FanOut(_)
                            | Waiting::StreamPart { .. }
                            | Waiting::TriggerStart(_)
                    )
            })
            .map(|(&tag, &(_, shard, _))| (tag, shard))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }
}
