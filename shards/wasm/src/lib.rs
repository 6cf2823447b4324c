//! WebAssembly actions: compile a guest module once, execute it per invocation.
//!
//! This module only compiles and executes; the shard decides when to run (its execution slots,
//! queueing) and records results. It is runtime-agnostic (plain futures): no glommio here.
//!
//! # Model
//! - One [`WasmEngine`] per process (cheap to clone; `Send + Sync`). It owns the
//!   `wasmtime::Engine` (pooling allocator, epoch interruption, async host calls), the linker
//!   with the host functions, and starts one ticker thread (`flo-wasm-epoch`, 1 ms tick) that
//!   advances the epoch and fires the engine's timers. The thread ends by itself once the engine
//!   and every module compiled by it are dropped.
//! - [`WasmEngine::compile`] validates the module against the ABI (see below), pre-links it
//!   (`InstancePre`) and instantiates it once as a trial (start function, `init` + `describe`
//!   when `describe` is exported). [`WasmModule`] is cheap to clone and `Send + Sync`.
//! - [`WasmModule::execute`] instantiates a fresh instance (nothing survives between
//!   executions), calls `init` if exported, copies the input in through `alloc`, calls
//!   `handle`, and copies the output out. `dealloc` is never called: the instance is discarded.
//!   A module that opts in (export `flo_reuse_instance`) may instead run in an instance kept
//!   from its last execution ([`WarmInstances`], [`WasmModule::execute_kept`]).
//!
//! # ABI (spec `flo-actions.md`, "WASM Actions")
//! Guest exports: `memory` (32-bit, not shared); `handle(ptr: i32, len: i32) -> i64` returning
//! `(out_ptr << 32) | out_len` or a negative code (-1 invalid input, -2 allocation failed,
//! -3 execution error, other = "error code N"); `alloc(size: i32) -> i32` (0 = failure);
//! optional `dealloc(ptr: i32, size: i32)`, `init() -> i32` (non-zero = failed),
//! `describe() -> i64` (packed ptr|len of a JSON text, read at compile time only).
//! Empty input is passed as `handle(0, 0)` without calling `alloc`.
//!
//! Host imports, module `flo`: `log(level, ptr, len)`, `kv_get(key_ptr, key_len, buf_ptr,
//! buf_len) -> i32` (value length, copying `min(len, buf_len)` bytes; -1 not found; -2 bad
//! arguments), `kv_set(key_ptr, key_len, val_ptr, val_len) -> i32` (0 ok, -2 bad arguments),
//! `kv_delete(key_ptr, key_len) -> i32`, `outcome(ptr, len)` (≤ 64 bytes UTF-8, last call
//! wins, empty clears), `state_get(buf_ptr, buf_len) -> i32` (a workflow step's run state
//! as JSON: its length, copying what fits; -1 outside a workflow step), `state_set(ptr, len)
//! -> i32` (a JSON object whose fields the step sets in its run's state, later calls win;
//! 0 ok, -1 outside a workflow step, -2 not an object or past 1 MiB in all; merged with the
//! step's completion, dropped if the execution fails). Keys are 1..=1024 bytes of UTF-8,
//! values ≤ 1 MiB. Writes are buffered
//! (at most 10 000 writes / 64 MiB per execution, beyond that the guest traps) and reads see
//! them first; other reads go to the caller's [`GuestKv`]. WASI preview1
//! (`wasi_snapshot_preview1`) is available with no preopened directories, no network, no
//! environment or arguments, a closed stdin; stdout lines are logged at level 1 (info), stderr
//! lines at level 2 (warn). `poll_oneoff` supports relative clocks and absolute realtime clocks
//! (sleeping on the engine's 1 ms timer).
//!
//! # Limits
//! Memory: [`ExecLimits::memory_limit_bytes`] (capped at [`WasmConfig::memory_limit_bytes_max`])
//! bounds the guest's memory, initial size included; tables hold at most 20 000 elements.
//! Time: [`ExecLimits::timeout_ms`] of wall time from the start of the execution, enforced by
//! epoch interruption inside wasm code (the guest yields to the executor every tick, so it never
//! holds the thread for more than ~1 ms) and by the engine's timer while the guest waits on the
//! host (a `kv_get`, a sleep). Logs: at most 100 entries of at most 4 KiB. An execution can
//! be stopped from outside ([`StopSignal`], [`WasmModule::execute_with_stop`]): it ends with
//! [`GuestError::Cancelled`] within a tick, with no output and no KV writes.
//!
//! # Threading
//! [`WasmModule::execute`] returns a `!Send` future (it holds the `Rc<dyn GuestKv>`): poll it
//! on the thread that created it. The wasmtime store inside never leaves that thread;
//! `SendWrapper` makes the `!Send` parts satisfy wasmtime's `Send` bounds and would panic if
//! that were ever broken. At most [`WasmConfig::max_instances`] executions (plus compile-time
//! trial instantiations) may be alive at once in the process; one more fails with
//! [`GuestError::Instantiate`].

mod exec;
mod host;
mod stop;
#[cfg(test)]
mod tests;
mod timer;
mod validate;

use std::rc::Rc;
use std::sync::Arc;

use wasmtime::PoolingAllocationConfig;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module};

use host::HostState;
use timer::Timers;

pub use stop::StopSignal;

pub use host::{
    MAX_KV_WRITE_BYTES, MAX_KV_WRITES, MAX_LOG_ENTRIES, MAX_LOG_ENTRY_BYTES, MAX_OUTCOME_BYTES,
    MAX_TABLE_ELEMENTS,
};

/// The export an execution calls unless its action names another (the spec's
/// `wasm_entrypoint` default).
pub const ENTRYPOINT_DEFAULT: &str = "handle";
/// Time allowed for the trial instantiation at compile time (start function, `init`,
/// `describe`).
pub const COMPILE_TRIAL_TIMEOUT_MS: u64 = 1000;
/// Largest `describe()` text accepted.
pub const MAX_DESCRIBE_BYTES: usize = 64 << 10;

/// A guest's read of a key: its value, none (absent), or why it could not be read (the
/// execution then fails: a value it never saw must not read as absent).
pub type KvRead = Result<Option<Vec<u8>>, String>;

/// Reads of the caller's KV store on behalf of a guest (`flo.kv_get`). The future may be
/// `!Send`; it is polled on the executing thread.
pub trait GuestKv {
    fn get(&self, key: &str) -> std::pin::Pin<Box<dyn std::future::Future<Output = KvRead>>>;
}

/// Engine-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmConfig {
    /// Pooling slots: the most instances alive at once in the process (executions plus
    /// compile-time trials), e.g. 4 per shard × shards + a few spare.
    pub max_instances: u32,
    /// The largest per-execution memory limit allowed (e.g. 256 MiB); larger
    /// [`ExecLimits::memory_limit_bytes`] are capped to it. 64 KiB to 4 GiB.
    pub memory_limit_bytes_max: u64,
}

impl Default for WasmConfig {
    fn default() -> Self {
        WasmConfig {
            max_instances: 64,
            memory_limit_bytes_max: 256 << 20,
        }
    }
}

/// Limits of one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    pub timeout_ms: u64,
    pub memory_limit_bytes: u64,
}

impl Default for ExecLimits {
    /// 30 s, 16 MiB.
    fn default() -> Self {
        ExecLimits {
            timeout_ms: 30_000,
            memory_limit_bytes: 16 << 20,
        }
    }
}

/// What an execution produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecResult {
    /// The output bytes, or why there are none.
    pub output: Result<Vec<u8>, GuestError>,
    /// The outcome the guest named through `flo.outcome`. When `output` is an error: the
    /// name the guest gave before reporting the failure (-3), its error code; `None` for
    /// every other failure.
    pub outcome: Option<String>,
    /// Buffered KV writes in call order (`None` = delete), to be committed atomically with the
    /// run's completion. Always empty when `output` is an error: a failed execution has no
    /// effects.
    pub kv_writes: Vec<(String, Option<Vec<u8>>)>,
    /// Log entries `(level 0..=3, text)`, including captured WASI stdout/stderr; kept on error.
    pub logs: Vec<(u8, String)>,
    /// A workflow step's execution: the fields the guest set in its run's state through
    /// `flo.state_set` (a JSON object), None if it set none or failed.
    pub state_patch: Option<Vec<u8>>,
    /// It ran in an instance kept from an earlier execution ([`WarmInstances`]).
    pub reused: bool,
}

/// Why an execution produced no output. Messages are meant for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestError {
    #[error("guest rejected its input as invalid (handle returned -1)")]
    InvalidInput,
    #[error("guest could not allocate memory (-2)")]
    AllocationFailed,
    #[error("guest reported an execution error (handle returned -3)")]
    ExecutionError,
    #[error("guest returned error code {0}")]
    Code(i64),
    #[error("guest trapped: {0}")]
    Trap(String),
    #[error("execution timed out after {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    /// Stopped through its [`StopSignal`].
    #[error("execution cancelled")]
    Cancelled,
    #[error("guest exceeded its memory limit of {}", human_bytes(*.limit_bytes))]
    MemoryLimit { limit_bytes: u64 },
    #[error("guest returned a bad output: {0}")]
    BadOutput(String),
    #[error("guest init() failed with code {0}")]
    InitFailed(i32),
    #[error("could not instantiate the module: {0}")]
    Instantiate(String),
}

/// Why an engine could not be built or a module not compiled/loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    #[error("invalid wasm engine configuration: {0}")]
    Config(String),
    #[error("module does not compile: {0}")]
    Compile(String),
    #[error("module is not a valid flo action: {0}")]
    Invalid(String),
    #[error("module cannot be instantiated: {0}")]
    Instantiate(String),
    #[error("module's describe() failed: {0}")]
    Describe(String),
    #[error("cannot serialize the compiled module: {0}")]
    Serialize(String),
    #[error("cannot load the precompiled module: {0}")]
    Deserialize(String),
}

/// `16 MiB`, `64 KiB`, `1000 bytes`.
pub(crate) fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// An error and its causes on one line.
pub(crate) fn error_text(e: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        // The wasm backtrace context: not for people (the function is named separately).
        if text.starts_with("error while executing at wasm backtrace") {
            continue;
        }
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

pub(crate) struct EngineInner {
    engine: Engine,
    linker: Linker<HostState>,
    timers: Arc<Timers>,
    memory_limit_max: u64,
}

/// The process-wide compiler and runtime. See the module docs.
#[derive(Clone)]
pub struct WasmEngine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("memory_limit_max", &self.inner.memory_limit_max)
            .finish_non_exhaustive()
    }
}

impl WasmEngine {
    /// Builds the engine (pooling allocator sized by `cfg`, epoch interruption) and starts its
    /// ticker thread.
    pub fn new(cfg: WasmConfig) -> Result<Self, WasmError> {
        if cfg.max_instances == 0 {
            return Err(WasmError::Config("max_instances must be at least 1".into()));
        }
        if !(1 << 16..=1 << 32).contains(&cfg.memory_limit_bytes_max) {
            return Err(WasmError::Config(format!(
                "memory_limit_bytes_max must be 64 KiB to 4 GiB, got {}",
                cfg.memory_limit_bytes_max
            )));
        }
        let n = cfg.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(n)
            .total_memories(n)
            .total_tables(n)
            .total_stacks(n)
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .table_elements(MAX_TABLE_ELEMENTS)
            .max_memory_size(cfg.memory_limit_bytes_max as usize);
        // Reset the first page of a memory (and the start of a table) with memset instead of
        // madvise: no syscall and no page faults for small guests (~9 → ~6 µs per execution).
        // Where the kernel has PAGEMAP_SCAN (Linux 6.7+), only the pages the execution
        // wrote are reset, not the whole 64 KiB.
        pool.linear_memory_keep_resident(64 << 10)
            .table_keep_resident(16 << 10)
            .pagemap_scan(Enabled::Auto);
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| WasmError::Config(error_text(&e)))?;
        let mut linker = Linker::new(&engine);
        host::add_to_linker(&mut linker).map_err(|e| WasmError::Config(error_text(&e)))?;
        let timers = Arc::new(Timers::default());
        timer::start_ticker(engine.weak(), Arc::downgrade(&timers))
            .map_err(|e| WasmError::Config(format!("cannot start the epoch thread: {e}")))?;
        Ok(WasmEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                timers,
                memory_limit_max: cfg.memory_limit_bytes_max,
            }),
        })
    }

    /// Compiles a module (binary or WAT text), checks it against the ABI (its entrypoint
    /// being [`ENTRYPOINT_DEFAULT`], `handle`) and instantiates it once as a trial (calling
    /// `init` and `describe` when `describe` is exported). Blocks the calling thread for the
    /// compilation (milliseconds to seconds for large modules) and the trial (at most
    /// [`COMPILE_TRIAL_TIMEOUT_MS`]).
    pub fn compile(&self, bytes: &[u8]) -> Result<WasmModule, WasmError> {
        self.compile_for(bytes, Some(ENTRYPOINT_DEFAULT))
    }

    /// [`compile`](Self::compile) with the entrypoint `entrypoint` checked instead of
    /// `handle`; none: no entrypoint is checked (a module cached for actions of several
    /// entrypoints; check each with [`WasmModule::check_entrypoint`]).
    pub fn compile_for(
        &self,
        bytes: &[u8],
        entrypoint: Option<&str>,
    ) -> Result<WasmModule, WasmError> {
        let module = Module::new(&self.inner.engine, bytes)
            .map_err(|e| WasmError::Compile(error_text(&e)))?;
        self.finish(module, entrypoint)
    }

    /// [`compile`](Self::compile), then [`WasmModule::serialize`]: bytes for a cache, to be
    /// loaded with [`load_precompiled`](Self::load_precompiled) by an engine of the same
    /// wasmtime version and configuration.
    pub fn precompile(&self, bytes: &[u8]) -> Result<Vec<u8>, WasmError> {
        self.compile(bytes)?.serialize()
    }

    /// Loads bytes from [`precompile`](Self::precompile) / [`WasmModule::serialize`], with the
    /// same checks and trial as [`compile`](Self::compile). An artifact from another wasmtime
    /// version or configuration is refused.
    ///
    /// # Safety
    /// `bytes` must come from `precompile`/`serialize` (possibly in an earlier process) and not
    /// have been tampered with: they are native code, loaded without verification.
    pub unsafe fn load_precompiled(&self, bytes: &[u8]) -> Result<WasmModule, WasmError> {
        // SAFETY: the caller vouches for the origin of `bytes`.
        let module = unsafe { Module::deserialize(&self.inner.engine, bytes) }
            .map_err(|e| WasmError::Deserialize(error_text(&e)))?;
        self.finish(module, Some(ENTRYPOINT_DEFAULT))
    }

    fn finish(&self, module: Module, entrypoint: Option<&str>) -> Result<WasmModule, WasmError> {
        let exports = validate::check(&module, self.inner.memory_limit_max, entrypoint)?;
        let pre = self
            .inner
            .linker
            .instantiate_pre(&module)
            .map_err(|e| WasmError::Invalid(error_text(&e)))?;
        let mut inner = ModuleInner {
            engine: self.inner.clone(),
            module,
            pre,
            exports,
            describe: None,
        };
        inner.describe = exec::trial(&inner)?;
        Ok(WasmModule {
            inner: Arc::new(inner),
        })
    }
}

pub(crate) struct ModuleInner {
    engine: Arc<EngineInner>,
    module: Module,
    pre: InstancePre<HostState>,
    exports: validate::Exports,
    describe: Option<String>,
}

/// A compiled, checked action module. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct WasmModule {
    inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for WasmModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmModule")
            .field("describe", &self.inner.describe)
            .finish_non_exhaustive()
    }
}

impl WasmModule {
    /// The JSON text returned by the guest's `describe()`, if it exports one.
    pub fn describe(&self) -> Option<&str> {
        self.inner.describe.as_deref()
    }

    /// Whether the module exports `entrypoint` as a function `(i32, i32) -> i64`, the
    /// signature of `handle`.
    pub fn check_entrypoint(&self, entrypoint: &str) -> Result<(), WasmError> {
        validate::check_entrypoint(&self.inner.module, entrypoint)
    }

    /// The compiled artifact, for [`WasmEngine::load_precompiled`].
    pub fn serialize(&self) -> Result<Vec<u8>, WasmError> {
        self.inner
            .module
            .serialize()
            .map_err(|e| WasmError::Serialize(error_text(&e)))
    }

    /// Memory the compiled code takes (wasmtime's image of the module: code, data, metadata),
    /// what a cache of modules counts. The instances' memories are not included.
    pub fn size_bytes(&self) -> u64 {
        let range = self.inner.module.image_range();
        (range.end as usize).saturating_sub(range.start as usize) as u64
    }

    /// Runs `handle` on `input` in a fresh instance. Never panics on guest behaviour; every
    /// failure is in [`ExecResult::output`] (a module without the export fails the
    /// execution with [`GuestError::Instantiate`]).
    pub async fn execute(
        &self,
        input: &[u8],
        kv: Rc<dyn GuestKv>,
        limits: ExecLimits,
    ) -> ExecResult {
        self.execute_with_stop(input, kv, limits, &StopSignal::default())
            .await
    }

    /// [`execute`](Self::execute) that ends with [`GuestError::Cancelled`] within a tick
    /// once `stop` is set (at once if it already is).
    pub async fn execute_with_stop(
        &self,
        input: &[u8],
        kv: Rc<dyn GuestKv>,
        limits: ExecLimits,
        stop: &StopSignal,
    ) -> ExecResult {
        self.execute_entrypoint(ENTRYPOINT_DEFAULT, input, None, kv, limits, stop)
            .await
    }

    /// [`execute_with_stop`](Self::execute_with_stop), calling the export `entrypoint`
    /// instead of `handle` (same signature, same ABI); `run_state`: a workflow step's run
    /// state (JSON), which `flo.state_get` reads and `flo.state_set` adds fields to
    /// ([`ExecResult::state_patch`]).
    pub async fn execute_entrypoint(
        &self,
        entrypoint: &str,
        input: &[u8],
        run_state: Option<Vec<u8>>,
        kv: Rc<dyn GuestKv>,
        limits: ExecLimits,
        stop: &StopSignal,
    ) -> ExecResult {
        self.execute_kept(None, entrypoint, input, run_state, kv, limits, stop)
            .await
    }

    /// Whether the module opts in to instance reuse (it exports `flo_reuse_instance`).
    pub fn reuses_instances(&self) -> bool {
        self.inner.exports.reuse
    }

    /// [`execute_entrypoint`](Self::execute_entrypoint); when the module opts in to reuse
    /// and `keep` names where (`kept`, `scope`), the execution takes an idle instance of
    /// this module and scope from `kept` (else a fresh one) and leaves it there after a
    /// success. See [`WarmInstances`].
    #[allow(clippy::too_many_arguments)]
    pub async fn execute_kept(
        &self,
        keep: Option<(&WarmInstances, &str)>,
        entrypoint: &str,
        input: &[u8],
        run_state: Option<Vec<u8>>,
        kv: Rc<dyn GuestKv>,
        limits: ExecLimits,
        stop: &StopSignal,
    ) -> ExecResult {
        let call = exec::Call::Handle { entrypoint, input };
        let keep = keep.map(|(instances, scope)| exec::Keep {
            instances,
            scope,
            module: &self.inner,
        });
        exec::run(&self.inner, call, run_state, kv, limits, stop, keep).await
    }
}

/// Idle instances of modules that opt in to reuse, kept between executions on one thread
/// (a shard keeps one of these; its store never leaves the thread).
///
/// A module opts in by exporting a function `flo_reuse_instance` (no parameters, no
/// results; never called). Its instance then serves execution after execution of the same
/// scope (the caller's name for who may share it, e.g. a namespace and action): `init` runs
/// once per instance, the guest's memory and globals carry over, the input and output are
/// handed to `dealloc` (if exported) after each execution. An instance is let go after an
/// execution that failed in any way (trap, error code, timeout, stop), once its memory has
/// grown past half its limit, and when more than `capacity` are idle (the least recently
/// used first); an execution that runs out of memory in a used instance runs again in a fresh
/// one. Each idle instance holds one of the engine's pooling slots.
pub struct WarmInstances {
    idle: std::cell::RefCell<std::collections::VecDeque<Idle>>,
    capacity: usize,
}

struct Idle {
    scope: Box<str>,
    module: Arc<ModuleInner>,
    memory_limit: u64,
    warm: exec::Warm,
}

impl WarmInstances {
    /// Keeps at most `capacity` idle instances.
    pub fn new(capacity: usize) -> Self {
        WarmInstances {
            idle: Default::default(),
            capacity,
        }
    }

    /// Idle instances kept now.
    pub fn len(&self) -> usize {
        self.idle.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lets every idle instance go.
    pub fn clear(&self) {
        self.idle.borrow_mut().clear();
    }

    /// The most recently used idle instance of `module` for `scope` and `memory_limit`.
    fn take(
        &self,
        module: &Arc<ModuleInner>,
        scope: &str,
        memory_limit: u64,
    ) -> Option<exec::Warm> {
        let mut idle = self.idle.borrow_mut();
        let at = idle.iter().rposition(|i| {
            Arc::ptr_eq(&i.module, module) && i.memory_limit == memory_limit && &*i.scope == scope
        })?;
        idle.remove(at).map(|i| i.warm)
    }

    fn put(&self, module: &Arc<ModuleInner>, scope: &str, memory_limit: u64, warm: exec::Warm) {
        if self.capacity == 0 {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= self.capacity {
            idle.pop_front();
        }
        idle.push_back(Idle {
            scope: scope.into(),
            module: module.clone(),
            memory_limit,
            warm,
        });
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<WasmEngine>();
    is::<WasmModule>();
    is::<StopSignal>();
}
