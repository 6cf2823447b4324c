//! Shard state is a fold of the log: `apply` is the one place it changes, used by live
//! requests (right after their records are appended) and by recovery alike.

use crate::kv::KvStore;
use crate::record::Record;

#[derive(Default)]
pub struct ShardState {
    pub kv: KvStore,
}

impl ShardState {
    pub fn apply(&mut self, lsn: u64, record: Record) {
        match record {
            Record::KvPut { namespace, key, value, version, expires_at_ms } => {
                self.kv.apply_put(namespace, key, value, version, expires_at_ms, lsn)
            }
            Record::KvDelete { namespace, key } => self.kv.apply_delete(&namespace, &key),
        }
    }
}
