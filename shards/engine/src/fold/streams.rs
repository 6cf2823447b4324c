//! Streams: their definitions (on every shard, like actions and workflows) and the records
//! of the partitions this shard owns. A record is held here, in memory and in snapshots,
//! until its stream's retention removes it: the log's segments are not kept for streams.
//! `plan_*` validate and build records; `apply_*` change state.

use crate::fold::record::{Record, StreamEntry};
use crate::fold::stream_groups::{GroupDef, GroupState};
use crate::hash::{Partitioning, stable_hash};
use crate::tables::HashMap;
use flo_protocol::{
    DEAD_LETTER_SUFFIX, ErrorValue, STREAM_PARTITIONS_MAX, StreamConfig, StreamId, StreamInfo,
    StreamRecord, check_namespace, check_stream_name, check_stream_ref,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// (namespace, stream name).
pub type StreamKey = (String, String);

/// A stream's settings (the same on every shard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamDef {
    pub partitions: u32,
    pub retention_ms: Option<u64>,
    pub max_len: Option<u64>,
    pub max_bytes: Option<u64>,
    pub created_at_ms: u64,
    /// Consumer groups, by name.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupDef>,
}

impl StreamDef {
    fn settings_equal(&self, other: &StreamDef) -> bool {
        (
            self.partitions,
            self.retention_ms,
            self.max_len,
            self.max_bytes,
            self.created_at_ms,
        ) == (
            other.partitions,
            other.retention_ms,
            other.max_len,
            other.max_bytes,
            other.created_at_ms,
        )
    }

    /// What one partition keeps at most: its share of the stream's bounds, rounded up.
    fn caps(&self) -> (Option<u64>, Option<u64>) {
        let p = self.partitions.max(1) as u64;
        (
            self.max_len.map(|n| n.div_ceil(p)),
            self.max_bytes.map(|n| n.div_ceil(p)),
        )
    }

    fn same_settings(&self, config: &StreamConfig, shards: u32) -> bool {
        config.partitions.unwrap_or(shards) == self.partitions
            && config.retention_ms == self.retention_ms
            && config.max_len == self.max_len
            && config.max_bytes == self.max_bytes
    }
}

/// The records of one partition held on this shard, oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Partition {
    pub entries: VecDeque<StreamEntry>,
    /// Payload bytes held.
    pub bytes: u64,
    /// The highest id ever given in this partition (ids never go back, even once trimmed).
    pub last_id: Option<StreamId>,
    /// The highest id removed (by retention or a trim): a read after an older id would
    /// miss records, and is refused.
    pub removed_up_to: Option<StreamId>,
    /// Records appended over the partition's life.
    pub appended: u64,
    /// LSN of the last record that changed this partition: a read waits until it is
    /// durable.
    pub lsn: u64,
    /// Where each consumer group stands here.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupState>,
}

impl Partition {
    /// Index of the first entry with an id above `after`.
    fn first_after(&self, after: StreamId) -> usize {
        self.entries.partition_point(|e| e.id <= after)
    }

    /// Entries after `after` (None: from the oldest), at most `count`.
    pub fn read(
        &self,
        after: Option<StreamId>,
        count: usize,
    ) -> impl Iterator<Item = &StreamEntry> {
        let from = after.map_or(0, |a| self.first_after(a));
        self.entries.range(from..).take(count)
    }

    /// The newest `count` entries, oldest first.
    pub fn tail(&self, count: usize) -> impl Iterator<Item = &StreamEntry> {
        let from = self.entries.len().saturating_sub(count);
        self.entries.range(from..)
    }

    /// Entries with an id below `before`.
    pub fn count_before(&self, before: StreamId) -> u64 {
        self.entries.partition_point(|e| e.id < before) as u64
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.payload.len() as u64;
            self.removed_up_to = Some(self.removed_up_to.map_or(e.id, |r| r.max(e.id)));
            // A record gone cannot be delivered again.
            for g in self.groups.values_mut() {
                g.forget(e.id);
            }
        }
    }

    /// The entry with id `id`.
    pub fn entry(&self, id: StreamId) -> Option<&StreamEntry> {
        let at = self.entries.partition_point(|e| e.id < id);
        self.entries.get(at).filter(|e| e.id == id)
    }

    /// Retained records after `after` (None: all).
    pub fn count_after(&self, after: Option<StreamId>) -> u64 {
        (self.entries.len() - after.map_or(0, |a| self.first_after(a))) as u64
    }
}

#[derive(Default, Serialize, Deserialize)]
pub struct Streams {
    defs: BTreeMap<StreamKey, StreamDef>,
    /// (namespace, stream, partition) → its records, for partitions this shard owns.
    parts: HashMap<(String, String, u32), Partition>,
}

/// Where partition `partition` of stream `name` lives: the partitions of a stream take
/// consecutive places from the hash of its name, so they spread over the shards. A
/// dead-letter stream's partitions live with its stream's (dead-lettering is local).
pub fn owner_of(partitioning: &Partitioning, namespace: &str, name: &str, partition: u32) -> u32 {
    let base = name.strip_suffix(DEAD_LETTER_SUFFIX).unwrap_or(name);
    let first = stable_hash(namespace, base) % partitioning.partitions as u64;
    partitioning.owner(((first + partition as u64) % partitioning.partitions as u64) as u32)
}

/// The partition of a record with `key` in a stream of `partitions` partitions.
pub fn partition_of_key(namespace: &str, key: &str, partitions: u32) -> u32 {
    (stable_hash(namespace, key) % partitions.max(1) as u64) as u32
}

/// The ids of `n` records appended to partition `partition` (of `partitions`) at `now_ms`:
/// above every id the partition gave, at or above `min_id`, and each with a sequence equal
/// to `partition` modulo `partitions` (so ids are unique across the stream's partitions).
pub fn next_ids(
    last: Option<StreamId>,
    min_id: Option<StreamId>,
    now_ms: u64,
    partition: u32,
    partitions: u32,
    n: usize,
) -> Vec<StreamId> {
    let step = partitions.max(1) as u64;
    let mut ms = now_ms;
    if let Some(l) = last {
        ms = ms.max(l.ms);
    }
    if let Some(m) = min_id {
        ms = ms.max(m.ms);
    }
    let mut seq = 0;
    if let Some(l) = last.filter(|l| l.ms == ms) {
        seq = l.seq + 1;
    }
    if let Some(m) = min_id.filter(|m| m.ms == ms) {
        seq = seq.max(m.seq);
    }
    seq += (partition as u64 + step - seq % step) % step;
    (0..n as u64)
        .map(|i| StreamId::new(ms, seq + i * step))
        .collect()
}

/// Stream definitions the coordinator sends another shard: one stream's, or all of them
/// (then a stream the receiver holds and the coordinator does not was deleted).
#[derive(Debug, Clone)]
pub enum StreamSync {
    One(Vec<(StreamKey, StreamDef)>),
    All(Vec<(StreamKey, StreamDef)>),
}

fn created(key: StreamKey, def: StreamDef) -> Record {
    Record::StreamCreated {
        namespace: key.0,
        name: key.1,
        partitions: def.partitions,
        retention_ms: def.retention_ms,
        max_len: def.max_len,
        max_bytes: def.max_bytes,
        at_ms: def.created_at_ms,
    }
}

fn group_created(key: &StreamKey, group: &str, def: &GroupDef) -> Record {
    Record::StreamGroupCreated {
        namespace: key.0.clone(),
        stream: key.1.clone(),
        group: group.to_string(),
        def: def.clone(),
    }
}

fn deleted(key: &StreamKey) -> Record {
    Record::StreamDeleted {
        namespace: key.0.clone(),
        name: key.1.clone(),
    }
}

impl Streams {
    /// What makes this shard's stream definitions the coordinator's.
    pub fn plan_sync(&self, sync: StreamSync) -> Vec<Record> {
        let (entries, all) = match sync {
            StreamSync::One(e) => (e, false),
            StreamSync::All(e) => (e, true),
        };
        let mut out = Vec::new();
        if all {
            let theirs: std::collections::BTreeSet<&StreamKey> =
                entries.iter().map(|(k, _)| k).collect();
            out.extend(
                self.defs
                    .keys()
                    .filter(|k| !theirs.contains(k))
                    .map(deleted),
            );
        }
        for (key, def) in entries {
            let mine = self.defs.get(&key);
            if mine == Some(&def) {
                continue;
            }
            let kept = mine.filter(|m| m.settings_equal(&def));
            if kept.is_none() {
                if mine.is_some() {
                    out.push(deleted(&key));
                }
                out.push(created(key.clone(), def.clone()));
            }
            let no_groups = BTreeMap::new();
            let my_groups = kept.map_or(&no_groups, |m| &m.groups);
            for name in my_groups.keys().filter(|g| !def.groups.contains_key(*g)) {
                out.push(Record::StreamGroupDeleted {
                    namespace: key.0.clone(),
                    stream: key.1.clone(),
                    group: name.clone(),
                });
            }
            for (name, g) in &def.groups {
                match my_groups.get(name) {
                    Some(m) if m == g => {}
                    Some(_) => {
                        out.push(Record::StreamGroupDeleted {
                            namespace: key.0.clone(),
                            stream: key.1.clone(),
                            group: name.clone(),
                        });
                        out.push(group_created(&key, name, g));
                    }
                    None => out.push(group_created(&key, name, g)),
                }
            }
        }
        out
    }

    pub fn def(&self, namespace: &str, name: &str) -> Option<&StreamDef> {
        self.defs.get(crate::tables::pair(&(namespace, name)))
    }

    /// The stream's definition, or why there is none.
    pub fn existing(&self, namespace: &str, name: &str) -> Result<&StreamDef, ErrorValue> {
        check_namespace(namespace)?;
        check_stream_ref(name)?;
        self.def(namespace, name).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "stream {name:?} does not exist in namespace {namespace:?}"
            ))
        })
    }

    /// The streams of a namespace, by name.
    pub fn defs_in<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a StreamDef)> + 'a {
        self.defs
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|((_, name), def)| (name.as_str(), def))
    }

    /// Every definition (for the start-up sync).
    pub fn all_defs(&self) -> impl Iterator<Item = (&StreamKey, &StreamDef)> {
        self.defs.iter()
    }

    pub fn partition(&self, namespace: &str, name: &str, partition: u32) -> Option<&Partition> {
        self.parts
            .get(&(namespace.to_string(), name.to_string(), partition))
    }

    /// The partitions of this stream this shard holds.
    pub fn local_partitions<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = (u32, &'a Partition)> + 'a {
        let partitions = self.def(namespace, name).map_or(0, |d| d.partitions);
        (0..partitions)
            .filter_map(move |p| self.partition(namespace, name, p).map(|part| (p, part)))
    }

    /// Every partition held here (for the retention sweep and checks).
    pub fn partitions(&self) -> impl Iterator<Item = (&(String, String, u32), &Partition)> {
        self.parts.iter()
    }

    /// Records and payload bytes held here.
    pub fn totals(&self) -> (u64, u64) {
        self.parts.values().fold((0, 0), |(n, b), p| {
            (n + p.entries.len() as u64, b + p.bytes)
        })
    }

    /// A stream's description with the records this shard holds of it.
    pub fn local_info(&self, namespace: &str, name: &str, def: &StreamDef) -> StreamInfo {
        let mut info = StreamInfo {
            namespace: namespace.to_string(),
            name: name.to_string(),
            partitions: def.partitions,
            retention_ms: def.retention_ms,
            max_len: def.max_len,
            max_bytes: def.max_bytes,
            created_at_ms: def.created_at_ms,
            length: 0,
            bytes: 0,
            first_id: None,
            last_id: None,
            appended: 0,
        };
        for (_, part) in self.local_partitions(namespace, name) {
            info.length += part.entries.len() as u64;
            info.bytes += part.bytes;
            info.appended += part.appended;
            let (first, last) = (part.entries.front(), part.entries.back());
            if let Some(f) = first {
                info.first_id = Some(info.first_id.map_or(f.id, |i| i.min(f.id)));
            }
            if let Some(l) = last {
                info.last_id = Some(info.last_id.map_or(l.id, |i| i.max(l.id)));
            }
        }
        info
    }

    /// A creation: the record, or None when the stream exists with these settings.
    pub fn plan_create(
        &self,
        namespace: &str,
        name: &str,
        config: &StreamConfig,
        shards: u32,
        now_ms: u64,
    ) -> Result<Option<Record>, ErrorValue> {
        check_namespace(namespace)?;
        check_stream_name(name)?;
        let partitions = config.partitions.unwrap_or(shards);
        if partitions == 0 || partitions > STREAM_PARTITIONS_MAX {
            return Err(ErrorValue::bad_request(format!(
                "a stream has 1 to {STREAM_PARTITIONS_MAX} partitions, not {partitions}"
            )));
        }
        for (what, value) in [
            ("retention", config.retention_ms),
            ("max length", config.max_len),
            ("max bytes", config.max_bytes),
        ] {
            if value == Some(0) {
                return Err(ErrorValue::bad_request(format!(
                    "a stream's {what} must be above 0 (leave it out for no limit)"
                )));
            }
        }
        if let Some(def) = self.def(namespace, name) {
            if def.same_settings(config, shards) {
                return Ok(None);
            }
            let limit =
                |v: Option<u64>, unit: &str| v.map_or("none".to_string(), |v| format!("{v}{unit}"));
            return Err(ErrorValue::conflict(format!(
                "stream {name:?} exists with other settings ({} partitions, retention {}, \
                 max length {}, max bytes {}); delete it first to change them",
                def.partitions,
                limit(def.retention_ms, " ms"),
                limit(def.max_len, ""),
                limit(def.max_bytes, "")
            )));
        }
        // Room for the stream and the dead-letter stream its first group brings.
        if self.defs.len() + 2 > flo_protocol::STREAMS_MAX {
            return Err(ErrorValue::new(
                flo_protocol::ErrorCode::Overloaded,
                format!(
                    "the server holds {} streams, the most it takes ({}); delete some first",
                    self.defs.len(),
                    flo_protocol::STREAMS_MAX
                ),
            ));
        }
        Ok(Some(Record::StreamCreated {
            namespace: namespace.to_string(),
            name: name.to_string(),
            partitions,
            retention_ms: config.retention_ms,
            max_len: config.max_len,
            max_bytes: config.max_bytes,
            at_ms: now_ms,
        }))
    }

    /// Rebuilds what a snapshot does not carry (the groups' due order).
    pub fn relink(&mut self) {
        for part in self.parts.values_mut() {
            for g in part.groups.values_mut() {
                g.relink();
            }
        }
    }

    pub(crate) fn def_mut(&mut self, namespace: &str, name: &str) -> Option<&mut StreamDef> {
        self.defs.get_mut(crate::tables::pair(&(namespace, name)))
    }

    pub(crate) fn partition_mut(
        &mut self,
        namespace: &str,
        name: &str,
        partition: u32,
    ) -> Option<&mut Partition> {
        self.parts
            .get_mut(&(namespace.to_string(), name.to_string(), partition))
    }

    /// Every partition of a stream held here, to change.
    pub(crate) fn local_partitions_mut<'a>(
        &'a mut self,
        namespace: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = (u32, &'a mut Partition)> + 'a {
        self.parts
            .iter_mut()
            .filter(move |((ns, n, _), _)| ns == namespace && n == name)
            .map(|((_, _, p), part)| (*p, part))
    }

    pub(crate) fn insert_def(&mut self, key: StreamKey, def: StreamDef) {
        self.defs.insert(key, def);
    }

    pub(crate) fn partition_entry(&mut self, key: (String, String, u32)) -> &mut Partition {
        self.parts.entry(key).or_default()
    }

    pub fn plan_delete(&self, namespace: &str, name: &str) -> Result<Record, ErrorValue> {
        self.existing(namespace, name)?;
        Ok(Record::StreamDeleted {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Records removed from the partitions held here by their stream's age limit, at most
    /// `max` partitions' worth.
    pub fn expired(&self, now_ms: u64, max: usize) -> Vec<Record> {
        let mut out = Vec::new();
        for ((ns, name, p), part) in &self.parts {
            if out.len() >= max {
                break;
            }
            let Some(retention) = self.def(ns, name).and_then(|d| d.retention_ms) else {
                continue;
            };
            let cutoff = StreamId::new(now_ms.saturating_sub(retention), 0);
            if part.entries.front().is_some_and(|e| e.id < cutoff) {
                out.push(Record::StreamTrimmed {
                    namespace: ns.clone(),
                    stream: name.clone(),
                    partition: *p,
                    before: cutoff,
                });
            }
        }
        out
    }

    pub fn apply_created(&mut self, namespace: String, name: String, def: StreamDef) {
        self.defs.insert((namespace, name), def);
    }

    /// Removes a stream, its records and its dead-letter stream.
    pub fn apply_deleted(&mut self, namespace: &str, name: &str) -> bool {
        let found = self.remove(namespace, name);
        if !name.ends_with(DEAD_LETTER_SUFFIX) {
            self.remove(namespace, &format!("{name}{DEAD_LETTER_SUFFIX}"));
        }
        found
    }

    fn remove(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        let Some(def) = self.defs.remove(&key) else {
            return false;
        };
        for p in 0..def.partitions {
            self.parts.remove(&(key.0.clone(), key.1.clone(), p));
        }
        true
    }

    /// Appends entries to a partition, then removes the oldest beyond its share of the
    /// stream's bounds. False when the stream does not exist (a bug in the planner).
    pub fn apply_appended(
        &mut self,
        namespace: String,
        stream: String,
        partition: u32,
        entries: Vec<StreamEntry>,
        lsn: u64,
    ) -> bool {
        let Some(def) = self.def(&namespace, &stream) else {
            return false;
        };
        let (max_len, max_bytes) = def.caps();
        let key = (namespace, stream, partition);
        if !self.parts.contains_key(&key) {
            // A new partition: every group starts with its first record.
            let groups = def
                .groups
                .iter()
                .map(|(name, g)| (name.clone(), GroupState::starting(g.start, None)))
                .collect();
            let part = Partition {
                groups,
                ..Default::default()
            };
            self.parts.insert(key.clone(), part);
        }
        let Some(part) = self.parts.get_mut(&key) else {
            return false;
        };
        for e in entries {
            part.last_id = Some(part.last_id.map_or(e.id, |l| l.max(e.id)));
            part.bytes += e.payload.len() as u64;
            part.appended += 1;
            part.entries.push_back(e);
        }
        while max_len.is_some_and(|m| part.entries.len() as u64 > m)
            || max_bytes.is_some_and(|m| part.bytes > m && part.entries.len() > 1)
        {
            part.pop_front();
        }
        part.lsn = lsn;
        true
    }

    /// Removes a partition's records below `before`.
    pub fn apply_trimmed(
        &mut self,
        namespace: String,
        stream: String,
        partition: u32,
        before: StreamId,
        lsn: u64,
    ) {
        let Some(part) = self.parts.get_mut(&(namespace, stream, partition)) else {
            return;
        };
        while part.entries.front().is_some_and(|e| e.id < before) {
            part.pop_front();
        }
        part.lsn = lsn;
    }

    /// One line per definition and partition, for digests.
    pub fn digest(&self, out: &mut Vec<String>) {
        for ((ns, name), def) in &self.defs {
            out.push(format!("stream {ns}/{name} {def:?}"));
        }
        let mut parts: Vec<_> = self.parts.iter().collect();
        parts.sort_by(|a, b| a.0.cmp(b.0));
        for ((ns, name, p), part) in parts {
            out.push(format!(
                "stream-part {ns}/{name}/{p} n={} bytes={} last={:?} removed={:?} appended={} \
                 first={:?}",
                part.entries.len(),
                part.bytes,
                part.last_id,
                part.removed_up_to,
                part.appended,
                part.entries.front().map(|e| e.id)
            ));
            for (group, g) in &part.groups {
                out.push(format!(
                    "stream-group {ns}/{name}/{p}/{group} cursor={:?} pending={:?} consumers={:?} \
                     active={:?} delivered={} acked={} dead={}",
                    g.cursor,
                    g.pending,
                    g.consumers,
                    g.active,
                    g.delivered,
                    g.acked,
                    g.dead_lettered
                ));
            }
        }
    }
}

impl StreamEntry {
    pub fn to_wire(&self, partition: u32) -> StreamRecord {
        StreamRecord {
            id: self.id,
            partition,
            key: self.key.as_deref().map(str::to_string),
            headers: self.headers.clone(),
            payload: self.payload.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_grow_in_a_partition_and_say_their_partition() {
        let ids = next_ids(None, None, 100, 1, 4, 3);
        assert_eq!(
            ids,
            [
                StreamId::new(100, 1),
                StreamId::new(100, 5),
                StreamId::new(100, 9)
            ]
        );
        // The clock went back: the partition's last id still bounds the next.
        let more = next_ids(Some(StreamId::new(100, 9)), None, 90, 1, 4, 1);
        assert_eq!(more, [StreamId::new(100, 13)]);
        // A floor from the appender's previous record, in another partition.
        let after = next_ids(None, Some(StreamId::new(100, 14)), 100, 2, 4, 1);
        assert_eq!(after, [StreamId::new(100, 14)]);
        let after = next_ids(None, Some(StreamId::new(100, 15)), 100, 2, 4, 1);
        assert_eq!(after, [StreamId::new(100, 18)]);
        for id in next_ids(
            Some(StreamId::new(7, 3)),
            Some(StreamId::new(7, 8)),
            7,
            3,
            5,
            4,
        ) {
            assert_eq!(id.partition(5), 3);
            assert!(id > StreamId::new(7, 3) && id >= StreamId::new(7, 8));
        }
    }

    #[test]
    fn a_stream_spreads_its_partitions_over_the_shards() {
        let p = Partitioning::new(256, 4);
        let mut owners: Vec<u32> = (0..4).map(|i| owner_of(&p, "ns", "orders", i)).collect();
        owners.sort();
        assert_eq!(owners, [0, 1, 2, 3]);
    }
}
