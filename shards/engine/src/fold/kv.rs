//! Namespaced key-value store: versions for compare-and-set, optional TTL, ordered keys
//! for prefix listing. `plan_*` validate and build records; `apply_*` change state.

use crate::bytes::SharedBytes;
use crate::clock::deadline_after;
use crate::fold::record::Record;
use crate::pages::LIST_REPLY_BYTES_MAX;
use crate::tables::HashMap;
use flo_protocol::{DELAY_MS_ACCEPTED_MAX, check_namespace};
use flo_protocol::{ErrorValue, KV_KEY_BYTES_MAX, KV_LIST_LIMIT_MAX, KV_VALUE_BYTES_MAX, KvEntry};
use std::collections::{BTreeMap, BTreeSet};

/// Longest TTL accepted; one beyond the timer horizon (about 100 years) never expires.
pub const KV_TTL_MS_MAX: u64 = DELAY_MS_ACCEPTED_MAX;

/// When a put applies, besides the TTL and value checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PutCondition {
    /// Compare-and-set: only when the current version is this (0: only when absent).
    pub if_version: Option<u64>,
    /// Only when the key exists.
    pub if_exists: bool,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Shared with the snapshot images taken while it is the key's value.
    pub value: SharedBytes,
    pub version: u64,
    pub expires_at_ms: Option<u64>,
    /// LSN of the record that wrote this value: a read waits until it is durable.
    pub lsn: u64,
}

impl Entry {
    fn live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|t| t > now_ms)
    }

    pub fn to_wire(&self, key: &str) -> KvEntry {
        KvEntry {
            key: key.to_string(),
            value: self.value.to_vec(),
            version: self.version,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// A page of a KV list on one shard.
pub struct KvPage<'a> {
    /// Keys and entries in key order.
    pub items: Vec<(&'a str, &'a Entry)>,
    /// More may follow: the last key this page covers (the next page starts after it).
    pub next: Option<String>,
    /// The highest LSN of the expired entries passed over (their absence is only as
    /// durable as they are).
    pub expired_lsn: u64,
}

/// Keys a list looks at, at most, per shard and call (expired ones included): a page
/// answers in bounded time, and may be short.
pub const KV_LIST_SCAN_MAX: usize = 100_000;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct KvStore {
    spaces: HashMap<String, BTreeMap<String, Entry>>,
    keys: u64,
    /// (expires_at_ms, namespace, key) of every entry with a TTL, soonest first (derived:
    /// rebuilt by `relink` after a snapshot is loaded).
    #[serde(skip)]
    expiries: BTreeSet<(u64, String, String)>,
    /// Bytes of keys and values per namespace (derived: rebuilt by `relink`), for the
    /// namespaces' `kv_bytes` quotas.
    #[serde(skip)]
    bytes: HashMap<String, u64>,
}

/// What an entry counts toward its namespace's `kv_bytes`.
fn entry_bytes(key: &str, value_len: usize) -> u64 {
    (key.len() + value_len) as u64
}

fn validate_key(namespace: &str, key: &str) -> Result<(), ErrorValue> {
    check_namespace(namespace)?;
    if key.is_empty() || key.len() > KV_KEY_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "key must be 1 to {KV_KEY_BYTES_MAX} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

fn check_version(
    key: &str,
    current: Option<&Entry>,
    expected: Option<u64>,
) -> Result<(), ErrorValue> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let actual = current.map_or(0, |e| e.version);
    if actual != expected {
        if expected == 0 {
            return Err(ErrorValue::conflict(format!(
                "key {key:?} exists (version {actual}); this put applies only to an absent \
                 key (--nx, if version 0)"
            )));
        }
        return Err(ErrorValue::conflict(format!(
            "version mismatch on key {key:?}: expected {expected}, current is {actual}"
        )));
    }
    Ok(())
}

impl KvStore {
    /// Every entry (expired ones included), in no particular order across namespaces.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Entry)> {
        self.spaces
            .iter()
            .flat_map(|(ns, space)| space.iter().map(move |(k, e)| (ns.as_str(), k.as_str(), e)))
    }

    /// A copy for a snapshot image, to encode elsewhere: keys copied, values shared (a
    /// count each), the derived expiry order and bytes left out.
    pub fn view(&self) -> KvStore {
        KvStore {
            spaces: self.spaces.clone(),
            keys: self.keys,
            expiries: BTreeSet::new(),
            bytes: HashMap::default(),
        }
    }

    /// Bytes of keys and values `namespace` holds here.
    pub fn bytes_in(&self, namespace: &str) -> u64 {
        self.bytes.get(namespace).copied().unwrap_or(0)
    }

    /// What a put of `value_len` bytes at `key` adds to its namespace's bytes (an existing
    /// value is replaced).
    pub fn bytes_added(&self, namespace: &str, key: &str, value_len: usize) -> u64 {
        let old = self
            .entry(namespace, key)
            .map_or(0, |e| entry_bytes(key, e.value.len()));
        entry_bytes(key, value_len).saturating_sub(old)
    }

    fn count_bytes(&mut self, namespace: &str, add: u64, remove: u64) {
        let n = match self.bytes.get_mut(namespace) {
            Some(n) => n,
            None => self.bytes.entry(namespace.to_string()).or_insert(0),
        };
        *n = (*n + add).saturating_sub(remove);
        if *n == 0 {
            self.bytes.remove(namespace);
        }
    }

    /// Rebuilds what a snapshot does not carry (the expiry order, the bytes per namespace).
    pub fn relink(&mut self) {
        self.bytes = self
            .spaces
            .iter()
            .map(|(ns, keys)| {
                let bytes = keys
                    .iter()
                    .map(|(k, e)| entry_bytes(k, e.value.len()))
                    .sum();
                (ns.clone(), bytes)
            })
            .collect();
        self.expiries = self
            .spaces
            .iter()
            .flat_map(|(ns, keys)| {
                keys.iter().filter_map(move |(key, e)| {
                    e.expires_at_ms.map(|at| (at, ns.clone(), key.clone()))
                })
            })
            .collect();
    }

    pub fn key_count(&self) -> u64 {
        self.keys
    }

    /// The entry of a key, expired or not.
    pub fn entry(&self, namespace: &str, key: &str) -> Option<&Entry> {
        self.spaces.get(namespace)?.get(key)
    }

    /// The live (unexpired) entry of a key.
    pub fn get(&self, namespace: &str, key: &str, now_ms: u64) -> Option<&Entry> {
        self.spaces
            .get(namespace)?
            .get(key)
            .filter(|e| e.live(now_ms))
    }

    pub fn validate_get(namespace: &str, key: &str) -> Result<(), ErrorValue> {
        validate_key(namespace, key)
    }

    pub fn plan_put(
        &self,
        namespace: String,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
        condition: PutCondition,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        validate_key(&namespace, &key)?;
        if value.len() > KV_VALUE_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "value of {} bytes exceeds the maximum of {KV_VALUE_BYTES_MAX} bytes",
                value.len()
            )));
        }
        let expires_at_ms = match ttl_ms {
            None => None,
            Some(ttl) if ttl == 0 || ttl > KV_TTL_MS_MAX => {
                return Err(ErrorValue::bad_request(format!(
                    "ttl must be 1 to {KV_TTL_MS_MAX} ms, got {ttl} (leave it out for no expiry)"
                )));
            }
            Some(ttl) => deadline_after(now_ms, ttl),
        };
        if condition.if_exists && condition.if_version == Some(0) {
            return Err(ErrorValue::bad_request(
                "a put only if the key exists (--xx) cannot also require it absent (--nx, if \
                 version 0)",
            ));
        }
        let current = self.get(&namespace, &key, now_ms);
        if condition.if_exists && current.is_none() {
            return Err(ErrorValue::not_found(format!(
                "key {key:?} not found in namespace {namespace:?}; this put applies only to \
                 an existing key (--xx)"
            )));
        }
        check_version(&key, current, condition.if_version)?;
        let version = current.map_or(1, |e| e.version + 1);
        Ok(Record::KvPut {
            namespace,
            key,
            value,
            version,
            expires_at_ms,
        })
    }

    /// `Ok(None)`: nothing to delete.
    pub fn plan_delete(
        &self,
        namespace: &str,
        key: &str,
        if_version: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<Record>, ErrorValue> {
        validate_key(namespace, key)?;
        let current = self.get(namespace, key, now_ms);
        check_version(key, current, if_version)?;
        Ok(current.map(|_| Record::KvDelete {
            namespace: namespace.to_string(),
            key: key.to_string(),
        }))
    }

    /// Live entries whose key starts with `prefix`, in key order, at most `limit`; the flag
    /// says whether more matched.
    /// Live keys starting with `prefix` after `after`, in key order: at most `limit`.
    pub fn list(
        &self,
        namespace: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
        now_ms: u64,
    ) -> Result<KvPage<'_>, ErrorValue> {
        check_namespace(namespace)?;
        if limit == 0 || limit > KV_LIST_LIMIT_MAX {
            return Err(ErrorValue::bad_request(format!(
                "limit must be 1 to {KV_LIST_LIMIT_MAX}, got {limit}"
            )));
        }
        let mut page = KvPage {
            items: Vec::new(),
            next: None,
            expired_lsn: 0,
        };
        let Some(space) = self.spaces.get(namespace) else {
            return Ok(page);
        };
        use std::ops::Bound;
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let matching = space
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        let mut last = None;
        let mut bytes = 0usize;
        for (scanned, (k, e)) in matching.enumerate() {
            if scanned == KV_LIST_SCAN_MAX || page.items.len() == limit as usize {
                page.next = last.map(str::to_string);
                return Ok(page);
            }
            if e.live(now_ms) {
                // The page stops at its byte budget (`pages::LIST_REPLY_BYTES_MAX`).
                let weight = 32 + k.len() + e.value.len();
                if !page.items.is_empty() && bytes + weight > LIST_REPLY_BYTES_MAX {
                    page.next = last.map(str::to_string);
                    return Ok(page);
                }
                bytes += weight;
                page.items.push((k.as_str(), e));
            } else {
                page.expired_lsn = page.expired_lsn.max(e.lsn);
            }
            last = Some(k.as_str());
        }
        Ok(page)
    }

    /// Delete records for up to `max` expired keys, soonest expired first.
    pub fn expired(&self, now_ms: u64, max: usize) -> Vec<Record> {
        self.expiries
            .iter()
            .take_while(|(at, _, _)| *at <= now_ms)
            .take(max)
            .map(|(_, namespace, key)| Record::KvDelete {
                namespace: namespace.clone(),
                key: key.clone(),
            })
            .collect()
    }

    fn forget_expiry(&mut self, namespace: &str, key: &str, old: Option<&Entry>) {
        if let Some(at) = old.and_then(|e| e.expires_at_ms) {
            self.expiries
                .remove(&(at, namespace.to_string(), key.to_string()));
        }
    }

    pub fn apply_put(
        &mut self,
        namespace: String,
        key: String,
        value: Vec<u8>,
        version: u64,
        expires_at_ms: Option<u64>,
        lsn: u64,
    ) {
        let entry = Entry {
            value: SharedBytes::from(value),
            version,
            expires_at_ms,
            lsn,
        };
        if !self.spaces.contains_key(&namespace) {
            self.spaces.insert(namespace.clone(), BTreeMap::new());
        }
        let space = self
            .spaces
            .get_mut(&namespace)
            .expect("namespace inserted above");
        let expiries = &mut self.expiries;
        let new_bytes = entry_bytes(&key, entry.value.len());
        let mut old_bytes = 0;
        match space.entry(key) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                if let Some(at) = expires_at_ms {
                    expiries.insert((at, namespace.clone(), slot.key().clone()));
                }
                slot.insert(entry);
                self.keys += 1;
            }
            std::collections::btree_map::Entry::Occupied(mut slot) => {
                old_bytes = entry_bytes(slot.key(), slot.get().value.len());
                let old_at = slot.get().expires_at_ms;
                if old_at != expires_at_ms {
                    if let Some(at) = old_at {
                        expiries.remove(&(at, namespace.clone(), slot.key().clone()));
                    }
                    if let Some(at) = expires_at_ms {
                        expiries.insert((at, namespace.clone(), slot.key().clone()));
                    }
                }
                slot.insert(entry);
            }
        }
        self.count_bytes(&namespace, new_bytes, old_bytes);
    }

    /// A WebAssembly guest's write (committed with its run's completion at `at_ms`):
    /// a put gets the next version, no TTL; `None` deletes.
    pub fn apply_guest_write(
        &mut self,
        namespace: &str,
        write: crate::fold::record::GuestKvWrite,
        at_ms: u64,
        lsn: u64,
    ) {
        let crate::fold::record::GuestKvWrite { key, value, add } = write;
        let value = match add {
            // An add applies where the key lives, in log order: atomic.
            Some(n) => {
                let now = self
                    .get(namespace, &key, at_ms)
                    .and_then(|e| serde_json::from_slice::<serde_json::Value>(&e.value).ok())
                    .and_then(|v| v.as_i64())
                    .unwrap_or(0);
                Some(now.saturating_add(n).to_string().into_bytes())
            }
            None => value,
        };
        match value {
            Some(value) => {
                let version = self
                    .get(namespace, &key, at_ms)
                    .map_or(1, |e| e.version + 1);
                self.apply_put(namespace.to_string(), key, value, version, None, lsn);
            }
            None => self.apply_delete(namespace, &key),
        }
    }

    pub fn apply_delete(&mut self, namespace: &str, key: &str) {
        let Some(space) = self.spaces.get_mut(namespace) else {
            return;
        };
        let Some(old) = space.remove(key) else { return };
        self.keys -= 1;
        let old_bytes = entry_bytes(key, old.value.len());
        if space.is_empty() {
            self.spaces.remove(namespace);
        }
        self.forget_expiry(namespace, key, Some(&old));
        self.count_bytes(namespace, 0, old_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::state::ShardState;

    fn put(
        s: &mut ShardState,
        key: &str,
        ttl: Option<u64>,
        if_v: Option<u64>,
        now: u64,
    ) -> Result<u64, ErrorValue> {
        let condition = PutCondition {
            if_version: if_v,
            if_exists: false,
        };
        let rec =
            s.kv.plan_put("ns".into(), key.into(), b"v".to_vec(), ttl, condition, now)?;
        let Record::KvPut { version, .. } = rec else {
            unreachable!()
        };
        s.apply(s.applied_lsn + 1, rec);
        Ok(version)
    }

    #[test]
    fn bytes_per_namespace_follow_puts_deletes_and_a_relink() {
        let mut kv = KvStore::default();
        kv.apply_put("a".into(), "k1".into(), vec![0; 10], 1, None, 1);
        kv.apply_put("a".into(), "k2".into(), vec![0; 5], 1, None, 2);
        kv.apply_put("b".into(), "k".into(), vec![0; 7], 1, None, 3);
        assert_eq!((kv.bytes_in("a"), kv.bytes_in("b")), (12 + 7, 8));
        kv.apply_put("a".into(), "k1".into(), vec![0; 2], 2, None, 4);
        assert_eq!(kv.bytes_in("a"), 4 + 7);
        assert_eq!(kv.bytes_added("a", "k1", 10), 8);
        assert_eq!(kv.bytes_added("a", "new", 10), 13);
        kv.apply_delete("a", "k2");
        assert_eq!(kv.bytes_in("a"), 4);
        let before = kv.bytes.clone();
        kv.bytes.clear();
        kv.relink();
        assert_eq!(kv.bytes, before);
        kv.apply_delete("a", "k1");
        kv.apply_delete("b", "k");
        assert!(kv.bytes.is_empty());
    }

    #[test]
    fn versions_increase_and_compare_and_set_checks_them() {
        let mut s = ShardState::default();
        assert_eq!(put(&mut s, "a", None, Some(0), 0).unwrap(), 1);
        assert_eq!(put(&mut s, "a", None, None, 0).unwrap(), 2);
        let err = put(&mut s, "a", None, Some(1), 0).unwrap_err();
        assert_eq!(err.code, flo_protocol::ErrorCode::Conflict);
        assert!(
            err.message.contains("expected 1, current is 2"),
            "{}",
            err.message
        );
        assert_eq!(put(&mut s, "a", None, Some(2), 0).unwrap(), 3);
    }

    #[test]
    fn expired_keys_are_invisible_and_restart_at_version_one() {
        let mut s = ShardState::default();
        put(&mut s, "t", Some(100), None, 1000).unwrap();
        assert!(s.kv.get("ns", "t", 1099).is_some());
        assert!(s.kv.get("ns", "t", 1100).is_none());
        assert_eq!(s.kv.expired(1100, 10).len(), 1);
        assert!(s.kv.expired(1099, 10).is_empty());
        // Overwriting without TTL or deleting drops the key from the expiry index.
        put(&mut s, "u", Some(50), None, 1000).unwrap();
        put(&mut s, "u", None, None, 1000).unwrap();
        assert_eq!(s.kv.expired(2000, 10).len(), 1, "only t is left to expire");
        s.apply(
            s.applied_lsn + 1,
            Record::KvDelete {
                namespace: "ns".into(),
                key: "t".into(),
            },
        );
        assert!(s.kv.expired(2000, 10).is_empty());
        assert_eq!(put(&mut s, "t", None, Some(0), 1100).unwrap(), 1);
    }

    #[test]
    fn if_exists_puts_only_over_a_live_key() {
        let mut s = ShardState::default();
        let xx = PutCondition {
            if_version: None,
            if_exists: true,
        };
        let plan = |s: &ShardState, c: PutCondition, now: u64| {
            s.kv.plan_put("ns".into(), "k".into(), b"v".to_vec(), None, c, now)
        };
        let err = plan(&s, xx, 0).unwrap_err();
        assert_eq!(
            err.code,
            flo_protocol::ErrorCode::NotFound,
            "{}",
            err.message
        );
        put(&mut s, "k", Some(100), None, 0).unwrap();
        assert!(plan(&s, xx, 50).is_ok());
        // Expired is absent.
        assert!(plan(&s, xx, 100).is_err());
        let both = PutCondition {
            if_version: Some(0),
            if_exists: true,
        };
        let err = plan(&s, both, 50).unwrap_err();
        assert_eq!(err.code, flo_protocol::ErrorCode::BadRequest);
    }

    #[test]
    fn a_ttl_beyond_the_timer_horizon_never_expires() {
        let mut s = ShardState::default();
        put(&mut s, "far", Some(KV_TTL_MS_MAX), None, 1000).unwrap();
        let entry = s.kv.get("ns", "far", u64::MAX).expect("never expires");
        assert_eq!(entry.expires_at_ms, None);
        let horizon = crate::clock::TIMER_HORIZON_MS;
        put(&mut s, "near", Some(horizon), None, 1000).unwrap();
        assert_eq!(
            s.kv.get("ns", "near", 0).unwrap().expires_at_ms,
            Some(1000 + horizon)
        );
        let err = put(&mut s, "over", Some(KV_TTL_MS_MAX + 1), None, 0).unwrap_err();
        assert_eq!(err.code, flo_protocol::ErrorCode::BadRequest);
    }

    #[test]
    fn list_is_ordered_prefixed_and_limited() {
        let mut s = ShardState::default();
        for k in ["b2", "a1", "b1", "b3", "c"] {
            put(&mut s, k, None, None, 0).unwrap();
        }
        let keys = |page: &KvPage| {
            page.items
                .iter()
                .map(|(k, _)| k.to_string())
                .collect::<Vec<_>>()
        };
        let page = s.kv.list("ns", "b", None, 2, 0).unwrap();
        assert_eq!(keys(&page), vec!["b1", "b2"]);
        assert_eq!(page.next.as_deref(), Some("b2"));
        // The next page goes on after the cursor, and ends the list.
        let page = s.kv.list("ns", "b", Some("b2"), 2, 0).unwrap();
        assert_eq!((keys(&page), page.next), (vec!["b3".to_string()], None));
        // A cursor before the prefix starts at the prefix.
        let page = s.kv.list("ns", "b", Some("a9"), 10, 0).unwrap();
        assert_eq!(keys(&page), vec!["b1", "b2", "b3"]);
        assert!(
            s.kv.list("other", "", None, 10, 0)
                .unwrap()
                .items
                .is_empty()
        );
    }

    #[test]
    fn a_list_passing_expired_keys_says_where_it_stopped() {
        let mut s = ShardState::default();
        for i in 0..5 {
            put(&mut s, &format!("k{i}"), Some(10), None, 0).unwrap();
        }
        put(&mut s, "k9", None, None, 0).unwrap();
        // At 100 ms the five are expired (not yet swept): passed over, not listed.
        let page = s.kv.list("ns", "k", None, 1, 100).unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].0, "k9");
        assert_eq!(page.next, None);
        assert!(page.expired_lsn > 0);
    }
}
