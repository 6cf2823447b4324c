//! `ActionWorker`: registers with the server, long-polls for tasks of its actions, runs
//! their handlers on a pool of threads, reports each result, heartbeats, and stops
//! gracefully (on request, on a signal, or when the server drains it). Plain threads: no
//! async runtime.
//!
//! Threads: the caller of `run` polls for tasks and owns reconnection; `concurrency`
//! task threads take tasks and report them, each running its handlers on a handler thread
//! of its own, for at most the action timeout; one thread heartbeats; the `MuxClient`'s
//! reader thread delivers replies. They share one connection at a time.

use crate::client::{Error, FailMode, generate_worker_id, hostname};
use crate::handler::{ActionContext, Handler, HandlerResult, Report, Session, run_handler};
use crate::mux::{MuxClient, MuxOptions, PendingReply};
use crate::requests::{AwaitTasks, TypedRequest, is_not_found, tasks_of};
use flo_protocol::{
    ACTION_NAME_BYTES_MAX, NAMESPACE_BYTES_MAX, TASK_AWAIT_MS_MAX, TASK_AWAIT_TASKS_MAX,
    TaskAssignment, WORKER_ID_BYTES_MAX, WORKER_METADATA_BYTES_MAX, WORKER_PROCESSES_MAX,
    WorkerSpec, WorkerStatus, WorkerType,
};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Most handler threads one worker runs.
pub const WORKER_CONCURRENCY_MAX: u32 = TASK_AWAIT_TASKS_MAX;
/// Default of `WorkerOptions::action_timeout` (the spec's 5 minutes).
pub const ACTION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);
/// How often waiting threads look at the stop flag.
const WAKE_INTERVAL_MS: u64 = 50;
/// Reconnection backoff: first wait, then doubling up to the max.
const RECONNECT_BACKOFF_MS_MIN: u64 = 100;
const RECONNECT_BACKOFF_MS_MAX: u64 = 5_000;

/// Errors of starting or running a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Client(#[from] Error),
    #[error("cannot start a worker thread: {0}")]
    Thread(io::Error),
    #[error("the worker's thread panicked: {0}")]
    Panicked(String),
}

/// A worker's settings (see `ActionWorkerBuilder` for each one's default).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// `host:port` of the server.
    pub addr: String,
    pub namespace: String,
    pub worker_id: String,
    pub machine_id: Option<String>,
    /// Tasks run at once, each on its own thread.
    pub concurrency: u32,
    /// The worker's labels, a flat JSON object.
    pub labels: Option<String>,
    /// Arbitrary JSON shown in the worker registry.
    pub metadata: Option<String>,
    /// Longest a poll for tasks waits on the server.
    pub block_ms: u64,
    pub heartbeat_interval: Duration,
    pub connect_timeout: Duration,
    /// Longest wait for a reply beyond the time the request asks the server to wait.
    pub reply_timeout: Duration,
    /// Longest a handler may run on one task: past it the attempt fails (retried per the
    /// action's policy) and the worker goes on (the spec's `action_timeout`).
    pub action_timeout: Duration,
    /// Longest a stop waits for tasks in flight before deregistering anyway.
    pub shutdown_timeout: Duration,
    /// Presented in every handshake (a server started with `--auth-file`: a `worker`
    /// token for the worker's namespace).
    pub token: Option<String>,
    /// The one shard this worker serves (set by
    /// [`ActionWorkerBuilder::spawn_on_every_shard`], with an id homed there): it connects
    /// to that shard and awaits only its tasks. None: connected anywhere, it takes tasks
    /// from every shard.
    pub shard: Option<u32>,
}

/// Builds an `ActionWorker`: settings, then one handler per action.
pub struct ActionWorkerBuilder {
    options: WorkerOptions,
    handlers: Vec<(String, Handler)>,
}

impl ActionWorkerBuilder {
    /// Namespace of the worker and its actions (default `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.options.namespace = namespace.into();
        self
    }

    /// Unique id of the worker (default: hostname plus random hex).
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.options.worker_id = worker_id.into();
        self
    }

    /// Host identifier for grouping workers (default: the hostname).
    pub fn machine_id(mut self, machine_id: impl Into<String>) -> Self {
        self.options.machine_id = Some(machine_id.into());
        self
    }

    /// Tasks run at once (default 10, at most `WORKER_CONCURRENCY_MAX`).
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.options.concurrency = concurrency;
        self
    }

    /// The worker's labels, a flat JSON object such as `{"gpu":true,"region":"eu"}`: tasks
    /// invoked with required labels go only to workers whose labels contain them.
    pub fn labels(mut self, labels_json: impl Into<String>) -> Self {
        self.options.labels = Some(labels_json.into());
        self
    }

    /// Arbitrary JSON (version, environment...) shown in the worker registry.
    pub fn metadata(mut self, metadata_json: impl Into<String>) -> Self {
        self.options.metadata = Some(metadata_json.into());
        self
    }

    /// Longest a poll for tasks waits on the server (default 30 000 ms, at most
    /// 300 000).
    pub fn block_ms(mut self, block_ms: u64) -> Self {
        self.options.block_ms = block_ms;
        self
    }

    /// Time between heartbeats (default 30 s; the server marks a worker unhealthy after
    /// 90 s without one).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.options.heartbeat_interval = interval;
        self
    }

    /// Longest wait for the TCP connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Longest wait for a reply beyond what the request asks the server to wait
    /// (default 30 s); a heartbeat or poll left unanswered that long reconnects.
    pub fn reply_timeout(mut self, timeout: Duration) -> Self {
        self.options.reply_timeout = timeout;
        self
    }

    /// Longest a handler may run on one task (default 5 min, the spec's `action_timeout`).
    /// Past it the attempt is reported failed, so it is retried while the action's retries
    /// remain, and the task's slot takes the next task. A thread cannot be killed: the
    /// handler goes on in the background until it returns, and what it returns is
    /// ignored.
    pub fn action_timeout(mut self, timeout: Duration) -> Self {
        self.options.action_timeout = timeout;
        self
    }

    /// The token to present to a server started with `--auth-file` (default none).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// Longest a stop waits for tasks in flight (default 5 min).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.options.shutdown_timeout = timeout;
        self
    }

    /// Handles tasks of the action `name` with `handler`. Returning `Err` fails the
    /// attempt (retried while retries remain), unless the error is a `NonRetryableError`;
    /// a panic fails the attempt too.
    pub fn action<F>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(&ActionContext) -> HandlerResult + Send + Sync + 'static,
    {
        self.handlers.push((name.into(), Arc::new(handler)));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<ActionWorker, WorkerError> {
        let options = self.options;
        validate(&options, &self.handlers).map_err(WorkerError::Config)?;
        let mut actions: Vec<String> = self.handlers.iter().map(|(n, _)| n.clone()).collect();
        actions.sort();
        let shared = Shared {
            worker_id: Arc::from(options.worker_id.as_str()),
            slots: Slots::new(options.concurrency),
            options,
            handlers: self.handlers.into_iter().collect(),
            actions,
            session: Arc::default(),
            stop: StopHandle::default(),
            draining: AtomicBool::new(false),
            counters: Counters::default(),
        };
        Ok(ActionWorker {
            shared: Arc::new(shared),
        })
    }

    /// `build`, then `ActionWorker::run`.
    pub fn run(self) -> Result<WorkerStats, WorkerError> {
        self.build()?.run()
    }

    /// `build`, then `ActionWorker::run_until_signal`.
    pub fn run_until_signal(self) -> Result<WorkerStats, WorkerError> {
        self.build()?.run_until_signal()
    }

    /// `build`, then `ActionWorker::spawn`.
    pub fn spawn(self) -> Result<RunningWorker, WorkerError> {
        self.build()?.spawn()
    }

    /// Spawns one worker per shard of the server, each connected to its shard under an id
    /// homed there (`{worker_id}-{n}`) and awaiting only that shard's tasks: a task's
    /// lease, its delivery and its report then stay on the shard that holds it. A worker
    /// connected anywhere (`spawn`) takes tasks from every shard, and each of its awaits
    /// and each report on another shard's task is a message between shards: this is the
    /// way to run workers at high rates. Each runs `concurrency` tasks at once. Fails like
    /// `spawn` for any of them (those already started are then asked to stop).
    pub fn spawn_on_every_shard(self) -> Result<Vec<RunningWorker>, WorkerError> {
        validate(&self.options, &self.handlers).map_err(WorkerError::Config)?;
        let ids = ids_per_shard(&self.options)?;
        let mut running = Vec::with_capacity(ids.len());
        for (shard, worker_id) in ids.into_iter().enumerate() {
            let builder = ActionWorkerBuilder {
                options: WorkerOptions {
                    worker_id,
                    shard: Some(shard as u32),
                    ..self.options.clone()
                },
                handlers: self.handlers.clone(),
            };
            running.push(builder.spawn()?);
        }
        Ok(running)
    }
}

/// A worker id homed on each shard of the server (`ids[s]` hashes to shard `s`), derived
/// from `options.worker_id`.
fn ids_per_shard(options: &WorkerOptions) -> Result<Vec<String>, WorkerError> {
    let mux = MuxClient::connect_with(options.addr.as_str(), mux_options(options, None))?;
    let map = mux.shard_map()?;
    mux.close();
    let mut ids: Vec<Option<String>> = vec![None; mux.shard_count().max(1) as usize];
    let mut missing = ids.len();
    // With N shards an id lands on a given one once in N tries: 64 Ki tries leave none
    // unfound in practice.
    for n in 0..65_536u32 {
        let id = format!("{}-{n}", options.worker_id);
        let shard = map.shard_of(&options.namespace, &id).unwrap_or(0);
        if let Some(slot @ None) = ids.get_mut(shard as usize) {
            *slot = Some(id);
            missing -= 1;
            if missing == 0 {
                break;
            }
        }
    }
    ids.into_iter()
        .enumerate()
        .map(|(shard, id)| {
            id.ok_or_else(|| {
                WorkerError::Config(format!("found no worker id homed on shard {shard}"))
            })
        })
        .collect()
}

fn validate(options: &WorkerOptions, handlers: &[(String, Handler)]) -> Result<(), String> {
    if handlers.is_empty() {
        return Err("the worker handles no action; add one with `action(name, handler)`".into());
    }
    if handlers.len() > WORKER_PROCESSES_MAX {
        return Err(format!(
            "a worker handles at most {WORKER_PROCESSES_MAX} actions"
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (name, _) in handlers {
        if name.is_empty() || name.len() > ACTION_NAME_BYTES_MAX {
            return Err(format!(
                "action name {name:?} must have 1 to {ACTION_NAME_BYTES_MAX} bytes"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("action {name} has two handlers"));
        }
    }
    if options.namespace.is_empty() || options.namespace.len() > NAMESPACE_BYTES_MAX {
        return Err(format!(
            "the namespace must have 1 to {NAMESPACE_BYTES_MAX} bytes"
        ));
    }
    if options.worker_id.is_empty() || options.worker_id.len() > WORKER_ID_BYTES_MAX {
        return Err(format!(
            "the worker id must have 1 to {WORKER_ID_BYTES_MAX} bytes"
        ));
    }
    if !(1..=WORKER_CONCURRENCY_MAX).contains(&options.concurrency) {
        return Err(format!("concurrency must be 1 to {WORKER_CONCURRENCY_MAX}"));
    }
    if !(1..=TASK_AWAIT_MS_MAX).contains(&options.block_ms) {
        return Err(format!("block_ms must be 1 to {TASK_AWAIT_MS_MAX}"));
    }
    if options.heartbeat_interval.is_zero() {
        return Err("the heartbeat interval must be positive".into());
    }
    if options.action_timeout.is_zero() {
        return Err("the action timeout must be positive".into());
    }
    if let Some(labels) = &options.labels {
        flo_protocol::check_labels(labels).map_err(|e| e.to_string())?;
    }
    if let Some(metadata) = &options.metadata {
        if metadata.len() > WORKER_METADATA_BYTES_MAX {
            return Err(format!(
                "metadata must have at most {WORKER_METADATA_BYTES_MAX} bytes"
            ));
        }
        serde_json::from_str::<serde_json::Value>(metadata)
            .map_err(|e| format!("metadata must be JSON: {e}"))?;
    }
    Ok(())
}

/// A worker for user-hosted actions.
///
/// ```no_run
/// use flo::{ActionResult, ActionWorker, NonRetryableError};
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     order_id: String,
///     amount: f64,
/// }
///
/// ActionWorker::builder("127.0.0.1:9000")
///     .namespace("myapp")
///     .concurrency(10)
///     .action("process-order", |ctx| {
///         let order: Order = ctx.json()?;
///         if order.amount > 2000.0 {
///             return Err(NonRetryableError::new("amount exceeds the $2000 limit").into());
///         }
///         ActionResult::json(&serde_json::json!({"status": "processed", "order_id": order.order_id}))
///     })
///     .action("send-email", |_ctx| Ok(ActionResult::empty()))
///     .run_until_signal()?; // Ctrl-C: finish the tasks in flight, deregister, return
/// # Ok::<(), flo::WorkerError>(())
/// ```
///
/// In tests, `spawn` runs it on a background thread:
///
/// ```no_run
/// # use flo::{ActionResult, ActionWorker};
/// let worker = ActionWorker::builder("127.0.0.1:9000")
///     .namespace("t")
///     .concurrency(4)
///     .action("echo", |ctx| Ok(ActionResult::bytes(ctx.input().to_vec())))
///     .spawn()?; // registered when this returns
/// // ... invoke `echo`, wait for `worker.stats().tasks_completed` ...
/// let stats = worker.stop_and_join()?;
/// # Ok::<(), flo::WorkerError>(())
/// ```
pub struct ActionWorker {
    shared: Arc<Shared>,
}

impl ActionWorker {
    /// Starts a builder for a worker connecting to `addr` (`host:port`).
    pub fn builder(addr: impl ToString) -> ActionWorkerBuilder {
        ActionWorkerBuilder {
            options: WorkerOptions {
                addr: addr.to_string(),
                namespace: "default".into(),
                worker_id: generate_worker_id(),
                machine_id: hostname(),
                concurrency: 10,
                labels: None,
                metadata: None,
                block_ms: 30_000,
                heartbeat_interval: Duration::from_secs(30),
                connect_timeout: Duration::from_secs(5),
                reply_timeout: Duration::from_secs(30),
                action_timeout: ACTION_TIMEOUT_DEFAULT,
                shutdown_timeout: Duration::from_secs(300),
                token: None,
                shard: None,
            },
            handlers: Vec::new(),
        }
    }

    pub fn options(&self) -> &WorkerOptions {
        &self.shared.options
    }

    pub fn worker_id(&self) -> &str {
        &self.shared.worker_id
    }

    /// The actions it handles, sorted.
    pub fn actions(&self) -> &[String] {
        &self.shared.actions
    }

    /// Stops a `run` from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.shared.stop.clone()
    }

    pub fn stats(&self) -> WorkerStats {
        self.shared.stats()
    }

    /// Connects, registers, then takes and runs tasks until stopped (`StopHandle::stop`)
    /// or drained by the server; then finishes the tasks in flight, reports them,
    /// deregisters and returns its counts. Fails only if the first connection or
    /// registration fails; later losses reconnect (backoff from 100 ms to 5 s) and
    /// re-register.
    pub fn run(self) -> Result<WorkerStats, WorkerError> {
        let client = connect_and_register(&self.shared)?;
        serve(&self.shared, client)
    }

    /// `run`, stopping gracefully on SIGINT or SIGTERM. A second signal, or one after
    /// `run` returned, has its default effect (the process ends).
    pub fn run_until_signal(self) -> Result<WorkerStats, WorkerError> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let stop = self.shared.stop.clone();
        let mut graceful = Vec::new();
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it acts only once the flag is already set.
            let installed =
                signal_hook::flag::register_conditional_default(signal, stop.flag.clone())
                    .and_then(|_| signal_hook::flag::register(signal, stop.flag.clone()));
            match installed {
                Ok(id) => graceful.push(id),
                Err(e) => {
                    stop.stop();
                    return Err(WorkerError::Client(Error::Io(io::Error::new(
                        e.kind(),
                        format!("cannot install a signal handler: {e}"),
                    ))));
                }
            }
        }
        let result = self.run();
        // From now on a signal ends the process, as it would have without the worker.
        stop.stop();
        for id in graceful {
            signal_hook::low_level::unregister(id);
        }
        result
    }

    /// Connects and registers on this thread (returning its error), then runs the
    /// worker on a background thread.
    pub fn spawn(self) -> Result<RunningWorker, WorkerError> {
        let client = connect_and_register(&self.shared)?;
        let shared = self.shared.clone();
        let thread = thread::Builder::new()
            .name(format!("flo-worker-{}", self.shared.worker_id))
            .spawn(move || serve(&shared, client))
            .map_err(WorkerError::Thread)?;
        Ok(RunningWorker {
            shared: self.shared,
            thread: Some(thread),
        })
    }
}

/// A worker running on a background thread (see `ActionWorker::spawn`). Dropping it asks
/// the worker to stop without waiting for it.
pub struct RunningWorker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<WorkerStats, WorkerError>>>,
}

impl RunningWorker {
    pub fn worker_id(&self) -> &str {
        &self.shared.worker_id
    }

    pub fn stop_handle(&self) -> StopHandle {
        self.shared.stop.clone()
    }

    /// Asks the worker to stop (returns at once; `join` waits).
    pub fn stop(&self) {
        self.shared.stop.stop();
    }

    /// Counts so far.
    pub fn stats(&self) -> WorkerStats {
        self.shared.stats()
    }

    /// Whether the worker has stopped (asked to, or drained by the server).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the worker to stop (it stops when asked to or when drained).
    pub fn join(mut self) -> Result<WorkerStats, WorkerError> {
        let thread = self.thread.take().expect("joined once: join consumes self");
        match thread.join() {
            Ok(result) => result,
            Err(payload) => Err(WorkerError::Panicked(
                payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            )),
        }
    }

    /// Stops the worker gracefully and waits for it: tasks in flight finish and are
    /// reported, then the worker deregisters. Returns its final counts.
    pub fn stop_and_join(self) -> Result<WorkerStats, WorkerError> {
        self.stop();
        self.join()
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.shared.stop.stop();
    }
}

/// Stops a worker from any thread: it takes no more tasks, finishes those in flight,
/// deregisters and returns from `run`.
#[derive(Debug, Clone, Default)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// A worker's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Tasks received from the server.
    pub tasks_received: u64,
    /// Tasks whose handler succeeded and whose completion the server acknowledged.
    pub tasks_completed: u64,
    /// Tasks whose handler failed (error, panic, or past the action timeout) and whose
    /// failure the server acknowledged.
    pub tasks_failed: u64,
    /// Tasks whose handler ran past the action timeout (their attempt was failed; the
    /// handler's eventual result was ignored).
    pub tasks_timed_out: u64,
    /// Reports the server did not acknowledge (connection lost, or the lease had moved
    /// on): those tasks are retried once their lease expires.
    pub reports_lost: u64,
    /// Tasks being run or reported now.
    pub in_flight: u32,
    /// Successful registrations (the first, then one per reconnection or re-registration).
    pub registrations: u64,
    /// Connections made after losing one.
    pub reconnects: u64,
    /// Whether the server asked the worker to drain.
    pub drained: bool,
    /// The latest error the worker recovered from, if any (for diagnosis).
    pub last_error: Option<String>,
}

/// State shared by a worker's threads.
struct Shared {
    options: WorkerOptions,
    worker_id: Arc<str>,
    handlers: HashMap<String, Handler>,
    actions: Vec<String>,
    session: Arc<Session>,
    slots: Slots,
    stop: StopHandle,
    /// Set by a heartbeat answered `draining` (sticky).
    draining: AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    tasks_received: AtomicU64,
    tasks_completed: AtomicU64,
    tasks_failed: AtomicU64,
    tasks_timed_out: AtomicU64,
    reports_lost: AtomicU64,
    registrations: AtomicU64,
    reconnects: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn should_stop(&self) -> bool {
        self.stop.is_stopped() || self.draining.load(Ordering::SeqCst)
    }

    fn stats(&self) -> WorkerStats {
        let c = &self.counters;
        WorkerStats {
            tasks_received: c.tasks_received.load(Ordering::Relaxed),
            tasks_completed: c.tasks_completed.load(Ordering::Relaxed),
            tasks_failed: c.tasks_failed.load(Ordering::Relaxed),
            tasks_timed_out: c.tasks_timed_out.load(Ordering::Relaxed),
            reports_lost: c.reports_lost.load(Ordering::Relaxed),
            in_flight: self.slots.in_flight(),
            registrations: c.registrations.load(Ordering::Relaxed),
            reconnects: c.reconnects.load(Ordering::Relaxed),
            drained: self.draining.load(Ordering::SeqCst),
            last_error: lock(&c.last_error).clone(),
        }
    }

    fn record_error(&self, context: &str, error: &Error) {
        *lock(&self.counters.last_error) = Some(format!("{context}: {error}"));
    }

    fn spec(&self) -> WorkerSpec {
        let o = &self.options;
        WorkerSpec {
            namespace: o.namespace.clone(),
            worker_id: o.worker_id.clone(),
            worker_type: WorkerType::Action,
            max_concurrency: Some(o.concurrency),
            processes: self.actions.clone(),
            metadata: o.metadata.clone(),
            machine_id: o.machine_id.clone(),
            labels: o.labels.clone(),
        }
    }
}

/// Tasks in flight, bounded by the concurrency.
struct Slots {
    capacity: u32,
    in_flight: Mutex<u32>,
    changed: Condvar,
}

impl Slots {
    fn new(capacity: u32) -> Self {
        Slots {
            capacity,
            in_flight: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    fn in_flight(&self) -> u32 {
        *lock(&self.in_flight)
    }

    /// Free slots, waiting up to `timeout` for one (0: none freed in time).
    fn wait_free(&self, timeout: Duration) -> u32 {
        let guard = lock(&self.in_flight);
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |n| *n >= self.capacity)
            .unwrap_or_else(PoisonError::into_inner);
        self.capacity.saturating_sub(*guard)
    }

    fn acquire(&self) {
        *lock(&self.in_flight) += 1;
    }

    fn release(&self) {
        let mut in_flight = lock(&self.in_flight);
        debug_assert!(*in_flight > 0, "a slot released twice");
        *in_flight = in_flight.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for no task to be in flight; returns whether none is.
    fn wait_idle(&self, timeout: Duration) -> bool {
        let guard = lock(&self.in_flight);
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |n| *n > 0)
            .unwrap_or_else(PoisonError::into_inner);
        *guard == 0
    }
}

/// How a worker's connections are made: on `shard` if one is given.
fn mux_options(options: &WorkerOptions, shard: Option<u32>) -> MuxOptions {
    MuxOptions {
        namespace: options.namespace.clone(),
        connect_timeout: options.connect_timeout,
        reply_timeout: options.reply_timeout,
        token: options.token.clone(),
        shard,
    }
}

fn connect_and_register(shared: &Shared) -> Result<MuxClient, Error> {
    let options = mux_options(&shared.options, shared.options.shard);
    let client = MuxClient::connect_with(shared.options.addr.as_str(), options)?;
    register(shared, &client)?;
    Ok(client)
}

fn register(shared: &Shared, client: &MuxClient) -> Result<(), Error> {
    client.register_worker(shared.spec())?;
    shared
        .counters
        .registrations
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// The worker's life after its first registration: start the threads, poll, stop.
fn serve(shared: &Arc<Shared>, client: MuxClient) -> Result<WorkerStats, WorkerError> {
    shared.session.replace(Some(Arc::new(client)));
    let threads = match Threads::start(shared) {
        Ok(threads) => threads,
        Err(e) => {
            deregister_and_close(shared);
            return Err(WorkerError::Thread(e));
        }
    };
    let outstanding = poll_loop(shared, &threads.jobs);
    finish(shared, threads, outstanding);
    Ok(shared.stats())
}

/// The handler pool and the heartbeat thread.
struct Threads {
    jobs: Sender<TaskAssignment>,
    pool: Vec<JoinHandle<()>>,
    /// Dropped to stop the heartbeat thread at once.
    heartbeat_stop: Sender<()>,
    heartbeat: JoinHandle<()>,
}

impl Threads {
    fn start(shared: &Arc<Shared>) -> io::Result<Threads> {
        let (jobs, queue) = mpsc::channel::<TaskAssignment>();
        let queue = Arc::new(Mutex::new(queue));
        let mut pool = Vec::new();
        for i in 0..shared.options.concurrency {
            let (shared, queue) = (shared.clone(), queue.clone());
            let handle = thread::Builder::new()
                .name(format!("flo-task-{i}"))
                .spawn(move || task_loop(&shared, &queue, i))?;
            pool.push(handle);
        }
        let (heartbeat_stop, stopped) = mpsc::channel();
        let heartbeat = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("flo-heartbeat".into())
                .spawn(move || heartbeat_loop(&shared, &stopped))?
        };
        Ok(Threads {
            jobs,
            pool,
            heartbeat_stop,
            heartbeat,
        })
    }
}

/// Takes tasks while free slots remain, until asked to stop or drained. Returns the poll
/// still waiting on the server at that moment, if any.
fn poll_loop(shared: &Shared, jobs: &Sender<TaskAssignment>) -> Option<PendingReply> {
    let wake = Duration::from_millis(WAKE_INTERVAL_MS);
    let mut backoff = Backoff::default();
    loop {
        if shared.should_stop() {
            return None;
        }
        let free = shared.slots.wait_free(wake);
        if free == 0 {
            continue;
        }
        let Some(client) = shared.session.current() else {
            reconnect(shared, &mut backoff);
            continue;
        };
        let mut poll = AwaitTasks::new(
            &shared.worker_id,
            &shared.actions,
            free.min(TASK_AWAIT_TASKS_MAX),
            shared.options.block_ms,
        );
        poll.home_only = shared.options.shard.is_some();
        let op = poll.op(&shared.options.namespace);
        let reply = match client.send(op) {
            Ok(pending) => loop {
                if let Some(reply) = pending.wait_timeout(wake) {
                    break reply;
                }
                if shared.should_stop() {
                    return Some(pending);
                }
            },
            Err(e) => Err(e),
        };
        match tasks_of(reply) {
            Ok(tasks) => {
                backoff.reset();
                dispatch(shared, jobs, tasks);
            }
            Err(e) => recover(shared, &client, &e, &mut backoff),
        }
    }
}

/// Gets past a failed poll: re-register when the server does not know the worker, drop
/// the connection when it is broken (the next round reconnects), wait a little.
fn recover(shared: &Shared, client: &Arc<MuxClient>, error: &Error, backoff: &mut Backoff) {
    shared.record_error("polling for tasks", error);
    match error {
        e if is_not_found(e) => {
            if let Err(e) = register(shared, client) {
                shared.record_error("registering again", &e);
            }
        }
        Error::Server(_) => {}
        Error::Io(_) | Error::Protocol(_) => {
            // `reconnect` waits before connecting again.
            client.shutdown();
            drop_session(shared, client);
            return;
        }
    }
    backoff.sleep(&shared.stop);
}

/// Forgets `client` as the current connection (unless another replaced it already).
fn drop_session(shared: &Shared, client: &Arc<MuxClient>) {
    let current = shared.session.replace(None);
    if let Some(current) = current
        && !Arc::ptr_eq(&current, client)
    {
        shared.session.replace(Some(current));
    }
}

fn reconnect(shared: &Shared, backoff: &mut Backoff) {
    if !backoff.sleep(&shared.stop) {
        return;
    }
    match connect_and_register(shared) {
        Ok(client) => {
            shared.session.replace(Some(Arc::new(client)));
            shared.counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => shared.record_error("reconnecting", &e),
    }
}

fn dispatch(shared: &Shared, jobs: &Sender<TaskAssignment>, tasks: Vec<TaskAssignment>) {
    for task in tasks {
        shared.slots.acquire();
        shared
            .counters
            .tasks_received
            .fetch_add(1, Ordering::Relaxed);
        if jobs.send(task).is_err() {
            // No handler thread is left (cannot happen while the worker runs).
            shared.slots.release();
        }
    }
}

/// One task thread: runs tasks from the queue (each on its handler thread, for at most the
/// action timeout) and reports them, until the queue closes.
fn task_loop(shared: &Shared, queue: &Mutex<Receiver<TaskAssignment>>, slot: u32) {
    let mut runner: Option<HandlerThread> = None;
    loop {
        let task = lock(queue).recv();
        let Ok(task) = task else { return };
        let ctx = Arc::new(ActionContext::new(
            task,
            shared.worker_id.clone(),
            shared.session.clone(),
        ));
        let report = match shared.handlers.get(ctx.action_name()) {
            Some(handler) => run_timed(shared, &mut runner, slot, handler, &ctx),
            None => Report::Fail {
                error: format!(
                    "worker {} has no handler for action {}",
                    shared.worker_id,
                    ctx.action_name()
                ),
                mode: FailMode::Retry,
                code: None,
            },
        };
        send_report(shared, &ctx, &report);
        shared.slots.release();
    }
}

/// A handler and the task it runs on.
type HandlerJob = (Handler, Arc<ActionContext>);

/// The thread a task thread runs its handlers on, so that a handler past the action
/// timeout can be left behind (a thread cannot be stopped): the task thread reports the
/// attempt failed and takes its next task on a new handler thread.
struct HandlerThread {
    jobs: Sender<HandlerJob>,
    reports: Receiver<Report>,
}

impl HandlerThread {
    fn spawn(slot: u32) -> io::Result<HandlerThread> {
        let (jobs, queue) = mpsc::channel::<HandlerJob>();
        let (done, reports) = mpsc::channel::<Report>();
        thread::Builder::new()
            .name(format!("flo-handler-{slot}"))
            .spawn(move || {
                // Ends when its task thread leaves it (the job channel closes), or once its
                // late report finds nobody waiting.
                for (handler, ctx) in queue {
                    if done.send(run_handler(handler.as_ref(), &ctx)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(HandlerThread { jobs, reports })
    }
}

/// Runs `handler` on the task thread's handler thread for at most the action timeout; past
/// it, the attempt fails (retried per the action's policy) and the handler thread is left
/// to finish on its own.
fn run_timed(
    shared: &Shared,
    runner: &mut Option<HandlerThread>,
    slot: u32,
    handler: &Handler,
    ctx: &Arc<ActionContext>,
) -> Report {
    if runner.is_none() {
        match HandlerThread::spawn(slot) {
            Ok(thread) => *runner = Some(thread),
            // No thread to spare: run it here, without a timeout.
            Err(_) => return run_handler(handler.as_ref(), ctx),
        }
    }
    let Some(thread) = runner.as_ref() else {
        return run_handler(handler.as_ref(), ctx);
    };
    if thread.jobs.send((handler.clone(), ctx.clone())).is_err() {
        *runner = None;
        return run_handler(handler.as_ref(), ctx);
    }
    let timeout = shared.options.action_timeout;
    match thread.reports.recv_timeout(timeout) {
        Ok(report) => report,
        Err(RecvTimeoutError::Timeout) => {
            // Left behind: its result, whenever it comes, goes nowhere.
            *runner = None;
            shared
                .counters
                .tasks_timed_out
                .fetch_add(1, Ordering::Relaxed);
            Report::Fail {
                error: format!(
                    "the action handler did not finish within the action timeout of {} ms",
                    timeout.as_millis()
                ),
                mode: FailMode::Retry,
                code: Some("timeout".into()),
            }
        }
        Err(RecvTimeoutError::Disconnected) => {
            *runner = None;
            Report::Fail {
                error: "the action handler's thread ended without a result".into(),
                mode: FailMode::Retry,
                code: None,
            }
        }
    }
}

/// Reports a task's end; a report the server does not acknowledge is left to the lease's
/// expiry.
fn send_report(shared: &Shared, ctx: &ActionContext, report: &Report) {
    let Some(client) = shared.session.current() else {
        shared.counters.reports_lost.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let task = ctx.task_ref();
    let (result, counter) = match report {
        Report::Complete(result) => {
            let (output, outcome, state) = (result.output(), result.outcome(), result.state());
            let done =
                client.complete_task_with_state(&shared.worker_id, &task, output, outcome, state);
            match done {
                // Not sent (e.g. the output exceeds the frame limit): fail the attempt
                // rather than leave it to the lease's expiry.
                Err(Error::Protocol(e)) => {
                    let error = format!("cannot report the result: {e}");
                    let failed =
                        client.fail_task(&shared.worker_id, &task, &error, FailMode::Retry);
                    (failed.map(drop), &shared.counters.tasks_failed)
                }
                done => (done, &shared.counters.tasks_completed),
            }
        }
        Report::Fail { error, mode, code } => (
            client
                .fail_task_coded(&shared.worker_id, &task, error, code.as_deref(), *mode)
                .map(drop),
            &shared.counters.tasks_failed,
        ),
    };
    match result {
        Ok(()) => counter.fetch_add(1, Ordering::Relaxed),
        Err(e) => {
            shared.record_error(&format!("reporting task {}", ctx.task_id()), &e);
            shared.counters.reports_lost.fetch_add(1, Ordering::Relaxed)
        }
    };
}

/// Heartbeats every interval with the load; `draining` stops the worker, an unknown
/// worker re-registers, a broken connection is shut down for the poll loop to replace.
fn heartbeat_loop(shared: &Shared, stopped: &Receiver<()>) {
    loop {
        match stopped.recv_timeout(shared.options.heartbeat_interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(client) = shared.session.current() else {
            continue;
        };
        match client.heartbeat(&shared.worker_id, shared.slots.in_flight()) {
            Ok(WorkerStatus::Draining) => shared.draining.store(true, Ordering::SeqCst),
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {
                if let Err(e) = register(shared, &client) {
                    shared.record_error("registering again", &e);
                }
            }
            Err(e @ Error::Server(_)) => shared.record_error("heartbeat", &e),
            Err(e) => {
                shared.record_error("heartbeat", &e);
                client.shutdown();
            }
        }
    }
}

/// Stops gracefully: no more tasks for this worker, the tasks in flight finish and are
/// reported, then it deregisters and closes.
fn finish(shared: &Shared, threads: Threads, outstanding: Option<PendingReply>) {
    if let Some(client) = shared.session.current()
        && !shared.draining.load(Ordering::SeqCst)
    {
        // The server gives a draining worker nothing more.
        if let Err(e) = client.drain_worker(&shared.worker_id) {
            shared.record_error("draining", &e);
        }
    }
    // Tasks leased to the abandoned poll before the drain are run like any other.
    if let Some(Ok(tasks)) = outstanding
        .and_then(|pending| pending.wait_timeout(Duration::ZERO))
        .map(tasks_of)
    {
        dispatch(shared, &threads.jobs, tasks);
    }
    let idle = shared.slots.wait_idle(shared.options.shutdown_timeout);
    deregister_and_close(shared);
    let Threads {
        jobs,
        pool,
        heartbeat_stop,
        heartbeat,
    } = threads;
    drop(heartbeat_stop);
    let _ = heartbeat.join();
    drop(jobs);
    if idle {
        for handle in pool {
            let _ = handle.join();
        }
    }
}

fn deregister_and_close(shared: &Shared) {
    if let Some(client) = shared.session.replace(None) {
        if let Err(e) = client.deregister_worker(&shared.worker_id) {
            shared.record_error("deregistering", &e);
        }
        client.close();
    }
}

/// Waits between reconnection attempts: 100 ms, doubling up to 5 s.
#[derive(Default)]
struct Backoff {
    next_ms: u64,
}

impl Backoff {
    fn reset(&mut self) {
        self.next_ms = 0;
    }

    /// Sleeps the next wait unless stopped first; returns whether it was not stopped.
    fn sleep(&mut self, stop: &StopHandle) -> bool {
        let ms = self
            .next_ms
            .clamp(RECONNECT_BACKOFF_MS_MIN, RECONNECT_BACKOFF_MS_MAX);
        self.next_ms = (ms * 2).min(RECONNECT_BACKOFF_MS_MAX);
        let until = Instant::now() + Duration::from_millis(ms);
        while !stop.is_stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            thread::sleep(left.min(Duration::from_millis(WAKE_INTERVAL_MS)));
        }
        false
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
