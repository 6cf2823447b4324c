//! Command line.

use crate::mix::{MIX_DEFAULT, Mix};
use crate::pacing::{Pace, parse_duration};
use crate::workload::Workload;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_ADDR: &str = "127.0.0.1:9000";

/// Highest `--pipeline`: the driver packs a slot index into the low bits of request ids.
pub const PIPELINE_MAX: u32 = 1 << 16;

#[derive(Debug, Parser)]
#[command(
    name = "flo-loadtest",
    version,
    about = "Load generator for the flo server: runs a workload and reports throughput and latency"
)]
pub struct Args {
    /// Workload to run.
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Start a server of our own (in a temporary directory) and stop it at the end.
    #[arg(long, conflicts_with = "addr")]
    pub spawn: bool,
    /// Address of a running server (default 127.0.0.1:9000 when --spawn is not given).
    #[arg(long)]
    pub addr: Option<String>,
    /// Token for a server started with --auth-file (an admin token: the workloads register
    /// their actions and workflows first).
    #[arg(long, env = "FLO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Total operations (with --rate: --rate times --duration instead).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: u64,
    /// Most operations in flight at once over every connection: requests awaiting their
    /// reply, and for the `worker` workload (and the worker tasks of `mixed`) tasks invoked
    /// and not yet completed (default: no bound but --connections × --pipeline).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_outstanding: Option<u64>,
    /// Open loop: send operations at this many a second for --duration, whether or not
    /// earlier ones were answered; latency counts from each operation's intended send time.
    #[arg(long, requires = "duration", conflicts_with = "ops",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// How long --rate sends: a whole number with a unit, ms, s, m or h (30s, 10m).
    #[arg(long, requires = "rate", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Client connections, one thread each.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: u32,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=PIPELINE_MAX as i64))]
    pub pipeline: u32,
    /// Bytes of each value written.
    #[arg(long, default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(0..=flo_protocol::KV_VALUE_BYTES_MAX as i64))]
    pub value_bytes: u32,
    /// `workflow`, `workflow-worker`: bytes of each run's input, a JSON object padded to
    /// about this size (default: `{"n":1}`, 7 bytes), to see what payloads cost.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=(1 << 20)))]
    pub input_bytes: Option<u32>,
    /// Distinct keys, cycled (default: as many as --ops).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,
    /// Namespace the workload works in.
    #[arg(long, default_value = "loadtest")]
    pub namespace: String,
    /// Print exactly one JSON document on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write the operations' latency histogram to FILE as HdrHistogram's percentile
    /// distribution (`.hgrm`, milliseconds), for HdrHistogram's plotter.
    #[arg(long, value_name = "FILE")]
    pub histogram_out: Option<PathBuf>,
    /// Safety limit: stop issuing requests after this many seconds and report what was done.
    #[arg(long, default_value_t = 600.0)]
    pub max_secs: f64,

    /// Queries the `query` workload asks once the store is filled.
    #[arg(long, default_value_t = 1000)]
    pub queries: u64,
    /// `query` workload: the workflow without search attributes, no queries (to measure
    /// what the attributes cost). `plan` workload: the step runs the action, no plan (to
    /// measure what a plan step costs).
    #[arg(long)]
    pub plain_workflow: bool,
    /// `workflow` workload: a 1 → 3 → 1 fork and join of the action (five steps, three at
    /// once) instead of three steps in a row.
    #[arg(long)]
    pub fork: bool,
    /// `workflow` workload: every step keeps its output to itself (`skipOutputMapping:
    /// true`), so the run's state is not touched (to measure what the state costs).
    #[arg(long)]
    pub skip_output_mapping: bool,
    /// `wasm-invoke`, `workflow`, `mixed`: the action's module opts in to instance reuse
    /// (exports `flo_reuse_instance`), so that its executions run in kept instances.
    #[arg(long)]
    pub reuse_instances: bool,
    /// Leave each connection on the shard the kernel gives it (all shards listen on the
    /// port; it picks one per connection, at random). By default connections that land on
    /// a shard holding its share already are opened again, so that they spread evenly and
    /// every shard starts as many runs.
    #[arg(long)]
    pub no_spread: bool,
    /// `kv-put`: each connection puts only keys its shard owns (asking the server for its
    /// shard map), as a client routing every key to a connection on its owner would; the
    /// puts then take no hop between shards.
    #[arg(long, conflicts_with = "no_spread")]
    pub route_keys: bool,

    /// The interval of the `schedule` workload's schedules, in milliseconds.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(100..))]
    pub interval_ms: u64,

    /// Records per append (`stream-append`, `stream-consume`).
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=flo_protocol::STREAM_APPEND_RECORDS_MAX as i64))]
    pub batch: u32,

    /// Worker connections of the `worker` workload (consumers of `stream-consume`), one
    /// thread each.
    #[arg(long, default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1024),
          help_heading = "Worker options (with --workload worker, workflow-worker, mixed)")]
    pub workers: u32,
    /// Most tasks one worker takes per await (also its registered max concurrency).
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=flo_protocol::TASK_AWAIT_TASKS_MAX as i64),
          help_heading = "Worker options (with --workload worker, workflow-worker, mixed)")]
    pub await_batch: u32,
    /// The user-hosted action invoked and completed (registered by the workload).
    #[arg(
        long,
        default_value = "lt-task",
        help_heading = "Worker options (with --workload worker, workflow-worker, mixed)"
    )]
    pub action_name: String,

    /// The blend of the `mixed` workload: NAME=WEIGHT,... with names kv (puts and gets half
    /// and half), kv-put, kv-get, wasm, worker (tasks completed by --workers workers) and
    /// workflow (3-step WASM workflow starts).
    #[arg(
        long,
        default_value = MIX_DEFAULT,
        value_parser = Mix::parse,
        help_heading = "Mixed workload options (with --workload mixed)"
    )]
    pub mix: Mix,

    /// Shards of the spawned server (default: the server's own default).
    #[arg(
        long,
        requires = "spawn",
        help_heading = "Spawn options (with --spawn)"
    )]
    pub shards: Option<u32>,
    /// Durability of the spawned server [default: sync].
    #[arg(
        long,
        value_enum,
        requires = "spawn",
        help_heading = "Spawn options (with --spawn)"
    )]
    pub durability: Option<DurabilityArg>,
    /// The flo executable to spawn (default: `flo` next to this executable).
    #[arg(
        long,
        requires = "spawn",
        help_heading = "Spawn options (with --spawn)"
    )]
    pub flo_bin: Option<PathBuf>,
    /// The spawned server's HTTP port (metrics and console): an address, or `off` for none
    /// (then its shards count no metrics) [default: 127.0.0.1:0, any free port].
    #[arg(
        long,
        value_name = "ADDR|off",
        requires = "spawn",
        help_heading = "Spawn options (with --spawn)"
    )]
    pub http: Option<String>,
    /// Starts the spawned server with `--pin-shards` (each shard's thread on a CPU of its
    /// own).
    #[arg(
        long,
        requires = "spawn",
        help_heading = "Spawn options (with --spawn)"
    )]
    pub pin_shards: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    Sync,
    Async,
}

impl DurabilityArg {
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityArg::Sync => "sync",
            DurabilityArg::Async => "async",
        }
    }
}

impl Args {
    /// Distinct keys the workload cycles through.
    pub fn key_count(&self) -> u64 {
        self.keys.unwrap_or(self.total_ops())
    }

    /// The open-loop schedule, with --rate.
    pub fn pace(&self) -> Option<Pace> {
        self.rate.map(Pace::new)
    }

    /// Operations to run: --ops, or with --rate all those due within --duration.
    pub fn total_ops(&self) -> u64 {
        match (self.pace(), self.duration) {
            (Some(pace), Some(duration)) => pace.ops_in(duration).max(1),
            _ => self.ops,
        }
    }

    /// Validates what clap cannot express.
    pub fn check(&self) -> Result<(), String> {
        if !(self.max_secs > 0.0 && self.max_secs.is_finite()) {
            return Err("--max-secs must be a positive number of seconds".into());
        }
        if self.namespace.is_empty() {
            return Err("--namespace must not be empty".into());
        }
        if self.action_name.is_empty() {
            return Err("--action-name must not be empty".into());
        }
        if let Some(duration) = self.duration
            && duration.as_secs_f64() > self.max_secs
        {
            return Err(format!(
                "--duration ({} s) is longer than --max-secs ({} s): raise --max-secs",
                duration.as_secs_f64(),
                self.max_secs
            ));
        }
        let driven = !matches!(self.workload, Workload::Schedule);
        if !driven && (self.rate.is_some() || self.max_outstanding.is_some()) {
            return Err(format!(
                "--rate and --max-outstanding do not apply to the {} workload",
                self.workload.name()
            ));
        }
        if self.histogram_out.is_some()
            && matches!(self.workload, Workload::Schedule | Workload::Query)
        {
            return Err(format!(
                "--histogram-out does not apply to the {} workload (it reports no operation \
                 latencies)",
                self.workload.name()
            ));
        }
        Ok(())
    }
}
