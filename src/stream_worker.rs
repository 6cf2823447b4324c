//! `StreamWorker`: consumes a stream through a consumer group. It registers as a `stream`
//! worker (its process `STREAM/GROUP`), joins the group (creating it if missing), reads
//! batches as its consumer, runs the handler for each record on a pool of `concurrency`
//! threads, acknowledges a record whose handler returned `Ok` and nacks one whose handler
//! failed, panicked or ran past `message_timeout` (it is delivered again, to any consumer of
//! the group). Heartbeats report the records in flight; a drained worker stops. A stop
//! finishes the records in flight, reports them, and deregisters.

use crate::client::{Client, Error, generate_worker_id};
use crate::handler::HandlerError;
use crate::requests::is_not_found;
use crate::worker::{StopHandle, WorkerError, WorkerStats};
use flo_protocol::{
    ErrorCode, GroupConfig, GroupReadSpec, StreamId, StreamRecord, WorkerSpec, WorkerStatus,
    WorkerType,
};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Longest one read waits on the server, so a stop is seen within about this long.
const READ_BLOCK_MS_MAX: u64 = 1_000;
/// Longest wait between two connection attempts.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What a stream handler sees: one record and where it came from.
pub struct StreamContext {
    record: StreamRecord,
    stream: String,
    group: String,
    consumer: String,
    namespace: String,
}

impl StreamContext {
    /// The payload as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        Ok(serde_json::from_slice(&self.record.payload)?)
    }

    pub fn payload(&self) -> &[u8] {
        &self.record.payload
    }

    pub fn stream_id(&self) -> StreamId {
        self.record.id
    }

    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.record.headers
    }

    pub fn key(&self) -> Option<&str> {
        self.record.key.as_deref()
    }

    pub fn partition(&self) -> u32 {
        self.record.partition
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

type StreamHandler = Arc<dyn Fn(&StreamContext) -> Result<(), HandlerError> + Send + Sync>;

/// A stream worker's settings (the defaults are the spec's).
#[derive(Debug, Clone)]
pub struct StreamWorkerOptions {
    pub addr: String,
    pub namespace: String,
    pub stream: String,
    /// Default `default`.
    pub group: String,
    /// Default: the worker id.
    pub consumer: Option<String>,
    pub worker_id: String,
    /// Records handled at once (default 10).
    pub concurrency: u32,
    /// Records read per poll (default 10).
    pub batch_size: u32,
    /// Longest a poll waits for records (default 30 s).
    pub block_ms: u64,
    /// A handler running longer fails its record (default 5 minutes); a group the worker
    /// creates redelivers a record unacknowledged this long.
    pub message_timeout: Duration,
    pub machine_id: Option<String>,
    pub metadata: Option<String>,
    pub heartbeat_interval: Duration,
    pub token: Option<String>,
}

/// Builds a `StreamWorker`.
pub struct StreamWorkerBuilder {
    options: StreamWorkerOptions,
    handler: Option<StreamHandler>,
}

impl StreamWorkerBuilder {
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.options.namespace = namespace.into();
        self
    }

    pub fn stream(mut self, stream: impl Into<String>) -> Self {
        self.options.stream = stream.into();
        self
    }

    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.options.group = group.into();
        self
    }

    pub fn consumer(mut self, consumer: impl Into<String>) -> Self {
        self.options.consumer = Some(consumer.into());
        self
    }

    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.options.worker_id = worker_id.into();
        self
    }

    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.options.concurrency = concurrency;
        self
    }

    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.options.batch_size = batch_size;
        self
    }

    pub fn block_ms(mut self, block_ms: u64) -> Self {
        self.options.block_ms = block_ms;
        self
    }

    pub fn message_timeout(mut self, timeout: Duration) -> Self {
        self.options.message_timeout = timeout;
        self
    }

    pub fn machine_id(mut self, machine_id: impl Into<String>) -> Self {
        self.options.machine_id = Some(machine_id.into());
        self
    }

    pub fn metadata(mut self, metadata_json: impl Into<String>) -> Self {
        self.options.metadata = Some(metadata_json.into());
        self
    }

    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.options.heartbeat_interval = interval;
        self
    }

    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// The handler: `Ok` acknowledges the record, an error (or a panic) has it delivered
    /// again.
    pub fn handler<F>(mut self, handler: F) -> Self
    where
        F: Fn(&StreamContext) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Checks the settings and connects, registers and joins the group; then `spawn`.
    pub fn spawn(self) -> Result<RunningStreamWorker, WorkerError> {
        let o = &self.options;
        let handler = self
            .handler
            .ok_or_else(|| WorkerError::Config("a stream worker needs a handler".into()))?;
        if o.stream.is_empty() {
            return Err(WorkerError::Config("a stream worker needs a stream".into()));
        }
        if o.concurrency == 0 || o.batch_size == 0 {
            return Err(WorkerError::Config(
                "concurrency and batch size must be above 0".into(),
            ));
        }
        let shared = Arc::new(Shared {
            consumer: o.consumer.clone().unwrap_or_else(|| o.worker_id.clone()),
            options: self.options,
            handler,
            stop: StopHandle::default(),
            counters: Counters::default(),
            in_flight: AtomicU64::new(0),
        });
        let client = shared.connect()?;
        let thread = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("flo-stream-worker".into())
                .spawn(move || run(&shared, client))
                .map_err(WorkerError::Thread)?
        };
        Ok(RunningStreamWorker {
            shared,
            thread: Some(thread),
        })
    }
}

/// Consumes a stream through a consumer group (see the module documentation).
pub struct StreamWorker;

impl StreamWorker {
    /// A builder with the spec's defaults, for the server at `addr`.
    pub fn builder(addr: impl ToString) -> StreamWorkerBuilder {
        StreamWorkerBuilder {
            options: StreamWorkerOptions {
                addr: addr.to_string(),
                namespace: "default".into(),
                stream: String::new(),
                group: "default".into(),
                consumer: None,
                worker_id: generate_worker_id(),
                concurrency: 10,
                batch_size: 10,
                block_ms: 30_000,
                message_timeout: Duration::from_secs(300),
                machine_id: None,
                metadata: None,
                heartbeat_interval: Duration::from_secs(30),
                token: None,
            },
            handler: None,
        }
    }
}

/// A stream worker running on a background thread; dropping it asks it to stop.
pub struct RunningStreamWorker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<WorkerStats, WorkerError>>>,
}

impl RunningStreamWorker {
    pub fn stop_handle(&self) -> StopHandle {
        self.shared.stop.clone()
    }

    pub fn stop(&self) {
        self.shared.stop.stop();
    }

    pub fn stats(&self) -> WorkerStats {
        self.shared.stats()
    }

    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the worker to stop (asked to, or drained).
    pub fn join(mut self) -> Result<WorkerStats, WorkerError> {
        let thread = self.thread.take().expect("joined once: join consumes self");
        thread
            .join()
            .unwrap_or_else(|_| Err(WorkerError::Panicked("the stream worker".into())))
    }

    /// Stops gracefully: records in flight finish and are reported, then it deregisters.
    pub fn stop_and_join(self) -> Result<WorkerStats, WorkerError> {
        self.stop();
        self.join()
    }
}

impl Drop for RunningStreamWorker {
    fn drop(&mut self) {
        self.shared.stop.stop();
    }
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
    registrations: AtomicU64,
    reconnects: AtomicU64,
    drained: AtomicU64,
    last_error: Mutex<Option<String>>,
}

struct Shared {
    options: StreamWorkerOptions,
    consumer: String,
    handler: StreamHandler,
    stop: StopHandle,
    counters: Counters,
    in_flight: AtomicU64,
}

/// A record handled: its id and whether it is acknowledged.
type Done = (StreamId, bool);

impl Shared {
    fn stats(&self) -> WorkerStats {
        let c = &self.counters;
        WorkerStats {
            tasks_received: c.received.load(Ordering::Relaxed),
            tasks_completed: c.acked.load(Ordering::Relaxed),
            tasks_failed: c.failed.load(Ordering::Relaxed),
            // A record whose handler ran past `message_timeout` counts as failed.
            tasks_timed_out: 0,
            reports_lost: c.lost.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed) as u32,
            registrations: c.registrations.load(Ordering::Relaxed),
            reconnects: c.reconnects.load(Ordering::Relaxed),
            drained: c.drained.load(Ordering::Relaxed) > 0,
            last_error: c
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    fn note(&self, context: &str, e: &Error) {
        *self
            .counters
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(format!("{context}: {e}"));
    }

    /// Connects, registers and joins the group (creating it when missing).
    fn connect(&self) -> Result<Client, Error> {
        let o = &self.options;
        let mut client = Client::connect_as(o.addr.as_str(), o.token.as_deref())?
            .with_namespace(o.namespace.clone());
        client.register_worker(WorkerSpec {
            namespace: o.namespace.clone(),
            worker_id: o.worker_id.clone(),
            worker_type: WorkerType::Stream,
            max_concurrency: Some(o.concurrency),
            processes: vec![format!("{}/{}", o.stream, o.group)],
            metadata: o.metadata.clone(),
            machine_id: o.machine_id.clone(),
            labels: None,
        })?;
        self.counters.registrations.fetch_add(1, Ordering::Relaxed);
        let config = GroupConfig {
            message_timeout_ms: Some(o.message_timeout.as_millis().max(1) as u64),
            ..Default::default()
        };
        let joined = match client.create_group(&o.stream, &o.group, config.clone()) {
            // No stream yet: create it with the default settings, then the group.
            Err(e) if is_not_found(&e) => {
                match client.create_stream(&o.stream, Default::default()) {
                    Err(Error::Server(v)) if v.code == ErrorCode::Conflict => {}
                    other => {
                        other?;
                    }
                }
                client.create_group(&o.stream, &o.group, config).map(|_| ())
            }
            other => other.map(|_| ()),
        };
        match joined {
            // The group exists with other settings: join it as it is.
            Err(Error::Server(v)) if v.code == ErrorCode::Conflict => Ok(client),
            Err(e) => Err(e),
            Ok(()) => Ok(client),
        }
    }
}

fn run(shared: &Arc<Shared>, client: Client) -> Result<WorkerStats, WorkerError> {
    let (jobs, queue) = mpsc::channel::<StreamRecord>();
    let queue = Arc::new(Mutex::new(queue));
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let mut pool = Vec::new();
    for i in 0..shared.options.concurrency {
        let (shared, queue, done) = (shared.clone(), queue.clone(), done_tx.clone());
        let handle = thread::Builder::new()
            .name(format!("flo-stream-{i}"))
            .spawn(move || handle_loop(&shared, &queue, &done))
            .map_err(WorkerError::Thread)?;
        pool.push(handle);
    }
    drop(done_tx);
    let heartbeat = {
        let shared = shared.clone();
        thread::Builder::new()
            .name("flo-stream-heartbeat".into())
            .spawn(move || heartbeat_loop(&shared))
            .map_err(WorkerError::Thread)?
    };
    let mut client = Some(client);
    let mut backoff = Duration::from_millis(100);
    let mut finished: Vec<Done> = Vec::new();
    let concurrency = shared.options.concurrency as u64;
    while !shared.stop.is_stopped() {
        finished.extend(done_rx.try_iter());
        let Some(c) = client.as_mut() else {
            thread::sleep(backoff);
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
            match shared.connect() {
                Ok(c) => {
                    shared.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    client = Some(c);
                    backoff = Duration::from_millis(100);
                }
                Err(e) => shared.note("reconnect", &e),
            }
            continue;
        };
        if let Err(e) = report(shared, c, &mut finished) {
            shared.note("ack", &e);
            client = None;
            continue;
        }
        let free = concurrency.saturating_sub(shared.in_flight.load(Ordering::SeqCst));
        if free == 0 {
            if let Ok(d) = done_rx.recv_timeout(Duration::from_millis(100)) {
                finished.push(d);
            }
            continue;
        }
        let o = &shared.options;
        let spec = GroupReadSpec {
            stream: o.stream.clone(),
            group: o.group.clone(),
            consumer: shared.consumer.clone(),
            count: Some(free.min(o.batch_size as u64) as u32),
            block_ms: Some(o.block_ms.min(READ_BLOCK_MS_MAX)),
            ..Default::default()
        };
        match c.group_read(spec) {
            Ok(records) => {
                let n = records.len() as u64;
                shared.counters.received.fetch_add(n, Ordering::Relaxed);
                shared.in_flight.fetch_add(n, Ordering::SeqCst);
                for r in records {
                    let _ = jobs.send(r);
                }
            }
            Err(e) => {
                shared.note("read", &e);
                client = None;
            }
        }
    }
    // Stopping: the records in flight finish and are reported.
    drop(jobs);
    for handle in pool {
        let _ = handle.join();
    }
    finished.extend(done_rx.try_iter());
    if let Some(c) = client.as_mut() {
        if report(shared, c, &mut finished).is_err() {
            shared
                .counters
                .lost
                .fetch_add(finished.len() as u64, Ordering::Relaxed);
        }
        let _ = c.deregister_worker(&shared.options.worker_id);
    }
    let _ = heartbeat.join();
    Ok(shared.stats())
}

/// Acks and nacks what the handlers finished.
fn report(shared: &Shared, client: &mut Client, finished: &mut Vec<Done>) -> Result<(), Error> {
    if finished.is_empty() {
        return Ok(());
    }
    let o = &shared.options;
    let (ok, failed): (Vec<Done>, Vec<Done>) = finished.iter().partition(|(_, ok)| *ok);
    let ids = |v: Vec<Done>| v.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    if !ok.is_empty() {
        client.ack(&o.stream, &o.group, ids(ok.clone()))?;
        shared
            .counters
            .acked
            .fetch_add(ok.len() as u64, Ordering::Relaxed);
    }
    if !failed.is_empty() {
        client.nack(&o.stream, &o.group, ids(failed.clone()), 0)?;
        shared
            .counters
            .failed
            .fetch_add(failed.len() as u64, Ordering::Relaxed);
    }
    finished.clear();
    Ok(())
}

fn handle_loop(shared: &Shared, queue: &Mutex<Receiver<StreamRecord>>, done: &Sender<Done>) {
    loop {
        let next = queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(Duration::from_millis(200));
        let record = match next {
            Ok(record) => record,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let id = record.id;
        let o = &shared.options;
        let ctx = StreamContext {
            record,
            stream: o.stream.clone(),
            group: o.group.clone(),
            consumer: shared.consumer.clone(),
            namespace: o.namespace.clone(),
        };
        let started = Instant::now();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| (shared.handler)(&ctx)));
        let ok = matches!(outcome, Ok(Ok(()))) && started.elapsed() <= o.message_timeout;
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        let _ = done.send((id, ok));
    }
}

fn heartbeat_loop(shared: &Shared) {
    let o = &shared.options;
    let mut client: Option<Client> = None;
    let mut last = Instant::now();
    while !shared.stop.is_stopped() {
        thread::sleep(Duration::from_millis(100));
        if last.elapsed() < o.heartbeat_interval {
            continue;
        }
        last = Instant::now();
        if client.is_none() {
            client = Client::connect_as(o.addr.as_str(), o.token.as_deref())
                .ok()
                .map(|c| c.with_namespace(o.namespace.clone()));
        }
        let Some(c) = client.as_mut() else {
            continue;
        };
        let load = shared.in_flight.load(Ordering::Relaxed) as u32;
        match c.heartbeat(&o.worker_id, load) {
            Ok(WorkerStatus::Draining) => {
                shared.counters.drained.fetch_add(1, Ordering::Relaxed);
                shared.stop.stop();
            }
            Ok(_) => {}
            Err(_) => client = None,
        }
    }
}
