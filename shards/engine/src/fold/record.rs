//! Logical records of the UAL. State is a fold of these (see `state::ShardState::apply`).

use flo_protocol::ActionKind;
use serde::{Deserialize, Serialize};

/// An action definition as logged (on every shard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionDefRecord {
    pub kind: ActionKind,
    pub version: u32,
    pub enabled: bool,
    pub timeout_ms: u64,
    pub max_retries: u32,
    pub retry_delay_ms: u64,
    pub description: Option<String>,
    pub memory_limit_mb: u32,
    #[serde(with = "serde_bytes")]
    pub wasm: Option<Vec<u8>>,
    pub wasm_describe: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The export a WebAssembly action's executions call (None: `handle`). Last, with a
    /// default: records and snapshots written before it read as `handle`.
    #[serde(default)]
    pub wasm_entrypoint: Option<String>,
}

/// The export a WebAssembly action's executions call unless it names another.
pub const ENTRYPOINT_DEFAULT: &str = "handle";

impl ActionDefRecord {
    /// The export its executions call.
    pub fn entrypoint(&self) -> &str {
        self.wasm_entrypoint
            .as_deref()
            .unwrap_or(ENTRYPOINT_DEFAULT)
    }
}

/// A KV write made by a WebAssembly guest, committed with its run's completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestKvWrite {
    pub key: String,
    /// None: delete.
    #[serde(with = "serde_bytes")]
    pub value: Option<Vec<u8>>,
    /// Instead of `value`: add this to the JSON number stored (absent or not a number:
    /// 0) — a run state's shared counter (`{"flow_group:n": {"$increment": 1}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<i64>,
}

/// A record of a stream, as logged and as held by its partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEntry {
    pub id: flo_protocol::StreamId,
    pub key: Option<Box<str>>,
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(with = "serde_bytes")]
    pub payload: Box<[u8]>,
}

/// One task of a `TasksLeased` batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedTask {
    pub run_id: String,
    pub attempt: u32,
    pub expires_at_ms: u64,
}

fn yes() -> bool {
    true
}

/// The workflow step an action run (or child workflow run) executes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRef {
    /// The workflow run (on the same shard).
    pub run_id: String,
    pub step: String,
}

/// What a WebAssembly step executed in the shard's own slots adds to its `WfStepFinished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRan {
    /// How long before the record's `at_ms` its execution started.
    pub ran_ms: u64,
    /// The guest's KV writes (and the state's shared-scope fields), as a completion's.
    pub kv_writes: Vec<GuestKvWrite>,
}

/// The outcome of a step its filter (`when:`) kept from running.
pub const FILTERED: &str = "filtered";

/// What a started workflow step waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepWait {
    /// An action run; `worker`: executed by workers (user-hosted).
    ActionRun { run_id: String, worker: bool },
    /// A child workflow run.
    ChildRun { run_id: String },
    /// A signal of this type, until `deadline_ms` if set.
    Signal {
        signal_type: String,
        deadline_ms: Option<u64>,
    },
}

/// How a workflow step ended: the outcomes the engine itself gives, or one an action names
/// (a worker's `complete` or a guest's `flo.outcome`: `approved`, say). Logged and shown as
/// its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepOutcome {
    Success,
    Failure,
    /// The step could not run its target (input too large, nesting too deep...).
    ExecutionFailure,
    TargetNotFound,
    TargetDisabled,
    Timeout,
    Pending,
    /// An outcome the action named.
    Named(String),
}

impl StepOutcome {
    pub fn as_str(&self) -> &str {
        match self {
            StepOutcome::Success => "success",
            StepOutcome::Failure => "failure",
            StepOutcome::ExecutionFailure => "execution_failure",
            StepOutcome::TargetNotFound => "target_not_found",
            StepOutcome::TargetDisabled => "target_disabled",
            StepOutcome::Timeout => "timeout",
            StepOutcome::Pending => "pending",
            StepOutcome::Named(name) => name,
        }
    }

    /// The outcome named `name`: one of the engine's, else `Named`.
    pub fn from_name(name: &str) -> StepOutcome {
        match name {
            "success" => StepOutcome::Success,
            "failure" => StepOutcome::Failure,
            "execution_failure" => StepOutcome::ExecutionFailure,
            "target_not_found" => StepOutcome::TargetNotFound,
            "target_disabled" => StepOutcome::TargetDisabled,
            "timeout" => StepOutcome::Timeout,
            "pending" => StepOutcome::Pending,
            other => StepOutcome::Named(other.to_string()),
        }
    }

    /// The transitions that may take this outcome, most specific first: a target that is
    /// missing or disabled falls back to `execution_failure`, which falls back to
    /// `failure`.
    pub fn transition_names(&self) -> Vec<&str> {
        match self {
            StepOutcome::TargetNotFound => vec!["target_not_found", "execution_failure", "failure"],
            StepOutcome::TargetDisabled => vec!["target_disabled", "execution_failure", "failure"],
            StepOutcome::ExecutionFailure => vec!["execution_failure", "failure"],
            // A step its filter kept from running goes on along `success` unless it says
            // where a filtered step goes.
            StepOutcome::Named(name) if name == FILTERED => vec![FILTERED, "success"],
            other => vec![other.as_str()],
        }
    }

    /// Whether the step failed (what `onError` applies to).
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            StepOutcome::Failure
                | StepOutcome::ExecutionFailure
                | StepOutcome::TargetNotFound
                | StepOutcome::TargetDisabled
                | StepOutcome::Timeout
        )
    }

    /// Whether a step's `retry:` retries it.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StepOutcome::Failure | StepOutcome::ExecutionFailure)
    }
}

impl std::fmt::Display for StepOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StepOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StepOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(StepOutcome::from_name(&String::deserialize(d)?))
    }
}

/// Where a workflow run goes after a step finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepNext {
    Step(String),
    /// Execute the same step again at `at_ms` (a retry after failure).
    Retry {
        at_ms: u64,
    },
    /// Execute the same step again at `at_ms` (still pending).
    Poll {
        at_ms: u64,
    },
    /// The run ends at `terminal` with `status`; `reason` says why when no transition did.
    End {
        terminal: String,
        status: flo_protocol::WorkflowRunStatus,
        reason: Option<String>,
    },
    /// Branches start at `steps` at once; they meet again at `join`.
    Fork {
        steps: Vec<String>,
        join: String,
    },
}

/// A log record that does not decode (written by a newer or a broken flo, or damaged
/// behind a valid checksum).
#[derive(Debug, thiserror::Error)]
#[error("the record does not decode: {0}")]
pub struct DecodeError(#[from] rmp_serde::decode::Error);

/// Deepest nesting of arrays and maps a record may have. A definition's `inputMapping`
/// nests at most 128 levels (serde_yaml's limit) below a few of the record's own;
/// rmp_serde's default (1,024 levels of a value it skips, such as an unknown field's)
/// overflowed a 2 MiB thread stack in a debug build (found by fuzzing).
pub const RECORD_DEPTH_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    KvPut {
        namespace: String,
        key: String,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// The version this put gives the key.
        version: u64,
        expires_at_ms: Option<u64>,
    },
    KvDelete {
        namespace: String,
        key: String,
    },
    /// Registration or re-registration; `def.version` is assigned by the coordinator.
    ActionDefined {
        namespace: String,
        name: String,
        def: ActionDefRecord,
    },
    ActionRemoved {
        namespace: String,
        name: String,
        at_ms: u64,
    },
    ActionEnabled {
        namespace: String,
        name: String,
        enabled: bool,
        at_ms: u64,
    },
    RunCreated {
        namespace: String,
        run_id: String,
        action: String,
        action_version: u32,
        #[serde(with = "serde_bytes")]
        input: Vec<u8>,
        priority: u8,
        labels: Option<String>,
        idempotency_key: Option<String>,
        created_at_ms: u64,
        available_at_ms: u64,
        /// The workflow step this run executes (its only attempt: steps retry themselves).
        #[serde(default)]
        step: Option<StepRef>,
    },
    /// An attempt failed. With `retry_at_ms` the run waits for another attempt; without,
    /// it is final (failed, or timed out) and dead-lettered.
    AttemptFailed {
        namespace: String,
        run_id: String,
        attempt: u32,
        /// Version of the action that executed the attempt (the latest registered one).
        action_version: u32,
        error: String,
        timed_out: bool,
        retry_at_ms: Option<u64>,
        at_ms: u64,
        /// A final failure goes to the dead-letter list (not for non-retryable failures).
        #[serde(default = "yes")]
        dead_letter: bool,
        /// The failure's code, if one was given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
    },
    /// Pending runs of user-hosted actions leased to a worker (status `running`).
    TasksLeased {
        namespace: String,
        worker_id: String,
        tasks: Vec<LeasedTask>,
        at_ms: u64,
    },
    /// A leased task's lease now ends at `expires_at_ms`.
    LeaseExtended {
        namespace: String,
        run_id: String,
        expires_at_ms: u64,
    },
    /// Leased tasks handed back unstarted (their worker could not take them): pending
    /// again, same attempt.
    LeasesReleased {
        namespace: String,
        run_ids: Vec<String>,
        at_ms: u64,
    },
    RunCompleted {
        namespace: String,
        run_id: String,
        attempt: u32,
        /// Version of the action that executed the attempt (the latest registered one).
        action_version: u32,
        #[serde(with = "serde_bytes")]
        output: Vec<u8>,
        outcome: Option<String>,
        /// The guest's KV writes: those to keys this shard owns are applied with the
        /// completion, the others are forwarded to their shards (`KvForwarded`).
        kv_writes: Vec<GuestKvWrite>,
        at_ms: u64,
        /// A workflow step's run: the fields (a JSON object) the worker or guest gave for
        /// the workflow run's state, merged by the step's `WfStepFinished`.
        #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_bytes")]
        state_patch: Option<Vec<u8>>,
    },
    RunCancelled {
        namespace: String,
        run_id: String,
        at_ms: u64,
    },
    /// A dead-lettered run queued again as a new attempt (`RunRedrive`): pending at
    /// `attempt`, no longer dead-lettered. `archived`: its final document when it had left
    /// memory (it comes back from it); None when it was still in memory.
    RunRedriven {
        namespace: String,
        run_id: String,
        attempt: u32,
        at_ms: u64,
        archived: Option<Box<flo_protocol::RunInfo>>,
    },
    /// A workflow definition version (on every shard): the YAML as given and the definition
    /// it validated to (normalised), so applying it never runs the validator. Records of
    /// older versions carry no `def`; `decode` fills it in from the YAML.
    WorkflowDefined {
        namespace: String,
        name: String,
        version: String,
        yaml: String,
        at_ms: u64,
        #[serde(default)]
        def: Option<Box<flo_workflow::WorkflowDef>>,
    },
    WorkflowEnabled {
        namespace: String,
        name: String,
        enabled: bool,
        at_ms: u64,
    },
    WfRunStarted {
        namespace: String,
        run_id: String,
        workflow: String,
        version: String,
        /// JSON.
        #[serde(with = "serde_bytes")]
        input: Vec<u8>,
        idempotency_key: Option<String>,
        /// Set for a child run: the parent's step waiting for it.
        parent: Option<StepRef>,
        at_ms: u64,
        /// Set for a run a schedule started: the tick it fires (absent from older records;
        /// nil in others: a field follows it).
        #[serde(default)]
        schedule: Option<crate::fold::schedules::ScheduledBy>,
        /// `--group` (a child run: its parent's): the runs sharing `flow_group:` fields
        /// (absent from older records; nil in others: a field follows it).
        #[serde(default)]
        group: Option<String>,
        /// `--webhook URL`: where the run's events go (instead of its definition's
        /// `webhook.url`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        webhook: Option<String>,
    },
    WfStepStarted {
        namespace: String,
        run_id: String,
        step: String,
        wait: StepWait,
        at_ms: u64,
    },
    WfStepFinished {
        namespace: String,
        run_id: String,
        step: String,
        outcome: StepOutcome,
        /// JSON.
        #[serde(with = "serde_bytes")]
        output: Option<Vec<u8>>,
        error: Option<String>,
        /// The queued signal this step consumed (its sequence number in the run).
        consumed_signal: Option<u64>,
        next: StepNext,
        at_ms: u64,
        /// Fields (a JSON object) the step's worker or guest set in the run's state,
        /// merged after its output mapping. (Always written: a field follows it.)
        #[serde(default, with = "serde_bytes")]
        state_patch: Option<Vec<u8>>,
        /// A WebAssembly step executed in the shard's own slots: no action run, no record of
        /// its start; this record is the step's one record (its start, its guest's KV
        /// writes, its end).
        #[serde(default)]
        ran: Option<Box<StepRan>>,
        /// The output is the one the completed action run this step waited on gave, as
        /// its `RunCompleted` logged it: `output` is none here (each payload written once)
        /// and `apply` takes it from the run, still in memory then (it is archived only
        /// once its step moved on). Absent from records written before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        output_of_run: bool,
    },
    WfSignalReceived {
        namespace: String,
        run_id: String,
        signal_type: String,
        /// JSON.
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        at_ms: u64,
    },
    WfRunCancelled {
        namespace: String,
        run_id: String,
        reason: Option<String>,
        at_ms: u64,
    },
    /// A final run that nothing waits on any more: its final document. Applying it drops
    /// the run from memory and indexes where this record is (`crate::fold::archive::RunIndex`).
    RunArchived {
        namespace: String,
        run_id: String,
        run: crate::fold::archived::ArchivedRun,
    },
    /// Retention: the runs archived before `before_lsn` are forgotten (their records may
    /// go with the segments that hold them).
    RunsForgotten {
        before_lsn: u64,
    },
    /// Guest KV writes of completions up to `up_to_lsn` reached their owner shards.
    KvForwarded {
        up_to_lsn: u64,
    },
    /// Guest KV writes from another shard's completion (`origin_lsn` on `origin_shard`),
    /// applied here because this shard owns the keys. Applied at most once per origin LSN.
    KvRemoteWrites {
        origin_shard: u32,
        origin_lsn: u64,
        namespace: String,
        writes: Vec<GuestKvWrite>,
        at_ms: u64,
    },
    /// A stream was created (on every shard, ordered by the coordinator).
    StreamCreated {
        namespace: String,
        name: String,
        partitions: u32,
        retention_ms: Option<u64>,
        max_len: Option<u64>,
        max_bytes: Option<u64>,
        at_ms: u64,
    },
    /// A stream and its records are gone (on every shard).
    StreamDeleted {
        namespace: String,
        name: String,
    },
    /// Records appended to a partition this shard owns, with the ids they were given.
    StreamAppended {
        namespace: String,
        stream: String,
        partition: u32,
        entries: Vec<StreamEntry>,
    },
    /// A consumer group was created (on every shard, ordered by the coordinator).
    StreamGroupCreated {
        namespace: String,
        stream: String,
        group: String,
        def: crate::fold::stream_groups::GroupDef,
    },
    StreamGroupDeleted {
        namespace: String,
        stream: String,
        group: String,
    },
    /// Records of a partition delivered to a group's consumer (first deliveries and
    /// redeliveries alike).
    StreamDelivered {
        namespace: String,
        stream: String,
        partition: u32,
        group: String,
        consumer: String,
        ids: Vec<flo_protocol::StreamId>,
        at_ms: u64,
    },
    StreamAcked {
        namespace: String,
        stream: String,
        partition: u32,
        group: String,
        ids: Vec<flo_protocol::StreamId>,
    },
    /// Pending records to deliver again from `due_at_ms`.
    StreamNacked {
        namespace: String,
        stream: String,
        partition: u32,
        group: String,
        ids: Vec<flo_protocol::StreamId>,
        due_at_ms: u64,
    },
    /// Records delivered too often, moved to the dead-letter stream's partition with the
    /// ids `dlq_ids`.
    StreamDeadLettered {
        namespace: String,
        stream: String,
        partition: u32,
        group: String,
        ids: Vec<flo_protocol::StreamId>,
        dlq_ids: Vec<flo_protocol::StreamId>,
    },
    /// A partition's records below `before` are removed (retention or a trim).
    StreamTrimmed {
        namespace: String,
        stream: String,
        partition: u32,
        before: flo_protocol::StreamId,
    },
    /// `ticks` ticks of a schedule (living on this shard) up to `last_tick_ms` were not
    /// fired, for `reason`.
    ScheduleSkipped {
        namespace: String,
        workflow: String,
        ticks: u64,
        last_tick_ms: u64,
        reason: crate::fold::schedules::SkipReason,
        at_ms: u64,
    },
    /// `flo schedule pause` / `resume`.
    SchedulePaused {
        namespace: String,
        workflow: String,
        paused: bool,
        at_ms: u64,
    },
    /// A step of an inline plan moved. Every decision the engine takes from a plan's
    /// in-memory state (the executors' order, a skip, a cache hit) is one of these, so
    /// replay follows it and never decides again.
    WfPlanEvent {
        namespace: String,
        run_id: String,
        step: String,
        event: PlanEvent,
        at_ms: u64,
    },
    /// A workflow run changed by something else than a step's work: a step deferred, the
    /// run held or released, a step continued by hand (`step`: the step it is about).
    WfRunControl {
        namespace: String,
        run_id: String,
        step: Option<String>,
        control: RunControl,
        at_ms: u64,
    },
    /// Attempt `attempt` of webhook delivery `id` (`fold/webhooks.rs`) ended: delivered
    /// (`error` none), to be tried again at `retry_at_ms`, or given up (neither).
    WebhookAttempted {
        id: u64,
        attempt: u32,
        at_ms: u64,
        error: Option<String>,
        retry_at_ms: Option<u64>,
    },
    /// `flo webhook redeliver`: failed delivery `id` is sent again (attempts from 1).
    WebhookRedelivered {
        id: u64,
        at_ms: u64,
    },
}

/// What `Record::WfRunControl` does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunControl {
    /// `deferMs`: the step, ready, waits until `until_ms` before it starts.
    Defer { until_ms: u64 },
    /// `flo workflow pause`: no step starts until released.
    Hold,
    /// `flo workflow resume`.
    Release,
    /// `flo workflow continue`: the step starts again from its first execution (what it
    /// waited for was cancelled in the same group); `reset_visits` counts its visits
    /// from 0 again.
    Continue { reset_visits: bool },
    /// `flo workflow update-state` (merge the object's fields) or `set-state` (`replace`).
    /// A `waitForState` step it continues finishes in the same atomic group.
    State {
        /// A JSON object.
        #[serde(with = "serde_bytes")]
        state: Vec<u8>,
        replace: bool,
    },
}

/// What happened to a plan step (`Record::WfPlanEvent`). Executors are indexes into the
/// plan's `executors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanEvent {
    /// The step begins: the executors in the order it tries them.
    Begin { order: Vec<u16> },
    /// An attempt on `executor` starts (its action run is created in the same group);
    /// with `tracking: async`, it fails as timed out unless it ends by `deadline_ms`.
    Start {
        executor: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
    },
    /// The attempt failed; `executor` is tried again at `at_ms`.
    Retry {
        executor: u16,
        at_ms: u64,
        error: String,
    },
    /// No more attempts on `executor`: its retries are spent, or the error was fatal.
    Exhausted {
        executor: u16,
        fatal: bool,
        error: String,
    },
    /// `executor` is skipped.
    Skipped { executor: u16, reason: PlanSkip },
    /// The attempt succeeded (the step finishes in the same group).
    Succeeded { executor: u16 },
    /// The output came from the plan's cache (the step finishes in the same group).
    CacheHit { key: String },
    /// The plan's fallback value is the output (the step finishes in the same group).
    Fallback,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSkip {
    BreakerOpen,
    RateLimited,
}

impl Record {
    /// Type code stored in the record header (for tools that scan without decoding).
    pub fn type_code(&self) -> u16 {
        match self {
            Record::KvPut { .. } => 1,
            Record::KvDelete { .. } => 2,
            Record::ActionDefined { .. } => 10,
            Record::ActionRemoved { .. } => 11,
            Record::ActionEnabled { .. } => 12,
            Record::RunCreated { .. } => 20,
            Record::AttemptFailed { .. } => 21,
            Record::RunCompleted { .. } => 22,
            Record::RunCancelled { .. } => 23,
            Record::RunRedriven { .. } => 27,
            Record::TasksLeased { .. } => 24,
            Record::LeaseExtended { .. } => 25,
            Record::LeasesReleased { .. } => 26,
            Record::WorkflowDefined { .. } => 40,
            Record::WorkflowEnabled { .. } => 41,
            Record::WfRunStarted { .. } => 42,
            Record::WfStepStarted { .. } => 43,
            Record::WfStepFinished { .. } => 44,
            Record::WfSignalReceived { .. } => 45,
            Record::WfRunCancelled { .. } => 46,
            Record::KvForwarded { .. } => 30,
            Record::KvRemoteWrites { .. } => 31,
            Record::RunArchived { .. } => 50,
            Record::RunsForgotten { .. } => 51,
            Record::StreamCreated { .. } => 60,
            Record::StreamDeleted { .. } => 61,
            Record::StreamAppended { .. } => 62,
            Record::StreamTrimmed { .. } => 63,
            Record::StreamGroupCreated { .. } => 64,
            Record::StreamGroupDeleted { .. } => 65,
            Record::StreamDelivered { .. } => 66,
            Record::StreamAcked { .. } => 67,
            Record::StreamNacked { .. } => 68,
            Record::StreamDeadLettered { .. } => 69,
            Record::ScheduleSkipped { .. } => 70,
            Record::SchedulePaused { .. } => 71,
            Record::WfPlanEvent { .. } => 72,
            Record::WfRunControl { .. } => 73,
            Record::WebhookAttempted { .. } => 74,
            Record::WebhookRedelivered { .. } => 75,
        }
    }

    /// Bytes `encode` writes.
    pub fn encoded_len(&self) -> usize {
        let mut out = Vec::new();
        self.encode(&mut out);
        out.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut ser = rmp_serde::Serializer::new(out);
        // Encoding plain owned data into a Vec cannot fail.
        self.serialize(&mut ser).expect("record encodes");
    }

    /// Decodes a record read back from the log, upgrading what older versions wrote.
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
        de.set_max_depth(RECORD_DEPTH_MAX);
        let mut record = Record::deserialize(&mut de)?;
        // A workflow run's compact archive document names its run by the record.
        if let Record::RunArchived {
            namespace,
            run_id,
            run: crate::fold::archived::ArchivedRun::Workflow(doc),
        } = &mut record
            && doc.info.run_id.is_empty()
        {
            doc.info.namespace.clone_from(namespace);
            doc.info.run_id.clone_from(run_id);
        }
        if let Record::WorkflowDefined {
            yaml,
            def: def @ None,
            ..
        } = &mut record
        {
            // Written before definitions were stored normalised: validate once, here.
            *def = flo_workflow::parse_workflow(yaml)
                .ok()
                .map(|v| Box::new(v.def));
        }
        Ok(record)
    }

    /// Whether this record changes a definition (an action's or a workflow's).
    pub fn is_definition(&self) -> bool {
        matches!(
            self,
            Record::ActionDefined { .. }
                | Record::ActionRemoved { .. }
                | Record::ActionEnabled { .. }
                | Record::WorkflowDefined { .. }
                | Record::WorkflowEnabled { .. }
                | Record::StreamCreated { .. }
                | Record::StreamDeleted { .. }
                | Record::StreamGroupCreated { .. }
                | Record::StreamGroupDeleted { .. }
        )
    }

    /// The guest KV writes this record applies or forwards, with their namespace.
    fn guest_writes(&self) -> Option<(&String, &[GuestKvWrite])> {
        match self {
            Record::RunCompleted {
                namespace,
                kv_writes,
                ..
            }
            | Record::KvRemoteWrites {
                namespace,
                writes: kv_writes,
                ..
            } => Some((namespace, kv_writes)),
            Record::WfStepFinished {
                namespace,
                ran: Some(ran),
                ..
            } => Some((namespace, &ran.kv_writes)),
            _ => None,
        }
    }

    /// The keys this record writes (over-approximated: a guest's writes to other shards'
    /// keys too), appended to `out`.
    pub fn keys_written(&self, out: &mut Vec<(String, String)>) {
        if let Record::KvPut { namespace, key, .. } = self {
            out.push((namespace.clone(), key.clone()));
        } else if let Some((namespace, writes)) = self.guest_writes() {
            out.extend(
                writes
                    .iter()
                    .filter(|w| w.value.is_some())
                    .map(|w| (namespace.clone(), w.key.clone())),
            );
        }
    }

    /// Whether applying this record may remove a KV key (a read that finds a key absent
    /// must wait until such a record is durable).
    pub fn may_remove_keys(&self) -> bool {
        match self {
            Record::KvDelete { .. } => true,
            _ => self
                .guest_writes()
                .is_some_and(|(_, writes)| writes.iter().any(|w| w.value.is_none())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing (fuzz/regressions/record): a record whose unknown field nested a
    /// thousand maps overflowed a 2 MiB stack in a debug build.
    #[test]
    fn a_record_nested_too_deep_does_not_decode() {
        let record = |extra: &[u8]| {
            let mut bytes =
                b"\x81\xa9kv_delete\x83\xa9namespace\xa1n\xa3key\xa1k\xa5extra".to_vec();
            bytes.extend_from_slice(extra);
            bytes
        };
        let nested = |levels: usize| [b"\x81\xa1k".repeat(levels), vec![0xc0]].concat();
        assert!(Record::decode(&record(&nested(10))).is_ok());
        let err = Record::decode(&record(&nested(100_000))).unwrap_err();
        assert!(err.to_string().contains("depth"), "{err}");
    }

    /// The deepest definition the YAML parser accepts still decodes from its record.
    #[test]
    fn a_definition_nested_to_the_yaml_limit_round_trips() {
        let depth = flo_workflow::yaml_depth::YAML_NESTING_MAX - 4;
        let mapping = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let yaml = format!(
            "kind: Workflow\nname: w\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  \
             inputMapping: {{x: {mapping}}}\n  transitions:\n    success: flo.Completed\n"
        );
        let def = flo_workflow::parse_workflow(&yaml).unwrap().def;
        let written = Record::WorkflowDefined {
            namespace: "n".into(),
            name: "w".into(),
            version: "1".into(),
            yaml,
            at_ms: 1,
            def: Some(Box::new(def)),
        };
        let mut bytes = Vec::new();
        written.encode(&mut bytes);
        assert_eq!(Record::decode(&bytes).unwrap(), written);
    }
}
