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

#[test]
fn retention_lets_old_segments_go_while_runs_in_flight_survive_restarts() {
    use flo::protocol::RunStatus;
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
    wasm_echo(&mut c);
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

// ---- disk full ----

fn put_one(c: &mut Client, i: usize) -> Result<(), flo::Error> {
    let value = format!("value {i} {}", "x".repeat(200));
    c.kv_put(&format!("k{i:05}"), value.as_bytes(), PutOptions::default())
        .map(drop)
}

/// Puts keys from `from` on until one is refused (at most `max`); returns the count acknowledged
/// and the refusal.
fn put_until_refused(c: &mut Client, from: usize, max: usize) -> (usize, flo::Error) {
    for i in from..from + max {
        if let Err(e) = put_one(c, i) {
            return (i - from, e);
        }
    }
    panic!("{max} puts and none refused: the disk never filled");
}

fn assert_disk_full_refusal(e: &flo::Error) {
    match e {
        flo::Error::Server(v) => {
            assert_eq!(v.code, flo::protocol::ErrorCode::Unavailable, "{v}");
            assert!(v.message.starts_with("disk full on shard 0"), "{v}");
        }
        other => panic!("expected unavailable: disk full, got {other:?}"),
    }
}

fn disk_full(c: &mut Client) -> bool {
    c.status().unwrap().shards[0].disk_full
}

fn wasm_echo(c: &mut Client) {
    use flo::protocol::{ActionKind, ActionSpec};
    c.register_action(ActionSpec {
        namespace: String::new(),
        name: "echo".into(),
        kind: ActionKind::Wasm,
        wasm: Some(flo_testkit::guests::echo_guest().into_bytes()),
        timeout_ms: None,
        max_retries: None,
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
    .unwrap();
}

/// A disk with room for four segment files (the fault-injecting capacity file, no mount
/// needed): once the next segment cannot be made ahead the shard turns read-only —
/// mutations answer `unavailable: disk full on shard 0` (SDK and CLI), reads and status go
/// on, the process stays up — and when space is freed it takes writes again by itself.
/// Every acknowledged write survives a crash after.
#[test]
fn a_full_disk_makes_the_shard_read_only_until_space_is_freed() {
    use flo::protocol::RunStatus;
    let dir = temp_dir();
    let outside = temp_dir();
    let capacity = outside.path().join("capacity");
    fs::write(&capacity, (4 * 65536).to_string()).unwrap();
    let capacity_arg = capacity.to_string_lossy().to_string();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--fault-disk-capacity-file",
        capacity_arg.as_str(),
    ];
    let mut server = TestServer::start(dir.path(), &args);
    let addr = server.addr_string();
    let mut c = server.client();
    wasm_echo(&mut c);
    let done = c
        .invoke("echo", b"{\"before\":1}", Default::default())
        .unwrap();
    assert_eq!(
        c.wait_run(&done, 5_000).unwrap().status,
        RunStatus::Completed
    );

    // One put per 4 KiB batch: about 40 fill three segments and a half.
    let (acked, refusal) = put_until_refused(&mut c, 0, 1000);
    assert_disk_full_refusal(&refusal);
    assert!(acked >= 20, "only {acked} puts before the disk was full");
    assert!(disk_full(&mut c));
    assert_disk_full_refusal(&c.invoke("echo", b"{}", Default::default()).unwrap_err());
    let stderr = common::cli_fails(&addr, &["kv", "put", "late", "v"]);
    assert!(stderr.contains("disk full on shard 0"), "{stderr}");
    let stderr = common::cli_fails(&addr, &["action", "invoke", "echo"]);
    assert!(stderr.contains("disk full on shard 0"), "{stderr}");

    // Reads go on: every acknowledged write, the run, listings, status (text and JSON).
    assert_all(&mut c, acked);
    assert_eq!(c.run(&done).unwrap().status, RunStatus::Completed);
    let got = common::cli_ok(&addr, &["kv", "get", "k00000"]);
    assert!(got.starts_with("value 0 "), "{got}");
    let status = common::cli_json(&addr, &["status"]);
    assert_eq!(status["shards"][0]["disk_full"], true, "{status}");
    let text = common::cli_ok(&addr, &["status"]);
    assert!(text.contains("read-only: disk full"), "{text}");
    assert!(server.is_running());
    assert!(server.stderr().contains("disk full"), "{}", server.stderr());

    // The operator frees space: within the writer's next look (1 s) the shard is writable.
    fs::write(&capacity, (64u64 << 20).to_string()).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !disk_full(&mut c)),
        "still read-only after space was freed: {:?}",
        c.status()
    );
    put_many(&mut c, acked, 40);
    let run = c
        .invoke("echo", b"{\"after\":1}", Default::default())
        .unwrap();
    assert_eq!(
        c.wait_run(&run, 5_000).unwrap().status,
        RunStatus::Completed
    );
    let text = common::cli_ok(&addr, &["status"]);
    assert!(!text.contains("disk full"), "{text}");
    drop(c);

    // A crash: every acknowledged write is in the log.
    server.kill9();
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert!(!disk_full(&mut c));
    assert_all(&mut c, acked + 40);
    assert_eq!(c.run(&run).unwrap().status, RunStatus::Completed);
    drop(c);
    server.stop();
}

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// None when this machine does not let the test mount one (not root, a container).
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = temp_dir();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = fs::File::create(path).unwrap();
    let chunk = vec![0xa5u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// The same on a real file system that fills up (a small tmpfs; skipped where mounting is
/// not allowed): the shard turns read-only, the snapshot it then takes finds no room and
/// is written in its reserve's place (what is left is the log's, until it fills too), a
/// graceful stop while full exits cleanly and leaves no temporary file, a restart while
/// still full serves reads read-only, and deleting a file brings writes back.
#[test]
fn on_a_real_full_file_system_the_shard_is_read_only_until_a_file_is_deleted() {
    let Some(fs_) = Tmpfs::mount(4 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root outside a container)");
        return;
    };
    let data = fs_.path().join("data");
    let filler = fs_.path().join("filler");
    let args = ["--shards", "1", "--segment-bytes", "65536"];
    let server = match TestServer::try_start(&data, &args) {
        Ok(server) => server,
        // O_DIRECT on tmpfs needs Linux 6.6.
        Err(r) => {
            eprintln!(
                "skipped: the server cannot run on a tmpfs here:\n{}",
                r.stderr
            );
            return;
        }
    };
    let mut c = server.client();
    put_many(&mut c, 0, 4);
    fill(&filler);
    let (acked, refusal) = put_until_refused(&mut c, 4, 1000);
    let acked = acked + 4;
    // The refusal is the read-only state seen; the flag itself may already be clear, since
    // the snapshot the shard takes then can finish before the next status request.
    assert_disk_full_refusal(&refusal);
    assert_all(&mut c, acked);
    // The snapshot taken then found no room and used the reserve: what it left is the
    // log's, until that is full too. That window can be shorter than a put's round trip
    // (the snapshot may be written within a millisecond), and then the refusal above came
    // when the log filled what the reserve had left: the log says the window was there.
    let writable = wait_until(Duration::from_secs(5), || !disk_full(&mut c));
    let acked = if writable {
        let (more, refusal) = put_until_refused(&mut c, acked, 1000);
        assert_disk_full_refusal(&refusal);
        acked + more
    } else {
        let log = server.stderr();
        assert!(
            log.contains("used the reserve") && log.contains("disk space is back"),
            "still read-only after the snapshot that used the reserve:\n{log}"
        );
        acked
    };
    assert_all(&mut c, acked);
    drop(c);
    let stderr = server.stop();
    assert!(stderr.contains("used the reserve"), "{stderr}");
    let shard = data.join("shard-000");
    let left: Vec<String> = fs::read_dir(&shard)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");

    let server = TestServer::start(&data, &args);
    let mut c = server.client();
    assert!(
        wait_until(Duration::from_secs(5), || disk_full(&mut c)),
        "a restart on a full disk is read-only"
    );
    assert_all(&mut c, acked);
    assert_disk_full_refusal(&put_one(&mut c, acked).unwrap_err());
    fs::remove_file(&filler).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !disk_full(&mut c)),
        "still read-only after the file was deleted"
    );
    put_many(&mut c, acked, 40);
    assert_all(&mut c, acked + 40);
    drop(c);
    server.stop();
}

/// A server whose disk holds its first segment and nothing more, with a put of 24 KiB
/// acknowledged (the segment is not half full: nothing asked for room yet) and one of
/// 40 KiB sent from another thread: it needs the next segment, which cannot be made, so
/// its batch waits in the writer, unacknowledged, and the shard turns read-only.
struct StuckPut {
    server: TestServer,
    capacity: PathBuf,
    _outside: tempfile::TempDir,
    big: std::thread::JoinHandle<Result<u64, flo::Error>>,
}

fn stuck_put(dir: &Path) -> StuckPut {
    let outside = temp_dir();
    let capacity = outside.path().join("capacity");
    fs::write(&capacity, (65536 + 4096).to_string()).unwrap();
    let capacity_arg = capacity.to_string_lossy().to_string();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--fault-disk-capacity-file",
        capacity_arg.as_str(),
    ];
    let server = TestServer::start(dir, &args);
    let mut c = server.client();
    c.kv_put("small", &[1u8; 24 << 10], PutOptions::default())
        .unwrap();
    assert!(!disk_full(&mut c));
    let mut other = server.client();
    let big =
        std::thread::spawn(move || other.kv_put("big", &[2u8; 40 << 10], PutOptions::default()));
    assert!(
        wait_until(Duration::from_secs(5), || disk_full(&mut c)),
        "the shard should turn read-only"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !big.is_finished(),
        "a put that was never written was answered"
    );
    assert_disk_full_refusal(&put_one(&mut c, 0).unwrap_err());
    assert_eq!(
        c.kv_get("small").unwrap().unwrap().value,
        vec![1u8; 24 << 10]
    );
    StuckPut {
        server,
        capacity,
        _outside: outside,
        big,
    }
}

/// The batch that found no room is written, and its put answered, once there is room.
#[test]
fn a_batch_without_room_waits_unacknowledged_and_is_written_once_space_returns() {
    let dir = temp_dir();
    let stuck = stuck_put(dir.path());
    fs::write(&stuck.capacity, (64u64 << 20).to_string()).unwrap();
    stuck
        .big
        .join()
        .unwrap()
        .expect("the put is written once there is room");
    let mut c = stuck.server.client();
    assert!(wait_until(Duration::from_secs(5), || !disk_full(&mut c)));
    assert_eq!(c.kv_get("big").unwrap().unwrap().value, vec![2u8; 40 << 10]);
    put_many(&mut c, 0, 20);
    drop(c);
    stuck.server.stop();
}

/// A graceful stop does not wait for a batch that cannot be written: the server exits
/// cleanly, saying which records it leaves; none was acknowledged, and a restart has
/// everything that was.
#[test]
fn a_stop_while_a_batch_finds_no_room_exits_without_it() {
    let dir = temp_dir();
    let stuck = stuck_put(dir.path());
    let stderr = stuck.server.stop();
    assert!(
        stderr.contains("unwritten for lack of disk space"),
        "{stderr}"
    );
    assert!(stuck.big.join().unwrap().is_err(), "never acknowledged");
    fs::write(&stuck.capacity, (64u64 << 20).to_string()).unwrap();
    let capacity_arg = stuck.capacity.to_string_lossy().to_string();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--fault-disk-capacity-file",
        capacity_arg.as_str(),
    ];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert_eq!(
        c.kv_get("small").unwrap().unwrap().value,
        vec![1u8; 24 << 10]
    );
    assert!(c.kv_get("big").unwrap().is_none());
    put_many(&mut c, 0, 20);
    assert_all(&mut c, 20);
    drop(c);
    server.stop();
}

/// Issue 21, item 17: a segment gone from the middle of the log, below the snapshot (where
/// recovery does not read), went unnoticed, and the finished runs retained in it were lost
/// without a word. The snapshot lists the segments it stands on: a start without one of
/// them is refused, naming it.
#[test]
fn a_segment_missing_below_the_snapshot_refuses_the_start() {
    use flo::protocol::RunStatus;
    let dir = temp_dir();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--snapshot-bytes",
        "65536",
    ];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    wasm_echo(&mut c);
    let mut finished = Vec::new();
    for i in 0..400 {
        let input = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(200));
        finished.push(
            c.invoke("echo", input.as_bytes(), Default::default())
                .unwrap(),
        );
    }
    for id in &finished {
        assert_eq!(c.wait_run(id, 5_000).unwrap().status, RunStatus::Completed);
    }
    drop(c);
    server.stop();
    let files = segment_files(dir.path(), 0);
    assert!(files.len() >= 4, "{files:?}");
    assert!(!snapshots(dir.path()).is_empty());
    // The finished runs are retained (the default week): their segments stay. Remove the
    // second, which the newest snapshot stands above.
    let gone = files[1].clone();
    fs::remove_file(&gone).unwrap();
    let refused = common::expect_refusal(dir.path(), &args);
    let name = gone.file_name().unwrap().to_string_lossy().to_string();
    assert!(refused.stderr.contains(&name), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("middle of the log"),
        "{}",
        refused.stderr
    );
}

// ---- archives that point at their payloads ----

/// Each put is a batch of its own, a 4 KiB block: 16 to a segment, a snapshot every 256.
const POINTING: [&str; 6] = [
    "--shards",
    "1",
    "--segment-bytes",
    "65536",
    "--snapshot-bytes",
    "1048576",
];

/// Registers worker `w-1` for `action`.
fn worker(c: &mut Client, action: &str) {
    use flo::protocol::{WorkerSpec, WorkerType};
    c.register_worker(WorkerSpec {
        namespace: String::new(),
        worker_id: "w-1".into(),
        worker_type: WorkerType::Action,
        max_concurrency: None,
        processes: vec![action.into()],
        metadata: None,
        machine_id: None,
        labels: None,
    })
    .unwrap();
}

/// For each archive record in shard 0's log (a stopped server's), the records it points at.
fn archive_refs(data_dir: &Path) -> Vec<usize> {
    let first = segment_files(data_dir, 0)[0].clone();
    let first_lsn = first
        .file_name()
        .and_then(|n| flo_ual::parse_segment_file_name(n.to_str()?))
        .unwrap();
    let mut found = Vec::new();
    flo_ual::recover_from(
        &data_dir.join("shard-000"),
        first_lsn - 1,
        |_, rtype, payload| {
            if rtype == 50 {
                found.push(flo_engine::archived_refs(payload).len());
            }
            Ok::<(), flo_ual::ApplyError>(())
        },
    )
    .unwrap();
    found
}

/// An archived workflow run's record points at its input and its steps' outputs in the
/// records that hold them (each payload written once). The log is kept from the earliest
/// of those while the run is retained: the snapshots taken after it let the segments
/// before its start go, not the ones it points into, and its document reads back whole —
/// input, outputs, history — before and after a restart.
#[test]
fn an_archived_run_keeps_the_records_it_points_at_and_reads_back_whole() {
    use flo::StartOptions;
    use flo::protocol::WorkflowRunStatus;
    let dir = temp_dir();
    let args = POINTING;
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    c.create_workflow(include_str!(
        "../testdata/workflows/approval-two-waits.yaml"
    ))
    .unwrap();
    // Segments of puts only, and a snapshot.
    put_many(&mut c, 0, 300);
    let first_segment = segment_files(dir.path(), 0)[0].clone();
    // Over 128 bytes: the archived state leaves out the input's fields too.
    let input = br#"{"order":"ORD-7","note":"written once, in the run's start record; the archive's state holds only the fields that differ from the input's"}"#;
    assert!(input.len() >= 128, "{}", input.len());
    let run_id = c
        .start_workflow("approval", input, StartOptions::default())
        .unwrap();
    c.signal_workflow(&run_id, "approval", br#"{"n":1}"#)
        .unwrap();
    // The run's records spread over segments before it ends (and no snapshot comes).
    put_many(&mut c, 300, 30);
    c.signal_workflow(&run_id, "approval", br#"{"n":2}"#)
        .unwrap();
    assert_eq!(
        c.wait_workflow(&run_id, 10_000).unwrap().status,
        WorkflowRunStatus::Completed
    );
    assert!(wait_until(Duration::from_secs(5), || {
        c.status().unwrap().shards[0].archived_runs == 1
    }));
    let check = |c: &mut Client, when: &str| {
        let run = c.workflow_run(&run_id).unwrap();
        assert_eq!(run.input, input.to_vec(), "{when}");
        let outputs: Vec<Option<&[u8]>> = run.steps.iter().map(|s| s.output.as_deref()).collect();
        assert_eq!(
            outputs,
            vec![Some(&br#"{"n":1}"#[..]), Some(&br#"{"n":2}"#[..])],
            "{when}"
        );
        assert_eq!(run.output.as_deref(), Some(&br#"{"n":2}"#[..]), "{when}");
        let state: serde_json::Value =
            serde_json::from_slice(run.state.as_deref().unwrap_or_default()).unwrap();
        let given: serde_json::Value = serde_json::from_slice(input).unwrap();
        assert_eq!(
            (&state["order"], &state["note"], &state["n"]),
            (&given["order"], &given["note"], &serde_json::json!(2)),
            "{when}: {state}"
        );
        let history = c.workflow_history(&run_id).unwrap();
        assert_eq!(
            history[0].detail.as_bytes(),
            input,
            "{when}: workflow_started"
        );
    };
    check(&mut c, "archived");
    // Snapshots come and the segments below the run's start go.
    put_many(&mut c, 330, 1500);
    assert!(
        wait_until(Duration::from_secs(10), || {
            c.status().unwrap().shards[0].snapshot_lsn > 0
                && !segment_files(dir.path(), 0).contains(&first_segment)
        }),
        "the first segment (puts only) should be deleted: {:?}",
        segment_files(dir.path(), 0)
    );
    check(&mut c, "after snapshots");
    drop(c);
    server.stop();
    // The archive record points at the records (it does not hold the payloads).
    let mut pointing = Vec::new();
    let first = segment_files(dir.path(), 0)[0].clone();
    let first_lsn = first
        .file_name()
        .and_then(|n| flo_ual::parse_segment_file_name(n.to_str()?))
        .unwrap();
    flo_ual::recover_from(
        &dir.path().join("shard-000"),
        first_lsn - 1,
        |_, rtype, payload| {
            if rtype == 50 {
                pointing.push(flo_engine::archived_refs(payload));
            }
            Ok::<(), flo_ual::ApplyError>(())
        },
    )
    .unwrap();
    assert!(
        pointing.len() == 1 && pointing[0].len() == 3,
        "one archive record, pointing at the start and two steps: {pointing:?}"
    );
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    check(&mut c, "after a restart");
    assert_all(&mut c, 1830);
    drop(c);
    server.stop();
}

/// An action run's archive points at its input (its `RunCreated`) and its output (the
/// `RunCompleted` that gave it) the same way: a worker's run whose records span segments
/// reads back whole after the segments before it went, and after a restart.
#[test]
fn an_archived_action_run_points_at_its_creation_and_completion() {
    use flo::protocol::RunStatus;
    let dir = temp_dir();
    let args = POINTING;
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    common::user_action(&mut c, "manual", 3_600_000, 0, 1000);
    worker(&mut c, "manual");
    put_many(&mut c, 0, 300);
    let first_segment = segment_files(dir.path(), 0)[0].clone();
    let input = br#"{"invoice":"INV-9","lines":[1,2,3]}"#;
    let run_id = c.invoke("manual", input, Default::default()).unwrap();
    put_many(&mut c, 300, 30);
    let task = c
        .await_tasks("w-1", &["manual"], 1, 5_000)
        .unwrap()
        .pop()
        .expect("the task");
    let output = br#"{"paid":true}"#;
    c.complete_task("w-1", &(&task).into(), output, None)
        .unwrap();
    assert_eq!(
        c.wait_run(&run_id, 5_000).unwrap().status,
        RunStatus::Completed
    );
    assert!(wait_until(Duration::from_secs(5), || {
        c.status().unwrap().shards[0].archived_runs == 1
    }));
    let check = |c: &mut Client, when: &str| {
        let run = c.run(&run_id).unwrap();
        assert_eq!(run.input, input.to_vec(), "{when}");
        assert_eq!(run.output.as_deref(), Some(&output[..]), "{when}");
        assert_eq!(run.status, RunStatus::Completed, "{when}");
    };
    check(&mut c, "archived");
    put_many(&mut c, 330, 1500);
    assert!(
        wait_until(Duration::from_secs(10), || {
            !segment_files(dir.path(), 0).contains(&first_segment)
        }),
        "the first segment (puts only) should be deleted"
    );
    check(&mut c, "after snapshots");
    drop(c);
    server.stop();
    assert_eq!(
        archive_refs(dir.path()),
        vec![2],
        "the creation and the completion"
    );
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    check(&mut c, "after a restart");
    drop(c);
    server.stop();
}

/// A worker step's output is logged once, in its action run's completion: the step's
/// finish says it is the run's, and the workflow run's archive points there. It reads back
/// whole, before and after a restart.
#[test]
fn a_worker_steps_output_is_logged_once_in_its_runs_completion() {
    use flo::StartOptions;
    use flo::protocol::WorkflowRunStatus;
    let dir = temp_dir();
    let args = ["--shards", "1"];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    common::user_action(&mut c, "pack", 60_000, 0, 1000);
    c.create_workflow(
        "kind: Workflow\nname: ship\nversion: \"1\"\nstart:\n  run: \"@actions/pack\"\n  transitions:\n    success: flo.Completed\n",
    )
    .unwrap();
    worker(&mut c, "pack");
    let run_id = c
        .start_workflow("ship", br#"{"box":"B-1"}"#, StartOptions::default())
        .unwrap();
    let task = c
        .await_tasks("w-1", &["pack"], 1, 5_000)
        .unwrap()
        .pop()
        .expect("the task");
    let output = br#"{"packed":"B-1","weight":3}"#;
    c.complete_task("w-1", &(&task).into(), output, None)
        .unwrap();
    let run = c.wait_workflow(&run_id, 5_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    assert!(wait_until(Duration::from_secs(5), || {
        c.status().unwrap().shards[0].archived_runs == 2
    }));
    let check = |c: &mut Client, when: &str| {
        let run = c.workflow_run(&run_id).unwrap();
        assert_eq!(run.input, br#"{"box":"B-1"}"#.to_vec(), "{when}");
        assert_eq!(run.steps[0].output.as_deref(), Some(&output[..]), "{when}");
        assert_eq!(run.output.as_deref(), Some(&output[..]), "{when}");
    };
    check(&mut c, "archived");
    drop(c);
    server.stop();
    // The step's finish holds no output; the workflow run's archive points at the start and
    // the action run's completion, the action run's at its creation and completion.
    let mut holding = Vec::new();
    flo_ual::recover(&dir.path().join("shard-000"), |_, rtype, payload| {
        if payload.windows(8).any(|w| w == b"\"packed\"") {
            holding.push(rtype);
        }
        Ok::<(), flo_ual::ApplyError>(())
    })
    .unwrap();
    // The completion (22), and the workflow run's archive (50) for its state document,
    // where the step's output fields were merged; not the step's finish (44).
    assert_eq!(holding, vec![22, 50], "the records holding the output");
    let mut refs = archive_refs(dir.path());
    refs.sort();
    assert_eq!(refs, vec![2, 2]);
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    check(&mut c, "after a restart");
    drop(c);
    server.stop();
}
