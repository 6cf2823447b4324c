//! WebAssembly attempts: which runnable runs execute now (at most `Limits::wasm_slots` per
//! shard, `--max-concurrent-executions`),
//! and the record each execution's result becomes — a completion (with the guest's KV
//! writes) or a failed attempt (retried after backoff, or final and dead-lettered).

use crate::core::io::{Effect, ExecFailure, ExecResult, Execution, LogLevel, LogLine, LogSource};
use crate::core::{Core, Task};
use crate::fold::record::{GuestKvWrite, Record};
use crate::fold::runs::{TIMEOUT_CODE, retry_at};
use crate::fold::scheduler::RunKey;
use crate::fold::scheduler::Scheduler;
use crate::tables::HashMap;
use flo_protocol::RunStatus;

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

struct Running {
    key: RunKey,
    attempt: u32,
    version: u32,
}

#[derive(Default)]
pub struct Executions {
    running: HashMap<u64, Running>,
    /// Runs executing now (shown as `running`), and their execution.
    executing: HashMap<RunKey, u64>,
    next_exec: u64,
}

impl Executions {
    /// Slots runs of `namespace` hold.
    fn held_by(&self, namespace: &str) -> usize {
        self.executing
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .count()
    }

    pub fn is_executing(&self, namespace: &str, run_id: &str) -> bool {
        !self.executing.is_empty()
            && self
                .executing
                .contains_key(&(namespace.to_string(), run_id.to_string()))
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// The run an execution belongs to.
    pub fn run_of(&self, exec: u64) -> Option<&RunKey> {
        self.running.get(&exec).map(|r| &r.key)
    }
}

/// Starts executions while slots and runnable runs remain.
pub fn start_executions(core: &mut Core, execs: &mut Executions) {
    let slots = core.limits().wasm_slots;
    while execs.running.len() < slots {
        let Some(key) = next_fair(core, execs) else {
            return;
        };
        let Some(run) = core.state().runs.get(&key.0, &key.1) else {
            continue;
        };
        if run.status != RunStatus::Pending || execs.executing.contains_key(&key) {
            continue;
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
        let def = core.state().registry.get(&key.0, &action);
        let module = core.state().registry.module(&key.0, &action);
        let (def, wasm) = match (def, module) {
            (Some(def), Some(wasm)) => (
                (
                    def.version,
                    def.timeout_ms,
                    u64::from(def.memory_limit_mb) << 20,
                    def.entrypoint().to_string(),
                ),
                wasm.clone(),
            ),
            (def, _) => {
                let error = match def {
                    None => format!("action {action:?} is no longer registered"),
                    Some(_) => format!("action {action:?} is not a wasm action"),
                };
                let version = run.action_version;
                let failure = ExecFailure {
                    error: format!("could not instantiate the module: {error}"),
                    timed_out: false,
                };
                let result = ExecResult::failed(failure);
                record_attempt(core, &key, attempt, version, result);
                continue;
            }
        };
        execs.next_exec += 1;
        let exec = execs.next_exec;
        core.emit(Effect::Execute(Box::new(Execution {
            exec,
            namespace: key.0.clone(),
            action,
            version: def.0,
            wasm,
            entrypoint: def.3,
            input: run.input.clone(),
            timeout_ms: step_timeout.unwrap_or(def.1),
            memory_limit_bytes: def.2,
            run_state,
        })));
        let version = def.0;
        core.counts_mut().slot_waited(slot_wait_ms);
        execs.executing.insert(key.clone(), exec);
        execs.running.insert(
            exec,
            Running {
                key,
                attempt,
                version,
            },
        );
    }
}

/// The run `key` is final (`Task::ActionFinal`): if it is still executing (it was cancelled,
/// by a client or with its workflow), the guest is stopped now rather than at its timeout.
/// Its slot is free once its `Input::Executed` comes, whose result `record_attempt` ignores.
pub fn stop_if_executing(core: &mut Core, execs: &Executions, key: &RunKey) {
    if let Some(&exec) = execs.executing.get(key) {
        core.emit(Effect::StopExecution { exec });
    }
}

/// An execution ended: its result becomes the attempt's record.
pub fn on_executed(core: &mut Core, execs: &mut Executions, exec: u64, mut result: ExecResult) {
    let Some(Running {
        key,
        attempt,
        version,
    }) = execs.running.remove(&exec)
    else {
        return;
    };
    execs.executing.remove(&key);
    let action = core
        .state()
        .runs
        .get(&key.0, &key.1)
        .map(|r| r.action.clone())
        .unwrap_or_default();
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
    record_attempt(core, &key, attempt, version, result);
}

/// Logs the attempt's result, unless the run moved on meanwhile (cancelled).
fn record_attempt(
    core: &mut Core,
    key: &RunKey,
    attempt: u32,
    action_version: u32,
    result: ExecResult,
) {
    let ExecResult {
        mut output,
        outcome,
        mut kv_writes,
        mut state_patch,
        ..
    } = result;
    let now = core.now_ms();
    // A step's guest's state fields: the run's own, and the shared scopes' as KV writes.
    let mut scoped = Vec::new();
    if let (Ok(_), Some(patch)) = (&output, state_patch.take())
        && let Some(run) = core.state().runs.get(&key.0, &key.1)
        && let Some(step) = &run.step
    {
        match core.state().scoped_patch(&key.0, step, &patch) {
            Ok((own, writes)) => (state_patch, scoped) = (own, writes),
            Err(error) => {
                output = Err(ExecFailure {
                    error: format!("the guest's state fields cannot be set: {error}"),
                    timed_out: false,
                });
                kv_writes.clear();
            }
        }
    }
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
            kv_writes: kv_writes
                .into_iter()
                .map(|(key, value)| GuestKvWrite {
                    key,
                    value,
                    add: None,
                })
                .chain(scoped)
                .collect(),
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

/// The runnable run to execute next: the best one, unless its namespace holds its shared
/// slots already and another namespace's run waits, or holds its `wasm_slots` quota (then
/// the best of the others found among the next `FAIR_SCAN_MAX`). None found: the best one
/// whose namespace is under its quota — a free slot idles only for quotas.
fn next_fair(core: &mut Core, execs: &Executions) -> Option<RunKey> {
    let quotas = core.quotas();
    let slots = core.limits().wasm_slots;
    let shared = slots_per_namespace_shared(slots);
    let quota_of = |namespace: &str| {
        quotas
            .as_ref()
            .and_then(|q| q.of(namespace))
            .and_then(|q| q.wasm_slots)
            .map_or(slots, |n| n as usize)
    };
    let sched = &mut core.index_mut().runs;
    let under_quota = |ns: &str| execs.held_by(ns) < quota_of(ns);
    let fair = |ns: &str, sched: &Scheduler| {
        under_quota(ns) && (execs.held_by(ns) < shared || !sched.ready_elsewhere(ns))
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
