use super::CliError;
use super::args::{DurabilityArg, ServerArgs};
use flo_runtime::{Durability, ServerConfig, run_server};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub fn run(args: &ServerArgs) -> Result<(), CliError> {
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
    let durability = match args.durability {
        DurabilityArg::Sync => Durability::Sync,
        DurabilityArg::Async => Durability::Async,
    };
    let config = ServerConfig {
        listen: args.listen,
        data_dir: args.data_dir.clone(),
        shards: args.shards,
        durability,
        segment_bytes: args.segment_bytes,
        retention_ms: args.retention,
        peer_timeout_ms: args.peer_timeout,
        max_connections: args.max_connections as usize,
        release_memory: crate::release_memory,
        snapshot_bytes: args.snapshot_bytes.max(flo_runtime::SEGMENT_BYTES_MIN),
        io_memory_bytes: args.io_memory_mb.max(1) << 20,
        test_clock: args.test_clock,
        fault_disk_capacity_file: args.fault_disk_capacity_file.clone(),
    };
    run_server(config, stop, |ready| {
        // Nobody reading the ready line (a closed pipe) is no reason to stop serving.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "flo {} listening on {} ({} shards, durability {}, data {})",
            env!("CARGO_PKG_VERSION"),
            ready.addr,
            ready.shards,
            durability.as_str(),
            args.data_dir.display()
        );
        let _ = out.flush();
    })?;
    super::output::error_line("flo stopped");
    Ok(())
}
