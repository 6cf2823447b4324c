//! Requests and replies. A request carries a client-chosen id; its response echoes it.
//! Responses may arrive in any order (pipelining).

use crate::ErrorValue;
use serde::{Deserialize, Serialize};

/// Version of this message set; the handshake refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;
pub const NAMESPACE_BYTES_MAX: usize = 256;
pub const KV_KEY_BYTES_MAX: usize = 1024;
pub const KV_VALUE_BYTES_MAX: usize = 1 << 20;
pub const KV_LIST_LIMIT_DEFAULT: u32 = 1000;
pub const KV_LIST_LIMIT_MAX: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub op: Op,
}

/// Only the id of a request: lets the server answer a request whose body it cannot decode.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct RequestId {
    pub id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Handshake: the client states its protocol version.
    Hello { protocol_version: u32, client: String },
    /// Server version, durability and per-shard log positions.
    Status,
    /// How keys map to partitions and partitions to shards.
    ShardMap,
    KvGet {
        namespace: String,
        key: String,
    },
    KvPut {
        namespace: String,
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// Time to live from now; the key disappears afterwards.
        ttl_ms: Option<u64>,
        /// Compare-and-set: apply only when the current version is this (0 = key absent).
        if_version: Option<u64>,
    },
    KvDelete {
        namespace: String,
        key: String,
        if_version: Option<u64>,
    },
    KvList {
        namespace: String,
        prefix: String,
        limit: Option<u32>,
    },
}

impl Op {
    /// Whether the operation changes state (and so is answered only once durable).
    pub fn is_mutation(&self) -> bool {
        matches!(self, Op::KvPut { .. } | Op::KvDelete { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    pub result: Result<Reply, ErrorValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Hello {
        protocol_version: u32,
        server_version: String,
        shard_count: u32,
        partitions: u32,
    },
    Status(StatusInfo),
    /// One shard's part of a status (exchanged between shards).
    ShardStatus(ShardInfo),
    ShardMap(ShardMap),
    KvValue(Option<KvEntry>),
    KvPut {
        version: u64,
    },
    KvDeleted {
        deleted: bool,
    },
    KvList {
        entries: Vec<KvEntry>,
        /// More entries matched than `limit`.
        truncated: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEntry {
    pub key: String,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub version: u64,
    pub expires_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub server_version: String,
    pub durability: String,
    pub partitions: u32,
    pub shards: Vec<ShardInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub shard: u32,
    /// Last log sequence number appended.
    pub lsn: u64,
    /// Last log sequence number known to be on disk.
    pub durable_lsn: u64,
    pub segments: u32,
    pub kv_keys: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// Name of the fixed hash: `xxh3-64` over namespace, 0xff, key.
    pub hash: String,
    pub partitions: u32,
    pub shard_count: u32,
    /// `owners[partition]` = shard owning it.
    pub owners: Vec<u32>,
}
