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
    assert!(
        files.len() < 20,
        "{} segments of 64 KiB for ~1 MiB of log: old ones should be gone",
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
