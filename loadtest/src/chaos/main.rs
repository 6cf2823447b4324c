//! flo-chaos: the crash-loop harness. It runs a flo server of its own and, cycle after
//! cycle, drives a seeded mixed load against it (`load`: KV puts, CAS and deletes, WASM runs
//! whose guest writes a key, user-hosted tasks served by its `workers`, workflows with a
//! signal wait, a timer and a child), kills it with SIGKILL after a random 0.2-3 s,
//! restarts it on the same data directory and port (in one cycle in ten kills it again
//! within 0.3 s of that restart, and restarts it again), and checks what it acknowledged
//! (`verify`, against the ledger in `model`). Violations are printed as they are found,
//! with the command that replays the campaign; the exit status is 1 if there was any.

mod args;
mod defs;
mod history;
mod load;
mod model;
mod report;
mod server;
mod verify;
mod watchdog;
mod workers;

use args::Args;
use clap::Parser;
use flo_loadtest::spawn;
use flo_testkit::Rng;
use load::{ClientLedger, Load};
use model::{Settled, TaskLedger};
use report::{Campaign, Report};
use server::{Server, ServerSpec};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use verify::Verify;
use watchdog::Watchdog;

/// `flo server` arguments unless `--server-arg` gives them: small segments and frequent
/// snapshots, so kills also land in segment rollovers and snapshot writes.
const DEFAULT_SERVER_ARGS: [(&str, &str); 2] = [
    ("--segment-bytes", "1048576"),
    ("--snapshot-bytes", "2097152"),
];
/// Cycles whose restarted server is killed again before verification, in percent.
const QUICK_KILL_PERCENT: u64 = 10;
/// How soon after that restart's `listening` line (a uniform 0..this ms).
const QUICK_KILL_AFTER_MS_MAX: u64 = 300;
/// Time beyond the load phase the load threads have to notice the kill.
const LOAD_SLACK: Duration = Duration::from_secs(60);
/// Time beyond `--settle-ms` a verification may take (reads, guest writes, samples).
const VERIFY_SLACK: Duration = Duration::from_secs(60);
/// Verifications of one cycle: after a server that stopped answering is killed, it is
/// started again and the verification done again, once.
const VERIFY_ATTEMPTS_MAX: u32 = 2;
/// RNG streams: the kill delay and the verification's samples of cycle C are
/// `(seed, C, KILL_STREAM)` and `(seed, C, VERIFY_STREAM)`; load thread T's is `(seed, C, T)`.
const KILL_STREAM: u64 = u64::MAX;
const VERIFY_STREAM: u64 = u64::MAX - 1;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("flo-chaos: {message}");
            ExitCode::from(2)
        }
    }
}

/// What every cycle uses.
struct Ctx<'a> {
    args: &'a Args,
    seed: u64,
    spec: ServerSpec,
    report: Arc<Report>,
    shared: Arc<workers::Shared>,
    watchdog: Arc<Watchdog>,
}

fn run(args: &Args) -> Result<ExitCode, String> {
    args.check()?;
    let seed = args.seed.unwrap_or_else(seed_from_clock);
    let bin = match &args.flo_bin {
        Some(path) => path.clone(),
        None => spawn::default_flo_bin()?,
    };
    if !bin.is_file() {
        return Err(format!(
            "flo executable not found at {} (build it: `cargo build --release -p flo`, or pass \
             --flo-bin)",
            bin.display()
        ));
    }
    let (data_dir, temp_dir) = data_dir(args)?;
    let spec = ServerSpec {
        bin,
        data_dir,
        shards: args.shards,
        extra: server_args(&args.server_args, args.retention_secs),
    };
    println!(
        "flo-chaos: seed {seed}, {} cycles, {} clients, {} workers, load {}..{} ms; {} server \
         --shards {} {} --data-dir {}",
        args.cycles,
        args.clients,
        args.workers,
        args.load_min_ms,
        args.load_max_ms,
        spec.bin.display(),
        args.shards,
        spec.extra.join(" "),
        spec.data_dir.display()
    );
    let report = Arc::new(Report::new(seed, args.clone()));
    let started = Instant::now();
    let server = Server::start_first(&spec)
        .map_err(|f| format!("the first start failed: {}\n{}", f.what, f.stderr))?;
    defs::register(&server.addr)?;
    let shared = Arc::new(workers::Shared {
        addr: server.addr.clone(),
        seed,
        report: report.clone(),
        tasks: Mutex::new(TaskLedger::default()),
        cycle: AtomicU64::new(0),
        counts: Mutex::new(model::Counts::default()),
        stop: AtomicBool::new(false),
    });
    let spec_dir = spec.data_dir.clone();
    let ctx = Ctx {
        args,
        seed,
        spec,
        report: report.clone(),
        shared: shared.clone(),
        watchdog: Watchdog::start(report.clone(), spec_dir),
    };
    let worker_threads = workers::start(&shared, args.workers);

    let mut ledgers: Vec<ClientLedger> = (0..args.clients).map(ClientLedger::new).collect();
    let mut settled = Vec::new();
    let mut campaign = Campaign::default();
    let mut server = Some(server);
    let mut ended_early = None;
    for cycle in 1..=args.cycles {
        let current = server.take().expect("a running server");
        match run_cycle(
            &ctx,
            cycle,
            current,
            &mut ledgers,
            &mut settled,
            &mut campaign,
        ) {
            Ok(next) => server = Some(next),
            Err(why) => {
                ended_early = Some(why);
                break;
            }
        }
        campaign.cycles = cycle;
    }
    shared.stop.store(true, Relaxed);
    for handle in worker_threads {
        let _ = handle.join();
    }
    report.add_counts(&shared.counts.lock().unwrap());
    if let Some(server) = server {
        final_restart(
            &ctx,
            campaign.cycles,
            server,
            &mut ledgers,
            &mut settled,
            &mut campaign,
        );
    }
    ctx.watchdog.disarm();

    let violations = report.violations();
    if let Some(why) = &ended_early {
        println!("flo-chaos: the campaign stopped early: {why}");
    }
    print!(
        "{}",
        report::summary(
            seed,
            &campaign,
            &report.counts(),
            violations,
            started.elapsed()
        )
    );
    if violations == 0 && ended_early.is_none() {
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(temp_dir) = temp_dir {
        println!(
            "flo-chaos: data directory kept: {}",
            temp_dir.keep().display()
        );
    }
    Ok(ExitCode::FAILURE)
}

/// Load, kill, restart, verify. Returns the restarted server; `Err` when the campaign
/// cannot go on (no server could be started, or it stopped answering).
fn run_cycle(
    ctx: &Ctx,
    cycle: u64,
    server: Server,
    ledgers: &mut [ClientLedger],
    settled: &mut Vec<Settled>,
    campaign: &mut Campaign,
) -> Result<Server, String> {
    let (args, report) = (ctx.args, &*ctx.report);
    ctx.shared.cycle.store(cycle, Relaxed);
    let mut kills = Rng::derive(ctx.seed, cycle, KILL_STREAM);
    let load_ms = kills.between(args.load_min_ms, args.load_max_ms);
    let load_time = Duration::from_millis(load_ms);
    ctx.watchdog
        .arm(cycle, "the load", load_time + LOAD_SLACK, Some(&server));
    let addr = server.addr.clone();
    let cycle_started = Instant::now();
    let killed = load_and_kill(ctx, cycle, server, ledgers, load_time);
    exited_by_itself(report, cycle, &killed, "the load");
    let (mut acked, mut in_doubt) = (0, 0);
    for ledger in ledgers.iter_mut() {
        acked += ledger.counts.acked_total();
        in_doubt += ledger.counts.in_doubt_total();
        report.add_counts(&ledger.counts);
        ledger.counts = model::Counts::default();
    }

    // Server::start has its own time limit: a restart that outlives this one is stuck in
    // the harness.
    let restart_limit = 2 * server::READY_TIMEOUT + LOAD_SLACK;
    ctx.watchdog.arm(cycle, "the restart", restart_limit, None);
    let mut server = restart(ctx, cycle, &addr)?;
    campaign.restarted(cycle, server.ready_in);
    let mut restarted = format!("restart {:.2} s", server.ready_in.as_secs_f64());
    if kills.percent(QUICK_KILL_PERCENT) {
        // Killed again while it resumes the runs the first kill interrupted (the workers
        // are at it already).
        let after_ms = kills.below(QUICK_KILL_AFTER_MS_MAX);
        thread::sleep(Duration::from_millis(after_ms));
        let killed = server.kill();
        exited_by_itself(report, cycle, &killed, "the resumption after a restart");
        server = restart(ctx, cycle, &addr)?;
        campaign.restarted(cycle, server.ready_in);
        campaign.quick_kills += 1;
        restarted.push_str(&format!(
            ", killed again {after_ms} ms later, restart {:.2} s",
            server.ready_in.as_secs_f64()
        ));
    }

    let runs_before = campaign.verified.runs_final;
    let mut attempt = 1;
    loop {
        let settle = Duration::from_millis(args.settle_ms);
        ctx.watchdog.arm(
            cycle,
            "the verification",
            settle + VERIFY_SLACK,
            Some(&server),
        );
        let fired = ctx.watchdog.fired();
        let cx = verify::Context {
            cycle,
            cycle_started,
            report,
            tasks: &ctx.shared.tasks,
            verified: &mut campaign.verified,
            deadline: Instant::now() + settle,
            retention: Duration::from_secs(args.retention_secs),
            rng: Rng::derive(ctx.seed, cycle, VERIFY_STREAM),
        };
        let verified = Verify::connect(&server.addr, cx).and_then(|mut verify| {
            verify.kv(ledgers)?;
            verify.old_runs(settled)?;
            verify.runs(ledgers, settled)
        });
        ctx.watchdog.disarm();
        let Err(fatal) = verified else { break };
        // The watchdog killed a server that stopped answering (and said so), or it died.
        let killed = server.kill();
        if ctx.watchdog.fired() == fired {
            report.violation(cycle, &fatal, Some(&killed.stderr));
        }
        if attempt == VERIFY_ATTEMPTS_MAX {
            return Err(fatal);
        }
        attempt += 1;
        ctx.watchdog.arm(cycle, "the restart", restart_limit, None);
        server = restart(ctx, cycle, &addr)?;
        campaign.restarted(cycle, server.ready_in);
        restarted.push_str(&format!(
            "; verification stopped, restart {:.2} s",
            server.ready_in.as_secs_f64()
        ));
    }
    println!(
        "cycle {cycle}/{}: load {load_ms} ms, {acked} acknowledged, {in_doubt} in doubt; \
         {restarted}; {} runs final; violations so far {}",
        args.cycles,
        campaign.verified.runs_final - runs_before,
        report.violations()
    );
    Ok(server)
}

/// A server the kill found dead already is a violation.
fn exited_by_itself(report: &Report, cycle: u64, killed: &server::Killed, during: &str) {
    if let Some(status) = killed.exited_before {
        report.violation(
            cycle,
            &format!("the server exited by itself during {during} ({status})"),
            Some(&killed.stderr),
        );
    }
}

/// Runs the load threads for `load_time`, then kills the server under them.
fn load_and_kill(
    ctx: &Ctx,
    cycle: u64,
    server: Server,
    ledgers: &mut [ClientLedger],
    load_time: Duration,
) -> server::Killed {
    let stop = AtomicBool::new(false);
    let addr = server.addr.clone();
    thread::scope(|scope| {
        for ledger in ledgers.iter_mut() {
            let mut load = Load {
                cycle,
                addr: &addr,
                rng: Rng::derive(ctx.seed, cycle, u64::from(ledger.index)),
                stop: &stop,
                report: &ctx.report,
                sent: 0,
            };
            scope.spawn(move || load.run(ledger));
        }
        thread::sleep(load_time);
        let killed = server.kill();
        stop.store(true, Relaxed);
        killed
    })
}

/// Starts the server again on its data directory and port; a failed start is a violation,
/// and is tried once more.
fn restart(ctx: &Ctx, cycle: u64, addr: &str) -> Result<Server, String> {
    match Server::start(&ctx.spec, addr) {
        Ok(server) => Ok(server),
        Err(failure) => {
            let what = format!("the restart failed: {}", failure.what);
            ctx.report.violation(cycle, &what, Some(&failure.stderr));
            Server::start(&ctx.spec, addr).map_err(|again| {
                let what = format!("a second restart failed too: {}", again.what);
                ctx.report.violation(cycle, &what, Some(&again.stderr));
                what
            })
        }
    }
}

/// After the last cycle: a graceful stop (exit 0), a start from its snapshot, and the
/// keys and a sample of runs checked once more.
fn final_restart(
    ctx: &Ctx,
    cycle: u64,
    server: Server,
    ledgers: &mut [ClientLedger],
    settled: &mut Vec<Settled>,
    campaign: &mut Campaign,
) {
    let report = &*ctx.report;
    let addr = server.addr.clone();
    // Server::stop and Server::start have their own time limits.
    ctx.watchdog
        .arm(cycle, "the final stop", 3 * server::READY_TIMEOUT, None);
    if let Err(failure) = server.stop() {
        report.violation(cycle, &failure.what, Some(&failure.stderr));
        return;
    }
    let Ok(server) = restart(ctx, cycle, &addr) else {
        return;
    };
    campaign.restarted(cycle, server.ready_in);
    ctx.watchdog
        .arm(cycle, "the final verification", VERIFY_SLACK, Some(&server));
    let cx = verify::Context {
        cycle,
        cycle_started: Instant::now(),
        report,
        tasks: &ctx.shared.tasks,
        verified: &mut campaign.verified,
        deadline: Instant::now(),
        retention: Duration::from_secs(ctx.args.retention_secs),
        rng: Rng::derive(ctx.seed, cycle + 1, VERIFY_STREAM),
    };
    let fired = ctx.watchdog.fired();
    let verified = Verify::connect(&server.addr, cx).and_then(|mut verify| {
        verify.kv(ledgers)?;
        verify.old_runs(settled)
    });
    ctx.watchdog
        .arm(cycle, "the final stop", 3 * server::READY_TIMEOUT, None);
    if let Err(fatal) = verified {
        if ctx.watchdog.fired() == fired {
            report.violation(cycle, &fatal, Some(&server.stderr_tail()));
        }
        return; // dropping the server kills it
    }
    if let Err(failure) = server.stop() {
        report.violation(cycle, &failure.what, Some(&failure.stderr));
    }
}

/// The `flo server` arguments: the defaults the user did not give, then the user's.
fn server_args(given: &[String], retention_secs: u64) -> Vec<String> {
    let mut args = vec!["--retention".to_string(), format!("{retention_secs}s")];
    for (flag, value) in DEFAULT_SERVER_ARGS {
        if !given
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        {
            args.extend([flag.to_string(), value.to_string()]);
        }
    }
    args.extend(given.iter().cloned());
    args
}

/// `--data-dir` (created, must be empty), or a temporary directory.
fn data_dir(args: &Args) -> Result<(std::path::PathBuf, Option<tempfile::TempDir>), String> {
    if let Some(dir) = &args.data_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let empty = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            return Err(format!(
                "{} is not empty: the ledger starts from an empty server",
                dir.display()
            ));
        }
        return Ok((dir.clone(), None));
    }
    let temp = tempfile::Builder::new()
        .prefix("flo-chaos-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary data directory: {e}"))?;
    Ok((temp.path().to_path_buf(), Some(temp)))
}

fn seed_from_clock() -> u64 {
    Rng::from_time().next_u64() % 1_000_000_000
}
