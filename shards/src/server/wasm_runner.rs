//! Executes runnable WASM runs, at most `WASM_SLOTS` at a time per shard, and records
//! each attempt's result: completion (with the guest's KV writes) or failure (with a retry
//! after backoff, or final and dead-lettered).

use super::shard::Shard;
use crate::actions::{RunKey, retry_delay_ms};
use crate::record::{GuestKvWrite, Record};
use crate::wasm::{ExecLimits, ExecResult, GuestError, GuestKv, WasmEngine, WasmModule};
use ahash::AHashMap as HashMap;
use flo_protocol::{ErrorValue, Op, Reply};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Concurrent WebAssembly executions per shard; more wait their turn.
pub(crate) const WASM_SLOTS: usize = 4;
/// Longest the timer task sleeps without looking at the clock.
const TIMER_TICK_MS_MAX: u64 = 1000;
/// How often workers' heartbeats are checked (and stale wants swept).
const HEALTH_CHECK_MS: u64 = 1000;

/// Compiled modules by content hash, shared by all shards (compiling is the costly part).
pub(crate) type SharedModules = Arc<Mutex<std::collections::HashMap<u128, WasmModule>>>;

pub(crate) struct WasmHost {
    engine: WasmEngine,
    shared: SharedModules,
    /// (namespace, action, version) → module.
    local: RefCell<HashMap<(String, String, u32), WasmModule>>,
}

impl WasmHost {
    pub fn new(engine: WasmEngine, shared: SharedModules) -> Self {
        WasmHost {
            engine,
            shared,
            local: RefCell::new(HashMap::new()),
        }
    }
}

fn content_key(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

async fn compile(shard: &Shard, bytes: Vec<u8>) -> Result<WasmModule, String> {
    let key = content_key(&bytes);
    if let Some(m) = shard.wasm.shared.lock().unwrap().get(&key) {
        return Ok(m.clone());
    }
    let engine = shard.wasm.engine.clone();
    let module = glommio::executor()
        .spawn_blocking(move || engine.compile(&bytes).map_err(|e| e.to_string()))
        .await?;
    shard
        .wasm
        .shared
        .lock()
        .unwrap()
        .insert(key, module.clone());
    Ok(module)
}

/// Compiles a module being registered; returns what its `describe` export says.
pub(crate) async fn compile_for_registration(
    shard: &Shard,
    bytes: Vec<u8>,
) -> Result<Option<String>, ErrorValue> {
    let module = compile(shard, bytes)
        .await
        .map_err(|e| ErrorValue::bad_request(format!("invalid wasm module: {e}")))?;
    Ok(module.describe().map(str::to_string))
}

/// Starts executions while slots and runnable runs remain.
pub(crate) fn kick(shard: &Rc<Shard>) {
    while shard.wasm_running.get() < WASM_SLOTS {
        let Some(key) = shard.core.borrow_mut().next_runnable() else {
            return;
        };
        shard.wasm_running.set(shard.wasm_running.get() + 1);
        shard
            .core
            .borrow_mut()
            .scheduler
            .executing
            .insert(key.clone());
        glommio::spawn_local(run_one(shard.clone(), key)).detach();
    }
}

struct Prepared {
    input: Vec<u8>,
    attempt: u32,
    limits: ExecLimits,
    version: u32,
    action: String,
    wasm: Vec<u8>,
}

fn prepare(shard: &Shard, (namespace, run_id): &RunKey) -> Result<Prepared, String> {
    let core = shard.core.borrow();
    let run = core
        .state
        .runs
        .get(namespace, run_id)
        .ok_or("run vanished")?;
    let def = core
        .state
        .registry
        .get(namespace, &run.action)
        .ok_or_else(|| format!("action {:?} is no longer registered", run.action))?;
    let wasm = def
        .wasm
        .as_ref()
        .ok_or_else(|| format!("action {:?} is not a wasm action", run.action))?;
    let cached = shard.wasm.local.borrow().contains_key(&(
        namespace.clone(),
        run.action.clone(),
        def.version,
    ));
    Ok(Prepared {
        input: run.input.clone(),
        attempt: run.attempt,
        limits: ExecLimits {
            timeout_ms: def.timeout_ms,
            memory_limit_bytes: u64::from(def.memory_limit_mb) << 20,
        },
        version: def.version,
        action: run.action.clone(),
        wasm: if cached { Vec::new() } else { wasm.clone() },
    })
}

async fn module_for(
    shard: &Shard,
    namespace: &str,
    p: &mut Prepared,
) -> Result<WasmModule, String> {
    let key = (namespace.to_string(), p.action.clone(), p.version);
    if let Some(m) = shard.wasm.local.borrow().get(&key) {
        return Ok(m.clone());
    }
    let module = compile(shard, std::mem::take(&mut p.wasm)).await?;
    shard.wasm.local.borrow_mut().insert(key, module.clone());
    Ok(module)
}

async fn run_one(shard: Rc<Shard>, key: RunKey) {
    // glommio polls a spawned task at once, inside `spawn_local`. Without this yield a guest
    // that completes on its first poll would record its attempt, and through the workflow
    // step it finishes kick the next execution, all inside the caller's `kick`: a queue of
    // N runnable steps nested N deep and overflowed the shard's stack.
    futures_lite::future::yield_now().await;
    let executed = async {
        let mut p = prepare(&shard, &key)?;
        let module = module_for(&shard, &key.0, &mut p).await?;
        let kv: Rc<dyn GuestKv> = Rc::new(ShardKv {
            shard: shard.clone(),
            namespace: key.0.clone(),
        });
        let result = module.execute(&p.input, kv, p.limits).await;
        Ok::<_, String>((p.attempt, p.version, result))
    }
    .await;
    shard.wasm_running.set(shard.wasm_running.get() - 1);
    shard.core.borrow_mut().scheduler.executing.remove(&key);
    match executed {
        Ok((attempt, version, result)) => record_attempt(&shard, &key, attempt, version, result),
        Err(message) => {
            let (attempt, version) = shard
                .core
                .borrow()
                .state
                .runs
                .get(&key.0, &key.1)
                .map_or((1, 0), |r| (r.attempt, r.action_version));
            let result = ExecResult {
                output: Err(GuestError::Instantiate(message)),
                outcome: None,
                kv_writes: Vec::new(),
                logs: Vec::new(),
            };
            record_attempt(&shard, &key, attempt, version, result);
        }
    }
    kick(&shard);
}

/// Logs the attempt's result, unless the run changed meanwhile (cancelled).
fn record_attempt(
    shard: &Rc<Shard>,
    (namespace, run_id): &RunKey,
    attempt: u32,
    action_version: u32,
    result: ExecResult,
) {
    let now = shard.now_ms();
    let (retry_delay, max_retries, action) = {
        let core = shard.core.borrow();
        let Some(run) = core.state.runs.get(namespace, run_id) else {
            return;
        };
        if run.status != flo_protocol::RunStatus::Pending || run.attempt != attempt {
            return;
        }
        let def = core.state.registry.get(namespace, &run.action);
        // A workflow step's run has one attempt: the step's own `retry:` decides.
        let retries = if run.step.is_some() { None } else { def };
        (
            def.map_or(0, |d| d.retry_delay_ms),
            retries.map_or(0, |d| d.max_retries),
            run.action.clone(),
        )
    };
    for (level, text) in &result.logs {
        if *level >= 1 {
            eprintln!(
                "[{namespace}/{action} {run_id}] {}: {text}",
                level_name(*level)
            );
        }
    }
    let output = result
        .output
        .and_then(|output| check_result_size(&output, &result.kv_writes).map(|()| output));
    let record = match output {
        Ok(output) => Record::RunCompleted {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            attempt,
            action_version,
            output,
            outcome: result.outcome,
            kv_writes: result
                .kv_writes
                .into_iter()
                .map(|(key, value)| GuestKvWrite { key, value })
                .collect(),
            at_ms: now,
        },
        Err(error) => {
            let retry_at_ms =
                (attempt <= max_retries).then(|| now + retry_delay_ms(retry_delay, attempt));
            Record::AttemptFailed {
                namespace: namespace.clone(),
                run_id: run_id.clone(),
                attempt,
                action_version,
                timed_out: matches!(error, GuestError::Timeout { .. }),
                error: error.to_string(),
                retry_at_ms,
                at_ms: now,
                dead_letter: true,
            }
        }
    };
    let retry_at = match &record {
        Record::AttemptFailed { retry_at_ms, .. } => *retry_at_ms,
        _ => None,
    };
    let forwards =
        matches!(&record, Record::RunCompleted { kv_writes, .. } if !kv_writes.is_empty());
    shard.commit(record);
    if forwards {
        shard.forward_signal.notify();
    }
    match retry_at {
        Some(_) => {
            let key = (namespace.clone(), run_id.clone());
            let mut core = shard.core.borrow_mut();
            let core = &mut *core;
            if let Some(run) = core.state.runs.get(namespace, run_id) {
                core.scheduler
                    .schedule(key, run, crate::actions::Queue::Wasm, now);
            }
            shard.timer_signal.notify();
        }
        None => shard.run_final(namespace, run_id),
    }
}

/// Largest output plus KV writes one attempt may leave: they go into one log record.
pub(crate) const RUN_RESULT_BYTES_MAX: usize = 4 << 20;

/// A result too large for its completion record fails the attempt instead.
fn check_result_size(
    output: &[u8],
    kv_writes: &[(String, Option<Vec<u8>>)],
) -> Result<(), GuestError> {
    let writes: usize = kv_writes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
        .sum();
    let total = output.len() + writes;
    if total > RUN_RESULT_BYTES_MAX {
        return Err(GuestError::BadOutput(format!(
            "output and kv writes of {total} bytes exceed the maximum of {RUN_RESULT_BYTES_MAX} bytes per run"
        )));
    }
    Ok(())
}

fn level_name(level: u8) -> &'static str {
    match level {
        0 => "debug",
        1 => "info",
        2 => "warn",
        _ => "error",
    }
}

/// Guest KV reads: local keys from this shard's state, others from their shard.
struct ShardKv {
    shard: Rc<Shard>,
    namespace: String,
}

impl GuestKv for ShardKv {
    fn get(&self, key: &str) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>>>> {
        let target = self.shard.partitioning.shard_of(&self.namespace, key);
        if target == self.shard.id {
            let core = self.shard.core.borrow();
            let now = core.clock.now_ms();
            let value = core
                .state
                .kv
                .get(&self.namespace, key, now)
                .map(|e| e.value.clone());
            return Box::pin(std::future::ready(value));
        }
        let call = self.shard.begin_call(
            target,
            Op::KvGet {
                namespace: self.namespace.clone(),
                key: key.into(),
            },
        );
        let shard = self.shard.clone();
        Box::pin(async move {
            match call.finish(&shard).await {
                Ok(Reply::KvValue(entry)) => entry.map(|e| e.value),
                _ => None,
            }
        })
    }
}

/// Moves due timers to the ready queue and starts what became runnable.
pub(crate) async fn timer_loop(shard: Rc<Shard>) {
    let mut next_health_ms = 0;
    loop {
        let (next, now) = {
            let core = shard.core.borrow();
            (core.scheduler.next_due_ms(), core.clock.now_ms())
        };
        let wait_ms = next.map_or(TIMER_TICK_MS_MAX, |due| {
            due.saturating_sub(now).min(TIMER_TICK_MS_MAX)
        });
        if wait_ms > 0 {
            futures_lite::future::or(
                glommio::timer::sleep(Duration::from_millis(wait_ms)),
                shard.timer_signal.wait(),
            )
            .await;
        }
        if shard.core.borrow_mut().fire_timers() > 0 {
            kick(&shard);
        }
        super::workflow_host::fire_timers(&shard);
        let finals = shard.core.borrow_mut().expire_leases();
        for (namespace, run_id) in &finals {
            shard.run_final(namespace, run_id);
        }
        if shard.core.borrow().log.pending_bytes() > 0 {
            shard.flush.notify();
        }
        super::worker_host::dispatch_soon(&shard);
        let now = shard.now_ms();
        if now >= next_health_ms {
            shard.core.borrow_mut().workers.check_health(now);
            super::worker_host::sweep_wants(&shard);
            next_health_ms = now + HEALTH_CHECK_MS;
        }
    }
}
