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
