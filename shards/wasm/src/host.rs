//! Per-execution host state and the host functions a guest may import: `flo.*` and the WASI
//! preview1 shims (wasmtime-wasi, with no filesystem, network, env or args; stdout/stderr are
//! captured into the execution's log; `poll_oneoff` replaced so it needs no tokio runtime).

use std::collections::HashMap;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use flo_protocol::{KV_KEY_BYTES_MAX, KV_VALUE_BYTES_MAX};
use send_wrapper::SendWrapper;
use wasmtime::{Caller, Extern, Linker, Memory, ResourceLimiter};
use wasmtime_wasi::p1::WasiP1Ctx;

use super::GuestKv;
use super::stop::StopSignal;
use super::stop::lock;
use super::timer::Timers;

/// At most this many log entries per execution (the last one may be a "dropped" note).
pub const MAX_LOG_ENTRIES: usize = 100;
/// A log entry is truncated to this many bytes.
pub const MAX_LOG_ENTRY_BYTES: usize = 4096;
/// `flo.outcome` names longer than this are ignored.
pub const MAX_OUTCOME_BYTES: usize = 64;
/// Buffered `kv_set`/`kv_delete` calls per execution; one more traps the guest.
pub const MAX_KV_WRITES: usize = 10_000;
/// Total bytes (keys + values) of buffered writes per execution; more traps the guest.
pub const MAX_KV_WRITE_BYTES: usize = 64 << 20;
/// Table elements a guest may have (matches the pooling allocator's per-table slot).
pub const MAX_TABLE_ELEMENTS: usize = 20_000;

/// Bytes of state fields a guest may set per execution (`flo.state_set`), as JSON: a
/// run's whole state is at most this large.
pub const MAX_STATE_PATCH_BYTES: usize = 1 << 20;

/// `kv_*` (and `state_*`) return codes; -1 from `state_*`: not a workflow step.
const KV_NOT_FOUND: i32 = -1;
const KV_BAD_ARGS: i32 = -2;

/// An error a host function raises to trap the guest, with a message for people.
#[derive(Debug)]
pub(crate) struct HostTrap(pub String);

impl std::fmt::Display for HostTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostTrap {}

/// Memory and table limits of one store.
pub(crate) struct Limiter {
    pub memory_limit: usize,
    /// Set when a memory growth (or the initial allocation) was refused for exceeding the limit.
    pub memory_denied: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.memory_denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        1
    }

    fn memories(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        1
    }
}

/// Collected log entries, bounded. Shared (`Arc<Mutex>`) between the `flo.log` host function
/// and the WASI stdout/stderr streams, and kept by the caller so that logs survive an execution
/// that is cut off by its deadline.
#[derive(Default)]
pub(crate) struct LogSink {
    entries: Vec<(u8, String)>,
    dropped: usize,
    /// Unfinished lines of stdout (0) and stderr (1).
    partial: [Vec<u8>; 2],
}

/// Level of captured stdout lines (info) and stderr lines (warn).
const STREAM_LEVELS: [u8; 2] = [1, 2];

impl LogSink {
    pub fn push(&mut self, level: u8, bytes: &[u8]) {
        if self.entries.len() >= MAX_LOG_ENTRIES {
            self.dropped += 1;
            return;
        }
        self.entries.push((level, truncated_text(bytes)));
    }

    /// Appends guest output of stream `which` (0 stdout, 1 stderr): each line is an entry.
    pub fn write_stream(&mut self, which: usize, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (line, rest, complete) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if self.entries.len() >= MAX_LOG_ENTRIES {
                // Count whole lines only; the buffer no longer grows.
                if complete {
                    self.dropped += 1;
                }
                self.partial[which].clear();
                continue;
            }
            // Keep one byte more than an entry holds, so that truncation still shows.
            let room = (MAX_LOG_ENTRY_BYTES + 1).saturating_sub(self.partial[which].len());
            self.partial[which].extend_from_slice(&line[..line.len().min(room)]);
            if complete {
                self.flush_stream(which);
            }
        }
    }

    fn flush_stream(&mut self, which: usize) {
        let mut line = std::mem::take(&mut self.partial[which]);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        self.push(STREAM_LEVELS[which], &line);
    }

    /// The entries, with unfinished stream lines flushed and a note when some were dropped.
    pub fn finish(&mut self) -> Vec<(u8, String)> {
        for which in 0..2 {
            if !self.partial[which].is_empty() {
                self.flush_stream(which);
            }
        }
        let mut entries = std::mem::take(&mut self.entries);
        if self.dropped > 0 {
            let dropped = self.dropped + usize::from(entries.len() >= MAX_LOG_ENTRIES);
            entries.truncate(MAX_LOG_ENTRIES - 1);
            entries.push((
                2,
                format!("{dropped} more log entries dropped (at most {MAX_LOG_ENTRIES} are kept)"),
            ));
        }
        entries
    }
}

/// Lossy UTF-8, truncated at a character boundary to `MAX_LOG_ENTRY_BYTES` ("…" marks a cut).
fn truncated_text(bytes: &[u8]) -> String {
    // Lossy decoding never shortens, so the text is over the limit iff the bytes are.
    let slice = &bytes[..bytes.len().min(MAX_LOG_ENTRY_BYTES + 1)];
    let mut text = String::from_utf8_lossy(slice).into_owned();
    if text.len() > MAX_LOG_ENTRY_BYTES {
        let mut cut = MAX_LOG_ENTRY_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Reads nothing: the KV of compile-time trials and of kept stores between executions.
pub(crate) struct NoKv;

impl GuestKv for NoKv {
    fn get(&self, _key: &str) -> Pin<Box<dyn std::future::Future<Output = crate::KvRead>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// The store data of one execution.
pub(crate) struct HostState {
    pub limiter: Limiter,
    /// The guest's exported memory, once instantiated (host functions called from a start
    /// function look it up by name instead).
    pub memory: Option<Memory>,
    pub kv: SendWrapper<Rc<dyn GuestKv>>,
    pub writes: Vec<(String, Option<Vec<u8>>)>,
    write_bytes: usize,
    /// Key → index in `writes` of its latest write (read-your-writes).
    latest: HashMap<String, usize>,
    pub outcome: Option<String>,
    /// A workflow step's execution: its run's state (JSON), read by `flo.state_get`.
    run_state: Option<Vec<u8>>,
    /// The fields `flo.state_set` calls gave (later calls win), and their bytes.
    pub state_patch: Option<serde_json::Map<String, serde_json::Value>>,
    state_patch_bytes: usize,
    pub logs: Arc<Mutex<LogSink>>,
    /// Built on the first WASI call, so guests that never call WASI never pay for it.
    wasi: Option<WasiP1Ctx>,
    pub deadline: Instant,
    pub timed_out: bool,
    /// Set from outside to end the execution; `stopped` once the epoch callback saw it.
    pub stop: StopSignal,
    pub stopped: bool,
    timers: Arc<Timers>,
}

impl HostState {
    pub fn new(
        kv: Rc<dyn GuestKv>,
        run_state: Option<Vec<u8>>,
        logs: Arc<Mutex<LogSink>>,
        memory_limit: usize,
        deadline: Instant,
        timers: Arc<Timers>,
        stop: StopSignal,
    ) -> Self {
        HostState {
            limiter: Limiter {
                memory_limit,
                memory_denied: false,
            },
            memory: None,
            kv: SendWrapper::new(kv),
            writes: Vec::new(),
            write_bytes: 0,
            latest: HashMap::new(),
            outcome: None,
            run_state,
            state_patch: None,
            state_patch_bytes: 0,
            logs,
            wasi: None,
            deadline,
            timed_out: false,
            stop,
            stopped: false,
            timers,
        }
    }

    /// Makes a kept store ready for its next execution: everything the last one left
    /// (writes, outcome, state fields, logs, flags) is cleared; the guest's memory, the WASI
    /// context and the limits stay.
    pub fn begin(
        &mut self,
        kv: Rc<dyn GuestKv>,
        run_state: Option<Vec<u8>>,
        deadline: Instant,
        stop: StopSignal,
    ) {
        self.limiter.memory_denied = false;
        self.kv = SendWrapper::new(kv);
        self.writes.clear();
        self.write_bytes = 0;
        self.latest.clear();
        self.outcome = None;
        self.run_state = run_state;
        self.state_patch = None;
        self.state_patch_bytes = 0;
        *lock(&self.logs) = LogSink::default();
        self.deadline = deadline;
        self.timed_out = false;
        self.stop = stop;
        self.stopped = false;
    }

    /// The run state the execution was lent, given back.
    pub fn take_run_state(&mut self) -> Option<Vec<u8>> {
        self.run_state.take()
    }

    /// Lets go of the execution's KV reader, so that a kept store holds nothing of its
    /// caller.
    pub fn release(&mut self) {
        self.kv = SendWrapper::new(Rc::new(NoKv));
    }

    fn buffer_write(&mut self, key: String, value: Option<Vec<u8>>) -> wasmtime::Result<i32> {
        let bytes = key.len() + value.as_ref().map_or(0, Vec::len);
        if self.writes.len() >= MAX_KV_WRITES || self.write_bytes + bytes > MAX_KV_WRITE_BYTES {
            return Err(wasmtime::Error::new(HostTrap(format!(
                "too many kv writes in one execution (at most {MAX_KV_WRITES} writes and {} MiB)",
                MAX_KV_WRITE_BYTES >> 20
            ))));
        }
        self.write_bytes += bytes;
        self.latest.insert(key.clone(), self.writes.len());
        self.writes.push((key, value));
        Ok(0)
    }

    /// `flo.state_set`: a JSON object's fields laid over those set before.
    fn set_state(&mut self, bytes: &[u8]) -> i32 {
        if self.run_state.is_none() {
            return KV_NOT_FOUND;
        }
        if self.state_patch_bytes + bytes.len() > MAX_STATE_PATCH_BYTES {
            return KV_BAD_ARGS;
        }
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(bytes) else {
            return KV_BAD_ARGS;
        };
        self.state_patch_bytes += bytes.len();
        self.state_patch.get_or_insert_default().extend(fields);
        0
    }

    fn wasi(&mut self) -> &mut WasiP1Ctx {
        let logs = &self.logs;
        self.wasi.get_or_insert_with(|| {
            wasmtime_wasi::WasiCtxBuilder::new()
                .stdout(Capture {
                    logs: logs.clone(),
                    which: 0,
                })
                .stderr(Capture {
                    logs: logs.clone(),
                    which: 1,
                })
                .allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .allow_blocking_current_thread(false)
                .build_p1()
        })
    }
}

/// `ptr..ptr+len` (both read as unsigned) if it lies inside a memory of `size` bytes.
pub(crate) fn guest_range(ptr: i32, len: i32, size: usize) -> Option<Range<usize>> {
    let start = ptr as u32 as usize;
    let end = start.checked_add(len as u32 as usize)?;
    (end <= size).then_some(start..end)
}

fn memory_of(caller: &mut Caller<'_, HostState>) -> Option<Memory> {
    if let Some(memory) = caller.data().memory {
        return Some(memory);
    }
    caller.get_export("memory").and_then(Extern::into_memory)
}

/// A valid key (1..=1024 bytes of UTF-8) at `ptr..ptr+len`, or `None`.
fn read_key(data: &[u8], ptr: i32, len: i32) -> Option<String> {
    let range = guest_range(ptr, len, data.len())?;
    if range.is_empty() || range.len() > KV_KEY_BYTES_MAX {
        return None;
    }
    std::str::from_utf8(&data[range]).ok().map(str::to_owned)
}

/// Adds the `flo` host functions and the WASI preview1 shims to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "flo",
        "log",
        |mut caller: Caller<'_, HostState>, level: i32, ptr: i32, len: i32| {
            let level = level.clamp(0, 3) as u8;
            let Some(memory) = memory_of(&mut caller) else {
                return;
            };
            let data = memory.data(&caller);
            let logs = caller.data().logs.clone();
            let mut logs = lock(&logs);
            match guest_range(ptr, len, data.len()) {
                Some(range) => logs.push(level, &data[range]),
                None => logs.push(2, b"flo.log called with a message outside guest memory"),
            }
        },
    )?;

    linker.func_wrap_async(
        "flo",
        "kv_get",
        |mut caller: Caller<'_, HostState>,
         (key_ptr, key_len, buf_ptr, buf_len): (i32, i32, i32, i32)| {
            Box::new(async move {
                let Some(memory) = memory_of(&mut caller) else {
                    return Ok(KV_BAD_ARGS);
                };
                let data = memory.data(&caller);
                let Some(key) = read_key(data, key_ptr, key_len) else {
                    return Ok(KV_BAD_ARGS);
                };
                let Some(buf) = guest_range(buf_ptr, buf_len, data.len()) else {
                    return Ok(KV_BAD_ARGS);
                };
                let (own, read) = {
                    let state = caller.data();
                    match state.latest.get(&key) {
                        Some(&i) => (state.writes[i].1.clone(), None),
                        None => (None, Some(SendWrapper::new(state.kv.get(&key)))),
                    }
                };
                let value = match read {
                    // A read that failed fails the execution (retried like any failure):
                    // the guest must not build on a value it never saw.
                    Some(read) => read
                        .await
                        .map_err(|e| wasmtime::Error::msg(format!("kv_get {key:?}: {e}")))?,
                    None => own,
                };
                let Some(value) = value else {
                    return Ok(KV_NOT_FOUND);
                };
                let n = value.len().min(buf.len());
                // Guest memory never shrinks, so `buf` is still in bounds after the await.
                memory.data_mut(&mut caller)[buf.start..buf.start + n].copy_from_slice(&value[..n]);
                Ok(i32::try_from(value.len()).unwrap_or(i32::MAX))
            })
        },
    )?;

    linker.func_wrap(
        "flo",
        "kv_set",
        |mut caller: Caller<'_, HostState>,
         key_ptr: i32,
         key_len: i32,
         val_ptr: i32,
         val_len: i32|
         -> wasmtime::Result<i32> {
            let Some(memory) = memory_of(&mut caller) else {
                return Ok(KV_BAD_ARGS);
            };
            let data = memory.data(&caller);
            let Some(key) = read_key(data, key_ptr, key_len) else {
                return Ok(KV_BAD_ARGS);
            };
            let Some(range) = guest_range(val_ptr, val_len, data.len()) else {
                return Ok(KV_BAD_ARGS);
            };
            if range.len() > KV_VALUE_BYTES_MAX {
                return Ok(KV_BAD_ARGS);
            }
            let value = data[range].to_vec();
            caller.data_mut().buffer_write(key, Some(value))
        },
    )?;

    linker.func_wrap(
        "flo",
        "kv_delete",
        |mut caller: Caller<'_, HostState>, key_ptr: i32, key_len: i32| -> wasmtime::Result<i32> {
            let Some(memory) = memory_of(&mut caller) else {
                return Ok(KV_BAD_ARGS);
            };
            let Some(key) = read_key(memory.data(&caller), key_ptr, key_len) else {
                return Ok(KV_BAD_ARGS);
            };
            caller.data_mut().buffer_write(key, None)
        },
    )?;

    linker.func_wrap(
        "flo",
        "outcome",
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| {
            let Some(memory) = memory_of(&mut caller) else {
                return;
            };
            let data = memory.data(&caller);
            let Some(range) = guest_range(ptr, len, data.len()) else {
                return;
            };
            if range.len() > MAX_OUTCOME_BYTES {
                return;
            }
            let Ok(name) = std::str::from_utf8(&data[range]) else {
                return;
            };
            let name = (!name.is_empty()).then(|| name.to_owned());
            caller.data_mut().outcome = name;
        },
    )?;

    linker.func_wrap(
        "flo",
        "state_get",
        |mut caller: Caller<'_, HostState>, buf_ptr: i32, buf_len: i32| -> i32 {
            let Some(memory) = memory_of(&mut caller) else {
                return KV_BAD_ARGS;
            };
            let (data, state) = memory.data_and_store_mut(&mut caller);
            let Some(value) = &state.run_state else {
                return KV_NOT_FOUND;
            };
            let Some(buf) = guest_range(buf_ptr, buf_len, data.len()) else {
                return KV_BAD_ARGS;
            };
            let n = value.len().min(buf.len());
            data[buf.start..buf.start + n].copy_from_slice(&value[..n]);
            i32::try_from(value.len()).unwrap_or(i32::MAX)
        },
    )?;

    linker.func_wrap(
        "flo",
        "state_set",
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| -> i32 {
            let Some(memory) = memory_of(&mut caller) else {
                return KV_BAD_ARGS;
            };
            let (data, state) = memory.data_and_store_mut(&mut caller);
            match guest_range(ptr, len, data.len()) {
                Some(range) => state.set_state(&data[range]),
                None => KV_BAD_ARGS,
            }
        },
    )?;

    wasmtime_wasi::p1::add_to_linker_async(linker, HostState::wasi)?;
    // wasmtime-wasi's poll_oneoff sleeps on tokio timers, which need a tokio runtime we do not
    // have: replace it with one on the engine's own timer.
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "poll_oneoff",
        |mut caller: Caller<'_, HostState>,
         (subs, events, nsubs, nevents): (i32, i32, i32, i32)| {
            Box::new(async move { poll_oneoff(&mut caller, subs, events, nsubs, nevents).await })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

// WASI preview1 constants for `poll_oneoff`.
const ERRNO_SUCCESS: u16 = 0;
const ERRNO_BADF: u16 = 8;
const ERRNO_FAULT: i32 = 21;
const ERRNO_INVAL: u16 = 28;
const ERRNO_NOTSUP: u16 = 58;
const EVENTTYPE_CLOCK: u8 = 0;
const EVENTTYPE_FD_READ: u8 = 1;
const EVENTTYPE_FD_WRITE: u8 = 2;
const CLOCK_REALTIME: u32 = 0;
const CLOCK_MONOTONIC: u32 = 1;
const SUBCLOCKFLAGS_ABSTIME: u16 = 1;
const EVENTRWFLAGS_HANGUP: u16 = 1;
const SUBSCRIPTION_SIZE: usize = 48;
const EVENT_SIZE: usize = 32;

struct Event {
    userdata: u64,
    error: u16,
    kind: u8,
    nbytes: u64,
    flags: u16,
}

/// WASI `poll_oneoff` without a tokio runtime. Clock subscriptions (relative, or absolute on
/// the realtime clock) sleep on the engine's 1 ms timer; the execution deadline still applies
/// (the whole execution is cut off when it passes). There are only the stdio descriptors:
/// stdin is closed (read-ready with hang-up), stdout/stderr are always write-ready; any other
/// descriptor gets an event with `badf`.
async fn poll_oneoff(
    caller: &mut Caller<'_, HostState>,
    subs_ptr: i32,
    events_ptr: i32,
    nsubs: i32,
    nevents_ptr: i32,
) -> wasmtime::Result<i32> {
    let Some(memory) = memory_of(caller) else {
        return Ok(ERRNO_FAULT);
    };
    if nsubs == 0 {
        return Ok(i32::from(ERRNO_INVAL));
    }
    let n = nsubs as u32 as usize;
    let size = memory.data_size(&*caller);
    let (Some(subs_len), Some(events_len)) = (
        n.checked_mul(SUBSCRIPTION_SIZE)
            .and_then(|l| i32::try_from(l).ok()),
        n.checked_mul(EVENT_SIZE)
            .and_then(|l| i32::try_from(l).ok()),
    ) else {
        return Ok(ERRNO_FAULT);
    };
    let (Some(subs), Some(events_range), Some(nevents_range)) = (
        guest_range(subs_ptr, subs_len, size),
        guest_range(events_ptr, events_len, size),
        guest_range(nevents_ptr, 4, size),
    ) else {
        return Ok(ERRNO_FAULT);
    };
    let data = memory.data(&*caller);
    let now = Instant::now();
    let mut ready = Vec::new();
    let mut clocks: Vec<(u64, Instant)> = Vec::new();
    for sub in data[subs].chunks_exact(SUBSCRIPTION_SIZE) {
        let u64_at = |at: usize| u64::from_le_bytes(sub[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(sub[at..at + 4].try_into().unwrap_or([0; 4]));
        let u16_at = |at: usize| u16::from_le_bytes(sub[at..at + 2].try_into().unwrap_or([0; 2]));
        let userdata = u64_at(0);
        let event = |error, kind, nbytes, flags| Event {
            userdata,
            error,
            kind,
            nbytes,
            flags,
        };
        match sub[8] {
            EVENTTYPE_CLOCK => {
                let (id, timeout, flags) = (u32_at(16), u64_at(24), u16_at(40));
                let relative = if flags & SUBCLOCKFLAGS_ABSTIME == 0 {
                    (id == CLOCK_REALTIME || id == CLOCK_MONOTONIC).then_some(timeout)
                } else if id == CLOCK_REALTIME {
                    let unix_now = SystemTime::now()
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                    Some(timeout.saturating_sub(unix_now))
                } else {
                    None
                };
                match relative {
                    Some(ns) => {
                        let at = now
                            .checked_add(Duration::from_nanos(ns))
                            .unwrap_or(now + Duration::from_secs(86_400 * 365));
                        clocks.push((userdata, at));
                    }
                    None => ready.push(event(ERRNO_NOTSUP, EVENTTYPE_CLOCK, 0, 0)),
                }
            }
            kind @ (EVENTTYPE_FD_READ | EVENTTYPE_FD_WRITE) => {
                let fd = u32_at(16);
                ready.push(match (kind, fd) {
                    (EVENTTYPE_FD_READ, 0) => event(ERRNO_SUCCESS, kind, 0, EVENTRWFLAGS_HANGUP),
                    (EVENTTYPE_FD_WRITE, 1 | 2) => event(ERRNO_SUCCESS, kind, 1 << 16, 0),
                    _ => event(ERRNO_BADF, kind, 0, 0),
                });
            }
            _ => return Ok(i32::from(ERRNO_INVAL)),
        }
    }
    if let (true, Some(first)) = (ready.is_empty(), clocks.iter().map(|&(_, at)| at).min()) {
        let timers = caller.data().timers.clone();
        timers.sleep_until(first).await;
    }
    let now = Instant::now();
    for &(userdata, at) in &clocks {
        if at <= now {
            ready.push(Event {
                userdata,
                error: ERRNO_SUCCESS,
                kind: EVENTTYPE_CLOCK,
                nbytes: 0,
                flags: 0,
            });
        }
    }
    let data = memory.data_mut(&mut *caller);
    for (slot, event) in data[events_range].chunks_exact_mut(EVENT_SIZE).zip(&ready) {
        slot.fill(0);
        slot[0..8].copy_from_slice(&event.userdata.to_le_bytes());
        slot[8..10].copy_from_slice(&event.error.to_le_bytes());
        slot[10] = event.kind;
        slot[16..24].copy_from_slice(&event.nbytes.to_le_bytes());
        slot[24..26].copy_from_slice(&event.flags.to_le_bytes());
    }
    let count = ready.len().min(n) as u32;
    data[nevents_range].copy_from_slice(&count.to_le_bytes());
    Ok(i32::from(ERRNO_SUCCESS))
}

/// stdout/stderr of a WASI guest: lines go to the execution's log.
struct Capture {
    logs: Arc<Mutex<LogSink>>,
    which: usize,
}

impl Capture {
    fn stream(&self) -> CaptureStream {
        CaptureStream {
            logs: self.logs.clone(),
            which: self.which,
        }
    }
}

impl wasmtime_wasi::cli::IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for Capture {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.stream())
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.stream())
    }
}

struct CaptureStream {
    logs: Arc<Mutex<LogSink>>,
    which: usize,
}

/// Always ready; accepts this much per write.
const CAPTURE_PERMIT: usize = 1 << 20;

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for CaptureStream {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        lock(&self.logs).write_stream(self.which, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(CAPTURE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        lock(&self.logs).write_stream(self.which, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
