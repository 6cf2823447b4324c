//! The simulated world around the engines: clients, workers, the WASM pool, the clock and
//! crashes, all driven by one seeded RNG, and the invariants checked against it.

use crate::cluster::storage::{CrashPlan, SnapPhase};
use crate::cluster::{Cluster, Node, StorageConfig, assert_same_fold, new_engine_with, replayed};
use flo_engine::testing::record::{Record, StepWait};
use flo_engine::testing::{RunKind, RunPhase, archived, streams};
use flo_engine::{Engine, ExecFailure, ExecResult, Input, ReplyResult};
use flo_protocol::{
    ActionKind, ActionSpec, ErrorCode, GroupConfig, GroupMode, GroupReadSpec, GroupStart,
    InvokeSpec, Op, Reply, RunStatus, StreamConfig, StreamId, StreamReadSpec, StreamRecordIn,
    TaskAssignment, WorkerSpec, WorkerType, WorkflowRunStatus, WorkflowStartSpec,
};
use flo_testkit::Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

const NS: &str = "sim";
const STREAM: &str = "events";
const GROUP: &str = "g";
/// The run index keeps one time mark per second of finish times (`archive/index.rs`): a
/// run may be forgotten up to this much after its window ended, never before.
const TIME_MARK_MS: u64 = 1000;
const TRACE_LINES_MAX: usize = 60;
const CRASHES_MAX: u32 = 3;
const CHECKPOINT_EVERY: u64 = 200;
/// Final phase: clock jumps of this size until nothing moves any more.
const FINAL_JUMP_MS: u64 = 15_000;
const FINAL_ROUNDS_MAX: u32 = 60;
/// Retention of finished runs, one per seed: most seeds forget runs within the run.
const RETENTIONS_MS: [u64; 5] = [
    flo_engine::testing::RETENTION_MS_DEFAULT,
    3_000,
    20_000,
    120_000,
    600_000,
];
/// Segment sizes, one per seed (a batch is at least one 4 KiB block).
const SEGMENTS_BYTES: [u64; 4] = [8 << 10, 16 << 10, 32 << 10, 128 << 10];
/// A snapshot is taken once this many segments' worth of log was written since the last.
const SNAPSHOT_EVERY_SEGMENTS_MAX: u64 = 4;

thread_local! {
    static TRACE: RefCell<VecDeque<String>> = const { RefCell::new(VecDeque::new()) };
}

fn trace(line: String) {
    TRACE.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() == TRACE_LINES_MAX {
            t.pop_front();
        }
        let mut line = line;
        line.truncate(300);
        t.push_back(line);
    });
}

pub fn trace_dump() -> String {
    TRACE.with(|t| t.borrow().iter().cloned().collect::<Vec<_>>().join("\n"))
}

const WASM_ACTIONS: [&str; 3] = ["a-fixed", "a-echo", "a-flaky"];
const USER_ACTIONS: [&str; 2] = ["u-review", "u-gpu"];
const GPU_LABELS: &str = r#"{"gpu":true}"#;

const WORKFLOWS: [&str; 14] = [
    r#"
kind: Workflow
name: process-order
version: "1"
searchAttributes:
  - {name: amount, type: number, from: input.amount}
  - {name: charged, type: string, from: "$.steps.charge.output.run"}
start:
  run: "@actions/a-fixed"
  transitions:
    success: charge
    failure: flo.Failed
steps:
  charge:
    run: "@actions/a-echo"
    inputMapping: '{"amount": "$.input.amount", "prev": "$.steps._start.output", "run": "$.flo.run_id"}'
    retry:
      max_attempts: 3
      backoff: exponential
      initial_delay_ms: 500
      max_delay_ms: 4000
    transitions:
      success: ship
      failure: flo.Failed
  ship:
    run: "@actions/a-flaky"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#,
    // With the leading newline it always had: the definition's text is in the records, so
    // the published seeds replay only if it is the same.
    concat!(
        "\n",
        include_str!("../../../../testdata/workflows/approval-two-waits.yaml")
    ),
    r#"
kind: Workflow
name: review
version: "1"
start:
  run: "@actions/u-review"
  transitions:
    approved: fulfil
    rejected: Rejected
    success: fulfil
    failure: flo.Failed
steps:
  fulfil:
    waitForSignal:
      type: shipped
      timeoutMs: 8000
    transitions:
      success: flo.Completed
terminals:
  Rejected:
    status: failed
"#,
    r#"
kind: Workflow
name: retrying
version: "1"
start:
  run: "@actions/a-flaky"
  retry:
    max_attempts: 3
    backoff: exponential
    initial_delay_ms: 1000
  transitions:
    success: flo.Completed
    failure: Gave-Up
terminals:
  Gave-Up:
    status: failed
"#,
    r#"
kind: Workflow
name: payment-flow
version: "1"
start:
  run: "@actions/a-fixed"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#,
    r#"
kind: Workflow
name: parent
version: "1"
start:
  run: "@workflow/payment-flow"
  transitions:
    success: gpu
    failure: flo.Failed
steps:
  gpu:
    run: "@actions/u-gpu"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#,
    r#"
kind: Workflow
name: waits-child
version: "1"
start:
  run: "@workflow/approval"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#,
    "kind: Workflow\nname: loop-child\nversion: \"1\"\nstart:\n  run: \"@actions/not-registered\"\n  transitions:\n    success: flo.Completed\n",
    // In flight until cancelled: runs older than any retention window that must stay.
    "kind: Workflow\nname: forever\nversion: \"1\"\nstart:\n  waitForSignal:\n    type: never\n  transitions:\n    success: flo.Completed\n",
    "kind: Workflow\nname: loop-parent\nversion: \"1\"\nstart:\n  run: \"@workflow/loop-child\"\n  transitions:\n    success: flo.Completed\n    failure: again\nsteps:\n  again:\n    run: \"@workflow/loop-child\"\n    transitions:\n      success: flo.Completed\n      failure: again\n",
    // A schedule: a tick every 2 s, at most 2 runs at once, the missed ticks caught up.
    // An inline plan: a flaky WebAssembly executor behind a breaker, a worker-run one with
    // a rate limit and async tracking, a steady one; health-weighted, cached, a fallback.
    r#"
kind: Workflow
name: planned
version: "1"
plans:
  charge:
    selection: health-weighted
    executors:
      - {name: flaky, action: "@actions/a-flaky", priority: 3, retry: {max_attempts: 2, initial_delay_ms: 300}, breaker: {failure_threshold: 2, cooldown_ms: 3000, half_open_max_calls: 1}}
      - {name: gpu, action: "@actions/u-gpu", priority: 2, rate_limit: {max_per_second: 3}, tracking: {mode: async, timeout_ms: 4000}}
      - {name: fixed, action: "@actions/a-fixed", priority: 1}
    health: {window_ms: 10000, decay: 0.5, min_samples: 3}
    cache: {ttl_ms: 1500, key: "flat", invalidate_on: [refund]}
    errors: {fatal: [invalid_card]}
    fallback: {value: {declined: true}, condition: exhausted}
start:
  run: "@plan/charge"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#,
    // Parallel branches: a worker's step beside a nested fork (a flaky step going on
    // after a failure, a signal with a deadline), joined twice; a branch that gives up
    // fails the run and cancels the other's work.
    r#"
kind: Workflow
name: forked
version: "1"
start:
  run: "@actions/a-fixed"
  transitions:
    success: [left, right]
steps:
  left:
    run: "@actions/u-gpu"
    transitions: {success: merge, failure: merge}
  right:
    run: "@actions/a-flaky"
    retry: {max_attempts: 2, initial_delay_ms: 200}
    transitions:
      success: [r1, r2]
  r1:
    run: "@actions/a-flaky"
    onError: continue
    transitions: {success: rj}
  r2:
    waitForSignal: {type: approval, timeoutMs: 3000}
    transitions: {success: rj, timeout: rj}
  rj:
    run: "@actions/a-fixed"
    transitions: {success: merge}
  merge:
    run: "@actions/a-fixed"
    transitions: {success: flo.Completed}
"#,
    // Run state: outputs merged, a worker's fields, update-state from outside, a wait that
    // update-state --continue ends (or its timeout).
    r#"
kind: Workflow
name: stateful
version: "1"
state: {stage: 0}
start:
  run: "@actions/a-fixed"
  transitions:
    success: hold
steps:
  hold:
    waitForState: {timeoutMs: 4000, onTimeout: work}
    transitions: {success: work}
  work:
    run: "@actions/u-gpu"
    transitions: {success: flo.Completed, failure: flo.Failed}
"#,
    "kind: Workflow\nname: ticking\nversion: \"1\"\nschedule:\n  interval: 2000\n  max_concurrent: 2\n  catchup: all\nstart:\n  run: \"@actions/a-fixed\"\n  transitions:\n    success: flo.Completed\n    failure: flo.Failed\n",
];
const STARTABLE: [&str; 10] = [
    "stateful",
    "forked",
    "planned",
    "process-order",
    "approval",
    "review",
    "retrying",
    "parent",
    "payment-flow",
    "waits-child",
];

struct Pending {
    shard: u32,
    op: Op,
    /// For an operation on a run: which of the runs with its id was the latest durable
    /// when it was sent (an id made of an idempotency key is reused once forgotten).
    generation: u32,
}

/// The task (action run) a worker's report is about.
fn task_run(op: &Op) -> Option<(RunKind, &str)> {
    match op {
        Op::TaskComplete { task_id, .. } | Op::TaskFail { task_id, .. } => {
            Some((RunKind::Action, task_id))
        }
        _ => None,
    }
}

/// The run an operation is about, for the checks of `not_found` answers.
fn target_run(op: &Op) -> Option<(RunKind, &str)> {
    match op {
        Op::RunStatus { run_id, .. } | Op::RunCancel { run_id, .. } => {
            Some((RunKind::Action, run_id))
        }
        Op::WorkflowStatus { run_id, .. }
        | Op::WorkflowCancel { run_id, .. }
        | Op::WorkflowControl { run_id, .. }
        | Op::WorkflowUpdateState { run_id, .. }
        | Op::WorkflowSignal { run_id, .. } => Some((RunKind::Workflow, run_id)),
        _ => None,
    }
}

struct Worker {
    id: String,
    actions: Vec<String>,
    labels: Option<String>,
    conn: u64,
    shard: u32,
    registered: bool,
    registering: bool,
    awaiting: bool,
    /// Its last await was refused.
    refused: bool,
    held: Vec<TaskAssignment>,
}

/// What clients were told, to hold the server to it after crashes.
#[derive(Default)]
struct Model {
    /// Client keys: highest acknowledged version (keys ever deleted are not tracked).
    kv: BTreeMap<String, u64>,
    tainted: BTreeSet<String>,
    runs: BTreeSet<String>,
    wf_runs: BTreeSet<String>,
    /// Runs acknowledged completed or cancelled, and signals acknowledged: by run id, with
    /// the generation of the id (`Node::generation`) they are about.
    completed: BTreeMap<String, u32>,
    wf_cancelled: BTreeMap<String, u32>,
    signals: BTreeMap<String, (u32, u64)>,
    actions: BTreeMap<String, u32>,
    workflows: BTreeSet<(String, String)>,
    /// Stream records acknowledged appended, delivered to the group, and acknowledged by
    /// it (an acked record is never delivered again).
    appended: BTreeSet<StreamId>,
    delivered: Vec<StreamId>,
    /// Acked records, with the deliveries of each durable when its ack was answered.
    acked: BTreeMap<StreamId, u64>,
    /// The stream and its group are created (their creation answered).
    stream_ready: bool,
    /// The scheduled workflow is disabled (in the final phase, so that the cluster rests).
    ticking_disabled: bool,
}

pub struct Sim {
    rng: Rng,
    c: Cluster,
    /// Client connections: (conn, shard).
    clients: Vec<(u64, u32)>,
    next_conn: u64,
    next_request: u64,
    next_read: u64,
    pending: HashMap<(u64, u64), Pending>,
    closed: BTreeSet<u64>,
    workers: Vec<Worker>,
    model: Model,
    known_runs: Vec<String>,
    known_wf_runs: Vec<String>,
    crashes: u32,
    /// Webhook deliveries a receiver answered 2xx: (shard, id) → the crashes then (sent
    /// again only after a crash: its record may have been lost).
    webhooks_delivered: HashMap<(u32, u64), u32>,
    final_phase: bool,
    /// How the stream's group shares its records (drawn from the seed at the end of `new`).
    group_mode: GroupMode,
    /// Log bytes between snapshots.
    snapshot_every: u64,
    counts: Counts,
    /// Per shard: snapshots installed when one was last damaged.
    damaged_at: Vec<Option<u64>>,
}

/// What a seed exercised beyond the summary of its runs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Status reads answered `not_found` for a run forgotten after its window.
    pub expired_answers: u64,
    /// Crashes by where they struck the shard's snapshot: none being written, waiting or
    /// in its temporary file, renamed not synced, deleting segments.
    pub crash_idle: u64,
    pub crash_writing: u64,
    pub crash_renamed: u64,
    pub crash_deleting: u64,
    /// Crashes that brought back files unlinked without a directory sync.
    pub crash_unlinked_back: u64,
    /// Recoveries that passed over a damaged snapshot.
    pub fallbacks: u64,
    /// Recoveries without any snapshot to start from, and with one.
    pub full_replays: u64,
    pub snapshots_taken: u64,
    pub snapshots_installed: u64,
    pub segments_rolled: u64,
    pub segments_deleted: u64,
    /// Runs forgotten (durably), over the shards.
    pub runs_forgotten: u64,
    /// Runs still in flight at the end that started longer ago than the retention window.
    pub old_in_flight: u64,
    /// Reads of the log that found their record deleted (its run forgotten meanwhile).
    pub reads_missed: u64,
    /// Crashes with a flipped byte in the last acknowledged record, refused by recovery.
    pub media_faults: u64,
    /// Schedule ticks fired and skipped, as the shards' states say at the end.
    pub ticks_fired: u64,
    pub ticks_skipped: u64,
    /// Inline plans' moves made durable: attempts started, executors skipped (breaker or
    /// rate limit), cache hits, fallbacks.
    pub plan_attempts: u64,
    pub plan_skips: u64,
    pub plan_cache_hits: u64,
    pub plan_fallbacks: u64,
    /// Forks made durable (a step's finish that started branches).
    pub forks: u64,
    /// Run state updates answered (`update-state` / `set-state`).
    pub state_updates: u64,
    /// Webhook attempts answered, and those answered 2xx.
    pub webhook_attempts: u64,
    pub webhooks_delivered: u64,
    pub seeds: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.expired_answers += o.expired_answers;
        self.crash_idle += o.crash_idle;
        self.crash_writing += o.crash_writing;
        self.crash_renamed += o.crash_renamed;
        self.crash_deleting += o.crash_deleting;
        self.crash_unlinked_back += o.crash_unlinked_back;
        self.fallbacks += o.fallbacks;
        self.full_replays += o.full_replays;
        self.snapshots_taken += o.snapshots_taken;
        self.snapshots_installed += o.snapshots_installed;
        self.segments_rolled += o.segments_rolled;
        self.segments_deleted += o.segments_deleted;
        self.runs_forgotten += o.runs_forgotten;
        self.old_in_flight += o.old_in_flight;
        self.reads_missed += o.reads_missed;
        self.media_faults += o.media_faults;
        self.ticks_fired += o.ticks_fired;
        self.ticks_skipped += o.ticks_skipped;
        self.plan_attempts += o.plan_attempts;
        self.plan_skips += o.plan_skips;
        self.plan_cache_hits += o.plan_cache_hits;
        self.plan_fallbacks += o.plan_fallbacks;
        self.forks += o.forks;
        self.state_updates += o.state_updates;
        self.webhook_attempts += o.webhook_attempts;
        self.webhooks_delivered += o.webhooks_delivered;
        self.seeds += o.seeds;
    }
}

thread_local! {
    /// Totals over the seeds this thread ran.
    static TOTALS: RefCell<Counts> = RefCell::default();
}

/// What the seeds run so far exercised, summed.
pub fn totals() -> Counts {
    TOTALS.with(|t| *t.borrow())
}

fn ok_reply(result: &ReplyResult) -> Option<&Reply> {
    result.as_ref().ok()
}

impl Sim {
    pub fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5eed);
        let shards = 1 + rng.below(3) as u32;
        let storage = StorageConfig {
            retention_ms: *rng.pick(&RETENTIONS_MS),
            segment_bytes: *rng.pick(&SEGMENTS_BYTES),
        };
        let snapshot_every = storage.segment_bytes * (1 + rng.below(SNAPSHOT_EVERY_SEGMENTS_MAX));
        let c = Cluster::with_storage(shards, 1_700_000_000_000, storage);
        trace(format!(
            "seed {seed}: {shards} shards, {storage:?}, a snapshot every {snapshot_every} bytes"
        ));
        let mut sim = Sim {
            rng,
            c,
            clients: Vec::new(),
            next_conn: 100,
            next_request: 0,
            next_read: 0,
            pending: HashMap::new(),
            closed: BTreeSet::new(),
            workers: Vec::new(),
            model: Model::default(),
            known_runs: Vec::new(),
            known_wf_runs: Vec::new(),
            crashes: 0,
            webhooks_delivered: HashMap::new(),
            final_phase: false,
            group_mode: GroupMode::Shared,
            snapshot_every,
            counts: Counts::default(),
            damaged_at: vec![None; shards as usize],
        };
        for _ in 0..3 {
            let conn = sim.new_conn();
            let shard = sim.rng.below(shards as u64) as u32;
            sim.clients.push((conn, shard));
        }
        let specs = [
            ("w0", vec!["u-review", "u-gpu"], Some(GPU_LABELS)),
            ("w1", vec!["u-review"], None),
            ("w2", vec!["u-review", "u-gpu"], Some(r#"{"gpu":false}"#)),
        ];
        for (id, actions, labels) in specs {
            let conn = sim.new_conn();
            let shard = sim.rng.below(shards as u64) as u32;
            sim.workers.push(Worker {
                id: id.to_string(),
                actions: actions.into_iter().map(String::from).collect(),
                labels: labels.map(String::from),
                conn,
                shard,
                registered: false,
                registering: false,
                awaiting: false,
                refused: false,
                held: Vec::new(),
            });
        }
        let modes = [
            GroupMode::Shared,
            GroupMode::Exclusive,
            GroupMode::KeyShared,
        ];
        sim.group_mode = *sim.rng.pick(&modes);
        sim
    }

    fn shards(&self) -> u32 {
        self.c.shards()
    }

    fn new_conn(&mut self) -> u64 {
        self.next_conn += 1;
        self.next_conn
    }

    fn send(&mut self, shard: u32, conn: u64, op: Op) {
        self.next_request += 1;
        let request = self.next_request;
        trace(format!(
            "client c{conn} r{request} -> shard {shard}: {op:?}"
        ));
        let generation = target_run(&op)
            .or_else(|| task_run(&op))
            .map_or(0, |(kind, id)| self.generation(kind, id));
        self.pending.insert(
            (conn, request),
            Pending {
                shard,
                op: op.clone(),
                generation,
            },
        );
        self.c.client(shard, conn, request, op);
    }

    fn input(&mut self, shard: u32, input: Input) {
        trace(format!("shard {shard} <- {input:?}"));
        self.c.step(shard, input);
    }

    // ---- the run ----

    pub fn run(&mut self, steps: u64) {
        self.setup();
        if self.rng.one_in(2) {
            // Half the seeds define everything before traffic starts.
            self.final_phase = true;
            self.quiesce();
            self.final_phase = false;
        }
        for i in 0..steps {
            self.random_step();
            self.process_replies();
            if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
                self.checkpoint();
            }
        }
        self.finish();
    }

    fn setup(&mut self) {
        let (conn, shard) = self.clients[0];
        for (i, name) in WASM_ACTIONS.iter().chain(USER_ACTIONS.iter()).enumerate() {
            if self.model.actions.contains_key(*name) {
                continue;
            }
            let user = i >= WASM_ACTIONS.len();
            let op = Op::ActionRegister(ActionSpec {
                namespace: NS.into(),
                name: name.to_string(),
                kind: if user {
                    ActionKind::User
                } else {
                    ActionKind::Wasm
                },
                wasm: (!user).then(|| format!("(module ;; {name})").into_bytes()),
                timeout_ms: Some(if user { 10_000 } else { 5_000 }),
                max_retries: Some(2),
                retry_delay_ms: Some(500),
                description: None,
                memory_limit_mb: None,
                wasm_entrypoint: None,
            });
            self.send(shard, conn, op);
        }
        for yaml in WORKFLOWS {
            let name = yaml
                .split("name: ")
                .nth(1)
                .and_then(|r| r.split('\n').next());
            if self
                .model
                .workflows
                .iter()
                .any(|(n, _)| Some(n.as_str()) == name)
            {
                continue;
            }
            let op = Op::WorkflowCreate {
                namespace: NS.into(),
                yaml: yaml.to_string(),
            };
            self.send(shard, conn, op);
        }
        if !self.model.stream_ready {
            let op = Op::StreamCreate {
                namespace: NS.into(),
                name: STREAM.into(),
                config: StreamConfig {
                    partitions: Some(3),
                    ..Default::default()
                },
            };
            self.send(shard, conn, op);
            let op = Op::StreamGroupCreate {
                namespace: NS.into(),
                stream: STREAM.into(),
                group: GROUP.into(),
                config: GroupConfig {
                    mode: self.group_mode,
                    start: GroupStart::Start,
                    max_deliveries: Some(1_000),
                    message_timeout_ms: Some(5_000),
                },
            };
            self.send(shard, conn, op);
        }
    }

    /// A stream operation: appends, reads, group reads, acks and nacks.
    fn stream_op(&mut self, roll: u64) -> Option<Op> {
        if !self.model.stream_ready {
            return None;
        }
        let (namespace, stream, group) = (NS.to_string(), STREAM.to_string(), GROUP.to_string());
        Some(match roll {
            0..=4 => Op::StreamAppend {
                namespace,
                stream,
                records: (0..1 + self.rng.below(3))
                    .map(|i| StreamRecordIn {
                        key: self
                            .rng
                            .one_in(2)
                            .then(|| format!("k{}", self.rng.below(5))),
                        headers: Default::default(),
                        payload: format!("r{i}").into_bytes(),
                    })
                    .collect(),
                partition: None,
            },
            5..=6 => Op::StreamRead(StreamReadSpec {
                namespace,
                stream,
                count: Some(20),
                ..Default::default()
            }),
            7..=9 => Op::StreamGroupRead(GroupReadSpec {
                namespace,
                stream,
                group,
                consumer: format!("c{}", self.rng.below(3)),
                count: Some(1 + self.rng.below(5) as u32),
                block_ms: None,
            }),
            _ => {
                let open: Vec<StreamId> = self
                    .model
                    .delivered
                    .iter()
                    .filter(|id| !self.model.acked.contains_key(id))
                    .copied()
                    .collect();
                if open.is_empty() {
                    return None;
                }
                let ids = vec![*self.rng.pick(&open)];
                if self.rng.one_in(4) {
                    Op::StreamGroupNack {
                        namespace,
                        stream,
                        group,
                        ids,
                        delay_ms: Some(self.rng.below(2_000)),
                    }
                } else {
                    Op::StreamGroupAck {
                        namespace,
                        stream,
                        group,
                        ids,
                    }
                }
            }
        })
    }

    fn random_step(&mut self) {
        let roll = self.rng.below(100);
        match roll {
            0..=21 => {
                for _ in 0..1 + self.rng.below(4) {
                    self.deliver_random();
                }
            }
            22..=31 => self.write_random(),
            32..=41 => {
                let s = self.rng.below(self.shards() as u64) as u32;
                self.input(s, Input::Idle);
            }
            42..=45 => self.continue_random(),
            46..=48 => {
                let s = self.rng.below(self.shards() as u64) as u32;
                self.input(s, Input::Tick);
            }
            49..=56 => self.answer_execution(),
            57..=58 => self.answer_compile(),
            59 => self.guest_read(),
            60..=74 => self.client_op(),
            75..=86 => self.worker_step(),
            87..=90 => {
                let ms = if self.rng.one_in(15) {
                    5_000 + self.rng.below(60_000)
                } else {
                    1 + self.rng.below(2_000)
                };
                trace(format!("clock +{ms}"));
                self.c.advance(ms);
            }
            _ => {
                if self.crashes < CRASHES_MAX && self.c.steps > 400 && self.rng.one_in(40) {
                    self.crash_all();
                } else {
                    self.fire_wakes();
                }
            }
        }
        if !self.c.compiles.is_empty() && self.rng.one_in(4) {
            self.answer_compile();
        }
        if !self.c.log_reads.is_empty() && self.rng.one_in(3) {
            let i = self.rng.below(self.c.log_reads.len() as u64) as usize;
            self.c.answer_read(i);
        }
        if !self.c.deliveries.is_empty() && self.rng.one_in(3) {
            self.answer_delivery();
        }
        if self.rng.one_in(5) {
            self.snapshot_step();
        }
        self.fire_wakes();
    }

    /// A shard takes a snapshot when enough log was written since the last (sometimes
    /// sooner), or the one it is writing takes its next step (`storage.rs`).
    fn snapshot_step(&mut self) {
        let s = self.rng.below(self.shards() as u64) as u32;
        let early = self.rng.one_in(20);
        let node = &mut self.c.nodes[s as usize];
        if node.job.is_none() {
            if node.logged >= self.snapshot_every || early {
                node.start_snapshot();
                self.counts.snapshots_taken += 1;
                let lsn = node.job.as_ref().map_or(0, |j| j.lsn);
                trace(format!("shard {s}: snapshot taken at {lsn}"));
            }
            return;
        }
        if let Some(line) = node.advance_snapshot() {
            trace(format!("shard {s}: {line}"));
        }
    }

    fn fire_wakes(&mut self) {
        let now = self.c.now();
        for s in 0..self.shards() {
            if self.c.nodes[s as usize].wake.is_some_and(|w| w <= now) {
                self.input(s, Input::Tick);
            }
        }
    }

    fn deliver_random(&mut self) {
        let pairs: Vec<(u32, u32)> = self
            .c
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if pairs.is_empty() {
            return;
        }
        let (from, to) = *self.rng.pick(&pairs);
        trace(format!("deliver {from} -> {to}"));
        let msg = self.c.links.get_mut(&(from, to)).unwrap().front().cloned();
        trace(format!("  {msg:?}"));
        self.c.deliver(from, to);
    }

    fn write_random(&mut self) {
        let writing: Vec<u32> = (0..self.shards())
            .filter(|&s| self.c.nodes[s as usize].writing.is_some())
            .collect();
        if writing.is_empty() {
            return;
        }
        let s = *self.rng.pick(&writing);
        self.write(s);
    }

    fn write(&mut self, s: u32) {
        trace(format!("shard {s}: batch written"));
        let added = self.c.complete_write(s);
        check_once_facts(s, &added, &self.c.nodes[s as usize].facts);
        for r in &added {
            if let Record::WfStepFinished {
                next: flo_engine::testing::record::StepNext::Fork { .. },
                ..
            } = r
            {
                self.counts.forks += 1;
            }
            if let Record::WfPlanEvent { event, .. } = r {
                use flo_engine::testing::record::PlanEvent;
                match event {
                    PlanEvent::Start { .. } => self.counts.plan_attempts += 1,
                    PlanEvent::Skipped { .. } => self.counts.plan_skips += 1,
                    PlanEvent::CacheHit { .. } => self.counts.plan_cache_hits += 1,
                    PlanEvent::Fallback => self.counts.plan_fallbacks += 1,
                    _ => {}
                }
            }
        }
    }

    fn continue_random(&mut self) {
        let waiting: Vec<u32> = (0..self.shards())
            .filter(|&s| self.c.nodes[s as usize].continues > 0)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let s = *self.rng.pick(&waiting);
        self.c.nodes[s as usize].continues -= 1;
        self.input(s, Input::Continue);
    }

    /// A receiver answers one webhook attempt: mostly 200, else 503 or no answer (every
    /// attempt answers 200 in the final phase).
    fn answer_delivery(&mut self) {
        let i = self.rng.below(self.c.deliveries.len() as u64) as usize;
        let (shard, call) = self.c.deliveries.remove(i);
        let result = match self.rng.below(10) {
            _ if self.final_phase => Ok(200),
            0..=6 => Ok(200),
            7 => Ok(503),
            _ => Err("connection refused (sim)".to_string()),
        };
        let body: serde_json::Value = serde_json::from_slice(&call.body).expect("a JSON body");
        assert_eq!(
            body["id"],
            call.delivery_id.as_str(),
            "the body names its delivery"
        );
        self.counts.webhook_attempts += 1;
        if result == Ok(200) {
            self.counts.webhooks_delivered += 1;
            if let Some(then) = self
                .webhooks_delivered
                .insert((shard, call.id), self.crashes)
            {
                assert!(
                    then < self.crashes,
                    "shard {shard}: webhook delivery {} sent again after the receiver took it, \
                     with no crash between",
                    call.delivery_id
                );
            }
        }
        trace(format!(
            "shard {shard}: webhook {} attempt {} answered {result:?}",
            call.delivery_id, call.attempt
        ));
        let (id, attempt) = (call.id, call.attempt);
        self.input(
            shard,
            Input::WebhookAnswered {
                id,
                attempt,
                result,
            },
        );
    }

    fn answer_execution(&mut self) {
        if self.c.executions.is_empty() {
            return;
        }
        let i = self.rng.below(self.c.executions.len() as u64) as usize;
        let (s, x) = self.c.executions.remove(i);
        let fail = !self.final_phase && self.rng.one_in(4);
        let output = if fail {
            Err(ExecFailure {
                error: format!("simulated failure of {}", x.action),
                timed_out: self.rng.one_in(3),
            })
        } else if x.action == "a-echo" {
            Ok(x.input.clone())
        } else {
            Ok(format!(r#"{{"v":{}}}"#, self.rng.below(1000)).into_bytes())
        };
        let mut kv_writes = Vec::new();
        if self.rng.one_in(3) {
            for _ in 0..1 + self.rng.below(3) {
                let key = format!("g-{}", self.rng.below(12));
                let value =
                    (!self.rng.one_in(8)).then(|| vec![b'g'; 1 + self.rng.below(8) as usize]);
                kv_writes.push((key, value));
            }
        }
        let result = ExecResult {
            output,
            outcome: None,
            kv_writes,
            logs: Vec::new(),
            state_patch: None,
        };
        self.input(
            s,
            Input::Executed {
                exec: x.exec,
                result,
            },
        );
    }

    fn answer_compile(&mut self) {
        if self.c.compiles.is_empty() {
            return;
        }
        let (s, job) = self.c.compiles.remove(0);
        self.input(
            s,
            Input::Compiled {
                job,
                result: Ok(None),
            },
        );
    }

    fn guest_read(&mut self) {
        if self.c.executions.is_empty() {
            return;
        }
        let i = self.rng.below(self.c.executions.len() as u64) as usize;
        let (s, exec) = (self.c.executions[i].0, self.c.executions[i].1.exec);
        self.next_read += 1;
        let key = format!(
            "{}-{}",
            if self.rng.one_in(2) { "g" } else { "c" },
            self.rng.below(12)
        );
        let read = self.next_read;
        self.input(s, Input::GuestRead { exec, read, key });
    }

    // ---- clients ----

    fn client_op(&mut self) {
        if self.final_phase {
            return;
        }
        let i = self.rng.below(self.clients.len() as u64) as usize;
        let (conn, shard) = self.clients[i];
        let roll = self.rng.below(112);
        let key = format!("c-{}", self.rng.below(16));
        let op = match roll {
            100.. => match self.stream_op(roll - 100) {
                Some(op) => op,
                None => return,
            },
            0..=21 => Op::KvPut {
                namespace: NS.into(),
                key,
                value: vec![b'v'; 1 + self.rng.below(16) as usize],
                ttl_ms: None,
                if_version: self.rng.one_in(6).then(|| self.rng.below(3)),
                if_exists: false,
            },
            22..=28 => Op::KvGet {
                namespace: NS.into(),
                key,
                wait_ms: None,
                after_version: None,
                newer_than_current: false,
            },
            29..=30 => {
                self.model.tainted.insert(key.clone());
                Op::KvDelete {
                    namespace: NS.into(),
                    key,
                    if_version: None,
                }
            }
            31..=32 => Op::KvList {
                namespace: NS.into(),
                prefix: "c-".into(),
                limit: Some(8),
                cursor: None,
            },
            33..=52 => {
                let all: Vec<&str> = WASM_ACTIONS.iter().chain(&USER_ACTIONS).copied().collect();
                let action = self.rng.pick(&all).to_string();
                Op::ActionInvoke(InvokeSpec {
                    namespace: NS.into(),
                    labels: (action == "u-gpu").then(|| GPU_LABELS.to_string()),
                    action,
                    input: format!(r#"{{"amount":{}}}"#, self.rng.below(100)).into_bytes(),
                    priority: Some(self.rng.below(20) as u8),
                    delay_ms: self.rng.one_in(5).then(|| self.rng.below(10_000)),
                    idempotency_key: self
                        .rng
                        .one_in(6)
                        .then(|| format!("k{}", self.rng.below(6))),
                    wait_ms: self.rng.one_in(10).then_some(2_000),
                })
            }
            53..=56 => match self.known_run() {
                Some(run_id) => Op::RunStatus {
                    namespace: NS.into(),
                    run_id,
                },
                None => return,
            },
            57..=58 => match self.known_run() {
                Some(run_id) => Op::RunCancel {
                    namespace: NS.into(),
                    run_id,
                },
                None => return,
            },
            59..=73 => {
                let name = if self.rng.one_in(40) {
                    "loop-parent"
                } else if self.rng.one_in(15) {
                    "forever"
                } else {
                    *self.rng.pick(&STARTABLE)
                };
                Op::WorkflowStart(WorkflowStartSpec {
                    namespace: NS.into(),
                    name: name.into(),
                    version: None,
                    input: format!(r#"{{"amount":{}}}"#, self.rng.below(100)).into_bytes(),
                    idempotency_key: self
                        .rng
                        .one_in(8)
                        .then(|| format!("k{}", self.rng.below(4))),
                    wait_ms: self.rng.one_in(10).then_some(3_000),
                    run_id: None,
                    group: None,
                    webhook: self
                        .rng
                        .one_in(3)
                        .then(|| "http://sim.invalid/hook".to_string()),
                })
            }
            74..=83 => match self.known_wf_run() {
                Some(run_id) => Op::WorkflowSignal {
                    namespace: NS.into(),
                    run_id,
                    signal_type: (*self.rng.pick(&["approval", "shipped", "other"])).into(),
                    payload: format!(r#"{{"n":{}}}"#, self.rng.below(100)).into_bytes(),
                },
                None => return,
            },
            84..=86 => match self.known_wf_run() {
                Some(run_id) => Op::WorkflowCancel {
                    namespace: NS.into(),
                    run_id,
                    reason: Some("simulated".into()),
                },
                None => return,
            },
            87..=89 if !self.rng.one_in(3) => match self.known_wf_run() {
                // Merged or replaced, continuing a `waitForState` step or not; the answer
                // shows the fields.
                Some(run_id) => Op::WorkflowUpdateState {
                    namespace: NS.into(),
                    run_id,
                    state: format!(r#"{{"sim":{}}}"#, self.rng.below(100)).into_bytes(),
                    replace: self.rng.one_in(4),
                    continue_run: self.rng.one_in(2),
                },
                None => return,
            },
            87..=89 => match self.known_wf_run() {
                // Paused runs are resumed as often: some rest paused at the end.
                Some(run_id) => Op::WorkflowControl {
                    namespace: NS.into(),
                    run_id,
                    control: match self.rng.below(5) {
                        0 | 1 => flo_protocol::WorkflowControl::Pause,
                        2 | 3 => flo_protocol::WorkflowControl::Resume,
                        _ => flo_protocol::WorkflowControl::Continue {
                            reset_visits: self.rng.one_in(2),
                        },
                    },
                },
                None => return,
            },
            90..=91 => match self.known_wf_run() {
                Some(run_id) => Op::WorkflowStatus {
                    namespace: NS.into(),
                    run_id,
                },
                None => return,
            },
            92 => Op::RunList {
                namespace: NS.into(),
                action: "a-echo".into(),
                status: None,
                dead_letter: false,
                limit: Some(5),
                cursor: None,
                // A query the index cannot decide: documents are read and checked.
                query: self
                    .rng
                    .one_in(2)
                    .then(|| r#"status IN ("completed", "failed") AND attempt >= 1"#.into()),
            },
            93 => Op::WorkflowListRuns {
                namespace: NS.into(),
                name: "approval".into(),
                status: None,
                limit: Some(5),
                cursor: None,
                timed_out: None,
            },
            94 if self.rng.one_in(3) => Op::PlanInvalidate {
                namespace: NS.into(),
                event: "refund".into(),
                key: None,
            },
            94 if self.rng.one_in(2) => Op::PlanStatus {
                namespace: NS.into(),
                workflow: "planned".into(),
                plan: None,
            },
            94 => Op::Status,
            95 => {
                let (namespace, name) = (NS.to_string(), "ticking".to_string());
                match self.rng.below(5) {
                    0 => Op::ScheduleList { namespace },
                    4 => Op::WorkflowQuery {
                        namespace,
                        workflow: self.rng.one_in(2).then(|| "process-order".to_string()),
                        query: format!("amount > {} OR status = \"completed\"", self.rng.below(10)),
                        ascending: self.rng.one_in(2),
                        limit: Some(1 + self.rng.below(20) as u32),
                        cursor: None,
                    },
                    1 => Op::ScheduleTrigger { namespace, name },
                    _ => Op::SchedulePause {
                        namespace,
                        name,
                        paused: self.rng.one_in(2),
                    },
                }
            }
            _ => {
                // The client reconnects (to any shard).
                trace(format!("client c{conn} closes"));
                self.closed.insert(conn);
                self.input(shard, Input::ConnClosed { conn });
                let conn = self.new_conn();
                let shard = self.rng.below(self.shards() as u64) as u32;
                self.clients[i] = (conn, shard);
                return;
            }
        };
        self.send(shard, conn, op);
    }

    fn known_run(&mut self) -> Option<String> {
        if self.known_runs.is_empty() {
            return None;
        }
        Some(self.rng.pick(&self.known_runs).clone())
    }

    fn known_wf_run(&mut self) -> Option<String> {
        if self.known_wf_runs.is_empty() {
            return None;
        }
        Some(self.rng.pick(&self.known_wf_runs).clone())
    }

    // ---- workers ----

    fn worker_step(&mut self) {
        let i = self.rng.below(self.workers.len() as u64) as usize;
        self.worker_act(i, false);
    }

    /// One move of worker `i`; `eager`: report every held task and keep awaiting.
    fn worker_act(&mut self, i: usize, eager: bool) {
        let w = &self.workers[i];
        let (conn, shard, id) = (w.conn, w.shard, w.id.clone());
        if !w.registered {
            if !w.registering {
                let op = Op::WorkerRegister(WorkerSpec {
                    namespace: NS.into(),
                    worker_id: id,
                    worker_type: WorkerType::Action,
                    max_concurrency: None,
                    processes: w.actions.clone(),
                    metadata: None,
                    machine_id: None,
                    labels: w.labels.clone(),
                });
                self.workers[i].registering = true;
                self.send(shard, conn, op);
            }
            return;
        }
        if !w.held.is_empty() && (eager || self.rng.one_in(2)) {
            let k = self.rng.below(w.held.len() as u64) as usize;
            let task = self.workers[i].held.remove(k);
            let roll = if eager { 0 } else { self.rng.below(100) };
            let op = match roll {
                0..=59 => Op::TaskComplete {
                    namespace: NS.into(),
                    worker_id: id,
                    task_id: task.task_id,
                    action: task.action,
                    attempt: Some(task.attempt),
                    result: br#"{"done":true}"#.to_vec(),
                    outcome: self
                        .rng
                        .one_in(3)
                        .then(|| (*self.rng.pick(&["approved", "rejected"])).into()),
                    // A step's task may set fields in its run's state.
                    state: (task.state.is_some() && self.rng.one_in(2))
                        .then(|| format!(r#"{{"worker":{}}}"#, self.rng.below(100)).into_bytes()),
                },
                60..=74 => Op::TaskFail {
                    namespace: NS.into(),
                    worker_id: id,
                    task_id: task.task_id,
                    action: task.action,
                    attempt: Some(task.attempt),
                    error: "simulated worker failure".into(),
                    retry: !self.rng.one_in(3),
                    non_retryable: self.rng.one_in(10),
                    error_code: self
                        .rng
                        .one_in(2)
                        .then(|| (*self.rng.pick(&["timeout", "invalid_card"])).into()),
                },
                75..=84 => {
                    let op = Op::TaskTouch {
                        namespace: NS.into(),
                        worker_id: id,
                        task_id: task.task_id.clone(),
                        action: task.action.clone(),
                        extend_ms: 1_000 + self.rng.below(20_000),
                    };
                    self.workers[i].held.push(task);
                    op
                }
                // Forgotten: its lease expires.
                _ => return,
            };
            self.send(shard, conn, op);
            return;
        }
        if !eager && self.rng.one_in(40) {
            // The worker's connection drops; it reconnects to any shard.
            trace(format!("worker {} closes c{conn}", self.workers[i].id));
            self.closed.insert(conn);
            self.input(shard, Input::ConnClosed { conn });
            let conn = self.new_conn();
            let w = &mut self.workers[i];
            w.conn = conn;
            w.shard = self.rng.below(self.c.shards() as u64) as u32;
            w.awaiting = false;
            return;
        }
        if !eager && self.rng.one_in(150) {
            let op = Op::WorkerDrain {
                namespace: NS.into(),
                worker_id: id,
            };
            self.send(shard, conn, op);
            return;
        }
        if eager && self.workers[i].refused {
            return;
        }
        if !self.workers[i].awaiting {
            self.workers[i].awaiting = true;
            let op = Op::TaskAwait {
                namespace: NS.into(),
                worker_id: id,
                actions: self.workers[i].actions.clone(),
                max_tasks: 1 + self.rng.below(4) as u32,
                block_ms: if eager { 1_000 } else { self.rng.below(4_000) },
                home_only: false,
            };
            self.send(shard, conn, op);
        }
    }

    // ---- replies: durability checks and the model ----

    fn process_replies(&mut self) {
        let replies = std::mem::take(&mut self.c.replies);
        for (shard, to, result) in replies {
            let Some(p) = self.pending.remove(&(to.conn, to.request)) else {
                panic!(
                    "shard {shard}: reply to unknown or already answered request {to:?}: {result:?}"
                );
            };
            assert_eq!(
                p.shard, shard,
                "reply from a shard the request was not sent to"
            );
            trace(format!("reply c{} r{}: {result:?}", to.conn, to.request));
            if let Some((kind, run_id)) = target_run(&p.op) {
                self.on_not_found(kind, run_id, p.generation, &p.op, &result);
            }
            self.on_reply(to.conn, p.op, result, p.generation);
        }
    }

    fn generation(&self, kind: RunKind, run_id: &str) -> u32 {
        self.c.nodes[self.c.owner(NS, run_id) as usize].generation(kind, run_id)
    }

    fn owner_facts(&self, key: &str) -> &HashMap<String, u64> {
        &self.c.nodes[self.c.owner(NS, key) as usize].facts
    }

    fn require_durable(&self, key: &str, fact: String, what: &Op) {
        assert!(
            self.owner_facts(key).contains_key(&fact),
            "a reply to {what:?} was released before its record ({fact}) was durable on shard {}",
            self.c.owner(NS, key)
        );
    }

    /// How many times fact `fact` is durable on the shard holding stream record `id`.
    fn stream_fact(&self, id: StreamId, fact: &str) -> u64 {
        let p = id.partition(3);
        let owner = streams::owner_of(&self.c.partitioning(), NS, STREAM, p);
        self.c.nodes[owner as usize].fact(fact)
    }

    /// `generation`: of the run the operation is about, when it was sent.
    fn on_reply(&mut self, conn: u64, op: Op, result: ReplyResult, generation: u32) {
        let reply = ok_reply(&result);
        match (&op, reply) {
            (Op::StreamGroupCreate { .. }, Some(Reply::GroupCreated { .. })) => {
                self.model.stream_ready = true;
            }
            (Op::StreamAppend { .. }, Some(Reply::StreamAppended { ids })) => {
                for id in ids {
                    let fact = format!("sappend {NS}/{STREAM} {id}");
                    let durable = self.stream_fact(*id, &fact) > 0;
                    assert!(durable, "{op:?} answered before {fact}");
                    self.model.appended.insert(*id);
                }
            }
            (Op::StreamGroupRead(_), Some(Reply::StreamRecords { records, .. })) => {
                for r in records {
                    let fact = format!("sdeliver {NS}/{STREAM}/{GROUP} {}", r.id);
                    let deliveries = self.stream_fact(r.id, &fact);
                    assert!(deliveries > 0, "delivered before {fact}");
                    // A delivery made before the ack (its reply still on the way) may come
                    // after the ack's answer; one made after it may not.
                    if let Some(&at_ack) = self.model.acked.get(&r.id) {
                        assert!(
                            deliveries <= at_ack,
                            "record {} was delivered again after its ack was answered",
                            r.id
                        );
                    }
                    self.model.delivered.push(r.id);
                }
            }
            (Op::StreamGroupAck { ids, .. }, Some(Reply::GroupAcked { count }))
                if *count == ids.len() as u64 =>
            {
                for id in ids {
                    let fact = format!("sack {NS}/{STREAM}/{GROUP} {id}");
                    let durable = self.stream_fact(*id, &fact) > 0;
                    assert!(durable, "ack answered before {fact}");
                    let delivered = format!("sdeliver {NS}/{STREAM}/{GROUP} {id}");
                    let n = self.stream_fact(*id, &delivered);
                    self.model.acked.insert(*id, n);
                }
            }
            (Op::KvPut { key, .. }, Some(Reply::KvPut { version })) => {
                self.require_durable(key, format!("kvput {NS}/{key} v{version}"), &op);
                if !self.model.tainted.contains(key) {
                    let v = self.model.kv.entry(key.clone()).or_insert(0);
                    *v = (*v).max(*version);
                }
            }
            (Op::ActionInvoke(_), Some(Reply::Invoked { run_id, .. })) => {
                self.require_durable(run_id, format!("run {NS}/{run_id}"), &op);
                self.model.runs.insert(run_id.clone());
                self.known_runs.push(run_id.clone());
            }
            (Op::ActionInvoke(_), Some(Reply::Run(info))) => {
                let run_id = &info.run_id;
                self.require_durable(run_id, format!("run {NS}/{run_id}"), &op);
                if info.status == RunStatus::Completed {
                    self.require_durable(run_id, format!("completed {NS}/{run_id}"), &op);
                }
                self.model.runs.insert(run_id.clone());
                self.known_runs.push(run_id.clone());
            }
            (Op::ActionRegister(spec), Some(Reply::Action(info))) => {
                for node in &self.c.nodes {
                    let fact = format!("action {NS}/{} v{}", spec.name, info.version);
                    assert!(
                        node.facts.contains_key(&fact),
                        "registration answered before {fact} was durable on shard {}",
                        node.engine.shard()
                    );
                }
                let v = self.model.actions.entry(spec.name.clone()).or_insert(0);
                *v = (*v).max(info.version);
            }
            (
                Op::WorkflowCreate { .. },
                Some(Reply::WorkflowCreated {
                    name,
                    version,
                    created,
                    ..
                }),
            ) => {
                // New or repeated (`created: false`, e.g. after a crash cut the fan-out of
                // the first creation): answered only once every shard has it durably.
                let _ = created;
                for node in self.c.nodes.iter() {
                    let fact = format!("workflow {NS}/{name} v{version}");
                    assert!(
                        node.facts.contains_key(&fact),
                        "workflow creation answered before {fact} was durable on shard {}",
                        node.engine.shard()
                    );
                }
                self.model.workflows.insert((name.clone(), version.clone()));
            }
            (Op::WorkflowSetEnabled { enabled: false, .. }, Some(Reply::Workflow(_))) => {
                self.model.ticking_disabled = true;
            }
            (Op::ScheduleTrigger { .. }, Some(Reply::WorkflowStarted { run_id, .. })) => {
                self.require_durable(run_id, format!("wfrun {NS}/{run_id}"), &op);
                self.model.wf_runs.insert(run_id.clone());
                self.known_wf_runs.push(run_id.clone());
            }
            (Op::WorkflowStart(_), Some(Reply::WorkflowStarted { run_id, .. })) => {
                self.require_durable(run_id, format!("wfrun {NS}/{run_id}"), &op);
                self.model.wf_runs.insert(run_id.clone());
                self.known_wf_runs.push(run_id.clone());
            }
            (Op::WorkflowUpdateState { state, .. }, Some(Reply::WorkflowRun(info))) => {
                // The answer is the run after the update: the fields are in its state
                // (a step that finished in the same turn may have laid its own over them).
                let sent: serde_json::Value = serde_json::from_slice(state).unwrap();
                let now: serde_json::Value = info
                    .state
                    .as_deref()
                    .map(|s| serde_json::from_slice(s).unwrap())
                    .unwrap_or_default();
                assert_eq!(
                    now.get("sim"),
                    sent.get("sim"),
                    "update-state answered {} with a state without its fields: {now}",
                    info.run_id
                );
                self.counts.state_updates += 1;
            }
            (Op::WorkflowStart(_), Some(Reply::WorkflowRun(info))) => {
                let run_id = &info.run_id;
                self.require_durable(run_id, format!("wfrun {NS}/{run_id}"), &op);
                if info.status.is_final() {
                    self.require_durable(run_id, format!("wfend {NS}/{run_id}"), &op);
                }
                self.model.wf_runs.insert(run_id.clone());
                self.known_wf_runs.push(run_id.clone());
            }
            (Op::TaskComplete { task_id, .. }, Some(Reply::Done)) => {
                // A run created again with the same id (a forgotten run's idempotency key)
                // since the report was sent reset the facts of the one it completed.
                let now = self.generation(RunKind::Action, task_id);
                if now == generation {
                    self.require_durable(task_id, format!("completed {NS}/{task_id}"), &op);
                    self.model.completed.insert(task_id.clone(), now);
                }
            }
            (
                Op::TaskFail {
                    task_id,
                    attempt: Some(a),
                    ..
                },
                Some(_),
            ) if self.generation(RunKind::Action, task_id) == generation => {
                self.require_durable(task_id, format!("failed {NS}/{task_id} a{a}"), &op);
            }
            (Op::TaskAwait { worker_id, .. }, _) => self.on_tasks(conn, worker_id, result),
            (Op::WorkflowSignal { run_id, .. }, Some(Reply::Done)) => {
                let generation = self.generation(RunKind::Workflow, run_id);
                let acked = self.model.signals.entry(run_id.clone()).or_insert((0, 0));
                if acked.0 != generation {
                    // A new run with this id (the earlier one was forgotten).
                    *acked = (generation, 0);
                }
                acked.1 += 1;
                let acked = acked.1;
                let have = self
                    .owner_facts(run_id)
                    .get(&format!("signal {NS}/{run_id}"))
                    .copied()
                    .unwrap_or(0);
                assert!(
                    have >= acked,
                    "{acked} signals to {run_id} acknowledged, {have} durable"
                );
            }
            (Op::WorkflowCancel { run_id, .. }, Some(Reply::WorkflowRun(info))) => {
                assert_eq!(info.status, WorkflowRunStatus::Cancelled);
                self.require_durable(run_id, format!("wfend {NS}/{run_id}"), &op);
                let generation = self.generation(RunKind::Workflow, run_id);
                self.model.wf_cancelled.insert(run_id.clone(), generation);
            }
            (Op::RunCancel { run_id, .. }, Some(Reply::Run(info))) => {
                assert_eq!(info.status, RunStatus::Cancelled);
                self.require_durable(run_id, format!("runcancel {NS}/{run_id}"), &op);
            }
            (Op::WorkerRegister(spec), _) => {
                if let Some(w) = self.workers.iter_mut().find(|w| w.id == spec.worker_id) {
                    w.registering = false;
                    w.registered = result.is_ok();
                }
            }
            _ => {}
        }
    }

    /// An acknowledged run answered `not_found`: only once a durable record forgot it (the
    /// run with its id when the operation was sent, or a later one), which only happens
    /// once it finished and its retention window passed (checked as the record becomes
    /// durable: `Node::note_retention`). A status answer says so.
    fn on_not_found(
        &mut self,
        kind: RunKind,
        run_id: &str,
        generation: u32,
        op: &Op,
        result: &ReplyResult,
    ) {
        let Err(e) = result else {
            return;
        };
        let acked = match kind {
            RunKind::Action => self.model.runs.contains(run_id),
            RunKind::Workflow => self.model.wf_runs.contains(run_id),
        };
        if e.code != ErrorCode::NotFound || !acked {
            return;
        }
        let node = &self.c.nodes[self.c.owner(NS, run_id) as usize];
        let forgotten = node.forgotten_generation(kind, run_id);
        assert!(
            forgotten >= generation.max(1),
            "acknowledged run {run_id} answered {e:?} before a durable record forgot it \
             (run {generation} with this id when asked, {forgotten} forgotten; archive record \
             {:?}, durably forgotten before LSN {}, durable up to {})",
            node.archive_of(kind, run_id),
            node.forgotten_before,
            node.engine.durable_lsn()
        );
        let explained = matches!(op, Op::RunStatus { .. } | Op::WorkflowStatus { .. });
        // Ids the shard counted out (`ACTION-N`, `wfrun-N`) are known to have been issued;
        // an id made of an idempotency key (`action:key`) is not told apart from one never
        // used.
        let counted = !run_id.contains(':');
        assert!(
            !explained || !counted || e.message.contains("expired after the retention window"),
            "a forgotten run's not_found does not say why: {e:?}"
        );
        self.counts.expired_answers += 1;
    }

    fn on_tasks(&mut self, conn: u64, worker_id: &str, result: ReplyResult) {
        if let Ok(Reply::Tasks(tasks)) = &result {
            for t in tasks {
                let fact = format!("leased {NS}/{} a{}", t.task_id, t.attempt);
                assert!(
                    self.owner_facts(&t.task_id).contains_key(&fact),
                    "tasks left for a worker before their lease ({fact}) was durable"
                );
            }
        }
        let Some(w) = self.workers.iter_mut().find(|w| w.id == worker_id) else {
            return;
        };
        if w.conn != conn {
            // Answered on a connection that closed: the tasks are lost until their lease
            // expires (the runtime drops replies to closed connections).
            return;
        }
        w.awaiting = false;
        match result {
            Ok(Reply::Tasks(tasks)) => w.held.extend(tasks),
            Err(e) if e.message.starts_with("worker ") => w.registered = false,
            // Refused (an action not defined yet): not again in this round of the end.
            Err(_) => w.refused = true,
            _ => {}
        }
    }

    // ---- crashes ----

    /// Where a crash strikes shard `s`: a torn batch, a renamed snapshot kept or not,
    /// unlinked files back or not, and (one fault at a time) a damaged newest snapshot.
    fn crash_plan(&mut self, s: u32) -> CrashPlan {
        let node = &self.c.nodes[s as usize];
        let len = node.writing.as_ref().map_or(0, |b| b.bytes.len());
        let unlinked = node.unlinked.len();
        // One fault at a time: a snapshot is damaged only once one was installed since the
        // last damage (boot set the damaged one aside: the two kept are good again).
        let damage_ok = self.damaged_at[s as usize].is_none_or(|n| node.stats.snapshots > n);
        match node.job.as_ref().map(|j| &j.phase) {
            None => self.counts.crash_idle += 1,
            Some(SnapPhase::Waiting | SnapPhase::Writing) => self.counts.crash_writing += 1,
            Some(SnapPhase::Renamed) => self.counts.crash_renamed += 1,
            Some(SnapPhase::Deleting { .. }) => self.counts.crash_deleting += 1,
        }
        let torn = match self.rng.below(3) {
            0 => 0,
            1 => len,
            _ => self.rng.below(len as u64 + 1) as usize,
        };
        let unlinked_back: Vec<bool> = (0..unlinked).map(|_| self.rng.one_in(2)).collect();
        if unlinked_back.contains(&true) {
            self.counts.crash_unlinked_back += 1;
        }
        let damage_newest = damage_ok && self.rng.one_in(3);
        if damage_newest {
            self.damaged_at[s as usize] = Some(self.c.nodes[s as usize].stats.snapshots);
        }
        CrashPlan {
            torn,
            roll_begun: self.rng.one_in(2),
            renamed_kept: self.rng.one_in(2),
            unlinked_back,
            damage_newest,
            flip_acked: self.rng.one_in(6),
            drop_segment: self.rng.one_in(6),
        }
    }

    fn crash_all(&mut self) {
        self.crashes += 1;
        let all: Vec<u32> = (0..self.shards()).collect();
        let plans: Vec<CrashPlan> = all.iter().map(|&s| self.crash_plan(s)).collect();
        trace(format!("CRASH of every shard: {plans:?}"));
        let recovered = self.c.crash_planned(&all, &plans);
        trace(format!("recovered: {recovered:?}"));
        for r in &recovered {
            self.counts.fallbacks += (r.passed_over > 0) as u64;
            self.counts.full_replays += (r.snapshot == 0) as u64;
        }
        for &s in &all {
            let node = &self.c.nodes[s as usize];
            check_once_facts_all(s, &node.facts);
            check_index(s, &node.engine, 0, "after replay");
            check_archive_on_disk(node, "after a crash");
        }
        self.check_model("after a crash");
        // Every connection died with the server; workers register again.
        self.pending.clear();
        let shards = self.shards() as u64;
        for i in 0..self.clients.len() {
            let conn = self.new_conn();
            self.clients[i] = (conn, self.rng.below(shards) as u32);
        }
        for i in 0..self.workers.len() {
            let conn = self.new_conn();
            let shard = self.rng.below(shards) as u32;
            let w = &mut self.workers[i];
            w.conn = conn;
            w.shard = shard;
            w.registered = false;
            w.registering = false;
            w.awaiting = false;
            w.held.clear();
        }
        for s in all {
            self.input(s, Input::Started);
        }
        // Definitions whose creation the crash cut short are made again.
        let defined = self.model.actions.len() == WASM_ACTIONS.len() + USER_ACTIONS.len()
            && self.model.workflows.len() == WORKFLOWS.len();
        if !defined && !self.final_phase {
            self.setup();
        }
    }

    // ---- checks ----

    /// Replay equals live and the index covers the fold, on every shard at rest.
    fn checkpoint(&mut self) {
        for s in 0..self.shards() {
            let node = &self.c.nodes[s as usize];
            let at_rest = node.writing.is_none()
                && node.engine.pending_log_bytes() == 0
                && node.engine.durable_lsn() == node.engine.last_lsn();
            if node.continues == 0 {
                let executing = node.engine.in_flight().executions;
                check_index(s, &node.engine, executing, "live");
            }
            check_archive_on_disk(node, "live");
            if at_rest {
                check_replay(&self.c, s);
            }
        }
    }

    fn check_model(&self, when: &str) {
        let now = self.c.now();
        // Every acknowledged append is there (the stream has no retention).
        for id in &self.model.appended {
            let p = id.partition(3);
            let owner = streams::owner_of(&self.c.partitioning(), NS, STREAM, p);
            let part = self
                .c
                .engine(owner)
                .state()
                .streams
                .partition(NS, STREAM, p);
            assert!(
                part.is_some_and(|part| part.entry(*id).is_some()),
                "{when}: stream record {id} was acknowledged appended and is gone"
            );
            let acked = part
                .and_then(|part| part.groups.get(GROUP))
                .is_some_and(|g| {
                    let passed = g.cursor >= Some(*id) || g.done_ahead.contains(id);
                    !g.pending.contains_key(id) && passed
                });
            assert!(
                !self.model.acked.contains_key(id) || acked,
                "{when}: stream record {id} was acknowledged by the group and is pending again"
            );
        }
        let state = |key: &str| self.c.engine(self.c.owner(NS, key)).state();
        for (key, v) in &self.model.kv {
            if self.model.tainted.contains(key) {
                continue;
            }
            let got = state(key).kv.get(NS, key, now).map(|e| e.version);
            assert!(
                got.is_some_and(|g| g >= *v),
                "{when}: key {key} was acknowledged at version {v}, now {got:?}"
            );
        }
        // Every record is durable here: a run is gone exactly when its durable log says
        // it was archived and then forgotten (so finished, its window past).
        let forgot = |kind: RunKind, key: &str| {
            self.c.nodes[self.c.owner(NS, key) as usize].forgot(kind, key)
        };
        for run_id in &self.model.runs {
            let forgotten = forgot(RunKind::Action, run_id);
            let status = run_status(state(run_id), run_id);
            assert_eq!(
                status.is_none(),
                forgotten,
                "{when}: acknowledged run {run_id} is {status:?}, forgotten: {forgotten}"
            );
        }
        let earlier = |kind: RunKind, key: &str, generation: u32| {
            self.c.nodes[self.c.owner(NS, key) as usize].generation(kind, key) != generation
        };
        for (run_id, &generation) in &self.model.completed {
            if earlier(RunKind::Action, run_id, generation) {
                continue;
            }
            let status = run_status(state(run_id), run_id);
            assert!(
                status == Some(RunStatus::Completed) || forgot(RunKind::Action, run_id),
                "{when}: task {run_id} acknowledged completed, now {status:?}"
            );
        }
        for run_id in &self.model.wf_runs {
            let forgotten = forgot(RunKind::Workflow, run_id);
            let status = wf_status(state(run_id), run_id);
            assert_eq!(
                status.is_none(),
                forgotten,
                "{when}: acknowledged workflow run {run_id} is {status:?}, forgotten: {forgotten}"
            );
        }
        for (run_id, &generation) in &self.model.wf_cancelled {
            if earlier(RunKind::Workflow, run_id, generation) {
                continue;
            }
            let status = wf_status(state(run_id), run_id);
            assert!(
                status == Some(WorkflowRunStatus::Cancelled) || forgot(RunKind::Workflow, run_id),
                "{when}: workflow run {run_id} acknowledged cancelled, now {status:?}"
            );
        }
        for node in &self.c.nodes {
            let registry = &node.engine.state().registry;
            for (name, v) in &self.model.actions {
                let got = registry.get(NS, name).map(|d| d.version);
                assert!(
                    got.is_some_and(|g| g >= *v),
                    "{when}: shard {} lost action {name} v{v} ({got:?})",
                    node.engine.shard()
                );
            }
            for (name, version) in &self.model.workflows {
                let has = node
                    .engine
                    .state()
                    .workflows
                    .def(NS, name)
                    .is_some_and(|e| e.get(Some(version)).is_some());
                assert!(
                    has,
                    "{when}: shard {} lost workflow {name} v{version}",
                    node.engine.shard()
                );
            }
        }
    }

    // ---- the end: quiescence, liveness ----

    fn finish(&mut self) {
        self.final_phase = true;
        trace("FINAL PHASE".into());
        // Drained workers come back; a sweeper takes every user action.
        for w in &mut self.workers {
            w.registered = false;
            w.registering = false;
        }
        let conn = self.new_conn();
        self.workers.push(Worker {
            id: "sweeper".into(),
            actions: USER_ACTIONS.iter().map(|a| a.to_string()).collect(),
            labels: Some(GPU_LABELS.into()),
            conn,
            shard: 0,
            registered: false,
            registering: false,
            awaiting: false,
            refused: false,
            held: Vec::new(),
        });
        // Definitions a crash kept from being made are made now.
        self.setup();
        let mut quiet_rounds = 0;
        for round in 0..FINAL_ROUNDS_MAX {
            let before: Vec<u64> = self.c.nodes.iter().map(|n| n.engine.last_lsn()).collect();
            self.quiesce();
            let after: Vec<u64> = self.c.nodes.iter().map(|n| n.engine.last_lsn()).collect();
            quiet_rounds = if before == after { quiet_rounds + 1 } else { 0 };
            if round >= 10 && quiet_rounds >= 3 {
                break;
            }
            for w in &mut self.workers {
                w.refused = false;
            }
            // A schedule ticks forever: its workflow disabled, the cluster can rest.
            if !self.model.ticking_disabled {
                let conn = self.new_conn();
                let op = Op::WorkflowSetEnabled {
                    namespace: NS.into(),
                    name: "ticking".into(),
                    enabled: false,
                };
                self.send(0, conn, op);
            }
            trace(format!("final clock +{FINAL_JUMP_MS}"));
            self.c.advance(FINAL_JUMP_MS);
            for s in 0..self.shards() {
                self.input(s, Input::Tick);
            }
        }
        assert!(quiet_rounds >= 3, "the cluster never came to rest");
        self.check_at_rest();

        let now_before_restart = self.c.now();
        // Everything is durable: a restart rebuilds exactly the same states.
        let digests: Vec<Vec<String>> = self
            .c
            .nodes
            .iter()
            .map(|n| n.engine.state().digest())
            .collect();
        self.crashes = CRASHES_MAX;
        self.crash_all();
        for (s, digest) in digests.iter().enumerate() {
            assert_eq!(
                &self.c.nodes[s].engine.state().digest(),
                digest,
                "shard {s}: a restart at rest changed the state"
            );
        }
        self.quiesce();
        self.count_storage(now_before_restart);
        eprintln!("{}", self.stats());
        TOTALS.with(|t| t.borrow_mut().add(&self.counts));
        let executions = self.c.executions.len();
        assert_eq!(
            executions, 0,
            "work was executed again after a restart at rest"
        );
        assert!(
            self.c.deliveries.is_empty(),
            "a webhook was sent again after a restart at rest"
        );
        self.check_model("at the end");
    }

    /// Adds what the shards' files and retention did to the seed's counts; `now`: the end.
    fn count_storage(&mut self, now: u64) {
        let retention = self.c.storage.retention_ms;
        let old = |created: u64| created.saturating_add(retention) < now;
        for n in &self.c.nodes {
            self.counts.snapshots_installed += n.stats.snapshots;
            self.counts.segments_rolled += n.stats.rolls;
            self.counts.segments_deleted += n.stats.segments_deleted;
            self.counts.runs_forgotten += n.forgotten as u64;
            let st = n.engine.state();
            for (_, sched) in st.schedules.iter() {
                self.counts.ticks_fired += sched.fired;
                self.counts.ticks_skipped += sched.skipped;
            }
            self.counts.old_in_flight += st
                .runs
                .iter()
                .filter(|(_, _, r)| old(r.created_at_ms))
                .count() as u64;
            self.counts.old_in_flight += st
                .workflows
                .all_runs()
                .filter(|(_, _, r)| old(r.created_at_ms))
                .count() as u64;
        }
        self.counts.reads_missed = self.c.reads_missed;
        self.counts.media_faults = self.c.media_faults;
        self.counts.seeds += 1;
    }

    /// A one-line summary of what the seed exercised.
    fn stats(&self) -> String {
        let mut runs = BTreeMap::new();
        let mut wf = BTreeMap::new();
        let mut records = Vec::new();
        for n in &self.c.nodes {
            let st = n.engine.state();
            for (_, _, r) in st.runs.iter() {
                *runs.entry(format!("{:?}", r.status)).or_insert(0) += 1;
            }
            for (_, _, r) in st.workflows.all_runs() {
                *wf.entry(format!("{:?}", r.status())).or_insert(0) += 1;
            }
            records.push(n.engine.last_lsn());
            *runs.entry("archived".to_string()).or_insert(0) += st.archive.len();
        }
        format!(
            "{} shards, {} inputs, {} crashes, {} workflows acked, records {records:?}, runs {runs:?}, workflow runs {wf:?}, \
             {} acked puts, {} acked completions, stream records {} appended {} delivered {} \
             acked; retention {} ms, segments of {} bytes: {:?}",
            self.shards(),
            self.c.steps,
            self.crashes,
            self.model.workflows.len(),
            self.model.kv.len(),
            self.model.completed.len(),
            self.model.appended.len(),
            self.model.delivered.len(),
            self.model.acked.len(),
            self.c.storage.retention_ms,
            self.c.storage.segment_bytes,
            self.counts
        )
    }

    /// Runs until nothing moves: messages, writes, continues, wake-ups, Idle, every
    /// execution answered (successfully), every worker reporting and awaiting.
    fn quiesce(&mut self) {
        for _ in 0..200_000 {
            let mut moved = false;
            let pairs: Vec<(u32, u32)> = self
                .c
                .links
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            for (from, to) in pairs {
                trace(format!("deliver {from} -> {to}"));
                self.c.deliver(from, to);
                moved = true;
            }
            for s in 0..self.shards() {
                if self.c.nodes[s as usize].continues > 0 {
                    self.c.nodes[s as usize].continues -= 1;
                    self.input(s, Input::Continue);
                    moved = true;
                }
                if self.c.nodes[s as usize].writing.is_some() {
                    self.write(s);
                    moved = true;
                }
            }
            while !self.c.executions.is_empty() {
                self.answer_execution();
                moved = true;
            }
            while !self.c.compiles.is_empty() {
                self.answer_compile();
                moved = true;
            }
            while !self.c.log_reads.is_empty() {
                self.c.answer_read(0);
                moved = true;
            }
            while !self.c.deliveries.is_empty() {
                self.answer_delivery();
                moved = true;
            }
            self.c.guest_values.clear();
            self.process_replies();
            for i in 0..self.workers.len() {
                let before = (self.workers[i].held.len(), self.workers[i].awaiting);
                let registering = self.workers[i].registering;
                self.worker_act(i, true);
                if (self.workers[i].held.len(), self.workers[i].awaiting) != before
                    || self.workers[i].registering != registering
                {
                    moved = true;
                }
            }
            self.process_replies();
            let before_wakes = self.c.steps;
            self.fire_wakes();
            moved |= self.c.steps != before_wakes;
            if !moved {
                let marker = |c: &Cluster| {
                    (
                        c.links.values().map(VecDeque::len).sum::<usize>(),
                        c.replies.len(),
                        c.executions.len(),
                        c.nodes.iter().filter(|n| n.writing.is_some()).count(),
                        c.nodes.iter().map(|n| n.continues).sum::<u32>(),
                    )
                };
                let before = marker(&self.c);
                for s in 0..self.shards() {
                    self.input(s, Input::Idle);
                }
                if marker(&self.c) == before {
                    return;
                }
            }
        }
        panic!("no quiescence: the cluster keeps moving (a livelock?)");
    }

    fn check_at_rest(&mut self) {
        let now = self.c.now();
        for s in 0..self.shards() {
            let node = &self.c.nodes[s as usize];
            let e = &node.engine;
            assert_eq!(e.durable_lsn(), e.last_lsn(), "shard {s}: not all durable");
            let (pending, _, _) = e.state().webhooks.counts();
            assert_eq!(
                pending, 0,
                "shard {s}: webhook deliveries still pending at rest"
            );
            let f = e.in_flight();
            assert_eq!(f.held, 0, "shard {s}: effects still held at rest: {f:?}");
            // Only the awaits forwarded to their worker's home may wait for an answer.
            let forwarded = self
                .workers
                .iter()
                .filter(|w| w.awaiting && w.shard == s && self.c.owner(NS, &w.id) != s)
                .count();
            assert!(
                f.calls <= forwarded,
                "shard {s}: calls never answered: {f:?} ({forwarded} forwarded awaits)"
            );
            assert_eq!(f.executions, 0, "shard {s}: {f:?}");
            assert!(
                !f.definitions_busy,
                "shard {s}: a definition change never ended"
            );
            let state = e.state();
            // 4: every guest write for another shard reached it, once.
            assert!(
                state.forwards.is_empty(),
                "shard {s}: guest KV writes never delivered: {:?}",
                state.forwards
            );
            for (lsn, record) in &node.records {
                let Record::RunCompleted {
                    namespace,
                    kv_writes,
                    ..
                } = record
                else {
                    continue;
                };
                let mut owners: Vec<u32> = kv_writes
                    .iter()
                    .map(|w| self.c.owner(namespace, &w.key))
                    .filter(|&o| o != s)
                    .collect();
                owners.dedup();
                for o in owners {
                    let fact = format!("remote o{s} l{lsn}");
                    assert_eq!(
                        self.c.nodes[o as usize].fact(&fact),
                        1,
                        "guest writes of shard {s}'s completion at {lsn} on shard {o}"
                    );
                }
            }
            // 5: timers and leases fired, runs ran, and finished runs left memory (at rest
            // nothing waits on a finished run).
            for (ns, id, run) in state.runs.iter() {
                assert!(
                    !run.status.is_final(),
                    "shard {s}: run {ns}/{id} is {:?} at rest and not archived",
                    run.status
                );
                assert!(
                    run.status.is_final(),
                    "shard {s}: run {ns}/{id} still {:?} at rest (available at {}, now {now}, \
                     lease {:?})",
                    run.status,
                    run.available_at_ms,
                    run.lease.as_ref().map(|l| (&l.worker_id, l.expires_at_ms))
                );
            }
            for (ns, id, run) in state.workflows.all_runs() {
                assert!(
                    !run.status().is_final(),
                    "shard {s}: workflow run {ns}/{id} is {:?} at rest and not archived",
                    run.status()
                );
                // A paused run's due timers wait for its resume (which advances it).
                for cursor in run.cursors().filter(|_| !run.held) {
                    assert!(
                        cursor.phase.timer_ms().is_none_or(|t| t > now),
                        "shard {s}: workflow run {ns}/{id} timer at {:?} never fired (now {now})",
                        cursor.phase.timer_ms()
                    );
                }
                assert!(
                    waits_for_a_signal_only(e, ns, id, 0),
                    "shard {s}: workflow run {ns}/{id} is {:?} at rest, at {:?} branches {:?}",
                    run.status(),
                    run.lead,
                    run.branches
                );
            }
            check_index(s, e, 0, "at rest");
            check_replay(&self.c, s);
            check_archive_on_disk(node, "at rest");
            self.check_forgetting_kept_up(s);
        }
        self.check_model("at rest");
    }

    /// At rest at the end, the last housekeeping tick came at the current time and forgot
    /// whatever was due: every run still retained was archived less than its window (plus
    /// the second of one time mark of the run index) ago, and the index holds exactly the
    /// runs the durable log archived and did not forget.
    fn check_forgetting_kept_up(&self, s: u32) {
        let node = &self.c.nodes[s as usize];
        let now = self.c.now();
        let retained = &node.archived[node.forgotten..];
        for a in retained {
            let (lsn, at) = (a.lsn, node.committed_at(a.lsn));
            assert!(
                at + TIME_MARK_MS + node.retention_ms > now,
                "shard {s}: the run archived at LSN {lsn} ({at} ms) is still retained at \
                 {now} ms, past its window ({} ms)",
                node.retention_ms
            );
        }
        assert_eq!(
            node.engine.state().archive.len(),
            retained.len(),
            "shard {s}: runs in the index, and archived and not forgotten by the durable log"
        );
    }
}

/// An action run's status, live or archived.
fn run_status(state: &flo_engine::testing::ShardState, run_id: &str) -> Option<RunStatus> {
    use flo_engine::testing::RunKind;
    use flo_engine::testing::archived as archive;
    match state.runs.get(NS, run_id) {
        Some(run) => Some(run.status),
        None => state
            .archived(RunKind::Action, NS, run_id)
            .map(|e| archive::action_status(e.status)),
    }
}

/// A workflow run's status, live or archived.
fn wf_status(state: &flo_engine::testing::ShardState, run_id: &str) -> Option<WorkflowRunStatus> {
    use flo_engine::testing::RunKind;
    use flo_engine::testing::archived as archive;
    match state.workflows.run(NS, run_id) {
        Some(run) => Some(run.status()),
        None => state
            .archived(RunKind::Workflow, NS, run_id)
            .map(|e| archive::workflow_status(e.status)),
    }
}

/// A non-final run may rest only on a signal with no deadline (itself or down its
/// children), each of its branches on one or at a join that another such branch holds up.
fn waits_for_a_signal_only(e: &Engine, ns: &str, id: &str, depth: u32) -> bool {
    let Some(run) = e.state().workflows.run(ns, id) else {
        return false;
    };
    if depth > 16 {
        return false;
    }
    // A paused run rests until resumed.
    if run.held {
        return true;
    }
    let mut held = false;
    for cursor in run.cursors() {
        let ok = match (&cursor.phase, cursor.phase.wait()) {
            (RunPhase::Joined { .. }, _) => true,
            (
                _,
                Some(StepWait::Signal {
                    deadline_ms: None, ..
                }),
            ) => {
                held = true;
                true
            }
            (_, Some(StepWait::ChildRun { run_id })) => {
                held = true;
                waits_for_a_signal_only(e, ns, run_id, depth + 1)
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    held
}

/// 3 and 4: one completion per run, one end per workflow run, one application per remote
/// write — among the records just made durable.
fn check_once_facts(shard: u32, added: &[Record], facts: &HashMap<String, u64>) {
    let mut mine = HashMap::new();
    for r in added {
        crate::cluster::facts_of(r, &mut mine);
    }
    for key in mine.keys() {
        check_once(shard, key, facts);
    }
}

fn check_once_facts_all(shard: u32, facts: &HashMap<String, u64>) {
    for key in facts.keys() {
        check_once(shard, key, facts);
    }
}

fn check_once(shard: u32, key: &str, facts: &HashMap<String, u64>) {
    let once = ["completed ", "wfend ", "remote ", "wfrun ", "run ", "tick "];
    if once.iter().any(|p| key.starts_with(p)) {
        // None: about a run whose id a later run took (`Node::note_creation`).
        let n = facts.get(key).copied().unwrap_or(0);
        assert!(n <= 1, "shard {shard}: durable log holds `{key}` {n} times");
    }
}

/// 6: every pending run is queued (or executing: at most `executing` WASM runs may be
/// out of the queue), every leased run watched, every timed workflow run timed.
fn check_index(shard: u32, e: &Engine, executing: usize, when: &str) {
    let state = e.state();
    let queued = e.index().runs.queued_runs();
    let leased = e.index().runs.leased_runs();
    let timed = e.index().timed_workflows();
    let mut unqueued = Vec::new();
    for (ns, id, run) in state.runs.iter() {
        let key = (ns.to_string(), id.to_string());
        match run.status {
            RunStatus::Pending if !queued.contains(&key) => unqueued.push(key),
            RunStatus::Running => assert!(
                run.lease.is_none() || leased.contains(&key),
                "{when}: shard {shard}: leased run {ns}/{id} has no lease timer"
            ),
            _ => {}
        }
    }
    let wasm_unqueued = unqueued.iter().all(|(ns, id)| {
        let action = &state.runs.get(ns, id).unwrap().action;
        state
            .registry
            .get(ns, action)
            .is_some_and(|d| d.kind == ActionKind::Wasm)
    });
    assert!(
        unqueued.len() <= executing && wasm_unqueued,
        "{when}: shard {shard}: pending runs missing from the queues: {unqueued:?} \
         ({executing} executing)"
    );
    for (ns, id, run) in state.workflows.all_runs() {
        if run.status().is_final() {
            continue;
        }
        // A paused run's retry timer fired and found it paused: its resume advances it.
        // A step executed in the shard's slots has no record before it finished: its
        // timer fired and it waits for a slot or executes.
        let taken = |step: Option<&str>| step.is_some_and(|s| e.step_taken(ns, id, s));
        for cursor in run
            .cursors()
            .filter(|c| !run.held && !taken(c.phase.step()))
        {
            let deadline = matches!(
                cursor.phase.wait(),
                Some(StepWait::Signal {
                    deadline_ms: Some(_),
                    ..
                })
            );
            if cursor.phase.timer_ms().is_some() || deadline {
                assert!(
                    timed.contains(&(ns.to_string(), id.to_string())),
                    "{when}: shard {shard}: workflow run {ns}/{id} (timer {:?}, wait {:?}) has \
                     no timer entry",
                    cursor.phase.timer_ms(),
                    cursor.phase.wait()
                );
            }
        }
    }
}

/// 1: a fresh engine replaying the shard's durable log has the same fold as the live one,
/// and so does every snapshot + the log after it.
fn check_replay(c: &Cluster, shard: u32) {
    let node = &c.nodes[shard as usize];
    let retention = c.storage.retention_ms;
    let fresh = replayed(shard, c.part, &c.clock, retention, &node.payloads);
    let live = node.engine.state().digest();
    assert_same_fold(&live, &fresh, &format!("shard {shard}: replay"));
    check_index(shard, &fresh, 0, "after replay");
    // Retention goes on alike: the run index's time marks (not in the digest) agree.
    let cutoffs: Vec<u64> = node.archived[node.forgotten..]
        .iter()
        .flat_map(|a| [a.finished_ms, a.finished_ms + TIME_MARK_MS])
        .collect();
    let marks = |e: &Engine| -> Vec<Option<u64>> {
        let index = &e.state().archive;
        cutoffs.iter().map(|&c| index.forget_before(c)).collect()
    };
    let live_marks = marks(&node.engine);
    assert_eq!(
        marks(&fresh),
        live_marks,
        "shard {shard}: replay: retention"
    );
    // Snapshot + the log after it equals the full replay: from each snapshot on disk, the
    // one being written, and one taken now.
    let now = snapshot_bytes(&node.engine);
    let images = node
        .snaps
        .iter()
        .filter(|f| !f.damaged)
        .map(|f| (f.lsn, f.image.clone()))
        .chain(node.job.iter().map(|j| (j.lsn, j.image.to_bytes())))
        .chain([now]);
    for (lsn, image) in images {
        let mut engine = new_engine_with(shard, c.part, &c.clock, retention);
        let at = engine
            .restore(&image)
            .unwrap_or_else(|e| panic!("shard {shard}: snapshot at {lsn}: {e}"));
        for (l, payload) in node.payloads.iter().filter(|(l, _)| *l > at) {
            engine
                .replay(*l, payload)
                .unwrap_or_else(|e| panic!("replay of record {l}: {e}"));
        }
        engine.recovered(node.payloads.last().map_or(0, |p| p.0), 1);
        let what = format!("shard {shard}: snapshot at {lsn} + tail");
        assert_same_fold(&live, &engine, &what);
        assert_eq!(marks(&engine), live_marks, "{what}: retention");
        check_index(shard, &engine, 0, "after a snapshot");
    }
}

/// The engine's snapshot image in one piece.
fn snapshot_bytes(engine: &Engine) -> (u64, Vec<u8>) {
    let (lsn, image) = engine.snapshot();
    (lsn, image.to_bytes())
}

/// Every retained run's archive record that is durable is in a segment file (the run is
/// read back from it), with the records its document points at (`Refs`: each payload
/// written once), the oldest reads back as an archive record, and the log is kept from the
/// earliest of them all.
fn check_archive_on_disk(node: &Node, when: &str) {
    let s = node.shard();
    let durable = node.engine.durable_lsn();
    let retained_from = node.engine.retained_from_lsn();
    for (_, e) in node.engine.state().archive.iter() {
        assert!(
            e.lsn > durable || node.on_disk(e.lsn),
            "{when}: shard {s}: a retained run's archive record {} is in no segment (segments \
             {:?}, runs retained from {:?})",
            e.lsn,
            node.segment_firsts(),
            retained_from
        );
        let Ok(i) = node.records.binary_search_by_key(&e.lsn, |(l, _)| *l) else {
            continue;
        };
        let refs = match &node.records[i].1 {
            Record::RunArchived {
                run: archived::ArchivedRun::Workflow(doc),
                ..
            } => doc.refs.clone(),
            Record::RunArchived {
                run: archived::ArchivedRun::Action(_, refs),
                ..
            } => refs.clone(),
            _ => None,
        };
        for at in refs.map(|r| r.lsns()).unwrap_or_default() {
            assert!(
                retained_from.is_some_and(|r| r <= at) && node.on_disk(at),
                "{when}: shard {s}: record {at}, which archive record {} points at, is not \
                 kept (segments {:?}, runs retained from {retained_from:?})",
                e.lsn,
                node.segment_firsts()
            );
        }
    }
    let Some(oldest) = node
        .engine
        .state()
        .archive
        .oldest_lsn()
        .filter(|&l| l <= durable)
    else {
        return;
    };
    let payload = node
        .read_record(oldest)
        .unwrap_or_else(|e| panic!("{when}: shard {s}: the oldest retained run's record: {e}"));
    assert!(
        matches!(Record::decode(&payload), Ok(Record::RunArchived { .. })),
        "{when}: shard {s}: record {oldest} is not an archive record"
    );
}
