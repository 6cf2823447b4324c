//! What the shard loop feeds the engine (`Input`) and what the engine asks of the runtime
//! (`Effect`), as plain data. Messages between shards (`PeerMsg`) travel inside effects
//! and inputs; the runtime carries them and looks at nothing inside.

use crate::fold::record::{GuestKvWrite, Record};
use crate::fold::registry::ActionDef;
use crate::fold::workflow_defs::WfSyncEntry;
use flo_protocol::{ErrorValue, ModuleCacheInfo, Op, Reply, TaskAssignment};
use serde_json::{Map, Value};
use std::sync::Arc;

pub type ReplyResult = Result<Reply, ErrorValue>;
/// A client connection, numbered by the runtime (unique per shard for its lifetime).
pub type ConnId = u64;

/// A client request: the connection it came on and the id its reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientRef {
    pub conn: ConnId,
    pub request: u64,
}

/// Who gets a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyTo {
    Client(ClientRef),
    /// Another shard's call (`tag` names it there).
    Peer {
        shard: u32,
        tag: u64,
    },
}

/// Where an answer computed later goes: a client or another shard, or this shard's own
/// part of fan-out `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Reply(ReplyTo),
    FanOut(u64),
    /// A dead-lettered run read back from the archive (its record at `lsn`), to queue
    /// again (`RunRedrive`), then answer `to`.
    Redrive {
        to: ReplyTo,
        lsn: u64,
        action: Option<String>,
    },
}

/// Everything that happens to a shard.
#[derive(Debug)]
pub enum Input {
    /// The runtime is up (log recovered, peers joined): resume in-flight work.
    Started,
    /// A request from a client connected to this shard.
    Client { from: ClientRef, op: Op },
    /// A message from another shard (boxed: inputs and effects stay small to move).
    Peer { from: u32, msg: Box<PeerMsg> },
    /// Every record up to `lsn` is on disk, in `segments` segment files.
    Durable { lsn: u64, segments: u32 },
    /// Time passed: fire what is due.
    Tick,
    /// A batch of inputs was handled: do the work deferred to batch it (lease the tasks that
    /// became ready to parked wants, in one record).
    Idle,
    /// Work left over by an input that used its step budget.
    Continue,
    /// A WebAssembly execution ended.
    Executed { exec: u64, result: ExecResult },
    /// A module compiled for a registration: what its `describe` export says, or why it is
    /// refused.
    Compiled {
        job: u64,
        result: Result<Option<String>, String>,
    },
    /// A running guest reads a key (`flo.kv_get`).
    GuestRead { exec: u64, read: u64, key: String },
    /// A client connection closed.
    ConnClosed { conn: ConnId },
    /// What the shard's files look like (after start-up, each snapshot and each segment
    /// deletion), for status.
    Storage(Box<StorageInfo>),
    /// The runtime's cache of compiled modules changed (seen by this shard), for status.
    ModuleCache(ModuleCacheInfo),
    /// Whether the log writer can get space for what comes next (it says so when that
    /// changes): while the disk is full the shard is read-only.
    DiskSpace(DiskSpace),
    /// The answer to `Effect::ReadLog`: the payload of the record at its LSN, or why it
    /// could not be read.
    LogRead {
        token: u64,
        result: Result<Vec<u8>, String>,
    },
    /// The answer to `Effect::Deliver`: how the receiver answered attempt `attempt` of
    /// webhook delivery `id` — its HTTP status (any: the engine decides what counts as
    /// delivered), or why no answer came (connection refused, timeout, bad URL).
    WebhookAnswered {
        id: u64,
        attempt: u32,
        result: Result<u16, String>,
    },
    /// Graceful stop: refuse new operations from here on.
    Stop,
}

/// One attempt of a webhook delivery, for the runtime's delivery thread: an HTTP `POST` of
/// `body` to `url` with `headers`, and these the thread adds: `Content-Type:
/// application/json`, `User-Agent: flo/VERSION`, `X-Flo-Delivery: delivery_id`,
/// `X-Flo-Event: event`, `X-Flo-Attempt: attempt` and, with a `secret`, `X-Flo-Signature:
/// sha256=<hex of HMAC-SHA256(secret, body)>`. Answered by `Input::WebhookAnswered` once the
/// receiver answered or `timeout_ms` passed (never dropped: the shard counts its calls in
/// flight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookCall {
    /// The shard's key of the delivery (echoed in the answer).
    pub id: u64,
    /// The id receivers see, the same on every attempt (for their deduplication).
    pub delivery_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub secret: Option<String>,
    pub event: &'static str,
    /// JSON, the same bytes on every attempt.
    pub body: Arc<[u8]>,
    pub timeout_ms: u64,
}

/// Room for the shard's log, as the log writer last found it. It prepares the next segment
/// file while the current one still has half its space left, so `Full` is known while
/// what is in flight can still be written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiskSpace {
    #[default]
    Available,
    /// No space for the next segment: client mutations are refused (`unavailable`), reads
    /// go on, work already in flight continues into the space left, no task is leased.
    Full,
}

/// The shard's files, as the runtime last saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageInfo {
    /// LSN of the newest snapshot (0: none) and when it was written (wall clock).
    pub snapshot_lsn: u64,
    pub snapshot_at_ms: u64,
    /// How long taking its image stopped the shard, and writing it took (ms).
    pub snapshot_pause_ms: u64,
    pub snapshot_write_ms: u64,
    /// Segment files and bytes of log and snapshot files on disk.
    pub segments: u32,
    pub disk_bytes: u64,
}

/// What a WebAssembly execution produced.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// The output bytes, or why the attempt failed (`timed_out`: it ran out of time).
    pub output: Result<Vec<u8>, ExecFailure>,
    pub outcome: Option<String>,
    /// Buffered guest KV writes (None value: delete).
    pub kv_writes: Vec<(String, Option<Vec<u8>>)>,
    /// Guest log lines: (level, text).
    pub logs: Vec<(u8, String)>,
    /// A workflow step's guest: the fields it set in the run's state (a JSON object).
    pub state_patch: Option<Vec<u8>>,
}

impl ExecResult {
    /// An attempt that failed before or without running the guest.
    pub fn failed(failure: ExecFailure) -> ExecResult {
        ExecResult {
            output: Err(failure),
            outcome: None,
            kv_writes: Vec::new(),
            logs: Vec::new(),
            state_patch: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecFailure {
    pub error: String,
    pub timed_out: bool,
}

/// What the engine asks of the runtime. Effects that depend on a record leave the engine
/// only once that record is durable; the runtime performs them as they come. Large
/// payloads are boxed: effects are moved several times on their way out.
#[derive(Debug)]
pub enum Effect {
    Reply {
        to: ClientRef,
        result: Box<ReplyResult>,
    },
    Send {
        shard: u32,
        msg: Box<PeerMsg>,
    },
    /// Execute a WASM action run; answer with `Input::Executed`.
    Execute(Box<Execution>),
    /// The run of execution `exec` ended while it executes (cancelled): stop the guest now.
    /// Its `Input::Executed` still comes (the slot is free then); its result is not recorded.
    StopExecution {
        exec: u64,
    },
    /// Compile a module being registered and check that it exports `entrypoint`; answer
    /// with `Input::Compiled`.
    Compile {
        job: u64,
        wasm: Arc<[u8]>,
        entrypoint: String,
    },
    /// The answer to `Input::GuestRead`.
    GuestValue {
        exec: u64,
        read: u64,
        /// The value, none (the key is absent), or why it could not be read.
        value: Result<Option<Vec<u8>>, String>,
    },
    /// Send `Input::Tick` at this wall-clock time (or earlier).
    WakeAt {
        wall_ms: u64,
    },
    /// Feed `Input::Continue` soon (after other inputs waiting).
    Continue,
    /// Read the (durable) record at `lsn` from the log; answer with `Input::LogRead`.
    ReadLog {
        token: u64,
        lsn: u64,
    },
    /// A line for the server's log (stderr).
    Log(LogLine),
    /// Send one attempt of a webhook delivery (off the shard's thread); answer with
    /// `Input::WebhookAnswered`.
    Deliver(Box<WebhookCall>),
}

/// A line of the engine's for the server's log: how grave, what it is about, and its text
/// (the runtime gives it a level and a target, and writes it off the shard thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub source: LogSource,
    pub text: String,
}

impl LogLine {
    /// A warning about `source`.
    pub fn warn(source: LogSource, text: String) -> Effect {
        Effect::Log(LogLine {
            level: LogLevel::Warn,
            source,
            text,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

/// What a line is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSource {
    /// A WebAssembly guest's own line (`flo.log`), from one of its runs.
    Guest {
        namespace: String,
        action: String,
        run_id: String,
    },
    /// A schedule that could not start a tick's run.
    Schedule,
    /// A stream trigger that could not start a record's run.
    Trigger,
    /// A request to another shard that failed with no one waiting for its answer.
    Peer,
    /// A webhook delivery given up after its last attempt.
    Webhook,
}

#[derive(Debug, Clone)]
pub struct Execution {
    pub exec: u64,
    pub namespace: String,
    pub action: String,
    pub version: u32,
    pub wasm: Arc<[u8]>,
    /// The export to call (`handle` unless the action names another).
    pub entrypoint: String,
    pub input: Vec<u8>,
    pub timeout_ms: u64,
    pub memory_limit_bytes: u64,
    /// A workflow step's run: the workflow run's state (JSON), for `flo.state_get`.
    pub run_state: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub enum PeerMsg {
    /// `tag` 0: no reply wanted.
    Request {
        tag: u64,
        req: PeerRequest,
    },
    Reply {
        tag: u64,
        result: ReplyResult,
    },
}

/// What one shard asks another.
#[derive(Debug, Clone)]
pub enum PeerRequest {
    /// A client operation the receiver owns, or its part of a fan-out.
    Client(Op),
    /// Log and apply a definition change the coordinator ordered (and made durable).
    Definition(Record),
    /// The coordinator's definitions: log whatever makes this shard's equal (start-up:
    /// every action and workflow; a repeated workflow creation: that workflow only, `actions`
    /// None).
    DefinitionSync {
        actions: Option<Vec<(String, String, ActionDef)>>,
        workflows: Vec<WfSyncEntry>,
        streams: crate::fold::streams::StreamSync,
    },
    /// Deliver up to `count` records of a partition the receiver owns to a group's
    /// consumer (`streams::scatter`).
    StreamDeliver {
        namespace: String,
        stream: String,
        group: String,
        partition: u32,
        consumer: String,
        count: u32,
    },
    /// Ack (`nack_due` None) or nack records of a partition the receiver owns.
    StreamSettle {
        namespace: String,
        stream: String,
        group: String,
        partition: u32,
        ids: Vec<flo_protocol::StreamId>,
        nack_due: Option<u64>,
    },
    /// Records to append to a partition the receiver owns (`streams::scatter`): ids at or
    /// above `min_id`.
    StreamAppend {
        namespace: String,
        stream: String,
        partition: u32,
        records: Vec<flo_protocol::StreamRecordIn>,
        min_id: Option<flo_protocol::StreamId>,
    },
    /// A worker's home asks for tasks.
    Want(WantMsg),
    WantCancel {
        namespace: String,
        worker_id: String,
        want_id: u64,
    },
    /// Tasks leased (durably) for a parked want, for the worker's home.
    TasksDelivered {
        namespace: String,
        worker_id: String,
        want_id: u64,
        tasks: Vec<TaskAssignment>,
    },
    /// Leased tasks that no worker will receive: pending again.
    ReleaseLeases {
        namespace: String,
        worker_id: String,
        run_ids: Vec<String>,
    },
    /// A worker finished (`ok`) or failed a task: counted on its home shard.
    WorkerTaskDone {
        namespace: String,
        worker_id: String,
        action: String,
        ok: bool,
        at_ms: u64,
    },
    /// The connection of an await forwarded to the worker's home closed.
    AbandonAwait {
        namespace: String,
        worker_id: String,
        tag: u64,
    },
    /// Guest KV writes of a durable completion (`origin_lsn` on the sender) for keys the
    /// receiver owns.
    RemoteWrites {
        origin_lsn: u64,
        namespace: String,
        writes: Vec<GuestKvWrite>,
    },
    /// A guest reads a key the receiver owns.
    KvRead { namespace: String, key: String },
    /// The connection of a blocking read forwarded to the receiver (its call `tag`) closed.
    KvWaitAbandon { tag: u64 },
    /// The connection of a wait for a run forwarded to the receiver (its call `tag`)
    /// closed.
    WatchAbandon { tag: u64 },
    /// The shared test clock moved: look at timers again.
    ClockMoved,
}

/// Parameters of a `Want`.
#[derive(Debug, Clone)]
pub struct WantMsg {
    pub namespace: String,
    pub worker_id: String,
    pub want_id: u64,
    pub actions: Vec<String>,
    pub labels: Option<Map<String, Value>>,
    pub room: u32,
    pub deadline_ms: u64,
    /// The worker's load when it asked: parked wants are served least loaded first.
    pub load: u32,
}

/// The answer to an operation and the LSN it may leave after (0: at once).
#[derive(Debug)]
pub struct Done {
    pub result: ReplyResult,
    pub wait_lsn: u64,
}

impl Done {
    pub fn now(result: ReplyResult) -> Self {
        Done {
            result,
            wait_lsn: 0,
        }
    }
}
