//! Runtime-agnostic shard core: executes the operations routed to this shard against its
//! state. A mutation validates, builds records, appends them to the log and applies them;
//! the caller answers once the returned LSN is durable.

use crate::clock::Clock;
use crate::kv::KvStore;
use crate::record::Record;
use crate::state::ShardState;
use crate::ual::LogBuffer;
use flo_protocol::{ErrorValue, KV_LIST_LIMIT_DEFAULT, Op, Reply, ShardInfo};
use std::rc::Rc;

/// Result of executing an operation on its shard.
pub struct Done {
    pub result: Result<Reply, ErrorValue>,
    /// The reply may be sent once this LSN is durable (0: at once).
    pub wait_lsn: u64,
}

impl Done {
    fn now(result: Result<Reply, ErrorValue>) -> Self {
        Done { result, wait_lsn: 0 }
    }
}

pub struct ShardCore {
    pub shard: u32,
    pub state: ShardState,
    pub log: LogBuffer,
    pub durable_lsn: u64,
    pub segments: u32,
    pub clock: Rc<dyn Clock>,
}

impl ShardCore {
    pub fn new(shard: u32, state: ShardState, last_lsn: u64, segments: u32, clock: Rc<dyn Clock>) -> Self {
        ShardCore { shard, state, log: LogBuffer::new(last_lsn + 1), durable_lsn: last_lsn, segments, clock }
    }

    /// Appends a record and applies it: the only way live state changes.
    pub fn commit(&mut self, record: Record) -> u64 {
        let lsn = self.log.append(&record);
        self.state.apply(lsn, record);
        lsn
    }

    pub fn execute(&mut self, op: Op) -> Done {
        let now = self.clock.now_ms();
        match op {
            Op::KvGet { namespace, key } => {
                if let Err(e) = KvStore::validate_get(&namespace, &key) {
                    return Done::now(Err(e));
                }
                let entry = self.state.kv.get(&namespace, &key, now);
                Done {
                    wait_lsn: entry.map_or(0, |e| e.lsn),
                    result: Ok(Reply::KvValue(entry.map(|e| e.to_wire(&key)))),
                }
            }
            Op::KvPut { namespace, key, value, ttl_ms, if_version } => {
                match self.state.kv.plan_put(namespace, key, value, ttl_ms, if_version, now) {
                    Ok(record) => {
                        let Record::KvPut { version, .. } = record else { unreachable!() };
                        let lsn = self.commit(record);
                        Done { result: Ok(Reply::KvPut { version }), wait_lsn: lsn }
                    }
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::KvDelete { namespace, key, if_version } => {
                match self.state.kv.plan_delete(&namespace, &key, if_version, now) {
                    Ok(Some(record)) => {
                        let lsn = self.commit(record);
                        Done { result: Ok(Reply::KvDeleted { deleted: true }), wait_lsn: lsn }
                    }
                    Ok(None) => Done::now(Ok(Reply::KvDeleted { deleted: false })),
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::KvList { namespace, prefix, limit } => {
                let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT);
                match self.state.kv.list(&namespace, &prefix, limit, now) {
                    Ok((items, truncated)) => Done {
                        wait_lsn: items.iter().map(|(_, e)| e.lsn).max().unwrap_or(0),
                        result: Ok(Reply::KvList {
                            entries: items.iter().map(|(k, e)| e.to_wire(k)).collect(),
                            truncated,
                        }),
                    },
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::Status => Done::now(Ok(Reply::ShardStatus(self.info()))),
            Op::Hello { .. } | Op::ShardMap => {
                Done::now(Err(ErrorValue::internal("connection-level operation reached a shard")))
            }
        }
    }

    pub fn info(&self) -> ShardInfo {
        ShardInfo {
            shard: self.shard,
            lsn: self.log.last_lsn(),
            durable_lsn: self.durable_lsn,
            segments: self.segments,
            kv_keys: self.state.kv.key_count(),
        }
    }

    /// Logs the deletion of up to `max` expired keys; returns how many.
    pub fn sweep_expired(&mut self, max: usize) -> usize {
        let records = self.state.kv.expired(self.clock.now_ms(), max);
        let n = records.len();
        for record in records {
            self.commit(record);
        }
        n
    }
}
