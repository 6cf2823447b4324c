//! Runs the built `flo-loadtest` against a server it spawns.

mod common;

use common::flo_bin;
use std::process::Command;

/// Runs `flo-loadtest --spawn --shards 2 --max-secs 120 --json ARGS...`; asserts success
/// and returns the report.
fn run_spawned(args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_flo-loadtest"))
        .arg("--spawn")
        .arg("--flo-bin")
        .arg(flo_bin())
        .args(["--shards", "2", "--max-secs", "120", "--json"])
        .args(args)
        .output()
        .expect("run flo-loadtest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "flo-loadtest failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {stdout}"))
}

fn assert_latency(latency: &serde_json::Value, report: &serde_json::Value) {
    let p50 = latency["p50"].as_f64().unwrap();
    let max = latency["max"].as_f64().unwrap();
    assert!(p50 <= max, "p50 {p50} > max {max}: {report}");
}

#[test]
fn kv_put_against_a_spawned_server() {
    let report = run_spawned(&[
        "--workload",
        "kv-put",
        "--ops",
        "3000",
        "--connections",
        "2",
        "--pipeline",
        "16",
    ]);
    assert_eq!(report["workload"], "kv-put");
    assert_eq!(report["ops"], 3000, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["ops_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert_latency(&report["latency_ms"], &report);
    assert_eq!(report["connections"], 2);
    assert_eq!(report["pipeline"], 16);
    assert_eq!(report["spawned"]["shards"], 2, "{report}");
    assert_eq!(report["spawned"]["durability"], "sync", "{report}");
}

/// `--histogram-out`: HdrHistogram's percentile distribution of the operations' latency,
/// in milliseconds, up to their max and count.
#[test]
fn kv_put_writes_a_plottable_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv-put.hgrm");
    let report = run_spawned(&[
        "--workload",
        "kv-put",
        "--ops",
        "2000",
        "--connections",
        "2",
        "--pipeline",
        "16",
        "--histogram-out",
        path.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"],
        "{text}"
    );
    assert_eq!(lines.next(), Some(""), "{text}");
    let rows: Vec<Vec<f64>> = lines
        .by_ref()
        .take_while(|l| !l.starts_with('#'))
        .map(|l| {
            l.split_whitespace()
                .map(|f| f.parse().unwrap_or_else(|e| panic!("{l:?}: {e}")))
                .collect()
        })
        .collect();
    assert!(rows.len() >= 10, "{text}");
    let last = rows.last().unwrap();
    assert_eq!(last[1], 1.0, "{text}");
    assert_eq!(last[2], 2000.0, "every operation counted: {text}");
    let max_ms = report["latency_ms"]["max"].as_f64().unwrap();
    assert!(
        (last[0] - max_ms).abs() <= max_ms * 0.01 + 0.001,
        "the 100% value {} is the report's max {max_ms}",
        last[0]
    );
    assert!(text.contains("#[Max     ="), "{text}");
    assert!(text.contains("Total count    =         2000]"), "{text}");
}

#[test]
fn worker_against_a_spawned_server() {
    let report = run_spawned(&[
        "--workload",
        "worker",
        "--ops",
        "2000",
        "--connections",
        "2",
        "--pipeline",
        "16",
        "--workers",
        "3",
        "--await-batch",
        "16",
    ]);
    assert_eq!(report["workload"], "worker");
    assert_eq!(report["ops"], 2000, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let tasks = &report["tasks"];
    assert_eq!(tasks["action"], "lt-task", "{report}");
    assert_eq!(tasks["workers"], 3, "{report}");
    assert_eq!(tasks["await_batch"], 16, "{report}");
    assert_eq!(tasks["expected"], 2000, "{report}");
    assert_eq!(tasks["completed"], 2000, "{report}");
    assert_eq!(tasks["errors"], 0, "{report}");
    assert_eq!(tasks["worker_failures"], serde_json::json!([]), "{report}");
    assert!(tasks["invokes_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(tasks["completed_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert_latency(&tasks["latency_ms"], &report);
}

#[test]
fn workflow_worker_runs_every_step_on_the_workers() {
    let report = run_spawned(&[
        "--workload",
        "workflow-worker",
        "--ops",
        "300",
        "--connections",
        "2",
        "--pipeline",
        "8",
        "--workers",
        "2",
        "--await-batch",
        "16",
    ]);
    assert_eq!(report["workload"], "workflow-worker");
    assert_eq!(
        (&report["ops"], &report["errors"]),
        (&300.into(), &0.into()),
        "{report}"
    );
    assert_latency(&report["latency_ms"], &report);
    let tasks = &report["tasks"];
    assert_eq!(tasks["expected"], 900, "three steps per run: {report}");
    assert_eq!(tasks["completed"], 900, "{report}");
    assert!(tasks["invokes_per_s"].is_null(), "{report}");
    let server = &report["server"];
    assert!(server["peak_rss_bytes"].as_u64().unwrap() > 0, "{report}");
    assert!(server["cpu_s_per_1000_ops"].as_f64().is_some(), "{report}");
}

#[test]
fn mixed_open_loop_reports_each_kind_within_the_bound() {
    let report = run_spawned(&[
        "--workload",
        "mixed",
        "--mix",
        "kv=2,wasm=1,worker=1,workflow=1",
        "--rate",
        "500",
        "--duration",
        "2s",
        "--max-outstanding",
        "64",
        "--connections",
        "2",
        "--pipeline",
        "16",
        "--workers",
        "2",
        "--await-batch",
        "16",
    ]);
    assert_eq!(
        (&report["ops"], &report["errors"]),
        (&1000.into(), &0.into()),
        "{report}"
    );
    assert_eq!(
        report["mix"],
        "kv-put=1,kv-get=1,wasm=1,worker=1,workflow=1"
    );
    let kinds: Vec<(&str, u64)> = report["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kind"].as_str().unwrap(), k["ops"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("kv-put", 200),
            ("kv-get", 200),
            ("wasm", 200),
            ("worker", 200),
            ("workflow", 200)
        ],
        "{report}"
    );
    assert_eq!(report["tasks"]["completed"], 200, "{report}");
    let open = &report["open_loop"];
    assert_eq!(
        (&open["rate_per_s"], &open["sent_ops"]),
        (&500.into(), &1000.into()),
        "{report}"
    );
    assert!(open["fell_behind"].is_boolean(), "{report}");
    let bound = &report["max_outstanding"];
    assert_eq!(bound["limit"], 64, "{report}");
    assert!(bound["peak"].as_u64().unwrap() <= 64, "{report}");
}
