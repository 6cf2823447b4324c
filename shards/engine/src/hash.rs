//! Routing: `partition = stable_hash(namespace, key) % partitions`, then the partition's
//! owner shard. The hash is fixed forever: data placement depends on it.

/// Number of partitions of a new data directory. Larger than any core count.
pub const PARTITIONS_DEFAULT: u32 = 256;
/// Name of the hash, stated in the shard map so clients can route themselves.
pub const HASH_NAME: &str = "xxh3-64";

/// xxh3-64 (seed 0) over `namespace`, one 0xff byte, `key` (`flo_protocol::key_hash`, so
/// that clients routing their own requests place keys as the server does).
pub fn stable_hash(namespace: &str, key: &str) -> u64 {
    flo_protocol::key_hash(namespace, key)
}

/// Maps keys to partitions and partitions to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partitioning {
    pub partitions: u32,
    pub shards: u32,
}

impl Partitioning {
    pub fn new(partitions: u32, shards: u32) -> Self {
        assert!(
            shards >= 1 && partitions >= shards,
            "need 1 <= shards <= partitions"
        );
        Partitioning { partitions, shards }
    }

    pub fn partition(&self, namespace: &str, key: &str) -> u32 {
        (stable_hash(namespace, key) % self.partitions as u64) as u32
    }

    /// Partitions are dealt round-robin over shards.
    pub fn owner(&self, partition: u32) -> u32 {
        partition % self.shards
    }

    pub fn shard_of(&self, namespace: &str, key: &str) -> u32 {
        self.owner(self.partition(namespace, key))
    }

    pub fn owners(&self) -> Vec<u32> {
        (0..self.partitions).map(|p| self.owner(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_pinned() {
        // These values must never change: data on disk is placed by them.
        assert_eq!(stable_hash("default", "a"), stable_hash("default", "a"));
        assert_ne!(stable_hash("default", "ab"), stable_hash("defaulta", "b"));
        let p = Partitioning::new(256, 2);
        let pinned: Vec<u32> = ["a", "b", "order-1", "user:42"]
            .iter()
            .map(|k| p.partition("default", k))
            .collect();
        assert_eq!(pinned, PINNED_PARTITIONS);
    }

    const PINNED_PARTITIONS: [u32; 4] = [110, 224, 255, 85];

    #[test]
    fn a_clients_shard_map_places_keys_as_the_server_does() {
        let p = Partitioning::new(256, 3);
        let map = flo_protocol::ShardMap {
            hash: HASH_NAME.into(),
            partitions: p.partitions,
            shard_count: p.shards,
            owners: p.owners(),
        };
        for i in 0..1000 {
            let key = format!("key-{i}");
            assert_eq!(map.shard_of("ns", &key), Some(p.shard_of("ns", &key)));
        }
    }

    #[test]
    fn keys_spread_over_shards() {
        let p = Partitioning::new(256, 4);
        let mut counts = [0u32; 4];
        for i in 0..10_000 {
            counts[p.shard_of("ns", &format!("key-{i}")) as usize] += 1;
        }
        for c in counts {
            assert!((2000..3000).contains(&c), "{counts:?}");
        }
    }
}
