//! A short crash-loop campaign (`flo-chaos`) against the `flo` of this build: 20 cycles of
//! mixed load, SIGKILL, restart on the same data directory and port, and verification of
//! everything acknowledged. A new seed each run; a failure prints it with the replay
//! command of every violation.

mod common;

use common::flo_bin;
use std::process::Command;
use std::time::Instant;

/// Cycles of the campaign.
const CYCLES: u64 = 20;
/// Longest load phase of a cycle (ms): short, to keep the campaign well within CI's time.
const LOAD_MAX_MS: u64 = 1000;

#[test]
fn a_short_crash_loop_campaign_loses_nothing_acknowledged() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_000;
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_flo-chaos"))
        .arg("--flo-bin")
        .arg(flo_bin())
        .args(["--seed", &seed.to_string()])
        .args(["--cycles", &CYCLES.to_string()])
        .args(["--load-max-ms", &LOAD_MAX_MS.to_string()])
        .output()
        .expect("run flo-chaos");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "flo-chaos --seed {seed} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains(&format!("seed {seed}: {CYCLES} cycles")),
        "the summary names the seed and the cycles run:\n{stdout}"
    );
    assert!(stdout.contains("violations: 0"), "{stdout}");
    assert!(
        !stdout.contains("violation:"),
        "no violation line expected:\n{stdout}"
    );
    // Every kind of operation was acknowledged at least once over the campaign.
    for kind in [
        "kv put",
        "kv cas",
        "guest run",
        "task run",
        "workflow run",
        "signal",
        "task complete",
    ] {
        assert!(
            stdout.contains(&format!("{kind} ")),
            "no {kind} acknowledged:\n{stdout}"
        );
    }
    eprintln!(
        "flo-chaos --seed {seed}: {CYCLES} cycles in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
