use super::arg_value::{ArgBytes, ArgText, parse_bytes, parse_text};
use super::duration::parse_ttl;
use clap::{Args, Parser, Subcommand, ValueEnum};
use flo::protocol::{
    EVENTS_LIMIT_MAX, HISTORY_LIMIT_MAX, KV_LIST_LIMIT_MAX, KV_WAIT_MS_MAX, LEASE_EXTEND_MS_MAX,
    RUN_ID_BYTES_MAX, RUN_LIST_LIMIT_MAX, TASK_AWAIT_MS_MAX, TASK_AWAIT_TASKS_MAX,
};
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
        default_value = "127.0.0.1:9000",
        value_parser = parse_addr
    )]
    pub addr: String,
    /// Namespace to work in.
    #[arg(long, global = true, env = "FLO_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Token presented to a server started with --auth-file.
    #[arg(long, global = true, env = "FLO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
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
    /// Workers: register, take tasks of user-hosted actions and report their results.
    #[command(subcommand)]
    Worker(WorkerCommand),
    /// Workflows: YAML definitions of steps and transitions, their runs, signals and
    /// history.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Streams: append-only records in partitions, read by id.
    #[command(subcommand)]
    Stream(super::stream::StreamCommand),
    /// Schedules: the cron and interval schedules of workflows (`schedule:`).
    #[command(subcommand)]
    Schedule(super::schedule::ScheduleCommand),
    /// Inline plans: publish a cache-invalidation event (`flo workflow plan-status` shows
    /// their executors).
    #[command(subcommand)]
    Plan(super::plan::PlanCommand),
    /// Webhook deliveries: those given up on, those waiting; send a failed one again.
    #[command(subcommand)]
    Webhook(super::webhook::WebhookCommand),
    /// Check a definition without a server.
    #[command(subcommand)]
    Validate(ValidateCommand),
    /// Print a shell completion script on stdout: `source <(flo completions bash)`, or
    /// see docs/cli.md for zsh and fish.
    Completions {
        /// bash, zsh, fish (also elvish, powershell).
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// Acknowledge mutations once their log records are durable (written and synced).
    Sync,
    /// Acknowledge before the sync (which follows within ~1 ms).
    Async,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormatArg {
    /// `TIME LEVEL TARGET: MESSAGE FIELD=VALUE...`
    Text,
    /// One JSON object a line: timestamp, level, target, message and the event's fields.
    Json,
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address every shard listens on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// HTTP address of /metrics (Prometheus), /healthz, /readyz and the web console (`/`),
    /// or `off`. With --auth-file, /metrics, /readyz and the console's API want
    /// `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "ADDRESS|off", default_value = "127.0.0.1:9001", value_parser = parse_http)]
    pub http: HttpArg,
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
    /// Log batches each shard writes at once (each synced, acknowledged in order): a
    /// record that comes while a batch is being written starts its own write. 1 writes one
    /// batch at a time; more than 2 helps on disks that sync many writes at once (NVMe).
    #[arg(long, value_name = "N", default_value_t = flo_runtime::LOG_WRITES_DEFAULT as u64,
          value_parser = clap::value_parser!(u64).range(1..=flo_runtime::LOG_WRITES_MAX as u64))]
    pub log_writes: u64,
    /// Take a snapshot of each shard's state after this many bytes of log (and at a graceful
    /// stop): recovery replays only the log after it, and older segments can be deleted.
    #[arg(long, default_value_t = flo_runtime::SNAPSHOT_BYTES_DEFAULT)]
    pub snapshot_bytes: u64,
    /// How long finished runs are kept (status, history, lists, idempotency keys): `30s`,
    /// `12h`, `7d`; a bare number is milliseconds.
    #[arg(long, default_value = "7d", value_parser = parse_retention)]
    pub retention: u64,
    /// A request waiting this long on another shard's answer fails with `unavailable`
    /// (a stuck shard does not hang its clients): `500ms`, `30s`.
    #[arg(long, default_value = "30s", value_parser = parse_peer_timeout)]
    pub peer_timeout: u64,
    /// Client connections open at once (all shards); one more is answered `overloaded`
    /// and closed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// A connection with no request in flight that sends nothing for this long is closed
    /// (told first; the SDK's Client connects again by itself): `30s`, `15m`; 0: never.
    #[arg(long, default_value = "15m", value_parser = parse_idle_timeout)]
    pub idle_timeout: u64,
    /// A frame whose first bytes arrived must arrive whole within this many ms, or its
    /// connection is closed (for tests; 30 s otherwise).
    #[arg(long, hide = true, default_value_t = flo_runtime::FRAME_DEADLINE_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frame_deadline_ms: u64,
    /// Locked memory per shard for I/O buffers, in MiB (see README: ulimit -l).
    #[arg(long, default_value_t = 2)]
    pub io_memory_mb: usize,
    /// Runs each shard's thread on a CPU of its own, for a machine whose cores are flo's
    /// alone. Off by default: where the shards share their cores with other work (a load
    /// generator, other services), a pinned shard stalled for seconds now and then (see
    /// docs/operations.md, "Shard threads and CPUs").
    #[arg(long)]
    pub pin_shards: bool,
    /// Compiled WebAssembly modules kept for reuse (all shards), in MiB: beyond it the least
    /// recently used are dropped and compiled again when next used (0: none is kept).
    #[arg(long, default_value_t = flo_runtime::MODULE_CACHE_BYTES_DEFAULT >> 20,
          value_parser = clap::value_parser!(u64).range(..=1 << 20))]
    pub module_cache_mb: u64,
    /// Steps one workflow run may execute in all (each retry, poll and visit of a step in a
    /// loop counts): one more fails the run, saying so (a loop that never ends).
    #[arg(long, value_name = "N", default_value_t = flo_runtime::RUN_STEPS_MAX_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_steps: u64,
    /// WebAssembly executions at once per shard (the spec's `max_concurrent_executions`);
    /// more runs wait for a slot, shown `pending`.
    #[arg(long, value_name = "N", default_value_t = flo_runtime::WASM_SLOTS_DEFAULT as u64,
          value_parser = clap::value_parser!(u64).range(1..=flo_runtime::WASM_SLOTS_MAX as u64))]
    pub max_concurrent_executions: u64,
    /// Tokens, roles and namespaces (YAML, or TOML for a `.toml` file): every connection
    /// must present a token and may do only what it grants. See README, Authentication.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Without --auth-file, listen on a non-loopback address anyway: anyone who can reach
    /// it may do anything.
    #[arg(long)]
    pub insecure: bool,
    /// Which log events to write: a level (error, warn, info, debug, trace) or directives
    /// by target, `info,flo::http=warn,flo::guest=error` (RUST_LOG's syntax).
    #[arg(long = "log", value_name = "FILTER", env = "RUST_LOG",
          default_value = flo_runtime::LOG_FILTER_DEFAULT)]
    pub log_filter: String,
    /// How log events are written on stderr: `text`, or `json` (one object a line).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormatArg,
    /// Let clients move the server's clock forward (for tests; never in production).
    #[arg(long, hide = true)]
    pub test_clock: bool,
    /// Tests: the data directory's files may take at most the number of bytes this file
    /// holds (read again at each check), as if the disk were that small.
    #[arg(long, hide = true)]
    pub fault_disk_capacity_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Store a value.
    Put {
        key: String,
        /// The value: text, `@FILE` for a file's bytes, `-` for standard input (`@@` for a
        /// value starting with `@`).
        #[arg(value_parser = parse_bytes, allow_hyphen_values = true)]
        value: ArgBytes,
        /// Expire the key after this long: `500ms`, `1s`, `5m`, `2h`, or a bare number of
        /// milliseconds; 0 means no expiry. A put without --ttl clears an earlier one.
        #[arg(long = "ttl", value_name = "DURATION", value_parser = parse_ttl)]
        ttl_ms: Option<u64>,
        /// Only if the key's current version is this (0: only if absent); --cas V is the
        /// same.
        #[arg(long, visible_alias = "cas", value_name = "V")]
        if_version: Option<u64>,
        /// Only if the key is absent (the same as --if-version 0).
        #[arg(long, conflicts_with_all = ["xx", "if_version"])]
        nx: bool,
        /// Only if the key exists (not found otherwise).
        #[arg(long)]
        xx: bool,
    },
    /// Read a value. With --wait MS, wait for the key to exist; with --block MS, for a
    /// version newer than the one it holds now (the next write); with --after-version V
    /// (and either), for a version newer than V. Not found when none came in time.
    Get {
        key: String,
        /// Wait up to this many ms for the key to exist (0: answer at once).
        #[arg(long = "wait", value_name = "MS", conflicts_with = "block_ms",
              value_parser = clap::value_parser!(u64).range(0..=KV_WAIT_MS_MAX))]
        wait_ms: Option<u64>,
        /// Wait up to this many ms for a version newer than the key's current one (a new
        /// write; any version if the key does not exist).
        #[arg(long = "block", value_name = "MS",
              value_parser = clap::value_parser!(u64).range(0..=KV_WAIT_MS_MAX))]
        block_ms: Option<u64>,
        /// Only a version newer than this counts.
        #[arg(long, value_name = "V")]
        after_version: Option<u64>,
    },
    /// Delete a key.
    Delete {
        key: String,
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// List keys by prefix, in key order (a page; the next with --cursor).
    List {
        prefix: Option<String>,
        #[arg(long, value_name = "N", value_parser = limit_parser(KV_LIST_LIMIT_MAX))]
        limit: Option<u32>,
        /// Where to go on: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
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
        /// The module's export its executions call [default: handle].
        #[arg(long, value_name = "EXPORT")]
        entrypoint: Option<String>,
    },
    /// Run an action with a JSON input; prints the run id.
    Invoke {
        name: String,
        /// Input, usually JSON: text, `@FILE`, or `-` for standard input.
        #[arg(default_value = "{}", value_parser = parse_bytes, allow_hyphen_values = true)]
        input: ArgBytes,
        /// 0-255, higher runs first.
        #[arg(long)]
        priority: Option<u8>,
        /// Make the run available after this many ms.
        #[arg(long = "delay")]
        delay_ms: Option<u64>,
        /// The same key returns the same run instead of creating another.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Required worker labels, a flat JSON object (or `@FILE`, `-`).
        #[arg(long, value_parser = parse_text)]
        labels: Option<ArgText>,
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
    /// List an action's runs: in-flight ones newest first, then finished ones (a page;
    /// the next with --cursor).
    Runs {
        /// The action (optional with --query: every action's runs).
        #[arg(required_unless_present = "query")]
        name: Option<String>,
        /// pending, running, completed, failed, cancelled or timed_out.
        #[arg(long)]
        status: Option<String>,
        /// Runs matching a query over status, action, run_id, created_at, updated_at,
        /// attempt, priority, dead_letter, workflow_run_id, outcome and labels.NAME, e.g.
        /// 'status = "failed" AND labels.region = "eu" AND created_at > "2026-11-01"'.
        #[arg(long)]
        query: Option<String>,
        #[arg(long, value_name = "N", value_parser = limit_parser(RUN_LIST_LIMIT_MAX))]
        limit: Option<u32>,
        /// Where to go on: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Cancel a pending or running run.
    Cancel { run_id: String },
    /// Delete an action (its runs stay queryable).
    Delete { name: String },
    /// Accept new invocations again.
    Enable { name: String },
    /// Refuse new invocations.
    Disable { name: String },
    /// Runs that failed or timed out after exhausting their retries (a page). With
    /// --redrive, queue them again as new attempts: the RUNs named, or every one of the
    /// action's (at most --limit).
    Dlq {
        name: String,
        /// Dead-lettered runs to redrive (with --redrive).
        #[arg(value_name = "RUN", requires = "redrive")]
        runs: Vec<String>,
        /// Queue the runs again as new attempts (pending, next attempt, no longer
        /// dead-lettered); prints each run redriven.
        #[arg(long)]
        redrive: bool,
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// Where to go on: the cursor the previous page printed.
        #[arg(long, conflicts_with = "redrive")]
        cursor: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Register a worker (again: replaces its registration); prints the worker.
    Register {
        /// Unique worker id.
        worker_id: String,
        /// Action names this worker handles.
        #[arg(required = true, value_name = "ACTION")]
        actions: Vec<String>,
        /// Most tasks the worker runs at once [server default: 10].
        #[arg(long)]
        max_concurrency: Option<u32>,
        /// The worker's labels, a flat JSON object (tasks requiring labels go only to
        /// workers having them with equal values); `@FILE` or `-` reads it.
        #[arg(long, value_name = "JSON", value_parser = parse_text)]
        labels: Option<ArgText>,
        /// Arbitrary JSON kept with the registration (version, environment...); `@FILE` or
        /// `-` reads it.
        #[arg(long, value_name = "JSON", value_parser = parse_text)]
        metadata: Option<ArgText>,
        /// Host identifier, for grouping workers on the same machine.
        #[arg(long)]
        machine_id: Option<String>,
    },
    /// Wait for a task of the given actions and lease it to the worker; prints the task
    /// (or "no task" when none came in time).
    Await {
        /// Action names to take tasks of.
        #[arg(required = true, value_name = "ACTION")]
        actions: Vec<String>,
        /// The registered worker taking the task.
        #[arg(long)]
        worker_id: String,
        /// Longest wait for a task, in ms.
        #[arg(long = "block", value_name = "MS", default_value_t = 30_000,
              value_parser = clap::value_parser!(u64).range(0..=TASK_AWAIT_MS_MAX))]
        block_ms: u64,
        /// Most tasks to take; above 1, --json prints an array.
        #[arg(long = "max", value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=TASK_AWAIT_TASKS_MAX as i64))]
        max_tasks: u32,
        /// Only tasks of the worker's home shard (the shard its id belongs to): no other
        /// shard is asked. For one worker per shard.
        #[arg(long)]
        home_only: bool,
    },
    /// Report a leased task done, with its result.
    Complete {
        /// The task id (the run id) from `worker await`.
        task_id: String,
        /// The worker holding the lease.
        #[arg(long)]
        worker_id: String,
        /// The task's action.
        #[arg(long)]
        action: String,
        /// Result, JSON text, `@FILE` or `-` for standard input [default: empty].
        #[arg(long, value_name = "JSON", value_parser = parse_text, allow_hyphen_values = true)]
        result: Option<ArgText>,
        /// Named outcome, for workflow routing [default: success].
        #[arg(long)]
        outcome: Option<String>,
        /// Refuse if the task is no longer at this attempt.
        #[arg(long)]
        attempt: Option<u32>,
        /// A workflow step's task: fields (a JSON object) to set in the run's state.
        #[arg(long, value_name = "JSON", value_parser = parse_text, allow_hyphen_values = true)]
        state: Option<ArgText>,
    },
    /// Report a leased task failed; prints the run as it is afterwards (pending again for
    /// a retry, or failed).
    Fail {
        /// The task id (the run id) from `worker await`.
        task_id: String,
        /// The worker holding the lease.
        #[arg(long)]
        worker_id: String,
        /// The task's action.
        #[arg(long)]
        action: String,
        /// What went wrong.
        #[arg(long)]
        error: String,
        /// Retry after backoff while the action's retries remain (else failed and
        /// dead-lettered).
        #[arg(long, conflicts_with = "non_retryable")]
        retry: bool,
        /// The task can never succeed: failed at once, not dead-lettered.
        #[arg(long)]
        non_retryable: bool,
        /// A code naming the error (e.g. invalid_card): an inline plan's `errors:` classify
        /// it as retryable or fatal.
        #[arg(long)]
        error_code: Option<String>,
        /// Refuse if the task is no longer at this attempt.
        #[arg(long)]
        attempt: Option<u32>,
    },
    /// Extend a leased task's lease; prints when it now expires.
    Touch {
        /// The task id (the run id) from `worker await`.
        task_id: String,
        /// The worker holding the lease.
        #[arg(long)]
        worker_id: String,
        /// The task's action.
        #[arg(long)]
        action: String,
        /// New lease length from now, in ms (a lease is never shortened).
        #[arg(long = "extend", value_name = "MS",
              value_parser = clap::value_parser!(u64).range(1..=LEASE_EXTEND_MS_MAX))]
        extend_ms: u64,
    },
    /// Report that the worker is alive, with its load; prints its status (`draining`:
    /// take no new tasks).
    Heartbeat {
        /// The worker id.
        #[arg(long)]
        worker_id: String,
        /// Tasks the worker has in flight.
        #[arg(long, value_name = "N", default_value_t = 0)]
        load: u32,
    },
    /// Give the worker no new tasks (for good); its leased tasks may still complete.
    Drain {
        /// The worker id.
        #[arg(long)]
        worker_id: String,
    },
    /// Remove the worker from the registry.
    Deregister {
        /// The worker id.
        #[arg(long)]
        worker_id: String,
    },
    /// List the workers of the namespace.
    List,
    /// Show a worker: status, load, counts, and per-action runs and failures.
    Info {
        /// The worker id.
        worker_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Create a workflow definition (a new version of it, or the same version unchanged);
    /// prints its name, version and validation warnings.
    Create {
        /// The YAML definition (`-` reads standard input).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// Start a run with a JSON input; prints the run id.
    Start {
        name: String,
        /// Input, JSON: text, `@FILE`, or `-` for standard input.
        #[arg(default_value = "{}", allow_hyphen_values = true, value_parser = parse_text)]
        input: ArgText,
        /// Definition version [default: the latest].
        #[arg(long)]
        version: Option<String>,
        /// The same key returns the same run instead of starting another.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The run's id (letters, digits, `-`, `_`, `.`, `:`) instead of one the server
        /// picks; a run with this id existing already is a conflict.
        #[arg(long, value_name = "ID", value_parser = parse_run_id)]
        run_id: Option<String>,
        /// The run's group: runs of a group share the state fields their steps set as
        /// `flow_group:NAME` (see `flo workflow shared-state --group`).
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// POST the run's events to this URL (with the definition's `webhook:` settings,
        /// or by default: the run's end, retried 6 times).
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
        /// Wait for the run to end and print its status.
        #[arg(long)]
        wait: bool,
    },
    /// The state fields runs share: a group's (`flow_group:NAME`, --group) or a
    /// definition's (`flow:NAME`, --flow).
    SharedState {
        #[arg(
            long,
            value_name = "G",
            required_unless_present = "flow",
            conflicts_with = "flow"
        )]
        group: Option<String>,
        #[arg(long, value_name = "WORKFLOW")]
        flow: Option<String>,
    },
    /// Show a run: status, current step, input, each step's outcome and output. With
    /// --watch, follow it until it ends.
    Status {
        run_id: String,
        /// Follow the run until it ends, showing it again on each change (with --json, one
        /// document per change); then exit 0 if it completed, 1 if it ended otherwise.
        #[arg(long)]
        watch: bool,
        /// With --watch: the longest between two looks at the run (`200ms`, `1s`; 50ms to
        /// 60s). Its end is seen at once.
        #[arg(long, value_name = "DURATION", default_value = "200ms",
              value_parser = parse_watch_interval, requires = "watch")]
        interval: u64,
    },
    /// A run's history events, oldest first (each with its sequence number). With --limit
    /// or --after: one page, and the --after of the next.
    History {
        run_id: String,
        /// Events per page [default: 100].
        #[arg(long, value_name = "N", value_parser = limit_parser(HISTORY_LIMIT_MAX))]
        limit: Option<u32>,
        /// Only events after this sequence number (the previous page's last).
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
    },
    /// The namespace's run event feed, oldest first: runs started, steps started, waiting
    /// and finished, state updated, runs continued, completed, failed, cancelled, timed out.
    Events {
        /// Only this workflow's runs.
        #[arg(long)]
        workflow: Option<String>,
        /// Start after this position (the cursor a previous page printed) [default: the
        /// oldest event kept].
        #[arg(long, value_name = "CURSOR")]
        from: Option<String>,
        /// Keep reading as events happen (until interrupted).
        #[arg(long)]
        follow: bool,
        /// Events per page [default: 100].
        #[arg(long, value_name = "N", value_parser = limit_parser(EVENTS_LIMIT_MAX))]
        limit: Option<u32>,
    },
    /// Send a typed signal to a run (kept until a step waits for that type).
    Signal {
        run_id: String,
        /// Signal type, as in the step's `waitForSignal.type`.
        #[arg(long = "type", value_name = "TYPE")]
        signal_type: String,
        /// Payload, JSON (becomes the waiting step's output): text, `@FILE`, or `-` for
        /// standard input.
        #[arg(default_value = "{}", allow_hyphen_values = true, value_parser = parse_text)]
        payload: ArgText,
    },
    /// Cancel a run that has not ended (and its child runs).
    Cancel {
        run_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Pause a run: no step starts until `resume` (what runs finishes; status on_hold).
    Pause { run_id: String },
    /// Resume a paused run.
    Resume { run_id: String },
    /// Start again the steps a run is stuck in (waiting for an action run or a child run,
    /// or sleeping before a retry); what they waited for is cancelled.
    Continue {
        run_id: String,
        /// Count the steps' visits from 1 again (for `maxVisits`).
        #[arg(long)]
        reset_visits: bool,
    },
    /// Runs with a step waiting longer than its `timeoutMs` (or --older-than): of NAME, or
    /// of every workflow.
    TimedOut {
        name: Option<String>,
        /// Waiting longer than this (e.g. 30s, 5m), for steps without a `timeoutMs` too.
        #[arg(long, value_parser = parse_ttl)]
        older_than: Option<u64>,
        /// At most this many runs per workflow.
        #[arg(long, default_value_t = 100, value_name = "N",
              value_parser = limit_parser(RUN_LIST_LIMIT_MAX))]
        limit: u32,
    },
    /// Continue every run `timed-out` lists, in batches; prints how many.
    ContinueTimedOut {
        name: Option<String>,
        #[arg(long, value_parser = parse_ttl)]
        older_than: Option<u64>,
        #[arg(long)]
        reset_visits: bool,
        /// Continue at most this many runs in all.
        #[arg(long, default_value_t = 10_000)]
        max: u32,
    },
    /// List the workflow definitions of the namespace.
    List,
    /// The executors of a workflow's inline plans on each shard: breaker, health score,
    /// samples, consecutive failures and rate-limit use (in memory: reset by a restart).
    PlanStatus {
        name: String,
        /// One plan only.
        #[arg(long)]
        plan: Option<String>,
    },
    /// List a workflow's runs: in-flight ones newest first, then finished ones (a page;
    /// the next with --cursor).
    ListRuns {
        /// The workflow (optional with --query: every workflow with search attributes).
        name: Option<String>,
        /// pending, running, waiting, completed, failed, cancelled or timed_out.
        #[arg(long)]
        status: Option<String>,
        /// Runs matching a query over status, workflow, run_id, started_at, updated_at and
        /// the search attributes, e.g. 'customer = "c-1" AND amount > 100'.
        #[arg(long)]
        query: Option<String>,
        /// With --query: `started_at` (newest first) or `started_at:asc`.
        #[arg(long, value_name = "FIELD[:asc|:desc]", requires = "query")]
        order_by: Option<String>,
        #[arg(long, value_name = "N", value_parser = limit_parser(RUN_LIST_LIMIT_MAX))]
        limit: Option<u32>,
        /// Where to go on: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// A run's state document (its input and defaults with its steps' outputs merged in,
    /// as `outputMapping` says), with its current step and each step's executions.
    State { run_id: String },
    /// Merge a JSON object's fields into a run's state (the history shows `state_updated`).
    UpdateState {
        run_id: String,
        /// A JSON object: text, `@FILE`, or `-` for standard input.
        #[arg(allow_hyphen_values = true, value_parser = parse_text)]
        state: ArgText,
        /// The run waits in a `waitForState` step: it goes on (refused, nothing changed,
        /// when it does not wait there).
        #[arg(long = "continue")]
        continue_run: bool,
    },
    /// Replace a run's state with a JSON object.
    SetState {
        run_id: String,
        /// A JSON object: text, `@FILE`, or `-` for standard input.
        #[arg(allow_hyphen_values = true, value_parser = parse_text)]
        state: ArgText,
        /// As for update-state.
        #[arg(long = "continue")]
        continue_run: bool,
    },
    /// Print a definition as created.
    Definition {
        name: String,
        /// [default: the latest]
        #[arg(long)]
        version: Option<String>,
    },
    /// Refuse new starts (running runs continue).
    Disable { name: String },
    /// Accept new starts again.
    Enable { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ValidateCommand {
    /// Validate a workflow definition: errors (E1xx-E5xx) refuse it, warnings are printed.
    Workflow {
        /// The YAML definition (`-` reads standard input).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
}

/// `--run-id`: what the server accepts, checked before connecting.
fn parse_run_id(text: &str) -> Result<String, String> {
    let ok_chars = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if text.is_empty() || text.len() > RUN_ID_BYTES_MAX || !ok_chars {
        return Err(format!(
            "use 1 to {RUN_ID_BYTES_MAX} letters, digits, '-', '_', '.' or ':'"
        ));
    }
    if text.starts_with("wfrun:") {
        return Err("ids starting with \"wfrun:\" are reserved for idempotency keys".into());
    }
    Ok(text.to_string())
}

/// `--retention`: a duration like `--ttl`'s (`30s`, `12h`, `7d`) or milliseconds, at least
/// one second.
fn parse_retention(text: &str) -> Result<u64, String> {
    let ms = parse_ttl(text)?;
    if ms < 1000 {
        return Err(format!(
            "{text:?} is shorter than the shortest retention, 1s"
        ));
    }
    Ok(ms)
}

fn parse_idle_timeout(text: &str) -> Result<u64, String> {
    let ms = parse_ttl(text)?;
    if ms > 0 && ms < 1000 {
        return Err(format!(
            "{text:?} is shorter than the shortest idle timeout, 1s (0: never)"
        ));
    }
    Ok(ms)
}

/// `--interval` of `workflow status --watch`: bounded both ways.
fn parse_watch_interval(text: &str) -> Result<u64, String> {
    let ms = parse_ttl(text)?;
    if !(WATCH_INTERVAL_MS_MIN..=WATCH_INTERVAL_MS_MAX).contains(&ms) {
        return Err(format!(
            "{text:?} is outside {WATCH_INTERVAL_MS_MIN}ms to {}s",
            WATCH_INTERVAL_MS_MAX / 1000
        ));
    }
    Ok(ms)
}

/// The bounds of `--interval` (ms).
const WATCH_INTERVAL_MS_MIN: u64 = 50;
const WATCH_INTERVAL_MS_MAX: u64 = 60_000;

fn parse_peer_timeout(text: &str) -> Result<u64, String> {
    let ms = parse_ttl(text)?;
    if ms < 100 {
        return Err(format!(
            "{text:?} is shorter than the shortest peer timeout, 100ms"
        ));
    }
    Ok(ms)
}

#[cfg(test)]
mod retention_tests {
    use super::parse_retention;

    #[test]
    fn retention_takes_units_and_refuses_nonsense() {
        assert_eq!(parse_retention("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_retention("12h"), Ok(12 * 3_600_000));
        assert_eq!(parse_retention("30s"), Ok(30_000));
        assert_eq!(parse_retention("90000"), Ok(90_000));
        assert!(parse_retention("10ms").is_err());
        assert!(parse_retention("soon").is_err());
        assert!(parse_retention("").is_err());
        assert!(parse_retention("99999999999999999999d").is_err());
    }
}

/// `--http`: an address to serve HTTP on, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpArg {
    Off,
    On(SocketAddr),
}

impl HttpArg {
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            HttpArg::Off => None,
            HttpArg::On(addr) => Some(addr),
        }
    }
}

fn parse_http(s: &str) -> Result<HttpArg, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(HttpArg::Off);
    }
    s.parse()
        .map(HttpArg::On)
        .map_err(|_| format!("{s:?} is neither an address (127.0.0.1:9001) nor `off`"))
}

/// A server address: HOST:PORT (a name or an IP address, and a port number).
fn parse_addr(s: &str) -> Result<String, String> {
    let port = s
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(_))) if !host.is_empty() => Ok(s.to_string()),
        _ => Err(format!(
            "{s:?} is not a server address: give HOST:PORT, e.g. 127.0.0.1:9000"
        )),
    }
}

/// A page size of 1 to `max` (0, or more than `max`, is a usage error: the server would
/// refuse it).
fn limit_parser(max: u32) -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(max))
}
