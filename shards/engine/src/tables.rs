//! The engine's hash tables. Keyed per process by default (keys come from clients: a fixed
//! key would invite collisions on purpose); a deterministic simulation fixes the keys
//! (`fix_table_seeds`) so that everything that iterates a table does so in the same order
//! from one run to the next, and a seed replays exactly.

use ahash::{AHasher, RandomState};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};

static FIXED_SEEDS: AtomicBool = AtomicBool::new(false);

#[cfg(any(test, feature = "test-support"))]
/// From now on, tables created in this process hash with fixed keys (simulation and tests).
pub fn fix_table_seeds() {
    FIXED_SEEDS.store(true, Ordering::SeqCst);
}

#[derive(Clone, Debug)]
pub struct TableHasher(RandomState);

impl Default for TableHasher {
    fn default() -> Self {
        if FIXED_SEEDS.load(Ordering::Relaxed) {
            TableHasher(RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ))
        } else {
            TableHasher(RandomState::new())
        }
    }
}

impl BuildHasher for TableHasher {
    type Hasher = AHasher;

    fn build_hasher(&self) -> AHasher {
        self.0.build_hasher()
    }
}

pub type HashMap<K, V> = std::collections::HashMap<K, V, TableHasher>;
pub type HashSet<K> = std::collections::HashSet<K, TableHasher>;

/// A key of two strings, looked up without owning them: a table keyed by `(String,
/// String)` answers `get(pair(&(a, b)))` with no allocation. Hashes and orders as the
/// tuple does (first string, then second).
pub trait StrPair {
    fn parts(&self) -> (&str, &str);
}

impl StrPair for (String, String) {
    fn parts(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl StrPair for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

/// `key` as a lookup key of a table keyed by `(String, String)`.
pub fn pair<'a>(key: &'a (&'a str, &'a str)) -> &'a (dyn StrPair + 'a) {
    key
}

impl std::hash::Hash for dyn StrPair + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (a, b) = self.parts();
        a.hash(state);
        b.hash(state);
    }
}

impl PartialEq for dyn StrPair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn StrPair + '_ {}

impl PartialOrd for dyn StrPair + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn StrPair + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl<'a> std::borrow::Borrow<dyn StrPair + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn StrPair + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_pair_of_strs_finds_what_the_owned_pair_keys() {
        let mut hashed: HashMap<(String, String), u32> = HashMap::default();
        let mut ordered: BTreeMap<(String, String), u32> = BTreeMap::new();
        for (i, (a, b)) in [("ns", "a"), ("ns", "b"), ("n", "sa"), ("nsa", "")]
            .into_iter()
            .enumerate()
        {
            hashed.insert((a.to_string(), b.to_string()), i as u32);
            ordered.insert((a.to_string(), b.to_string()), i as u32);
        }
        for (i, key) in [("ns", "a"), ("ns", "b"), ("n", "sa"), ("nsa", "")]
            .iter()
            .enumerate()
        {
            assert_eq!(hashed.get(pair(key)), Some(&(i as u32)), "{key:?}");
            assert_eq!(ordered.get(pair(key)), Some(&(i as u32)), "{key:?}");
        }
        assert_eq!(hashed.get(pair(&("ns", "c"))), None);
        assert_eq!(ordered.get(pair(&("n", "s"))), None);
        // Ordered as the tuples are: a range over the owned keys agrees with a sort of
        // the borrowed ones.
        let mut sorted = [("ns", "a"), ("ns", "b"), ("n", "sa"), ("nsa", "")];
        sorted.sort();
        let keys: Vec<(&str, &str)> = ordered
            .keys()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(keys, sorted);
    }
}
