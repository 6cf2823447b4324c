//! What one connection, or many, may make the server hold: replies waiting for a client
//! that does not read them, buffers for frames that never arrive, waits on runs left by a
//! closed connection, connections beyond the open-file limit. Each test drives the real
//! server over raw sockets and reads its resident memory (`VmRSS`) with generous margins;
//! nothing here asserts on time.

mod common;

use common::{FLO_BIN, Rng, TestServer, temp_dir, user_action, wait_until};
use flo::protocol::{
    ErrorCode, FRAME_BYTES_MAX, KV_VALUE_BYTES_MAX, Op, Reply, Request, Response, decode_frame,
    encode_frame,
};
use flo::{InvokeOptions, PutOptions};
use flo_testkit::server::{ServerCommand, ServerProcess, StderrLog, StderrMode};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// How long the tests watch the server's memory while it takes what it was sent.
const WATCH_RSS_FOR: Duration = Duration::from_secs(3);

/// The server's resident memory, in bytes.
fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// The highest resident memory seen while sampling for `WATCH_RSS_FOR`.
fn peak_rss(pid: i32) -> u64 {
    let mut peak = 0;
    let deadline = std::time::Instant::now() + WATCH_RSS_FOR;
    while std::time::Instant::now() < deadline {
        peak = peak.max(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    peak
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn request_frame(id: u64, op: Op) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&Request { id, op }, &mut out).unwrap();
    out
}

fn read_response(s: &mut TcpStream) -> Response {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).expect("a response header");
    let len = u32::from_be_bytes(head) as usize;
    let mut buf = head.to_vec();
    buf.resize(4 + len, 0);
    s.read_exact(&mut buf[4..]).expect("a response body");
    let (response, _) = decode_frame::<Response>(&buf)
        .expect("a response decodes")
        .expect("a whole frame");
    response
}

/// The server closed the connection (after what it had to say).
fn assert_closed_by_server(s: &mut TcpStream) {
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => {}
        Ok(n) => panic!("expected the server to close the connection, read {n} more bytes"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected the server to close the connection, got {e}"),
    }
}

fn get_op(key: &str) -> Op {
    Op::KvGet {
        namespace: "default".into(),
        key: key.into(),
        wait_ms: None,
        after_version: None,
        newer_than_current: false,
    }
}

/// A frame header declaring `len` bytes.
fn header(len: usize) -> [u8; 4] {
    (len as u32).to_be_bytes()
}

fn assert_serves(server: &TestServer, tag: &str) {
    let mut c = server.client();
    let key = format!("serves/{tag}");
    c.kv_put(&key, tag.as_bytes(), PutOptions::default())
        .unwrap();
    assert_eq!(c.kv_get(&key).unwrap().unwrap().value, tag.as_bytes());
}

#[test]
fn replies_a_client_does_not_read_wait_within_the_connections_reply_bound() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let value = vec![7u8; KV_VALUE_BYTES_MAX];
    server
        .client()
        .kv_put("big", &value, PutOptions::default())
        .unwrap();
    let baseline = rss_bytes(server.pid());

    // 600 reads of a 1 MiB value (29 KB of requests), and no reply read meanwhile.
    const READS: u64 = 600;
    let mut s = connect(server.addr);
    let mut burst = Vec::new();
    for id in 1..=READS {
        burst.extend(request_frame(id, get_op("big")));
    }
    s.write_all(&burst).unwrap();
    let peak = peak_rss(server.pid());
    eprintln!(
        "rss: baseline {} MiB, peak {} MiB while {READS} replies of 1 MiB were owed",
        baseline / MIB,
        peak / MIB
    );
    assert!(
        peak < baseline + 200 * MIB,
        "the server grew from {} MiB to {} MiB for one client's unread replies",
        baseline / MIB,
        peak / MIB
    );

    // Every reply comes, whole, once the client reads.
    let mut seen = vec![false; READS as usize + 1];
    for _ in 0..READS {
        let r = read_response(&mut s);
        match r.result {
            Ok(Reply::KvValue(Some(entry))) => assert!(entry.value == value, "reply {}", r.id),
            other => panic!("reply {}: {other:?}", r.id),
        }
        assert!(
            !std::mem::replace(&mut seen[r.id as usize], true),
            "{}",
            r.id
        );
    }
    drop(s);
    assert_serves(&server, "after-unread-replies");
}

#[test]
fn frames_declared_large_hold_only_the_bytes_that_arrived() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let baseline = rss_bytes(server.pid());

    // 300 connections each declaring a frame of 4 MiB and sending 64 KiB of it.
    const CONNS: usize = 300;
    let mut held = Vec::new();
    let mut part = header(FRAME_BYTES_MAX - 16).to_vec();
    part.extend(vec![0x90u8; 64 << 10]);
    for _ in 0..CONNS {
        let mut s = connect(server.addr);
        s.write_all(&part).unwrap();
        held.push(s);
    }
    let peak = peak_rss(server.pid());
    eprintln!(
        "rss: baseline {} MiB, peak {} MiB with {CONNS} frames of 4 MiB begun",
        baseline / MIB,
        peak / MIB
    );
    assert!(
        peak < baseline + 150 * MIB,
        "the server grew from {} MiB to {} MiB for frames that never arrived",
        baseline / MIB,
        peak / MIB
    );
    assert_serves(&server, "while-frames-are-begun");
    drop(held);
    assert_serves(&server, "after-frames-begun");
}

#[test]
fn a_frame_that_does_not_arrive_whole_in_time_closes_its_connection() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--frame-deadline-ms", "500"]);

    // A header only.
    let mut s = connect(server.addr);
    s.write_all(&header(1000)).unwrap();
    let r = read_response(&mut s);
    let e = r.result.expect_err("the connection is told why it closes");
    assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}");
    assert!(e.message.contains("did not arrive whole"), "{e:?}");
    assert_closed_by_server(&mut s);

    // Whole frames, however far apart, are not late.
    let mut s = connect(server.addr);
    for id in 1..=3 {
        std::thread::sleep(Duration::from_millis(700));
        s.write_all(&request_frame(id, Op::ShardMap)).unwrap();
        let r = read_response(&mut s);
        assert!(matches!(r.result, Ok(Reply::ShardMap(_))), "{r:?}");
    }
    assert_serves(&server, "after-late-frame");
}

#[test]
fn before_the_handshake_a_connection_may_send_only_small_frames() {
    let dir = temp_dir();
    let auth = dir.path().join("auth.yaml");
    std::fs::write(
        &auth,
        "tokens:\n  - {token: t-admin, role: admin, namespaces: ['*']}\n",
    )
    .unwrap();
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--auth-file", auth.to_str().unwrap()],
    );
    let baseline = rss_bytes(server.pid());

    let mut s = connect(server.addr);
    s.write_all(&header(FRAME_BYTES_MAX - 16)).unwrap();
    s.write_all(&[0x90u8; 4096]).unwrap();
    let r = read_response(&mut s);
    let e = r
        .result
        .expect_err("a large frame before the handshake is refused");
    assert_eq!(e.code, ErrorCode::Unauthorized, "{e:?}");
    assert!(e.message.contains("before the handshake"), "{e:?}");
    assert_closed_by_server(&mut s);

    // Many unauthenticated connections, each with a frame begun: a few KiB each.
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut s = connect(server.addr);
        s.write_all(&header(6000)).unwrap();
        s.write_all(&[0x90u8; 5000]).unwrap();
        held.push(s);
    }
    let peak = peak_rss(server.pid());
    assert!(
        peak < baseline + 100 * MIB,
        "unauthenticated connections took the server from {} MiB to {} MiB",
        baseline / MIB,
        peak / MIB
    );
    drop(held);
    let mut c = flo::Client::connect_with_token(server.addr, "t-admin").unwrap();
    c.kv_put("k", b"v", PutOptions::default()).unwrap();
}

/// Waits on runs the shards hold (and relay), over all shards.
fn run_waits(server: &TestServer) -> u64 {
    let status = server.client().status().unwrap();
    status.shards.iter().map(|s| s.run_waits).sum()
}

#[test]
fn waits_on_runs_are_bounded_per_connection_and_leave_with_it() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "never-served", 30_000, 0, 1000);
    // No worker: the runs stay pending. Each is started over its own connection, so that
    // they land on both shards (a run lives on its connection's shard) and waits go to
    // other shards too.
    let runs: Vec<String> = (0..8)
        .map(|i| {
            server
                .client()
                .invoke(
                    "never-served",
                    format!("{i}").as_bytes(),
                    InvokeOptions::default(),
                )
                .unwrap()
        })
        .collect();

    for round in 0..2 {
        // With the marker below, as many requests as one connection may have in flight.
        const WAITS: u64 = 4095;
        let mut s = connect(server.addr);
        let mut burst = Vec::new();
        for id in 1..=WAITS {
            let run_id = runs[id as usize % runs.len()].clone();
            let op = Op::RunWait {
                namespace: "default".into(),
                run_id,
                timeout_ms: 300_000,
            };
            burst.extend(request_frame(id, op));
        }
        // A request behind the waits is served meanwhile: waits beyond what the connection
        // may reserve are held, not in the way.
        burst.extend(request_frame(WAITS + 1, Op::ShardMap));
        s.write_all(&burst).unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.id, WAITS + 1, "{r:?}");
        assert!(matches!(r.result, Ok(Reply::ShardMap(_))), "{r:?}");
        assert!(
            wait_until(Duration::from_secs(30), || run_waits(&server) > 0),
            "round {round}: no wait is counted"
        );
        let held = run_waits(&server);
        eprintln!("round {round}: {held} waits held by the shards");
        // At most what one connection's wait budget reserves (32 MiB at 128 KiB a wait:
        // 256), counted on its shard and on the runs' owners.
        assert!(
            held <= 2 * 256,
            "round {round}: {held} waits held for one connection"
        );
        drop(s);
        assert!(
            wait_until(Duration::from_secs(30), || run_waits(&server) == 0),
            "round {round}: waits of a closed connection are still held: {}",
            run_waits(&server)
        );
    }
    assert_serves(&server, "after-waits");
}

/// A script that starts `flo` with the open-file limit (soft and hard) at `limit`.
fn with_open_file_limit(dir: &Path, limit: u32) -> std::path::PathBuf {
    let script = dir.join("flo-limited.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nulimit -n {limit} || exit 97\nexec '{FLO_BIN}' \"$@\"\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn beyond_the_open_file_limit_clients_are_told_overloaded() {
    let dir = temp_dir();
    let log = StderrLog::all();
    let command = ServerCommand {
        // So low that descriptors run out too (the refusals hold theirs a moment).
        bin: with_open_file_limit(dir.path(), 40),
        data_dir: dir.path().join("data"),
        args: ["--listen", "127.0.0.1:0", "--shards", "2"]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        stderr: StderrMode::Capture {
            log: log.clone(),
            on_line: None,
        },
    };
    let process = ServerProcess::start(&command, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("server did not start: {e}; {}", e.stderr()));
    let addr: SocketAddr = process.listening.addr.parse().unwrap();
    let warned = log.text();
    assert_eq!(
        warned.matches("--max-connections 10000 lowered to").count(),
        1,
        "{warned}"
    );

    // More clients than the limit leaves room for, all holding their connections: each is
    // served or told, none hangs (a read of a connection left to hang times out).
    let (mut served, mut refused) = (0, 0);
    let mut held = Vec::new();
    for id in 1..=200u64 {
        let mut s = connect(addr);
        s.write_all(&request_frame(id, Op::ShardMap)).unwrap();
        let r = read_response(&mut s);
        match r.result {
            Ok(Reply::ShardMap(_)) => served += 1,
            Err(e) if e.code == ErrorCode::Overloaded => refused += 1,
            other => panic!("{other:?}"),
        }
        held.push(s);
    }
    assert!(
        served > 0 && refused > 0,
        "served {served}, refused {refused}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    let stderr = log.text();
    let accept_lines = stderr.matches("accepting a connection failed").count();
    eprintln!("served {served}, refused {refused}, {accept_lines} lines on failed accepts");
    assert!(
        accept_lines <= 4,
        "accept failures not rate-limited:\n{stderr}"
    );
    // It still serves once the clients left.
    assert!(wait_until(Duration::from_secs(10), || {
        let mut s = connect(addr);
        s.write_all(&request_frame(1, Op::ShardMap)).unwrap();
        matches!(read_response(&mut s).result, Ok(Reply::ShardMap(_)))
    }));
    drop(process);
}

/// One client of the amplification run: random frame splits, pipelining, slow or absent
/// reading, frames begun and abandoned.
fn amplifier(addr: SocketAddr, seed: u64, client: u64, rounds: u32) {
    let mut rng = Rng::derive(seed, client, 0);
    for round in 0..rounds {
        let mut s = connect(addr);
        let mut bytes = Vec::new();
        let requests = rng.between(1, 200);
        for i in 0..requests {
            let id = u64::from(round) << 32 | i;
            let key = format!("amp/{client}/{}", rng.below(8));
            let op = if rng.percent(50) {
                // A 1 MiB reply per request: what an unread pipeline multiplies.
                get_op("amp/big")
            } else if rng.percent(40) {
                let len = rng.below(64 << 10) as usize;
                Op::KvPut {
                    namespace: "default".into(),
                    key,
                    value: vec![b'x'; len],
                    ttl_ms: None,
                    if_version: None,
                    if_exists: false,
                }
            } else {
                get_op(&key)
            };
            bytes.extend(request_frame(id, op));
        }
        match rng.below(4) {
            // A frame begun and never finished.
            0 => bytes.extend(header(FRAME_BYTES_MAX - 1)),
            // A truncated last frame.
            1 => {
                let cut = rng.below(bytes.len() as u64 / 2 + 1) as usize;
                bytes.truncate(bytes.len() - cut);
            }
            _ => {}
        }
        // Written in random splits.
        let mut at = 0;
        while at < bytes.len() {
            let n = (rng.between(1, 64 << 10) as usize).min(bytes.len() - at);
            if s.write_all(&bytes[at..at + n]).is_err() {
                break;
            }
            at += n;
            if rng.percent(5) {
                std::thread::sleep(Duration::from_millis(rng.below(20)));
            }
        }
        // Read slowly, some, or none.
        let reads = match rng.below(3) {
            0 => 0,
            1 => rng.below(requests),
            _ => requests,
        };
        let mut head = [0u8; 4];
        for _ in 0..reads {
            if s.read_exact(&mut head).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
            if s.read_exact(&mut body).is_err() {
                break;
            }
            if rng.percent(10) {
                std::thread::sleep(Duration::from_millis(rng.below(10)));
            }
        }
    }
}

#[test]
fn random_splits_slow_readers_and_pipelining_keep_the_server_bounded() {
    let seed = std::env::var("FLO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Rng::from_time().next_u64());
    eprintln!("seed {seed} (FLO_SEED={seed} replays it)");
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--frame-deadline-ms", "2000"]);
    let big = vec![b'b'; KV_VALUE_BYTES_MAX];
    server
        .client()
        .kv_put("amp/big", &big, PutOptions::default())
        .unwrap();
    let baseline = rss_bytes(server.pid());
    let pid = server.pid();
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_bytes(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    const CLIENTS: u64 = 8;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let addr = server.addr;
            std::thread::spawn(move || amplifier(addr, seed, client, 8))
        })
        .collect();
    for c in clients {
        c.join().expect("an amplifier client panicked");
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    eprintln!(
        "rss: baseline {} MiB, peak {} MiB (seed {seed})",
        baseline / MIB,
        peak / MIB
    );
    // Each connection may owe 32 MiB of replies (and as much reserved by waits, which
    // these clients do not send), plus a frame being read and the allocator's slack; the
    // rest is the data written. A client's connection of the last round may still hold
    // what it was owed while its next one fills (until the server sees the close), and
    // freed buffers leave the RSS only after the allocator's purge delay: two connections
    // per client (peaks of 390 to 680 MiB measured with 8 clients, one seed giving 450 to
    // 680 from run to run). Without the bound, each client's unread 1 MiB replies took
    // hundreds of MiB (twice: queued, then copied into one write buffer), gigabytes in all.
    let bound = baseline + CLIENTS * 2 * 40 * MIB + 160 * MIB;
    assert!(
        peak < bound,
        "seed {seed}: the server grew from {} MiB to {} MiB",
        baseline / MIB,
        peak / MIB
    );
    assert_serves(&server, "after-amplifiers");
}
