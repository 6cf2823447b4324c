//! Requests and replies. A request carries a client-chosen id; its response echoes it.
//! Responses may arrive in any order (pipelining).

use crate::ErrorValue;
use crate::streams::{
    GroupConfig, GroupInfo, GroupReadSpec, PendingRecord, StreamConfig, StreamId, StreamInfo,
    StreamReadSpec, StreamRecord, StreamRecordIn,
};
use serde::{Deserialize, Serialize};

/// Version of this message set; the handshake refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;
pub const NAMESPACE_BYTES_MAX: usize = 256;
pub const KV_KEY_BYTES_MAX: usize = 1024;
pub const KV_VALUE_BYTES_MAX: usize = 1 << 20;
pub const KV_LIST_LIMIT_DEFAULT: u32 = 1000;
pub const KV_LIST_LIMIT_MAX: u32 = 10_000;
pub const ACTION_NAME_BYTES_MAX: usize = 256;
/// Longest export name a `wasm` action may name as its entrypoint.
pub const WASM_ENTRYPOINT_BYTES_MAX: usize = 128;
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
pub const RUN_INPUT_BYTES_MAX: usize = 1 << 20;
pub const RUN_LIST_LIMIT_DEFAULT: u32 = 100;
pub const RUN_LIST_LIMIT_MAX: u32 = 10_000;
/// Longest a `RunWait` may be held by the server.
pub const RUN_WAIT_MS_MAX: u64 = 300_000;
pub const WORKER_ID_BYTES_MAX: usize = 256;
/// Longest a `TaskAwait` is held by the server.
pub const TASK_AWAIT_MS_MAX: u64 = 300_000;
/// Most tasks one `TaskAwait` returns.
pub const TASK_AWAIT_TASKS_MAX: u32 = 1024;
/// Longest lease one `TaskTouch` grants from now.
pub const LEASE_EXTEND_MS_MAX: u64 = 24 * 3600 * 1000;
pub const WORKER_METADATA_BYTES_MAX: usize = 16 << 10;
pub const WORKER_PROCESSES_MAX: usize = 1024;
/// Longest a blocking `KvGet` (`wait_ms`) is held by the server.
pub const KV_WAIT_MS_MAX: u64 = 300_000;
/// Longest run id a client may choose (`WorkflowStartSpec::run_id`).
pub const RUN_ID_BYTES_MAX: usize = 256;
/// History events per page when a page is asked for without a limit.
pub const HISTORY_LIMIT_DEFAULT: u32 = 100;
pub const HISTORY_LIMIT_MAX: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub op: Op,
}

/// Only the id of a request: lets the server answer a request whose body it cannot decode.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct RequestId {
    pub id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Handshake: the client states its protocol version, and presents its token to a
    /// server started with an auth file (the connection then acts with what the token
    /// grants; another `Hello` replaces it).
    Hello {
        protocol_version: u32,
        client: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<Token>,
    },
    /// Server version, durability and per-shard log positions.
    Status,
    /// How keys map to partitions and partitions to shards.
    ShardMap,
    KvGet {
        namespace: String,
        key: String,
        /// Block up to this long (at most `KV_WAIT_MS_MAX`) until the key holds a version
        /// newer than `after_version`; an empty answer once the time is up. None or 0:
        /// answer at once.
        #[serde(default)]
        wait_ms: Option<u64>,
        /// Only a version newer than this counts (None: any version, i.e. the key exists,
        /// unless `newer_than_current`).
        #[serde(default)]
        after_version: Option<u64>,
        /// Without `after_version`: only a version newer than the one the key holds when
        /// the request reaches the key's shard counts (any version if it holds none) — a
        /// wait for the next write (`kv get --block`). With `after_version`, ignored.
        #[serde(default)]
        newer_than_current: bool,
    },
    KvPut {
        namespace: String,
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// Time to live from now; the key disappears afterwards.
        ttl_ms: Option<u64>,
        /// Compare-and-set: apply only when the current version is this (0 = key absent).
        if_version: Option<u64>,
        /// Apply only when the key exists (`not_found` otherwise).
        #[serde(default)]
        if_exists: bool,
    },
    KvDelete {
        namespace: String,
        key: String,
        if_version: Option<u64>,
    },
    KvList {
        namespace: String,
        prefix: String,
        limit: Option<u32>,
        /// Where the previous page ended (its `next_cursor`); none: the first page.
        #[serde(default)]
        cursor: Option<String>,
    },
    /// Register (or re-register, bumping the version) an action.
    ActionRegister(ActionSpec),
    ActionGet {
        namespace: String,
        name: String,
    },
    ActionList {
        namespace: String,
    },
    ActionDelete {
        namespace: String,
        name: String,
    },
    ActionSetEnabled {
        namespace: String,
        name: String,
        enabled: bool,
    },
    /// Create a run of an action.
    ActionInvoke(InvokeSpec),
    RunStatus {
        namespace: String,
        run_id: String,
    },
    /// Reply once the run is final (completed, failed, cancelled, timed out) or after
    /// `timeout_ms` with its current status.
    RunWait {
        namespace: String,
        run_id: String,
        timeout_ms: u64,
    },
    /// Runs of an action, newest first.
    RunList {
        namespace: String,
        /// Empty with `query`: runs of every action.
        action: String,
        status: Option<RunStatus>,
        /// Only runs that exhausted their retries (the dead-letter list).
        dead_letter: bool,
        limit: Option<u32>,
        /// Where the previous page ended (its `next_cursor`); none: the first page.
        #[serde(default)]
        cursor: Option<String>,
        /// Only runs matching this query (`flo action runs --query`): status, action,
        /// run_id, created_at, updated_at, attempt, priority, dead_letter,
        /// workflow_run_id, outcome and `labels.NAME`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        query: Option<String>,
    },
    RunCancel {
        namespace: String,
        run_id: String,
    },
    /// Queue a dead-lettered run again as a new attempt (pending, attempt + 1, no longer
    /// dead-lettered; `flo action dlq NAME --redrive`). `action`, when given, must be the
    /// run's. Runs of workflow steps are refused: their workflow decides about retries.
    RunRedrive {
        namespace: String,
        run_id: String,
        #[serde(default)]
        action: Option<String>,
    },
    /// Register (or re-register, replacing) a worker. Lives on the shard its id hashes to.
    WorkerRegister(WorkerSpec),
    /// Report liveness and load; the reply carries the worker's status (`draining` tells
    /// it to stop taking tasks).
    WorkerHeartbeat {
        namespace: String,
        worker_id: String,
        current_load: u32,
    },
    /// Stop giving the worker new tasks (sticky); its leased tasks may still complete.
    WorkerDrain {
        namespace: String,
        worker_id: String,
    },
    WorkerDeregister {
        namespace: String,
        worker_id: String,
    },
    WorkerGet {
        namespace: String,
        worker_id: String,
    },
    WorkerList {
        namespace: String,
    },
    /// Long-poll for tasks of the given user-hosted actions, from every shard. Replies
    /// with up to `max_tasks` leased tasks, or none after `block_ms`.
    TaskAwait {
        namespace: String,
        worker_id: String,
        actions: Vec<String>,
        max_tasks: u32,
        block_ms: u64,
        /// Only the tasks held on the worker's home shard (the shard its id hashes to),
        /// not every shard's: with a worker homed on each shard, each connected to its
        /// home, no task, await or report crosses between shards.
        #[serde(default, skip_serializing_if = "is_false")]
        home_only: bool,
    },
    /// Report a leased task done. `attempt`, when given, must be the leased attempt.
    TaskComplete {
        namespace: String,
        worker_id: String,
        task_id: String,
        action: String,
        attempt: Option<u32>,
        #[serde(with = "serde_bytes")]
        result: Vec<u8>,
        /// Named outcome (None: `success`).
        outcome: Option<String>,
        /// A workflow step's task: a JSON object whose fields are merged into the run's
        /// state with the step's completion (after its output mapping).
        #[serde(default, with = "serde_bytes")]
        state: Option<Vec<u8>>,
    },
    /// Report a leased task failed. `retry`: another attempt after backoff while retries
    /// remain, else failed and dead-lettered. `non_retryable`: failed at once, not
    /// dead-lettered (the SDK's `NonRetryableError`).
    TaskFail {
        namespace: String,
        worker_id: String,
        task_id: String,
        action: String,
        attempt: Option<u32>,
        error: String,
        retry: bool,
        non_retryable: bool,
        /// A code naming the error (`invalid_card`, `timeout`): an inline plan's `errors:`
        /// classify it as retryable or fatal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
    },
    /// Extend a leased task's lease to `extend_ms` from now (never shortens it).
    TaskTouch {
        namespace: String,
        worker_id: String,
        task_id: String,
        action: String,
        extend_ms: u64,
    },
    /// Create a workflow definition from YAML (a new version of `name`, or a new workflow).
    /// Invalid definitions are refused (bad_request listing the issues).
    WorkflowCreate {
        namespace: String,
        yaml: String,
    },
    /// A definition: the given version, or the latest.
    WorkflowGet {
        namespace: String,
        name: String,
        version: Option<String>,
    },
    WorkflowList {
        namespace: String,
    },
    /// Disabled: new starts are refused; running runs continue.
    WorkflowSetEnabled {
        namespace: String,
        name: String,
        enabled: bool,
    },
    WorkflowStart(WorkflowStartSpec),
    WorkflowStatus {
        namespace: String,
        run_id: String,
    },
    /// Reply once the run is final, or after `timeout_ms` with its current status.
    WorkflowWait {
        namespace: String,
        run_id: String,
        timeout_ms: u64,
    },
    /// A run's history, oldest first. Without `limit` and `after`: every event
    /// (`Reply::WorkflowHistory`); with either: one page (`Reply::WorkflowHistoryPage`).
    WorkflowHistory {
        namespace: String,
        run_id: String,
        /// Events per page (default `HISTORY_LIMIT_DEFAULT`, at most `HISTORY_LIMIT_MAX`).
        #[serde(default)]
        limit: Option<u32>,
        /// Only events whose `seq` is above this (the previous page's `next_after`).
        #[serde(default)]
        after: Option<u64>,
    },
    /// Deliver a typed signal to a run (stored; consumed by a `waitForSignal` of its type).
    WorkflowSignal {
        namespace: String,
        run_id: String,
        signal_type: String,
        /// JSON.
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    },
    WorkflowCancel {
        namespace: String,
        run_id: String,
        reason: Option<String>,
    },
    /// `flo workflow pause` / `resume` / `continue`: answered with the run's status.
    WorkflowControl {
        namespace: String,
        run_id: String,
        control: WorkflowControl,
    },
    /// `flo workflow update-state` (merge the object's fields into the run's state) or
    /// `set-state` (`replace`: the object becomes the state); with `continue_run`, the run
    /// must wait in a `waitForState` step, which then goes on. Answered with the run's
    /// status.
    WorkflowUpdateState {
        namespace: String,
        run_id: String,
        /// A JSON object.
        #[serde(with = "serde_bytes")]
        state: Vec<u8>,
        replace: bool,
        continue_run: bool,
    },
    /// Runs of a workflow, newest first.
    WorkflowListRuns {
        namespace: String,
        name: String,
        status: Option<WorkflowRunStatus>,
        limit: Option<u32>,
        /// Where the previous page ended (its `next_cursor`); none: the first page.
        #[serde(default)]
        cursor: Option<String>,
        /// Only runs with a step past its timeout (`flo workflow timed-out`): runs in
        /// flight only, one page (continuing them moves them out of the list).
        #[serde(default)]
        timed_out: Option<TimedOutFilter>,
    },
    /// Create a stream (a repeat with the same settings answers `created: false`).
    StreamCreate {
        namespace: String,
        name: String,
        config: StreamConfig,
    },
    /// Delete a stream and every record it holds.
    StreamDelete {
        namespace: String,
        name: String,
    },
    /// Append records, answered with their ids in the order given once they are durable.
    /// A stream that does not exist is created with the default settings.
    StreamAppend {
        namespace: String,
        stream: String,
        records: Vec<StreamRecordIn>,
        /// Put every record in this partition (None: by key, round-robin without one).
        #[serde(default)]
        partition: Option<u32>,
    },
    StreamRead(StreamReadSpec),
    StreamGet {
        namespace: String,
        name: String,
    },
    StreamList {
        namespace: String,
    },
    /// Remove the records whose id is below `before` (`dry_run`: only count them).
    StreamTrim {
        namespace: String,
        stream: String,
        before: StreamId,
        #[serde(default)]
        dry_run: bool,
    },
    /// Create a consumer group on a stream (a repeat with the same settings changes nothing).
    StreamGroupCreate {
        namespace: String,
        stream: String,
        group: String,
        config: GroupConfig,
    },
    StreamGroupDelete {
        namespace: String,
        stream: String,
        group: String,
    },
    /// Records for a consumer of a group: redeliveries due first, then new records.
    StreamGroupRead(GroupReadSpec),
    /// The consumer is done with these records: they are never delivered again.
    StreamGroupAck {
        namespace: String,
        stream: String,
        group: String,
        ids: Vec<StreamId>,
    },
    /// Deliver these records again (to any consumer), after `delay_ms`.
    StreamGroupNack {
        namespace: String,
        stream: String,
        group: String,
        ids: Vec<StreamId>,
        #[serde(default)]
        delay_ms: Option<u64>,
    },
    /// Records delivered and not acknowledged, oldest first.
    StreamGroupPending {
        namespace: String,
        stream: String,
        group: String,
        count: Option<u32>,
    },
    /// The groups of a stream (or the one named) and where they stand.
    StreamGroupInfo {
        namespace: String,
        stream: String,
        group: Option<String>,
    },
    /// Moves the server's clock forward (only on a server started with `--test-clock`).
    TestAdvanceClock {
        ms: u64,
    },
    /// The schedules of a namespace's workflows, with their next fire times.
    ScheduleList {
        namespace: String,
    },
    /// Pauses (`paused: true`) or resumes the schedule of workflow `name`.
    SchedulePause {
        namespace: String,
        name: String,
        paused: bool,
    },
    /// Fires the schedule of workflow `name` now: a run with the schedule's input
    /// (answered `WorkflowStarted`), whatever `max_concurrent` and a pause say.
    ScheduleTrigger {
        namespace: String,
        name: String,
    },
    /// The in-memory state of a workflow's inline plans on every shard: each executor's
    /// breaker, health score, samples and rate-limit use (`plan`: one plan only).
    PlanStatus {
        namespace: String,
        workflow: String,
        plan: Option<String>,
    },
    /// Publishes the cache-invalidation event `event`: every shard drops the cached
    /// outputs of the namespace's plans whose `cache.invalidate_on` names it (of `key`
    /// only, when given). Answered `Invalidated`.
    PlanInvalidate {
        namespace: String,
        event: String,
        key: Option<String>,
    },
    /// The runs (of `workflow`, or of every workflow of the namespace with search
    /// attributes) that match `query`, newest started first (`ascending`: oldest first).
    WorkflowQuery {
        namespace: String,
        workflow: Option<String>,
        query: String,
        ascending: bool,
        limit: Option<u32>,
        cursor: Option<String>,
    },
    /// The namespace's run event feed (`flo workflow events`): events after `cursor` (the
    /// previous page's; none: the oldest kept), of `workflow` only when given, oldest first,
    /// at most `limit` (default `EVENTS_LIMIT_DEFAULT`).
    WorkflowEvents {
        namespace: String,
        workflow: Option<String>,
        cursor: Option<String>,
        limit: Option<u32>,
    },
    /// The namespace's webhook deliveries (`flo webhook failed`, `flo webhook pending`):
    /// those that gave up after their last attempt (`failed`) or those still to be sent or
    /// retried, of `workflow` only when given, oldest first, at most `limit` per shard
    /// (default `WEBHOOKS_LIMIT_DEFAULT`).
    WebhookDeliveries {
        namespace: String,
        failed: bool,
        workflow: Option<String>,
        limit: Option<u32>,
    },
    /// Sends failed delivery `id` again (`flo webhook redeliver ID`): its attempts count
    /// from 1 again; answered `Done`.
    WebhookRedeliver {
        namespace: String,
        id: String,
    },
}

/// Deliveries a `WebhookDeliveries` listing holds per shard unless it asks for fewer; at
/// most `WEBHOOKS_LIMIT_MAX`.
pub const WEBHOOKS_LIMIT_DEFAULT: u32 = 100;
pub const WEBHOOKS_LIMIT_MAX: u32 = 1000;

/// One webhook delivery: a run event on its way to a receiver, or given up on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// Stable over every attempt and redelivery (receivers see it as `X-Flo-Delivery`).
    pub id: String,
    pub workflow: String,
    pub run_id: String,
    /// The run event (`completed`, `step_finished`, ...).
    pub event: String,
    pub url: String,
    /// Attempts made so far (since the last redelivery).
    pub attempts: u32,
    /// When the event happened (ms since the epoch).
    pub created_ms: u64,
    /// Pending: when the next attempt is due. Failed: when it was given up.
    pub at_ms: u64,
    /// What the last attempt got: `HTTP 500`, `connection refused ...`, `no answer within
    /// 10000 ms`, or why it was never sent (`the webhook queue is full`).
    pub last_error: Option<String>,
}

/// Events a `WorkflowEvents` page holds unless it asks for fewer; at most `EVENTS_LIMIT_MAX`.
pub const EVENTS_LIMIT_DEFAULT: u32 = 100;
pub const EVENTS_LIMIT_MAX: u32 = 1000;

/// One event of the run event feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowEvent {
    /// `workflow_started`, `step_started`, `step_waiting`, `step_finished`, `state_updated`,
    /// `workflow_continued`, `completed`, `failed`, `cancelled`, `timed_out`.
    pub event: String,
    pub run_id: String,
    pub workflow: String,
    pub step: Option<String>,
    pub at_ms: u64,
    /// The shard the run lives on and the event's position there (increasing).
    pub shard: u32,
    pub position: u64,
}

/// A secret presented in the handshake. Its debug form hides it, so that a printed
/// request never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(String);

impl Token {
    pub fn new(secret: impl Into<String>) -> Token {
        Token(secret.into())
    }

    /// The secret itself (to compare it; never to print it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Executed by workers that poll for tasks.
    User,
    /// Executed inline on the shard as WebAssembly.
    Wasm,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::User => "user",
            ActionKind::Wasm => "wasm",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Queued: waiting for a worker (or a WebAssembly slot), or for its delay or retry
    /// backoff.
    Pending,
    /// Leased to a worker, or executing.
    Running,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
        }
    }

    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "pending" => RunStatus::Pending,
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "timed_out" => RunStatus::TimedOut,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionSpec {
    pub namespace: String,
    pub name: String,
    pub kind: ActionKind,
    /// WebAssembly module (binary or text) for `wasm` actions.
    #[serde(with = "serde_bytes")]
    pub wasm: Option<Vec<u8>>,
    pub timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub retry_delay_ms: Option<u64>,
    pub description: Option<String>,
    pub memory_limit_mb: Option<u32>,
    /// The export a `wasm` action's executions call (default `handle`; same signature and
    /// ABI as `handle`). 1 to `WASM_ENTRYPOINT_BYTES_MAX` printable ASCII characters.
    #[serde(default)]
    pub wasm_entrypoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerType {
    Action,
    Stream,
}

impl WorkerType {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerType::Action => "action",
            WorkerType::Stream => "stream",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    /// Healthy, processing or ready for tasks.
    Active,
    /// Connected, no current tasks. Kept for the wire (the spec lists it); this server
    /// never gives it: a heartbeat makes a worker `active` whatever its load, as in the
    /// spec's status diagram.
    Idle,
    /// Finishing its tasks, given nothing new (sticky).
    Draining,
    /// No heartbeat for 90 s; a heartbeat makes it active again.
    Unhealthy,
}

impl WorkerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::Active => "active",
            WorkerStatus::Idle => "idle",
            WorkerStatus::Draining => "draining",
            WorkerStatus::Unhealthy => "unhealthy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub namespace: String,
    /// Unique id (clients generate one from hostname + random hex when the user gives none).
    pub worker_id: String,
    pub worker_type: WorkerType,
    /// Default 10.
    pub max_concurrency: Option<u32>,
    /// Action names (or stream/group pairs) this worker handles.
    pub processes: Vec<String>,
    /// Arbitrary JSON.
    pub metadata: Option<String>,
    pub machine_id: Option<String>,
    /// The worker's labels, a flat JSON object; tasks requiring labels go only to workers
    /// whose labels contain them with equal values.
    pub labels: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerProcess {
    pub name: String,
    pub kind: String,
    pub run_count: u64,
    pub fail_count: u64,
    pub last_run_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub worker_id: String,
    pub namespace: String,
    pub worker_type: WorkerType,
    pub status: WorkerStatus,
    pub max_concurrency: u32,
    pub current_load: u32,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub registered_at_ms: u64,
    pub last_heartbeat_ms: u64,
    pub machine_id: Option<String>,
    pub metadata: Option<String>,
    pub labels: Option<String>,
    pub processes: Vec<WorkerProcess>,
}

/// A task leased to a worker: complete, fail or touch it by `task_id` before
/// `lease_expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAssignment {
    /// The run id.
    pub task_id: String,
    pub action: String,
    pub namespace: String,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// From 1; increments on retry.
    pub attempt: u32,
    pub priority: u8,
    pub created_at_ms: u64,
    pub lease_expires_at_ms: u64,
    /// A workflow step's task: the run's state (JSON) when the task was leased.
    #[serde(default, with = "serde_bytes")]
    pub state: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStartSpec {
    pub namespace: String,
    pub name: String,
    /// None: the latest version.
    pub version: Option<String>,
    /// JSON.
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
    pub idempotency_key: Option<String>,
    /// Reply with the run (`Reply::WorkflowRun`) once it is final or after this long,
    /// instead of with its id at once.
    pub wait_ms: Option<u64>,
    /// The run's id, chosen by the caller (1 to `RUN_ID_BYTES_MAX` letters, digits, `-`,
    /// `_`, `.`, `:`; not starting with `wfrun:`). A start with the id of an existing run
    /// is a `conflict`, unless it carries that run's idempotency key (then: that run).
    /// None: the server picks one (`wfrun-N`, or one derived from the idempotency key).
    #[serde(default)]
    pub run_id: Option<String>,
    /// The run's group (`flo workflow start --group G`): runs of a group share the state
    /// fields their steps set as `flow_group:NAME`.
    #[serde(default)]
    pub group: Option<String>,
    /// `flo workflow start --webhook URL`: the run's events go to this URL (with the
    /// definition's `webhook:` settings, or the defaults: the run's end, 6 attempts).
    #[serde(default)]
    pub webhook: Option<String>,
}

/// `Op::WorkflowListRuns::timed_out`: a step that waits (for an action run, a child run, a
/// retry) longer than its `timeoutMs`, or than `older_than_ms` when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedOutFilter {
    pub older_than_ms: Option<u64>,
}

/// What `Op::WorkflowControl` does to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowControl {
    /// No step starts until `Resume` (what runs finishes; the run shows `on_hold`).
    Pause,
    Resume,
    /// The steps that wait for an action run or a child run, or sleep before a retry, start
    /// again (what they waited for is cancelled); `reset_visits` counts their visits from
    /// 1 again (for `maxVisits`).
    Continue {
        reset_visits: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowRunStatus {
    /// Its step's action run is queued: waiting for a worker to take it, or for a
    /// WebAssembly slot.
    Pending,
    /// A step is being started, or a WebAssembly action executes it.
    Running,
    /// Blocked on a signal, an action run, a child workflow, or a retry/poll timer.
    Waiting,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    /// Paused (`flo workflow pause`): no step starts until `flo workflow resume`.
    OnHold,
}

impl WorkflowRunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowRunStatus::Pending => "pending",
            WorkflowRunStatus::Running => "running",
            WorkflowRunStatus::Waiting => "waiting",
            WorkflowRunStatus::Completed => "completed",
            WorkflowRunStatus::Failed => "failed",
            WorkflowRunStatus::Cancelled => "cancelled",
            WorkflowRunStatus::TimedOut => "timed_out",
            WorkflowRunStatus::OnHold => "on_hold",
        }
    }

    pub fn is_final(self) -> bool {
        !matches!(
            self,
            WorkflowRunStatus::Pending
                | WorkflowRunStatus::Running
                | WorkflowRunStatus::Waiting
                | WorkflowRunStatus::OnHold
        )
    }

    pub fn parse(s: &str) -> Option<WorkflowRunStatus> {
        Some(match s {
            "pending" => WorkflowRunStatus::Pending,
            "running" => WorkflowRunStatus::Running,
            "waiting" => WorkflowRunStatus::Waiting,
            "on_hold" => WorkflowRunStatus::OnHold,
            "completed" => WorkflowRunStatus::Completed,
            "failed" => WorkflowRunStatus::Failed,
            "cancelled" => WorkflowRunStatus::Cancelled,
            "timed_out" => WorkflowRunStatus::TimedOut,
            _ => return None,
        })
    }
}

/// A problem found in a workflow definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationIssue {
    /// `E1xx`..`E5xx` for errors, `W1xx` for warnings.
    pub code: String,
    /// Where: e.g. `steps.charge.transitions.success`.
    pub path: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowInfo {
    pub namespace: String,
    pub name: String,
    /// The version described (the latest unless one was asked for).
    pub version: String,
    /// Every version, oldest first.
    pub versions: Vec<String>,
    pub enabled: bool,
    /// The definition as created.
    pub yaml: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowStepInfo {
    pub name: String,
    pub outcome: Option<String>,
    /// JSON.
    #[serde(with = "serde_bytes")]
    pub output: Option<Vec<u8>>,
    /// Executions of the step so far (retries and polls included).
    pub executions: u32,
    /// Times the run entered the step; when it first did; when its last visit ended; the
    /// time its visits took, first execution's start to last finish, summed (ms).
    #[serde(default)]
    pub visits: u32,
    #[serde(default)]
    pub first_started_ms: u64,
    #[serde(default)]
    pub last_finished_ms: u64,
    #[serde(default)]
    pub total_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRunInfo {
    pub run_id: String,
    pub namespace: String,
    pub workflow: String,
    pub version: String,
    pub status: WorkflowRunStatus,
    /// The step being executed or waited on (None once final).
    pub current_step: Option<String>,
    /// What a waiting run waits for, e.g. `signal approval`, `action run charge-4`.
    pub waiting_for: Option<String>,
    /// JSON.
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
    /// Output of the last step that ran (JSON), once final.
    #[serde(with = "serde_bytes")]
    pub output: Option<Vec<u8>>,
    /// Steps that ran, in first-execution order.
    pub steps: Vec<WorkflowStepInfo>,
    /// The terminal reached (built-in `flo.Completed`... or custom).
    pub terminal: Option<String>,
    pub error: Option<String>,
    pub idempotency_key: Option<String>,
    pub parent_run_id: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The run's search attributes (a JSON object), when its definition declares some.
    #[serde(default, with = "serde_bytes")]
    pub search_attributes: Option<Vec<u8>>,
    /// The run's state document (a JSON object).
    #[serde(default, with = "serde_bytes")]
    pub state: Option<Vec<u8>>,
    /// Each branch while the run runs several at once (then `current_step` is None).
    #[serde(default)]
    pub branches: Vec<WorkflowBranchInfo>,
    /// When the current step's visit began (its first execution), while at a step.
    #[serde(default)]
    pub step_since_ms: Option<u64>,
}

/// One branch of a run that forked: its step, and what it waits for (`waiting` at its
/// join while other branches still run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowBranchInfo {
    pub step: String,
    pub status: WorkflowRunStatus,
    pub waiting_for: Option<String>,
    /// When the branch's current step began (its first execution).
    #[serde(default)]
    pub since_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub event_type: HistoryEventType,
    pub step: Option<String>,
    pub detail: String,
    pub at_ms: u64,
    /// Position in the run's history, from 1 (the cursor of history pages).
    #[serde(default)]
    pub seq: u64,
}

/// What a history event records (the spec's history table). On the wire its name, a string;
/// a name this version does not know (from a newer server) reads as `Other`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HistoryEventType {
    WorkflowStarted,
    StepStarted,
    StepCompleted,
    StepRetry,
    WaitingForSignal,
    SignalReceived,
    SignalMatched,
    SignalTimeout,
    ActionNotFound,
    ActionDisabled,
    AwaitingAction,
    ActionCompleted,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    WorkflowTimedOut,
    /// An inline plan's step: an attempt begins on an executor (detail: the executor).
    PlanExecutorStart,
    PlanExecutorSuccess,
    PlanExecutorRetry,
    /// An executor's attempts are over (its retries spent, or a fatal error).
    PlanExecutorExhausted,
    /// An executor skipped: its circuit breaker is open.
    PlanBreakerSkip,
    /// An executor skipped: it is over its rate limit.
    PlanRateLimitSkip,
    /// The step's output came from the plan's cache.
    PlanCacheHit,
    /// The step's output is the plan's fallback value.
    PlanFallback,
    /// A step waits its `deferMs` before it starts (detail: until when, ms).
    StepDeferred,
    /// `flo workflow pause` / `resume`.
    WorkflowPaused,
    WorkflowResumed,
    /// `flo workflow continue`: the step starts again.
    StepContinued,
    /// A transition started several branches at once (detail: their first steps).
    BranchesStarted,
    /// Every branch of a fork reached its join (step: the join).
    BranchesJoined,
    /// `flo workflow update-state` / `set-state` changed the run's state (detail: `merged`
    /// or `replaced`, and `continued` when a `waitForState` step went on).
    StateUpdated,
    /// A type this version does not know.
    Other(String),
}

impl HistoryEventType {
    pub fn as_str(&self) -> &str {
        match self {
            HistoryEventType::WorkflowStarted => "workflow_started",
            HistoryEventType::StepStarted => "step_started",
            HistoryEventType::StepCompleted => "step_completed",
            HistoryEventType::StepRetry => "step_retry",
            HistoryEventType::WaitingForSignal => "waiting_for_signal",
            HistoryEventType::SignalReceived => "signal_received",
            HistoryEventType::SignalMatched => "signal_matched",
            HistoryEventType::SignalTimeout => "signal_timeout",
            HistoryEventType::ActionNotFound => "action_not_found",
            HistoryEventType::ActionDisabled => "action_disabled",
            HistoryEventType::AwaitingAction => "awaiting_action",
            HistoryEventType::ActionCompleted => "action_completed",
            HistoryEventType::WorkflowCompleted => "workflow_completed",
            HistoryEventType::WorkflowFailed => "workflow_failed",
            HistoryEventType::WorkflowCancelled => "workflow_cancelled",
            HistoryEventType::WorkflowTimedOut => "workflow_timed_out",
            HistoryEventType::PlanExecutorStart => "plan_executor_start",
            HistoryEventType::PlanExecutorSuccess => "plan_executor_success",
            HistoryEventType::PlanExecutorRetry => "plan_executor_retry",
            HistoryEventType::PlanExecutorExhausted => "plan_executor_exhausted",
            HistoryEventType::PlanBreakerSkip => "plan_breaker_skip",
            HistoryEventType::PlanRateLimitSkip => "plan_rate_limit_skip",
            HistoryEventType::PlanCacheHit => "plan_cache_hit",
            HistoryEventType::PlanFallback => "plan_fallback",
            HistoryEventType::StepDeferred => "step_deferred",
            HistoryEventType::WorkflowPaused => "workflow_paused",
            HistoryEventType::WorkflowResumed => "workflow_resumed",
            HistoryEventType::StepContinued => "step_continued",
            HistoryEventType::BranchesStarted => "branches_started",
            HistoryEventType::BranchesJoined => "branches_joined",
            HistoryEventType::StateUpdated => "state_updated",
            HistoryEventType::Other(name) => name,
        }
    }

    /// The type named `name` (`Other` for a name this version does not know).
    pub fn from_name(name: &str) -> HistoryEventType {
        match name {
            "workflow_started" => HistoryEventType::WorkflowStarted,
            "step_started" => HistoryEventType::StepStarted,
            "step_completed" => HistoryEventType::StepCompleted,
            "step_retry" => HistoryEventType::StepRetry,
            "waiting_for_signal" => HistoryEventType::WaitingForSignal,
            "signal_received" => HistoryEventType::SignalReceived,
            "signal_matched" => HistoryEventType::SignalMatched,
            "signal_timeout" => HistoryEventType::SignalTimeout,
            "action_not_found" => HistoryEventType::ActionNotFound,
            "action_disabled" => HistoryEventType::ActionDisabled,
            "awaiting_action" => HistoryEventType::AwaitingAction,
            "action_completed" => HistoryEventType::ActionCompleted,
            "workflow_completed" => HistoryEventType::WorkflowCompleted,
            "workflow_failed" => HistoryEventType::WorkflowFailed,
            "plan_executor_start" => HistoryEventType::PlanExecutorStart,
            "plan_executor_success" => HistoryEventType::PlanExecutorSuccess,
            "plan_executor_retry" => HistoryEventType::PlanExecutorRetry,
            "plan_executor_exhausted" => HistoryEventType::PlanExecutorExhausted,
            "plan_breaker_skip" => HistoryEventType::PlanBreakerSkip,
            "plan_rate_limit_skip" => HistoryEventType::PlanRateLimitSkip,
            "plan_cache_hit" => HistoryEventType::PlanCacheHit,
            "plan_fallback" => HistoryEventType::PlanFallback,
            "step_deferred" => HistoryEventType::StepDeferred,
            "workflow_paused" => HistoryEventType::WorkflowPaused,
            "workflow_resumed" => HistoryEventType::WorkflowResumed,
            "step_continued" => HistoryEventType::StepContinued,
            "branches_started" => HistoryEventType::BranchesStarted,
            "branches_joined" => HistoryEventType::BranchesJoined,
            "state_updated" => HistoryEventType::StateUpdated,
            "workflow_cancelled" => HistoryEventType::WorkflowCancelled,
            "workflow_timed_out" => HistoryEventType::WorkflowTimedOut,
            other => HistoryEventType::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for HistoryEventType {
    /// The name, padded to a width when one is asked for.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl PartialEq<&str> for HistoryEventType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for HistoryEventType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for HistoryEventType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(HistoryEventType::from_name(&name))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvokeSpec {
    pub namespace: String,
    pub action: String,
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
    pub priority: Option<u8>,
    pub delay_ms: Option<u64>,
    pub idempotency_key: Option<String>,
    /// Required worker labels: a flat JSON object.
    pub labels: Option<String>,
    /// Reply with the run (`Reply::Run`) once it is final, or after this long with its
    /// current status, instead of with its id at once.
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    pub result: Result<Reply, ErrorValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Hello {
        protocol_version: u32,
        server_version: String,
        shard_count: u32,
        partitions: u32,
        /// The shard serving this connection (every shard listens on the same port; the
        /// kernel picks one per connection): a client may open connections until they are
        /// spread over the shards.
        #[serde(default)]
        shard: Option<u32>,
    },
    Status(StatusInfo),
    /// One shard's part of a status (exchanged between shards).
    ShardStatus(ShardInfo),
    ShardMap(ShardMap),
    KvValue(Option<KvEntry>),
    KvPut {
        version: u64,
    },
    KvDeleted {
        deleted: bool,
    },
    KvList {
        entries: Vec<KvEntry>,
        /// More entries may follow: `next_cursor` is set.
        truncated: bool,
        /// Ask again with `cursor` set to this for the next page (none: this was the last).
        #[serde(default)]
        next_cursor: Option<String>,
    },
    Action(ActionInfo),
    Actions(Vec<ActionInfo>),
    ActionDeleted {
        deleted: bool,
    },
    Invoked {
        run_id: String,
        /// False when an idempotency key matched an existing run.
        created: bool,
    },
    Run(RunInfo),
    Runs {
        runs: Vec<RunInfo>,
        /// More runs may follow: `next_cursor` is set.
        truncated: bool,
        /// Ask again with `cursor` set to this for the next page (none: this was the last).
        #[serde(default)]
        next_cursor: Option<String>,
    },
    Worker(WorkerInfo),
    Workers(Vec<WorkerInfo>),
    /// Reply to a heartbeat.
    WorkerStatus {
        status: WorkerStatus,
    },
    /// Tasks leased by a `TaskAwait` (empty: none came in time).
    Tasks(Vec<TaskAssignment>),
    /// The lease after a `TaskTouch`.
    Lease {
        expires_at_ms: u64,
    },
    WorkflowCreated {
        name: String,
        version: String,
        /// False when this exact definition already existed.
        created: bool,
        warnings: Vec<ValidationIssue>,
    },
    Workflow(WorkflowInfo),
    Workflows(Vec<WorkflowInfo>),
    WorkflowStarted {
        run_id: String,
        /// False when an idempotency key matched an existing run.
        created: bool,
    },
    WorkflowRun(WorkflowRunInfo),
    WorkflowRuns {
        runs: Vec<WorkflowRunInfo>,
        /// More runs may follow: `next_cursor` is set.
        truncated: bool,
        /// Ask again with `cursor` set to this for the next page (none: this was the last).
        #[serde(default)]
        next_cursor: Option<String>,
    },
    WorkflowHistory(Vec<HistoryEvent>),
    /// A page of the run event feed, oldest first; ask again with `cursor` for what follows
    /// (it is always set: a feed has no end). `gap`: events after the asked position were
    /// dropped before they were read (each shard keeps the newest 65,536).
    WorkflowEvents {
        events: Vec<WorkflowEvent>,
        cursor: String,
        gap: bool,
    },
    /// Webhook deliveries, oldest first over all shards.
    WebhookDeliveries {
        deliveries: Vec<WebhookDelivery>,
        /// Some shard held more than the limit.
        truncated: bool,
    },
    /// One page of a run's history, oldest first.
    WorkflowHistoryPage {
        events: Vec<HistoryEvent>,
        /// More events follow: ask again with `after` set to this (the last `seq` here).
        next_after: Option<u64>,
    },
    StreamCreated {
        name: String,
        partitions: u32,
        /// False when the stream existed with these settings.
        created: bool,
    },
    StreamDeleted {
        deleted: bool,
    },
    /// The ids of appended records, in the order they were given.
    StreamAppended {
        ids: Vec<StreamId>,
    },
    StreamRecords {
        records: Vec<StreamRecord>,
        /// The read stopped at its count: read on after this id.
        next_after: Option<StreamId>,
    },
    Stream(StreamInfo),
    Streams(Vec<StreamInfo>),
    StreamTrimmed {
        /// Records removed (or, for a dry run, that would be).
        removed: u64,
    },
    GroupCreated {
        group: String,
        /// False when the group existed with these settings.
        created: bool,
    },
    GroupDeleted {
        deleted: bool,
    },
    /// How many of the ids an ack or nack named were pending (the others were not: acked
    /// before, or never delivered to the group).
    GroupAcked {
        count: u64,
    },
    GroupPending(Vec<PendingRecord>),
    Groups(Vec<GroupInfo>),
    /// Acknowledgement of a change with nothing else to report.
    Done,
    Schedules(Vec<ScheduleInfo>),
    Schedule(ScheduleInfo),
    /// A page of `WorkflowQuery`: `scanned` documents were looked at over the shards.
    RunSummaries {
        items: Vec<RunSummary>,
        next_cursor: Option<String>,
        scanned: u64,
    },
    /// One shard's part of a `WorkflowQuery` (between shards).
    QueryPart(QueryPart),
    PlanStatus(Vec<PlanExecutorInfo>),
    /// Cached plan outputs dropped by `PlanInvalidate`.
    Invalidated {
        entries: u64,
    },
}

/// One executor of an inline plan on one shard (breakers, health and rate windows are
/// each shard's, in memory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanExecutorInfo {
    pub shard: u32,
    pub plan: String,
    pub executor: String,
    pub action: String,
    pub priority: i64,
    /// `closed`, `open` or `half_open`.
    pub breaker: String,
    /// When an open breaker half-opens (ms since the epoch on the server's clock).
    pub open_until_ms: Option<u64>,
    pub consecutive_failures: u32,
    /// Health score × 1000 (0 to 1000).
    pub score_permille: u32,
    /// Attempts that ended on this shard since the server started.
    pub samples: u64,
    /// Attempts started in the current second, minute and hour, and the shard's share of
    /// each limit (None: no limit).
    pub rate_used: Vec<u32>,
    pub rate_share: Vec<Option<u32>>,
}

/// A run as a query lists it (what the query index holds: `flo workflow status ID` gives
/// the rest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: String,
    pub namespace: String,
    pub workflow: String,
    pub status: WorkflowRunStatus,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// A JSON object.
    #[serde(with = "serde_bytes")]
    pub search_attributes: Vec<u8>,
    /// Where it is listed from: its shard and its start's position there.
    pub shard: u32,
    pub seq: u64,
}

/// One shard's part of a query page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryPart {
    pub shard: u32,
    pub items: Vec<RunSummary>,
    /// Where the part started (None: at the start).
    pub from: Option<u64>,
    /// Where the next page goes on once every item is taken (None: nothing is left).
    pub next: Option<u64>,
    pub scanned: u64,
}

/// A workflow's schedule as `flo schedule list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    pub namespace: String,
    pub workflow: String,
    /// The version whose `schedule:` applies (the latest).
    pub version: String,
    /// `cron "0 */6 * * *" UTC`, `every 30000 ms`.
    pub every: String,
    pub max_concurrent: u32,
    pub catchup: String,
    /// Why it does not fire, if it does not: `workflow disabled`, `paused (flo schedule
    /// pause)`, `paused (definition)`.
    pub paused: Option<String>,
    /// When it fires next (ms since the epoch; none while paused or when no tick is left).
    pub next_fire_ms: Option<u64>,
    /// The last tick fired or skipped.
    pub last_tick_ms: Option<u64>,
    /// Runs of the schedule not finished.
    pub running: u32,
    pub fired: u64,
    pub skipped: u64,
    /// The last skip: its tick and why.
    pub last_skip: Option<String>,
    /// The shard it lives on.
    pub shard: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionInfo {
    pub namespace: String,
    pub name: String,
    pub kind: ActionKind,
    pub version: u32,
    pub enabled: bool,
    pub timeout_ms: u64,
    pub max_retries: u32,
    pub retry_delay_ms: u64,
    pub description: Option<String>,
    pub memory_limit_mb: u32,
    /// Size of the WebAssembly module, for `wasm` actions.
    pub wasm_bytes: Option<u64>,
    /// What the module's `describe` export returned.
    pub wasm_describe: Option<String>,
    /// The export its executions call, for `wasm` actions (`handle` unless named).
    #[serde(default)]
    pub wasm_entrypoint: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub namespace: String,
    pub action: String,
    /// The action version the run was created under, then the one that executed its
    /// latest attempt (a pending run executes the latest registered version).
    pub action_version: u32,
    pub status: RunStatus,
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub output: Option<Vec<u8>>,
    /// Outcome named by the guest or worker (None when none was named).
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub attempt: u32,
    pub priority: u8,
    pub labels: Option<String>,
    pub idempotency_key: Option<String>,
    /// Failed or timed out after exhausting its retries.
    pub dead_lettered: bool,
    /// The workflow run whose step this run executes (None: invoked on its own).
    #[serde(default)]
    pub workflow_run_id: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// When a pending run becomes available (delay or retry backoff).
    pub available_at_ms: u64,
    /// The code of its last failure (a worker's `--error-code`, a guest's outcome named
    /// before it failed).
    #[serde(default)]
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEntry {
    pub key: String,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub version: u64,
    pub expires_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub server_version: String,
    pub durability: String,
    pub partitions: u32,
    pub shards: Vec<ShardInfo>,
    /// The server's cache of compiled WebAssembly modules (one for all shards), as last
    /// seen by a shard (the newest view among them).
    #[serde(default)]
    pub module_cache: Option<ModuleCacheInfo>,
    /// The counts that add up every namespace's data (keys, runs, stream records,
    /// executions) are left at 0: the token asking may not see every namespace.
    #[serde(default)]
    pub counts_hidden: bool,
}

/// The cache of compiled WebAssembly modules: least recently used evicted beyond its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleCacheInfo {
    pub bytes: u64,
    pub modules: u64,
    pub budget_bytes: u64,
    /// Counts the cache's changes: of two views, the one with the higher count is newer.
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    pub shard: u32,
    /// Last log sequence number appended.
    pub lsn: u64,
    /// Last log sequence number known to be on disk.
    pub durable_lsn: u64,
    pub segments: u32,
    pub kv_keys: u64,
    /// Action runs in memory (not finished, or finished and still referenced).
    pub runs: u64,
    /// Workflow runs in memory.
    #[serde(default)]
    pub workflow_runs: u64,
    /// Finished runs retained in the log, found through the run index.
    #[serde(default)]
    pub archived_runs: u64,
    /// Memory the run index takes.
    #[serde(default)]
    pub run_index_bytes: u64,
    /// LSN of the newest snapshot (0: none yet) and its age.
    #[serde(default)]
    pub snapshot_lsn: u64,
    #[serde(default)]
    pub snapshot_age_ms: Option<u64>,
    /// How long taking the newest snapshot's image paused the shard, and writing it took.
    #[serde(default)]
    pub snapshot_pause_ms: u64,
    #[serde(default)]
    pub snapshot_write_ms: u64,
    /// Bytes of log segments and snapshots on disk.
    #[serde(default)]
    pub disk_bytes: u64,
    /// No space for the log's next segment: the shard is read-only (mutations answer
    /// `unavailable`) until space returns.
    #[serde(default)]
    pub disk_full: bool,
    /// WebAssembly executions in progress (each holds one of the shard's slots).
    #[serde(default)]
    pub executions: u32,
    /// Clients waiting for a run to become final (run and workflow waits, invokes and
    /// starts with a wait): held here, or sent to the shard that owns the run.
    #[serde(default)]
    pub run_waits: u64,
    /// The module cache as this shard last saw it (None: it has not used it yet).
    #[serde(default)]
    pub module_cache: Option<ModuleCacheInfo>,
    /// Stream records held by this shard, and their payload bytes.
    #[serde(default)]
    pub stream_records: u64,
    #[serde(default)]
    pub stream_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// Name of the fixed hash: `xxh3-64` over namespace, 0xff, key.
    pub hash: String,
    pub partitions: u32,
    pub shard_count: u32,
    /// `owners[partition]` = shard owning it.
    pub owners: Vec<u32>,
}

/// For `skip_serializing_if`: a flag left at its default is not written.
fn is_false(flag: &bool) -> bool {
    !*flag
}

/// The hash that places keys (`ShardMap::hash`, "xxh3-64"): xxh3-64 (seed 0) over
/// `namespace`, one 0xff byte, `key`. 0xff never occurs in UTF-8, so distinct (namespace,
/// key) pairs never produce the same byte string. Fixed forever: data placement depends
/// on it.
pub fn key_hash(namespace: &str, key: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(namespace.as_bytes());
    h.update(&[0xff]);
    h.update(key.as_bytes());
    h.digest()
}

impl ShardMap {
    /// The shard owning `key` of `namespace` (what a client that routes its own requests
    /// needs: an operation on the key sent to a connection on that shard takes no hop).
    pub fn shard_of(&self, namespace: &str, key: &str) -> Option<u32> {
        let partition = key_hash(namespace, key) % u64::from(self.partitions.max(1));
        self.owners.get(partition as usize).copied()
    }
}

#[cfg(test)]
mod history_event_type {
    use super::*;

    /// Tables line up: the name takes the width a format asks for.
    #[test]
    fn a_history_event_type_pads_to_a_width() {
        assert_eq!(
            format!(
                "{:<16}|{:>14}|",
                HistoryEventType::StepRetry,
                HistoryEventType::StepStarted
            ),
            "step_retry      |  step_started|"
        );
    }

    /// Written as a plain string (as when the type was a `String`), read back from one;
    /// a name this version does not know survives as `Other`.
    #[test]
    fn a_history_event_type_is_its_name_on_the_wire() {
        #[derive(Serialize)]
        struct Before {
            event_type: String,
            step: Option<String>,
            detail: String,
            at_ms: u64,
            seq: u64,
        }
        for name in ["step_retry", "plan_breaker_skip"] {
            let before = Before {
                event_type: name.to_string(),
                step: None,
                detail: "d".into(),
                at_ms: 1,
                seq: 2,
            };
            let bytes = rmp_serde::to_vec(&before).unwrap();
            let event: HistoryEvent = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(event.event_type, name);
            assert_eq!(rmp_serde::to_vec(&event).unwrap(), bytes);
        }
        assert_eq!(
            HistoryEventType::from_name("signal_timeout"),
            HistoryEventType::SignalTimeout
        );
        assert!(matches!(
            HistoryEventType::from_name("later"),
            HistoryEventType::Other(n) if n == "later"
        ));
    }
}
