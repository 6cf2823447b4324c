//! `MuxClient`: one connection shared by many threads. Each call is written with a fresh
//! request id under a mutex; one reader thread hands every response to the thread waiting
//! for its id, so a long poll holds up nobody else. When the connection is lost, every
//! waiting call fails with `Error::Io`.

use crate::client::{Connection, Error, FailMode, SHARD_TRIES, TaskRef, missed_shard, on_shard};
use crate::requests::{self, Transport, TypedRequest, send};
use flo_protocol::{
    Op, RUN_WAIT_MS_MAX, Reply, Request, Response, RunInfo, TASK_AWAIT_MS_MAX, TaskAssignment,
    WorkerInfo, WorkerSpec, WorkerStatus, encode_frame,
};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Calls that may wait for their reply on one connection at once (the server reads at most
/// 4096 requests ahead per connection).
pub const MUX_PENDING_CALLS_MAX: usize = 4096;
/// Request id of the handshake; calls count from the next one (0 is the server's "no id").
const HELLO_REQUEST_ID: u64 = 1;

/// How a `MuxClient` connects.
#[derive(Debug, Clone)]
pub struct MuxOptions {
    /// Namespace of the typed calls (default `default`).
    pub namespace: String,
    /// Longest wait for the TCP connection to each resolved address (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for a reply beyond the time the operation itself asks the server to
    /// wait (a `TaskAwait`'s `block_ms`, a `RunWait`'s `timeout_ms`); also bounds the
    /// handshake and each write (default 30 s).
    pub reply_timeout: Duration,
    /// Presented in the handshake to a server started with `--auth-file` (default none).
    pub token: Option<String>,
    /// Connect again until the connection lands on this shard (default none: wherever the
    /// kernel puts it), as [`Client::connect_on_shard`](crate::Client::connect_on_shard)
    /// does; a reconnection lands there too.
    pub shard: Option<u32>,
}

impl Default for MuxOptions {
    fn default() -> Self {
        MuxOptions {
            namespace: "default".into(),
            connect_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(30),
            token: None,
            shard: None,
        }
    }
}

/// A thread-safe, pipelined client: share it (`Arc<MuxClient>`) and call from any number
/// of threads at once. Calls never wait for each other's replies, only for the socket write.
///
/// ```no_run
/// use flo::MuxClient;
/// use std::sync::Arc;
///
/// let client = Arc::new(MuxClient::connect("127.0.0.1:9000")?.with_namespace("myapp"));
/// let poller = {
///     let client = client.clone();
///     std::thread::spawn(move || client.await_tasks("w-1", &["send-email"], 10, 30_000))
/// };
/// client.heartbeat("w-1", 0)?; // answered while the poll above is still waiting
/// # let _ = poller;
/// # Ok::<(), flo::Error>(())
/// ```
///
/// Dropping (or `close`) shuts the connection down and stops the reader thread; calls still
/// waiting then fail with `Error::Io`.
pub struct MuxClient {
    shared: Arc<Shared>,
    reader: Mutex<Option<JoinHandle<()>>>,
    namespace: String,
    reply_timeout: Duration,
    shard_count: u32,
    server_version: String,
    shard: Option<u32>,
}

/// What the callers and the reader thread share.
struct Shared {
    writer: Mutex<TcpStream>,
    /// A handle on the socket for shutting it down without waiting for the writer.
    socket: TcpStream,
    next_id: AtomicU64,
    waiters: Mutex<Waiters>,
}

struct Waiters {
    by_id: HashMap<u64, SyncSender<Result<Reply, Error>>>,
    /// Set once the connection is gone; no call is accepted afterwards.
    closed: Option<Closed>,
}

/// Why the connection is gone (turned into an `Error::Io` for each waiting call).
#[derive(Debug, Clone)]
struct Closed {
    kind: io::ErrorKind,
    message: String,
}

impl Closed {
    fn by_client() -> Self {
        Closed {
            kind: io::ErrorKind::NotConnected,
            message: "the connection was closed by the client".into(),
        }
    }

    fn from_io(e: &io::Error) -> Self {
        Closed {
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    fn error(&self) -> Error {
        Error::Io(io::Error::new(self.kind, self.message.clone()))
    }
}

impl MuxClient {
    /// Connects with default options and performs the handshake.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        Self::connect_with(addr, MuxOptions::default())
    }

    /// Connects, performs the handshake and starts the reader thread. With
    /// `options.shard`, connects again until the connection is on that shard; fails if the
    /// server does not name its shards, has no such shard, or 64 tries missed it.
    pub fn connect_with(addr: impl ToSocketAddrs, options: MuxOptions) -> Result<Self, Error> {
        let (conn, hello) = connect_landed(addr, &options)?;
        let writer = conn.try_clone_stream()?;
        writer.set_write_timeout(Some(options.reply_timeout))?;
        let shared = Arc::new(Shared {
            writer: Mutex::new(writer),
            socket: conn.try_clone_stream()?,
            next_id: AtomicU64::new(HELLO_REQUEST_ID + 1),
            waiters: Mutex::new(Waiters {
                by_id: HashMap::new(),
                closed: None,
            }),
        });
        let reader = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("flo-mux-reader".into())
                .spawn(move || read_loop(conn, &shared))?
        };
        Ok(MuxClient {
            shared,
            reader: Mutex::new(Some(reader)),
            namespace: options.namespace,
            reply_timeout: options.reply_timeout,
            shard_count: hello.shard_count,
            server_version: hello.server_version,
            shard: hello.shard,
        })
    }

    /// Sets the namespace of the typed calls.
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

    /// The shard serving this connection (see [`Client::shard`](crate::Client::shard)).
    pub fn shard(&self) -> Option<u32> {
        self.shard
    }

    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// How keys map to shards (see [`Client::shard_map`](crate::Client::shard_map)).
    pub fn shard_map(&self) -> Result<flo_protocol::ShardMap, Error> {
        send(self, requests::GetShardMap)
    }

    /// Whether the connection is gone (lost, or closed by `shutdown`/`close`).
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.waiters).closed.is_some()
    }

    /// Sends one operation and waits for its reply (at most `reply_timeout` beyond the
    /// time the operation asks the server to wait; then `Error::Io` of kind `TimedOut`).
    pub fn call(&self, op: Op) -> Result<Reply, Error> {
        self.send(op)?.wait()
    }

    /// Sends one operation without waiting: the reply is collected from the returned
    /// handle, which may be dropped to ignore it.
    pub fn send(&self, op: Op) -> Result<PendingReply, Error> {
        let deadline = Instant::now() + self.reply_timeout + server_wait(&op);
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::new();
        encode_frame(&Request { id, op }, &mut frame).map_err(crate::client::request_error)?;
        let (tx, rx) = mpsc::sync_channel(1);
        {
            let mut waiters = lock(&self.shared.waiters);
            if let Some(closed) = &waiters.closed {
                return Err(closed.error());
            }
            if waiters.by_id.len() >= MUX_PENDING_CALLS_MAX {
                return Err(Error::Protocol(format!(
                    "{MUX_PENDING_CALLS_MAX} calls are already waiting on this connection; \
                     wait for some to finish or open another connection"
                )));
            }
            waiters.by_id.insert(id, tx);
        }
        // Registered before writing: the reply may come back before `write_all` returns.
        let pending = PendingReply {
            id,
            rx,
            shared: self.shared.clone(),
            deadline,
        };
        if let Err(e) = lock(&self.shared.writer).write_all(&frame) {
            // Part of the frame may be on the wire: the stream cannot be used any more.
            self.shared.shut_down(Closed::from_io(&e));
            return Err(Error::Io(e));
        }
        Ok(pending)
    }

    /// Shuts the connection down without waiting for the reader thread: calls waiting now
    /// fail with `Error::Io`, later calls are refused. Callable from any thread.
    pub fn shutdown(&self) {
        self.shared.shut_down(Closed::by_client());
    }

    /// Shuts the connection down and waits for the reader thread to end.
    pub fn close(&self) {
        self.shutdown();
        if let Some(reader) = lock(&self.reader).take() {
            let _ = reader.join();
        }
    }
}

impl Drop for MuxClient {
    fn drop(&mut self) {
        self.close();
    }
}

/// The reply to one sent operation, to be collected once.
pub struct PendingReply {
    id: u64,
    rx: Receiver<Result<Reply, Error>>,
    shared: Arc<Shared>,
    deadline: Instant,
}

impl PendingReply {
    /// The request id the operation was sent with.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the reply until the call's deadline.
    pub fn wait(self) -> Result<Reply, Error> {
        let timeout = self.deadline.saturating_duration_since(Instant::now());
        self.wait_timeout(timeout)
            .unwrap_or_else(|| Err(self.timed_out()))
    }

    /// Waits up to `timeout` (never past the call's deadline): `None` when the reply has
    /// not come yet. Returns the reply once; asked again afterwards it reports an error.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Reply, Error>> {
        let now = Instant::now();
        if now >= self.deadline {
            return Some(self.rx.try_recv().unwrap_or_else(|_| Err(self.timed_out())));
        }
        match self.rx.recv_timeout(timeout.min(self.deadline - now)) {
            Ok(result) => Some(result),
            Err(RecvTimeoutError::Timeout) if Instant::now() >= self.deadline => {
                Some(Err(self.timed_out()))
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(Error::Protocol(
                "the reply was already taken, or the connection dropped the call".into(),
            ))),
        }
    }

    fn timed_out(&self) -> Error {
        Error::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no reply to request {} in time", self.id),
        ))
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        lock(&self.shared.waiters).by_id.remove(&self.id);
    }
}

impl Shared {
    fn shut_down(&self, why: Closed) {
        lock(&self.waiters).closed.get_or_insert(why);
        // Wakes the reader, which fails every waiting call.
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    fn deliver(&self, id: u64, result: Result<Reply, Error>) {
        let waiter = lock(&self.waiters).by_id.remove(&id);
        // No waiter: the call timed out or its handle was dropped.
        if let Some(waiter) = waiter {
            let _ = waiter.try_send(result);
        }
    }

    /// Marks the connection gone (keeping the first reason) and fails every waiting call.
    fn fail_all(&self, why: Closed) {
        let (waiting, closed) = {
            let mut waiters = lock(&self.waiters);
            let closed = waiters.closed.get_or_insert(why).clone();
            (std::mem::take(&mut waiters.by_id), closed)
        };
        for waiter in waiting.into_values() {
            let _ = waiter.try_send(Err(closed.error()));
        }
    }
}

/// Performs the handshake on `conn` before the reader thread takes it; returns what the
/// server tells of itself.
/// A connection with its handshake done, on `options.shard` when one is asked for.
fn connect_landed(
    addr: impl ToSocketAddrs,
    options: &MuxOptions,
) -> Result<(Connection, requests::ServerHello), Error> {
    let addrs: Vec<_> = addr.to_socket_addrs()?.collect();
    let token = options.token.as_deref();
    for _ in 0..SHARD_TRIES {
        let mut conn = Connection::connect_timeout(&addrs[..], options.connect_timeout)?;
        let hello = handshake(&mut conn, options.reply_timeout, token)?;
        let landed = match options.shard {
            None => true,
            Some(want) => on_shard(want, hello.shard, hello.shard_count)?,
        };
        if landed {
            return Ok((conn, hello));
        }
    }
    Err(missed_shard(options.shard.unwrap_or(0)))
}

fn handshake(
    conn: &mut Connection,
    timeout: Duration,
    token: Option<&str>,
) -> Result<requests::ServerHello, Error> {
    conn.set_read_timeout(Some(timeout))?;
    // The handshake is in no namespace.
    let op = requests::Hello { token }.op("");
    conn.queue(&Request {
        id: HELLO_REQUEST_ID,
        op,
    })?;
    conn.flush()?;
    let response = conn.recv()?;
    if response.id != HELLO_REQUEST_ID && response.id != 0 {
        return Err(Error::Protocol(format!(
            "the handshake was answered with request id {}",
            response.id
        )));
    }
    let reply = response.result.map_err(Error::Server)?;
    conn.set_read_timeout(None)?;
    requests::Hello::output(reply)
}

fn read_loop(mut conn: Connection, shared: &Shared) {
    let why = loop {
        match conn.recv() {
            // Id 0: the server could not tell which request failed and closes the connection.
            Ok(Response { id: 0, result }) => {
                let detail = result.err().map_or_else(String::new, |e| format!(": {e}"));
                break Closed {
                    kind: io::ErrorKind::ConnectionAborted,
                    message: format!("the server is closing the connection{detail}"),
                };
            }
            Ok(Response { id, result }) => shared.deliver(id, result.map_err(Error::Server)),
            Err(Error::Io(e)) => break Closed::from_io(&e),
            Err(e) => {
                break Closed {
                    kind: io::ErrorKind::InvalidData,
                    message: format!("{e}; the connection was closed"),
                };
            }
        }
    };
    let _ = shared.socket.shutdown(Shutdown::Both);
    shared.fail_all(why);
}

/// How long the operation asks the server to hold it before replying.
fn server_wait(op: &Op) -> Duration {
    let ms = match op {
        Op::TaskAwait { block_ms, .. } => (*block_ms).min(TASK_AWAIT_MS_MAX),
        Op::RunWait { timeout_ms, .. } => (*timeout_ms).min(RUN_WAIT_MS_MAX),
        Op::ActionInvoke(spec) => spec.wait_ms.unwrap_or(0).min(RUN_WAIT_MS_MAX),
        _ => 0,
    };
    Duration::from_millis(ms)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded state stays consistent across a panic (each update is one statement).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The table sends its requests through `call`, bounded by the reply timeout like any call.
impl Transport for &MuxClient {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn call(self, op: Op) -> Result<Reply, Error> {
        MuxClient::call(self, op)
    }
}

/// Worker operations, as on `Client`, callable from many threads at once.
impl MuxClient {
    /// Registers (or re-registers, replacing) a worker in the client's namespace.
    pub fn register_worker(&self, spec: WorkerSpec) -> Result<WorkerInfo, Error> {
        send(self, requests::RegisterWorker { spec })
    }

    /// Reports liveness and load; returns the worker's status (`Draining`: take no more
    /// tasks).
    pub fn heartbeat(&self, worker_id: &str, current_load: u32) -> Result<WorkerStatus, Error> {
        let heartbeat = requests::Heartbeat {
            worker_id,
            current_load,
        };
        send(self, heartbeat)
    }

    /// Asks the server to give the worker no more tasks (sticky).
    pub fn drain_worker(&self, worker_id: &str) -> Result<WorkerInfo, Error> {
        send(self, requests::DrainWorker { worker_id })
    }

    pub fn deregister_worker(&self, worker_id: &str) -> Result<(), Error> {
        send(self, requests::DeregisterWorker { worker_id })
    }

    /// Waits up to `block_ms` for tasks of `actions`; returns up to `max_tasks` tasks
    /// leased to `worker_id` (empty when none came). Other calls proceed meanwhile.
    pub fn await_tasks(
        &self,
        worker_id: &str,
        actions: &[impl AsRef<str>],
        max_tasks: u32,
        block_ms: u64,
    ) -> Result<Vec<TaskAssignment>, Error> {
        let poll = requests::AwaitTasks::new(worker_id, actions, max_tasks, block_ms);
        send(self, poll)
    }

    /// Completes a task leased to `worker_id` with `result` (and a named outcome).
    pub fn complete_task(
        &self,
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
        &self,
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

    /// Fails a task leased to `worker_id`; returns the run as it is afterwards.
    pub fn fail_task(
        &self,
        worker_id: &str,
        task: &TaskRef<'_>,
        error: &str,
        mode: FailMode,
    ) -> Result<RunInfo, Error> {
        self.fail_task_coded(worker_id, task, error, None, mode)
    }

    /// `fail_task` with a code naming the error (see `CodedError`).
    pub fn fail_task_coded(
        &self,
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
        &self,
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

#[cfg(test)]
mod tests;
