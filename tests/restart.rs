//! Restarts: graceful ones keep everything; a kill -9 keeps every acknowledged write.

mod common;

use common::{Rng, TestServer, temp_dir};
use flo::protocol::{KvEntry, Op, Reply, Request};
use flo::{Client, Connection, PutOptions};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Every entry of the default namespace, in key order.
fn all_entries(c: &mut Client) -> Vec<KvEntry> {
    let (entries, truncated) = c.kv_list("", Some(10_000)).unwrap();
    assert!(!truncated);
    entries
}

fn put_request(id: u64, key: &str, value: &[u8]) -> Request {
    let op = Op::KvPut {
        namespace: "default".into(),
        key: key.into(),
        value: value.to_vec(),
        ttl_ms: None,
        if_version: None,
        if_exists: false,
    };
    Request { id, op }
}

/// Reads every key with pipelined gets; returns key -> entry for those present.
fn get_many(server: &TestServer, keys: &[String]) -> HashMap<String, KvEntry> {
    let mut conn = Connection::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut found = HashMap::new();
    for chunk in keys.chunks(256) {
        for (i, key) in chunk.iter().enumerate() {
            conn.queue(&Request {
                id: i as u64 + 1,
                op: Op::KvGet {
                    namespace: "default".into(),
                    key: key.clone(),
                    wait_ms: None,
                    after_version: None,
                    newer_than_current: false,
                },
            })
            .unwrap();
        }
        conn.flush().unwrap();
        for _ in 0..chunk.len() {
            let response = conn.recv().unwrap();
            let key = &chunk[response.id as usize - 1];
            match response.result {
                Ok(Reply::KvValue(Some(entry))) => {
                    assert_eq!(&entry.key, key);
                    found.insert(key.clone(), entry);
                }
                Ok(Reply::KvValue(None)) => {}
                other => panic!("get {key:?}: {other:?}"),
            }
        }
    }
    found
}

#[test]
fn graceful_restart_keeps_values_versions_ttl_keys_and_listing() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for i in 0..100 {
        c.kv_put(
            &format!("key/{i:03}"),
            format!("value {i}").as_bytes(),
            PutOptions::default(),
        )
        .unwrap();
    }
    // Some keys get several versions, some are deleted.
    for i in (0..100).step_by(3) {
        for round in 0..3 {
            c.kv_put(
                &format!("key/{i:03}"),
                format!("value {i} round {round}").as_bytes(),
                PutOptions::default(),
            )
            .unwrap();
        }
    }
    for i in (0..100).step_by(10) {
        assert!(c.kv_delete(&format!("key/{i:03}"), None).unwrap());
    }
    // TTL keys: one far from expiry, one that expires while the server is down.
    c.kv_put(
        "ttl/long",
        b"still here",
        PutOptions {
            ttl_ms: Some(600_000),
            ..Default::default()
        },
    )
    .unwrap();
    c.kv_put(
        "ttl/short",
        b"soon gone",
        PutOptions {
            ttl_ms: Some(400),
            ..Default::default()
        },
    )
    .unwrap();
    let short_put_at = Instant::now();
    let mut other = server.client().with_namespace("other");
    other
        .kv_put("key/001", b"other namespace", PutOptions::default())
        .unwrap();

    let before: Vec<KvEntry> = all_entries(&mut c)
        .into_iter()
        .filter(|e| e.key != "ttl/short")
        .collect();
    assert_eq!(before.len(), 91);
    let status_before = c.status().unwrap();
    drop((c, other));
    let stderr = server.stop();
    assert!(stderr.contains("flo stopped"), "{stderr}");

    std::thread::sleep(Duration::from_millis(450).saturating_sub(short_put_at.elapsed()));
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let after = all_entries(&mut c);
    assert_eq!(
        after, before,
        "keys, values, versions and expiries survive a restart"
    );
    assert_eq!(
        c.kv_get("ttl/short").unwrap(),
        None,
        "a key that expired while the server was down stays gone"
    );
    let long = c.kv_get("ttl/long").unwrap().unwrap();
    assert_eq!(long.value, b"still here");
    assert!(long.expires_at_ms.is_some());
    assert_eq!(
        c.kv_get("key/010").unwrap(),
        None,
        "deleted keys stay deleted"
    );
    let three = c.kv_get("key/003").unwrap().unwrap();
    assert_eq!(
        (three.value.as_slice(), three.version),
        (&b"value 3 round 2"[..], 4)
    );
    let mut other = server.client().with_namespace("other");
    assert_eq!(
        other.kv_get("key/001").unwrap().unwrap().value,
        b"other namespace"
    );

    // The log continues where it stopped: LSNs go on, versions go on.
    let status_after = c.status().unwrap();
    for (b, a) in status_before.shards.iter().zip(&status_after.shards) {
        assert!(
            a.lsn >= b.lsn,
            "shard {} went back from LSN {} to {}",
            a.shard,
            b.lsn,
            a.lsn
        );
        assert_eq!(a.durable_lsn, a.lsn);
    }
    assert_eq!(
        c.kv_put(
            "key/003",
            b"after restart",
            PutOptions {
                if_version: Some(4),
                ..Default::default()
            }
        )
        .unwrap(),
        5
    );
    c.kv_put("new/after-restart", b"x", PutOptions::default())
        .unwrap();
    drop((c, other));
    server.stop();

    // And a second restart sees the writes made after the first.
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(c.kv_get("key/003").unwrap().unwrap().version, 5);
    assert_eq!(c.kv_get("new/after-restart").unwrap().unwrap().value, b"x");
    server.stop();
}

#[test]
fn async_durability_with_graceful_stop_keeps_everything() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--durability", "async"]);
    assert!(
        server.ready_line.contains("durability async"),
        "{}",
        server.ready_line
    );
    const N: u64 = 3000;
    let mut conn = Connection::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    for id in 1..=N {
        conn.queue(&put_request(
            id,
            &format!("a/{id:05}"),
            format!("async {id}").as_bytes(),
        ))
        .unwrap();
        if id % 500 == 0 {
            conn.flush().unwrap();
        }
    }
    conn.flush().unwrap();
    for _ in 0..N {
        let r = conn.recv().unwrap();
        assert_eq!(r.result, Ok(Reply::KvPut { version: 1 }), "put {}", r.id);
    }
    let mut c = server.client();
    assert_eq!(c.status().unwrap().durability, "async");
    drop((c, conn));
    server.stop();

    let server = TestServer::start(dir.path(), &["--durability", "async"]);
    let mut c = server.client();
    let entries = all_entries(&mut c);
    assert_eq!(entries.len(), N as usize);
    for (i, e) in entries.iter().enumerate() {
        let id = i as u64 + 1;
        assert_eq!(e.key, format!("a/{id:05}"));
        assert_eq!(e.value, format!("async {id}").as_bytes());
    }
    server.stop();
}

/// What the streaming writer saw before the server went away.
struct Streamed {
    /// key -> value of every put answered with Ok.
    acked: HashMap<String, Vec<u8>>,
    /// key -> value of every put sent but not acknowledged (never answered, or refused
    /// while the server was stopping).
    unacked: HashMap<String, Vec<u8>>,
}

/// Streams puts with `window` requests in flight until the connection breaks. Error
/// replies fail the test unless `stopping` (a server that is shutting down may refuse).
fn stream_puts(
    mut conn: Connection,
    prefix: &str,
    window: usize,
    seed: u64,
    stopping: bool,
) -> Streamed {
    let mut rng = Rng::new(seed);
    let mut in_flight: HashMap<u64, (String, Vec<u8>)> = HashMap::new();
    let mut acked = HashMap::new();
    let mut refused = HashMap::new();
    let mut next_id = 1u64;
    'stream: loop {
        while in_flight.len() < window {
            let key = format!("{prefix}/{next_id:07}");
            // Small records (about 61 bytes) keep a batch of up to 64 of them inside one
            // 4 KiB block (see `a_batch_ending_just_short_of_a_block_boundary_is_recovered`).
            let value = format!("{:08x}", rng.next_u64() as u32).into_bytes();
            if conn.queue(&put_request(next_id, &key, &value)).is_err() {
                break 'stream;
            }
            in_flight.insert(next_id, (key, value));
            next_id += 1;
        }
        if conn.flush().is_err() {
            break;
        }
        // One blocking receive, then whatever else has already arrived.
        let mut response = conn.recv();
        loop {
            let r = match response {
                Ok(r) => r,
                Err(_) => break 'stream,
            };
            let (key, value) = in_flight
                .remove(&r.id)
                .expect("a response to a request in flight");
            match r.result {
                Ok(Reply::KvPut { version }) => {
                    assert_eq!(version, 1, "{key}");
                    acked.insert(key, value);
                }
                Ok(other) => panic!("unexpected reply to a put of {key}: {other:?}"),
                Err(e) if stopping => {
                    refused.insert(key, value);
                    let _ = e;
                }
                Err(e) => panic!("put of {key} refused by a healthy server: {e:?}"),
            }
            response = match conn.recv_buffered() {
                Ok(Some(r)) => Ok(r),
                Ok(None) => break,
                Err(e) => Err(e),
            };
        }
    }
    let mut unacked: HashMap<String, Vec<u8>> = in_flight.into_values().collect();
    unacked.extend(refused);
    Streamed { acked, unacked }
}

/// Checks, on a restarted server, that every acknowledged put is there with its value and
/// that unacknowledged ones are either absent or intact. Returns how many keys exist.
fn check_streamed_writes(server: &TestServer, streamed: &Streamed, what: &str) -> usize {
    let mut keys: Vec<String> = streamed.acked.keys().cloned().collect();
    keys.extend(streamed.unacked.keys().cloned());
    keys.sort();
    let found = get_many(server, &keys);
    let mut lost = Vec::new();
    for (key, value) in &streamed.acked {
        match found.get(key) {
            Some(entry) => {
                assert_eq!(
                    &entry.value, value,
                    "acknowledged key {key} has a wrong value after {what}"
                );
                assert_eq!(entry.version, 1, "{key}");
            }
            None => lost.push(key.clone()),
        }
    }
    lost.sort();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged puts lost after {what}, first: {:?}",
        lost.len(),
        streamed.acked.len(),
        &lost[..lost.len().min(5)]
    );
    for (key, value) in &streamed.unacked {
        if let Some(entry) = found.get(key) {
            assert_eq!(
                &entry.value, value,
                "unacknowledged key {key} recovered with a wrong value after {what}"
            );
        }
    }
    // Nothing else appeared: every recovered key is one we wrote.
    let mut c = server.client();
    let total: u64 = c.status().unwrap().shards.iter().map(|s| s.kv_keys).sum();
    assert_eq!(total, found.len() as u64, "after {what}");
    found.len()
}

const STREAM_ARGS: &[&str] = &["--shards", "2", "--segment-bytes", "1048576"];

fn start_streaming(
    server: &TestServer,
    prefix: &str,
    window: usize,
    stopping: bool,
) -> std::thread::JoinHandle<Streamed> {
    let conn = Connection::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let seed = Rng::from_time().next_u64();
    let prefix = prefix.to_string();
    std::thread::spawn(move || stream_puts(conn, &prefix, window, seed, stopping))
}

/// Joins writer threads and merges what they saw.
fn join_writers(writers: Vec<std::thread::JoinHandle<Streamed>>) -> Streamed {
    let mut all = Streamed {
        acked: HashMap::new(),
        unacked: HashMap::new(),
    };
    for w in writers {
        let s = w.join().expect("writer thread");
        all.acked.extend(s.acked);
        all.unacked.extend(s.unacked);
    }
    all
}

#[test]
fn kill_9_while_streaming_puts_loses_no_acknowledged_write() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), STREAM_ARGS);
    let writer = start_streaming(&server, "s", 64, false);
    std::thread::sleep(Duration::from_millis(1000));
    server.kill9();
    let streamed = join_writers(vec![writer]);
    assert!(
        streamed.acked.len() >= 100,
        "too few puts acknowledged in 1 s to prove anything: {}",
        streamed.acked.len()
    );
    eprintln!(
        "kill -9: {} puts acknowledged, {} in flight",
        streamed.acked.len(),
        streamed.unacked.len()
    );

    let server = TestServer::start(dir.path(), STREAM_ARGS);
    let present = check_streamed_writes(&server, &streamed, "kill -9");
    // The recovered server takes new writes and keeps them over another restart.
    let mut c = server.client();
    c.kv_put("after/kill", b"ok", PutOptions::default())
        .unwrap();
    drop(c);
    server.stop();
    let server = TestServer::start(dir.path(), STREAM_ARGS);
    let mut c = server.client();
    assert_eq!(c.kv_get("after/kill").unwrap().unwrap().value, b"ok");
    let total: u64 = c.status().unwrap().shards.iter().map(|s| s.kv_keys).sum();
    assert_eq!(total, present as u64 + 1);
    drop(c);
    server.stop();
}

/// SIGTERM while four connections stream puts (64 in flight in all): the stop is clean,
/// and a restart finds every acknowledged put.
fn graceful_stop_while_streaming(durability: &str) {
    let dir = temp_dir();
    let args = [
        "--shards",
        "2",
        "--segment-bytes",
        "1048576",
        "--durability",
        durability,
    ];
    let server = TestServer::start(dir.path(), &args);
    let writers = (0..4)
        .map(|w| start_streaming(&server, &format!("w{w}"), 16, true))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    server.stop();
    let streamed = join_writers(writers);
    assert!(
        streamed.acked.len() >= 50,
        "too few puts acknowledged: {}",
        streamed.acked.len()
    );
    eprintln!(
        "graceful stop ({durability}): {} puts acknowledged, {} not",
        streamed.acked.len(),
        streamed.unacked.len()
    );
    let server = match TestServer::try_start(dir.path(), &args) {
        Ok(server) => server,
        Err(r) => panic!("restart after a graceful stop refused:\n{}", r.stderr),
    };
    check_streamed_writes(
        &server,
        &streamed,
        &format!("a graceful stop with durability {durability}"),
    );
    server.stop();
}

#[test]
fn graceful_stop_while_streaming_puts_loses_no_acknowledged_write_sync() {
    graceful_stop_while_streaming("sync");
}

#[test]
fn graceful_stop_while_streaming_puts_loses_no_acknowledged_write_async() {
    graceful_stop_while_streaming("async");
}
