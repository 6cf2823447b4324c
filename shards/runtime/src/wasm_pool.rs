//! Performs the engine's WebAssembly effects: compiles modules (once per content, kept in one
//! cache for every shard, bounded by bytes) and runs executions as tasks, each with a stop
//! signal the engine can pull (`Effect::StopExecution`). A guest's KV reads go to the engine
//! as inputs; results come back as `Input::Executed`. Modules that opt in to instance reuse
//! keep up to one idle instance per execution slot, per action version.

use crate::inbox::Inbox;
use crate::metrics::{EXEC_RESULTS, FAILURE_REASONS, ShardMetrics};
use crate::module_cache::LruBytes;
use ahash::AHashMap as HashMap;
use flo_engine::{ExecFailure, ExecResult, Execution, Input};
use flo_protocol::ModuleCacheInfo;
use flo_wasm::{
    ExecLimits, GuestError, GuestKv, KvRead, StopSignal, WarmInstances, WasmEngine, WasmModule,
};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

/// Compiled modules by content hash, shared by all shards (compiling is the costly part);
/// the least recently used are dropped beyond `--module-cache-mb`. A module an execution
/// holds stays alive until it ends; the next use of an evicted one compiles it again.
pub(crate) type SharedModules = Arc<Mutex<LruBytes<u128, WasmModule>>>;

pub(crate) fn shared_modules(budget_bytes: u64) -> SharedModules {
    Arc::new(Mutex::new(LruBytes::new(budget_bytes)))
}

/// Where the answer to a guest's read goes.
type ReadReply = oneshot::Sender<KvRead>;

pub(crate) struct WasmPool {
    engine: WasmEngine,
    shared: SharedModules,
    /// (namespace, action) → (version, content hash) of the module its last execution used:
    /// so that an execution hashes its module's bytes only when the version changed. One
    /// entry per action name (executions always use the registered version).
    local: RefCell<HashMap<(String, String), (u32, u128)>>,
    /// Idle instances of modules that opt in to reuse (at most one per execution slot).
    warm: WarmInstances,
    /// Executions in progress: exec → its stop signal.
    running: RefCell<HashMap<u64, StopSignal>>,
    /// Guest reads waiting for the engine's answer: (exec, read) → where it goes.
    reads: RefCell<HashMap<(u64, u64), ReadReply>>,
    next_read: Cell<u64>,
    /// The cache's generation this shard last told its engine.
    cache_reported: Cell<Option<u64>>,
    inbox: Rc<Inbox>,
    /// The shard's counters: executions by result, and their time.
    metrics: Arc<ShardMetrics>,
}

fn content_key(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

fn lock(shared: &SharedModules) -> MutexGuard<'_, LruBytes<u128, WasmModule>> {
    // The cache stays consistent whatever panicked while holding it (and a panic stops the
    // server anyway).
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl WasmPool {
    pub fn new(
        engine: WasmEngine,
        shared: SharedModules,
        slots: usize,
        inbox: Rc<Inbox>,
        metrics: Arc<ShardMetrics>,
    ) -> Self {
        WasmPool {
            engine,
            shared,
            warm: WarmInstances::new(slots),
            local: RefCell::new(HashMap::new()),
            running: RefCell::new(HashMap::new()),
            reads: RefCell::new(HashMap::new()),
            next_read: Cell::new(0),
            cache_reported: Cell::new(None),
            inbox,
            metrics,
        }
    }

    /// The module of these bytes: from the cache, else compiled off the shard's thread and
    /// cached.
    async fn compile(&self, key: u128, bytes: &[u8]) -> Result<WasmModule, String> {
        let cached = {
            let mut cache = lock(&self.shared);
            let module = cache.get(&key);
            self.report(&cache);
            module
        };
        if let Some(module) = cached {
            return Ok(module);
        }
        let engine = self.engine.clone();
        let bytes = bytes.to_vec();
        // Cached for every action of these bytes, whatever export each calls: each
        // registration checks its own (`compile_job`).
        let module = glommio::executor()
            .spawn_blocking(move || engine.compile_for(&bytes, None).map_err(|e| e.to_string()))
            .await?;
        let mut cache = lock(&self.shared);
        cache.insert(key, module.clone(), module.size_bytes());
        self.report(&cache);
        Ok(module)
    }

    /// Tells the engine what the cache holds when it changed since this shard last said
    /// (for status).
    fn report(&self, cache: &LruBytes<u128, WasmModule>) {
        let generation = cache.generation();
        if self.cache_reported.get() == Some(generation) {
            return;
        }
        self.cache_reported.set(Some(generation));
        self.inbox.push(Input::ModuleCache(ModuleCacheInfo {
            bytes: cache.bytes(),
            modules: cache.len() as u64,
            budget_bytes: cache.budget_bytes(),
            generation,
        }));
    }

    /// Compiles a module being registered and checks that it exports `entrypoint`; the
    /// engine learns what `describe` says.
    pub fn compile_job(self: &Rc<Self>, job: u64, wasm: Arc<[u8]>, entrypoint: String) {
        let pool = self.clone();
        glommio::spawn_local(async move {
            let result = pool.compile(content_key(&wasm), &wasm).await.and_then(|m| {
                let checked = m.check_entrypoint(&entrypoint);
                let invalid = |e: flo_wasm::WasmError| e.to_string();
                checked.map_err(invalid)?;
                Ok(m.describe().map(str::to_string))
            });
            pool.inbox.push(Input::Compiled { job, result });
        })
        .detach();
    }

    async fn module_for(&self, x: &Execution) -> Result<WasmModule, String> {
        let name = (x.namespace.clone(), x.action.clone());
        let known = self.local.borrow().get(&name).copied();
        let key = match known {
            Some((version, key)) if version == x.version => key,
            _ => {
                let key = content_key(&x.wasm);
                self.local.borrow_mut().insert(name, (x.version, key));
                key
            }
        };
        self.compile(key, &x.wasm).await
    }

    /// Runs one execution in its own task.
    pub fn execute(self: &Rc<Self>, mut x: Execution) {
        let pool = self.clone();
        let stop = StopSignal::default();
        self.running.borrow_mut().insert(x.exec, stop.clone());
        glommio::spawn_local(async move {
            let exec = x.exec;
            let started = std::time::Instant::now();
            let result = match pool.module_for(&x).await {
                Ok(module) => {
                    let kv: Rc<dyn GuestKv> = Rc::new(PoolKv {
                        pool: pool.clone(),
                        exec,
                    });
                    let limits = ExecLimits {
                        timeout_ms: x.timeout_ms,
                        memory_limit_bytes: x.memory_limit_bytes,
                    };
                    // Instances serve one action version only: re-registering resets them.
                    // (Named only for modules that opt in: the others pay nothing.)
                    let scope = module
                        .reuses_instances()
                        .then(|| format!("{}\0{}\0{}", x.namespace, x.action, x.version));
                    let r = module
                        .execute_kept(
                            scope.as_deref().map(|scope| (&pool.warm, scope)),
                            &x.entrypoint,
                            &x.input,
                            x.run_state.take(),
                            kv,
                            limits,
                            &stop,
                        )
                        .await;
                    let elapsed_ns = started.elapsed().as_nanos() as u64;
                    let error = r.output.as_ref().err();
                    let reason = error.and_then(failure_reason);
                    pool.metrics
                        .execution(exec_result(error), reason, elapsed_ns, r.reused);
                    ExecResult {
                        output: r.output.map_err(failure),
                        outcome: r.outcome,
                        kv_writes: r.kv_writes,
                        logs: r.logs,
                        state_patch: r.state_patch,
                    }
                }
                Err(message) => {
                    let elapsed_ns = started.elapsed().as_nanos() as u64;
                    let reason = failure_reason(&GuestError::Instantiate(String::new()));
                    pool.metrics
                        .execution(EXEC_FAILED, reason, elapsed_ns, false);
                    ExecResult::failed(failure(GuestError::Instantiate(message)))
                }
            };
            pool.running.borrow_mut().remove(&exec);
            pool.inbox.push(Input::Executed { exec, result });
        })
        .detach();
    }

    /// Stops execution `exec` (if it still runs): it ends within a tick, as cancelled, and
    /// answers `Input::Executed` as usual.
    pub fn stop(&self, exec: u64) {
        if let Some(stop) = self.running.borrow().get(&exec) {
            stop.stop();
        }
    }

    /// The engine's answer to a guest's read.
    pub fn guest_value(&self, exec: u64, read: u64, value: KvRead) {
        if let Some(tx) = self.reads.borrow_mut().remove(&(exec, read)) {
            let _ = tx.send(value);
        }
    }
}

/// Index in `EXEC_RESULTS` of an execution that failed for a reason other than its time or
/// a stop.
const EXEC_FAILED: usize = 1;

/// How an execution ended, as an index in `EXEC_RESULTS`.
fn exec_result(error: Option<&GuestError>) -> usize {
    debug_assert_eq!(EXEC_RESULTS[EXEC_FAILED], "failed");
    match error {
        None => 0,
        Some(GuestError::Timeout { .. }) => 2,
        Some(GuestError::Cancelled) => 3,
        Some(_) => EXEC_FAILED,
    }
}

/// Why an execution failed, as an index in `FAILURE_REASONS` (None: it was stopped).
fn failure_reason(error: &GuestError) -> Option<usize> {
    let reason = match error {
        GuestError::InvalidInput => "invalid_input",
        GuestError::AllocationFailed => "allocation",
        GuestError::ExecutionError | GuestError::Code(_) => "guest_error",
        GuestError::Trap(_) => "trap",
        GuestError::Timeout { .. } => "timeout",
        GuestError::Cancelled => return None,
        GuestError::MemoryLimit { .. } => "memory_limit",
        GuestError::BadOutput(_) => "bad_output",
        GuestError::InitFailed(_) => "init",
        GuestError::Instantiate(_) => "instantiate",
    };
    FAILURE_REASONS.iter().position(|r| *r == reason)
}

fn failure(e: GuestError) -> ExecFailure {
    ExecFailure {
        timed_out: matches!(e, GuestError::Timeout { .. }),
        error: e.to_string(),
    }
}

/// Guest KV reads, answered by the engine (this shard's state or the key's owner).
struct PoolKv {
    pool: Rc<WasmPool>,
    exec: u64,
}

impl GuestKv for PoolKv {
    fn get(&self, key: &str) -> Pin<Box<dyn Future<Output = KvRead>>> {
        let read = self.pool.next_read.get() + 1;
        self.pool.next_read.set(read);
        let (tx, rx) = oneshot::channel();
        self.pool.reads.borrow_mut().insert((self.exec, read), tx);
        self.pool.inbox.push(Input::GuestRead {
            exec: self.exec,
            read,
            key: key.to_string(),
        });
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err("the read was dropped unanswered".to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_a_reason_and_a_stop_has_none() {
        let failures = [
            GuestError::InvalidInput,
            GuestError::AllocationFailed,
            GuestError::ExecutionError,
            GuestError::Code(7),
            GuestError::Trap("unreachable".into()),
            GuestError::Timeout { timeout_ms: 5 },
            GuestError::MemoryLimit { limit_bytes: 1 },
            GuestError::BadOutput("not JSON".into()),
            GuestError::InitFailed(1),
            GuestError::Instantiate("gone".into()),
        ];
        for error in &failures {
            assert!(failure_reason(error).is_some(), "{error:?}");
        }
        assert_eq!(failure_reason(&GuestError::Trap(String::new())), Some(3));
        assert_eq!(failure_reason(&GuestError::Cancelled), None);
    }
}
