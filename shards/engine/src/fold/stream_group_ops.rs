//! Consumer groups' operations on the streams store: planning deliveries, acks, nacks
//! and dead-lettering against a partition's group state (`stream_groups`), and applying
//! their records.

use crate::fold::stream_groups::{GroupDef, GroupState, key_hash};

use crate::fold::record::{Record, StreamEntry};
use crate::fold::streams::{Partition, StreamDef, Streams, next_ids};
use flo_protocol::StreamId;
use flo_protocol::{
    DEAD_LETTER_SUFFIX, ErrorCode, ErrorValue, GROUP_CONSUMERS_MAX, GROUP_MAX_DELIVERIES_DEFAULT,
    GROUP_MESSAGE_TIMEOUT_MS_DEFAULT, GROUP_PENDING_MAX, GROUPS_PER_STREAM_MAX, GroupConfig,
    GroupInfo, GroupMode, check_consumer_name, check_group_name,
};
use std::collections::{BTreeMap, BTreeSet};

/// A group in one partition, as a record names it.
#[derive(Debug, Clone, Copy)]
pub struct GroupAt<'a> {
    pub namespace: &'a str,
    pub stream: &'a str,
    pub partition: u32,
    pub group: &'a str,
}

/// Records a key_shared read looks at past the cursor, at most.
const KEY_SHARED_SCAN_MAX: usize = 4096;

/// Records dead-lettered by one read, at most (more go with the next).
const DEAD_LETTERS_PER_READ_MAX: usize = 1024;

/// The name of `stream`'s dead-letter stream.
pub fn dead_letter_stream(stream: &str) -> String {
    format!("{stream}{DEAD_LETTER_SUFFIX}")
}

impl Streams {
    /// A stream's group, or why there is none.
    pub fn group(
        &self,
        namespace: &str,
        stream: &str,
        group: &str,
    ) -> Result<(&StreamDef, &GroupDef), ErrorValue> {
        let def = self.existing(namespace, stream)?;
        check_group_name(group)?;
        let g = def.groups.get(group).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "stream {stream:?} has no consumer group {group:?} (flo stream group create)"
            ))
        })?;
        Ok((def, g))
    }

    /// A group's creation: the record, or None when it exists with these settings.
    pub fn plan_group_create(
        &self,
        namespace: &str,
        stream: &str,
        group: &str,
        config: &GroupConfig,
        now_ms: u64,
    ) -> Result<Option<Record>, ErrorValue> {
        let def = self.existing(namespace, stream)?;
        check_group_name(group)?;
        if stream.ends_with(DEAD_LETTER_SUFFIX) {
            return Err(ErrorValue::bad_request(
                "a dead-letter stream has no consumer groups: read it with flo stream read",
            ));
        }
        let max_deliveries = config
            .max_deliveries
            .unwrap_or(GROUP_MAX_DELIVERIES_DEFAULT);
        let message_timeout_ms = config
            .message_timeout_ms
            .unwrap_or(GROUP_MESSAGE_TIMEOUT_MS_DEFAULT);
        if max_deliveries == 0 || message_timeout_ms == 0 {
            return Err(ErrorValue::bad_request(
                "a group's max deliveries and message timeout must be above 0",
            ));
        }
        if let Some(g) = def.groups.get(group) {
            if (g.mode, g.start, g.max_deliveries, g.message_timeout_ms)
                == (
                    config.mode,
                    config.start,
                    max_deliveries,
                    message_timeout_ms,
                )
            {
                return Ok(None);
            }
            return Err(ErrorValue::conflict(format!(
                "group {group:?} of stream {stream:?} exists with other settings (mode {}, max \
                 deliveries {}, message timeout {} ms); delete it first to change them",
                g.mode.as_str(),
                g.max_deliveries,
                g.message_timeout_ms
            )));
        }
        if def.groups.len() >= GROUPS_PER_STREAM_MAX {
            return Err(ErrorValue::new(
                ErrorCode::Overloaded,
                format!(
                    "stream {stream:?} has {GROUPS_PER_STREAM_MAX} consumer groups, the most \
                     it takes; delete one first"
                ),
            ));
        }
        Ok(Some(Record::StreamGroupCreated {
            namespace: namespace.to_string(),
            stream: stream.to_string(),
            group: group.to_string(),
            def: GroupDef {
                mode: config.mode,
                start: config.start,
                max_deliveries,
                message_timeout_ms,
                created_at_ms: now_ms,
            },
        }))
    }

    pub fn plan_group_delete(
        &self,
        namespace: &str,
        stream: &str,
        group: &str,
    ) -> Result<Record, ErrorValue> {
        self.group(namespace, stream, group)?;
        Ok(Record::StreamGroupDeleted {
            namespace: namespace.to_string(),
            stream: stream.to_string(),
            group: group.to_string(),
        })
    }

    /// What a read of `consumer` takes from partition `at.partition` at `now_ms`, at most
    /// `count` records: pending records due again (those delivered too often go to the
    /// dead-letter stream instead), then records not delivered yet. `whole` (a stream
    /// trigger): records due again are redelivered as the delivery they came in (those
    /// delivered at the same moment), alone, so that a batch comes back whole.
    pub fn plan_delivery(
        &self,
        at: GroupAt,
        consumer: &str,
        count: usize,
        now_ms: u64,
        whole: bool,
    ) -> Result<Vec<Record>, ErrorValue> {
        let GroupAt {
            namespace,
            stream,
            partition,
            group,
        } = at;
        let (def, gdef) = self.group(namespace, stream, group)?;
        check_consumer_name(consumer)?;
        let Some(part) = self.partition(namespace, stream, partition) else {
            return Ok(Vec::new());
        };
        let Some(g) = part.groups.get(group) else {
            return Ok(Vec::new());
        };
        if g.pending.len() >= GROUP_PENDING_MAX {
            return Err(ErrorValue::new(
                ErrorCode::Overloaded,
                format!(
                    "group {group:?} has {GROUP_PENDING_MAX} records delivered and not \
                     acknowledged in partition {partition} of stream {stream:?}: ack them first"
                ),
            ));
        }
        if gdef.mode == GroupMode::Exclusive
            && let Some(active) = &g.active
            && **active != *consumer
            && g.holds(active, gdef.message_timeout_ms, now_ms)
        {
            return Ok(Vec::new());
        }
        // key_shared: a record whose key another live consumer holds is not for this one.
        let key_shared = gdef.mode == GroupMode::KeyShared;
        let for_me = |id: StreamId| {
            if !key_shared {
                return true;
            }
            let Some(key) = part.entry(id).and_then(|e| e.key.as_deref()) else {
                return true;
            };
            match g.key_owners.get(&key_hash(key)) {
                Some(owner) => {
                    **owner == *consumer || !g.holds(owner, gdef.message_timeout_ms, now_ms)
                }
                None => true,
            }
        };
        let mut again = Vec::new();
        let mut dead = Vec::new();
        let mut delivery = None;
        for id in g.due(now_ms) {
            if again.len() >= count || dead.len() >= DEAD_LETTERS_PER_READ_MAX {
                break;
            }
            let Some(p) = g.pending.get(&id) else {
                continue;
            };
            if whole && *delivery.get_or_insert(p.delivered_at_ms) != p.delivered_at_ms {
                continue;
            }
            if !for_me(id) {
                continue;
            }
            if p.deliveries >= gdef.max_deliveries {
                dead.push(id);
            } else {
                again.push(id);
            }
        }
        let new = if whole && delivery.is_some() {
            Vec::new()
        } else if key_shared {
            // Records after the cursor not delivered yet, of keys this consumer may take
            // (a bounded look ahead).
            let mut taken: Vec<StreamId> = Vec::new();
            let mut claimed: BTreeMap<u64, ()> = BTreeMap::new();
            for e in part.read(g.cursor, KEY_SHARED_SCAN_MAX) {
                if taken.len() + again.len() >= count {
                    break;
                }
                if g.delivered_ahead(e.id) {
                    continue;
                }
                // A key met undeliverable stays so for the rest of the scan (order per key).
                let h = e.key.as_deref().map(key_hash);
                if h.is_some_and(|h| claimed.contains_key(&h)) {
                    continue;
                }
                if for_me(e.id) {
                    taken.push(e.id);
                } else if let Some(h) = h {
                    claimed.insert(h, ());
                }
            }
            taken
        } else {
            part.read(g.cursor, count - again.len())
                .map(|e| e.id)
                .collect::<Vec<_>>()
        };
        let mut records = Vec::new();
        if !dead.is_empty() {
            let dlq = dead_letter_stream(stream);
            let last = self
                .partition(namespace, &dlq, partition)
                .and_then(|p| p.last_id);
            let dlq_ids = next_ids(last, None, now_ms, partition, def.partitions, dead.len());
            records.push(Record::StreamDeadLettered {
                namespace: namespace.to_string(),
                stream: stream.to_string(),
                partition,
                group: group.to_string(),
                ids: dead,
                dlq_ids,
            });
        }
        again.extend(new);
        if !again.is_empty() {
            records.push(Record::StreamDelivered {
                namespace: namespace.to_string(),
                stream: stream.to_string(),
                partition,
                group: group.to_string(),
                consumer: consumer.to_string(),
                ids: again,
                at_ms: now_ms,
            });
        }
        Ok(records)
    }

    /// An ack (`nack_due` None) or a nack of `ids` in one partition: the record, if any of
    /// them is pending, and how many are.
    pub fn plan_settle(
        &self,
        namespace: &str,
        stream: &str,
        group: &str,
        partition: u32,
        ids: Vec<StreamId>,
        nack_due: Option<u64>,
    ) -> Result<(Option<Record>, u64), ErrorValue> {
        self.group(namespace, stream, group)?;
        let pending: Vec<StreamId> = self
            .partition(namespace, stream, partition)
            .and_then(|p| p.groups.get(group))
            .map(|g| {
                ids.into_iter()
                    .filter(|id| g.pending.contains_key(id))
                    .collect()
            })
            .unwrap_or_default();
        let n = pending.len() as u64;
        if pending.is_empty() {
            return Ok((None, 0));
        }
        let (namespace, stream, group) = (namespace.into(), stream.into(), group.into());
        let record = match nack_due {
            None => Record::StreamAcked {
                namespace,
                stream,
                partition,
                group,
                ids: pending,
            },
            Some(due_at_ms) => Record::StreamNacked {
                namespace,
                stream,
                partition,
                group,
                ids: pending,
                due_at_ms,
            },
        };
        Ok((Some(record), n))
    }

    /// Where a group stands in the partitions held here.
    pub fn local_group_info(
        &self,
        namespace: &str,
        stream: &str,
        group: &str,
        def: &GroupDef,
    ) -> GroupInfo {
        let mut info = GroupInfo {
            stream: stream.to_string(),
            group: group.to_string(),
            mode: def.mode,
            max_deliveries: def.max_deliveries,
            message_timeout_ms: def.message_timeout_ms,
            created_at_ms: def.created_at_ms,
            pending: 0,
            lag: 0,
            delivered: 0,
            acked: 0,
            dead_lettered: 0,
            consumers: Vec::new(),
        };
        let mut consumers = BTreeSet::new();
        for (_, part) in self.local_partitions(namespace, stream) {
            let Some(g) = part.groups.get(group) else {
                continue;
            };
            info.pending += g.pending.len() as u64;
            info.lag += part.count_after(g.cursor);
            info.delivered += g.delivered;
            info.acked += g.acked;
            info.dead_lettered += g.dead_lettered;
            consumers.extend(g.consumers.keys().map(|c| c.to_string()));
        }
        info.consumers = consumers.into_iter().collect();
        info
    }

    pub fn apply_group_created(
        &mut self,
        namespace: &str,
        stream: &str,
        group: String,
        def: GroupDef,
    ) -> bool {
        let Some(sdef) = self.def_mut(namespace, stream) else {
            return false;
        };
        sdef.groups.insert(group.clone(), def.clone());
        let dlq = StreamDef {
            groups: BTreeMap::new(),
            max_len: None,
            max_bytes: None,
            created_at_ms: def.created_at_ms,
            ..sdef.clone()
        };
        let dlq_key = (namespace.to_string(), dead_letter_stream(stream));
        if self.def(&dlq_key.0, &dlq_key.1).is_none() {
            self.insert_def(dlq_key, dlq);
        }
        for (_, part) in self.local_partitions_mut(namespace, stream) {
            let last = part.last_id;
            part.groups
                .entry(group.clone())
                .or_insert_with(|| GroupState::starting(def.start, last));
        }
        true
    }

    pub fn apply_group_deleted(&mut self, namespace: &str, stream: &str, group: &str) -> bool {
        let Some(sdef) = self.def_mut(namespace, stream) else {
            return false;
        };
        let found = sdef.groups.remove(group).is_some();
        for (_, part) in self.local_partitions_mut(namespace, stream) {
            part.groups.remove(group);
        }
        found
    }

    pub fn apply_delivered(
        &mut self,
        at: GroupAt,
        consumer: &str,
        ids: &[StreamId],
        at_ms: u64,
        lsn: u64,
    ) -> bool {
        let Some((timeout, mode)) = self
            .def(at.namespace, at.stream)
            .and_then(|d| d.groups.get(at.group))
            .map(|g| (g.message_timeout_ms, g.mode))
        else {
            return false;
        };
        let Some(part) = self.partition_mut(at.namespace, at.stream, at.partition) else {
            return false;
        };
        part.lsn = lsn;
        let Partition {
            entries, groups, ..
        } = part;
        let Some(g) = groups.get_mut(at.group) else {
            return false;
        };
        let key_shared = mode == GroupMode::KeyShared;
        for id in ids {
            g.deliver(*id, consumer, at_ms, timeout, !key_shared);
            if key_shared {
                let at = entries.partition_point(|e| e.id < *id);
                if let Some(key) = entries
                    .get(at)
                    .filter(|e| e.id == *id)
                    .and_then(|e| e.key.as_deref())
                {
                    g.key_owners.insert(key_hash(key), consumer.into());
                }
            }
        }
        if key_shared {
            // The cursor moves over the records delivered (or done) ahead of it.
            let mut from = g
                .cursor
                .map_or(0, |c| entries.partition_point(|e| e.id <= c));
            while let Some(e) = entries.get(from) {
                if !g.delivered_ahead(e.id) {
                    break;
                }
                g.done_ahead.remove(&e.id);
                g.cursor = Some(e.id);
                from += 1;
            }
        }
        g.seen(consumer, at_ms, GROUP_CONSUMERS_MAX);
        true
    }

    pub fn apply_settled(
        &mut self,
        at: GroupAt,
        ids: &[StreamId],
        nack_due: Option<u64>,
        lsn: u64,
    ) -> bool {
        let Some(g) = self.group_state(at, lsn) else {
            return false;
        };
        for id in ids {
            match nack_due {
                None => {
                    if g.settle(*id) {
                        g.acked += 1;
                    }
                }
                Some(due) => g.retry_at(*id, due),
            }
        }
        true
    }

    /// Moves records delivered too often to the dead-letter stream (same partition, on
    /// this shard), with headers saying from where.
    pub fn apply_dead_lettered(
        &mut self,
        at: GroupAt,
        ids: &[StreamId],
        dlq_ids: &[StreamId],
        lsn: u64,
    ) -> bool {
        let GroupAt {
            namespace,
            stream,
            partition,
            group,
        } = at;
        let Some(g) = self.group_state(at, lsn) else {
            return false;
        };
        let mut deliveries = Vec::new();
        for id in ids {
            deliveries.push(g.pending.get(id).map_or(0, |p| p.deliveries));
            if g.settle(*id) {
                g.dead_lettered += 1;
            }
        }
        let Some(part) = self.partition(namespace, stream, partition) else {
            return false;
        };
        let moved: Vec<StreamEntry> = ids
            .iter()
            .zip(dlq_ids)
            .zip(deliveries)
            .filter_map(|((id, dlq_id), n)| {
                let e = part.entry(*id)?;
                let mut headers = e.headers.clone();
                headers.insert("flo-group".into(), group.to_string());
                headers.insert("flo-source-id".into(), id.to_string());
                headers.insert("flo-deliveries".into(), n.to_string());
                Some(StreamEntry {
                    id: *dlq_id,
                    key: e.key.clone(),
                    headers,
                    payload: e.payload.clone(),
                })
            })
            .collect();
        let dlq = self.partition_entry((namespace.into(), dead_letter_stream(stream), partition));
        push_entries(dlq, moved, lsn);
        true
    }

    fn group_state(&mut self, at: GroupAt, lsn: u64) -> Option<&mut GroupState> {
        let part = self.partition_mut(at.namespace, at.stream, at.partition)?;
        part.lsn = lsn;
        part.groups.get_mut(at.group)
    }
}

/// Appends entries to a partition (no bounds: a dead-letter stream keeps what it gets).
fn push_entries(part: &mut Partition, entries: Vec<StreamEntry>, lsn: u64) {
    for e in entries {
        part.last_id = Some(part.last_id.map_or(e.id, |l| l.max(e.id)));
        part.bytes += e.payload.len() as u64;
        part.appended += 1;
        part.entries.push_back(e);
    }
    part.lsn = lsn;
}
