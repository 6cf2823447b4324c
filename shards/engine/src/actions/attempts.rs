//! WebAssembly executions: which runnable action runs and queued workflow steps execute
//! now (at most `Limits::wasm_slots` per shard, `--max-concurrent-executions`, taking
//! turns), and what each execution's result becomes — for an action run a completion
//! (with the guest's KV writes) or a failed attempt (retried after backoff, or final and
//! dead-lettered); for a step, its `StepExecuted`, which the workflow finishes.

use crate::auth::Quotas;
use crate::core::io::{Effect, ExecFailure, ExecResult, Execution, LogLevel, LogLine, LogSource};
use crate::core::{Core, StepExec, Task};
use crate::fold::record::{GuestKvWrite, Record, StepRef};
use crate::fold::runs::{TIMEOUT_CODE, retry_at};
use crate::fold::scheduler::RunKey;
use crate::fold::scheduler::Scheduler;
use crate::tables::HashMap;
use flo_protocol::RunStatus;
use std::sync::Arc;

/// Concurrent WebAssembly executions per shard by default (`Limits::wasm_slots` is the
/// server's); more wait their turn.
pub const WASM_SLOTS: usize = crate::core::WASM_SLOTS_DEFAULT;

/// Slots one namespace may hold while another namespace's runs wait for one: a tenant whose
/// guests run long (or loop until their timeout) leaves a slot to the others (all but one;
/// with a single slot, that slot). Alone, a namespace uses them all.
fn slots_per_namespace_shared(slots: usize) -> usize {
    slots.saturating_sub(1).max(1)
}
/// Runnable runs looked at, past the best one, for another namespace's run.
const FAIR_SCAN_MAX: usize = 16;
/// Largest output plus KV writes one attempt may leave: they go into one log record.
pub const RUN_RESULT_BYTES_MAX: usize = 4 << 20;

/// Whose an execution is: an action run's attempt, or a workflow step executed without
/// an action run (`crate::core::StepQueue`).
enum Owner {
    Run {
        attempt: u32,
        version: u32,
    },
    Step {
        step: String,
        action: String,
        started_ms: u64,
    },
}

struct Running {
    /// The action run, or the step's workflow run.
    key: RunKey,
    owner: Owner,
}

/// A workflow step's execution ended (or could not start): for `workflows::on_step_executed`.
#[derive(Debug)]
pub struct StepExecuted {
    pub run: RunKey,
    pub step: String,
    /// When its execution started (ms, the engine's clock).
    pub started_ms: u64,
    pub result: ExecResult,
}

#[derive(Default)]
pub struct Executions {
    running: HashMap<u64, Running>,
    /// Action runs executing now (shown as `running`), and their execution.
    executing: HashMap<RunKey, u64>,
    next_exec: u64,
    /// Whose turn the next free slot is when action runs and steps both wait.
    steps_turn: bool,
}

impl Executions {
    /// Slots runs of `namespace` hold.
    fn held_by(&self, namespace: &str) -> usize {
        self.running
            .values()
            .filter(|r| r.key.0 == namespace)
            .count()
    }

    pub fn is_executing(&self, namespace: &str, run_id: &str) -> bool {
        !self.executing.is_empty()
            && self
                .executing
                .contains_key(crate::tables::pair(&(namespace, run_id)))
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether `step` of workflow run `run_id` executes now.
    pub fn is_executing_step(&self, namespace: &str, run_id: &str, step: &str) -> bool {
        self.running.values().any(|r| {
            matches!(&r.owner, Owner::Step { step: s, .. } if s == step)
                && r.key.0 == namespace
                && r.key.1 == run_id
        })
    }

    /// The namespace an execution runs in.
    pub fn namespace_of(&self, exec: u64) -> Option<&str> {
        self.running.get(&exec).map(|r| r.key.0.as_str())
    }
}

/// Who may take a slot now, by namespace: under its quota, and fair (its shared slots
/// not all held while another namespace waits).
struct Fairness {
    slots: usize,
    shared: usize,
    quotas: Option<Arc<Quotas>>,
}

impl Fairness {
    fn of(core: &Core) -> Fairness {
        let slots = core.limits().wasm_slots;
        Fairness {
            slots,
            shared: slots_per_namespace_shared(slots),
            quotas: core.quotas(),
        }
    }

    fn under_quota(&self, execs: &Executions, namespace: &str) -> bool {
        let quota = self
            .quotas
            .as_ref()
            .and_then(|q| q.of(namespace))
            .and_then(|q| q.wasm_slots)
            .map_or(self.slots, |n| n as usize);
        execs.held_by(namespace) < quota
    }
}

/// Starts executions while slots and runnable runs or queued steps remain, taking turns
/// between the two when both wait. Returns the steps that could not start (their action
/// is gone), for `workflows::on_step_executed`.
pub fn start_executions(core: &mut Core, execs: &mut Executions) -> Vec<StepExecuted> {
    let mut failed = Vec::new();
    let slots = core.limits().wasm_slots;
    while execs.running.len() < slots {
        let took = match execs.steps_turn {
            true => start_step(core, execs, &mut failed).or_else(|| start_run(core, execs)),
            false => start_run(core, execs).or_else(|| start_step(core, execs, &mut failed)),
        };
        if took.is_none() {
            break;
        }
        execs.steps_turn = !execs.steps_turn;
    }
    failed
}

/// Takes the next runnable action run: None when there is none, else whether it started.
fn start_run(core: &mut Core, execs: &mut Executions) -> Option<bool> {
    let key = next_fair(core, execs)?;
    let Some(run) = core.state().runs.get(&key.0, &key.1) else {
        return Some(false);
    };
    if run.status != RunStatus::Pending || execs.executing.contains_key(&key) {
        return Some(false);
    }
    let (attempt, action) = (run.attempt, run.action.clone());
    // Due since it became pending (created, or its last attempt failed) or its delay
    // ended, whichever came last.
    let due_ms = run.updated_at_ms.max(run.available_at_ms);
    let slot_wait_ms = core.now_ms().saturating_sub(due_ms);
    let step_timeout = core.state().step_timeout_ms(&key.0, run.step.as_ref());
    let run_state = match core.state().registry.reads_state(&key.0, &action) {
        true => core.state().step_run_state(&key.0, run.step.as_ref()),
        false => None,
    };
    let input = run.input.clone();
    let Some(module) = WasmModule::of(core, &key.0, &action) else {
        let version = run.action_version;
        let result = ExecResult::failed(module_missing(core, &key.0, &action));
        record_attempt(core, &key, attempt, version, result);
        return Some(false);
    };
    let timeout_ms = step_timeout.unwrap_or(module.timeout_ms);
    let version = module.version;
    let exec = emit_execution(
        core, execs, &key.0, action, module, input, timeout_ms, run_state,
    );
    core.counts_mut().slot_waited(slot_wait_ms);
    execs.executing.insert(key.clone(), exec);
    let owner = Owner::Run { attempt, version };
    execs.running.insert(exec, Running { key, owner });
    Some(true)
}

/// Takes the next queued workflow step: None when none may start, else whether it
/// started (one whose run moved on meanwhile is dropped; one whose action is gone
/// fails, in `failed`).
fn start_step(
    core: &mut Core,
    execs: &mut Executions,
    failed: &mut Vec<StepExecuted>,
) -> Option<bool> {
    if core.steps().is_empty() {
        return None;
    }
    let fairness = Fairness::of(core);
    let at = {
        let runs_elsewhere = |ns: &str| core.index().runs.ready_elsewhere(ns);
        let fair = |ns: &str| {
            fairness.under_quota(execs, ns)
                && (execs.held_by(ns) < fairness.shared
                    || !(runs_elsewhere(ns) || core.steps().waiting_elsewhere(ns)))
        };
        let acceptable = |ns: &str| fairness.under_quota(execs, ns);
        core.steps().find_fair(FAIR_SCAN_MAX, fair, acceptable)?
    };
    let StepExec {
        run: key,
        step,
        action,
        input,
        queued_ms,
    } = core.steps_mut().remove(at)?;
    let due = core
        .state()
        .workflows
        .run(&key.0, &key.1)
        .is_some_and(|r| r.is_to_start(&step));
    if !due {
        core.steps_mut().release(&key.0, &key.1, &step);
        return Some(false);
    }
    let now = core.now_ms();
    let step_ref = StepRef {
        run_id: key.1.clone(),
        step: step.clone(),
    };
    let Some(module) = WasmModule::of(core, &key.0, &action) else {
        let result = ExecResult::failed(module_missing(core, &key.0, &action));
        failed.push(StepExecuted {
            run: key,
            step,
            started_ms: now,
            result,
        });
        return Some(false);
    };
    let timeout_ms = core
        .state()
        .step_timeout_ms(&key.0, Some(&step_ref))
        .unwrap_or(module.timeout_ms);
    let run_state = match core.state().registry.reads_state(&key.0, &action) {
        true => core.state().step_run_state(&key.0, Some(&step_ref)),
        false => None,
    };
    let exec = emit_execution(
        core,
        execs,
        &key.0,
        action.clone(),
        module,
        input,
        timeout_ms,
        run_state,
    );
    core.counts_mut().slot_waited(now.saturating_sub(queued_ms));
    let owner = Owner::Step {
        step,
        action,
        started_ms: now,
    };
    execs.running.insert(exec, Running { key, owner });
    Some(true)
}

/// What an execution of a WebAssembly action needs from its definition.
struct WasmModule {
    version: u32,
    timeout_ms: u64,
    memory_limit_bytes: u64,
    entrypoint: String,
    wasm: Arc<[u8]>,
}

impl WasmModule {
    fn of(core: &Core, namespace: &str, action: &str) -> Option<WasmModule> {
        let def = core.state().registry.get(namespace, action)?;
        let wasm = core.state().registry.module(namespace, action)?;
        Some(WasmModule {
            version: def.version,
            timeout_ms: def.timeout_ms,
            memory_limit_bytes: u64::from(def.memory_limit_mb) << 20,
            entrypoint: def.entrypoint().to_string(),
            wasm: wasm.clone(),
        })
    }
}

/// Why `action` cannot execute (it has no module).
fn module_missing(core: &Core, namespace: &str, action: &str) -> ExecFailure {
    let error = match core.state().registry.get(namespace, action) {
        None => format!("action {action:?} is no longer registered"),
        Some(_) => format!("action {action:?} is not a wasm action"),
    };
    ExecFailure {
        error: format!("could not instantiate the module: {error}"),
        timed_out: false,
    }
}

/// Hands an execution to the runtime; its number.
#[allow(clippy::too_many_arguments)]
fn emit_execution(
    core: &mut Core,
    execs: &mut Executions,
    namespace: &str,
    action: String,
    module: WasmModule,
    input: Vec<u8>,
    timeout_ms: u64,
    run_state: Option<Vec<u8>>,
) -> u64 {
    execs.next_exec += 1;
    let exec = execs.next_exec;
    core.emit(Effect::Execute(Box::new(Execution {
        exec,
        namespace: namespace.to_string(),
        action,
        version: module.version,
        wasm: module.wasm,
        entrypoint: module.entrypoint,
        input,
        timeout_ms,
        memory_limit_bytes: module.memory_limit_bytes,
        run_state,
    })));
    exec
}

/// The run `key` is final (`Task::ActionFinal`): if it is still executing (it was cancelled,
/// by a client or with its workflow), the guest is stopped now rather than at its timeout.
/// Its slot is free once its `Input::Executed` comes, whose result `record_attempt` ignores.
pub fn stop_if_executing(core: &mut Core, execs: &Executions, key: &RunKey) {
    if let Some(&exec) = execs.executing.get(key) {
        core.emit(Effect::StopExecution { exec });
    }
}

/// The workflow run `key` ended (`Task::WfFinal`): its steps still executing are stopped
/// (their results, when they come, find the run final and are dropped).
pub fn stop_steps_of(core: &mut Core, execs: &Executions, key: &RunKey) {
    for (&exec, running) in &execs.running {
        if matches!(running.owner, Owner::Step { .. }) && running.key == *key {
            core.emit(Effect::StopExecution { exec });
        }
    }
}

/// An execution ended: an action run's result becomes the attempt's record; a workflow
/// step's is returned, for `workflows::on_step_executed`.
pub fn on_executed(
    core: &mut Core,
    execs: &mut Executions,
    exec: u64,
    mut result: ExecResult,
) -> Option<StepExecuted> {
    let Running { key, owner } = execs.running.remove(&exec)?;
    let action = match &owner {
        Owner::Run { .. } => {
            execs.executing.remove(&key);
            core.state()
                .runs
                .get(&key.0, &key.1)
                .map(|r| r.action.clone())
                .unwrap_or_default()
        }
        Owner::Step { action, .. } => action.clone(),
    };
    for (level, text) in std::mem::take(&mut result.logs) {
        let Some(level) = guest_level(level) else {
            continue;
        };
        core.emit(Effect::Log(LogLine {
            level,
            source: LogSource::Guest {
                namespace: key.0.clone(),
                action: action.clone(),
                run_id: key.1.clone(),
            },
            text,
        }));
    }
    result.output = result
        .output
        .and_then(|output| check_result_size(&output, &result.kv_writes).map(|()| output));
    match owner {
        Owner::Run { attempt, version } => {
            record_attempt(core, &key, attempt, version, result);
            None
        }
        Owner::Step {
            step, started_ms, ..
        } => Some(StepExecuted {
            run: key,
            step,
            started_ms,
            result,
        }),
    }
}

/// Logs the attempt's result, unless the run moved on meanwhile (cancelled).
fn record_attempt(
    core: &mut Core,
    key: &RunKey,
    attempt: u32,
    action_version: u32,
    result: ExecResult,
) {
    let mut result = result;
    let step = core
        .state()
        .runs
        .get(&key.0, &key.1)
        .and_then(|r| r.step.as_ref());
    let (state_patch, scoped) = split_state_patch(core, &key.0, step, &mut result);
    let ExecResult {
        output,
        outcome,
        kv_writes,
        ..
    } = result;
    let now = core.now_ms();
    let (namespace, run_id) = key;
    let Some(run) = core.state().runs.get(namespace, run_id) else {
        return;
    };
    if run.status != RunStatus::Pending || run.attempt != attempt {
        return;
    }
    let retry_at_ms = retry_at(&core.state().registry, namespace, run, now);
    let record = match output {
        Ok(output) => Record::RunCompleted {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            attempt,
            action_version,
            output,
            outcome,
            kv_writes: guest_kv_writes(kv_writes, scoped),
            at_ms: now,
            state_patch,
        },
        Err(failure) => Record::AttemptFailed {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            attempt,
            action_version,
            // The guest's outcome named before it reported the failure is its code.
            error_code: match failure.timed_out {
                true => Some(TIMEOUT_CODE.to_string()),
                false => outcome,
            },
            timed_out: failure.timed_out,
            error: failure.error,
            retry_at_ms,
            at_ms: now,
            dead_letter: true,
        },
    };
    let retries = matches!(
        &record,
        Record::AttemptFailed {
            retry_at_ms: Some(_),
            ..
        }
    );
    core.commit(record);
    if !retries {
        core.schedule(Task::ActionFinal(key.clone()));
    }
}

/// The state fields a step's guest set (`result.state_patch`, taken), split by scope
/// (`ShardState::scoped_patch`): the run's own fields, and the shared scopes' as KV writes
/// (for `guest_kv_writes`). Fields that cannot be set fail the result and drop its KV
/// writes. Nothing for a run that is not a step's, or a failed one.
pub fn split_state_patch(
    core: &Core,
    namespace: &str,
    step: Option<&StepRef>,
    result: &mut ExecResult,
) -> (Option<Vec<u8>>, Vec<GuestKvWrite>) {
    let patch = result.state_patch.take();
    let (Some(patch), Some(step), Ok(_)) = (patch, step, &result.output) else {
        return (None, Vec::new());
    };
    match core.state().scoped_patch(namespace, step, &patch) {
        Ok(split) => split,
        Err(error) => {
            result.output = Err(ExecFailure {
                error: format!("the guest's state fields cannot be set: {error}"),
                timed_out: false,
            });
            result.kv_writes.clear();
            (None, Vec::new())
        }
    }
}

/// A guest's KV writes as logged, the state's shared-scope fields after them.
pub fn guest_kv_writes(
    writes: Vec<(String, Option<Vec<u8>>)>,
    scoped: Vec<GuestKvWrite>,
) -> Vec<GuestKvWrite> {
    writes
        .into_iter()
        .map(|(key, value)| GuestKvWrite {
            key,
            value,
            add: None,
        })
        .chain(scoped)
        .collect()
}

/// The runnable run to execute next: the best one, unless its namespace holds its shared
/// slots already and another namespace's run waits, or holds its `wasm_slots` quota (then
/// the best of the others found among the next `FAIR_SCAN_MAX`). None found: the best one
/// whose namespace is under its quota — a free slot idles only for quotas.
fn next_fair(core: &mut Core, execs: &Executions) -> Option<RunKey> {
    let fairness = Fairness::of(core);
    let (index, steps) = core.index_and_steps();
    let sched = &mut index.runs;
    let under_quota = |ns: &str| fairness.under_quota(execs, ns);
    // Another namespace's action runs or steps (`start_step`) wait for a slot too.
    let fair = |ns: &str, sched: &Scheduler| {
        under_quota(ns)
            && (execs.held_by(ns) < fairness.shared
                || !(sched.ready_elsewhere(ns) || steps.waiting_elsewhere(ns)))
    };
    let best = sched.pop_ready_entry()?;
    if fair(&best.2.0, sched) {
        return Some(best.2);
    }
    let mut passed = vec![best];
    let mut chosen = None;
    for _ in 0..FAIR_SCAN_MAX {
        let Some(entry) = sched.pop_ready_entry() else {
            break;
        };
        if fair(&entry.2.0, sched) {
            chosen = Some(entry.2);
            break;
        }
        passed.push(entry);
    }
    if chosen.is_none()
        && let Some(at) = passed.iter().position(|e| under_quota(&e.2.0))
    {
        chosen = Some(passed.remove(at).2);
    }
    for entry in passed {
        sched.push_ready(entry);
    }
    chosen
}

/// A result too large for its completion record fails the attempt instead.
fn check_result_size(
    output: &[u8],
    kv_writes: &[(String, Option<Vec<u8>>)],
) -> Result<(), ExecFailure> {
    let writes: usize = kv_writes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
        .sum();
    let total = output.len() + writes;
    if total > RUN_RESULT_BYTES_MAX {
        return Err(ExecFailure {
            error: format!(
                "guest returned a bad output: output and kv writes of {total} bytes exceed \
                 the maximum of {RUN_RESULT_BYTES_MAX} bytes per run"
            ),
            timed_out: false,
        });
    }
    Ok(())
}

/// A guest's level (`flo.log`: 0 debug, 1 info, 2 warn, 3 error): debug lines are not
/// logged.
fn guest_level(level: u8) -> Option<LogLevel> {
    match level {
        0 => None,
        1 => Some(LogLevel::Info),
        2 => Some(LogLevel::Warn),
        _ => Some(LogLevel::Error),
    }
}
