use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "flo",
    version,
    about = "flo: a durable execution server and its command-line client"
)]
pub struct Cli {
    /// Server address.
    #[arg(
        long,
        global = true,
        env = "FLO_ADDR",
        default_value = "127.0.0.1:9000"
    )]
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
    /// Actions: durable task types run as WebAssembly or by workers.
    #[command(subcommand)]
    Action(ActionCommand),
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
    /// Let clients move the server's clock forward (for tests; never in production).
    #[arg(long, hide = true)]
    pub test_clock: bool,
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

#[derive(Debug, Subcommand)]
pub enum ActionCommand {
    /// Register an action (again: bumps its version). With --wasm it runs inline on the
    /// server; without, workers execute it.
    Register {
        name: String,
        /// WebAssembly module (.wasm binary or .wat text).
        #[arg(long)]
        wasm: Option<PathBuf>,
        /// Longest an attempt may run, in ms.
        #[arg(long = "timeout")]
        timeout_ms: Option<u64>,
        #[arg(long)]
        max_retries: Option<u32>,
        /// Base delay between retries, in ms (doubles per attempt).
        #[arg(long = "retry-delay")]
        retry_delay_ms: Option<u64>,
        #[arg(long)]
        description: Option<String>,
        /// Memory limit of a WebAssembly action, in MiB.
        #[arg(long)]
        memory_limit_mb: Option<u32>,
    },
    /// Run an action with a JSON input; prints the run id.
    Invoke {
        name: String,
        /// Input, usually JSON.
        #[arg(default_value = "{}")]
        input: String,
        /// 0-255, higher runs first.
        #[arg(long)]
        priority: Option<u8>,
        /// Make the run available after this many ms.
        #[arg(long = "delay")]
        delay_ms: Option<u64>,
        /// The same key returns the same run instead of creating another.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Required worker labels, a flat JSON object.
        #[arg(long)]
        labels: Option<String>,
        /// Wait for the run to finish and print its output.
        #[arg(long)]
        wait: bool,
    },
    /// Show a run.
    Status { run_id: String },
    /// Show an action's definition.
    Info { name: String },
    /// List the actions of the namespace.
    List,
    /// List an action's runs, newest first.
    Runs {
        name: String,
        /// pending, running, completed, failed, cancelled or timed_out.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Cancel a pending or running run.
    Cancel { run_id: String },
    /// Delete an action (its runs stay queryable).
    Delete { name: String },
    /// Accept new invocations again.
    Enable { name: String },
    /// Refuse new invocations.
    Disable { name: String },
    /// Runs that failed or timed out after exhausting their retries.
    Dlq {
        name: String,
        #[arg(long)]
        limit: Option<u32>,
    },
}
