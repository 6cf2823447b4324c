//! A stand-in flo server for the SDK's unit tests: speaks the protocol over TCP on
//! plain threads, hands out queued tasks to `TaskAwait` long-polls, keeps a worker
//! registry, and records every request it receives.

use flo_protocol::{
    ErrorValue, FRAME_BYTES_MAX, Op, PROTOCOL_VERSION, Reply, Request, Response, RunInfo,
    RunStatus, TaskAssignment, WorkerInfo, WorkerSpec, WorkerStatus, decode_payload, encode_frame,
    split_frame,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

pub(crate) struct FakeServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

struct State {
    inner: Mutex<Inner>,
    changed: Condvar,
}

/// What the fake knows; tests read it through `FakeServer::with`.
#[derive(Default)]
pub(crate) struct Inner {
    /// Every request but the handshakes, in arrival order.
    pub requests: Vec<Op>,
    pub tasks: VecDeque<TaskAssignment>,
    pub workers: HashMap<String, WorkerSpec>,
    pub draining: HashSet<String>,
    pub connections: u32,
    /// While set, requests are recorded but never answered.
    pub stalled: bool,
    next_task: u64,
    live: Vec<(TcpStream, Arc<AtomicBool>)>,
}

impl Inner {
    pub fn count(&self, pred: impl Fn(&Op) -> bool) -> usize {
        self.requests.iter().filter(|op| pred(op)).count()
    }
}

type Writer = Arc<Mutex<TcpStream>>;

impl FakeServer {
    pub fn start() -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            inner: Mutex::new(Inner::default()),
            changed: Condvar::new(),
        });
        let accepting = state.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let alive = Arc::new(AtomicBool::new(true));
                {
                    let mut inner = accepting.lock();
                    inner.connections += 1;
                    inner
                        .live
                        .push((stream.try_clone().unwrap(), alive.clone()));
                }
                let state = accepting.clone();
                thread::spawn(move || serve(&state, stream, &alive));
            }
        });
        FakeServer { addr, state }
    }

    /// Reads or changes the fake's state (waking parked polls afterwards).
    pub fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let result = f(&mut self.state.lock());
        self.state.changed.notify_all();
        result
    }

    /// Queues a task; returns its id.
    pub fn push_task(&self, action: &str, payload: &str) -> String {
        self.with(|inner| {
            inner.next_task += 1;
            let task_id = format!("{action}-{}", inner.next_task);
            inner.tasks.push_back(TaskAssignment {
                task_id: task_id.clone(),
                action: action.into(),
                namespace: "default".into(),
                payload: payload.as_bytes().to_vec(),
                attempt: 1,
                priority: 10,
                created_at_ms: 1_000,
                lease_expires_at_ms: 31_000,
                state: None,
            });
            task_id
        })
    }

    /// Waits up to `timeout` for `cond` to hold; returns whether it did.
    pub fn wait_until(&self, timeout: Duration, cond: impl Fn(&Inner) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut inner = self.state.lock();
        while !cond(&inner) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            inner = self.state.changed.wait_timeout(inner, left).unwrap().0;
        }
        true
    }

    /// Drops every open connection, as a crashing server would.
    pub fn cut_connections(&self) {
        self.with(|inner| {
            for (stream, alive) in inner.live.drain(..) {
                alive.store(false, Ordering::SeqCst);
                let _ = stream.shutdown(Shutdown::Both);
            }
        });
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }
}

fn serve(state: &Arc<State>, mut stream: TcpStream, alive: &Arc<AtomicBool>) {
    let writer: Writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some((payload, used)) = split_frame(&buf, FRAME_BYTES_MAX).unwrap() {
            let request: Request = decode_payload(payload).unwrap();
            buf.drain(..used);
            handle(state, &writer, alive, request);
        }
    }
    alive.store(false, Ordering::SeqCst);
    state.changed.notify_all();
}

fn handle(state: &Arc<State>, writer: &Writer, alive: &Arc<AtomicBool>, request: Request) {
    let Request { id, op } = request;
    if let Op::Hello { .. } = op {
        let hello = Reply::Hello {
            protocol_version: PROTOCOL_VERSION,
            server_version: "fake".into(),
            shard_count: 1,
            partitions: 1,
            shard: None,
        };
        return reply(writer, id, Ok(hello));
    }
    let mut inner = state.lock();
    inner.requests.push(op.clone());
    state.changed.notify_all();
    if inner.stalled {
        return;
    }
    let result = match op {
        Op::WorkerRegister(spec) => {
            let info = worker_info(&spec, WorkerStatus::Active);
            inner.draining.remove(&spec.worker_id);
            inner.workers.insert(spec.worker_id.clone(), spec);
            Ok(Reply::Worker(info))
        }
        Op::WorkerHeartbeat { worker_id, .. } => match inner.workers.contains_key(&worker_id) {
            false => Err(not_registered(&worker_id)),
            true if inner.draining.contains(&worker_id) => Ok(Reply::WorkerStatus {
                status: WorkerStatus::Draining,
            }),
            true => Ok(Reply::WorkerStatus {
                status: WorkerStatus::Active,
            }),
        },
        Op::WorkerDrain { worker_id, .. } => match inner.workers.get(&worker_id) {
            None => Err(not_registered(&worker_id)),
            Some(spec) => {
                let info = worker_info(spec, WorkerStatus::Draining);
                inner.draining.insert(worker_id);
                Ok(Reply::Worker(info))
            }
        },
        Op::WorkerDeregister { worker_id, .. } => {
            inner.workers.remove(&worker_id);
            Ok(Reply::Done)
        }
        Op::TaskAwait {
            worker_id,
            actions,
            max_tasks,
            block_ms,
            ..
        } => {
            if !inner.workers.contains_key(&worker_id) {
                Err(not_registered(&worker_id))
            } else {
                drop(inner);
                let (state, writer, alive) = (state.clone(), writer.clone(), alive.clone());
                thread::spawn(move || {
                    let wait = Duration::from_millis(block_ms);
                    let tasks = park(&state, &alive, &worker_id, &actions, max_tasks, wait);
                    reply(&writer, id, Ok(Reply::Tasks(tasks)));
                });
                return;
            }
        }
        Op::TaskComplete { .. } => Ok(Reply::Done),
        Op::TaskFail {
            task_id, action, ..
        } => Ok(Reply::Run(run_info(&task_id, &action))),
        Op::TaskTouch { extend_ms, .. } => Ok(Reply::Lease {
            expires_at_ms: 1_000 + extend_ms,
        }),
        other => Err(ErrorValue::bad_request(format!(
            "the fake server does not do {other:?}"
        ))),
    };
    drop(inner);
    reply(writer, id, result);
}

/// A long poll: waits for tasks of `actions` (up to `max_tasks`) until `wait` passes, the
/// connection goes, or the worker drains.
fn park(
    state: &State,
    alive: &AtomicBool,
    worker_id: &str,
    actions: &[String],
    max_tasks: u32,
    wait: Duration,
) -> Vec<TaskAssignment> {
    let deadline = Instant::now() + wait;
    let mut inner = state.lock();
    loop {
        let gone = !alive.load(Ordering::SeqCst) || !inner.workers.contains_key(worker_id);
        if gone || inner.draining.contains(worker_id) || Instant::now() >= deadline {
            return Vec::new();
        }
        let mut tasks = Vec::new();
        let mut rest = VecDeque::new();
        while let Some(task) = inner.tasks.pop_front() {
            if tasks.len() < max_tasks as usize && actions.contains(&task.action) {
                tasks.push(task);
            } else {
                rest.push_back(task);
            }
        }
        inner.tasks = rest;
        if !tasks.is_empty() {
            return tasks;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        inner = state.changed.wait_timeout(inner, left).unwrap().0;
    }
}

fn reply(writer: &Writer, id: u64, result: Result<Reply, ErrorValue>) {
    let mut out = Vec::new();
    encode_frame(&Response { id, result }, &mut out).unwrap();
    let _ = writer.lock().unwrap().write_all(&out);
}

fn not_registered(worker_id: &str) -> ErrorValue {
    ErrorValue::not_found(format!("worker {worker_id} is not registered"))
}

fn worker_info(spec: &WorkerSpec, status: WorkerStatus) -> WorkerInfo {
    WorkerInfo {
        worker_id: spec.worker_id.clone(),
        namespace: spec.namespace.clone(),
        worker_type: spec.worker_type,
        status,
        max_concurrency: spec.max_concurrency.unwrap_or(10),
        current_load: 0,
        tasks_completed: 0,
        tasks_failed: 0,
        registered_at_ms: 1_000,
        last_heartbeat_ms: 1_000,
        machine_id: spec.machine_id.clone(),
        metadata: spec.metadata.clone(),
        labels: spec.labels.clone(),
        processes: Vec::new(),
    }
}

fn run_info(task_id: &str, action: &str) -> RunInfo {
    RunInfo {
        run_id: task_id.into(),
        namespace: "default".into(),
        action: action.into(),
        action_version: 1,
        status: RunStatus::Pending,
        input: Vec::new(),
        output: None,
        outcome: None,
        error: None,
        attempt: 1,
        priority: 10,
        labels: None,
        idempotency_key: None,
        dead_lettered: false,
        workflow_run_id: None,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
        available_at_ms: 1_000,
        error_code: None,
    }
}
