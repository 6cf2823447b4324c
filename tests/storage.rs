//! The storage lifecycle end to end: snapshots bound what a restart replays and let old
//! segments go; a damaged snapshot falls back to the one before; a log that lost segments
//! it needs is refused with the missing range.

mod common;

use common::{TestServer, remove_snapshots, segment_files, temp_dir, wait_until};
use flo::{Client, PutOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Small segments and a snapshot every 256 KiB of log: a few thousand puts make several.
const SMALL: &[&str] = &[
    "--shards",
    "1",
    "--segment-bytes",
    "65536",
    "--snapshot-bytes",
    "262144",
];

fn put_many(c: &mut Client, from: usize, n: usize) {
    for i in from..from + n {
        let value = format!("value {i} {}", "x".repeat(200));
        c.kv_put(&format!("k{i:05}"), value.as_bytes(), PutOptions::default())
            .unwrap();
    }
}

fn assert_all(c: &mut Client, n: usize) {
    for i in 0..n {
        let got = c.kv_get(&format!("k{i:05}")).unwrap().expect("key present");
        assert!(got.value.starts_with(format!("value {i} ").as_bytes()));
    }
}

fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let shard = dir.join("shard-000");
    let mut found: Vec<PathBuf> = fs::read_dir(shard)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .collect();
    found.sort();
    found
}

#[test]
fn snapshots_bound_the_log_and_a_restart_starts_from_the_newest() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), SMALL);
    let mut c = server.client();
    const N: usize = 4000;
    put_many(&mut c, 0, N);
    // Snapshots were taken while writing, and the segments before the older kept one went.
    assert!(
        wait_until(Duration::from_secs(10), || {
            c.status().unwrap().shards[0].snapshot_lsn > 0 && snapshots(dir.path()).len() == 2
        }),
        "{:?}",
        c.status()
    );
    let status = c.status().unwrap().shards[0].clone();
    let files = segment_files(dir.path(), 0);
    // 4000 one-put batches of 4 KiB: ~250 segments of 64 KiB were written.
    assert!(
        files.len() < 125,
        "{} segments of 64 KiB left of ~250 written: old ones should be gone",
        files.len()
    );
    assert_eq!(status.segments as usize, files.len());
    assert!(status.disk_bytes > 0 && status.snapshot_age_ms.is_some());
    assert_all(&mut c, N);
    drop(c);
    server.stop();

    // The graceful stop took a snapshot of the final state: nothing to replay.
    let newest = snapshots(dir.path()).pop().unwrap();
    assert!(
        newest
            .to_string_lossy()
            .ends_with(&format!("{:020}.snap", N)),
        "{newest:?}"
    );
    let server = TestServer::start(dir.path(), SMALL);
    let mut c = server.client();
    assert_eq!(c.status().unwrap().shards[0].snapshot_lsn, N as u64);
    assert_all(&mut c, N);
    put_many(&mut c, N, 10);
    assert_all(&mut c, N + 10);
    // A crash (no final snapshot): the newest periodic snapshot plus the log after it.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), SMALL);
    let mut c = server.client();
    assert_all(&mut c, N + 10);
    drop(c);
    server.stop();
}

#[test]
fn a_damaged_newest_snapshot_falls_back_to_the_one_before() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), SMALL);
    let mut c = server.client();
    put_many(&mut c, 0, 2000);
    drop(c);
    server.stop();
    let found = snapshots(dir.path());
    assert_eq!(found.len(), 2, "{found:?}");
    let newest = found.last().unwrap();
    let mut bytes = fs::read(newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(newest, &bytes).unwrap();

    let server = TestServer::start(dir.path(), SMALL);
    let stderr = server.stderr();
    assert!(
        stderr.contains("unusable") && stderr.contains("checksum"),
        "the damaged snapshot is reported:\n{stderr}"
    );
    // Set aside: it no longer counts as one of the two kept.
    assert!(newest.with_extension("snap.damaged").exists());
    assert!(!snapshots(dir.path()).contains(newest));
    let mut c = server.client();
    let status = c.status().unwrap().shards[0].clone();
    assert!(status.snapshot_lsn < 2000, "{status:?}");
    assert_all(&mut c, 2000);
    drop(c);
    server.stop();
}

#[test]
fn a_log_missing_its_first_segment_is_refused_with_the_missing_range() {
    let dir = temp_dir();
    // No periodic snapshot; the one of the graceful stop is removed (a crash before any).
    let args = ["--shards", "1", "--segment-bytes", "65536"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    put_many(&mut c, 0, 600);
    drop(c);
    server.stop();
    remove_snapshots(dir.path());
    let files = segment_files(dir.path(), 0);
    assert!(files.len() >= 3, "{files:?}");
    fs::remove_file(&files[0]).unwrap();
    let refused = common::expect_refusal(dir.path(), &args);
    let second = files[1].file_name().unwrap().to_string_lossy().to_string();
    let first_lsn: u64 = second.trim_end_matches(".ual").parse().unwrap();
    assert!(
        refused
            .stderr
            .contains(&format!("log records 1 to {} are missing", first_lsn - 1)),
        "{}",
        refused.stderr
    );
}

/// Echoes its input.
const ECHO_WAT: &str = r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (func (export "alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
            (i64.extend_i32_u (local.get $len)))))"#;

#[test]
fn retention_lets_old_segments_go_while_runs_in_flight_survive_restarts() {
    use flo::protocol::{ActionKind, ActionSpec, RunStatus};
    let dir = temp_dir();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--snapshot-bytes",
        "65536",
        "--test-clock",
        "--retention",
        "60s",
    ];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    c.register_action(ActionSpec {
        namespace: String::new(),
        name: "echo".into(),
        kind: ActionKind::Wasm,
        wasm: Some(ECHO_WAT.as_bytes().to_vec()),
        timeout_ms: None,
        max_retries: None,
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
    })
    .unwrap();
    common::user_action(&mut c, "manual", 3_600_000, 0, 1000);
    // A run in flight from the start: its record is in the first segment.
    let waiting = c
        .invoke("manual", b"{\"old\":true}", Default::default())
        .unwrap();
    let mut finished = Vec::new();
    for i in 0..300 {
        let id = c
            .invoke(
                "echo",
                format!("{{\"i\":{i}}}").as_bytes(),
                Default::default(),
            )
            .unwrap();
        finished.push(id);
    }
    for id in &finished {
        assert_eq!(c.wait_run(id, 5_000).unwrap().status, RunStatus::Completed);
    }
    let first_segments = segment_files(dir.path(), 0);
    // Past the window: the finished runs are forgotten, and the log written after makes
    // new snapshots, which let the segments holding the forgotten runs go.
    c.advance_clock(61_000).unwrap();
    assert!(wait_until(Duration::from_secs(5), || c
        .status()
        .unwrap()
        .shards[0]
        .archived_runs
        == 0));
    put_many(&mut c, 0, 600);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let now = segment_files(dir.path(), 0);
            !now.is_empty() && !now.contains(&first_segments[0])
        }),
        "the first segment should be deleted: {:?}",
        segment_files(dir.path(), 0)
    );
    assert_eq!(c.run(&waiting).unwrap().status, RunStatus::Pending);
    assert_eq!(c.run(&waiting).unwrap().input, b"{\"old\":true}".to_vec());
    assert!(c.run(&finished[0]).is_err(), "forgotten");
    drop(c);
    // After a crash too: the run in flight comes from the snapshot.
    server.kill9();
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert_eq!(c.run(&waiting).unwrap().status, RunStatus::Pending);
    assert_all(&mut c, 600);
    drop(c);
    server.stop();
}
