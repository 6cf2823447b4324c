//! What the engine hands the server's metrics (`Engine::gauges`, `Engine::counts`), driven
//! through `Engine::step` alone: tasks queued, leased and expired, the timers, the runs by
//! status. And what the census by status costs the shard (`census_cost`, ignored: run it
//! by name with `--release`).

#[path = "sim/cluster.rs"]
mod cluster;

use cluster::Cluster;
use flo_engine::{LIVE_STATUSES, RUNS_CENSUS_MAX};
use flo_protocol::{ActionKind, ActionSpec, InvokeSpec, Op, Reply, WorkerSpec, WorkerType};
use std::time::Instant;

const NS: &str = "default";
const START_MS: u64 = 1_000_000;
const ACTION: usize = 0;

struct T {
    c: Cluster,
    next_request: u64,
}

impl T {
    fn new() -> T {
        T {
            c: Cluster::new(1, START_MS),
            next_request: 0,
        }
    }

    fn ok(&mut self, op: Op) -> Reply {
        self.next_request += 1;
        let request = self.next_request;
        self.c.client(0, 1, request, op.clone());
        self.c.settle();
        match self.c.take_reply(1, request) {
            Some(Ok(reply)) => reply,
            other => panic!("{op:?}: {other:?}"),
        }
    }

    fn user_action(&mut self, name: &str, lease_ms: u64) {
        self.ok(Op::ActionRegister(ActionSpec {
            namespace: NS.into(),
            name: name.into(),
            kind: ActionKind::User,
            wasm: None,
            timeout_ms: Some(lease_ms),
            max_retries: Some(0),
            retry_delay_ms: None,
            description: None,
            memory_limit_mb: None,
            wasm_entrypoint: None,
        }));
    }

    fn invoke(&mut self, action: &str, delay_ms: Option<u64>) {
        self.ok(Op::ActionInvoke(InvokeSpec {
            namespace: NS.into(),
            action: action.into(),
            input: b"{}".to_vec(),
            priority: None,
            delay_ms,
            idempotency_key: None,
            labels: None,
            wait_ms: None,
        }));
    }

    fn lease(&mut self, worker: &str, action: &str) -> usize {
        self.ok(Op::WorkerRegister(WorkerSpec {
            namespace: NS.into(),
            worker_id: worker.into(),
            worker_type: WorkerType::Action,
            max_concurrency: None,
            processes: vec![action.into()],
            metadata: None,
            machine_id: None,
            labels: None,
        }));
        match self.ok(Op::TaskAwait {
            namespace: NS.into(),
            worker_id: worker.into(),
            actions: vec![action.into()],
            max_tasks: 1,
            block_ms: 0,
            home_only: false,
        }) {
            Reply::Tasks(tasks) => tasks.len(),
            other => panic!("{other:?}"),
        }
    }
}

fn status(name: &str) -> usize {
    LIVE_STATUSES.iter().position(|s| *s == name).unwrap()
}

#[test]
fn tasks_queued_leased_and_expired_and_the_runs_by_status_are_counted() {
    let mut t = T::new();
    t.user_action("pack", 1000);
    for _ in 0..3 {
        t.invoke("pack", None);
    }
    t.invoke("pack", Some(60_000));
    let g = t.c.engine(0).gauges();
    assert_eq!((g.tasks_ready, g.delayed_runs, g.leases), (3, 1, 0));
    let census = g.runs_by_status[ACTION].expect("counted");
    assert_eq!(census[status("pending")], 4);

    assert_eq!(t.lease("w1", "pack"), 1);
    let g = t.c.engine(0).gauges();
    assert_eq!((g.tasks_ready, g.leases), (2, 1));
    assert_eq!(g.runs_by_status[ACTION].unwrap()[status("running")], 1);
    assert_eq!(t.c.engine(0).counts().tasks_leased, 1);

    // The lease runs out: a failed attempt, the run final (no retries).
    t.c.advance(1001);
    t.c.settle();
    let counts = t.c.engine(0).counts();
    assert_eq!((counts.tasks_leased, counts.leases_expired), (1, 1));
    let g = t.c.engine(0).gauges();
    assert_eq!(g.leases, 0, "the lease's timer is gone");
    assert_eq!(g.runs_by_status[ACTION].unwrap()[status("running")], 0);
}

/// The census of `RUNS_CENSUS_MAX` runs by status, timed: what one publication pauses the
/// shard for at the bound (`cargo test --release -p flo-engine --test metrics_numbers
/// census_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement: run it by name, with --release"]
fn census_cost() {
    let mut t = T::new();
    t.user_action("pack", 60_000);
    for _ in 0..RUNS_CENSUS_MAX {
        t.invoke("pack", None);
    }
    let engine = t.c.engine(0);
    let census = engine.gauges().runs_by_status[ACTION].expect("counted at the bound");
    assert_eq!(census.iter().sum::<u64>(), RUNS_CENSUS_MAX as u64);
    let rounds = 20;
    let started = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(engine.gauges());
    }
    let per_call = started.elapsed() / rounds;
    eprintln!(
        "gauges() with {RUNS_CENSUS_MAX} action runs in memory: {per_call:?} a call, {:.1} ns \
         a run",
        per_call.as_nanos() as f64 / RUNS_CENSUS_MAX as f64
    );
}
