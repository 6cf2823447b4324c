//! KV operations on the shard owning the key: plan a record, commit it, answer once the
//! record the answer depends on is durable.

use crate::core::io::{Done, Effect, PeerRequest};
use crate::core::{Core, Waiting};
use crate::fold::kv::PutCondition;
use crate::fold::record::Record;
use flo_protocol::{ErrorValue, KV_LIST_LIMIT_DEFAULT, Reply};

/// A read: the value once the put that wrote it is durable; an absence once the delete
/// that made it (if any) is durable.
pub fn get(core: &Core, namespace: &str, key: &str) -> Done {
    if let Err(e) = crate::fold::kv::KvStore::validate_get(namespace, key) {
        return Done::now(Err(e));
    }
    let entry = core.state().kv.get(namespace, key, core.now_ms());
    Done {
        wait_lsn: entry.map_or_else(|| absence_lsn(core, namespace, key), |e| e.lsn),
        result: Ok(Reply::KvValue(entry.map(|e| e.to_wire(key)))),
    }
}

/// The LSN an answer that finds `key` absent waits for: the last record that removed a key,
/// and the put of an entry that expired (a crash could bring back the value before it).
pub(super) fn absence_lsn(core: &Core, namespace: &str, key: &str) -> u64 {
    let expired = core.state().kv.entry(namespace, key).map_or(0, |e| e.lsn);
    core.absence_lsn().max(expired)
}

pub fn kv_put(
    core: &mut Core,
    namespace: String,
    key: String,
    value: Vec<u8>,
    ttl_ms: Option<u64>,
    condition: PutCondition,
) -> Done {
    let now = core.now_ms();
    if let Err(e) = core.check_kv_bytes(&namespace, &key, value.len()) {
        return Done::now(Err(e));
    }
    match core
        .state()
        .kv
        .plan_put(namespace, key, value, ttl_ms, condition, now)
    {
        Ok(record) => {
            let version = match &record {
                Record::KvPut { version, .. } => *version,
                _ => 0,
            };
            Done {
                wait_lsn: core.commit(record),
                result: Ok(Reply::KvPut { version }),
            }
        }
        Err(e) => Done::now(Err(e)),
    }
}

pub fn kv_delete(core: &mut Core, namespace: &str, key: &str, if_version: Option<u64>) -> Done {
    let now = core.now_ms();
    match core.state().kv.plan_delete(namespace, key, if_version, now) {
        Ok(Some(record)) => Done {
            wait_lsn: core.commit(record),
            result: Ok(Reply::KvDeleted { deleted: true }),
        },
        // Nothing to delete: say so once whatever made the key absent is durable.
        Ok(None) => Done {
            wait_lsn: absence_lsn(core, namespace, key),
            result: Ok(Reply::KvDeleted { deleted: false }),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// This shard's part of a KV list: keys after `cursor` (the last key of the page before).
pub fn kv_list(
    core: &Core,
    namespace: &str,
    prefix: &str,
    limit: Option<u32>,
    cursor: Option<&str>,
) -> Done {
    let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT);
    match core
        .state()
        .kv
        .list(namespace, prefix, cursor, limit, core.now_ms())
    {
        Ok(page) => Done {
            wait_lsn: page
                .items
                .iter()
                .map(|(_, e)| e.lsn)
                .chain([core.absence_lsn(), page.expired_lsn])
                .max()
                .unwrap_or(0),
            result: Ok(Reply::KvList {
                entries: page.items.iter().map(|(k, e)| e.to_wire(k)).collect(),
                truncated: page.next.is_some(),
                next_cursor: page.next,
            }),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// Logs the deletion of up to `max` expired keys; returns how many.
pub fn sweep_expired(core: &mut Core, max: usize) -> usize {
    let records = core.state().kv.expired(core.now_ms(), max);
    let n = records.len();
    for record in records {
        core.commit(record);
    }
    n
}

/// A running guest reads `key`: from this shard's state, or from the shard owning it.
/// (A guest's result is committed after the value it read, so it needs no durability
/// wait of its own.)
pub fn guest_read(core: &mut Core, exec: u64, read: u64, namespace: &str, key: &str) {
    let owner = core.partitioning().shard_of(namespace, key);
    if owner == core.shard() {
        let value = core
            .state()
            .kv
            .get(namespace, key, core.now_ms())
            .map(|e| e.value.to_vec());
        core.emit(Effect::GuestValue {
            exec,
            read,
            value: Ok(value),
        });
        return;
    }
    let req = PeerRequest::KvRead {
        namespace: namespace.to_string(),
        key: key.to_string(),
    };
    core.call(owner, 0, req, Waiting::GuestRead { exec, read });
}

/// A guest's read answered by the key's owner: the value, none, or why the owner could not
/// answer (never read as "absent": the execution fails instead).
pub fn guest_value(result: Result<Reply, ErrorValue>) -> Result<Option<Vec<u8>>, String> {
    match result {
        Ok(Reply::KvValue(entry)) => Ok(entry.map(|e| e.value)),
        Ok(other) => Err(format!("the key's shard answered {other:?}")),
        Err(e) => Err(format!("the key's shard could not read it: {e}")),
    }
}
