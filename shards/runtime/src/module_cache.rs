//! A map bounded by the bytes of its values: once they exceed the budget, the least recently
//! used entries are dropped. The cache of compiled modules (`wasm_pool.rs`), one for all
//! shards, keyed by content hash; a plain data structure (no locking, no I/O) so that it can
//! be tested alone.

use std::collections::HashMap;
use std::hash::Hash;

/// Default budget of the compiled-module cache (`--module-cache-mb`).
pub const MODULE_CACHE_BYTES_DEFAULT: u64 = 512 << 20;

struct Slot<V> {
    value: V,
    bytes: u64,
    /// `LruBytes::clock` at the last use: the smallest is the least recently used.
    used: u64,
}

pub(crate) struct LruBytes<K, V> {
    budget_bytes: u64,
    bytes: u64,
    /// Ticks once per use.
    clock: u64,
    /// Ticks once per insertion or eviction.
    generation: u64,
    slots: HashMap<K, Slot<V>>,
}

impl<K: Hash + Eq + Clone, V: Clone> LruBytes<K, V> {
    pub fn new(budget_bytes: u64) -> Self {
        LruBytes {
            budget_bytes,
            bytes: 0,
            clock: 0,
            generation: 0,
            slots: HashMap::new(),
        }
    }

    /// The value of `key`, now the most recently used. O(1).
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.clock += 1;
        let slot = self.slots.get_mut(key)?;
        slot.used = self.clock;
        Some(slot.value.clone())
    }

    /// Keeps `value` (of `bytes`) as the most recently used, replacing what `key` held, then
    /// drops the least recently used entries until the total fits the budget. A value larger
    /// than the whole budget is not kept (the caller still has it). Eviction scans every
    /// entry: a cache of compiled modules holds few, and evicts only when it inserts.
    pub fn insert(&mut self, key: K, value: V, bytes: u64) {
        self.clock += 1;
        self.generation += 1;
        if let Some(old) = self.slots.remove(&key) {
            self.bytes -= old.bytes;
        }
        if bytes > self.budget_bytes {
            return;
        }
        self.bytes += bytes;
        let used = self.clock;
        self.slots.insert(key, Slot { value, bytes, used });
        while self.bytes > self.budget_bytes {
            let Some(oldest) = self
                .slots
                .iter()
                .min_by_key(|(_, slot)| slot.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(slot) = self.slots.remove(&oldest) {
                self.bytes -= slot.bytes;
            }
        }
        debug_assert_eq!(
            self.bytes,
            self.slots.values().map(|s| s.bytes).sum::<u64>()
        );
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Changes so far: of two readings, the higher is the newer.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(cache: &LruBytes<&'static str, u32>) -> Vec<&'static str> {
        let mut keys: Vec<_> = cache.slots.keys().copied().collect();
        keys.sort();
        keys
    }

    #[test]
    fn the_least_recently_used_go_first_once_over_budget() {
        let mut cache = LruBytes::new(100);
        cache.insert("a", 1, 40);
        cache.insert("b", 2, 40);
        assert_eq!((cache.bytes(), cache.len()), (80, 2));
        // `a` used after `b`: `b` is the oldest now.
        assert_eq!(cache.get(&"a"), Some(1));
        cache.insert("c", 3, 40);
        assert_eq!(keys(&cache), ["a", "c"]);
        assert_eq!(cache.bytes(), 80);
        assert_eq!(cache.get(&"b"), None);
        // One large entry pushes out both others.
        cache.insert("d", 4, 90);
        assert_eq!(keys(&cache), ["d"]);
        assert_eq!(cache.bytes(), 90);
    }

    #[test]
    fn replacing_a_key_counts_its_new_size_only() {
        let mut cache = LruBytes::new(100);
        cache.insert("a", 1, 60);
        cache.insert("a", 2, 30);
        assert_eq!((cache.bytes(), cache.len()), (30, 1));
        assert_eq!(cache.get(&"a"), Some(2));
        cache.insert("b", 3, 70);
        assert_eq!(keys(&cache), ["a", "b"]);
        assert_eq!(cache.bytes(), 100, "exactly the budget is allowed");
    }

    #[test]
    fn a_value_over_the_budget_is_not_kept_and_evicts_nothing() {
        let mut cache = LruBytes::new(100);
        cache.insert("a", 1, 50);
        cache.insert("huge", 2, 101);
        assert_eq!(keys(&cache), ["a"]);
        assert_eq!(cache.bytes(), 50);
        assert_eq!(cache.get(&"huge"), None);
        // It replaced an older value of the same key, which is gone too.
        cache.insert("a", 3, 500);
        assert_eq!((cache.bytes(), cache.len()), (0, 0));
    }

    #[test]
    fn every_change_moves_the_generation_and_reads_do_not() {
        let mut cache = LruBytes::new(10);
        let g0 = cache.generation();
        cache.insert("a", 1, 5);
        let g1 = cache.generation();
        assert!(g1 > g0);
        cache.get(&"a");
        cache.get(&"missing");
        assert_eq!(cache.generation(), g1);
        cache.insert("b", 2, 50);
        assert!(cache.generation() > g1);
        assert_eq!(cache.budget_bytes(), 10);
    }
}
