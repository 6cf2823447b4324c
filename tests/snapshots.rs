//! Snapshots end to end: KV values make a snapshot about as large as they are and come
//! back after a restart; a data directory whose snapshot is in the previous format (3)
//! starts; a snapshot of a format this flo does not read refuses the start, naming it,
//! and is left as it was; a shard whose disk is full takes deletes, and snapshots its way
//! back to writable.

mod common;

use common::{TestServer, cli_fails, cli_ok, expect_refusal, temp_dir, wait_until};
use flo::{Client, PutOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The fixture: a one-shard data directory flo wrote in snapshot format 3, the log below
/// its snapshot gone (`testdata/snapshot-format-3/README.md`).
const FORMAT_3: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/snapshot-format-3");
const FORMAT_3_SNAPSHOT: &str = "snapshot-00000000000000000019.snap";

fn shard_files(data: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(data.join("shard-000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    found
}

fn copy_fixture(to: &Path) {
    fs::create_dir_all(to.join("shard-000")).unwrap();
    fs::copy(Path::new(FORMAT_3).join("flo.meta"), to.join("flo.meta")).unwrap();
    for entry in fs::read_dir(Path::new(FORMAT_3).join("shard-000")).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, to.join("shard-000").join(path.file_name().unwrap())).unwrap();
    }
}

/// A value of `len` bytes, every byte value present (no text: an array of integers
/// would take up to twice the space).
fn binary_value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|b| (b * 31 + i * 7) as u8).collect()
}

/// 96 values of 64 KiB (6 MiB): a snapshot of them is within 5% (and 64 KiB) of their
/// size, and a restart from it reads every one back.
#[test]
fn kv_values_survive_a_snapshot_and_a_restart_in_a_file_about_their_size() {
    const N: usize = 96;
    const LEN: usize = 64 << 10;
    let dir = temp_dir();
    let args = ["--shards", "1", "--snapshot-bytes", "2097152"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    for i in 0..N {
        c.kv_put(
            &format!("blob-{i:03}"),
            &binary_value(i, LEN),
            PutOptions::default(),
        )
        .unwrap();
    }
    drop(c);
    // A graceful stop writes a snapshot of the final state.
    server.stop();
    let newest = shard_files(dir.path(), ".snap").pop().expect("a snapshot");
    let size = fs::metadata(&newest).unwrap().len();
    let payload = (N * LEN) as u64;
    assert!(
        size >= payload && size <= payload + payload / 20 + (64 << 10),
        "a snapshot of {payload} bytes of values takes {size} bytes"
    );

    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    for i in 0..N {
        let got = c.kv_get(&format!("blob-{i:03}")).unwrap().expect("present");
        assert_eq!(got.value, binary_value(i, LEN), "blob-{i:03}");
    }
    drop(c);
    server.stop();
}

/// The data directory of a flo that wrote snapshot format 3 starts with this one (its log
/// below the snapshot is gone: the snapshot is read, not replayed around), with every
/// value, run and record; its next snapshot is in the current format.
#[test]
fn a_data_directory_with_a_format_3_snapshot_starts() {
    let dir = temp_dir();
    copy_fixture(dir.path());
    let args = ["--shards", "1", "--segment-bytes", "65536"];
    let server = TestServer::start(dir.path(), &args);
    let addr = server.addr_string();
    let mut c = server.client();
    for i in 0..10 {
        let got = c.kv_get(&format!("key-{i}")).unwrap().expect("present");
        assert_eq!(got.value, format!("value {i} from format 3").into_bytes());
    }
    let other = cli_ok(&addr, &["--namespace", "ns2", "kv", "get", "other"]);
    assert_eq!(other.trim(), "second namespace");
    let run = c.run("work-1").unwrap();
    assert_eq!(run.status, flo::protocol::RunStatus::Pending);
    let wf = cli_ok(&addr, &["workflow", "status", "wfrun-1"]);
    assert!(wf.contains("waiting"), "{wf}");
    let records = cli_ok(&addr, &["stream", "read", "events"]);
    assert!(records.contains("first event"), "{records}");
    let payload = fs::read(Path::new(FORMAT_3).join("payload.bin")).unwrap();
    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    assert!(records.contains(&hex), "{records}");
    // It goes on from there, and nothing was set aside.
    c.kv_put("after", b"format 4", PutOptions::default())
        .unwrap();
    assert!(shard_files(dir.path(), ".damaged").is_empty());
    drop(c);
    server.stop();

    // The stop wrote a snapshot in the current format: a restart reads it.
    let snapshots = shard_files(dir.path(), ".snap");
    assert_eq!(snapshots.len(), 2, "{snapshots:?}");
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert_eq!(c.kv_get("after").unwrap().unwrap().value, b"format 4");
    assert_eq!(
        c.kv_get("key-3").unwrap().unwrap().value,
        b"value 3 from format 3"
    );
    drop(c);
    server.stop();
}

/// CRC-32 (IEEE), as snapshot files end with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= *b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// A snapshot of a format this flo does not read (a newer flo's, say) is not damaged: with
/// the log below it gone the shard refuses to start, naming the file and the format, and
/// the file is left as it was (never renamed `.damaged`).
#[test]
fn a_snapshot_of_an_unknown_format_refuses_the_start_and_is_left_alone() {
    let dir = temp_dir();
    copy_fixture(dir.path());
    let path = dir.path().join("shard-000").join(FORMAT_3_SNAPSHOT);
    let mut bytes = fs::read(&path).unwrap();
    // The image starts at byte 24: an array, then the format (3) as one byte.
    assert_eq!(bytes[25], 3);
    bytes[25] = 9;
    let body = bytes.len() - 4;
    let crc = crc32(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &bytes).unwrap();

    let refused = expect_refusal(dir.path(), &["--shards", "1", "--segment-bytes", "65536"]);
    assert!(
        refused.stderr.contains(FORMAT_3_SNAPSHOT)
            && refused.stderr.contains("snapshot format 9")
            && refused.stderr.contains("reads snapshot formats 3 to 5"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the snapshot is left as it was"
    );
    assert!(shard_files(dir.path(), ".damaged").is_empty());
}

/// Bytes of the files in the data directory and its shard's directory.
fn used_bytes(data: &Path) -> u64 {
    [data.to_path_buf(), data.join("shard-000")]
        .iter()
        .flat_map(|d| fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The same snapshot of an unknown format, when the log still holds every record from
/// LSN 1: the shard starts from the log, and the snapshot is kept, untouched, under
/// another name (`.snap.format-9`).
#[test]
fn a_snapshot_of_an_unknown_format_is_set_aside_when_the_log_holds_everything() {
    let dir = temp_dir();
    let args = ["--shards", "1", "--segment-bytes", "65536"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    c.kv_put("kept", b"by the log", PutOptions::default())
        .unwrap();
    drop(c);
    server.stop();
    let path = shard_files(dir.path(), ".snap").pop().expect("a snapshot");
    let mut bytes = fs::read(&path).unwrap();
    // The current format (5): the image starts with its format, one byte.
    assert_eq!(bytes[24], 5);
    bytes[24] = 9;
    let body = bytes.len() - 4;
    let crc = crc32(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &bytes).unwrap();

    let server = TestServer::start(dir.path(), &args);
    assert!(
        server.stderr().contains("snapshot format 9"),
        "{}",
        server.stderr()
    );
    let mut c = server.client();
    assert_eq!(c.kv_get("kept").unwrap().unwrap().value, b"by the log");
    let aside = shard_files(dir.path(), ".snap.format-9");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(fs::read(&aside[0]).unwrap(), bytes);
    drop(c);
    server.stop();
}

fn start_with_capacity(dir: &Path, capacity: &Path) -> TestServer {
    let capacity_arg = capacity.to_string_lossy().to_string();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--fault-disk-capacity-file",
        capacity_arg.as_str(),
    ];
    TestServer::start(dir, &args)
}

/// How long a put may go unanswered before the test fails (rather than hang).
const PUT_STUCK: Duration = Duration::from_secs(10);

/// Puts `value` under `k0000`, `k0001`, … until one is refused; returns how many were
/// acknowledged. A put the shard took before it knew there is no room for the next segment,
/// and that does not fit the current one, is written there all the same while the snapshot
/// reserve can lend the room (the segment grows); else it would wait for room, unanswered.
fn put_until_full(server: &TestServer, c: &mut Client, value: &[u8]) -> usize {
    c.set_read_timeout(Some(PUT_STUCK)).unwrap();
    let mut acked = 0;
    let refusal = loop {
        match c.kv_put(&format!("k{acked:04}"), value, PutOptions::default()) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1000, "the disk never filled");
    };
    c.set_read_timeout(Some(common::CLIENT_READ_TIMEOUT))
        .unwrap();
    assert!(
        refusal.to_string().contains("disk full on shard 0"),
        "put {acked}: {refusal}\n{}",
        server.stderr()
    );
    assert!(acked >= 5, "only {acked} puts before the disk was full");
    acked
}

/// A shard whose disk is full (the fault-injecting capacity file: room for four segments,
/// none for a snapshot reserve) takes deletes — a key, a stream, an action — while it
/// refuses other mutations; they are durable: a restart (with room again) has them.
#[test]
fn deletes_are_taken_while_the_disk_is_full() {
    let dir = temp_dir();
    let outside = temp_dir();
    let capacity = outside.path().join("capacity");
    fs::write(&capacity, (4 * 65536).to_string()).unwrap();
    let server = start_with_capacity(dir.path(), &capacity);
    let addr = server.addr_string();
    let mut c = server.client();
    common::user_action(&mut c, "report", 60_000, 0, 1000);
    cli_ok(&addr, &["stream", "append", "audit", "one record"]);
    let acked = put_until_full(&server, &mut c, &[7u8; 1024]);
    assert!(c.status().unwrap().shards[0].disk_full);
    let stderr = cli_fails(&addr, &["kv", "put", "late", "v"]);
    assert!(stderr.contains("disk full on shard 0"), "{stderr}");

    // Nothing was logged since the disk filled: no snapshot can have let it out yet.
    assert!(c.kv_delete("k0000", None).unwrap());
    cli_ok(&addr, &["stream", "delete", "audit"]);
    cli_ok(&addr, &["action", "delete", "report"]);
    assert!(c.kv_get("k0000").unwrap().is_none());
    drop(c);
    server.kill9();

    fs::write(&capacity, (64u64 << 20).to_string()).unwrap();
    let server = start_with_capacity(dir.path(), &capacity);
    let addr = server.addr_string();
    let mut c = server.client();
    assert!(c.kv_get("k0000").unwrap().is_none());
    let last = c.kv_get(&format!("k{:04}", acked - 1)).unwrap().unwrap();
    assert_eq!(last.value, vec![7u8; 1024]);
    let streams = cli_ok(&addr, &["stream", "list"]);
    assert!(!streams.contains("audit"), "{streams}");
    let actions = cli_ok(&addr, &["action", "list"]);
    assert!(!actions.contains("report"), "{actions}");
    drop(c);
    server.stop();
}

/// A shard whose disk fills (room for three segments more than it started with, and its
/// snapshot reserve) snapshots its way out without the operator: the snapshot finds no
/// room, releases the reserve and is written; the log then finds room and the shard takes
/// writes again. Everything acknowledged survives a crash.
#[test]
fn a_full_disk_snapshots_its_way_out_through_the_reserve() {
    let dir = temp_dir();
    let outside = temp_dir();
    let capacity = outside.path().join("capacity");
    fs::write(&capacity, (64u64 << 20).to_string()).unwrap();
    let server = start_with_capacity(dir.path(), &capacity);
    let mut c = server.client();
    let reserve = dir.path().join("shard-000/snapshot.reserve");
    assert!(reserve.exists(), "a reserve is made at start-up");
    fs::write(&capacity, (used_bytes(dir.path()) + 3 * 65536).to_string()).unwrap();

    // Values of 8 KiB: the image (over 100 KiB) cannot fit in the less than a segment
    // left when the disk is full. Five to a segment: the last may come before the shard
    // knows there is no room for the next segment, and not fit (the segment grows).
    let value = vec![9u8; 8192];
    let acked = put_until_full(&server, &mut c, &value);
    assert!(
        wait_until(Duration::from_secs(20), || !c.status().unwrap().shards[0]
            .disk_full),
        "still read-only: {:?}\n{}",
        c.status(),
        server.stderr()
    );
    assert!(
        server.stderr().contains("used the reserve"),
        "{}",
        server.stderr()
    );
    assert!(c.status().unwrap().shards[0].snapshot_lsn > 0);
    c.kv_put("late", b"v", PutOptions::default()).unwrap();
    drop(c);
    server.kill9();

    let server = start_with_capacity(dir.path(), &capacity);
    let mut c = server.client();
    for i in 0..acked {
        assert_eq!(c.kv_get(&format!("k{i:04}")).unwrap().unwrap().value, value);
    }
    assert_eq!(c.kv_get("late").unwrap().unwrap().value, b"v");
    drop(c);
    server.stop();
}
