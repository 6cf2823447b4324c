//! Engine behaviours driven through `Engine::step` alone: a `ManualClock`, one or two
//! shards wired by hand (`sim/cluster.rs`), effects asserted directly — no sockets, no
//! runtime. Each test is named after the behaviour it proves.

#[path = "sim/cluster.rs"]
mod cluster;

use cluster::{Cluster, new_engine};
use flo_engine::WASM_SLOTS;
use flo_engine::testing::RunKind;
use flo_engine::testing::archived as archive;
use flo_engine::{DiskSpace, ExecFailure, ExecResult, Execution, Input, ReplyResult};
use flo_protocol::{
    ActionKind, ActionSpec, InvokeSpec, Op, Reply, RunInfo, RunStatus, TaskAssignment, WorkerSpec,
    WorkerType, WorkflowRunInfo, WorkflowRunStatus, WorkflowStartSpec,
};
use serde_json::{Value, json};

const NS: &str = "default";
const START_MS: u64 = 1_000_000;

/// A cluster plus a client: numbered requests, compiles answered as they come.
struct T {
    c: Cluster,
    conn: u64,
    next_request: u64,
}

impl T {
    fn new(shards: u32) -> T {
        T {
            c: Cluster::new(shards, START_MS),
            conn: 1,
            next_request: 0,
        }
    }

    fn send(&mut self, shard: u32, op: Op) -> u64 {
        self.send_on(shard, self.conn, op)
    }

    fn send_on(&mut self, shard: u32, conn: u64, op: Op) -> u64 {
        self.next_request += 1;
        let request = self.next_request;
        self.c.client(shard, conn, request, op);
        request
    }

    fn reply_on(&mut self, conn: u64, request: u64) -> Option<ReplyResult> {
        self.c.take_reply(conn, request)
    }

    /// Everything delivered, written and compiled; executions left to the test.
    fn settle(&mut self) {
        loop {
            self.c.settle();
            let compiles = std::mem::take(&mut self.c.compiles);
            if compiles.is_empty() {
                return;
            }
            for (s, job) in compiles {
                self.c.step(
                    s,
                    Input::Compiled {
                        job,
                        result: Ok(None),
                    },
                );
            }
        }
    }

    fn call(&mut self, shard: u32, op: Op) -> ReplyResult {
        let request = self.send(shard, op.clone());
        self.settle();
        let conn = self.conn;
        self.reply_on(conn, request)
            .unwrap_or_else(|| panic!("no reply to {op:?}"))
    }

    fn ok(&mut self, shard: u32, op: Op) -> Reply {
        match self.call(shard, op.clone()) {
            Ok(r) => r,
            Err(e) => panic!("{op:?} failed: {e}"),
        }
    }

    fn executions(&mut self) -> Vec<(u32, Execution)> {
        std::mem::take(&mut self.c.executions)
    }

    fn answer(&mut self, shard: u32, exec: u64, output: Result<Value, &str>) {
        let output = match output {
            Ok(v) => Ok(serde_json::to_vec(&v).unwrap()),
            Err(e) => Err(ExecFailure {
                error: e.to_string(),
                timed_out: false,
            }),
        };
        self.c.step(
            shard,
            Input::Executed {
                exec,
                result: ExecResult {
                    output,
                    outcome: None,
                    kv_writes: Vec::new(),
                    logs: Vec::new(),
                    state_patch: None,
                },
            },
        );
    }

    /// Answers every execution with `f(action, input)` until none is left.
    fn execute_all(&mut self, mut f: impl FnMut(&str, &Value) -> Result<Value, &'static str>) {
        loop {
            self.settle();
            let xs = self.executions();
            if xs.is_empty() {
                return;
            }
            for (s, x) in xs {
                let input: Value = serde_json::from_slice(&x.input).unwrap_or(Value::Null);
                let out = f(&x.action, &input);
                self.answer(s, x.exec, out);
            }
        }
    }

    /// Moves the clock to `ms` and fires what came due.
    fn set_clock(&mut self, ms: u64) {
        self.c.clock.set(ms);
        self.c.fire_wakes();
        self.settle();
    }

    fn wasm_action(&mut self, name: &str) {
        self.ok(
            0,
            Op::ActionRegister(ActionSpec {
                namespace: NS.into(),
                name: name.into(),
                kind: ActionKind::Wasm,
                wasm: Some(b"(module)".to_vec()),
                timeout_ms: None,
                max_retries: Some(3),
                retry_delay_ms: Some(1000),
                description: None,
                memory_limit_mb: None,
                wasm_entrypoint: None,
            }),
        );
    }

    fn user_action(&mut self, name: &str, lease_ms: u64, max_retries: u32, retry_ms: u64) {
        self.ok(
            0,
            Op::ActionRegister(ActionSpec {
                namespace: NS.into(),
                name: name.into(),
                kind: ActionKind::User,
                wasm: None,
                timeout_ms: Some(lease_ms),
                max_retries: Some(max_retries),
                retry_delay_ms: Some(retry_ms),
                description: None,
                memory_limit_mb: None,
                wasm_entrypoint: None,
            }),
        );
    }

    fn workflow(&mut self, yaml: &str) {
        self.ok(
            0,
            Op::WorkflowCreate {
                namespace: NS.into(),
                yaml: yaml.into(),
            },
        );
    }

    fn start(&mut self, shard: u32, name: &str, input: Value) -> String {
        match self.ok(shard, start_op(name, input)) {
            Reply::WorkflowStarted { run_id, .. } => run_id,
            other => panic!("{other:?}"),
        }
    }

    fn wf(&mut self, run_id: &str) -> WorkflowRunInfo {
        let shard = self.c.owner(NS, run_id);
        match self.ok(
            shard,
            Op::WorkflowStatus {
                namespace: NS.into(),
                run_id: run_id.into(),
            },
        ) {
            Reply::WorkflowRun(info) => info,
            other => panic!("{other:?}"),
        }
    }

    fn history(&mut self, run_id: &str) -> Vec<flo_protocol::HistoryEvent> {
        let shard = self.c.owner(NS, run_id);
        match self.ok(
            shard,
            Op::WorkflowHistory {
                namespace: NS.into(),
                run_id: run_id.into(),
                limit: None,
                after: None,
            },
        ) {
            Reply::WorkflowHistory(h) => h,
            other => panic!("{other:?}"),
        }
    }

    fn run(&mut self, run_id: &str) -> RunInfo {
        let shard = self.c.owner(NS, run_id);
        match self.ok(
            shard,
            Op::RunStatus {
                namespace: NS.into(),
                run_id: run_id.into(),
            },
        ) {
            Reply::Run(info) => info,
            other => panic!("{other:?}"),
        }
    }

    fn invoke(&mut self, shard: u32, spec: InvokeSpec) -> String {
        match self.ok(shard, Op::ActionInvoke(spec)) {
            Reply::Invoked { run_id, .. } => run_id,
            other => panic!("{other:?}"),
        }
    }

    fn worker(&mut self, id: &str, actions: &[&str], labels: Option<&str>) {
        let shard = self.c.owner(NS, id);
        self.ok(
            shard,
            Op::WorkerRegister(WorkerSpec {
                namespace: NS.into(),
                worker_id: id.into(),
                worker_type: WorkerType::Action,
                max_concurrency: None,
                processes: actions.iter().map(|a| a.to_string()).collect(),
                metadata: None,
                machine_id: None,
                labels: labels.map(str::to_string),
            }),
        );
    }
}

fn start_op(name: &str, input: Value) -> Op {
    Op::WorkflowStart(WorkflowStartSpec {
        namespace: NS.into(),
        name: name.into(),
        version: None,
        input: input.to_string().into_bytes(),
        idempotency_key: None,
        wait_ms: None,
        run_id: None,
        group: None,
        webhook: None,
    })
}

fn invoke_spec(action: &str, input: Value) -> InvokeSpec {
    InvokeSpec {
        namespace: NS.into(),
        action: action.into(),
        input: input.to_string().into_bytes(),
        priority: None,
        delay_ms: None,
        idempotency_key: None,
        labels: None,
        wait_ms: None,
    }
}

fn await_op(worker: &str, action: &str, block_ms: u64) -> Op {
    Op::TaskAwait {
        namespace: NS.into(),
        worker_id: worker.into(),
        actions: vec![action.into()],
        max_tasks: 4,
        block_ms,
        home_only: false,
    }
}

/// Two shards, the user action `review`, and a worker of it homed on shard 0 (its id).
fn review_worker_on_shard_0() -> (T, String) {
    let mut t = T::new(2);
    t.user_action("review", 60_000, 3, 1000);
    let w = worker_homed_on(&t, 0);
    t.worker(&w, &["review"], None);
    (t, w)
}

/// Invokes `review` with `{"n": n}` on `shard` (a connection there): the run's id.
fn invoke_review_on(t: &mut T, shard: u32, n: u32) -> String {
    let request = t.send_on(
        shard,
        2,
        Op::ActionInvoke(invoke_spec("review", json!({ "n": n }))),
    );
    t.settle();
    match t.reply_on(2, request) {
        Some(Ok(Reply::Invoked { run_id, .. })) => run_id,
        other => panic!("{other:?}"),
    }
}

fn tasks(r: Option<ReplyResult>) -> Vec<TaskAssignment> {
    match r {
        Some(Ok(Reply::Tasks(t))) => t,
        other => panic!("expected tasks, got {other:?}"),
    }
}

/// The ids of the tasks a reply holds, sorted.
fn sorted_task_ids(r: Option<ReplyResult>) -> Vec<String> {
    let mut ids: Vec<String> = tasks(r).into_iter().map(|task| task.task_id).collect();
    ids.sort();
    ids
}

fn step_output(run: &WorkflowRunInfo, step: &str) -> Value {
    let s = run
        .steps
        .iter()
        .find(|s| s.name == step)
        .unwrap_or_else(|| panic!("no step {step} in {run:?}"));
    serde_json::from_slice(s.output.as_deref().unwrap_or(b"null")).unwrap()
}

fn executions_of(run: &WorkflowRunInfo, step: &str) -> u32 {
    run.steps
        .iter()
        .find(|s| s.name == step)
        .map_or(0, |s| s.executions)
}

/// Three steps passing data along, the second retried (shared with the integration tests).
const PROCESS_ORDER: &str =
    include_str!("../../../testdata/workflows/process-order-data-flow.yaml");

/// Two waits for `approval`, the first ending in `Expired` after 5 s (shared with the
/// integration tests and the simulation).
const SIGNALS: &str = include_str!("../../../testdata/workflows/approval-two-waits.yaml");

fn order_actions(t: &mut T) {
    for a in ["validate-order", "charge-payment", "create-shipment"] {
        t.wasm_action(a);
    }
    t.workflow(PROCESS_ORDER);
}

// ---- the workflow engine ----

#[test]
fn a_three_step_wasm_workflow_completes_with_data_flow_between_steps() {
    let mut t = T::new(2);
    order_actions(&mut t);
    let run_id = t.start(1, "process-order", json!({"amount": 99.5}));
    t.execute_all(|action, input| {
        Ok(match action {
            "validate-order" => json!({"valid": true}),
            "charge-payment" => input.clone(),
            _ => json!({"shipment": "S-1"}),
        })
    });
    let run = t.wf(&run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(run.terminal.as_deref(), Some("flo.Completed"));
    assert_eq!(step_output(&run, "_start"), json!({"valid": true}));
    assert_eq!(
        step_output(&run, "charge"),
        json!({"amount": 99.5, "valid": true, "run": run_id}),
        "inputMapping resolved the input, a previous step's output and the run id"
    );
    assert_eq!(step_output(&run, "ship"), json!({"shipment": "S-1"}));
    let history = t.history(&run_id);
    assert_eq!(history.first().unwrap().event_type, "workflow_started");
    assert_eq!(history.last().unwrap().event_type, "workflow_completed");
}

#[test]
fn a_failing_step_is_retried_with_exponential_backoff_at_the_right_clock_times() {
    let mut t = T::new(1);
    order_actions(&mut t);
    let run_id = t.start(0, "process-order", json!({"amount": 5}));
    let mut charge_failures_at = Vec::new();
    let fail_charge = |t: &mut T| {
        t.execute_all(|action, _| match action {
            "validate-order" => Ok(json!({"valid": true})),
            _ => Err("card declined"),
        });
    };
    fail_charge(&mut t);
    charge_failures_at.push(t.c.now());
    let run = t.wf(&run_id);
    assert_eq!(run.status, WorkflowRunStatus::Waiting);
    assert_eq!(executions_of(&run, "charge"), 1);

    // Retry 1 is due 1000 ms after the first failure, not a millisecond earlier.
    t.set_clock(START_MS + 999);
    assert!(t.c.executions.is_empty(), "retried early");
    t.set_clock(START_MS + 1000);
    let xs = t.executions();
    assert_eq!(xs.len(), 1, "retry 1 did not start at its time");
    assert_eq!(xs[0].1.action, "charge-payment");
    t.answer(xs[0].0, xs[0].1.exec, Err("declined again"));
    t.settle();
    assert_eq!(executions_of(&t.wf(&run_id), "charge"), 2);

    // Retry 2 is due 2000 ms after the second failure (exponential).
    t.set_clock(START_MS + 1000 + 1999);
    assert!(t.c.executions.is_empty(), "retried early");
    t.set_clock(START_MS + 1000 + 2000);
    fail_charge(&mut t);
    let run = t.wf(&run_id);
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    assert_eq!(executions_of(&run, "charge"), 3);
    let retries: Vec<u64> = t
        .history(&run_id)
        .iter()
        .filter(|e| e.event_type == "step_retry")
        .map(|e| e.detail.rsplit(' ').next().unwrap().parse::<u64>().unwrap() - e.at_ms)
        .collect();
    assert_eq!(retries, vec![1000, 2000]);
}

#[test]
fn a_signal_wait_consumes_a_queued_signal() {
    let mut t = T::new(2);
    t.workflow(SIGNALS);
    let run_id = t.start(0, "approval", json!({}));
    let owner = t.c.owner(NS, &run_id);
    let signal = |n: u32| Op::WorkflowSignal {
        namespace: NS.into(),
        run_id: run_id.clone(),
        signal_type: "approval".into(),
        payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
    };
    // Two signals queued while the run waits on its first step, one of another type.
    t.ok(1 - owner, signal(1));
    t.ok(
        owner,
        Op::WorkflowSignal {
            namespace: NS.into(),
            run_id: run_id.clone(),
            signal_type: "other".into(),
            payload: b"{}".to_vec(),
        },
    );
    let run = t.wf(&run_id);
    assert_eq!(run.current_step.as_deref(), Some("second"), "{run:?}");
    assert_eq!(run.status, WorkflowRunStatus::Waiting);
    t.ok(owner, signal(2));
    let run = t.wf(&run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(step_output(&run, "_start"), json!({"n": 1}));
    assert_eq!(step_output(&run, "second"), json!({"n": 2}));
    assert!(
        t.history(&run_id)
            .iter()
            .any(|e| e.event_type == "signal_matched")
    );
}

#[test]
fn a_signal_timeout_goes_to_on_timeout() {
    let mut t = T::new(1);
    t.workflow(SIGNALS);
    let run_id = t.start(0, "approval", json!({}));
    t.set_clock(START_MS + 4999);
    assert_eq!(t.wf(&run_id).status, WorkflowRunStatus::Waiting);
    t.set_clock(START_MS + 5000);
    let run = t.wf(&run_id);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("Expired")),
        "{run:?}"
    );
    assert!(
        t.history(&run_id)
            .iter()
            .any(|e| e.event_type == "signal_timeout")
    );
}

const INNER_OUTER: [&str; 2] = [
    "kind: Workflow\nname: inner\nversion: \"1\"\nstart:\n  run: \"@actions/slow\"\n  transitions:\n    success: flo.Completed\n",
    "kind: Workflow\nname: outer\nversion: \"1\"\nstart:\n  run: \"@workflow/inner\"\n  transitions:\n    success: flo.Completed\n",
];

/// The state a shard recovers from `image` (a segment file's bytes).
fn recover_image(shard: u32, t: &T, image: &[u8]) -> flo_engine::Engine {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(flo_ual::segment_file_name(1)), image).unwrap();
    let mut engine = new_engine(shard, t.c.part, &t.c.clock);
    let log = flo_ual::recover(dir.path(), |lsn, _, payload| engine.replay(lsn, payload)).unwrap();
    engine.recovered(log.last_lsn, 1);
    engine
}

#[test]
fn cancel_cascades_to_the_child_and_its_group_applies_whole_on_replay() {
    let mut t = T::new(1);
    t.user_action("slow", 60_000, 3, 1000);
    for yaml in INNER_OUTER {
        t.workflow(yaml);
    }
    let outer = t.start(0, "outer", json!({}));
    let run = t.wf(&outer);
    assert_eq!(run.status, WorkflowRunStatus::Waiting);
    let inner = run
        .waiting_for
        .as_deref()
        .and_then(|w| w.strip_prefix("workflow run "))
        .unwrap()
        .to_string();
    let action = t
        .wf(&inner)
        .waiting_for
        .as_deref()
        .and_then(|w| w.strip_prefix("action run "))
        .unwrap()
        .to_string();

    // Hold the cancel's batch at the writer to tear it.
    t.c.auto_write = false;
    let request = t.send(
        0,
        Op::WorkflowCancel {
            namespace: NS.into(),
            run_id: outer.clone(),
            reason: Some("customer asked".into()),
        },
    );
    t.c.settle();
    assert!(
        t.reply_on(t.conn, request).is_none(),
        "the cancel was answered before it was durable"
    );
    let disk = t.c.nodes[0].disk.clone();
    let batch = t.c.nodes[0].writing.as_ref().unwrap().bytes.clone();
    // Live or archived (the cancelled runs are archived in the same batch).
    let statuses = |e: &flo_engine::Engine| {
        let s = e.state();
        let wf = |id: &str| match s.workflows.run(NS, id) {
            Some(run) => run.status(),
            None => archive::workflow_status(s.archived(RunKind::Workflow, NS, id).unwrap().status),
        };
        let action = match s.runs.get(NS, &action) {
            Some(run) => run.status,
            None => {
                archive::action_status(s.archived(RunKind::Action, NS, &action).unwrap().status)
            }
        };
        (wf(&outer), wf(&inner), action)
    };
    let before = (
        WorkflowRunStatus::Waiting,
        WorkflowRunStatus::Waiting,
        RunStatus::Pending,
    );
    let after = (
        WorkflowRunStatus::Cancelled,
        WorkflowRunStatus::Cancelled,
        RunStatus::Cancelled,
    );
    let mut seen = Vec::new();
    for keep in (0..=batch.len()).step_by(7).chain([batch.len()]) {
        let mut image = disk.clone();
        image.extend_from_slice(&batch[..keep]);
        let got = statuses(&recover_image(0, &t, &image));
        assert!(
            got == before || got == after,
            "torn after {keep} bytes, replay applied part of the cancel: {got:?}"
        );
        seen.push(got == after);
    }
    assert_eq!(seen.first(), Some(&false));
    assert_eq!(seen.last(), Some(&true));

    // Live: the whole tree is cancelled once the batch is written.
    t.c.auto_write = true;
    t.settle();
    match t.reply_on(t.conn, request) {
        Some(Ok(Reply::WorkflowRun(run))) => assert_eq!(run.status, WorkflowRunStatus::Cancelled),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.wf(&inner).status, WorkflowRunStatus::Cancelled);
    assert_eq!(t.run(&action).status, RunStatus::Cancelled);
    assert_eq!(
        t.history(&outer).last().unwrap().event_type,
        "workflow_cancelled"
    );
}

fn cancel_op(run_id: &str) -> Op {
    Op::RunCancel {
        namespace: NS.into(),
        run_id: run_id.into(),
    }
}

#[test]
fn cancelling_an_executing_run_stops_its_guest_and_its_slot_serves_the_next_run() {
    let mut t = T::new(1);
    t.wasm_action("spin");
    let ids: Vec<String> = (0..=WASM_SLOTS)
        .map(|i| t.invoke(0, invoke_spec("spin", json!(i))))
        .collect();
    t.settle();
    let xs = t.executions();
    assert_eq!(xs.len(), WASM_SLOTS, "one run waits for a slot");
    let exec_of = |i: usize| {
        xs.iter()
            .find(|(_, x)| x.input == json!(i).to_string().into_bytes())
            .map(|(_, x)| x.exec)
            .unwrap_or_else(|| panic!("run {i} does not execute"))
    };

    // A pending run's cancel stops nothing; an executing run's stops its execution.
    let waiting = &ids[WASM_SLOTS];
    assert_eq!(t.run(waiting).status, RunStatus::Pending);
    match t.ok(0, cancel_op(waiting)) {
        Reply::Run(info) => assert_eq!(info.status, RunStatus::Cancelled),
        other => panic!("{other:?}"),
    }
    assert!(t.c.stops.is_empty(), "{:?}", t.c.stops);
    let next = t.invoke(0, invoke_spec("spin", json!("next")));
    match t.ok(0, cancel_op(&ids[0])) {
        Reply::Run(info) => assert_eq!(info.status, RunStatus::Cancelled),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.c.stops, vec![(0, exec_of(0))]);
    assert!(
        t.executions().is_empty(),
        "the slot is held until the guest ends"
    );
    assert_eq!(t.run(&next).status, RunStatus::Pending);

    // The stopped guest answers; its result is not recorded, and the next run takes the slot.
    t.answer(0, exec_of(0), Err("execution cancelled"));
    t.settle();
    let started = t.executions();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].1.input, json!("next").to_string().into_bytes());
    let run = t.run(&ids[0]);
    assert_eq!(
        (run.status, run.error, run.attempt),
        (RunStatus::Cancelled, None, 1)
    );

    // Runs that end by themselves stop nothing.
    for i in 1..WASM_SLOTS {
        t.answer(0, exec_of(i), Ok(json!({"done": i})));
    }
    t.answer(0, started[0].1.exec, Ok(json!({})));
    t.settle();
    assert_eq!(t.c.stops, vec![(0, exec_of(0))]);
    assert_eq!(t.run(&next).status, RunStatus::Completed);
}

const ONE_STEP: &str = "kind: Workflow\nname: one-step\nversion: \"1\"\nstart:\n  run: \"@actions/spin\"\n  transitions:\n    success: flo.Completed\n";

#[test]
fn cancelling_a_workflow_stops_its_executing_step() {
    let mut t = T::new(2);
    t.wasm_action("spin");
    t.workflow(ONE_STEP);
    let run_id = t.start(1, "one-step", json!({}));
    t.settle();
    let xs = t.executions();
    let [(shard, x)] = &xs[..] else {
        panic!("one step executes: {xs:?}");
    };
    assert_eq!(*shard, t.c.owner(NS, &run_id));
    let cancel = Op::WorkflowCancel {
        namespace: NS.into(),
        run_id: run_id.clone(),
        reason: None,
    };
    match t.ok(0, cancel) {
        Reply::WorkflowRun(run) => assert_eq!(run.status, WorkflowRunStatus::Cancelled),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.c.stops, vec![(*shard, x.exec)]);
    t.answer(*shard, x.exec, Err("execution cancelled"));
    t.settle();
    assert_eq!(t.wf(&run_id).status, WorkflowRunStatus::Cancelled);
}

const LOOP: [&str; 2] = [
    "kind: Workflow\nname: loop-child\nversion: \"1\"\nstart:\n  run: \"@actions/not-registered\"\n  transitions:\n    success: flo.Completed\n",
    "kind: Workflow\nname: loop-parent\nversion: \"1\"\nstart:\n  run: \"@workflow/loop-child\"\n  transitions:\n    success: flo.Completed\n    failure: again\nsteps:\n  again:\n    run: \"@workflow/loop-child\"\n    transitions:\n      success: flo.Completed\n      failure: again\n",
];

#[test]
fn a_parent_looping_through_a_failing_child_fails_after_256_steps_and_the_engine_keeps_answering() {
    for shards in [1, 2] {
        let mut t = T::new(shards);
        for yaml in LOOP {
            t.workflow(yaml);
        }
        let run_id = t.start(shards - 1, "loop-parent", json!({}));
        let run = t.wf(&run_id);
        assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
        let error = run.error.clone().unwrap_or_default();
        assert!(error.contains("more than 256 steps"), "{run:?}");
        // Still answering, on every shard, and after a restart too.
        for s in 0..shards {
            t.ok(
                s,
                Op::KvPut {
                    namespace: NS.into(),
                    key: format!("still-up-{s}"),
                    value: b"yes".to_vec(),
                    ttl_ms: None,
                    if_version: None,
                    if_exists: false,
                },
            );
        }
        t.c.restart_all();
        t.settle();
        assert_eq!(t.wf(&run_id).status, WorkflowRunStatus::Failed);
        t.ok(
            0,
            Op::KvGet {
                namespace: NS.into(),
                key: "still-up-0".into(),
                wait_ms: None,
                after_version: None,
                newer_than_current: false,
            },
        );
    }
}

// ---- worker awaits and dispatch ----

/// A worker id whose home is `shard`.
fn worker_homed_on(t: &T, shard: u32) -> String {
    (0..)
        .map(|i| format!("w{i}"))
        .find(|id| t.c.owner(NS, id) == shard)
        .unwrap()
}

#[test]
fn an_await_parked_on_an_empty_queue_receives_a_task_invoked_later_once_its_lease_is_durable() {
    let (mut t, w) = review_worker_on_shard_0();
    let request = t.send(0, await_op(&w, "review", 30_000));
    t.settle();
    assert!(
        t.reply_on(t.conn, request).is_none(),
        "answered with no task"
    );

    // Invoked on shard 1: the run is owned there, the want parked there gets it.
    t.c.auto_write = false;
    let invoke = t.send_on(
        1,
        2,
        Op::ActionInvoke(invoke_spec("review", json!({"n": 1}))),
    );
    t.c.settle();
    t.c.complete_write(1); // the RunCreated
    t.c.settle();
    let run_id = match t.reply_on(2, invoke) {
        Some(Ok(Reply::Invoked { run_id, .. })) => run_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(t.c.owner(NS, &run_id), 1);
    let leased = |t: &T| t.c.engine(1).state().runs.get(NS, &run_id).unwrap().status;
    assert_eq!(
        leased(&t),
        RunStatus::Running,
        "Idle leased the task to the want"
    );
    assert!(t.c.nodes[1].writing.is_some(), "the lease is being written");
    assert!(
        t.c.links.values().all(|q| q.is_empty()),
        "the task left shard 1 before its lease was durable"
    );
    assert!(t.reply_on(t.conn, request).is_none());

    t.c.complete_write(1);
    t.c.auto_write = true;
    t.settle();
    let got = tasks(t.reply_on(t.conn, request));
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].task_id.as_str(), got[0].attempt),
        (run_id.as_str(), 1)
    );
    assert!(t.c.nodes[1].fact(&format!("leased {NS}/{run_id} a1")) == 1);
}

/// An await whose home has tasks of its own is answered once every shard answered its first
/// ask: the other shards lease what they hold then and park nothing, so a task invoked there
/// a moment later waits for the worker's next await instead of being leased for an answer
/// that will not take it (and released, and leased again).
#[test]
fn an_await_served_by_its_home_parks_no_want_on_the_other_shards() {
    let (mut t, w) = review_worker_on_shard_0();
    let invoke = invoke_review_on;
    let home_task = invoke(&mut t, 0, 1);
    assert_eq!(t.c.owner(NS, &home_task), 0);

    // The await reaches shard 1 and is answered there; a task is invoked on shard 1 before
    // the home hears that answer (and answers its worker).
    let request = t.send(0, await_op(&w, "review", 30_000));
    assert!(t.c.deliver(0, 1), "the want went to shard 1");
    let invoked = t.send_on(
        1,
        2,
        Op::ActionInvoke(invoke_spec("review", json!({ "n": 2 }))),
    );
    t.c.step(1, Input::Idle);
    t.settle();
    let got = tasks(t.reply_on(t.conn, request));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, home_task);
    let later = match t.reply_on(2, invoked) {
        Some(Ok(Reply::Invoked { run_id, .. })) => run_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(t.c.owner(NS, &later), 1);
    let status = t.c.engine(1).state().runs.get(NS, &later).unwrap().status;
    assert_eq!(status, RunStatus::Pending);
    assert_eq!(
        t.c.nodes[1].fact(&format!("leased {NS}/{later} a1")),
        0,
        "leased for an await that was answered without it"
    );

    // The worker's next await takes it, leased once.
    let request = t.send(0, await_op(&w, "review", 30_000));
    t.settle();
    let got = tasks(t.reply_on(t.conn, request));
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].task_id.as_str(), got[0].attempt),
        (later.as_str(), 1)
    );
    assert_eq!(t.c.nodes[1].fact(&format!("leased {NS}/{later} a1")), 1);
}

/// `home_only`: the home alone is asked, for the await's whole room. Another shard's tasks
/// stay there (for a worker homed on it), and a want parks on the home only.
#[test]
fn a_home_only_await_takes_its_homes_tasks_and_asks_no_other_shard() {
    let (mut t, w) = review_worker_on_shard_0();
    let invoke = invoke_review_on;
    let elsewhere = invoke(&mut t, 1, 1);
    assert_eq!(t.c.owner(NS, &elsewhere), 1);
    let home: Vec<String> = (2..5).map(|n| invoke(&mut t, 0, n)).collect();
    let home_only = |block_ms| Op::TaskAwait {
        namespace: NS.into(),
        worker_id: w.clone(),
        actions: vec!["review".into()],
        max_tasks: 4,
        block_ms,
        home_only: true,
    };

    // All three home tasks in one answer (an await split over two shards would have
    // asked the home for two of its four), and nothing sent to shard 1.
    let request = t.send(0, home_only(30_000));
    assert!(!t.c.deliver(0, 1), "a home-only await asked shard 1");
    t.settle();
    let mut want = home.clone();
    want.sort();
    assert_eq!(sorted_task_ids(t.reply_on(t.conn, request)), want);

    // With none left at home the want parks there: shard 1's new task does not answer
    // it, the home's next one does.
    let request = t.send(0, home_only(30_000));
    assert!(!t.c.deliver(0, 1), "a home-only await asked shard 1");
    t.settle();
    assert_eq!(t.reply_on(t.conn, request), None, "answered with no task");
    let second_elsewhere = invoke(&mut t, 1, 5);
    assert_eq!(t.reply_on(t.conn, request), None, "answered from shard 1");
    let next_home = invoke(&mut t, 0, 6);
    let got = tasks(t.reply_on(t.conn, request));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, next_home);

    // Shard 1's tasks were never leased.
    for run in [&elsewhere, &second_elsewhere] {
        let status = t.c.engine(1).state().runs.get(NS, run).unwrap().status;
        assert_eq!(status, RunStatus::Pending);
        assert_eq!(t.c.nodes[1].fact(&format!("leased {NS}/{run} a1")), 0);
    }
}

/// An await split over two shards takes every share it asked for: the other shard's
/// tasks join the home's in one answer (they were released, then leased again, when the
/// home's share was as large as what was left of the room).
#[test]
fn an_await_takes_the_other_shards_share_beside_its_homes() {
    let (mut t, w) = review_worker_on_shard_0();
    let mut want: Vec<String> = [(0, 1), (0, 2), (1, 3), (1, 4)]
        .into_iter()
        .map(|(shard, n)| invoke_review_on(&mut t, shard, n))
        .collect();
    // Four tasks for a room of four: two asked of each shard.
    let request = t.send(0, await_op(&w, "review", 30_000));
    t.settle();
    want.sort();
    assert_eq!(sorted_task_ids(t.reply_on(t.conn, request)), want);
    for run in &want {
        let owner = t.c.owner(NS, run);
        let status = t.c.engine(owner).state().runs.get(NS, run).unwrap().status;
        assert_eq!(status, RunStatus::Running, "{run} was released");
        assert_eq!(
            t.c.nodes[owner as usize].fact(&format!("leased {NS}/{run} a1")),
            1
        );
    }
}

/// A shard that cannot be asked for tasks (it is stopping) is not taken for one that has
/// none: the worker hears why at once, instead of "no tasks" after its whole block.
#[test]
fn an_await_a_shard_cannot_answer_fails_with_the_reason() {
    let (mut t, w) = review_worker_on_shard_0();
    t.c.step(1, Input::Stop);
    let request = t.send(0, await_op(&w, "review", 30_000));
    t.settle();
    match t.reply_on(t.conn, request) {
        Some(Err(e)) => {
            assert_eq!(e.code, flo_protocol::ErrorCode::Unavailable, "{e}");
            assert!(e.message.contains("shard 1 could not be asked"), "{e}");
        }
        other => panic!("expected the shard's failure, got {other:?}"),
    }
}

#[test]
fn a_closed_connections_open_await_releases_its_tasks() {
    let (mut t, w) = review_worker_on_shard_0();
    let run_id = t.invoke(0, invoke_spec("review", json!({})));
    assert_eq!(t.c.owner(NS, &run_id), 0);

    // The home leases its task at once, but waits for shard 1's first answer: the
    // connection closes in between.
    let conn = 7;
    let request = t.send_on(0, conn, await_op(&w, "review", 30_000));
    assert_eq!(
        t.c.engine(0).state().runs.get(NS, &run_id).unwrap().status,
        RunStatus::Running
    );
    t.c.step(0, Input::ConnClosed { conn });
    t.settle();
    assert!(
        !matches!(t.reply_on(conn, request), Some(Ok(Reply::Tasks(ts))) if !ts.is_empty()),
        "tasks went to a closed connection"
    );
    let run = t.run(&run_id);
    assert_eq!(
        (run.status, run.attempt),
        (RunStatus::Pending, 1),
        "the task is pending again, same attempt"
    );
    let got = tasks(Some(t.call(0, await_op(&w, "review", 30_000))));
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].task_id.as_str(), got[0].attempt),
        (run_id.as_str(), 1)
    );
}

#[test]
fn a_drained_worker_gets_nothing() {
    let mut t = T::new(2);
    t.user_action("review", 60_000, 3, 1000);
    let w = worker_homed_on(&t, 1);
    t.worker(&w, &["review"], None);
    t.ok(
        1,
        Op::WorkerDrain {
            namespace: NS.into(),
            worker_id: w.clone(),
        },
    );
    let run_id = t.invoke(0, invoke_spec("review", json!({})));
    let got = tasks(Some(t.call(0, await_op(&w, "review", 30_000))));
    assert!(got.is_empty(), "a draining worker got {got:?}");
    assert_eq!(t.run(&run_id).status, RunStatus::Pending);
}

#[test]
fn tasks_requiring_labels_go_only_to_workers_whose_labels_match() {
    let mut t = T::new(2);
    t.user_action("render", 60_000, 3, 1000);
    t.worker(
        "cpu-worker",
        &["render"],
        Some(r#"{"gpu":false,"zone":"a"}"#),
    );
    t.worker(
        "gpu-worker",
        &["render"],
        Some(r#"{"gpu":true,"zone":"a"}"#),
    );
    let mut spec = invoke_spec("render", json!({"frame": 1}));
    spec.labels = Some(r#"{"gpu":true}"#.into());
    let run_id = t.invoke(1, spec);
    let plain = t.invoke(0, invoke_spec("render", json!({"frame": 2})));

    let got = tasks(Some(t.call(0, await_op("cpu-worker", "render", 0))));
    let ids: Vec<&str> = got.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, vec![plain.as_str()], "the cpu worker got a gpu task");
    let got = tasks(Some(t.call(1, await_op("gpu-worker", "render", 0))));
    let ids: Vec<&str> = got.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, vec![run_id.as_str()]);
}

// ---- the scheduler ----

#[test]
fn a_delayed_run_becomes_runnable_when_the_clock_reaches_it() {
    let mut t = T::new(2);
    t.wasm_action("job");
    let mut spec = invoke_spec("job", json!({}));
    spec.delay_ms = Some(5000);
    let run_id = t.invoke(1, spec);
    t.settle();
    assert!(t.c.executions.is_empty(), "executed before its time");
    assert!(
        t.c.nodes[1].wake.is_some_and(|w| w <= START_MS + 5000),
        "no wake-up asked for the delay: {:?}",
        t.c.nodes[1].wake
    );
    t.set_clock(START_MS + 4999);
    assert!(t.c.executions.is_empty(), "executed before its time");
    t.set_clock(START_MS + 5000);
    let xs = t.executions();
    assert_eq!(xs.len(), 1);
    assert_eq!(xs[0].0, 1);
    t.answer(1, xs[0].1.exec, Ok(json!({"done": true})));
    t.settle();
    assert_eq!(t.run(&run_id).status, RunStatus::Completed);
}

#[test]
fn an_expired_lease_is_a_failed_attempt_retried_after_backoff() {
    let mut t = T::new(2);
    t.user_action("review", 10_000, 2, 1000);
    t.worker("w", &["review"], None);
    let home = t.c.owner(NS, "w");
    let run_id = t.invoke(1 - home, invoke_spec("review", json!({})));
    let got = tasks(Some(t.call(home, await_op("w", "review", 0))));
    assert_eq!(got[0].attempt, 1);
    assert_eq!(got[0].lease_expires_at_ms, START_MS + 10_000);

    t.set_clock(START_MS + 9_999);
    assert_eq!(t.run(&run_id).status, RunStatus::Running);
    t.set_clock(START_MS + 10_000);
    let run = t.run(&run_id);
    assert_eq!(
        (run.status, run.attempt, run.available_at_ms),
        (RunStatus::Pending, 2, START_MS + 11_000),
        "{run:?}"
    );
    assert!(run.error.as_deref().unwrap_or("").contains("lease expired"));
    let early = tasks(Some(t.call(home, await_op("w", "review", 0))));
    assert!(early.is_empty(), "offered before its backoff ended");
    t.set_clock(START_MS + 11_000);
    let got = tasks(Some(t.call(home, await_op("w", "review", 0))));
    assert_eq!(
        (got[0].task_id.as_str(), got[0].attempt),
        (run_id.as_str(), 2)
    );
}

#[test]
fn a_run_pending_at_a_crash_is_offered_again_after_replay() {
    let mut t = T::new(2);
    t.wasm_action("job");
    let run_id = t.invoke(1, invoke_spec("job", json!({"k": 1})));
    t.settle();
    assert_eq!(t.executions().len(), 1, "executing before the crash");
    t.c.restart_all();
    t.settle();
    let xs = t.executions();
    assert_eq!(xs.len(), 1, "the pending run was not executed again");
    assert_eq!(xs[0].1.input, json!({"k": 1}).to_string().into_bytes());
    t.answer(xs[0].0, xs[0].1.exec, Ok(json!({"ok": 1})));
    t.settle();
    let run = t.run(&run_id);
    assert_eq!((run.status, run.attempt), (RunStatus::Completed, 1));

    // A user task pending at the crash is offered to a worker after replay.
    t.user_action("review", 60_000, 3, 1000);
    let task = t.invoke(0, invoke_spec("review", json!({})));
    t.c.restart_all();
    t.settle();
    t.worker("w", &["review"], None);
    let home = t.c.owner(NS, "w");
    let got = tasks(Some(t.call(home, await_op("w", "review", 0))));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, task);
}

/// A worker connected to a shard other than its home has its await forwarded there (a call
/// waiting for the home's answer). When that connection closes, the home drops the await
/// without answering, so the forwarding shard's call — and its `orphaned` tag — must not
/// wait forever.
#[test]
fn a_closed_connections_forwarded_await_leaves_no_call_behind() {
    let (mut t, w) = review_worker_on_shard_0();
    let conn = 9;
    t.send_on(1, conn, await_op(&w, "review", 5_000));
    t.settle();
    assert_eq!(
        t.c.engine(1).in_flight().calls,
        1,
        "the await is forwarded to its home"
    );
    t.c.step(1, Input::ConnClosed { conn });
    t.settle();
    t.set_clock(START_MS + 60_000);
    t.settle();
    assert_eq!(t.c.engine(0).in_flight().awaits, 0);
    assert_eq!(
        t.c.engine(1).in_flight().calls,
        0,
        "the forwarded await of a closed connection is never answered: its call leaks"
    );
}

/// The coordinator answers a definition change once every shard applied it. A change cut
/// short by a crash (durable on the coordinator, never delivered to shard 1) and asked
/// again after the restart is a repeat (`created: false`): its answer must still wait
/// until every shard has the definition, or a start on another shard, sent after the
/// answer, fails with "not defined".
#[test]
fn a_definition_repeated_after_a_crash_is_answered_only_once_every_shard_has_it() {
    let mut t = T::new(2);
    let yaml = SIGNALS;
    let create = || Op::WorkflowCreate {
        namespace: NS.into(),
        yaml: yaml.into(),
    };
    t.settle();
    t.c.auto_write = false;
    t.send(0, create());
    t.c.complete_write(0);
    assert_eq!(
        t.c.links.get(&(0, 1)).map_or(0, |q| q.len()),
        1,
        "the change is on its way to shard 1"
    );
    // The server crashes before shard 1 hears of it.
    t.c.crash(&[0, 1], &[]);
    t.c.start(0);
    t.c.start(1);
    let request = t.send(0, create());
    t.c.complete_write(0);
    t.c.complete_write(1);
    let Some(reply) = t.reply_on(t.conn, request) else {
        // Not answered yet: it waits for shard 1, as it should. Let it finish.
        t.c.auto_write = true;
        t.settle();
        let answered = t.reply_on(t.conn, request);
        assert!(
            matches!(answered, Some(Ok(Reply::WorkflowCreated { .. }))),
            "{answered:?}"
        );
        return;
    };
    assert!(
        matches!(reply, Ok(Reply::WorkflowCreated { created: false, .. })),
        "{reply:?}"
    );
    // The client was told the workflow exists: it starts a run on shard 1.
    let start = t.send(1, start_op("approval", json!({})));
    let answer = t.reply_on(t.conn, start);
    t.c.auto_write = true;
    t.settle();
    let answer = answer.or_else(|| t.reply_on(t.conn, start));
    assert!(
        matches!(answer, Some(Ok(Reply::WorkflowStarted { .. }))),
        "a start sent after the definition was acknowledged failed: {answer:?}"
    );
}

// ---- concurrent awaits of one worker ----

/// Two awaits of one worker open at once each receive a task of their own (the second does
/// not answer the first), and neither gets a task the other got.
#[test]
fn two_open_awaits_of_one_worker_each_receive_their_own_task() {
    let (mut t, w) = review_worker_on_shard_0();
    let one = |b| Op::TaskAwait {
        namespace: NS.into(),
        worker_id: w.clone(),
        actions: vec!["review".into()],
        max_tasks: 1,
        block_ms: b,
        home_only: false,
    };
    // One on the home, one forwarded from the other shard.
    let first = t.send_on(0, 11, one(30_000));
    let second = t.send_on(1, 12, one(30_000));
    t.settle();
    assert!(
        t.reply_on(11, first).is_none(),
        "the second await answered the first"
    );
    assert!(t.reply_on(12, second).is_none());
    assert_eq!(t.c.engine(0).in_flight().awaits, 2);

    let a = t.invoke(0, invoke_spec("review", json!({"n": 1})));
    let b = t.invoke(1, invoke_spec("review", json!({"n": 2})));
    t.settle();
    let got_first = tasks(t.reply_on(11, first));
    let got_second = tasks(t.reply_on(12, second));
    assert_eq!((got_first.len(), got_second.len()), (1, 1));
    let mut ids = vec![got_first[0].task_id.clone(), got_second[0].task_id.clone()];
    ids.sort();
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(ids, want, "each task went to exactly one await");
}

/// A worker keeps at most `AWAITS_PER_WORKER_MAX` awaits open: one more answers the oldest
/// with no task at once; the others stay open.
#[test]
fn a_worker_over_its_bound_of_open_awaits_gets_its_oldest_answered_empty() {
    let max = flo_engine::testing::AWAITS_PER_WORKER_MAX;
    let (mut t, w) = review_worker_on_shard_0();
    let requests: Vec<u64> = (0..max)
        .map(|_| t.send_on(0, 5, await_op(&w, "review", 30_000)))
        .collect();
    t.settle();
    assert!(requests.iter().all(|r| t.reply_on(5, *r).is_none()));
    assert_eq!(t.c.engine(0).in_flight().awaits, max);
    let newest = t.send_on(0, 5, await_op(&w, "review", 30_000));
    t.settle();
    assert!(
        tasks(t.reply_on(5, requests[0])).is_empty(),
        "the oldest made room"
    );
    assert!(t.reply_on(5, requests[1]).is_none());
    assert!(t.reply_on(5, newest).is_none());
    assert_eq!(t.c.engine(0).in_flight().awaits, max);
    // Closing the connection drops them all.
    t.c.step(0, Input::ConnClosed { conn: 5 });
    t.settle();
    assert_eq!(t.c.engine(0).in_flight().awaits, 0);
}

/// A worker may await an action nobody registered yet (it registered for it): nothing
/// comes, the await answers empty at its deadline, not with an error.
#[test]
fn an_await_for_an_action_not_registered_yet_answers_no_task_at_its_deadline() {
    let mut t = T::new(2);
    let w = worker_homed_on(&t, 1);
    t.worker(&w, &["later"], None);
    let request = t.send(1, await_op(&w, "later", 5_000));
    t.settle();
    assert!(
        t.reply_on(t.conn, request).is_none(),
        "answered before its deadline"
    );
    t.set_clock(START_MS + 5_000);
    assert!(tasks(t.reply_on(t.conn, request)).is_empty());
    // An action the worker is not registered for is still refused.
    match t.call(1, await_op(&w, "other", 0)) {
        Err(e) => assert_eq!(e.code, flo_protocol::ErrorCode::NotFound, "{e}"),
        other => panic!("{other:?}"),
    }
}

// ---- blocking KV reads ----

fn get_wait(key: &str, wait_ms: u64, after_version: Option<u64>) -> Op {
    Op::KvGet {
        namespace: NS.into(),
        key: key.into(),
        wait_ms: Some(wait_ms),
        after_version,
        newer_than_current: false,
    }
}

fn put_op(key: &str, value: &str) -> Op {
    Op::KvPut {
        namespace: NS.into(),
        key: key.into(),
        value: value.as_bytes().to_vec(),
        ttl_ms: None,
        if_version: None,
        if_exists: false,
    }
}

/// A key owned by `shard`.
fn key_on(t: &T, shard: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| t.c.owner(NS, k) == shard)
        .unwrap()
}

/// A parked read is answered with the value once the put that wrote it is durable — not
/// before — whether the client is on the owner or on another shard.
#[test]
fn a_parked_read_is_answered_once_the_put_it_waits_for_is_durable() {
    let mut t = T::new(2);
    for client_shard in [0, 1] {
        let key = key_on(&t, 1, &format!("late-{client_shard}-"));
        let read = t.send_on(client_shard, 21, get_wait(&key, 30_000, None));
        t.settle();
        assert!(
            t.reply_on(21, read).is_none(),
            "answered before the key existed"
        );
        assert_eq!(t.c.engine(1).in_flight().kv_waits, 1);

        t.c.auto_write = false;
        t.send_on(1, 22, put_op(&key, "v"));
        t.c.settle();
        assert!(
            t.reply_on(21, read).is_none(),
            "the value left before it was durable"
        );
        t.c.complete_write(1);
        t.c.auto_write = true;
        t.settle();
        match t.reply_on(21, read) {
            Some(Ok(Reply::KvValue(Some(e)))) => {
                assert_eq!((e.value, e.version), (b"v".to_vec(), 1))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.c.engine(1).in_flight().kv_waits, 0);
    }
}

/// `after_version`: only a newer version answers; at the deadline the answer is empty.
#[test]
fn a_read_after_a_version_waits_for_a_newer_one_or_answers_empty_at_its_deadline() {
    let mut t = T::new(1);
    t.ok(0, put_op("k", "v1"));
    let read = t.send(0, get_wait("k", 30_000, Some(1)));
    t.settle();
    assert!(t.reply_on(t.conn, read).is_none());
    t.ok(0, put_op("k", "v2"));
    match t.reply_on(t.conn, read) {
        Some(Ok(Reply::KvValue(Some(e)))) => assert_eq!(e.version, 2),
        other => panic!("{other:?}"),
    }
    let read = t.send(0, get_wait("k", 1_000, Some(2)));
    t.settle();
    assert!(t.reply_on(t.conn, read).is_none());
    t.set_clock(START_MS + 1_000);
    assert!(matches!(
        t.reply_on(t.conn, read),
        Some(Ok(Reply::KvValue(None)))
    ));
    assert_eq!(t.c.engine(0).in_flight().kv_waits, 0);
    // Over the maximum: refused, not parked.
    match t.call(0, get_wait("k", flo_protocol::KV_WAIT_MS_MAX + 1, None)) {
        Err(e) => assert_eq!(e.code, flo_protocol::ErrorCode::BadRequest),
        other => panic!("{other:?}"),
    }
}

/// A closed connection releases its parked reads: on the owner, and — for a read forwarded
/// from another shard — the owner is told, and no call is left waiting.
#[test]
fn a_closed_connections_parked_reads_are_released_everywhere() {
    let mut t = T::new(2);
    let key = key_on(&t, 1, "gone-");
    let local = t.send_on(1, 31, get_wait(&key, 30_000, None));
    let forwarded = t.send_on(0, 32, get_wait(&key, 30_000, None));
    t.settle();
    assert_eq!(t.c.engine(1).in_flight().kv_waits, 2);
    assert_eq!(t.c.engine(0).in_flight().calls, 1, "forwarded to the owner");
    t.c.step(1, Input::ConnClosed { conn: 31 });
    t.c.step(0, Input::ConnClosed { conn: 32 });
    t.settle();
    assert_eq!(t.c.engine(1).in_flight().kv_waits, 0);
    assert_eq!(t.c.engine(0).in_flight().calls, 0);
    // A put afterwards answers nobody.
    t.ok(1, put_op(&key, "v"));
    assert!(t.reply_on(31, local).is_none());
    assert!(t.reply_on(32, forwarded).is_none());
}

/// Parked reads are bounded per shard, and each namespace holds at most a quarter of them
/// (issue 21, item 10): one more is refused as overloaded, with the reason.
#[test]
fn parked_reads_are_bounded_per_shard_and_per_namespace() {
    let max = flo_engine::testing::KV_WAITS_MAX;
    let share = max / 4;
    let mut t = T::new(1);
    let get_in = |ns: &str, key: String| Op::KvGet {
        namespace: ns.into(),
        key,
        wait_ms: Some(30_000),
        after_version: None,
        newer_than_current: false,
    };
    for i in 0..share {
        t.send_on(0, 41, get_in("tenant-0", format!("k{i}")));
    }
    t.settle();
    assert_eq!(t.c.engine(0).in_flight().kv_waits, share);
    match t.call(0, get_in("tenant-0", "one-more".into())) {
        Err(e) => {
            assert_eq!(e.code, flo_protocol::ErrorCode::Overloaded, "{e}");
            assert!(e.message.contains("tenant-0"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // Other namespaces still park, up to the shard's bound.
    for ns in 1..4 {
        for i in 0..share {
            t.send_on(0, 41, get_in(&format!("tenant-{ns}"), format!("k{i}")));
        }
    }
    t.settle();
    assert_eq!(t.c.engine(0).in_flight().kv_waits, max);
    match t.call(0, get_in("tenant-9", "one-more".into())) {
        Err(e) => assert_eq!(e.code, flo_protocol::ErrorCode::Overloaded, "{e}"),
        other => panic!("{other:?}"),
    }
}

// ---- run ids and history pages ----

/// A start with a caller's run id lands on the shard owning that id (from any shard) and
/// keeps the id; a second start with it conflicts.
#[test]
fn a_caller_chosen_run_id_places_the_run_and_cannot_be_reused() {
    let mut t = T::new(2);
    t.workflow(SIGNALS);
    for (i, shard) in [0, 1, 0, 1].into_iter().enumerate() {
        let id = format!("mine-{i}");
        let mut op = start_op("approval", json!({}));
        if let Op::WorkflowStart(spec) = &mut op {
            spec.run_id = Some(id.clone());
        }
        match t.ok(shard, op.clone()) {
            Reply::WorkflowStarted { run_id, created } => {
                assert_eq!((run_id, created), (id.clone(), true))
            }
            other => panic!("{other:?}"),
        }
        let owner = t.c.owner(NS, &id);
        assert!(t.c.engine(owner).state().workflows.run(NS, &id).is_some());
        match t.call(1 - shard, op) {
            Err(e) => assert_eq!(e.code, flo_protocol::ErrorCode::Conflict, "{e}"),
            other => panic!("{other:?}"),
        }
    }
}

/// History pages: `limit` events after `after`, numbered from 1, with the next cursor.
#[test]
fn history_pages_slice_the_history_with_a_cursor() {
    let mut t = T::new(1);
    t.workflow(SIGNALS);
    let run = t.start(0, "approval", json!({}));
    let full = t.history(&run);
    assert!(full.len() >= 2, "{full:?}");
    assert!(full.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
    let page = |t: &mut T, limit, after| match t.ok(
        0,
        Op::WorkflowHistory {
            namespace: NS.into(),
            run_id: run.clone(),
            limit,
            after,
        },
    ) {
        Reply::WorkflowHistoryPage { events, next_after } => (events, next_after),
        other => panic!("{other:?}"),
    };
    let (first, next) = page(&mut t, Some(1), None);
    assert_eq!((first.len(), first[0].seq, next), (1, 1, Some(1)));
    let (rest, next) = page(&mut t, Some(1000), Some(1));
    assert_eq!(next, None);
    assert_eq!([first, rest].concat(), full);
    let (none, next) = page(&mut t, None, Some(u64::MAX));
    assert!(none.is_empty() && next.is_none());
}

fn get_op(key: &str) -> Op {
    Op::KvGet {
        namespace: NS.into(),
        key: key.into(),
        wait_ms: None,
        after_version: None,
        newer_than_current: false,
    }
}

fn unavailable_on(r: ReplyResult, shard: u32) {
    match r {
        Err(e) => {
            assert_eq!(e.code, flo_protocol::ErrorCode::Unavailable, "{e}");
            assert!(
                e.message
                    .starts_with(&format!("disk full on shard {shard}")),
                "{e}"
            );
        }
        Ok(reply) => panic!("a mutation on a full shard succeeded: {reply:?}"),
    }
}

/// A shard whose disk is full refuses client mutations but deletes with `unavailable: disk
/// full on shard N` whichever shard the client is connected to, serves reads, takes
/// deletes, leaves the other shard writable, and takes writes again once space returns.
#[test]
fn a_full_disk_refuses_mutations_and_serves_reads_until_space_returns() {
    let mut t = T::new(2);
    t.user_action("review", 60_000, 3, 1000);
    let key = key_on(&t, 1, "k");
    t.ok(1, put_op(&key, "before"));
    let run_id = t.invoke(1, invoke_spec("review", json!({"n": 1})));
    assert_eq!(t.c.owner(NS, &run_id), 1);
    t.c.step(1, Input::DiskSpace(DiskSpace::Full));

    for client_shard in [0, 1] {
        let r = t.call(client_shard, put_op(&key, "after"));
        unavailable_on(r, 1);
    }
    let cancel = Op::RunCancel {
        namespace: NS.into(),
        run_id: run_id.clone(),
    };
    let invoke = Op::ActionInvoke(invoke_spec("review", json!({"n": 2})));
    for op in [cancel, invoke] {
        let r = t.call(1, op);
        unavailable_on(r, 1);
    }
    let records = t.c.nodes[1].records.len();

    // Reads: the value written before, the run, a listing, status.
    match t.ok(0, get_op(&key)) {
        Reply::KvValue(Some(e)) => assert_eq!(e.value, b"before".to_vec()),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.run(&run_id).status, RunStatus::Pending);
    let list = Op::KvList {
        namespace: NS.into(),
        prefix: String::new(),
        limit: None,
        cursor: None,
    };
    assert!(matches!(t.ok(0, list), Reply::KvList { .. }));
    match t.ok(0, Op::Status) {
        Reply::Status(info) => {
            let full: Vec<bool> = info.shards.iter().map(|s| s.disk_full).collect();
            assert_eq!(full, vec![false, true]);
        }
        other => panic!("{other:?}"),
    }
    // The other shard still takes writes.
    let other_key = key_on(&t, 0, "k");
    t.ok(1, put_op(&other_key, "elsewhere"));
    assert_eq!(
        t.c.nodes[1].records.len(),
        records,
        "the full shard logged nothing for refused mutations and reads"
    );
    // A delete is the way out: the full shard takes it (from either shard's client).
    let delete = Op::KvDelete {
        namespace: NS.into(),
        key: key.clone(),
        if_version: None,
    };
    t.ok(0, delete);
    assert!(matches!(t.ok(1, get_op(&key)), Reply::KvValue(None)));
    assert_eq!(t.c.nodes[1].records.len(), records + 1);

    t.c.step(1, Input::DiskSpace(DiskSpace::Available));
    t.ok(0, put_op(&key, "after"));
    match t.ok(1, get_op(&key)) {
        Reply::KvValue(Some(e)) => assert_eq!((e.value, e.version), (b"after".to_vec(), 1)),
        other => panic!("{other:?}"),
    }
}

/// A full shard leases no task (the worker could not report on it there): an await
/// parks, and gets the task once space returns.
#[test]
fn a_full_shard_leases_no_task_and_a_parked_await_gets_it_once_space_returns() {
    let mut t = T::new(1);
    t.user_action("review", 60_000, 3, 1000);
    t.worker("w", &["review"], None);
    let run_id = t.invoke(0, invoke_spec("review", json!({"n": 1})));
    t.c.step(0, Input::DiskSpace(DiskSpace::Full));
    assert!(tasks(Some(t.call(0, await_op("w", "review", 0)))).is_empty());
    let request = t.send(0, await_op("w", "review", 30_000));
    t.settle();
    assert!(t.reply_on(t.conn, request).is_none(), "parked");
    assert_eq!(t.run(&run_id).status, RunStatus::Pending);

    t.c.step(0, Input::DiskSpace(DiskSpace::Available));
    t.settle();
    let got = tasks(t.reply_on(t.conn, request));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, run_id);
}

/// Keys expire as fast as they come due: a backlog larger than one sweep is worked off in
/// back-to-back slices, not at one sweep per second.
#[test]
fn expiry_keeps_up_with_more_keys_than_one_sweep_removes() {
    let mut t = T::new(1);
    let n = 3 * flo_engine::testing::EXPIRY_SWEEP_KEYS_MAX + 17;
    for i in 0..n {
        let mut op = put_op(&format!("short-{i}"), "v");
        if let Op::KvPut { ttl_ms, .. } = &mut op {
            *ttl_ms = Some(1_000);
        }
        t.send(0, op);
    }
    t.ok(0, put_op("kept", "v"));
    assert_eq!(t.c.nodes[0].engine.state().kv.key_count(), n as u64 + 1);
    // Within the same second of the clock, every expired key is gone.
    t.set_clock(START_MS + 1_500);
    assert_eq!(t.c.nodes[0].engine.state().kv.key_count(), 1);
}

/// A run queues at most `SIGNALS_QUEUED_MAX` signals it has not consumed; one more answers
/// `overloaded` and logs nothing.
#[test]
fn a_run_holding_the_most_signals_refuses_one_more_as_overloaded() {
    let mut t = T::new(1);
    t.workflow(SIGNALS);
    let run_id = t.start(0, "approval", json!({}));
    let other = || Op::WorkflowSignal {
        namespace: NS.into(),
        run_id: run_id.clone(),
        signal_type: "other".into(),
        payload: b"{}".to_vec(),
    };
    for _ in 0..flo_engine::testing::SIGNALS_QUEUED_MAX {
        t.send(0, other());
    }
    t.settle();
    let lsn = t.c.nodes[0].engine.last_lsn();
    match t.call(0, other()) {
        Err(e) => {
            assert_eq!(e.code, flo_protocol::ErrorCode::Overloaded, "{e}");
            assert!(e.message.contains("1000 signals not consumed yet"), "{e}");
        }
        Ok(r) => panic!("one signal too many was taken: {r:?}"),
    }
    assert_eq!(t.c.nodes[0].engine.last_lsn(), lsn, "nothing logged");
    assert_eq!(t.wf(&run_id).status, WorkflowRunStatus::Waiting);
}

/// A stalled log writer holds what the shard appends in memory: past
/// `LOG_BACKLOG_BYTES_MAX` of it, mutations answer `overloaded` (reads go on), and once
/// the writer catches up they are taken again.
#[test]
fn mutations_answer_overloaded_while_the_log_writer_is_far_behind() {
    let mut t = T::new(1);
    t.ok(0, put_op("first", "v"));
    t.c.auto_write = false;
    let value = "x".repeat(flo_protocol::KV_VALUE_BYTES_MAX - 64);
    let n = flo_engine::testing::LOG_BACKLOG_BYTES_MAX / value.len() + 8;
    let sent: Vec<u64> = (0..n)
        .map(|i| t.send(0, put_op(&format!("big-{i}"), &value)))
        .collect();
    t.settle();
    let conn = t.conn;
    let refused: Vec<_> = sent
        .iter()
        .filter_map(|&r| t.reply_on(conn, r))
        .filter_map(|r| r.err())
        .collect();
    assert!(
        !refused.is_empty(),
        "no put was refused; pending {} bytes",
        t.c.nodes[0].engine.pending_log_bytes()
    );
    for e in &refused {
        assert_eq!(e.code, flo_protocol::ErrorCode::Overloaded, "{e}");
        assert!(e.message.contains("behind writing its log"), "{e}");
    }
    // Reads go on.
    assert!(matches!(
        t.call(
            0,
            Op::KvGet {
                namespace: NS.into(),
                key: "first".into(),
                wait_ms: None,
                after_version: None,
                newer_than_current: false,
            }
        ),
        Ok(Reply::KvValue(Some(_)))
    ));
    t.c.auto_write = true;
    t.settle();
    t.ok(0, put_op("after", "v"));
}

/// A trigger's run is started exactly once per record, also when the shard holding the
/// stream crashes after the run's start was durable on the run's shard but before its
/// ack was: the record comes back after the trigger's timeout, finds its run, and is
/// acknowledged.
#[test]
fn a_trigger_redelivered_after_a_crash_finds_its_run_instead_of_starting_a_second() {
    use flo_engine::hash::stable_hash;
    use flo_engine::testing::streams::owner_of;
    use flo_protocol::{StreamConfig, StreamId, StreamRecordIn};

    let mut t = T::new(2);
    t.settle();
    t.wasm_action("a-ok");
    let now = START_MS + 1_000;
    t.set_clock(now);
    // A stream whose partition and whose first record's run live on different shards.
    let part = t.c.partitioning();
    let (stream, p_owner, r_owner) = (0..50)
        .map(|i| format!("ev{i}"))
        .find_map(|stream| {
            let p = owner_of(&part, NS, &stream, 0);
            let h = stable_hash(NS, &format!("{stream}\u{0}on-event"));
            let run_id = format!("trig-{h:016x}-{}", StreamId::new(now, 0));
            let r = part.shard_of(NS, &run_id);
            (p != r).then_some((stream, p, r))
        })
        .expect("a stream whose record's run is on the other shard");
    t.ok(
        0,
        Op::StreamCreate {
            namespace: NS.into(),
            name: stream.clone(),
            config: StreamConfig {
                partitions: Some(1),
                ..Default::default()
            },
        },
    );
    t.workflow(&format!(
        "kind: Workflow\nname: on-event\nversion: \"1\"\ntrigger:\n  stream: {stream}\n\
         start:\n  run: \"@actions/a-ok\"\n  transitions:\n    success: flo.Completed\n"
    ));
    t.settle();
    let group_info = |t: &mut T| match t.ok(
        0,
        Op::StreamGroupInfo {
            namespace: NS.into(),
            stream: stream.clone(),
            group: Some("wf-on-event".into()),
        },
    ) {
        Reply::Groups(g) => g[0].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(group_info(&mut t).pending, 0, "the trigger's group exists");

    // The append, the delivery to the trigger and the run's start are durable; the ack is
    // not when the stream's shard crashes.
    t.c.auto_write = false;
    let append = Op::StreamAppend {
        namespace: NS.into(),
        stream: stream.clone(),
        records: vec![StreamRecordIn {
            payload: b"{\"n\":1}".to_vec(),
            ..Default::default()
        }],
        partition: None,
    };
    t.send(p_owner, append);
    t.c.complete_write(p_owner);
    assert!(
        t.c.deliver(p_owner, r_owner),
        "the run's start goes to its shard"
    );
    t.c.complete_write(r_owner);
    assert!(t.c.deliver(r_owner, p_owner), "the start is answered");
    t.c.crash(&[p_owner], &[]);
    t.c.start(p_owner);
    t.c.auto_write = true;
    t.settle();
    assert_eq!(
        group_info(&mut t).pending,
        1,
        "the record waits for its ack again"
    );

    // Past the trigger's timeout the record comes back: its run exists, it is acked.
    t.set_clock(now + 31_000);
    t.set_clock(now + 32_000);
    let info = group_info(&mut t);
    assert_eq!((info.pending, info.acked), (0, 1), "{info:?}");
    match t.ok(
        0,
        Op::WorkflowListRuns {
            namespace: NS.into(),
            name: "on-event".into(),
            status: None,
            limit: Some(10),
            cursor: None,
            timed_out: None,
        },
    ) {
        Reply::WorkflowRuns { runs, .. } => assert_eq!(runs.len(), 1, "{runs:?}"),
        other => panic!("{other:?}"),
    }
}

/// Issue 21, item 10: four looping guests of one namespace held every WASM slot, and
/// another namespace's run stayed pending. While another namespace's runs wait, a
/// namespace holds at most `WASM_SLOTS - 1` slots; alone, it uses them all.
#[test]
fn a_namespace_leaves_a_wasm_slot_to_another_namespace_waiting() {
    let mut t = T::new(1);
    t.wasm_action("spin");
    let other = |ns: &str| {
        // Another action name: the harness keys run ids without their namespace.
        let mut spec = invoke_spec("loop", json!("other"));
        spec.namespace = ns.into();
        spec
    };
    t.ok(
        0,
        Op::ActionRegister(ActionSpec {
            namespace: "tenant-b".into(),
            name: "loop".into(),
            kind: ActionKind::Wasm,
            wasm: Some(b"(module)".to_vec()),
            timeout_ms: None,
            max_retries: Some(0),
            retry_delay_ms: None,
            description: None,
            memory_limit_mb: None,
            wasm_entrypoint: None,
        }),
    );
    // Alone, one namespace takes every slot.
    for i in 0..WASM_SLOTS * 3 {
        t.invoke(0, invoke_spec("spin", json!(i)));
    }
    t.settle();
    let first = t.executions();
    assert_eq!(first.len(), WASM_SLOTS);
    assert!(first.iter().all(|(_, x)| x.namespace == NS));
    // Another namespace's run waits; the next slot freed goes to it, and the first
    // namespace gets the one after (it holds WASM_SLOTS - 1 while the other runs).
    t.invoke(0, other("tenant-b"));
    t.settle();
    assert!(t.executions().is_empty(), "every slot is busy");
    t.answer(0, first[0].1.exec, Ok(json!({})));
    t.settle();
    let next = t.executions();
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].1.namespace, "tenant-b",
        "the freed slot goes to the waiting tenant"
    );
    t.answer(0, first[1].1.exec, Ok(json!({})));
    t.settle();
    let after = t.executions();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].1.namespace, NS);
}
