//! The worker side of the `worker` workload: `--workers` connections, one thread each, that
//! register as workers of the action, long-poll for tasks (`TaskAwait` for up to
//! `--await-batch` tasks, held at most `AWAIT_BLOCK_MS`) and complete every task with its
//! input as the result. A worker queues the completions of a batch and its next await
//! together and flushes them with one write, so awaiting overlaps completing; it awaits only
//! while at most `--await-batch` completions are unanswered, so no more than twice that
//! many tasks are ever in its hands. Each worker's id is homed on its connection's shard;
//! once the workers cover every shard, each awaits its home's tasks alone (`home_only`):
//! invocations stay on the invoking connection's shard, so no task crosses between shards.
//!
//! The run ends once the workers completed the tasks the invoking side's outcome calls for
//! (one per successful invoke for `worker`, three per completed run for `workflow-worker`).
//! Latency is invoke-to-complete: from the moment the invoking connection queued the
//! invocation (its intended send time in open-loop mode; the payload carries it, see
//! `workload::UserInvoke`) to the acknowledgement of its `TaskComplete`. Tasks whose payload
//! carries no send time (the steps of `workflow-worker`) are counted, not timed.
//!
//! Also the workers of `workflow-worker` and `mixed`. With `--max-outstanding`, each task
//! completed gives back the permit its invoke took (`Config::limiter`).

use crate::driver::{self, describe, new_histogram};
use crate::limiter::Limiter;
use crate::progress;
use crate::workload::decode_sent_ns;
use flo::Connection;
use flo::protocol::{Op, Reply, Request, Response, TaskAssignment, WorkerSpec, WorkerType};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// Longest a `TaskAwait` is held: short, so a worker notices the end of the run quickly.
const AWAIT_BLOCK_MS: u64 = 1000;
/// Heartbeat period (the server marks a worker silent for 90 s unhealthy).
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// Id of the first request after the handshake (which used 1).
const FIRST_REQUEST_ID: u64 = 2;

pub struct Config {
    pub addr: String,
    /// Presented in each connection's handshake.
    pub token: Option<String>,
    pub namespace: String,
    pub action: String,
    pub workers: usize,
    pub await_batch: u32,
    pub max_duration: Duration,
    /// The clock the invocations' `sent_ns` counts from.
    pub epoch: Instant,
    /// Print a progress line on stderr every second.
    pub progress: bool,
    /// `--max-outstanding` of the `worker` workload (and `mixed`): a completed task gives
    /// back the permit its invoke took.
    pub limiter: Option<Arc<Limiter>>,
}

pub struct TaskOutcome {
    /// Invoke-to-complete latency of every completed task, in microseconds.
    pub latency_us: Histogram<u64>,
    pub completed: u64,
    /// Tasks the run waited for (for `worker`: the invocations that succeeded).
    pub expected: u64,
    /// Error replies to completions and heartbeats.
    pub errors: u64,
    pub first_error: Option<String>,
    /// One message per failed worker connection.
    pub failures: Vec<String>,
    /// From the start of the invocations to the last completion.
    pub elapsed: Duration,
    /// Whether the `max_duration` limit stopped the workers before every task completed.
    pub hit_time_limit: bool,
}

impl TaskOutcome {
    /// Every expected task completed (or the time limit ended the run), without errors.
    pub fn ok(&self) -> bool {
        self.errors == 0
            && self.failures.is_empty()
            && (self.completed >= self.expected || self.hit_time_limit)
    }
}

/// Registers the workers, runs `invoke` (the invoking side, returning its outcome), then
/// waits until the workers completed the tasks `expected` counts in that outcome.
pub fn run(
    cfg: &Config,
    invoke: impl FnOnce() -> driver::Outcome,
    expected: impl FnOnce(&driver::Outcome) -> u64,
) -> (driver::Outcome, TaskOutcome) {
    let shared = Shared {
        expected: AtomicU64::new(u64::MAX),
        completed: AtomicU64::new(0),
        registered: AtomicU64::new(0),
        last_completion_ns: AtomicU64::new(0),
        first_error: Mutex::new(None),
        placed: Mutex::new(Vec::new()),
    };
    let barrier = Barrier::new(cfg.workers + 1);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.workers)
            .map(|index| {
                let (shared, barrier) = (&shared, &barrier);
                thread::Builder::new()
                    .name(format!("worker-{index}"))
                    .spawn_scoped(scope, move || worker_thread(index, cfg, shared, barrier))
                    .expect("cannot start a worker thread")
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let (stop_progress, stopped) = mpsc::channel::<()>();
        let watched = progress::Watched {
            unit: "tasks completed",
            total: None,
            done: &shared.completed,
            window_us: None,
        };
        let reporter = cfg
            .progress
            .then(|| scope.spawn(move || progress::report(start, watched, stopped)));

        // Without a single worker no task would ever complete: invoke nothing.
        let invoked = if shared.registered.load(Relaxed) > 0 {
            invoke()
        } else {
            driver::Outcome::empty()
        };
        let expected = expected(&invoked);
        shared.expected.store(expected, Relaxed);

        let mut outcome = TaskOutcome {
            latency_us: new_histogram(),
            completed: 0,
            expected,
            errors: 0,
            first_error: None,
            failures: Vec::new(),
            elapsed: Duration::ZERO,
            hit_time_limit: false,
        };
        for (index, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(done) => {
                    outcome
                        .latency_us
                        .add(&done.latency_us)
                        .expect("histograms share bounds");
                    outcome.completed += done.completed;
                    outcome.errors += done.errors;
                    outcome.hit_time_limit |= done.hit_time_limit;
                    outcome.failures.extend(done.failure);
                }
                Err(_) => outcome
                    .failures
                    .push(format!("worker {index}: thread panicked")),
            }
        }
        drop(stop_progress);
        if let Some(reporter) = reporter {
            let _ = reporter.join();
        }
        let start_ns = nanos_between(cfg.epoch, start);
        let last_ns = shared.last_completion_ns.load(Relaxed);
        outcome.elapsed = if last_ns > start_ns {
            Duration::from_nanos(last_ns - start_ns)
        } else {
            start.elapsed()
        };
        outcome.first_error = shared.first_error.lock().unwrap().take();
        (invoked, outcome)
    })
}

struct Shared {
    /// Tasks to complete before the workers stop (unknown, so `u64::MAX`, until the
    /// invocations are done).
    expected: AtomicU64,
    completed: AtomicU64,
    /// Workers that registered.
    registered: AtomicU64,
    /// Nanoseconds from the epoch to the latest completion.
    last_completion_ns: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Worker connections opened so far on each shard (`driver::open_spread`).
    placed: Mutex<Vec<usize>>,
}

impl Shared {
    fn finished(&self) -> bool {
        self.completed.load(Relaxed) >= self.expected.load(Relaxed)
    }

    fn note_error(&self, message: String) {
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            progress::note(&format!("flo-loadtest: first worker error: {message}"));
            *first = Some(message);
        }
    }
}

fn nanos_between(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_nanos()).unwrap_or(u64::MAX)
}

/// What one worker thread did.
struct ThreadOutcome {
    latency_us: Histogram<u64>,
    completed: u64,
    errors: u64,
    failure: Option<String>,
    hit_time_limit: bool,
}

fn worker_thread(index: usize, cfg: &Config, shared: &Shared, barrier: &Barrier) -> ThreadOutcome {
    let mut worker = TaskWorker::new(cfg, shared, String::new());
    let token = cfg.token.as_deref();
    let mut shards = 0;
    let registered = driver::open_spread(&cfg.addr, token, cfg.workers, &shared.placed).and_then(
        |(mut conn, count, shard)| {
            worker.worker_id = home_worker_id(&mut conn, &cfg.namespace, index, shard)?;
            worker.register(&mut conn)?;
            shared.registered.fetch_add(1, Relaxed);
            shards = if shard.is_some() { count } else { 0 };
            Ok(conn)
        },
    );
    barrier.wait();
    // Every worker is placed now: if each shard has one (homed there), each awaits its
    // home's tasks alone and nothing crosses between shards.
    worker.home_only = shards > 0 && every_shard_has_one(&shared.placed, shards);
    let deadline = Instant::now() + cfg.max_duration;
    let mut outcome = ThreadOutcome {
        latency_us: new_histogram(),
        completed: 0,
        errors: 0,
        failure: None,
        hit_time_limit: false,
    };
    let result = registered.and_then(|mut conn| {
        let hit_time_limit = worker.drive(&mut conn, deadline)?;
        // Best effort: a worker left registered only ages into `unhealthy`.
        let _ = worker.call(&mut conn, worker.deregister_op());
        Ok(hit_time_limit)
    });
    match result {
        Ok(hit_time_limit) => outcome.hit_time_limit = hit_time_limit,
        Err(message) => {
            let message = format!("worker {index}: {message}");
            progress::note(&format!("flo-loadtest: {message}"));
            outcome.failure = Some(message);
        }
    }
    outcome.latency_us = worker.latency_us;
    outcome.completed = worker.completed;
    outcome.errors = worker.errors;
    outcome
}

/// Whether the connections placed so far cover every one of `shards` shards.
fn every_shard_has_one(placed: &Mutex<Vec<usize>>, shards: u32) -> bool {
    let placed = placed.lock().unwrap_or_else(|e| e.into_inner());
    placed.len() >= shards as usize && placed.iter().all(|&n| n > 0)
}

/// A worker id whose home (the shard its id hashes to, where its awaits are answered) is
/// `shard`, the shard of its connection: its requests then take no hop to reach it.
fn home_worker_id(
    conn: &mut Connection,
    namespace: &str,
    index: usize,
    shard: Option<u32>,
) -> Result<String, String> {
    let base = format!("flo-loadtest-{}-{index}", std::process::id());
    let Some(shard) = shard else {
        return Ok(base);
    };
    let map = driver::shard_map(conn)?;
    Ok((0..1024)
        .map(|j| format!("{base}-{j}"))
        .find(|id| map.shard_of(namespace, id) == Some(shard))
        .unwrap_or(base))
}

struct TaskWorker<'a> {
    cfg: &'a Config,
    shared: &'a Shared,
    worker_id: String,
    /// Await its home's tasks alone (a worker is homed on every shard).
    home_only: bool,
    next_id: u64,
    /// The await in flight, if any (at most one).
    await_id: Option<u64>,
    /// The heartbeat in flight, if any.
    heartbeat_id: Option<u64>,
    /// Completions in flight: request id → the invocation's `sent_ns`.
    completing: HashMap<u64, Option<u64>>,
    latency_us: Histogram<u64>,
    completed: u64,
    errors: u64,
}

impl<'a> TaskWorker<'a> {
    fn new(cfg: &'a Config, shared: &'a Shared, worker_id: String) -> Self {
        TaskWorker {
            cfg,
            shared,
            worker_id,
            home_only: false,
            next_id: FIRST_REQUEST_ID,
            await_id: None,
            heartbeat_id: None,
            completing: HashMap::with_capacity(cfg.await_batch as usize),
            latency_us: new_histogram(),
            completed: 0,
            errors: 0,
        }
    }

    /// Sends one request and waits for its reply (nothing else may be in flight).
    fn call(&mut self, conn: &mut Connection, op: Op) -> Result<Reply, String> {
        let id = self.queue(conn, op)?;
        conn.flush().map_err(describe)?;
        let response = conn.recv().map_err(describe)?;
        if response.id != id {
            return Err(format!("response to unknown request id {}", response.id));
        }
        response.result.map_err(|e| e.to_string())
    }

    fn queue(&mut self, conn: &mut Connection, op: Op) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        conn.queue(&Request { id, op }).map_err(describe)?;
        Ok(id)
    }

    fn register(&mut self, conn: &mut Connection) -> Result<(), String> {
        let spec = WorkerSpec {
            namespace: self.cfg.namespace.clone(),
            worker_id: self.worker_id.clone(),
            worker_type: WorkerType::Action,
            // It awaits the next batch while the last one's completions are in flight: up
            // to two batches (the server offers no more than this).
            max_concurrency: Some(self.cfg.await_batch.saturating_mul(2)),
            processes: vec![self.cfg.action.clone()],
            metadata: None,
            machine_id: None,
            labels: None,
        };
        match self.call(conn, Op::WorkerRegister(spec)) {
            Ok(Reply::Worker(_)) => Ok(()),
            Ok(other) => Err(format!("unexpected reply to a worker register: {other:?}")),
            Err(e) => Err(format!("worker register refused: {e}")),
        }
    }

    fn deregister_op(&self) -> Op {
        Op::WorkerDeregister {
            namespace: self.cfg.namespace.clone(),
            worker_id: self.worker_id.clone(),
        }
    }

    /// Awaits and completes tasks until the run is finished or `deadline` passes, then
    /// until nothing is in flight. `Ok(true)` if the deadline stopped it.
    fn drive(&mut self, conn: &mut Connection, deadline: Instant) -> Result<bool, String> {
        let mut next_heartbeat = Instant::now() + HEARTBEAT_INTERVAL;
        loop {
            let now = Instant::now();
            let timed_out = now >= deadline;
            if !timed_out && !self.shared.finished() {
                let room = self.completing.len() <= self.cfg.await_batch as usize;
                if self.await_id.is_none() && room {
                    self.await_id = Some(self.queue(conn, self.await_op())?);
                }
                if self.heartbeat_id.is_none() && now >= next_heartbeat {
                    self.heartbeat_id = Some(self.queue(conn, self.heartbeat_op())?);
                    next_heartbeat = now + HEARTBEAT_INTERVAL;
                }
            }
            conn.flush().map_err(describe)?;
            if self.await_id.is_none() && self.heartbeat_id.is_none() && self.completing.is_empty()
            {
                return Ok(timed_out && !self.shared.finished());
            }
            let response = conn.recv().map_err(describe)?;
            self.handle(conn, response)?;
            while let Some(response) = conn.recv_buffered().map_err(describe)? {
                self.handle(conn, response)?;
            }
        }
    }

    fn await_op(&self) -> Op {
        Op::TaskAwait {
            namespace: self.cfg.namespace.clone(),
            worker_id: self.worker_id.clone(),
            actions: vec![self.cfg.action.clone()],
            max_tasks: self.cfg.await_batch,
            block_ms: AWAIT_BLOCK_MS,
            home_only: self.home_only,
        }
    }

    fn heartbeat_op(&self) -> Op {
        Op::WorkerHeartbeat {
            namespace: self.cfg.namespace.clone(),
            worker_id: self.worker_id.clone(),
            current_load: self.completing.len() as u32,
        }
    }

    /// Handles one response; queues (does not flush) the completions of received tasks.
    fn handle(&mut self, conn: &mut Connection, response: Response) -> Result<(), String> {
        let id = response.id;
        if self.await_id == Some(id) {
            self.await_id = None;
            return match response.result {
                Ok(Reply::Tasks(tasks)) => {
                    if tasks.len() > self.cfg.await_batch as usize {
                        return Err(format!(
                            "an await for {} tasks returned {}",
                            self.cfg.await_batch,
                            tasks.len()
                        ));
                    }
                    tasks
                        .into_iter()
                        .try_for_each(|task| self.queue_complete(conn, task))?;
                    debug_assert!(self.completing.len() <= 2 * self.cfg.await_batch as usize);
                    Ok(())
                }
                Ok(other) => Err(format!("unexpected reply to a task await: {other:?}")),
                Err(e) => Err(format!("task await refused: {e}")),
            };
        }
        if self.heartbeat_id == Some(id) {
            self.heartbeat_id = None;
            match response.result {
                Ok(Reply::WorkerStatus { .. }) => {}
                Ok(other) => self.error(format!("unexpected reply to a heartbeat: {other:?}")),
                Err(e) => self.error(format!("heartbeat refused: {e}")),
            }
            return Ok(());
        }
        let Some(sent_ns) = self.completing.remove(&id) else {
            return Err(match response.result {
                Err(e) => format!("server error not tied to a request: {e}"),
                Ok(reply) => format!("response to unknown request id {id}: {reply:?}"),
            });
        };
        match response.result {
            Ok(Reply::Done) => self.completed_one(sent_ns),
            Ok(other) => self.error(format!("unexpected reply to a task complete: {other:?}")),
            Err(e) => self.error(format!("task complete refused: {e}")),
        }
        Ok(())
    }

    /// The trivial handler: the result is the input.
    fn queue_complete(
        &mut self,
        conn: &mut Connection,
        task: TaskAssignment,
    ) -> Result<(), String> {
        let sent_ns = decode_sent_ns(&task.payload);
        let op = Op::TaskComplete {
            namespace: self.cfg.namespace.clone(),
            worker_id: self.worker_id.clone(),
            task_id: task.task_id,
            action: task.action,
            attempt: Some(task.attempt),
            result: task.payload,
            outcome: None,
            state: None,
        };
        let id = self.queue(conn, op)?;
        self.completing.insert(id, sent_ns);
        Ok(())
    }

    fn completed_one(&mut self, sent_ns: Option<u64>) {
        let now_ns = nanos_between(self.cfg.epoch, Instant::now());
        if let Some(sent_ns) = sent_ns {
            self.latency_us
                .saturating_record(now_ns.saturating_sub(sent_ns) / 1000);
        }
        self.completed += 1;
        if let Some(limiter) = &self.cfg.limiter {
            limiter.release(1);
        }
        self.shared.completed.fetch_add(1, Relaxed);
        self.shared.last_completion_ns.fetch_max(now_ns, Relaxed);
    }

    fn error(&mut self, message: String) {
        self.errors += 1;
        self.shared.note_error(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_server::FakeServer;
    use crate::workload::UserInvoke;

    #[test]
    fn workers_complete_every_invoked_task_and_measure_its_latency() {
        let (fake, addr) = FakeServer::start();
        let epoch = Instant::now();
        let cfg = Config {
            addr: addr.clone(),
            token: None,
            namespace: "ns".into(),
            action: "lt-task".into(),
            workers: 3,
            await_batch: 8,
            max_duration: Duration::from_secs(60),
            epoch,
            progress: false,
            limiter: None,
        };
        let invoke_cfg = driver::Config::closed(&addr, 2, 16, 500);
        let (invoked, tasks) = run(
            &cfg,
            || driver::run(&invoke_cfg, || UserInvoke::new("ns", "lt-task", epoch)),
            driver::Outcome::succeeded,
        );
        assert_eq!(
            (invoked.ops, invoked.errors),
            (500, 0),
            "{:?}",
            invoked.first_error
        );
        assert!(tasks.failures.is_empty(), "{:?}", tasks.failures);
        assert_eq!(
            (tasks.expected, tasks.completed, tasks.errors),
            (500, 500, 0)
        );
        assert!(tasks.ok() && !tasks.hit_time_limit);
        assert_eq!(tasks.latency_us.len(), 500, "one latency per task");
        assert_eq!(fake.completed.load(Relaxed), 500);
        assert!(fake.queue.lock().unwrap().is_empty());
    }

    #[test]
    fn max_outstanding_bounds_tasks_invoked_and_not_yet_completed() {
        let (fake, addr) = FakeServer::start();
        let epoch = Instant::now();
        let limiter = Arc::new(Limiter::new(10));
        let cfg = Config {
            addr: addr.clone(),
            token: None,
            namespace: "ns".into(),
            action: "lt-task".into(),
            workers: 2,
            await_batch: 4,
            max_duration: Duration::from_secs(60),
            epoch,
            progress: false,
            limiter: Some(limiter.clone()),
        };
        // Without the bound, 2 × 64 invokes could be in flight at once.
        let mut invoke_cfg = driver::Config::closed(&addr, 2, 64, 300);
        invoke_cfg.limiter = Some(limiter.clone());
        let (invoked, tasks) = run(
            &cfg,
            || driver::run(&invoke_cfg, || UserInvoke::new("ns", "lt-task", epoch)),
            driver::Outcome::succeeded,
        );
        assert_eq!((invoked.ops, invoked.errors), (300, 0));
        assert_eq!((tasks.expected, tasks.completed), (300, 300));
        assert!(tasks.ok());
        assert_eq!(fake.completed.load(Relaxed), 300);
        assert!(limiter.peak() <= 10, "peak {}", limiter.peak());
        assert_eq!(
            limiter.held(),
            0,
            "every completed task gave its permit back"
        );
    }
}
