use crate::requests::{self, Transport, TypedRequest, send};
use flo_protocol::{
    ActionInfo, ActionSpec, ErrorCode, ErrorValue, FRAME_BYTES_MAX, FrameError, IDLE_CLOSED_PREFIX,
    KvEntry, Op, PlanExecutorInfo, Reply, Request, Response, RunInfo, RunStatus, RunSummary,
    ScheduleInfo, ShardMap, StatusInfo, TaskAssignment, TimedOutFilter, ValidationIssue,
    WorkerInfo, WorkerSpec, WorkerStatus, WorkflowControl, WorkflowInfo, WorkflowRunInfo,
    WorkflowRunStatus, decode_payload, encode_frame, split_frame,
};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the server: {0}")]
    Io(#[from] io::Error),
    #[error("{}", .0.message)]
    Server(ErrorValue),
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::Protocol(e.to_string())
    }
}

/// Why a request could not be sent (nothing was): one over the frame limit says how large
/// it is and what the limits are.
pub(crate) fn request_error(e: FrameError) -> Error {
    match e {
        FrameError::TooLarge { len, max } => Error::Protocol(format!(
            "the request is {len} bytes, over the {max}-byte limit of one request (a KV value \
             is at most {} bytes): send less at once",
            flo_protocol::KV_VALUE_BYTES_MAX
        )),
        e => e.into(),
    }
}

/// A raw connection: send requests, receive responses, pipelined (many in flight).
pub struct Connection {
    stream: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Connection {
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        Self::from_stream(TcpStream::connect(addr)?)
    }

    /// Connects, giving up on each resolved address after `timeout`.
    pub fn connect_timeout(addr: impl ToSocketAddrs, timeout: Duration) -> Result<Self, Error> {
        let mut last_error = None;
        for addr in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => return Self::from_stream(stream),
                Err(e) => last_error = Some(e),
            }
        }
        Err(Error::Io(last_error.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the address resolved to nothing",
            )
        })))
    }

    fn from_stream(stream: TcpStream) -> Result<Self, Error> {
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            out: Vec::new(),
            buf: vec![0; 64 << 10],
            start: 0,
            end: 0,
        })
    }

    /// The server's address.
    pub fn peer_addr(&self) -> Result<std::net::SocketAddr, Error> {
        Ok(self.stream.peer_addr()?)
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), Error> {
        Ok(self.stream.set_read_timeout(timeout)?)
    }

    /// Queues a request; `flush` sends everything queued.
    pub fn queue(&mut self, request: &Request) -> Result<(), Error> {
        encode_frame(request, &mut self.out).map_err(request_error)
    }

    pub fn flush(&mut self) -> Result<(), Error> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// The next response already received, without reading the socket.
    pub fn recv_buffered(&mut self) -> Result<Option<Response>, Error> {
        let Some((payload, used)) = split_frame(&self.buf[self.start..self.end], FRAME_BYTES_MAX)?
        else {
            return Ok(None);
        };
        let response = decode_payload(payload);
        self.start += used;
        Ok(Some(response?))
    }

    /// Receives the next response (whichever request it answers).
    pub fn recv(&mut self) -> Result<Response, Error> {
        loop {
            if let Some(response) = self.recv_buffered()? {
                return Ok(response);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown.min(FRAME_BYTES_MAX + 8), 0);
            }
            let n = self.stream.read(&mut self.buf[self.end..])?;
            if n == 0 {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                )));
            }
            self.end += n;
        }
    }

    /// A handle for writing from another thread while this one reads.
    pub fn try_clone_stream(&self) -> Result<TcpStream, Error> {
        Ok(self.stream.try_clone()?)
    }
}

/// Options of a KV put.
#[derive(Debug, Clone, Copy, Default)]
pub struct PutOptions {
    /// Expire the key this long from now (None: never).
    pub ttl_ms: Option<u64>,
    /// Only if the key's current version is this (0: only if the key is absent).
    pub if_version: Option<u64>,
    /// Only if the key exists (else a `not_found` error).
    pub if_exists: bool,
}

/// A page of a run's history (see `Client::workflow_history_page`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryPage {
    /// Oldest first; each carries its `seq`.
    pub events: Vec<flo_protocol::HistoryEvent>,
    /// More events follow: pass this as `after` for the next page.
    pub next_after: Option<u64>,
}

/// A page of the run event feed (see `Client::workflow_events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsPage {
    /// Oldest first.
    pub events: Vec<flo_protocol::WorkflowEvent>,
    /// Where the next page starts (a feed has no end: ask again later for more).
    pub cursor: String,
    /// Events between the asked position and these were dropped unread (each shard keeps
    /// the newest 65,536).
    pub gap: bool,
}

/// A blocking client: one request at a time over one connection, in one namespace.
pub struct Client {
    conn: Connection,
    next_id: u64,
    namespace: String,
    shard_count: u32,
    server_version: String,
    shard: Option<u32>,
    /// To connect again when the server closed the connection as idle.
    addr: std::net::SocketAddr,
    token: Option<String>,
    /// The shard this client keeps its connection on (`connect_on_shard`).
    want_shard: Option<u32>,
    /// How long a reply may take to arrive (`set_read_timeout`); None: without end.
    read_timeout: Option<Duration>,
}

/// Connections a client tries at most to land on the shard it asked for.
pub(crate) const SHARD_TRIES: usize = 64;

/// Whether a connection the server says is on `shard` (of `shard_count`) is on `want`; an
/// error when no connection ever will be.
pub(crate) fn on_shard(want: u32, shard: Option<u32>, shard_count: u32) -> Result<bool, Error> {
    match shard {
        Some(shard) if shard == want => Ok(true),
        None => Err(Error::Protocol(
            "the server does not say which shard serves a connection".into(),
        )),
        Some(_) if want >= shard_count => Err(Error::Protocol(format!(
            "the server has {shard_count} shards, no shard {want}"
        ))),
        Some(_) => Ok(false),
    }
}

/// `SHARD_TRIES` connections landed elsewhere.
pub(crate) fn missed_shard(want: u32) -> Error {
    Error::Protocol(format!(
        "no connection landed on shard {want} in {SHARD_TRIES} tries"
    ))
}

impl Client {
    /// Connects and performs the handshake (no token: a server without an auth file).
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        Self::connect_as(addr, None)
    }

    /// Connects and presents `token` in the handshake (a server started with
    /// `--auth-file`); the connection may then do what the token grants.
    pub fn connect_with_token(addr: impl ToSocketAddrs, token: &str) -> Result<Self, Error> {
        Self::connect_as(addr, Some(token))
    }

    /// Connects, presenting `token` when there is one.
    pub fn connect_as(addr: impl ToSocketAddrs, token: Option<&str>) -> Result<Self, Error> {
        let conn = Connection::connect(addr)?;
        let mut client = Client {
            addr: conn.peer_addr()?,
            conn,
            next_id: 1,
            namespace: "default".into(),
            shard_count: 0,
            server_version: String::new(),
            shard: None,
            token: token.map(str::to_string),
            want_shard: None,
            read_timeout: None,
        };
        client.hello()?;
        Ok(client)
    }

    /// Connects to shard `shard` (0-based) of the server, presenting `token` when there is
    /// one. Every shard listens on the port and the kernel gives each connection to one of
    /// them, so this connects again until one lands there (with N shards, N tries on
    /// average; a reconnection after an idle close lands there too). A keyed operation sent
    /// through a connection on its owner ([`shard_map`](Self::shard_map)) takes no hop
    /// between shards, and new runs belong to the connection's shard. Fails if the server
    /// does not name its shards, has no such shard, or 64 tries missed it.
    pub fn connect_on_shard(
        addr: impl ToSocketAddrs,
        token: Option<&str>,
        shard: u32,
    ) -> Result<Self, Error> {
        let mut client = Self::connect_as(addr, token)?;
        client.want_shard = Some(shard);
        client.land()?;
        Ok(client)
    }

    /// Connects again until the connection is on the shard asked for (if any).
    fn land(&mut self) -> Result<(), Error> {
        let Some(want) = self.want_shard else {
            return Ok(());
        };
        for _ in 0..SHARD_TRIES {
            if on_shard(want, self.shard, self.shard_count)? {
                return Ok(());
            }
            self.reconnect()?;
        }
        if on_shard(want, self.shard, self.shard_count)? {
            return Ok(());
        }
        Err(missed_shard(want))
    }

    /// A new connection to the server, with this client's read timeout, handshaken.
    fn reconnect(&mut self) -> Result<(), Error> {
        self.conn = Connection::connect(self.addr)?;
        self.conn.set_read_timeout(self.read_timeout)?;
        self.hello()
    }

    /// How long to wait for a reply before the call fails with an I/O error of kind
    /// `WouldBlock` or `TimedOut` (None: without end, the default); kept across the
    /// connections the client makes again. A call that timed out leaves its reply
    /// unread: connect again rather than go on with this client.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.read_timeout = timeout;
        self.conn.set_read_timeout(timeout)
    }

    fn hello(&mut self) -> Result<(), Error> {
        let hello = requests::Hello {
            token: self.token.as_deref(),
        };
        // The handshake is in no namespace.
        let op = hello.op("");
        let hello = requests::Hello::output(self.round_trip(&op)?)?;
        self.shard_count = hello.shard_count;
        self.server_version = hello.server_version;
        self.shard = hello.shard;
        Ok(())
    }

    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// The shard serving this connection, as the server said in the handshake (the kernel
    /// picks one per connection; every operation is forwarded to the shard that owns it,
    /// and new runs belong to this one). None from a server that does not say.
    pub fn shard(&self) -> Option<u32> {
        self.shard
    }

    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// Sends one operation and waits for its reply. A connection the server closed as
    /// idle (it says no request was taken) is replaced and the operation sent again.
    pub fn call(&mut self, op: Op) -> Result<Reply, Error> {
        match self.round_trip(&op) {
            Err(Error::Server(e))
                if e.code == ErrorCode::Unavailable
                    && e.message.starts_with(IDLE_CLOSED_PREFIX) =>
            {
                self.reconnect()?;
                self.land()?;
                self.round_trip(&op)
            }
            result => result,
        }
    }

    /// Sends one operation on the current connection and waits for its reply.
    fn round_trip(&mut self, op: &Op) -> Result<Reply, Error> {
        let id = self.next_id;
        self.next_id += 1;
        // The wire form of `Request { id, op }`, without taking the operation.
        #[derive(serde::Serialize)]
        struct RequestRef<'a> {
            id: u64,
            op: &'a Op,
        }
        encode_frame(&RequestRef { id, op }, &mut self.conn.out).map_err(request_error)?;
        self.conn.flush()?;
        loop {
            let response = self.conn.recv()?;
            if response.id == id || response.id == 0 {
                return response.result.map_err(Error::Server);
            }
        }
    }

    pub fn status(&mut self) -> Result<StatusInfo, Error> {
        send(self, requests::Status)
    }

    /// How keys map to shards: `ShardMap::shard_of(namespace, key)` names the shard that
    /// owns a key, so that a client holding a connection on each shard ([`shard`](Self::shard))
    /// can send each keyed operation where it is served without a hop.
    pub fn shard_map(&mut self) -> Result<ShardMap, Error> {
        send(self, requests::GetShardMap)
    }

    /// Moves the server's clock forward (servers started with `--test-clock` only).
    pub fn advance_clock(&mut self, ms: u64) -> Result<(), Error> {
        send(self, requests::AdvanceClock { ms })
    }
}

/// The table sends its requests through `call`, so they reconnect like any call.
impl Transport for &mut Client {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn call(self, op: Op) -> Result<Reply, Error> {
        Client::call(self, op)
    }
}

/// Key-value operations.
impl Client {
    /// Stores `value` under `key`; returns the key's new version.
    pub fn kv_put(&mut self, key: &str, value: &[u8], opts: PutOptions) -> Result<u64, Error> {
        send(self, requests::KvPut { key, value, opts })
    }

    pub fn kv_get(&mut self, key: &str) -> Result<Option<KvEntry>, Error> {
        self.kv_get_wait(key, 0, None)
    }

    /// Reads `key`, waiting up to `wait_ms` (at most `KV_WAIT_MS_MAX`) for it to hold a
    /// version newer than `after_version` (any version when None: for it to exist). None
    /// when nothing newer came in time.
    pub fn kv_get_wait(
        &mut self,
        key: &str,
        wait_ms: u64,
        after_version: Option<u64>,
    ) -> Result<Option<KvEntry>, Error> {
        let get = requests::KvGet {
            key,
            wait_ms,
            after_version,
            newer_than_current: false,
        };
        send(self, get)
    }

    /// Waits up to `wait_ms` (at most `KV_WAIT_MS_MAX`) for `key` to hold a version newer
    /// than the one it holds when the server receives the request (any version if it holds
    /// none): the next write. None when none came in time.
    pub fn kv_get_next(&mut self, key: &str, wait_ms: u64) -> Result<Option<KvEntry>, Error> {
        let get = requests::KvGet {
            key,
            wait_ms,
            after_version: None,
            newer_than_current: true,
        };
        send(self, get)
    }

    /// Deletes `key`; returns whether it existed.
    pub fn kv_delete(&mut self, key: &str, if_version: Option<u64>) -> Result<bool, Error> {
        send(self, requests::KvDelete { key, if_version })
    }

    /// Entries whose key starts with `prefix`, in key order; the flag says more matched.
    pub fn kv_list(
        &mut self,
        prefix: &str,
        limit: Option<u32>,
    ) -> Result<(Vec<KvEntry>, bool), Error> {
        let page = self.kv_list_page(prefix, limit, None)?;
        Ok((page.items, page.next_cursor.is_some()))
    }

    /// One page of the entries whose key starts with `prefix`, in key order, after
    /// `cursor` (the previous page's `next_cursor`; none: the first page). A page may hold
    /// fewer than `limit` entries; the list is over when `next_cursor` is none.
    pub fn kv_list_page(
        &mut self,
        prefix: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<KvEntry>, Error> {
        let list = requests::KvListPage {
            prefix,
            limit,
            cursor,
        };
        send(self, list)
    }
}

/// One page of a list, and where the next one starts (none: this was the last).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Options of an invocation (see `Client::invoke`).
#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    pub priority: Option<u8>,
    pub delay_ms: Option<u64>,
    pub idempotency_key: Option<String>,
    /// Required worker labels, a flat JSON object.
    pub labels: Option<String>,
}

/// Action operations: definitions, invocations and their runs.
impl Client {
    /// Registers an action (`spec.namespace` is replaced by the client's namespace).
    pub fn register_action(&mut self, spec: ActionSpec) -> Result<ActionInfo, Error> {
        send(self, requests::RegisterAction { spec })
    }

    pub fn action(&mut self, name: &str) -> Result<ActionInfo, Error> {
        send(self, requests::GetAction { name })
    }

    pub fn list_actions(&mut self) -> Result<Vec<ActionInfo>, Error> {
        send(self, requests::ListActions)
    }

    pub fn delete_action(&mut self, name: &str) -> Result<(), Error> {
        send(self, requests::DeleteAction { name })
    }

    pub fn set_action_enabled(&mut self, name: &str, enabled: bool) -> Result<ActionInfo, Error> {
        send(self, requests::SetActionEnabled { name, enabled })
    }

    /// Creates a run; returns its id (the existing run's id when the idempotency key was
    /// seen before).
    pub fn invoke(
        &mut self,
        action: &str,
        input: &[u8],
        opts: InvokeOptions,
    ) -> Result<String, Error> {
        let invoke = requests::Invoke {
            action,
            input,
            opts,
        };
        send(self, invoke)
    }

    /// Creates a run and waits up to `wait_ms` for it to finish; returns its status.
    pub fn invoke_and_wait(
        &mut self,
        action: &str,
        input: &[u8],
        opts: InvokeOptions,
        wait_ms: u64,
    ) -> Result<RunInfo, Error> {
        let invoke = requests::InvokeAndWait {
            action,
            input,
            opts,
            wait_ms,
        };
        send(self, invoke)
    }

    pub fn run(&mut self, run_id: &str) -> Result<RunInfo, Error> {
        send(self, requests::GetRun { run_id })
    }

    /// Waits up to `timeout_ms` for the run to be final; returns its status either way.
    pub fn wait_run(&mut self, run_id: &str, timeout_ms: u64) -> Result<RunInfo, Error> {
        send(self, requests::WaitRun { run_id, timeout_ms })
    }

    /// Runs of an action, newest first; `dead_letter` keeps only those that exhausted
    /// their retries.
    pub fn list_runs(
        &mut self,
        action: &str,
        status: Option<RunStatus>,
        dead_letter: bool,
        limit: Option<u32>,
    ) -> Result<(Vec<RunInfo>, bool), Error> {
        let page = self.list_runs_page(action, status, dead_letter, limit, None)?;
        Ok((page.items, page.next_cursor.is_some()))
    }

    /// One page of an action's runs after `cursor` (the previous page's `next_cursor`;
    /// none: the first page): in-flight runs newest first, then finished ones. A page may
    /// hold fewer than `limit`; the list is over when `next_cursor` is none.
    pub fn list_runs_page(
        &mut self,
        action: &str,
        status: Option<RunStatus>,
        dead_letter: bool,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<RunInfo>, Error> {
        let list = requests::ListRunsPage {
            action,
            status,
            dead_letter,
            limit,
            cursor,
            query: None,
        };
        send(self, list)
    }

    /// A page of the action runs matching `query` (see `flo action runs --query`: status,
    /// action, run_id, created_at, updated_at, attempt, priority, dead_letter,
    /// workflow_run_id, outcome, `labels.NAME`), of `action` or of every action; in-flight
    /// runs newest first, then finished ones, most recently finished first. Go on with the
    /// page's `next_cursor`; a page may be short.
    pub fn query_runs(
        &mut self,
        action: Option<&str>,
        query: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<RunInfo>, Error> {
        let list = requests::ListRunsPage {
            action: action.unwrap_or(""),
            status: None,
            dead_letter: false,
            limit,
            cursor,
            query: Some(query),
        };
        send(self, list)
    }

    pub fn cancel_run(&mut self, run_id: &str) -> Result<RunInfo, Error> {
        send(self, requests::CancelRun { run_id })
    }

    /// Queues a dead-lettered run again as a new attempt (pending, attempt + 1); returns
    /// the run. `action`, when given, must be the run's action. A run that is not
    /// dead-lettered, or that executed a workflow step, is refused (`conflict`).
    pub fn redrive_run(&mut self, run_id: &str, action: Option<&str>) -> Result<RunInfo, Error> {
        send(self, requests::RedriveRun { run_id, action })
    }
}

/// How a failed task continues (see `Client::fail_task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Another attempt after backoff while retries remain; then failed and dead-lettered.
    Retry,
    /// Failed now and dead-lettered.
    NoRetry,
    /// Failed now, not dead-lettered (the task can never succeed).
    NonRetryable,
}

/// A worker id for a worker that was given none: hostname plus random hex.
pub fn generate_worker_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = hostname().unwrap_or_else(|| "worker".to_string());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{host}-{:08x}", hasher.finish() as u32)
}

/// This machine's host name, when it has one.
pub(crate) fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Worker operations: registry, long-poll for tasks, and reporting their results.
impl Client {
    /// Registers (or re-registers, replacing) a worker in the client's namespace.
    pub fn register_worker(&mut self, spec: WorkerSpec) -> Result<WorkerInfo, Error> {
        send(self, requests::RegisterWorker { spec })
    }

    /// Reports liveness and load; returns the worker's status (`Draining`: take no more
    /// tasks).
    pub fn heartbeat(&mut self, worker_id: &str, current_load: u32) -> Result<WorkerStatus, Error> {
        let heartbeat = requests::Heartbeat {
            worker_id,
            current_load,
        };
        send(self, heartbeat)
    }

    pub fn drain_worker(&mut self, worker_id: &str) -> Result<WorkerInfo, Error> {
        send(self, requests::DrainWorker { worker_id })
    }

    pub fn deregister_worker(&mut self, worker_id: &str) -> Result<(), Error> {
        send(self, requests::DeregisterWorker { worker_id })
    }

    pub fn worker(&mut self, worker_id: &str) -> Result<WorkerInfo, Error> {
        send(self, requests::GetWorker { worker_id })
    }

    pub fn list_workers(&mut self) -> Result<Vec<WorkerInfo>, Error> {
        send(self, requests::ListWorkers)
    }

    /// Waits up to `block_ms` for tasks of `actions`; returns up to `max_tasks` tasks
    /// leased to `worker_id` (empty when none came).
    pub fn await_tasks(
        &mut self,
        worker_id: &str,
        actions: &[&str],
        max_tasks: u32,
        block_ms: u64,
    ) -> Result<Vec<TaskAssignment>, Error> {
        let poll = requests::AwaitTasks::new(worker_id, actions, max_tasks, block_ms);
        send(self, poll)
    }

    /// `await_tasks` for the tasks of the worker's home shard only (the shard its id
    /// belongs to, `ShardMap::shard_of`): no other shard is asked. For a worker per shard,
    /// each connected to its home (`connect_on_shard`), so no task crosses between shards.
    pub fn await_home_tasks(
        &mut self,
        worker_id: &str,
        actions: &[&str],
        max_tasks: u32,
        block_ms: u64,
    ) -> Result<Vec<TaskAssignment>, Error> {
        let mut poll = requests::AwaitTasks::new(worker_id, actions, max_tasks, block_ms);
        poll.home_only = true;
        send(self, poll)
    }

    /// Completes a task leased to `worker_id` with `result` (and a named outcome).
    pub fn complete_task(
        &mut self,
        worker_id: &str,
        task: &TaskRef<'_>,
        result: &[u8],
        outcome: Option<&str>,
    ) -> Result<(), Error> {
        self.complete_task_with_state(worker_id, task, result, outcome, None)
    }

    /// `complete_task`, and for a workflow step's task the fields (a JSON object) to set
    /// in the run's state with the step's completion.
    pub fn complete_task_with_state(
        &mut self,
        worker_id: &str,
        task: &TaskRef<'_>,
        result: &[u8],
        outcome: Option<&str>,
        state: Option<&[u8]>,
    ) -> Result<(), Error> {
        let complete = requests::CompleteTask {
            worker_id,
            task,
            result,
            outcome,
            state,
        };
        send(self, complete)
    }

    /// Fails a task leased to `worker_id`; returns the run as it is afterwards (pending
    /// for a retry, or failed).
    pub fn fail_task(
        &mut self,
        worker_id: &str,
        task: &TaskRef<'_>,
        error: &str,
        mode: FailMode,
    ) -> Result<RunInfo, Error> {
        self.fail_task_coded(worker_id, task, error, None, mode)
    }

    /// `fail_task` with a code naming the error (`invalid_card`): an inline plan's
    /// `errors:` classify it (see `CodedError`).
    pub fn fail_task_coded(
        &mut self,
        worker_id: &str,
        task: &TaskRef<'_>,
        error: &str,
        code: Option<&str>,
        mode: FailMode,
    ) -> Result<RunInfo, Error> {
        let fail = requests::FailTask {
            worker_id,
            task,
            error,
            mode,
            code,
        };
        send(self, fail)
    }

    /// Extends the lease of a task leased to `worker_id` to `extend_ms` from now; returns
    /// when it now expires.
    pub fn touch_task(
        &mut self,
        worker_id: &str,
        task: &TaskRef<'_>,
        extend_ms: u64,
    ) -> Result<u64, Error> {
        let touch = requests::TouchTask {
            worker_id,
            task,
            extend_ms,
        };
        send(self, touch)
    }
}

/// Options of a workflow start (see `Client::start_workflow`).
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// None: the latest version.
    pub version: Option<String>,
    pub idempotency_key: Option<String>,
    /// The run's id, chosen by the caller (None: the server picks one).
    pub run_id: Option<String>,
    /// The run's group: runs of a group share the state fields their steps set as
    /// `flow_group:NAME` (read them with `shared_state`).
    pub group: Option<String>,
    /// Where the run's events are POSTed (instead of the definition's `webhook.url`; with
    /// its events, headers, secret and retry, or the defaults: the run's end).
    pub webhook: Option<String>,
}

/// Workflow operations: definitions, runs, signals, history.
impl Client {
    /// Creates a workflow definition from YAML; returns (name, version, created, warnings).
    pub fn create_workflow(
        &mut self,
        yaml: &str,
    ) -> Result<(String, String, bool, Vec<ValidationIssue>), Error> {
        send(self, requests::CreateWorkflow { yaml })
    }

    /// A definition: `version`, or the latest.
    pub fn workflow(&mut self, name: &str, version: Option<&str>) -> Result<WorkflowInfo, Error> {
        send(self, requests::GetWorkflow { name, version })
    }

    pub fn list_workflows(&mut self) -> Result<Vec<WorkflowInfo>, Error> {
        send(self, requests::ListWorkflows)
    }

    /// A page of the runs matching `query` (see `flo workflow list-runs --query`), of
    /// `workflow` or of every workflow with search attributes; newest started first
    /// (`ascending`: oldest first). Go on with the page's `next_cursor`.
    pub fn query_workflow_runs(
        &mut self,
        workflow: Option<&str>,
        query: &str,
        ascending: bool,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<RunSummary>, Error> {
        let ask = requests::QueryWorkflowRuns {
            workflow,
            query,
            ascending,
            limit,
            cursor,
        };
        send(self, ask)
    }

    /// The in-memory state of `workflow`'s inline plans (of `plan` only, when given) on
    /// every shard that ran one of their steps since it started: each executor's breaker,
    /// health score, samples and rate-limit use.
    pub fn plan_status(
        &mut self,
        workflow: &str,
        plan: Option<&str>,
    ) -> Result<Vec<PlanExecutorInfo>, Error> {
        send(self, requests::PlanStatus { workflow, plan })
    }

    /// Publishes the cache-invalidation event `event` (a name in plans' `invalidate_on`):
    /// their cached outputs (of `key` only, when given) are dropped on every shard.
    /// Returns how many.
    pub fn invalidate_plan_cache(&mut self, event: &str, key: Option<&str>) -> Result<u64, Error> {
        send(self, requests::InvalidatePlanCache { event, key })
    }

    /// The schedules of the namespace's workflows, with their next fire times.
    pub fn list_schedules(&mut self) -> Result<Vec<ScheduleInfo>, Error> {
        send(self, requests::ListSchedules)
    }

    /// Pauses a workflow's schedule: no tick fires until `resume_schedule` (the ticks
    /// in between are not made up).
    pub fn pause_schedule(&mut self, workflow: &str) -> Result<ScheduleInfo, Error> {
        send(
            self,
            requests::PauseSchedule {
                name: workflow,
                paused: true,
            },
        )
    }

    pub fn resume_schedule(&mut self, workflow: &str) -> Result<ScheduleInfo, Error> {
        send(
            self,
            requests::PauseSchedule {
                name: workflow,
                paused: false,
            },
        )
    }

    /// Fires a workflow's schedule now (a run with the schedule's input, whatever its
    /// pause and `max_concurrent` say); returns the run's id.
    pub fn trigger_schedule(&mut self, workflow: &str) -> Result<String, Error> {
        send(self, requests::TriggerSchedule { name: workflow })
    }

    pub fn set_workflow_enabled(
        &mut self,
        name: &str,
        enabled: bool,
    ) -> Result<WorkflowInfo, Error> {
        send(self, requests::SetWorkflowEnabled { name, enabled })
    }

    /// Starts a run (input is JSON); returns its id (the existing run's id when the
    /// idempotency key was seen before).
    pub fn start_workflow(
        &mut self,
        name: &str,
        input: &[u8],
        opts: StartOptions,
    ) -> Result<String, Error> {
        send(self, requests::StartWorkflow { name, input, opts })
    }

    /// Starts a run and waits up to `wait_ms` for it to finish; returns its status.
    pub fn start_workflow_and_wait(
        &mut self,
        name: &str,
        input: &[u8],
        opts: StartOptions,
        wait_ms: u64,
    ) -> Result<WorkflowRunInfo, Error> {
        let start = requests::StartWorkflowAndWait {
            name,
            input,
            opts,
            wait_ms,
        };
        send(self, start)
    }

    pub fn workflow_run(&mut self, run_id: &str) -> Result<WorkflowRunInfo, Error> {
        send(self, requests::GetWorkflowRun { run_id })
    }

    /// Waits up to `timeout_ms` for the run to be final; returns its status either way.
    pub fn wait_workflow(
        &mut self,
        run_id: &str,
        timeout_ms: u64,
    ) -> Result<WorkflowRunInfo, Error> {
        send(self, requests::WaitWorkflow { run_id, timeout_ms })
    }

    pub fn workflow_history(
        &mut self,
        run_id: &str,
    ) -> Result<Vec<flo_protocol::HistoryEvent>, Error> {
        send(self, requests::WorkflowHistory { run_id })
    }

    /// The state fields runs share (flow8's KV scopes): a group's (`flow_group:NAME`,
    /// `SharedScope::Group` with the group's name) or a definition's (`flow:NAME`,
    /// `SharedScope::Flow` with the workflow's name), as one object. They are KV entries
    /// (`flo.group/G/NAME`, `flo.flow/WORKFLOW/NAME`), read here page by page.
    pub fn shared_state(
        &mut self,
        scope: flo_protocol::SharedScope,
        owner: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
        let prefix = flo_protocol::shared_state_prefix(scope, owner);
        let mut fields = serde_json::Map::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.kv_list_page(&prefix, Some(1000), cursor.as_deref())?;
            for e in page.items {
                let name = e.key.strip_prefix(&prefix).unwrap_or(&e.key).to_string();
                let value = serde_json::from_slice(&e.value).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&e.value).into())
                });
                fields.insert(name, value);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(fields),
            }
        }
    }

    /// A page of the namespace's run event feed (of `workflow` only, when given) after
    /// `cursor` (None: from the oldest event kept): runs started, steps started, waiting
    /// and finished, state updated, runs continued and ended. Follow the feed by asking
    /// again with the page's cursor.
    pub fn workflow_events(
        &mut self,
        workflow: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<EventsPage, Error> {
        let ask = requests::WorkflowEvents {
            workflow,
            cursor,
            limit,
        };
        send(self, ask)
    }

    /// The namespace's webhook deliveries (of `workflow` only, when given), oldest first:
    /// those given up after their last attempt (`failed`), or those waiting to be sent or
    /// retried. Returns them and whether more were left out (at most `limit`).
    pub fn webhook_deliveries(
        &mut self,
        failed: bool,
        workflow: Option<&str>,
        limit: Option<u32>,
    ) -> Result<(Vec<flo_protocol::WebhookDelivery>, bool), Error> {
        let ask = requests::WebhookDeliveries {
            failed,
            workflow,
            limit,
        };
        send(self, ask)
    }

    /// Sends a failed webhook delivery again (its id from `webhook_deliveries`): the same
    /// id and body, its attempts counted from 1 again.
    pub fn redeliver_webhook(&mut self, id: &str) -> Result<(), Error> {
        send(self, requests::RedeliverWebhook { id })
    }

    /// One page of a run's history, oldest first: at most `limit` events (None: the
    /// server's default page) after event `after` (None: from the first).
    pub fn workflow_history_page(
        &mut self,
        run_id: &str,
        limit: Option<u32>,
        after: Option<u64>,
    ) -> Result<HistoryPage, Error> {
        send(
            self,
            requests::WorkflowHistoryPage {
                run_id,
                limit,
                after,
            },
        )
    }

    /// Sends a typed signal (payload is JSON) to a run.
    pub fn signal_workflow(
        &mut self,
        run_id: &str,
        signal_type: &str,
        payload: &[u8],
    ) -> Result<(), Error> {
        let signal = requests::SignalWorkflow {
            run_id,
            signal_type,
            payload,
        };
        send(self, signal)
    }

    pub fn cancel_workflow(
        &mut self,
        run_id: &str,
        reason: Option<&str>,
    ) -> Result<WorkflowRunInfo, Error> {
        send(self, requests::CancelWorkflow { run_id, reason })
    }

    /// Pauses a run: no step starts until `resume_workflow` (what runs finishes; the run
    /// shows `on_hold`). Pausing a paused run changes nothing.
    pub fn pause_workflow(&mut self, run_id: &str) -> Result<WorkflowRunInfo, Error> {
        let control = WorkflowControl::Pause;
        send(self, requests::ControlWorkflow { run_id, control })
    }

    pub fn resume_workflow(&mut self, run_id: &str) -> Result<WorkflowRunInfo, Error> {
        let control = WorkflowControl::Resume;
        send(self, requests::ControlWorkflow { run_id, control })
    }

    /// Starts again the steps of a run that wait for an action run or a child run, or
    /// sleep before a retry (what they waited for is cancelled); `reset_visits` counts
    /// their visits from 1 again.
    pub fn continue_workflow(
        &mut self,
        run_id: &str,
        reset_visits: bool,
    ) -> Result<WorkflowRunInfo, Error> {
        let control = WorkflowControl::Continue { reset_visits };
        send(self, requests::ControlWorkflow { run_id, control })
    }

    /// Merges the fields of `state` (a JSON object) into a run's state (Codehooks'
    /// `updateState`); with `continue_run` the run must wait in a `waitForState` step,
    /// which then goes on (in the same atomic change). Answers the run's status.
    pub fn update_workflow_state(
        &mut self,
        run_id: &str,
        state: &[u8],
        continue_run: bool,
    ) -> Result<WorkflowRunInfo, Error> {
        let replace = false;
        let update = requests::UpdateWorkflowState {
            run_id,
            state,
            replace,
            continue_run,
        };
        send(self, update)
    }

    /// Replaces a run's state with `state` (a JSON object; Codehooks' `setState`).
    pub fn set_workflow_state(
        &mut self,
        run_id: &str,
        state: &[u8],
        continue_run: bool,
    ) -> Result<WorkflowRunInfo, Error> {
        let replace = true;
        let update = requests::UpdateWorkflowState {
            run_id,
            state,
            replace,
            continue_run,
        };
        send(self, update)
    }

    /// Runs of `workflow` (in flight) with a step waiting longer than its `timeoutMs`, or
    /// than `older_than_ms` when given: at most `limit` (one page).
    pub fn timed_out_runs(
        &mut self,
        workflow: &str,
        older_than_ms: Option<u64>,
        limit: Option<u32>,
    ) -> Result<Vec<WorkflowRunInfo>, Error> {
        let list = requests::ListWorkflowRunsPage {
            name: workflow,
            status: None,
            limit,
            cursor: None,
            timed_out: Some(TimedOutFilter { older_than_ms }),
        };
        Ok(send(self, list)?.items)
    }

    /// Runs of a workflow, newest first; the flag says more matched than `limit`.
    pub fn list_workflow_runs(
        &mut self,
        name: &str,
        status: Option<WorkflowRunStatus>,
        limit: Option<u32>,
    ) -> Result<(Vec<WorkflowRunInfo>, bool), Error> {
        let page = self.list_workflow_runs_page(name, status, limit, None)?;
        Ok((page.items, page.next_cursor.is_some()))
    }

    /// One page of a workflow's runs after `cursor` (the previous page's `next_cursor`;
    /// none: the first page): in-flight runs newest first, then finished ones. A page may
    /// hold fewer than `limit`; the list is over when `next_cursor` is none.
    pub fn list_workflow_runs_page(
        &mut self,
        name: &str,
        status: Option<WorkflowRunStatus>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<WorkflowRunInfo>, Error> {
        let list = requests::ListWorkflowRunsPage {
            name,
            status,
            limit,
            cursor,
            timed_out: None,
        };
        send(self, list)
    }
}

/// Names a leased task: its id, action and (optionally) the attempt it was leased for.
#[derive(Debug, Clone, Copy)]
pub struct TaskRef<'a> {
    pub task_id: &'a str,
    pub action: &'a str,
    /// When given, the server refuses the report if the task moved on to another attempt.
    pub attempt: Option<u32>,
}

impl<'a> From<&'a TaskAssignment> for TaskRef<'a> {
    fn from(task: &'a TaskAssignment) -> Self {
        TaskRef {
            task_id: &task.task_id,
            action: &task.action,
            attempt: Some(task.attempt),
        }
    }
}
