//! The worker threads: for the whole campaign, each registers as a worker of the task
//! action, long-polls for tasks and completes them (or fails 1 in 10, to be retried),
//! reconnecting and registering again whenever the server was killed. Every lease and
//! every acknowledged report goes through the shared `TaskLedger`, which says when the
//! server hands out a task whose completion it acknowledged.

use crate::defs::{NAMESPACE, TASK_ACTION};
use crate::load::{Answer, answer};
use crate::model::{Counts, TaskLedger};
use crate::report::Report;
use flo::protocol::{ErrorCode, TaskAssignment, WorkerSpec, WorkerType};
use flo::{Client, FailMode, TaskRef};
use flo_testkit::Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Most tasks one await takes.
const AWAIT_TASKS_MAX: u32 = 8;
/// How long an await is held: short, so a worker notices the end of the campaign soon.
const AWAIT_BLOCK_MS: u64 = 300;
/// Pause between attempts to reach a server that is down.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Reports that fail the task (retried at a later attempt), in percent.
const FAIL_PERCENT: u64 = 10;
/// The RNG stream of worker threads (load threads use their cycle number).
const WORKER_STREAM: u64 = u64::MAX;

/// What the workers share with the main thread.
pub struct Shared {
    pub addr: String,
    pub seed: u64,
    pub report: Arc<Report>,
    pub tasks: Mutex<TaskLedger>,
    /// The cycle now running, for the violations the workers find.
    pub cycle: AtomicU64,
    pub counts: Mutex<Counts>,
    pub stop: AtomicBool,
}

pub fn start(shared: &Arc<Shared>, workers: u32) -> Vec<JoinHandle<()>> {
    (0..workers)
        .map(|index| {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("chaos-worker-{index}"))
                .spawn(move || Worker::new(index, shared).run())
                .expect("cannot start a worker thread")
        })
        .collect()
}

struct Worker {
    id: String,
    index: u32,
    rng: Rng,
    shared: Arc<Shared>,
    client: Option<Client>,
}

impl Worker {
    fn new(index: u32, shared: Arc<Shared>) -> Worker {
        Worker {
            id: format!("chaos-worker-{index}"),
            index,
            rng: Rng::derive(shared.seed, WORKER_STREAM, u64::from(index)),
            shared,
            client: None,
        }
    }

    fn run(mut self) {
        while !self.shared.stop.load(Relaxed) {
            let Some(client) = self.client.as_mut() else {
                self.client = self.connect();
                if self.client.is_none() {
                    thread::sleep(RECONNECT_PAUSE);
                }
                continue;
            };
            match client.await_tasks(&self.id, &[TASK_ACTION], AWAIT_TASKS_MAX, AWAIT_BLOCK_MS) {
                Ok(tasks) => {
                    for task in &tasks {
                        if !self.report_task(task) {
                            self.client = None; // the rest of the batch: leases that expire
                            break;
                        }
                    }
                }
                // Not registered (a restart forgot the registry), or the server is gone.
                Err(_) => self.client = None,
            }
        }
    }

    /// Connects and registers (the registry lives in memory: a restart forgets it).
    fn connect(&self) -> Option<Client> {
        let mut client = Client::connect(&self.shared.addr)
            .ok()?
            .with_namespace(NAMESPACE);
        let spec = WorkerSpec {
            namespace: String::new(),
            worker_id: self.id.clone(),
            worker_type: WorkerType::Action,
            max_concurrency: Some(AWAIT_TASKS_MAX * 2),
            processes: vec![TASK_ACTION.to_string()],
            metadata: None,
            machine_id: None,
            labels: None,
        };
        client.register_worker(spec).ok()?;
        Some(client)
    }

    fn violation(&self, what: &str) {
        let cycle = self.shared.cycle.load(Relaxed);
        self.shared.report.violation(cycle, what, None);
    }

    /// Completes or fails one leased task; false when the answer did not come.
    fn report_task(&mut self, task: &TaskAssignment) -> bool {
        let leased = self
            .shared
            .tasks
            .lock()
            .unwrap()
            .on_lease(&task.task_id, task.attempt);
        if let Some(what) = leased {
            self.violation(&what);
        }
        let client = self.client.as_mut().expect("connected");
        let task_ref = TaskRef::from(task);
        if self.rng.percent(FAIL_PERCENT) {
            let result = client.fail_task(&self.id, &task_ref, "chaos: try again", FailMode::Retry);
            return self.note(task, "task fail", answer(result.map(|_| ())), None);
        }
        let output = format!(
            r#"{{"worker":{},"task":"{}","attempt":{}}}"#,
            self.index, task.task_id, task.attempt
        )
        .into_bytes();
        let result = client.complete_task(&self.id, &task_ref, &output, None);
        self.note(task, "task complete", answer(result), Some(output))
    }

    /// Records a report's answer: `output` for a completion, None for a failure.
    fn note(
        &self,
        task: &TaskAssignment,
        kind: &'static str,
        answered: Answer<()>,
        output: Option<Vec<u8>>,
    ) -> bool {
        let mut counts = self.shared.counts.lock().unwrap();
        match answered {
            Answer::Ok(()) => {
                counts.ack(kind);
                drop(counts);
                let mut tasks = self.shared.tasks.lock().unwrap();
                let twice = match output {
                    Some(output) => tasks.on_completed(&task.task_id, task.attempt, output),
                    None => {
                        tasks.on_failed(&task.task_id, task.attempt);
                        None
                    }
                };
                drop(tasks);
                if let Some(what) = twice {
                    self.violation(&what);
                }
                true
            }
            // The lease ended (expired while the server was down, or the run moved on), or
            // the worker is not registered after a restart: nothing was changed.
            Answer::Refused(e) => {
                counts.ack("task report refused");
                e.code != ErrorCode::NotFound || !e.message.contains("not registered")
            }
            Answer::InDoubt(error) => {
                counts.doubt(kind);
                drop(counts);
                if let Some(e) = error {
                    let task_id = &task.task_id;
                    self.violation(&format!(
                        "{kind} {task_id}: answered {e}, which leaves it in doubt"
                    ));
                }
                false
            }
        }
    }
}
