use std::net::SocketAddr;
use std::path::PathBuf;

/// When a mutation is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After its records are written and fdatasync'ed (the default).
    Sync,
    /// Before the sync; the flusher writes and syncs right behind (within ~1 ms).
    Async,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// None: the data directory's count, or one per available core for a new one.
    pub shards: Option<u32>,
    pub durability: Durability,
    pub segment_bytes: u64,
    /// Locked memory per shard for storage I/O buffers (glommio `io_memory`).
    pub io_memory_bytes: usize,
    /// Let clients move the clock forward (tests of timers, retries, delays).
    pub test_clock: bool,
}
