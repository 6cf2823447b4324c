//! One execution: a store and instance (fresh, or kept from the last execution of a module
//! that opts in to reuse), the guest calls, and the mapping of everything that can go wrong
//! to a [`GuestError`].

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Extern, Instance, Memory, ModuleExport, Store, Trap, UpdateDeadline};

use super::host::{HostState, HostTrap, LogSink, NoKv, guest_range};
use super::stop::StopSignal;
use super::stop::lock;
use super::timer::{Cut, WithDeadline};
use super::{
    COMPILE_TRIAL_TIMEOUT_MS, ExecLimits, ExecResult, GuestError, GuestKv, MAX_DESCRIBE_BYTES,
    ModuleInner, WarmInstances, WasmError, error_text,
};

/// What to call after instantiation.
#[derive(Clone, Copy)]
pub(crate) enum Call<'a> {
    /// `init` (if exported), then `entrypoint(input)` (`handle` unless the action names
    /// another export).
    Handle {
        entrypoint: &'a str,
        input: &'a [u8],
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
    let result =
        futures_lite::future::block_on(run(module, call, None, Rc::new(NoKv), limits, &stop, None));
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

/// An instance kept for the next execution of a module that opts in to reuse: its store,
/// holding the guest's memory and globals as the last execution left them.
pub(crate) struct Warm {
    store: Store<HostState>,
    instance: Instance,
    memory: Memory,
}

/// Where a module that opts in to reuse keeps its idle instances, and under which name
/// (instances never serve another scope).
#[derive(Clone, Copy)]
pub(crate) struct Keep<'a> {
    pub instances: &'a WarmInstances,
    pub scope: &'a str,
    pub module: &'a Arc<ModuleInner>,
}

/// Runs one execution to completion (or to its deadline, or until `stop` is set).
/// `run_state`: a workflow step's run state (JSON), for `flo.state_get` / `state_set`.
/// `keep`: where a module that opts in to reuse takes an idle instance from and leaves it
/// after a successful execution; an execution that ran out of memory in a used instance
/// runs again in a fresh one (a fresh instance is what it is owed).
pub(crate) async fn run(
    module: &ModuleInner,
    call: Call<'_>,
    mut run_state: Option<Vec<u8>>,
    kv: Rc<dyn GuestKv>,
    limits: ExecLimits,
    stop: &StopSignal,
    keep: Option<Keep<'_>>,
) -> ExecResult {
    let memory_limit = limits
        .memory_limit_bytes
        .min(module.engine.memory_limit_max);
    let start = Instant::now();
    let deadline = start
        .checked_add(Duration::from_millis(limits.timeout_ms))
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400));
    let keep = keep.filter(|_| module.exports.reuse);
    let mut warm = keep.and_then(|k| k.instances.take(k.module, k.scope, memory_limit));
    loop {
        let reused = warm.is_some();
        let (mut result, back, state_back) = once(
            module,
            call,
            run_state,
            kv.clone(),
            limits,
            memory_limit,
            deadline,
            stop,
            warm.take(),
            keep.is_some(),
        )
        .await;
        if reused && matches!(result.output, Err(GuestError::MemoryLimit { .. })) {
            run_state = state_back;
            continue;
        }
        if let (Some(back), Some(k)) = (back, keep) {
            k.instances.put(k.module, k.scope, memory_limit, back);
        }
        result.reused = reused;
        return result;
    }
}

/// One attempt of [`run`], in `warm` or in a fresh instance, ending by the execution's
/// `deadline` (a second attempt has only what the first left); what it produced, the
/// instance to keep (when `keep` and the instance can serve again) and the run state
/// lent to it.
#[allow(clippy::too_many_arguments)]
async fn once(
    module: &ModuleInner,
    call: Call<'_>,
    run_state: Option<Vec<u8>>,
    kv: Rc<dyn GuestKv>,
    limits: ExecLimits,
    memory_limit: u64,
    deadline: Instant,
    stop: &StopSignal,
    warm: Option<Warm>,
    keep: bool,
) -> (ExecResult, Option<Warm>, Option<Vec<u8>>) {
    let engine = &module.engine;
    let (logs, begin) = match warm {
        Some(mut warm) => {
            warm.store
                .data_mut()
                .begin(kv, run_state, deadline, stop.clone());
            (warm.store.data().logs.clone(), Begin::Warm(warm))
        }
        None => {
            let logs = Arc::new(Mutex::new(LogSink::default()));
            let state = HostState::new(
                kv,
                run_state,
                logs.clone(),
                usize::try_from(memory_limit).unwrap_or(usize::MAX),
                deadline,
                engine.timers.clone(),
                stop.clone(),
            );
            (logs, Begin::Fresh(state))
        }
    };
    let finished = WithDeadline {
        inner: Box::pin(run_in_store(
            module,
            call,
            begin,
            memory_limit,
            limits.timeout_ms,
            keep,
        )),
        sleep: engine.timers.sleep_until(deadline),
        stop: stop.clone(),
    }
    .await;
    let logs = lock(&logs).finish();
    match finished {
        Ok(Finished {
            output: Ok(output),
            outcome,
            writes,
            state_patch,
            warm,
            run_state,
        }) => (
            ExecResult {
                output: Ok(output),
                outcome,
                kv_writes: writes,
                logs,
                state_patch: state_patch
                    .map(|p| serde_json::Value::Object(p).to_string().into_bytes()),
                reused: false,
            },
            warm,
            run_state,
        ),
        // A failure the guest reported (-3) keeps the name it gave (`flo.outcome`): the
        // failure's error code (an inline plan's `errors:` classify it).
        Ok(Finished {
            output: Err(GuestError::ExecutionError),
            outcome,
            run_state,
            ..
        }) => (
            ExecResult {
                outcome,
                ..failed(GuestError::ExecutionError, logs)
            },
            None,
            run_state,
        ),
        Ok(Finished {
            output: Err(e),
            run_state,
            ..
        }) => (failed(e, logs), None, run_state),
        // Cut off while waiting on the host (a kv read, a sleep) or between two ticks of
        // wasm code: the store was dropped, with the guest's buffered writes.
        Err(Cut::Deadline) => (
            failed(
                GuestError::Timeout {
                    timeout_ms: limits.timeout_ms,
                },
                logs,
            ),
            None,
            None,
        ),
        Err(Cut::Stopped) => (failed(GuestError::Cancelled, logs), None, None),
    }
}

fn failed(e: GuestError, logs: Vec<(u8, String)>) -> ExecResult {
    ExecResult {
        output: Err(e),
        outcome: None,
        kv_writes: Vec::new(),
        logs,
        state_patch: None,
        reused: false,
    }
}

/// How an attempt starts: in a kept instance, or in a new store. (Built once per attempt
/// and moved once into the store: the size difference costs one copy.)
#[allow(clippy::large_enum_variant)]
enum Begin {
    Warm(Warm),
    Fresh(HostState),
}

/// What the guest left in its store once its calls ended.
struct Finished {
    output: Result<Vec<u8>, GuestError>,
    outcome: Option<String>,
    writes: Vec<(String, Option<Vec<u8>>)>,
    state_patch: Option<serde_json::Map<String, serde_json::Value>>,
    /// The instance, when it is to be kept and can serve again.
    warm: Option<Warm>,
    /// The run state the store was lent.
    run_state: Option<Vec<u8>>,
}

fn new_store(module: &ModuleInner, state: HostState) -> Store<HostState> {
    let mut store = Store::new(&module.engine.engine, state);
    store.limiter(|s| &mut s.limiter);
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
    store
}

async fn run_in_store(
    module: &ModuleInner,
    call: Call<'_>,
    begin: Begin,
    memory_limit: u64,
    timeout_ms: u64,
    keep: bool,
) -> Finished {
    let (mut store, handles) = match begin {
        Begin::Warm(warm) => (warm.store, Some((warm.instance, warm.memory))),
        Begin::Fresh(state) => (new_store(module, state), None),
    };
    store.set_epoch_deadline(1);
    let handles = match handles {
        Some(handles) => Ok(handles),
        None => instantiate(&mut store, module, call).await,
    };
    let (result, handles) = match handles {
        Ok((instance, memory)) => {
            match guest_calls(&mut store, module, instance, memory, call, keep).await {
                Ok((output, usable)) => (Ok(output), usable.then_some((instance, memory))),
                Err(e) => (Err(e), None),
            }
        }
        Err(e) => (Err(e), None),
    };
    let state = store.data_mut();
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
    let state_patch = state.state_patch.take().filter(|_| result.is_ok());
    let outcome = state.outcome.take();
    let writes = std::mem::take(&mut state.writes);
    let run_state = state.take_run_state();
    // An instance whose memory has grown past half its limit is let go: the next execution
    // gets a fresh one with all of its room.
    let warm = handles
        .filter(|(_, memory)| {
            keep && result.is_ok() && (memory.data_size(&store) as u64) <= memory_limit / 2
        })
        .map(|(instance, memory)| {
            store.data_mut().release();
            Warm {
                store,
                instance,
                memory,
            }
        });
    Finished {
        output: result,
        outcome,
        writes,
        state_patch,
        warm,
        run_state,
    }
}

/// Instantiates the module in `store` and, unless `call` is only the instantiation, calls
/// `init` (if exported).
async fn instantiate(
    store: &mut Store<HostState>,
    module: &ModuleInner,
    call: Call<'_>,
) -> Result<(Instance, Memory), GuestError> {
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
        return Ok((instance, memory));
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
    Ok((instance, memory))
}

/// Calls the entrypoint (or `describe`) of an instantiated guest. With `tidy` (the
/// instance is to serve again) the input and output are handed back to the guest's
/// `dealloc` (if exported); the flag returned says whether the instance can serve again.
async fn guest_calls(
    store: &mut Store<HostState>,
    module: &ModuleInner,
    instance: Instance,
    memory: Memory,
    call: Call<'_>,
    tidy: bool,
) -> Result<(Vec<u8>, bool), GuestError> {
    let exports = &module.exports;
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
            let output = match packed {
                -1 => Err(GuestError::InvalidInput),
                -2 => Err(GuestError::AllocationFailed),
                -3 => Err(GuestError::ExecutionError),
                code if code < 0 => Err(GuestError::Code(code)),
                packed => read_packed(store, memory, packed, "output"),
            }?;
            let usable = !tidy || tidy_up(store, module, instance, packed, (ptr, len)).await;
            Ok((output, usable))
        }
        Call::Describe => {
            let Some(describe) = &exports.describe else {
                return Ok((Vec::new(), false));
            };
            let describe = typed::<(), i64>(store, &instance, describe, "describe")?;
            let packed = describe
                .call_async(&mut *store, ())
                .await
                .map_err(|e| guest_error(e, Phase::Describe))?;
            if packed < 0 {
                return Err(GuestError::Code(packed));
            }
            Ok((read_packed(store, memory, packed, "describe text")?, false))
        }
        Call::Instantiate => Ok((Vec::new(), false)),
    }
}

/// Hands an execution's output (`packed`) and input (`ptr`, `len`) back to the guest's
/// `dealloc`, if it exports one, so that an instance that serves again does not fill up.
/// False if the guest failed there (the instance is then let go; the output stands).
async fn tidy_up(
    store: &mut Store<HostState>,
    module: &ModuleInner,
    instance: Instance,
    packed: i64,
    input: (i32, i32),
) -> bool {
    let Some(dealloc) = &module.exports.dealloc else {
        return true;
    };
    let Ok(dealloc) = typed::<(i32, i32), ()>(store, &instance, dealloc, "dealloc") else {
        return false;
    };
    let output = ((packed >> 32) as i32, packed as i32);
    for (ptr, len) in [output, input] {
        if ptr != 0 && dealloc.call_async(&mut *store, (ptr, len)).await.is_err() {
            return false;
        }
    }
    true
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
