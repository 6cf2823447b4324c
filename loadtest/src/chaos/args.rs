//! Command line.

use clap::Parser;
use std::path::PathBuf;

/// Most load threads or worker threads.
pub const THREADS_MAX: u32 = 64;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "flo-chaos",
    version,
    about = "Crash-loop harness: runs a mixed load against a flo server of its own, kills it \
             (SIGKILL) at a random moment, restarts it on the same data directory and port, \
             and checks that everything acknowledged survived"
)]
pub struct Args {
    /// Cycles of load, kill, restart and verification.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub cycles: u64,
    /// Seed of every random choice (default: from the clock; printed either way). The
    /// operations each thread sends and the kill delays follow from it; where in the load
    /// the kill lands depends on timing.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Load threads (one connection each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=THREADS_MAX as i64))]
    pub clients: u32,
    /// Worker threads completing the user-hosted tasks (one connection each).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=THREADS_MAX as i64))]
    pub workers: u32,
    /// Shortest load phase of a cycle, before the kill, in ms.
    #[arg(long, default_value_t = 200)]
    pub load_min_ms: u64,
    /// Longest load phase of a cycle, before the kill, in ms.
    #[arg(long, default_value_t = 3000)]
    pub load_max_ms: u64,
    /// How long, from a restart, every run has to reach a final status (ms).
    #[arg(long, default_value_t = 30_000)]
    pub settle_ms: u64,
    /// The server's `--retention`, in seconds: finished runs are forgotten this long after
    /// they finished, so the log's segments are deleted and the disk stays bounded. Runs
    /// verified in earlier cycles are sampled while they must still be there.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(30..))]
    pub retention_secs: u64,
    /// Shards of the server.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub shards: u32,
    /// The flo executable (default: `flo` next to this executable).
    #[arg(long)]
    pub flo_bin: Option<PathBuf>,
    /// Data directory (created; must not hold another server's data). Default: a temporary
    /// one, removed at the end unless a violation was found.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// One more `flo server` argument (repeat for several: `--server-arg=--durability=async`).
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

impl Args {
    /// Validates what clap cannot express.
    pub fn check(&self) -> Result<(), String> {
        if self.load_min_ms > self.load_max_ms {
            return Err("--load-min-ms must not exceed --load-max-ms".into());
        }
        if self.settle_ms == 0 {
            return Err("--settle-ms must be positive".into());
        }
        if self
            .server_args
            .iter()
            .any(|a| a.starts_with("--retention"))
        {
            return Err("give the retention with --retention-secs (the checks need it)".into());
        }
        Ok(())
    }

    /// The command that replays this campaign up to `cycle`: what decides the operations.
    pub fn replay(&self, seed: u64, cycle: u64) -> String {
        let mut line = format!(
            "flo-chaos --seed {seed} --cycles {cycle} --clients {} --workers {} --load-min-ms {} \
             --load-max-ms {} --retention-secs {} --shards {}",
            self.clients,
            self.workers,
            self.load_min_ms,
            self.load_max_ms,
            self.retention_secs,
            self.shards
        );
        for arg in &self.server_args {
            line.push_str(&format!(" --server-arg={arg}"));
        }
        line
    }
}
