//! Logical records of the UAL. State is a fold of these (see `state::ShardState::apply`).

use flo_protocol::ActionKind;
use serde::{Deserialize, Serialize};

/// An action definition as logged (on every shard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionDefRecord {
    pub kind: ActionKind,
    pub version: u32,
    pub enabled: bool,
    pub timeout_ms: u64,
    pub max_retries: u32,
    pub retry_delay_ms: u64,
    pub description: Option<String>,
    pub memory_limit_mb: u32,
    #[serde(with = "serde_bytes")]
    pub wasm: Option<Vec<u8>>,
    pub wasm_describe: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

/// A KV write made by a WebAssembly guest, committed with its run's completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestKvWrite {
    pub key: String,
    /// None: delete.
    #[serde(with = "serde_bytes")]
    pub value: Option<Vec<u8>>,
}

/// One task of a `TasksLeased` batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedTask {
    pub run_id: String,
    pub attempt: u32,
    pub expires_at_ms: u64,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    KvPut {
        namespace: String,
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// The version this put gives the key.
        version: u64,
        expires_at_ms: Option<u64>,
    },
    KvDelete {
        namespace: String,
        key: String,
    },
    /// Registration or re-registration; `def.version` is assigned by the coordinator.
    ActionDefined {
        namespace: String,
        name: String,
        def: ActionDefRecord,
    },
    ActionRemoved {
        namespace: String,
        name: String,
        at_ms: u64,
    },
    ActionEnabled {
        namespace: String,
        name: String,
        enabled: bool,
        at_ms: u64,
    },
    RunCreated {
        namespace: String,
        run_id: String,
        action: String,
        action_version: u32,
        #[serde(with = "serde_bytes")]
        input: Vec<u8>,
        priority: u8,
        labels: Option<String>,
        idempotency_key: Option<String>,
        created_at_ms: u64,
        available_at_ms: u64,
    },
    /// An attempt failed. With `retry_at_ms` the run waits for another attempt; without,
    /// it is final (failed, or timed out) and dead-lettered.
    AttemptFailed {
        namespace: String,
        run_id: String,
        attempt: u32,
        /// Version of the action that executed the attempt (the latest registered one).
        action_version: u32,
        error: String,
        timed_out: bool,
        retry_at_ms: Option<u64>,
        at_ms: u64,
        /// A final failure goes to the dead-letter list (not for non-retryable failures).
        #[serde(default = "yes")]
        dead_letter: bool,
    },
    /// Pending runs of user-hosted actions leased to a worker (status `running`).
    TasksLeased {
        namespace: String,
        worker_id: String,
        tasks: Vec<LeasedTask>,
        at_ms: u64,
    },
    /// A leased task's lease now ends at `expires_at_ms`.
    LeaseExtended {
        namespace: String,
        run_id: String,
        expires_at_ms: u64,
    },
    /// Leased tasks handed back unstarted (their worker could not take them): pending
    /// again, same attempt.
    LeasesReleased {
        namespace: String,
        run_ids: Vec<String>,
        at_ms: u64,
    },
    RunCompleted {
        namespace: String,
        run_id: String,
        attempt: u32,
        /// Version of the action that executed the attempt (the latest registered one).
        action_version: u32,
        #[serde(with = "serde_bytes")]
        output: Vec<u8>,
        outcome: Option<String>,
        /// The guest's KV writes: those to keys this shard owns are applied with the
        /// completion, the others are forwarded to their shards (`KvForwarded`).
        kv_writes: Vec<GuestKvWrite>,
        at_ms: u64,
    },
    RunCancelled {
        namespace: String,
        run_id: String,
        at_ms: u64,
    },
    /// Guest KV writes of completions up to `up_to_lsn` reached their owner shards.
    KvForwarded {
        up_to_lsn: u64,
    },
    /// Guest KV writes from another shard's completion (`origin_lsn` on `origin_shard`),
    /// applied here because this shard owns the keys. Applied at most once per origin LSN.
    KvRemoteWrites {
        origin_shard: u32,
        origin_lsn: u64,
        namespace: String,
        writes: Vec<GuestKvWrite>,
        at_ms: u64,
    },
}

impl Record {
    /// Type code stored in the record header (for tools that scan without decoding).
    pub fn type_code(&self) -> u16 {
        match self {
            Record::KvPut { .. } => 1,
            Record::KvDelete { .. } => 2,
            Record::ActionDefined { .. } => 10,
            Record::ActionRemoved { .. } => 11,
            Record::ActionEnabled { .. } => 12,
            Record::RunCreated { .. } => 20,
            Record::AttemptFailed { .. } => 21,
            Record::RunCompleted { .. } => 22,
            Record::RunCancelled { .. } => 23,
            Record::TasksLeased { .. } => 24,
            Record::LeaseExtended { .. } => 25,
            Record::LeasesReleased { .. } => 26,
            Record::KvForwarded { .. } => 30,
            Record::KvRemoteWrites { .. } => 31,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ser = rmp_serde::Serializer::new(out);
        // Encoding plain owned data into a Vec cannot fail.
        self.serialize(&mut ser).expect("record encodes");
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }
}
