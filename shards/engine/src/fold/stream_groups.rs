//! Consumer groups of a stream: their settings (on every shard, with the stream's) and,
//! per partition held here, where each group stands — the cursor of first deliveries and
//! the records delivered and not acknowledged (consumer, deliveries, when they are due
//! again). Every decision is in a record: delivery (`StreamDelivered`), ack, nack and
//! dead-lettering; replay follows them and never decides again.

use flo_protocol::{GroupMode, GroupStart, PendingRecord, StreamId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A group's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDef {
    pub mode: GroupMode,
    pub start: GroupStart,
    pub max_deliveries: u32,
    pub message_timeout_ms: u64,
    pub created_at_ms: u64,
}

/// A record delivered to a consumer and not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub consumer: Box<str>,
    pub deliveries: u32,
    pub delivered_at_ms: u64,
    /// When it may be delivered again: its message timeout, or the delay of a nack.
    pub due_at_ms: u64,
}

/// Where one group stands in one partition.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct GroupState {
    /// The last record delivered for the first time (None: none yet; the group reads on
    /// from the oldest retained record).
    pub cursor: Option<StreamId>,
    pub pending: BTreeMap<StreamId, Pending>,
    /// (due, id) of every pending record, soonest first (derived: `relink`).
    #[serde(skip)]
    due: BTreeSet<(u64, StreamId)>,
    /// Consumers that were delivered records, and when last.
    pub consumers: BTreeMap<Box<str>, u64>,
    /// The consumer the last delivery went to (who an exclusive group serves).
    pub active: Option<Box<str>>,
    /// A key_shared group: each key's consumer (by the key's hash).
    #[serde(default)]
    pub key_owners: BTreeMap<u64, Box<str>>,
    /// A key_shared group: records after the cursor already delivered and acknowledged
    /// (the cursor moves over them once the records before them are delivered too).
    #[serde(default)]
    pub done_ahead: BTreeSet<StreamId>,
    pub delivered: u64,
    pub acked: u64,
    pub dead_lettered: u64,
}

/// The id before `id`: a group starting at `id` has read up to it.
pub fn before_id(id: StreamId) -> Option<StreamId> {
    match (id.ms, id.seq) {
        (0, 0) => None,
        (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
        (ms, seq) => Some(StreamId::new(ms, seq - 1)),
    }
}

impl GroupState {
    /// A new group's state in a partition whose last id is `last`.
    pub fn starting(start: GroupStart, last: Option<StreamId>) -> GroupState {
        let cursor = match start {
            GroupStart::Start => None,
            GroupStart::End => last,
            GroupStart::At(id) => before_id(id),
        };
        GroupState {
            cursor,
            ..Default::default()
        }
    }

    pub fn relink(&mut self) {
        self.due = self
            .pending
            .iter()
            .map(|(id, p)| (p.due_at_ms, *id))
            .collect();
    }

    /// Pending records due again at `now_ms`, soonest first.
    pub fn due(&self, now_ms: u64) -> impl Iterator<Item = StreamId> + '_ {
        self.due
            .iter()
            .take_while(move |(at, _)| *at <= now_ms)
            .map(|(_, id)| *id)
    }

    /// Whether `consumer` still holds the partition for an exclusive group at `now_ms`: it
    /// has a record not yet due again, or it was delivered one within the timeout.
    pub fn holds(&self, consumer: &str, timeout_ms: u64, now_ms: u64) -> bool {
        let recent = self
            .consumers
            .get(consumer)
            .is_some_and(|&at| at.saturating_add(timeout_ms) > now_ms);
        recent
            || self
                .pending
                .values()
                .any(|p| &*p.consumer == consumer && p.due_at_ms > now_ms)
    }

    /// Delivers `id` to `consumer`. `in_order`: the cursor moves to it (shared and
    /// exclusive groups deliver in id order); else the record is delivered ahead of the
    /// cursor (key_shared), which `advance` moves over delivered records.
    pub fn deliver(
        &mut self,
        id: StreamId,
        consumer: &str,
        at_ms: u64,
        timeout_ms: u64,
        in_order: bool,
    ) {
        if in_order && self.cursor.is_none_or(|c| id > c) {
            self.cursor = Some(id);
        }
        let due_at_ms = at_ms.saturating_add(timeout_ms);
        let deliveries = match self.pending.get(&id) {
            Some(p) => {
                self.due.remove(&(p.due_at_ms, id));
                p.deliveries + 1
            }
            None => 1,
        };
        self.pending.insert(
            id,
            Pending {
                consumer: consumer.into(),
                deliveries,
                delivered_at_ms: at_ms,
                due_at_ms,
            },
        );
        self.due.insert((due_at_ms, id));
        self.delivered += 1;
    }

    /// Notes a delivery to `consumer` at `at_ms`; forgets the longest idle consumer without
    /// pending records beyond `max` consumers.
    pub fn seen(&mut self, consumer: &str, at_ms: u64, max: usize) {
        self.consumers.insert(consumer.into(), at_ms);
        self.active = Some(consumer.into());
        if self.consumers.len() <= max {
            return;
        }
        let busy: BTreeSet<&str> = self.pending.values().map(|p| &*p.consumer).collect();
        let idle = self
            .consumers
            .iter()
            .filter(|(c, _)| !busy.contains(&***c))
            .min_by_key(|(c, at)| (**at, (*c).clone()))
            .map(|(c, _)| c.clone());
        if let Some(c) = idle {
            self.consumers.remove(&c);
        }
    }

    /// Removes a pending record; whether it was pending.
    pub fn settle(&mut self, id: StreamId) -> bool {
        match self.pending.remove(&id) {
            Some(p) => {
                self.due.remove(&(p.due_at_ms, id));
                if self.cursor.is_some_and(|c| id > c) {
                    self.done_ahead.insert(id);
                }
                true
            }
            None => false,
        }
    }

    /// A record removed from the partition (retention, a trim): it can be neither pending
    /// nor waited for.
    pub fn forget(&mut self, id: StreamId) {
        if let Some(p) = self.pending.remove(&id) {
            self.due.remove(&(p.due_at_ms, id));
        }
        self.done_ahead.remove(&id);
    }

    /// Whether the record `id` after the cursor was delivered already (pending or done).
    pub fn delivered_ahead(&self, id: StreamId) -> bool {
        self.pending.contains_key(&id) || self.done_ahead.contains(&id)
    }

    /// A nacked record: due again at `due_at_ms`.
    pub fn retry_at(&mut self, id: StreamId, due_at_ms: u64) {
        if let Some(p) = self.pending.get_mut(&id) {
            self.due.remove(&(p.due_at_ms, id));
            p.due_at_ms = due_at_ms;
            self.due.insert((due_at_ms, id));
        }
    }

    pub fn pending_wire(&self) -> impl Iterator<Item = PendingRecord> + '_ {
        self.pending.iter().map(|(id, p)| PendingRecord {
            id: *id,
            consumer: p.consumer.to_string(),
            deliveries: p.deliveries,
            delivered_at_ms: p.delivered_at_ms,
        })
    }
}

/// The hash a key_shared group keeps a key's consumer by.
pub fn key_hash(key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes())
}
