use super::CliError;
use super::args::{DurabilityArg, LogFormatArg, ServerArgs};
use flo_engine::auth::{AuthTable, FileFormat};
use flo_runtime::{Durability, Limits, LogFormat, ServerConfig, run_server};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// `flo server`: installs the log (`--log`, `--log-format`), then serves until a signal.
/// With `--log-format json` an error that ends the server is logged as a JSON line too,
/// instead of the CLI's plain `error: ...`.
pub fn run(args: &ServerArgs) -> Result<(), CliError> {
    let format = match args.log_format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    flo_runtime::install_logging(format, &args.log_filter)
        .map_err(|e| CliError::Usage(format!("--log: {e}")))?;
    let served = serve(args);
    flo_runtime::flush_log();
    match served {
        Err(e) if format == LogFormat::Json => {
            tracing::error!(target: "flo::boot", "{e}");
            flo_runtime::flush_log();
            Err(CliError::Logged(Box::new(e)))
        }
        served => served,
    }
}

fn serve(args: &ServerArgs) -> Result<(), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|e| CliError::Usage(format!("cannot install signal handler: {e}")))?;
    }
    if args.segment_bytes < flo_runtime::SEGMENT_BYTES_MIN {
        return Err(CliError::Usage(format!(
            "--segment-bytes must be at least {}",
            flo_runtime::SEGMENT_BYTES_MIN
        )));
    }
    let auth = load_auth(args)?;
    check_http_exposure(args)?;
    let durability = match args.durability {
        DurabilityArg::Sync => Durability::Sync,
        DurabilityArg::Async => Durability::Async,
    };
    let config = ServerConfig {
        listen: args.listen,
        http: args.http.addr(),
        data_dir: args.data_dir.clone(),
        shards: args.shards,
        durability,
        segment_bytes: args.segment_bytes,
        log_writes: args.log_writes as usize,
        retention_ms: args.retention,
        peer_timeout_ms: args.peer_timeout,
        max_connections: args.max_connections as usize,
        idle_timeout_ms: args.idle_timeout,
        frame_deadline_ms: args.frame_deadline_ms,
        release_memory: crate::release_memory,
        snapshot_bytes: args.snapshot_bytes.max(flo_runtime::SEGMENT_BYTES_MIN),
        io_memory_bytes: args.io_memory_mb.max(1) << 20,
        pin_shards: args.pin_shards,
        module_cache_bytes: args.module_cache_mb << 20,
        test_clock: args.test_clock,
        fault_disk_capacity_file: args.fault_disk_capacity_file.clone(),
        auth,
        limits: Limits {
            run_steps_max: args.max_run_steps,
            wasm_slots: args.max_concurrent_executions as usize,
        },
    };
    run_server(config, stop, |ready| {
        // Nobody reading the ready line (a closed pipe) is no reason to stop serving.
        let mut out = std::io::stdout().lock();
        let http = match ready.http {
            Some(addr) => addr.to_string(),
            None => "off".to_string(),
        };
        let _ = writeln!(
            out,
            "flo {} listening on {} ({} shards, durability {}, http {}, data {})",
            env!("CARGO_PKG_VERSION"),
            ready.addr,
            ready.shards,
            durability.as_str(),
            http,
            args.data_dir.display()
        );
        let _ = out.flush();
        tracing::info!(
            target: "flo::boot",
            version = %env!("CARGO_PKG_VERSION"),
            addr = %ready.addr,
            shards = ready.shards,
            durability = %durability.as_str(),
            http = %http,
            data = %args.data_dir.display(),
            "listening"
        );
    })?;
    tracing::info!(target: "flo::boot", "flo stopped");
    Ok(())
}

/// The HTTP port follows the rule of the client port: without an auth file, a loopback
/// address only, unless `--insecure` (its /metrics names actions and workflows).
fn check_http_exposure(args: &ServerArgs) -> Result<(), CliError> {
    let Some(addr) = args.http.addr() else {
        return Ok(());
    };
    if args.auth_file.is_some() || addr.ip().is_loopback() {
        return Ok(());
    }
    if !args.insecure {
        return Err(CliError::Usage(format!(
            "refusing to serve HTTP on {addr} without authentication: give --auth-file FILE, \
             an --http loopback address, --http off, or --insecure to let anyone who can \
             reach it read the metrics and use the web console (signal, cancel, drain...)"
        )));
    }
    tracing::warn!(
        target: "flo::boot",
        "serving HTTP on {addr} with no authentication (--insecure): anyone who can reach it \
         may read the metrics and use the web console"
    );
    Ok(())
}

/// The auth file's table, or None without one; and the rule for a server without: it
/// listens on a loopback address only, unless `--insecure` says otherwise.
fn load_auth(args: &ServerArgs) -> Result<Option<Arc<AuthTable>>, CliError> {
    let Some(path) = &args.auth_file else {
        if !args.listen.ip().is_loopback() {
            if !args.insecure {
                return Err(CliError::Usage(format!(
                    "refusing to listen on {} without authentication: give --auth-file FILE \
                     (see docs/operations.md, Authentication), listen on a loopback address, or give \
                     --insecure to let anyone who can reach it do anything",
                    args.listen
                )));
            }
            tracing::warn!(
                target: "flo::boot",
                "listening on {} with no authentication (--insecure): anyone who can reach it \
                 may do anything",
                args.listen
            );
        }
        return Ok(None);
    };
    let bad = |problem: String| CliError::Usage(format!("auth file {}: {problem}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let table =
        AuthTable::parse(&text, FileFormat::of_path(path)).map_err(|e| bad(e.to_string()))?;
    Ok(Some(Arc::new(table)))
}
