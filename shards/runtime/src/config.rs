use flo_engine::Durability;
use flo_engine::auth::AuthTable;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// The HTTP port of `/metrics`, `/healthz` and `/readyz` (`--http`); None: none.
    pub http: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// None: the data directory's count, or one per available core for a new one.
    pub shards: Option<u32>,
    pub durability: Durability,
    pub segment_bytes: u64,
    /// Log batches written at once per shard (`--log-writes`), acknowledged in order.
    pub log_writes: usize,
    /// A snapshot is taken after this many bytes of log (and at a graceful stop).
    pub snapshot_bytes: u64,
    /// Finished runs are forgotten this long after they finished.
    pub retention_ms: u64,
    /// A client's operation waiting this long on another shard answers `unavailable`.
    pub peer_timeout_ms: u64,
    /// Client connections open at once, over all shards; one more is told `overloaded`
    /// and closed.
    pub max_connections: usize,
    /// A connection with no request in flight that sends nothing for this long is told so
    /// and closed (0: never).
    pub idle_timeout_ms: u64,
    /// A frame whose first bytes arrived must arrive whole within this long, or its
    /// connection is closed (`FRAME_DEADLINE_MS_DEFAULT`; tests set less).
    pub frame_deadline_ms: u64,
    /// Locked memory per shard for storage I/O buffers (glommio `io_memory`).
    pub io_memory_bytes: usize,
    /// Each shard's thread runs on one CPU of its own (`--pin-shards`); otherwise the
    /// kernel places the shards' threads (and their I/O workers) where it sees fit.
    pub pin_shards: bool,
    /// Compiled WebAssembly modules kept for reuse (all shards): beyond this, the least
    /// recently used are dropped and compiled again when next used.
    pub module_cache_bytes: u64,
    /// Gives the calling thread's freed memory back to the system (the allocator is the
    /// binary's choice): called on each shard after start-up and after each snapshot.
    pub release_memory: fn(),
    /// Let clients move the clock forward (tests of timers, retries, delays).
    pub test_clock: bool,
    /// Tests: a file holding a capacity in bytes that the data directory's files may not
    /// exceed, read again at each check (a full disk without a small file system).
    pub fault_disk_capacity_file: Option<PathBuf>,
    /// The auth file's tokens: every connection must present one in its handshake and
    /// may do only what it grants. None: no authentication (loopback only, unless the
    /// caller allowed more).
    pub auth: Option<Arc<AuthTable>>,
    /// Steps per workflow run (`--max-run-steps`) and WebAssembly executions at once per
    /// shard (`--max-concurrent-executions`).
    pub limits: flo_engine::Limits,
}
