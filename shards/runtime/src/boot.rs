//! Server start-up: data directory (lock, identity), one pinned executor per shard, log
//! recovery, mesh, listeners; and the orderly stop.

use crate::config::ServerConfig;
use crate::console::{ConsoleCalls, serve_calls};
use crate::fault_disk::FaultDisk;
use crate::inbox::Inbox;
use crate::listener::{Conns, accept_loop};
use crate::log_reader::LogMap;
use crate::log_writer::{LogSlot, SegmentWriter, acked_mark_loop, writer_loop};
use crate::mesh::{self, ExecutorTable, Mesh, MeshMsg, PeerOut};
use crate::metrics::{ServerMetrics, ShardMetrics};
use crate::shard_loop::ShardLoop;
use crate::snapshots::{self, Snapshotter};
use crate::timers::{Alarm, alarm_loop};
use crate::wasm_pool::{SharedModules, WasmPool, shared_modules};
use crate::webhooks::serve_answers;
use flo_engine::auth::Gate;
use flo_engine::clock::{Clock, OffsetClock, SystemClock};
use flo_engine::hash::{PARTITIONS_DEFAULT, Partitioning};
use flo_engine::{Engine, EngineConfig, Input, SnapshotError};
use flo_ual::{RecoveredLog, RecoveryError, recover_from};
use flo_wasm::{WasmConfig, WasmEngine};
use glommio::{LocalExecutorBuilder, Placement};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

const META_FILE: &str = "flo.meta";
const LOCK_FILE: &str = "LOCK";
const META_FORMAT: u32 = 1;
/// Longest shard count accepted.
pub const SHARDS_MAX: u32 = 128;
const STOP_POLL_MS: u64 = 20;
/// Start-up that made no progress at all for this long (no shard moved to another phase or
/// replayed a record) is reported, with each shard's phase, and abandoned instead of hanging
/// silently. A large log that is being replayed never trips it.
const STARTUP_STALL_SECS: u64 = 20;
/// Start-up without progress this long wakes the shard threads (`kick`), and again as
/// often while it lasts.
const STARTUP_KICK_AFTER: Duration = Duration::from_secs(1);
/// While shards recover, progress is reported this often.
const STARTUP_REPORT_SECS: u64 = 2;
const PHASES: [&str; 6] = [
    "starting its executor",
    "recovering its log",
    "opening its log",
    "joining the shard mesh",
    "binding the listener",
    "ready",
];

/// Each shard's start-up phase (an index into `PHASES`) and recovery progress.
#[derive(Default)]
struct ShardProgress {
    phase: std::sync::atomic::AtomicUsize,
    /// Last LSN replayed, and bytes of records replayed.
    lsn: AtomicU64,
    bytes: AtomicU64,
    /// The snapshot being loaded: its size, the bytes read from its file and decoded.
    snapshot_bytes: AtomicU64,
    snapshot_read: AtomicU64,
    snapshot_decoded: AtomicU64,
}

type Phases = Arc<Vec<ShardProgress>>;

fn phase_name(p: &ShardProgress) -> &'static str {
    PHASES[p.phase.load(Ordering::SeqCst).min(PHASES.len() - 1)]
}

fn startup_stall_report(phases: &Phases) -> String {
    let states: Vec<String> = phases
        .iter()
        .enumerate()
        .map(|(s, p)| format!("shard {s}: {}", phase_name(p)))
        .collect();
    format!(
        "start-up made no progress for {STARTUP_STALL_SECS} s ({}); please report this",
        states.join(", ")
    )
}

/// What every shard has done so far: changes whenever any shard makes progress (a
/// snapshot read or decoded a few MiB further counts: a large one is not a stall).
fn progress_mark(phases: &Phases) -> Vec<(usize, u64, u64, u64)> {
    phases
        .iter()
        .map(|p| {
            (
                p.phase.load(Ordering::SeqCst),
                p.lsn.load(Ordering::Relaxed),
                p.snapshot_read.load(Ordering::Relaxed),
                p.snapshot_decoded.load(Ordering::Relaxed),
            )
        })
        .collect()
}

/// `starting: shard 0 recovering its log at LSN 1234 (512 MB, 230 MB/s); shard 1 loading
/// its snapshot (read 946 of 946 MB, decoded 312 MB); shard 2 ready`.
fn progress_report(phases: &Phases, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(0.001);
    let states: Vec<String> = phases
        .iter()
        .enumerate()
        .map(|(s, p)| {
            let mb = p.bytes.load(Ordering::Relaxed) as f64 / 1e6;
            let snapshot_mb = p.snapshot_bytes.load(Ordering::Relaxed) as f64 / 1e6;
            let decoded_mb = p.snapshot_decoded.load(Ordering::Relaxed) as f64 / 1e6;
            match p.phase.load(Ordering::SeqCst) {
                1 if snapshot_mb > 0.0 && decoded_mb < snapshot_mb => format!(
                    "shard {s} loading its snapshot (read {:.0} of {snapshot_mb:.0} MB, \
                     decoded {decoded_mb:.0} MB)",
                    p.snapshot_read.load(Ordering::Relaxed) as f64 / 1e6
                ),
                1 => format!(
                    "shard {s} recovering its log at LSN {} ({mb:.0} MB, {:.0} MB/s)",
                    p.lsn.load(Ordering::Relaxed),
                    mb / secs
                ),
                _ => format!("shard {s} {}", phase_name(p)),
            }
        })
        .collect();
    format!("starting: {}", states.join("; "))
}
/// Longest a shard runs tasks before it looks at I/O again.
const PREEMPT_MS: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot use data directory {dir}: {source}")]
    DataDir { dir: PathBuf, source: io::Error },
    #[error("data directory {0} is in use by another flo server (it holds {0}/LOCK)")]
    Locked(PathBuf),
    #[error(
        "data directory {dir} was created with {found} shards; start with --shards {found} \
         (changing the shard count of existing data is not supported yet)"
    )]
    ShardCount { dir: PathBuf, found: u32 },
    #[error("data directory {dir} has an unreadable {META_FILE}: {reason}")]
    Meta { dir: PathBuf, reason: String },
    #[error("--shards must be 1 to {SHARDS_MAX}, got {0}")]
    BadShards(u32),
    #[error("cannot listen on {addr}: {source} (is another server running there?)")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error(
        "cannot serve HTTP on {addr} (--http): {source}; is another server using it? give \
         --http ADDRESS:PORT elsewhere, or --http off"
    )]
    Http { addr: SocketAddr, source: io::Error },
    #[error("shard {shard}: {source}")]
    Recovery { shard: u32, source: RecoveryError },
    #[error("shard {shard}: {message}")]
    Shard { shard: u32, message: String },
    #[error("cannot start the webhook delivery thread: {0}")]
    Webhooks(io::Error),
}

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    format: u32,
    shards: u32,
    partitions: u32,
}

fn dir_err(dir: &Path) -> impl Fn(io::Error) -> ServerError + '_ {
    move |source| ServerError::DataDir {
        dir: dir.to_path_buf(),
        source,
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Takes the directory's lock; held (by the open file) for the life of the server.
fn lock_data_dir(dir: &Path) -> Result<fs::File, ServerError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))
        .map_err(dir_err(dir))?;
    // SAFETY: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(ServerError::Locked(dir.to_path_buf()));
    }
    Ok(file)
}

/// Reads the directory's identity, or writes it for a new directory.
fn load_meta(dir: &Path, shards: Option<u32>) -> Result<Meta, ServerError> {
    let path = dir.join(META_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| ServerError::Meta {
                dir: dir.to_path_buf(),
                reason: e.to_string(),
            })?;
            if meta.format != META_FORMAT {
                let reason = format!("format {} is not supported", meta.format);
                return Err(ServerError::Meta {
                    dir: dir.to_path_buf(),
                    reason,
                });
            }
            if shards.is_some_and(|n| n != meta.shards) {
                return Err(ServerError::ShardCount {
                    dir: dir.to_path_buf(),
                    found: meta.shards,
                });
            }
            Ok(meta)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let shards = shards.unwrap_or_else(|| allowed_cpus().len() as u32);
            let meta = Meta {
                format: META_FORMAT,
                shards,
                partitions: PARTITIONS_DEFAULT,
            };
            let tmp = dir.join(format!("{META_FILE}.tmp"));
            let write = || -> io::Result<()> {
                let f = fs::File::create(&tmp)?;
                serde_json::to_writer_pretty(&f, &meta)?;
                f.sync_all()?;
                fs::rename(&tmp, &path)?;
                sync_dir(dir)
            };
            write().map_err(dir_err(dir))?;
            Ok(meta)
        }
        Err(e) => Err(dir_err(dir)(e)),
    }
}

/// CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills a cpu_set_t we own; CPU_ISSET reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if cpus.is_empty() { vec![0] } else { cpus }
    }
}

/// What a running server tells its caller once every shard is serving.
#[derive(Debug, Clone)]
pub struct Ready {
    pub addr: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (None: `--http off`).
    pub http: Option<SocketAddr>,
    pub shards: u32,
    pub partitions: u32,
}

/// Fail-stop: a panic on any thread (a shard, the blocking pool) stops the whole process
/// with a message naming the thread and the cause. A half-alive server, whose other
/// shards wait forever on the dead one, is worse than a restart: recovery restores every
/// acknowledged record.
fn fail_stop_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // A step filter's expression library, caught and answered as an error.
        if flo_engine::panic_contained() {
            return;
        }
        let thread = std::thread::current();
        let who = match thread
            .name()
            .and_then(|n| n.strip_prefix("flo-shard-"))
            .and_then(|n| n.split('-').next())
        {
            Some(shard) => format!("shard {shard}"),
            None => format!("thread {}", thread.name().unwrap_or("unnamed")),
        };
        let cause = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            target: "flo::shard",
            "{who} panicked: {cause}{at}; stopping the server"
        );
        crate::stderr::flush(crate::stderr::FATAL_FLUSH);
        default(info);
        std::process::exit(crate::stderr::FATAL_EXIT_CODE);
    }));
}

/// Test-only faults, once the shard is ready: `FLO_FAULT_PANIC_SHARD=N` makes shard N
/// panic; `FLO_FAULT_STALL_SHARD=N:MS` blocks shard N's thread for MS ms (a stuck shard).
fn injected_faults(shard: u32) {
    let var = |name: &str| std::env::var(name).ok();
    if var("FLO_FAULT_PANIC_SHARD").and_then(|v| v.parse().ok()) == Some(shard) {
        glommio::spawn_local(async move {
            glommio::timer::sleep(Duration::from_millis(200)).await;
            panic!("injected fault (FLO_FAULT_PANIC_SHARD={shard})");
        })
        .detach();
    }
    let stall = var("FLO_FAULT_STALL_SHARD").and_then(|v| {
        let (s, ms) = v.split_once(':')?;
        Some((s.parse::<u32>().ok()?, ms.parse::<u64>().ok()?))
    });
    if let Some((s, ms)) = stall
        && s == shard
    {
        glommio::spawn_local(async move {
            glommio::timer::sleep(Duration::from_millis(200)).await;
            std::thread::sleep(Duration::from_millis(ms));
        })
        .detach();
    }
}

/// Raises the open-file limit and bounds the connections by it; says so once when that
/// takes fewer than `requested`.
fn connections_within_fd_limit(requested: usize, shards: u32) -> usize {
    let open_files = crate::fd_limit::raise_open_files_limit();
    let max = crate::fd_limit::connections_within(requested, open_files, shards);
    if max < requested {
        tracing::warn!(
            target: "flo::boot",
            "--max-connections {requested} lowered to {max}: the open-file limit is \
             {open_files} and {} descriptors are kept for log segments, snapshots and the \
             shards; raise the limit (ulimit -n, or LimitNOFILE= under systemd) to take more",
            crate::fd_limit::fds_reserved(shards)
        );
    }
    max
}

/// Runs the server until `stop` is set. `on_ready` is called once every shard serves.
pub fn run_server(
    config: ServerConfig,
    stop: Arc<AtomicBool>,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), ServerError> {
    // No transparent huge pages for this process: the allocator's arenas asked for them,
    // and under a long load the kernel then stalled every shard for up to 19 s at a time
    // (10M-run soak), faulted a snapshot's image in 0.3 s instead of 0.08 s, and kept freed
    // memory resident in half-used huge pages.
    // SAFETY: a process-wide flag; no memory is touched.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    fail_stop_on_panic();
    let dir = config.data_dir.clone();
    fs::create_dir_all(&dir).map_err(dir_err(&dir))?;
    // glommio opens directories (to sync them) by absolute path only.
    let dir = fs::canonicalize(&dir).map_err(dir_err(&dir))?;
    let _lock = lock_data_dir(&dir)?;
    if let Some(n) = config.shards
        && !(1..=SHARDS_MAX).contains(&n)
    {
        return Err(ServerError::BadShards(n));
    }
    let meta = load_meta(&dir, config.shards)?;
    let mut config = config;
    config.max_connections = connections_within_fd_limit(config.max_connections, meta.shards);
    let partitioning = Partitioning::new(meta.partitions, meta.shards);

    // Refuse a port another process serves, and learn the port when 0 was asked for.
    let addr = crate::listener::probe(config.listen).map_err(|source| ServerError::Listen {
        addr: config.listen,
        source,
    })?;

    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Without an HTTP port nobody reads the metrics: the shards count nothing.
    let counting = config.http.is_some();
    let metrics = Arc::new(ServerMetrics::new(
        meta.shards,
        connections.clone(),
        counting,
    ));
    // Bound now, so that a port that cannot be had fails the start; served from now on, so
    // that /healthz answers and /readyz says why not while the shards recover.
    // The console's calls reach each shard through its end of the bridge (served once the
    // shard serves; none is sent before every shard is ready).
    let (bridge, console_receivers) = crate::console::bridge(meta.shards);
    let mut console_receivers: Vec<_> = console_receivers.into_iter().map(Some).collect();
    let http = match config.http {
        None => None,
        Some(addr) => {
            let http_err = |source| ServerError::Http { addr, source };
            let listener = crate::metrics::bind(addr).map_err(http_err)?;
            let auth = config.auth.clone();
            let console = crate::console::Console::new(bridge, auth.clone(), metrics.clone());
            let routes = crate::console::router(console);
            let port = crate::metrics::start(listener, metrics.clone(), auth, stop.clone(), routes)
                .map_err(http_err)?;
            Some(port)
        }
    };
    // One thread sends every shard's webhook deliveries (whether or not --http is on); it
    // ends by itself once the shards dropped their ends, and nobody waits for it.
    let webhooks =
        crate::webhooks::start(meta.shards, stop.clone()).map_err(ServerError::Webhooks)?;
    for s in 0..meta.shards {
        fs::create_dir_all(shard_dir(&dir, s)).map_err(dir_err(&dir))?;
    }
    sync_dir(&dir).map_err(dir_err(&dir))?;

    let cpus = allowed_cpus();
    let wasm_engine = WasmEngine::new(WasmConfig {
        // Per shard: its executions, and as many idle instances of modules that opt in to
        // reuse; a few more for compile-time trials.
        max_instances: meta.shards * config.limits.wasm_slots as u32 * 2 + 4,
        memory_limit_bytes_max: u64::from(flo_engine::MEMORY_LIMIT_MB_MAX) << 20,
    })
    .map_err(|e| ServerError::Shard {
        shard: 0,
        message: format!("cannot start the wasm engine: {e}"),
    })?;
    let wasm_modules = shared_modules(config.module_cache_bytes);
    let clock = OffsetClock::default();
    let mesh: Mesh = Mesh::full(meta.shards as usize, mesh::MESH_CHANNEL_MESSAGES);
    let table: ExecutorTable = Arc::new(Mutex::new(vec![None; meta.shards as usize]));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<u32, ServerError>>();
    let phases: Phases = Arc::new((0..meta.shards).map(|_| ShardProgress::default()).collect());
    let mut handles = Vec::new();
    crate::kick::install();
    let pulses: Arc<Vec<crate::kick::Pulse>> =
        Arc::new((0..meta.shards).map(|_| Default::default()).collect());
    for (s, webhooks) in (0..meta.shards).zip(webhooks) {
        let boot = ShardBoot {
            id: s,
            dir: shard_dir(&dir, s),
            data_dir: dir.clone(),
            addr,
            partitioning,
            config: config.clone(),
            mesh: mesh.clone(),
            table: table.clone(),
            stop: stop.clone(),
            connections: connections.clone(),
            ready: ready_tx.clone(),
            phases: phases.clone(),
            wasm_engine: wasm_engine.clone(),
            wasm_modules: wasm_modules.clone(),
            clock: clock.clone(),
            pulses: pulses.clone(),
            metrics: metrics.shards[s as usize].clone(),
            console: console_receivers[s as usize].take(),
            webhooks,
        };
        let placement = match config.pin_shards {
            true => Placement::Fixed(cpus[s as usize % cpus.len()]),
            false => Placement::Unbound,
        };
        let builder = LocalExecutorBuilder::new(placement)
            .name(&format!("flo-shard-{s}"))
            .io_memory(config.io_memory_bytes)
            // Poll the network at least this often even while tasks (a guest yielding
            // every millisecond, say) stay runnable; glommio's default is 100 ms.
            .preempt_timer(Duration::from_millis(PREEMPT_MS));
        let handle = builder
            .spawn(move || shard_main(boot))
            .map_err(|e| ServerError::Shard {
                shard: s,
                message: format!("cannot start executor: {e}"),
            })?;
        handles.push(handle);
    }
    drop(ready_tx);
    let started = std::time::Instant::now();
    let (mut mark, mut moved_at) = (progress_mark(&phases), started);
    let mut reported_at = started;
    let mut kicked_at = started;
    let mut ready = 0;
    while ready < meta.shards {
        let received = match ready_rx.recv_timeout(Duration::from_millis(250)) {
            Ok(r) => Ok(r),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = progress_mark(&phases);
                if now != mark {
                    (mark, moved_at) = (now, std::time::Instant::now());
                } else if moved_at.elapsed() >= Duration::from_secs(STARTUP_STALL_SECS) {
                    return Err(ServerError::Shard {
                        shard: 0,
                        message: startup_stall_report(&phases),
                    });
                } else if moved_at.elapsed() >= STARTUP_KICK_AFTER
                    && kicked_at.elapsed() >= STARTUP_KICK_AFTER
                {
                    // A shard asleep in io_uring_enter with work to do (`kick`).
                    kicked_at = std::time::Instant::now();
                    let threads = crate::kick::kick_shards();
                    tracing::warn!(
                        target: "flo::boot",
                        "start-up made no progress for {} ms ({}); woke {threads} shard threads",
                        moved_at.elapsed().as_millis(),
                        progress_report(&phases, started.elapsed())
                    );
                }
                if reported_at.elapsed() >= Duration::from_secs(STARTUP_REPORT_SECS) {
                    reported_at = std::time::Instant::now();
                    let report = progress_report(&phases, started.elapsed());
                    tracing::info!(target: "flo::boot", "{report}");
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(mpsc::RecvError),
        };
        ready += 1;
        match received {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(ServerError::Shard {
                    shard: 0,
                    message: "a shard stopped while starting".into(),
                });
            }
        }
    }
    metrics.ready.store(true, Ordering::Relaxed);
    on_ready(&Ready {
        addr,
        http: http.as_ref().map(|port| port.addr),
        shards: meta.shards,
        partitions: meta.partitions,
    });
    let watchdog = crate::kick::watch(pulses, stop.clone()).map_err(|e| ServerError::Shard {
        shard: 0,
        message: format!("cannot start the watchdog thread: {e}"),
    })?;
    for h in handles {
        let _ = h.join();
    }
    // Shards that ended without a stop (an error) end the watchdog too.
    stop.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    if let Some(port) = http {
        port.stop();
    }
    crate::stderr::flush(Duration::from_secs(1));
    // Shards that failed after start-up report here.
    if let Ok(Err(e)) = ready_rx.try_recv() {
        return Err(e);
    }
    Ok(())
}

/// Loads the newest snapshot that is valid into `engine` (a damaged one is reported, set
/// aside and the one before is tried). Returns its LSN and the segment marks it carried;
/// None: there is none, the whole log is replayed. `progress` follows the load.
///
/// Set aside (renamed `….snap.damaged`, kept for inspection) so that it no longer counts as
/// one of the two snapshots kept: else the next snapshot would keep it as its fallback,
/// delete the good one it fell back to, and delete the segments that one needs.
///
/// A snapshot in a format this flo does not read is not damaged, and never set aside as
/// such: the shard refuses to start, naming the file and the format — unless the log still
/// holds every record from LSN 1, when it is renamed `….snap.format-N` (kept for a flo
/// that reads it) and the log is replayed instead.
fn load_snapshot(
    dir: &Path,
    shard: u32,
    engine: &mut Engine,
    progress: &ShardProgress,
) -> Result<Option<(u64, snapshots::SegmentMarks)>, String> {
    snapshots::clean_temporaries(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let found = snapshots::list(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for (lsn, path) in found {
        let loaded = read_with_progress(&path, progress)
            .map_err(|e| (e.to_string(), None))
            .and_then(|bytes| {
                let loaded = snapshots::decode(&bytes).map_err(|e| (e, None))?;
                let mut decoded = |n: u64| progress.snapshot_decoded.store(n, Ordering::Relaxed);
                engine
                    .restore_with_progress(loaded.image, &mut decoded)
                    .map_err(|e| {
                        let format = match e {
                            SnapshotError::Format { found } => Some(found),
                            _ => None,
                        };
                        (e.to_string(), format)
                    })?;
                Ok((loaded.lsn, loaded.marks))
            });
        progress.snapshot_bytes.store(0, Ordering::Relaxed);
        let (e, format) = match loaded {
            Ok(loaded) => return Ok(Some(loaded)),
            Err(e) => e,
        };
        if let Some(format) = format {
            set_aside_for_format(dir, shard, &path, lsn, format)?;
            continue;
        }
        // Left in place, it would still count as kept (see above): refuse to go on.
        let aside = path.with_extension("snap.damaged");
        fs::rename(&path, &aside).map_err(|r| {
            format!(
                "snapshot {} (LSN {lsn}) is unusable ({e}) and cannot be moved aside: {r}",
                path.display()
            )
        })?;
        tracing::warn!(
            target: "flo::recovery",
            shard,
            "snapshot {} (LSN {lsn}) is unusable ({e}), moved to {}; trying the one before",
            path.display(),
            aside.display()
        );
    }
    Ok(None)
}

/// A snapshot of a format this flo does not read: refused (the start fails) unless the log
/// still starts at LSN 1, when it is renamed out of the way, untouched.
fn set_aside_for_format(
    dir: &Path,
    shard: u32,
    path: &Path,
    lsn: u64,
    format: u32,
) -> Result<(), String> {
    let reads = format!(
        "this flo reads snapshot formats {} to {}",
        flo_engine::SNAPSHOT_FORMAT_READ_MIN,
        flo_engine::SNAPSHOT_FORMAT
    );
    if !log_starts_at_lsn_1(dir) {
        return Err(format!(
            "snapshot {} (LSN {lsn}) is in snapshot format {format}, and {reads}; the log \
             before it is gone, so this shard cannot start without it. Start the flo version \
             that wrote it (nothing was changed on disk)",
            path.display()
        ));
    }
    let aside = path.with_extension(format!("snap.format-{format}"));
    fs::rename(path, &aside).map_err(|r| {
        format!(
            "snapshot {} (LSN {lsn}) is in snapshot format {format} ({reads}) and cannot be \
             moved aside: {r}",
            path.display()
        )
    })?;
    tracing::warn!(
        target: "flo::recovery",
        shard,
        "snapshot {} (LSN {lsn}) is in snapshot format {format}, and {reads}; the log holds \
         every record, so it is replayed instead (the snapshot is kept unchanged as {})",
        path.display(),
        aside.display()
    );
    Ok(())
}

/// Whether the shard's log still holds its first record (a segment starting at LSN 1).
fn log_starts_at_lsn_1(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            e.file_name()
                .to_str()
                .and_then(flo_ual::parse_segment_file_name)
                == Some(1)
        })
    })
}

/// Bytes read from a snapshot file between two progress marks.
const SNAPSHOT_READ_SLICE_BYTES: usize = 8 << 20;

/// A snapshot file's bytes, read a slice at a time so start-up sees progress.
fn read_with_progress(path: &Path, progress: &ShardProgress) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let len = file.metadata()?.len();
    progress.snapshot_bytes.store(len, Ordering::Relaxed);
    progress.snapshot_read.store(0, Ordering::Relaxed);
    progress.snapshot_decoded.store(0, Ordering::Relaxed);
    let mut bytes = Vec::with_capacity(len as usize);
    loop {
        let at = bytes.len();
        let n = (&mut file)
            .take(SNAPSHOT_READ_SLICE_BYTES as u64)
            .read_to_end(&mut bytes)?;
        if n == 0 {
            return Ok(bytes);
        }
        progress
            .snapshot_read
            .store((at + n) as u64, Ordering::Relaxed);
    }
}

fn shard_dir(data: &Path, shard: u32) -> PathBuf {
    data.join(format!("shard-{shard:03}"))
}

struct ShardBoot {
    id: u32,
    /// The shard's directory, in the data directory.
    dir: PathBuf,
    data_dir: PathBuf,
    addr: SocketAddr,
    partitioning: Partitioning,
    config: ServerConfig,
    mesh: Mesh,
    table: ExecutorTable,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<u32, ServerError>>,
    phases: Phases,
    wasm_engine: WasmEngine,
    wasm_modules: SharedModules,
    clock: OffsetClock,
    /// Client connections open on every shard.
    connections: Arc<std::sync::atomic::AtomicUsize>,
    /// Each shard's sign of life, for the watchdog.
    pulses: Arc<Vec<crate::kick::Pulse>>,
    /// The shard's counters, read by the HTTP thread.
    metrics: Arc<ShardMetrics>,
    /// The web console's calls to this shard (None: no console, or already taken).
    console: Option<futures_channel::mpsc::UnboundedReceiver<crate::console::Call>>,
    /// The shard's ends of the webhook delivery thread.
    webhooks: crate::webhooks::ShardWebhooks,
}

async fn shard_main(boot: ShardBoot) {
    let ready = boot.ready.clone();
    if let Err(e) = serve_shard(boot).await {
        let _ = ready.send(Err(e));
    }
}

/// A segment the snapshot lists, starting at `first`, is gone from the middle of the log.
fn missing_segment(
    dir: &std::path::Path,
    shard: u32,
    first: u64,
    log: &RecoveredLog,
) -> ServerError {
    let next = log
        .segments
        .iter()
        .map(|s| s.first_lsn)
        .find(|&lsn| lsn > first)
        .unwrap_or(first + 1);
    ServerError::Shard {
        shard,
        message: format!(
            "log records {first} to {} are missing from {}: the segment {} is gone from the \
             middle of the log (the snapshot lists it; finished runs retained in it are read \
             back from it). Restore it, or move this shard's data away knowingly",
            next - 1,
            dir.display(),
            flo_ual::segment_file_name(first)
        ),
    }
}

async fn serve_shard(boot: ShardBoot) -> Result<(), ServerError> {
    let id = boot.id;
    boot.pulses[id as usize].started();
    let shard_err = |message: String| ServerError::Shard { shard: id, message };
    let progress = &boot.phases[id as usize];
    let phase = |p: usize| progress.phase.store(p, Ordering::SeqCst);
    let config = EngineConfig {
        shard: id,
        partitioning: boot.partitioning,
        durability: boot.config.durability,
        retention_ms: boot.config.retention_ms,
        peer_timeout_ms: boot.config.peer_timeout_ms,
        quotas: boot
            .config
            .auth
            .as_ref()
            .map(|table| Arc::new(table.quotas().clone()))
            .unwrap_or_default(),
        limits: boot.config.limits,
    };
    let clock: Box<dyn Clock> = match boot.config.test_clock {
        true => Box::new(boot.clock.clone()),
        false => Box::new(SystemClock),
    };
    let mut engine = Engine::new(config, clock, Box::new(SystemClock));
    phase(1);
    let loaded = load_snapshot(&boot.dir, id, &mut engine, progress).map_err(shard_err)?;
    if let Some((lsn, _)) = &loaded {
        // Loaded: progress, though no record was replayed yet.
        progress.lsn.store(*lsn, Ordering::Relaxed);
    }
    let from = loaded.as_ref().map_or(0, |l| l.0);
    let log = recover_from(&boot.dir, from, |lsn, _rtype, payload| {
        progress.lsn.store(lsn, Ordering::Relaxed);
        progress.bytes.fetch_add(
            (payload.len() + flo_ual::RECORD_HEADER_BYTES) as u64,
            Ordering::Relaxed,
        );
        engine.replay(lsn, payload)
    })
    .map_err(|source| ServerError::Recovery { shard: id, source })?;
    if let Some((file, offset, reason)) = &log.truncated {
        tracing::warn!(
            target: "flo::recovery",
            shard = id,
            "cut a torn log tail in {} at offset {offset} ({reason}); every record before it \
             is intact",
            file.display()
        );
    }
    if let Some(retained) = engine.retained_from_lsn()
        && log.segments.first().is_some_and(|s| s.first_lsn > retained)
    {
        let first = log.segments[0].first_lsn;
        return Err(ServerError::Recovery {
            shard: id,
            source: RecoveryError::Missing {
                dir: boot.dir.clone(),
                from: retained,
                to: first - 1,
                what: "finished runs retained from there on are read back from them".into(),
            },
        });
    }
    phase(2);
    let fault = boot
        .config
        .fault_disk_capacity_file
        .clone()
        .map(|file| FaultDisk {
            capacity_file: file,
            data_dir: boot.data_dir.clone(),
        });
    let writer = SegmentWriter::open(&boot.dir, &log, boot.config.segment_bytes, fault.clone())
        .await
        .map_err(|e| shard_err(format!("cannot open the log: {e}")))?;
    engine.recovered(log.last_lsn, writer.segments());
    (boot.config.release_memory)();

    let inbox = Rc::new(Inbox::default());
    let slot = Rc::new(LogSlot::new(boot.config.log_writes));
    slot.set_written(log.last_lsn);
    let log_map = Rc::new(LogMap::from_recovered(&log));
    let kept: Vec<u64> = snapshots::list(&boot.dir)
        .unwrap_or_default()
        .iter()
        .map(|s| s.0)
        .collect();
    let snapshotter = Rc::new(Snapshotter::new(
        boot.dir.clone(),
        id,
        boot.config.snapshot_bytes,
        kept,
        boot.config.release_memory,
        fault,
    ));
    // The log replayed after the snapshot counts toward the next one (and, on a full
    // disk, makes one due at once).
    snapshotter.logged(progress.bytes.load(Ordering::Relaxed) as usize);
    let missing = match loaded {
        Some((lsn, marks)) => {
            snapshotter.loaded(lsn);
            log_map.fill_marks(marks)
        }
        None => log_map.fill_marks(Vec::new()),
    };
    if let Some(&first) = missing.first() {
        return Err(missing_segment(&boot.dir, id, first, &log));
    }
    inbox.push(snapshotter.storage(log.segments.len().max(1) as u32));
    let writer_task = writer_loop(
        slot.clone(),
        writer,
        log_map.clone(),
        inbox.clone(),
        id,
        boot.metrics.clone(),
    );
    glommio::spawn_local(writer_task).detach();
    glommio::spawn_local(acked_mark_loop(slot.clone(), boot.dir.clone(), id)).detach();
    let alarm = Rc::new(Alarm::default());
    glommio::spawn_local(alarm_loop(
        alarm.clone(),
        inbox.clone(),
        boot.pulses.clone(),
        id as usize,
    ))
    .detach();
    let peers: Vec<Option<Rc<PeerOut>>> = (0..boot.partitioning.shards)
        .map(|s| (s != id).then(|| Rc::new(PeerOut::default())))
        .collect();
    if boot.partitioning.shards > 1 {
        phase(3);
        let joined = mesh::join(boot.mesh, boot.table, id)
            .await
            .map_err(shard_err)?;
        mesh::spawn_tasks(id, joined, &peers, inbox.clone());
    }
    let wasm = Rc::new(WasmPool::new(
        boot.wasm_engine.clone(),
        boot.wasm_modules.clone(),
        boot.config.limits.wasm_slots,
        inbox.clone(),
        boot.metrics.clone(),
    ));
    let conns = Conns::default();

    phase(4);
    let listener = crate::listener::listen(boot.addr)
        .map_err(|e| shard_err(format!("cannot listen on {}: {e}", boot.addr)))?;
    phase(5);
    boot.metrics.serving.store(true, Ordering::Relaxed);
    let _ = boot.ready.send(Ok(id));
    injected_faults(id);
    let limit = crate::listener::ConnLimit {
        open: boot.connections.clone(),
        max: boot.config.max_connections,
    };
    let idle_ms = boot.config.idle_timeout_ms;
    let settings = Rc::new(crate::listener::ConnSettings {
        gate: boot
            .config
            .auth
            .clone()
            .map(|table| Rc::new(Gate::new(table))),
        idle_ms: if idle_ms == 0 { u64::MAX } else { idle_ms },
        frame_deadline_ms: boot.config.frame_deadline_ms,
        release_memory: boot.config.release_memory,
        released_at_ms: std::cell::Cell::new(0),
        metrics: boot.metrics.clone(),
    });
    let admission = Rc::new(crate::listener::Admission {
        inbox: inbox.clone(),
        peers: peers.iter().flatten().cloned().collect(),
    });
    glommio::spawn_local(accept_loop(
        id,
        listener,
        conns.clone(),
        admission,
        limit,
        settings,
    ))
    .detach();
    if idle_ms > 0 {
        glommio::spawn_local(crate::listener::idle_sweep(conns.clone(), idle_ms)).detach();
    }
    // Wakes the loop when a stop is asked.
    {
        let (stop, inbox) = (boot.stop.clone(), inbox.clone());
        glommio::spawn_local(async move {
            while !stop.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(STOP_POLL_MS)).await;
            }
            inbox.poke();
        })
        .detach();
    }
    let console = Rc::new(ConsoleCalls::default());
    if let Some(receiver) = boot.console {
        glommio::spawn_local(serve_calls(console.clone(), receiver, inbox.clone())).detach();
    }
    let webhooks = boot.webhooks;
    glommio::spawn_local(serve_answers(
        webhooks.answers,
        inbox.clone(),
        boot.metrics.clone(),
    ))
    .detach();
    // In-flight work (workflow runs, pending executions) resumes.
    inbox.push(Input::Started);
    let shard_loop = ShardLoop {
        engine,
        inbox,
        conns,
        peers,
        log: slot,
        log_map,
        snapshots: snapshotter,
        wasm,
        alarm,
        metrics: boot.metrics.clone(),
        console,
        webhooks: webhooks.out,
        unwaited_since: None,
    };
    let stop = boot.stop.clone();
    shard_loop.run(move || stop.load(Ordering::Relaxed)).await;
    // Let connection writers send the replies the last flush released.
    glommio::timer::sleep(Duration::from_millis(50)).await;
    Ok(())
}

#[allow(dead_code)]
fn _assert_send(m: MeshMsg) -> impl Send {
    m
}
