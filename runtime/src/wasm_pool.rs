//! Performs the engine's WebAssembly effects: compiles modules (once per content, shared by
//! every shard; per shard cached by action version) and runs executions as tasks. A guest's
//! KV reads go to the engine as inputs; results come back as `Input::Executed`.

use crate::inbox::Inbox;
use ahash::AHashMap as HashMap;
use flo_engine::{ExecFailure, ExecResult, Execution, Input};
use flo_wasm::{ExecLimits, GuestError, GuestKv, WasmEngine, WasmModule};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// Compiled modules by content hash, shared by all shards (compiling is the costly part).
pub(crate) type SharedModules = Arc<Mutex<std::collections::HashMap<u128, WasmModule>>>;

/// Where the answer to a guest's read goes.
type ReadReply = oneshot::Sender<Option<Vec<u8>>>;

pub(crate) struct WasmPool {
    engine: WasmEngine,
    shared: SharedModules,
    /// (namespace, action, version) → module.
    local: RefCell<HashMap<(String, String, u32), WasmModule>>,
    /// Guest reads waiting for the engine's answer: (exec, read) → where it goes.
    reads: RefCell<HashMap<(u64, u64), ReadReply>>,
    next_read: Cell<u64>,
    inbox: Rc<Inbox>,
}

fn content_key(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

impl WasmPool {
    pub fn new(engine: WasmEngine, shared: SharedModules, inbox: Rc<Inbox>) -> Self {
        WasmPool {
            engine,
            shared,
            local: RefCell::new(HashMap::new()),
            reads: RefCell::new(HashMap::new()),
            next_read: Cell::new(0),
            inbox,
        }
    }

    async fn compile(&self, bytes: &[u8]) -> Result<WasmModule, String> {
        let key = content_key(bytes);
        if let Some(m) = self.shared.lock().map_err(|e| e.to_string())?.get(&key) {
            return Ok(m.clone());
        }
        let engine = self.engine.clone();
        let bytes = bytes.to_vec();
        let module = glommio::executor()
            .spawn_blocking(move || engine.compile(&bytes).map_err(|e| e.to_string()))
            .await?;
        self.shared
            .lock()
            .map_err(|e| e.to_string())?
            .insert(key, module.clone());
        Ok(module)
    }

    /// Compiles a module being registered; the engine learns what `describe` says.
    pub fn compile_job(self: &Rc<Self>, job: u64, wasm: Arc<[u8]>) {
        let pool = self.clone();
        glommio::spawn_local(async move {
            let result = pool
                .compile(&wasm)
                .await
                .map(|m| m.describe().map(str::to_string));
            pool.inbox.push(Input::Compiled { job, result });
        })
        .detach();
    }

    async fn module_for(&self, x: &Execution) -> Result<WasmModule, String> {
        let key = (x.namespace.clone(), x.action.clone(), x.version);
        if let Some(m) = self.local.borrow().get(&key) {
            return Ok(m.clone());
        }
        let module = self.compile(&x.wasm).await?;
        self.local.borrow_mut().insert(key, module.clone());
        Ok(module)
    }

    /// Runs one execution in its own task.
    pub fn execute(self: &Rc<Self>, x: Execution) {
        let pool = self.clone();
        glommio::spawn_local(async move {
            let exec = x.exec;
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
                    let r = module.execute(&x.input, kv, limits).await;
                    ExecResult {
                        output: r.output.map_err(failure),
                        outcome: r.outcome,
                        kv_writes: r.kv_writes,
                        logs: r.logs,
                    }
                }
                Err(message) => ExecResult {
                    output: Err(failure(GuestError::Instantiate(message))),
                    outcome: None,
                    kv_writes: Vec::new(),
                    logs: Vec::new(),
                },
            };
            pool.inbox.push(Input::Executed { exec, result });
        })
        .detach();
    }

    /// The engine's answer to a guest's read.
    pub fn guest_value(&self, exec: u64, read: u64, value: Option<Vec<u8>>) {
        if let Some(tx) = self.reads.borrow_mut().remove(&(exec, read)) {
            let _ = tx.send(value);
        }
    }
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
    fn get(&self, key: &str) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>>>> {
        let read = self.pool.next_read.get() + 1;
        self.pool.next_read.set(read);
        let (tx, rx) = oneshot::channel();
        self.pool.reads.borrow_mut().insert((self.exec, read), tx);
        self.pool.inbox.push(Input::GuestRead {
            exec: self.exec,
            read,
            key: key.to_string(),
        });
        Box::pin(async move { rx.await.ok().flatten() })
    }
}
