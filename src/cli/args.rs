use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "flo", version, about = "flo: a durable execution server and its command-line client")]
pub struct Cli {
    /// Server address.
    #[arg(long, global = true, env = "FLO_ADDR", default_value = "127.0.0.1:9000")]
    pub addr: String,
    /// Namespace to work in.
    #[arg(long, global = true, env = "FLO_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Print exactly one JSON document on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Server(ServerArgs),
    /// Server version, shard count, durability, per-shard log positions.
    Status,
    /// Key-value store.
    #[command(subcommand)]
    Kv(KvCommand),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// Acknowledge mutations after fdatasync.
    Sync,
    /// Acknowledge before the sync (which follows within ~1 ms).
    Async,
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address every shard listens on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// Data directory (created if missing).
    #[arg(long, default_value = "./flo-data")]
    pub data_dir: PathBuf,
    /// Number of shards (default: one per available core, or the data directory's count).
    #[arg(long)]
    pub shards: Option<u32>,
    #[arg(long, value_enum, default_value = "sync")]
    pub durability: DurabilityArg,
    /// Size at which log segments roll.
    #[arg(long, default_value_t = 64 << 20)]
    pub segment_bytes: u64,
    /// Locked memory per shard for I/O buffers, in MiB (see README: ulimit -l).
    #[arg(long, default_value_t = 2)]
    pub io_memory_mb: usize,
}

#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Store a value.
    Put {
        key: String,
        value: String,
        /// Expire the key after this many milliseconds.
        #[arg(long = "ttl")]
        ttl_ms: Option<u64>,
        /// Only if the key's current version is this (0: only if absent).
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Read a value.
    Get { key: String },
    /// Delete a key.
    Delete {
        key: String,
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// List keys by prefix, in key order.
    List {
        prefix: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
}
