//! One execution: a fresh store and instance, the guest calls, and the mapping of everything
//! that can go wrong to a [`GuestError`].

use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Extern, Instance, Memory, ModuleExport, Store, Trap, UpdateDeadline};

use super::host::{HostState, HostTrap, LogSink, guest_range};
use super::stop::StopSignal;
use super::stop::lock;
use super::timer::{Cut, WithDeadline};
use super::{
    COMPILE_TRIAL_TIMEOUT_MS, ExecLimits, ExecResult, GuestError, GuestKv, MAX_DESCRIBE_BYTES,
    ModuleInner, WasmError, error_text,
};

/// What to call after instantiation.
pub(crate) enum Call<'a> {
    /// `init` (if exported), then `entrypoint(input)` (`handle` unless the action names
    /// another export).
    Handle {
        entrypoint: &'a str,
        input: &'a [u8],
        /// A workflow step's run state (JSON), for `flo.state_get` / `state_set`.
        run_state: Option<Vec<u8>>,
    },
    /// `init` (if exported), then `describe()`.
    Describe,
    /// Instantiation only (start function).
    Instantiate,
}

/// Where the guest was when it failed, for messages.
#[derive(Clone, Copy)]
enum Phase<'a> {
    Start,
    Init,
    Alloc,
    /// In the entrypoint (`handle`, or the export the action names).
    Handle(&'a str),
    Describe,
}

impl Phase<'_> {
    fn export(&self) -> &str {
        match self {
            Phase::Start => "",
            Phase::Init => "init",
            Phase::Alloc => "alloc",
            Phase::Handle(entrypoint) => entrypoint,
            Phase::Describe => "describe",
        }
    }
}

/// Reads nothing: the KV seen by compile-time trials.
struct NoKv;

impl GuestKv for NoKv {
    fn get(&self, _key: &str) -> Pin<Box<dyn std::future::Future<Output = crate::KvRead>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// The compile-time trial: instantiate (and `init` + `describe` when `describe` is exported).
/// Returns the describe text.
pub(crate) fn trial(module: &ModuleInner) -> Result<Option<String>, WasmError> {
    let limits = ExecLimits {
        timeout_ms: COMPILE_TRIAL_TIMEOUT_MS,
        memory_limit_bytes: module.engine.memory_limit_max,
    };
    let describe = module.exports.describe.is_some();
    let call = if describe {
        Call::Describe
    } else {
        Call::Instantiate
    };
    let stop = StopSignal::default();
    let result = futures_lite::future::block_on(run(module, call, Rc::new(NoKv), limits, &stop));
    match result.output {
        Ok(_) if !describe => Ok(None),
        Ok(bytes) => {
            if bytes.len() > MAX_DESCRIBE_BYTES {
                return Err(WasmError::Describe(format!(
                    "its text is {} bytes, at most {MAX_DESCRIBE_BYTES} are allowed",
                    bytes.len()
                )));
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| WasmError::Describe("its text is not UTF-8".into()))?;
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                return Err(WasmError::Describe(format!("its text is not JSON: {e}")));
            }
            Ok(Some(text))
        }
        Err(e) if describe => Err(WasmError::Describe(e.to_string())),
        Err(e) => Err(WasmError::Instantiate(e.to_string())),
    }
}

/// Runs one execution to completion (or to its deadline, or until `stop` is set).
pub(crate) async fn run(
    module: &ModuleInner,
    mut call: Call<'_>,
    kv: Rc<dyn GuestKv>,
    limits: ExecLimits,
    stop: &StopSignal,
) -> ExecResult {
    let engine = &module.engine;
    let start = Instant::now();
    let deadline = start
        .checked_add(Duration::from_millis(limits.timeout_ms))
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400));
    let memory_limit = limits.memory_limit_bytes.min(engine.memory_limit_max);
    let logs = Arc::new(Mutex::new(LogSink::default()));
    let run_state = match &mut call {
        Call::Handle { run_state, .. } => run_state.take(),
        Call::Describe | Call::Instantiate => None,
    };
    let state = HostState::new(
        kv,
        run_state,
        logs.clone(),
        usize::try_from(memory_limit).unwrap_or(usize::MAX),
        deadline,
        engine.timers.clone(),
        stop.clone(),
    );
    let finished = WithDeadline {
        inner: Box::pin(run_in_store(
            module,
            call,
            state,
            memory_limit,
            limits.timeout_ms,
        )),
        sleep: engine.timers.sleep_until(deadline),
        stop: stop.clone(),
    }
    .await;
    let logs = lock(&logs).finish();
    match finished {
        Ok((Ok(output), outcome, kv_writes, state_patch)) => ExecResult {
            output: Ok(output),
            outcome,
            kv_writes,
            logs,
            state_patch: state_patch.map(|p| serde_json::Value::Object(p).to_string().into_bytes()),
        },
        // A failure the guest reported (-3) keeps the name it gave (`flo.outcome`): the
        // failure's error code (an inline plan's `errors:` classify it).
        Ok((Err(GuestError::ExecutionError), outcome, ..)) => ExecResult {
            outcome,
            ..failed(GuestError::ExecutionError, logs)
        },
        Ok((Err(e), ..)) => failed(e, logs),
        // Cut off while waiting on the host (a kv read, a sleep) or between two ticks of
        // wasm code: the store was dropped, with the guest's buffered writes.
        Err(Cut::Deadline) => failed(
            GuestError::Timeout {
                timeout_ms: limits.timeout_ms,
            },
            logs,
        ),
        Err(Cut::Stopped) => failed(GuestError::Cancelled, logs),
    }
}

fn failed(e: GuestError, logs: Vec<(u8, String)>) -> ExecResult {
    ExecResult {
        output: Err(e),
        outcome: None,
        kv_writes: Vec::new(),
        logs,
        state_patch: None,
    }
}

type StoreOutput = (
    Result<Vec<u8>, GuestError>,
    Option<String>,
    Vec<(String, Option<Vec<u8>>)>,
    Option<serde_json::Map<String, serde_json::Value>>,
);

async fn run_in_store(
    module: &ModuleInner,
    call: Call<'_>,
    state: HostState,
    memory_limit: u64,
    timeout_ms: u64,
) -> StoreOutput {
    let mut store = Store::new(&module.engine.engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let state = ctx.data_mut();
        if state.stop.is_stopped() {
            state.stopped = true;
            return Err(wasmtime::Error::new(HostTrap("execution cancelled".into())));
        }
        if Instant::now() >= state.deadline {
            state.timed_out = true;
            return Err(wasmtime::Error::new(HostTrap("execution timed out".into())));
        }
        Ok(UpdateDeadline::Yield(1))
    });
    let result = guest_calls(&mut store, module, call).await;
    let state = store.into_data();
    let result = match result {
        Ok(output) => Ok(output),
        Err(_) if state.stopped => Err(GuestError::Cancelled),
        Err(_) if state.timed_out => Err(GuestError::Timeout { timeout_ms }),
        // A refused memory growth is the likely cause of any failure that follows it.
        Err(_) if state.limiter.memory_denied => Err(GuestError::MemoryLimit {
            limit_bytes: memory_limit,
        }),
        Err(e) => Err(e),
    };
    // A failed execution has no effects: its state fields are dropped with its writes.
    let patch = state.state_patch.filter(|_| result.is_ok());
    (result, state.outcome, state.writes, patch)
}

async fn guest_calls(
    store: &mut Store<HostState>,
    module: &ModuleInner,
    call: Call<'_>,
) -> Result<Vec<u8>, GuestError> {
    let exports = &module.exports;
    let instance = module
        .pre
        .instantiate_async(&mut *store)
        .await
        .map_err(|e| guest_error(e, Phase::Start))?;
    let memory = get(store, &instance, &exports.memory)
        .and_then(Extern::into_memory)
        .ok_or_else(|| GuestError::Instantiate("export `memory` not found".into()))?;
    store.data_mut().memory = Some(memory);
    if matches!(call, Call::Instantiate) {
        return Ok(Vec::new());
    }

    if let Some(init) = &exports.init {
        let init = typed::<(), i32>(store, &instance, init, "init")?;
        let code = init
            .call_async(&mut *store, ())
            .await
            .map_err(|e| guest_error(e, Phase::Init))?;
        if code != 0 {
            return Err(GuestError::InitFailed(code));
        }
    }

    match call {
        Call::Handle {
            entrypoint, input, ..
        } => {
            let (ptr, len) = if input.is_empty() {
                (0, 0)
            } else {
                let len = i32::try_from(input.len()).map_err(|_| GuestError::AllocationFailed)?;
                let alloc = typed::<i32, i32>(store, &instance, &exports.alloc, "alloc")?;
                let ptr = alloc
                    .call_async(&mut *store, len)
                    .await
                    .map_err(|e| guest_error(e, Phase::Alloc))?;
                let data = memory.data_mut(&mut *store);
                let range = guest_range(ptr, len, data.len())
                    .filter(|_| ptr != 0)
                    .ok_or(GuestError::AllocationFailed)?;
                data[range].copy_from_slice(input);
                (ptr, len)
            };
            let export = module.module.get_export_index(entrypoint).ok_or_else(|| {
                GuestError::Instantiate(format!("export `{entrypoint}` not found"))
            })?;
            let handle = typed::<(i32, i32), i64>(store, &instance, &export, entrypoint)?;
            let packed = handle
                .call_async(&mut *store, (ptr, len))
                .await
                .map_err(|e| guest_error(e, Phase::Handle(entrypoint)))?;
            match packed {
                -1 => Err(GuestError::InvalidInput),
                -2 => Err(GuestError::AllocationFailed),
                -3 => Err(GuestError::ExecutionError),
                code if code < 0 => Err(GuestError::Code(code)),
                packed => read_packed(store, memory, packed, "output"),
            }
        }
        Call::Describe => {
            let Some(describe) = &exports.describe else {
                return Ok(Vec::new());
            };
            let describe = typed::<(), i64>(store, &instance, describe, "describe")?;
            let packed = describe
                .call_async(&mut *store, ())
                .await
                .map_err(|e| guest_error(e, Phase::Describe))?;
            if packed < 0 {
                return Err(GuestError::Code(packed));
            }
            read_packed(store, memory, packed, "describe text")
        }
        Call::Instantiate => Ok(Vec::new()),
    }
}

fn get(store: &mut Store<HostState>, instance: &Instance, export: &ModuleExport) -> Option<Extern> {
    instance.get_module_export(&mut *store, export)
}

fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &mut Store<HostState>,
    instance: &Instance,
    export: &ModuleExport,
    name: &str,
) -> Result<wasmtime::TypedFunc<P, R>, GuestError> {
    get(store, instance, export)
        .and_then(Extern::into_func)
        .and_then(|f| f.typed::<P, R>(&*store).ok())
        .ok_or_else(|| GuestError::Instantiate(format!("export `{name}` not found")))
}

/// Copies `ptr..ptr+len` (packed as `ptr << 32 | len`, `packed >= 0`) out of guest memory.
fn read_packed(
    store: &Store<HostState>,
    memory: Memory,
    packed: i64,
    what: &str,
) -> Result<Vec<u8>, GuestError> {
    let ptr = (packed >> 32) as i32;
    let len = packed as i32;
    let data = memory.data(store);
    match guest_range(ptr, len, data.len()) {
        Some(range) => Ok(data[range].to_vec()),
        None => Err(GuestError::BadOutput(format!(
            "{what} at {}..{} ({} bytes) is outside guest memory ({} bytes)",
            ptr as u32,
            u64::from(ptr as u32) + u64::from(len as u32),
            len as u32,
            data.len()
        ))),
    }
}

fn trap_text(trap: &Trap) -> String {
    match trap {
        Trap::UnreachableCodeReached => "unreachable instruction executed".into(),
        Trap::MemoryOutOfBounds => "out-of-bounds memory access".into(),
        Trap::StackOverflow => "call stack exhausted".into(),
        Trap::IntegerDivisionByZero => "integer divide by zero".into(),
        Trap::IntegerOverflow => "integer overflow".into(),
        Trap::BadConversionToInteger => "invalid conversion to integer".into(),
        Trap::IndirectCallToNull => "call through an uninitialized table element".into(),
        Trap::BadSignature => "indirect call type mismatch".into(),
        Trap::TableOutOfBounds => "out-of-bounds table access".into(),
        Trap::HeapMisaligned => "unaligned atomic access".into(),
        other => other.to_string(),
    }
}

/// Maps a wasmtime error raised while calling the guest.
fn guest_error(e: wasmtime::Error, phase: Phase<'_>) -> GuestError {
    let mut place = match phase {
        Phase::Start => "in the start function".to_string(),
        p => format!("in {}", p.export()),
    };
    if let Some(func) = e
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .and_then(|bt| bt.frames().first())
        .and_then(|frame| frame.func_name())
        && func != phase.export()
    {
        place.push_str(&format!(", at `{func}`"));
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return GuestError::Trap(format!("{} ({place})", trap_text(trap)));
    }
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return GuestError::Trap(format!("exited through proc_exit({}) ({place})", exit.0));
    }
    if let Some(HostTrap(message)) = e.downcast_ref::<HostTrap>() {
        return GuestError::Trap(format!("{message} ({place})"));
    }
    match phase {
        Phase::Start => GuestError::Instantiate(error_text(&e)),
        _ => GuestError::Trap(format!("{} ({place})", error_text(&e))),
    }
}
