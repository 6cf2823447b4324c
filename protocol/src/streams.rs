//! Streams on the wire: record ids, the records appended and read, a stream's settings and
//! its description, and the bounds on each.

use crate::ErrorValue;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Longest stream name (the same alphabet as an action's name).
pub const STREAM_NAME_BYTES_MAX: usize = 256;
/// Most partitions a stream may have.
pub const STREAM_PARTITIONS_MAX: u32 = 256;
/// Largest payload of one record.
pub const STREAM_PAYLOAD_BYTES_MAX: usize = 1 << 20;
/// Longest record key.
pub const STREAM_KEY_BYTES_MAX: usize = 1024;
/// Most headers on one record, and their total bytes (names and values).
pub const STREAM_HEADERS_MAX: usize = 64;
pub const STREAM_HEADERS_BYTES_MAX: usize = 16 << 10;
/// Most records one append carries.
pub const STREAM_APPEND_RECORDS_MAX: usize = 4096;
/// Records a read returns when it does not say, and at most.
pub const STREAM_READ_COUNT_DEFAULT: u32 = 100;
pub const STREAM_READ_COUNT_MAX: u32 = 10_000;

/// Where a record stands in its stream: the millisecond it was appended and a sequence.
/// Ids grow within a partition, and no two records of a stream share one: the sequence of
/// a record of partition `p` of a stream with `P` partitions is `p` modulo `P`, so an id
/// also says which partition holds it. Written `MS-SEQ` (`1732600000000-3`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The partition holding this id in a stream of `partitions` partitions.
    pub fn partition(&self, partitions: u32) -> u32 {
        (self.seq % partitions.max(1) as u64) as u32
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl FromStr for StreamId {
    type Err = ErrorValue;

    /// `MS-SEQ`, or `MS` alone (sequence 0).
    fn from_str(s: &str) -> Result<StreamId, ErrorValue> {
        let bad = || {
            ErrorValue::bad_request(format!(
                "{s:?} is not a stream id: write MS-SEQ (two numbers, e.g. 1732600000000-0)"
            ))
        };
        let (ms, seq) = match s.split_once('-') {
            Some((ms, seq)) => (ms, seq),
            None => (s, "0"),
        };
        let number = |t: &str| {
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok())
                .flatten()
        };
        Ok(StreamId {
            ms: number(ms).ok_or_else(bad)?,
            seq: number(seq).ok_or_else(bad)?,
        })
    }
}

/// A stream's settings, as asked at creation (None: the default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// Partitions (default: the server's shard count). Fixed for the stream's life.
    pub partitions: Option<u32>,
    /// Records older than this are removed.
    pub retention_ms: Option<u64>,
    /// At most this many records are kept (the oldest go first; each partition keeps its
    /// share, `max_len / partitions` rounded up).
    pub max_len: Option<u64>,
    /// At most this many payload bytes are kept (shared over partitions like `max_len`).
    pub max_bytes: Option<u64>,
}

/// A record to append.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecordIn {
    /// Records with one key go to one partition, in the order appended.
    pub key: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub id: StreamId,
    pub partition: u32,
    pub key: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// What a read asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReadSpec {
    pub namespace: String,
    pub stream: String,
    /// Records after this id (None: from the oldest retained).
    pub after: Option<StreamId>,
    /// At most this many (default `STREAM_READ_COUNT_DEFAULT`).
    pub count: Option<u32>,
    /// One partition only (None: all of them, merged in id order).
    pub partition: Option<u32>,
    /// The newest `count` records instead of the oldest after `after`.
    #[serde(default)]
    pub tail: bool,
    /// When no record is there, wait up to this long (at most `GROUP_BLOCK_MS_MAX`) for one
    /// (not with `tail`).
    #[serde(default)]
    pub block_ms: Option<u64>,
}

/// A stream and what it holds now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    pub namespace: String,
    pub name: String,
    pub partitions: u32,
    pub retention_ms: Option<u64>,
    pub max_len: Option<u64>,
    pub max_bytes: Option<u64>,
    pub created_at_ms: u64,
    /// Records retained, and their payload bytes.
    pub length: u64,
    pub bytes: u64,
    /// Oldest and newest retained ids (None: empty).
    pub first_id: Option<StreamId>,
    pub last_id: Option<StreamId>,
    /// Records appended over the stream's life (retained or not).
    pub appended: u64,
}

/// The suffix of a stream's dead-letter stream (`orders:dlq`): records a group delivered
/// `max_deliveries` times without an ack move there. No stream created by a client has a
/// `:` in its name.
pub const DEAD_LETTER_SUFFIX: &str = ":dlq";
/// Deliveries of one record to a group after which it is dead-lettered, by default.
pub const GROUP_MAX_DELIVERIES_DEFAULT: u32 = 16;
/// How long a delivered record may stay unacknowledged before another consumer gets it,
/// by default (5 minutes).
pub const GROUP_MESSAGE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// Records delivered and not acknowledged, per group and partition; a read past it
/// answers `overloaded` until some are acknowledged.
pub const GROUP_PENDING_MAX: usize = 100_000;
/// Consumers one group knows per partition.
pub const GROUP_CONSUMERS_MAX: usize = 1024;
/// Longest a group read blocks.
pub const GROUP_BLOCK_MS_MAX: u64 = 300_000;
/// Most ids one ack or nack carries.
pub const GROUP_ACK_IDS_MAX: usize = 10_000;
/// Streams a server holds (all namespaces, dead-letter streams included), and consumer
/// groups per stream: every shard holds every definition.
pub const STREAMS_MAX: usize = 10_000;
pub const GROUPS_PER_STREAM_MAX: usize = 64;

/// How a group shares records among its consumers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupMode {
    /// Competing consumers: each record goes to one of them.
    #[default]
    Shared,
    /// One consumer at a time per partition; another takes over when it stops reading and
    /// its records time out.
    Exclusive,
    /// Records with one key go to one consumer, in order; a key moves to another consumer
    /// only once its consumer has stopped (nothing delivered to it and none of its records
    /// held within the message timeout). Records without a key go to any consumer.
    KeyShared,
}

impl GroupMode {
    /// The mode's name, as definitions and the CLI write it.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupMode::Shared => "shared",
            GroupMode::Exclusive => "exclusive",
            GroupMode::KeyShared => "key_shared",
        }
    }
}

/// Where a new group starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupStart {
    /// With the oldest retained record.
    Start,
    /// With the records appended after its creation.
    #[default]
    End,
    /// With this id (included).
    At(StreamId),
}

/// A group's settings, as asked at creation (None: the default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupConfig {
    pub mode: GroupMode,
    pub start: GroupStart,
    pub max_deliveries: Option<u32>,
    pub message_timeout_ms: Option<u64>,
}

/// A group read: up to `count` records for `consumer`, waiting up to `block_ms` for one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReadSpec {
    pub namespace: String,
    pub stream: String,
    pub group: String,
    pub consumer: String,
    pub count: Option<u32>,
    #[serde(default)]
    pub block_ms: Option<u64>,
}

/// A record delivered and not acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRecord {
    pub id: StreamId,
    pub consumer: String,
    pub deliveries: u32,
    pub delivered_at_ms: u64,
}

/// A group and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    pub stream: String,
    pub group: String,
    pub mode: GroupMode,
    pub max_deliveries: u32,
    pub message_timeout_ms: u64,
    pub created_at_ms: u64,
    /// Records delivered and not acknowledged.
    pub pending: u64,
    /// Retained records not delivered yet.
    pub lag: u64,
    pub delivered: u64,
    pub acked: u64,
    pub dead_lettered: u64,
    /// Consumers that read, by name.
    pub consumers: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_id_reads_back_what_it_writes() {
        let id = StreamId::new(1_732_600_000_000, 7);
        assert_eq!(id.to_string(), "1732600000000-7");
        assert_eq!("1732600000000-7".parse::<StreamId>().unwrap(), id);
        assert_eq!("5".parse::<StreamId>().unwrap(), StreamId::new(5, 0));
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "a-1",
            "1-2-3",
            "+1-2",
            "99999999999999999999-0",
        ] {
            assert!(bad.parse::<StreamId>().is_err(), "{bad:?}");
        }
        assert!(StreamId::new(1, 9) < StreamId::new(2, 0));
        assert_eq!(StreamId::new(1, 9).partition(4), 1);
    }
}
