//! Workloads: each produces the operation for a global operation number and judges replies.
//! To add one: a variant of [`Workload`], a [`Generator`], and a line in `main::run_workload`.

use clap::ValueEnum;
use flo::protocol::{
    ActionKind, ActionSpec, InvokeSpec, Op, Reply, RunStatus, ShardMap, WorkflowRunStatus,
    WorkflowStartSpec,
};
use std::fmt::Write as _;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// KV puts of fixed-size values over `--keys` keys (`k-0`, `k-1`, ...).
    KvPut,
    /// Invocations of a trivial WASM action, each answered once the run completed.
    WasmInvoke,
    /// `--ops` invocations of a user-hosted action (`--action-name`, registered as a user
    /// action) from the `--connections` connections, completed by `--workers` worker
    /// connections that each await up to `--await-batch` tasks at a time and complete
    /// every one with its input. Reports invokes/s, tasks completed/s and invoke-to-complete
    /// latency.
    Worker,
    /// Starts of a 3-step workflow (`loadtest-flow`) whose steps are trivial WASM actions,
    /// each answered once the run completed (start with `wait_ms`).
    Workflow,
    /// Starts of a 3-step workflow (`loadtest-worker-flow`) whose steps are the user-hosted
    /// action `--action-name`, completed by `--workers` worker connections (as in `worker`),
    /// each start answered once the run completed. Reports runs/s and start-to-complete
    /// latency, and what the workers did.
    WorkflowWorker,
    /// A weighted blend (`--mix`) of KV puts and gets, WASM action invokes, worker tasks
    /// (completed by `--workers` workers) and 3-step WASM workflow starts, each kind
    /// reported apart.
    Mixed,
    /// Appends of `--batch` records of `--value-bytes` bytes to `loadtest-stream` (keyed
    /// over `--keys` keys when given), each answered once durable.
    StreamAppend,
    /// The appends of `stream-append` consumed by `--workers` consumers of a shared group,
    /// each reading up to `--await-batch` records and acking them in one request. Reports
    /// records acked/s and append-to-ack latency.
    StreamConsume,
    /// The appends of `stream-append` (`--batch` records each) to a stream that triggers a
    /// one-step workflow of a WASM action (`loadtest-trigger`): reports records in to
    /// completed runs out (runs/s over the whole run; no latency).
    Trigger,
    /// `--keys` workflows (default 50) on interval schedules of `--interval-ms`, until
    /// `--ops` ticks fired: reports each tick's drift (run started − tick time).
    Schedule,
    /// `--ops` starts of a one-step workflow with search attributes (the store filled),
    /// then `--queries` queries' first pages, one at a time: their latency and the
    /// documents each shard looked at.
    Query,
    /// Starts of a one-step workflow whose step runs a two-executor plan, the first
    /// executor's breaker open (`--plain-workflow`: the step runs the action directly),
    /// each answered once the run completed.
    Plan,
    /// `--ops` starts of a one-step workflow whose `webhook:` posts each run's completion
    /// to a receiver in this process: deliveries/s and event-to-arrival latency, then the
    /// run event feed read whole (events/s).
    Webhook,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::KvPut => "kv-put",
            Workload::WasmInvoke => "wasm-invoke",
            Workload::Worker => "worker",
            Workload::Workflow => "workflow",
            Workload::WorkflowWorker => "workflow-worker",
            Workload::Mixed => "mixed",
            Workload::StreamAppend => "stream-append",
            Workload::StreamConsume => "stream-consume",
            Workload::Trigger => "trigger",
            Workload::Schedule => "schedule",
            Workload::Query => "query",
            Workload::Plan => "plan",
            Workload::Webhook => "webhook",
        }
    }
}

/// Produces a connection's operations. One per connection thread.
pub trait Generator: Send {
    /// Writes the operation numbered `n` (0-based, global across connections) into `op`.
    /// `op` holds this generator's previous operation (or a placeholder the first time), so
    /// a generator may update it in place instead of allocating a new one. `intended` is the
    /// operation's intended send time in open-loop mode (None: it is sent now); a generator
    /// that stamps its payload with a send time stamps that.
    fn fill(&mut self, n: u64, intended: Option<Instant>, op: &mut Op);

    /// Whether a successful reply to operation `n` is the one expected; `Err` counts as an
    /// error.
    fn check(&self, n: u64, reply: &Reply) -> Result<(), String>;

    /// The names of the kinds of operation this generator blends, reported apart; empty
    /// for a generator of one kind.
    fn kind_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// The kind of operation `n`: an index into `kind_names` (0 for a generator of one kind).
    fn kind(&self, _n: u64) -> usize {
        0
    }

    /// Whether operation `n`, once answered successfully, stays outstanding until a worker
    /// completes its task: the workers, not the reply, give back its `--max-outstanding`
    /// permit.
    fn completed_by_worker(&self, _n: u64) -> bool {
        false
    }

    /// Whether the generator picks its keys for the shard its connection is on
    /// (`route`): its connection then asks for the shard map.
    fn routes_keys(&self) -> bool {
        false
    }

    /// The connection is on `shard`; `map` places keys.
    fn route(&mut self, _shard: u32, _map: ShardMap) {}
}

/// `kv-put`: `KvPut { key: "k-{n % keys}", value: <value_bytes bytes> }`.
pub struct KvPut {
    namespace: String,
    keys: u64,
    value: Vec<u8>,
    /// `--route-keys`: put only keys its connection's shard owns (the shard, the map).
    routed: Option<(u32, ShardMap)>,
    routing: bool,
}

impl KvPut {
    pub fn new(namespace: &str, keys: u64, value_bytes: usize) -> Self {
        let value = (0..value_bytes).map(|i| b'a' + (i % 26) as u8).collect();
        KvPut {
            namespace: namespace.to_string(),
            keys: keys.max(1),
            value,
            routed: None,
            routing: false,
        }
    }

    /// Puts only keys that the shard of its connection owns, as a client routing each key
    /// to a connection on its owner would: `k-{i}`, or `k-{i}-{j}` for the first `j` that
    /// lands there.
    pub fn routed(mut self) -> Self {
        self.routing = true;
        self
    }
}

impl Generator for KvPut {
    fn fill(&mut self, n: u64, _intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::KvPut { .. }) {
            *op = Op::KvPut {
                namespace: self.namespace.clone(),
                key: String::with_capacity(24),
                value: self.value.clone(),
                ttl_ms: None,
                if_version: None,
                if_exists: false,
            };
        }
        if let Op::KvPut { key, .. } = op {
            key.clear();
            let _ = write!(key, "k-{}", n % self.keys);
            if let Some((shard, map)) = &self.routed {
                let stem = key.len();
                for j in 0..1024 {
                    if map.shard_of(&self.namespace, key) == Some(*shard) {
                        break;
                    }
                    key.truncate(stem);
                    let _ = write!(key, "-{j}");
                }
            }
        }
    }

    fn routes_keys(&self) -> bool {
        self.routing
    }

    fn route(&mut self, shard: u32, map: ShardMap) {
        self.routed = Some((shard, map));
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::KvPut { .. } => Ok(()),
            other => Err(format!("unexpected reply to a KV put: {other:?}")),
        }
    }
}

/// `mixed`'s gets: `KvGet { key: "k-{n % keys}" }`, answered at once (found or not).
pub struct KvGet {
    namespace: String,
    keys: u64,
}

impl KvGet {
    pub fn new(namespace: &str, keys: u64) -> Self {
        KvGet {
            namespace: namespace.to_string(),
            keys: keys.max(1),
        }
    }
}

impl Generator for KvGet {
    fn fill(&mut self, n: u64, _intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::KvGet { .. }) {
            *op = Op::KvGet {
                namespace: self.namespace.clone(),
                key: String::with_capacity(24),
                wait_ms: None,
                after_version: None,
                newer_than_current: false,
            };
        }
        if let Op::KvGet { key, .. } = op {
            key.clear();
            let _ = write!(key, "k-{}", n % self.keys);
        }
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::KvValue(_) => Ok(()),
            other => Err(format!("unexpected reply to a KV get: {other:?}")),
        }
    }
}

/// The action `wasm-invoke` runs: returns `{"ok":true}` whatever its input.
pub const WASM_ACTION: &str = "loadtest-ok";
/// What `WASM_ACTION` returns.
const WASM_ACTION_OUTPUT: &str = r#"{"ok":true}"#;

/// Registers the action `wasm-invoke` needs.
pub fn register_wasm_action(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
) -> Result<(), String> {
    register_wasm_action_as(addr, token, namespace, false)
}

/// [`register_wasm_action`]; `reuse`: its module opts in to instance reuse.
pub fn register_wasm_action_as(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    reuse: bool,
) -> Result<(), String> {
    let guest = flo_testkit::guests::fixed_guest(WASM_ACTION_OUTPUT);
    let guest = if reuse {
        flo_testkit::guests::reusable(&guest)
    } else {
        guest
    };
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let spec = ActionSpec {
        namespace: namespace.into(),
        name: WASM_ACTION.into(),
        kind: ActionKind::Wasm,
        wasm: Some(guest.into_bytes()),
        timeout_ms: Some(5_000),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: Some("flo-loadtest: returns {\"ok\":true}".into()),
        memory_limit_mb: Some(1),
        wasm_entrypoint: None,
    };
    client
        .register_action(spec)
        .map_err(|e| format!("cannot register {WASM_ACTION}: {e}"))?;
    Ok(())
}

/// `wasm-invoke`: invoke `loadtest-ok` and wait for the completed run in one request.
pub struct WasmInvoke {
    namespace: String,
    input: Vec<u8>,
}

impl WasmInvoke {
    pub fn new(namespace: &str) -> Self {
        WasmInvoke {
            namespace: namespace.into(),
            input: br#"{"n":1}"#.to_vec(),
        }
    }
}

/// Longest the server holds an invoke waiting for its run.
const INVOKE_WAIT_MS: u64 = 30_000;

impl Generator for WasmInvoke {
    fn fill(&mut self, _n: u64, _intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::ActionInvoke(_)) {
            *op = Op::ActionInvoke(InvokeSpec {
                namespace: self.namespace.clone(),
                action: WASM_ACTION.into(),
                input: self.input.clone(),
                priority: None,
                delay_ms: None,
                idempotency_key: None,
                labels: None,
                wait_ms: Some(INVOKE_WAIT_MS),
            });
        }
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::Run(run) if run.status == RunStatus::Completed => Ok(()),
            Reply::Run(run) => Err(format!(
                "run {} ended {}: {:?}",
                run.run_id,
                run.status.as_str(),
                run.error
            )),
            other => Err(format!("unexpected reply to an invoke: {other:?}")),
        }
    }
}

/// Registers the user-hosted action the `worker` workload invokes: a long timeout, so a
/// lease never expires under load, and no retries.
pub fn register_user_action(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    name: &str,
) -> Result<(), String> {
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let spec = ActionSpec {
        namespace: namespace.into(),
        name: name.into(),
        kind: ActionKind::User,
        wasm: None,
        timeout_ms: Some(USER_ACTION_TIMEOUT_MS),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: Some("flo-loadtest: completed by the loadtest's workers".into()),
        memory_limit_mb: None,
        wasm_entrypoint: None,
    };
    client
        .register_action(spec)
        .map_err(|e| format!("cannot register {name}: {e}"))?;
    Ok(())
}

/// Lease of a `worker` workload task: far longer than any run, so none is handed out twice.
const USER_ACTION_TIMEOUT_MS: u64 = 600_000;

/// `worker` (invoking side): invoke the user-hosted action with `{"sent_ns":N}`, N the
/// nanoseconds from the run's epoch to the moment the request is queued (its intended
/// send time in open-loop mode). The workers
/// read it back to measure invoke-to-complete latency.
pub struct UserInvoke {
    namespace: String,
    action: String,
    epoch: Instant,
}

impl UserInvoke {
    pub fn new(namespace: &str, action: &str, epoch: Instant) -> Self {
        UserInvoke {
            namespace: namespace.into(),
            action: action.into(),
            epoch,
        }
    }
}

impl Generator for UserInvoke {
    fn completed_by_worker(&self, _n: u64) -> bool {
        true
    }

    fn fill(&mut self, _n: u64, intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::ActionInvoke(_)) {
            *op = Op::ActionInvoke(InvokeSpec {
                namespace: self.namespace.clone(),
                action: self.action.clone(),
                input: Vec::with_capacity(SENT_PAYLOAD_BYTES_MAX),
                priority: None,
                delay_ms: None,
                idempotency_key: None,
                labels: None,
                wait_ms: None,
            });
        }
        if let Op::ActionInvoke(spec) = op {
            encode_sent_ns(sent_ns(self.epoch, intended), &mut spec.input);
        }
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::Invoked { created: true, .. } => Ok(()),
            Reply::Invoked { run_id, .. } => {
                Err(format!("invoke returned an existing run {run_id}"))
            }
            other => Err(format!("unexpected reply to an invoke: {other:?}")),
        }
    }
}

/// Nanoseconds from `epoch` to `intended`, or to now when None.
pub fn sent_ns(epoch: Instant, intended: Option<Instant>) -> u64 {
    let at = intended.unwrap_or_else(Instant::now);
    u64::try_from(at.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// Longest `{"sent_ns":N}` payload.
const SENT_PAYLOAD_BYTES_MAX: usize = 32;
const SENT_PREFIX: &[u8] = b"{\"sent_ns\":";

/// Writes `{"sent_ns":N}` into `out` (replacing its contents).
pub fn encode_sent_ns(sent_ns: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(SENT_PREFIX);
    out.extend_from_slice(sent_ns.to_string().as_bytes());
    out.push(b'}');
    debug_assert!(out.len() <= SENT_PAYLOAD_BYTES_MAX);
}

/// N from a `{"sent_ns":N}` payload; None for any other payload.
pub fn decode_sent_ns(payload: &[u8]) -> Option<u64> {
    let digits = payload.strip_prefix(SENT_PREFIX)?.strip_suffix(b"}")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A start of `workflow` with `input`, answered once durable (the run not waited for).
pub fn start_op(namespace: &str, workflow: &str, input: Vec<u8>) -> Op {
    Op::WorkflowStart(WorkflowStartSpec {
        namespace: namespace.to_string(),
        name: workflow.into(),
        version: None,
        input,
        idempotency_key: None,
        wait_ms: None,
        run_id: None,
        group: None,
        webhook: None,
    })
}

/// The workflow `workflow` starts: three steps on the `wasm-invoke` action.
pub const WORKFLOW_NAME: &str = "loadtest-flow";
const WORKFLOW_YAML: &str = r#"kind: Workflow
name: loadtest-flow
version: "1"
start:
  run: "@actions/loadtest-ok"
  transitions:
    success: second
    failure: flo.Failed
steps:
  second:
    run: "@actions/loadtest-ok"
    transitions:
      success: third
      failure: flo.Failed
  third:
    run: "@actions/loadtest-ok"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#;

/// `workflow --fork`: the same name, five steps on the action: one, three at once, one.
const FORK_YAML: &str = r#"kind: Workflow
name: loadtest-flow
version: "1"
start:
  run: "@actions/loadtest-ok"
  transitions:
    success: [a, b, c]
steps:
  a:
    run: "@actions/loadtest-ok"
    transitions: {success: join}
  b:
    run: "@actions/loadtest-ok"
    transitions: {success: join}
  c:
    run: "@actions/loadtest-ok"
    transitions: {success: join}
  join:
    run: "@actions/loadtest-ok"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#;

/// Registers the action and creates the workflow `workflow` needs (`fork`: the 1 → 3 → 1
/// fork and join instead of three steps in a row; `skip_output_mapping`: no step merges its
/// output into the run's state; `reuse`: the action's module opts in to instance reuse).
pub fn create_workflow(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    fork: bool,
    skip_output_mapping: bool,
    reuse: bool,
) -> Result<(), String> {
    register_wasm_action_as(addr, token, namespace, reuse)?;
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let yaml = if fork { FORK_YAML } else { WORKFLOW_YAML };
    let yaml = if skip_output_mapping {
        skipping_output_mapping(yaml)
    } else {
        yaml.to_string()
    };
    client
        .create_workflow(&yaml)
        .map_err(|e| format!("cannot create {WORKFLOW_NAME}: {e}"))?;
    Ok(())
}

/// `yaml` with `skipOutputMapping: true` beside every step's `run:`, at its indentation.
fn skipping_output_mapping(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len() + 256);
    for line in yaml.lines() {
        out.push_str(line);
        out.push('\n');
        let body = line.trim_start();
        if body.starts_with("run: ") {
            out.push_str(&line[..line.len() - body.len()]);
            out.push_str("skipOutputMapping: true\n");
        }
    }
    out
}

/// The workflow `workflow-worker` starts: three steps on the user-hosted action.
pub const WORKER_WORKFLOW_NAME: &str = "loadtest-worker-flow";
/// Tasks one `loadtest-worker-flow` run hands to the workers: one per step.
pub const WORKER_WORKFLOW_STEPS: u64 = 3;

fn worker_workflow_yaml(action: &str) -> String {
    format!(
        r#"kind: Workflow
name: {WORKER_WORKFLOW_NAME}
version: "1"
start:
  run: "@actions/{action}"
  transitions:
    success: second
    failure: flo.Failed
steps:
  second:
    run: "@actions/{action}"
    transitions:
      success: third
      failure: flo.Failed
  third:
    run: "@actions/{action}"
    transitions:
      success: flo.Completed
      failure: flo.Failed
"#
    )
}

/// Registers the user-hosted action and creates the workflow `workflow-worker` needs.
pub fn create_worker_workflow(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    action: &str,
) -> Result<(), String> {
    register_user_action(addr, token, namespace, action)?;
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    client
        .create_workflow(&worker_workflow_yaml(action))
        .map_err(|e| format!("cannot create {WORKER_WORKFLOW_NAME}: {e}"))?;
    Ok(())
}

/// `workflow` (and `plan`, `workflow-worker`): start a workflow (`loadtest-flow`) and wait for the completed
/// run in one request.
pub struct WorkflowStart {
    namespace: String,
    name: &'static str,
    input: Vec<u8>,
}

impl WorkflowStart {
    pub fn new(namespace: &str) -> Self {
        Self::of(namespace, WORKFLOW_NAME)
    }

    pub fn of(namespace: &str, name: &'static str) -> Self {
        WorkflowStart {
            namespace: namespace.into(),
            name,
            input: br#"{"n":1}"#.to_vec(),
        }
    }

    /// Inputs of about `bytes` bytes (`{"n":1,"pad":"abc…"}`), if given.
    pub fn with_input_bytes(mut self, bytes: Option<u32>) -> Self {
        if let Some(bytes) = bytes {
            let pad: String = (0..(bytes as usize).saturating_sub(17))
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            self.input = format!(r#"{{"n":1,"pad":"{pad}"}}"#).into_bytes();
        }
        self
    }
}

impl Generator for WorkflowStart {
    fn fill(&mut self, _n: u64, _intended: Option<Instant>, op: &mut Op) {
        if !matches!(op, Op::WorkflowStart(_)) {
            *op = Op::WorkflowStart(WorkflowStartSpec {
                namespace: self.namespace.clone(),
                name: self.name.into(),
                version: None,
                input: self.input.clone(),
                idempotency_key: None,
                wait_ms: Some(INVOKE_WAIT_MS),
                run_id: None,
                group: None,
                webhook: None,
            });
        }
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::WorkflowRun(run) if run.status == WorkflowRunStatus::Completed => Ok(()),
            Reply::WorkflowRun(run) => Err(format!(
                "workflow run {} ended {}: {:?}",
                run.run_id,
                run.status.as_str(),
                run.error
            )),
            other => Err(format!("unexpected reply to a workflow start: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_output_mapping_marks_every_step_at_its_indentation() {
        for yaml in [WORKFLOW_YAML, FORK_YAML] {
            let skipped = skipping_output_mapping(yaml);
            let doc: serde_yaml::Value = serde_yaml::from_str(&skipped).unwrap();
            assert_eq!(
                doc["start"]["skipOutputMapping"],
                serde_yaml::Value::Bool(true)
            );
            let steps = doc["steps"].as_mapping().unwrap();
            assert!(steps.len() >= 2);
            for (_, step) in steps {
                assert_eq!(step["skipOutputMapping"], serde_yaml::Value::Bool(true));
            }
        }
    }

    #[test]
    fn sent_ns_payload_round_trips_and_is_json() {
        let mut payload = Vec::new();
        for n in [0, 1, 123_456_789, u64::MAX] {
            encode_sent_ns(n, &mut payload);
            assert_eq!(decode_sent_ns(&payload), Some(n));
            let json: serde_json::Value = serde_json::from_slice(&payload).unwrap();
            assert_eq!(json["sent_ns"], n);
        }
        assert_eq!(decode_sent_ns(b"{\"sent_ns\":x}"), None);
        assert_eq!(decode_sent_ns(b"{}"), None);
    }

    #[test]
    fn user_invoke_rewrites_the_send_time_in_place() {
        let mut generator = UserInvoke::new("ns", "lt-task", Instant::now());
        let mut op = Op::Status;
        generator.fill(0, None, &mut op);
        let Op::ActionInvoke(spec) = &op else {
            panic!("not an invoke: {op:?}")
        };
        assert_eq!(
            (spec.action.as_str(), spec.namespace.as_str()),
            ("lt-task", "ns")
        );
        let first = decode_sent_ns(&spec.input).expect("a sent_ns payload");
        std::thread::sleep(std::time::Duration::from_millis(1));
        generator.fill(1, None, &mut op);
        let Op::ActionInvoke(spec) = &op else {
            panic!("not an invoke: {op:?}")
        };
        assert!(decode_sent_ns(&spec.input).unwrap() > first);
    }

    #[test]
    fn kv_put_cycles_keys_and_reuses_the_op() {
        let mut generator = KvPut::new("ns", 3, 5);
        let mut op = Op::Status;
        generator.fill(4, None, &mut op);
        let expected = Op::KvPut {
            namespace: "ns".into(),
            key: "k-1".into(),
            value: b"abcde".to_vec(),
            ttl_ms: None,
            if_version: None,
            if_exists: false,
        };
        assert_eq!(op, expected);
        generator.fill(5, None, &mut op);
        let Op::KvPut { key, .. } = &op else {
            panic!("not a put: {op:?}")
        };
        assert_eq!(key, "k-2");
    }

    #[test]
    fn routed_kv_puts_only_put_keys_their_shard_owns() {
        let map = ShardMap {
            hash: "xxh3-64".into(),
            partitions: 256,
            shard_count: 3,
            owners: (0..256).map(|p| p % 3).collect(),
        };
        let mut generator = KvPut::new("ns", 1000, 5).routed();
        assert!(generator.routes_keys());
        generator.route(2, map.clone());
        let mut op = Op::Status;
        let mut keys = std::collections::HashSet::new();
        for n in 0..1000 {
            generator.fill(n, None, &mut op);
            let Op::KvPut { key, .. } = &op else {
                panic!("not a put: {op:?}")
            };
            assert_eq!(map.shard_of("ns", key), Some(2), "{key}");
            keys.insert(key.clone());
        }
        assert_eq!(keys.len(), 1000, "as many keys as asked for");
    }
}
