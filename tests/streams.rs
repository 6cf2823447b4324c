//! Streams end to end against a real server: order across partitions and per key, reads by
//! id and from the tail, retention by length and by age, exact trims, snapshots and kill -9,
//! and the errors bad requests get.

mod common;

use common::{TestServer, cli_fails, cli_fails_with, cli_json, cli_ok, temp_dir, wait_until};
use flo::Client;
use flo::Error;
use flo::protocol::{
    ErrorCode, GroupConfig, GroupMode, GroupReadSpec, GroupStart, StreamConfig, StreamId,
    StreamReadSpec, StreamRecordIn,
};
use std::time::Duration;

fn record(payload: &str, key: Option<&str>) -> StreamRecordIn {
    StreamRecordIn {
        key: key.map(str::to_string),
        payload: payload.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Every record of a stream, oldest first, read in pages of `page`.
fn read_all(c: &mut Client, stream: &str, page: u32) -> Vec<(StreamId, u32, String)> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let spec = StreamReadSpec {
            stream: stream.into(),
            after,
            count: Some(page),
            ..Default::default()
        };
        let got = c.read_stream(spec).unwrap();
        out.extend(got.records.iter().map(|r| {
            (
                r.id,
                r.partition,
                String::from_utf8(r.payload.clone()).unwrap(),
            )
        }));
        match got.next_after {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

fn server_error(e: Error) -> (ErrorCode, String) {
    match e {
        Error::Server(v) => (v.code, v.message),
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[test]
fn records_read_back_in_append_order_across_partitions_and_after_a_kill() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let config = StreamConfig {
        partitions: Some(3),
        ..Default::default()
    };
    assert!(c.create_stream("orders", config.clone()).unwrap());
    assert!(!c.create_stream("orders", config).unwrap(), "a repeat");
    // One record at a time, unkeyed (partitions in turn) and keyed.
    let mut sent = Vec::new();
    for i in 0..60 {
        let key = (i % 4 == 0).then(|| format!("customer-{}", i % 3));
        let payload = format!("order-{i}");
        let ids = c
            .append("orders", vec![record(&payload, key.as_deref())])
            .unwrap();
        assert_eq!(ids.len(), 1);
        sent.push((ids[0], payload));
    }
    // A batch: ids in the order given.
    let batch: Vec<_> = (0..20)
        .map(|i| record(&format!("batch-{i}"), Some(&format!("k{i}"))))
        .collect();
    let ids = c.append("orders", batch).unwrap();
    assert_eq!(ids.len(), 20);
    let all = read_all(&mut c, "orders", 7);
    assert_eq!(all.len(), 80);
    let one_by_one: Vec<&str> = all.iter().take(60).map(|(_, _, p)| p.as_str()).collect();
    let expected: Vec<&str> = sent.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        one_by_one, expected,
        "one client's records come back in its order"
    );
    let partitions: std::collections::BTreeSet<u32> = all.iter().map(|(_, p, _)| *p).collect();
    assert_eq!(
        partitions.len(),
        3,
        "the records spread over the partitions"
    );
    for (id, p, _) in &all {
        assert_eq!(id.partition(3), *p, "an id says its partition");
    }
    // One partition alone, and the records of one key all in one partition.
    let keyed: Vec<_> = all
        .iter()
        .filter(|(_, _, p)| ["order-0", "order-12", "order-24"].contains(&p.as_str()))
        .map(|(_, part, _)| *part)
        .collect();
    assert!(keyed.windows(2).all(|w| w[0] == w[1]), "{keyed:?}");
    let p0 = c
        .read_stream(StreamReadSpec {
            stream: "orders".into(),
            partition: Some(0),
            count: Some(1000),
            ..Default::default()
        })
        .unwrap();
    assert!(p0.records.iter().all(|r| r.partition == 0));
    assert_eq!(
        p0.records.len(),
        all.iter().filter(|(_, p, _)| *p == 0).count()
    );
    let info = c.stream("orders").unwrap();
    assert_eq!((info.length, info.appended, info.partitions), (80, 80, 3));

    // Every acknowledged record survives kill -9, and new ids stay above the old.
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(read_all(&mut c, "orders", 100), all);
    let newer = c.append("orders", vec![record("after", None)]).unwrap()[0];
    assert!(all.iter().all(|(id, _, _)| *id < newer));
    server.stop();
}

#[test]
fn length_and_age_limits_remove_the_oldest_records() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let addr = server.addr_string();
    let mut c = server.client();
    // Two partitions keep two records each.
    cli_ok(
        &addr,
        &[
            "stream",
            "create",
            "capped",
            "--partitions",
            "2",
            "--max-len",
            "4",
        ],
    );
    for i in 0..10 {
        c.append_to("capped", vec![record(&format!("r{i}"), None)], Some(i % 2))
            .unwrap();
    }
    let kept: Vec<String> = read_all(&mut c, "capped", 100)
        .into_iter()
        .map(|(_, _, p)| p)
        .collect();
    assert_eq!(kept, ["r6", "r7", "r8", "r9"]);

    cli_ok(&addr, &["stream", "create", "aged", "--retention", "10s"]);
    let old = c.append("aged", vec![record("old", None)]).unwrap()[0];
    c.advance_clock(6_000).unwrap();
    c.append("aged", vec![record("young", None)]).unwrap();
    c.advance_clock(5_000).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || c.stream("aged").unwrap().length
            == 1),
        "the record older than 10 s went"
    );
    let left = read_all(&mut c, "aged", 10);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].2, "young");
    // A read after a removed record is refused, never answered with a gap.
    let e = c
        .read_stream(StreamReadSpec {
            stream: "aged".into(),
            after: Some(StreamId::new(old.ms - 1, 0)),
            ..Default::default()
        })
        .unwrap_err();
    let (code, message) = server_error(e);
    assert_eq!(code, ErrorCode::NotFound);
    assert!(message.contains("removed"), "{message}");
    // The limits hold after a restart from the log.
    server.kill9();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    assert_eq!(read_all(&mut c, "capped", 100).len(), 4);
    assert_eq!(read_all(&mut c, "aged", 100).len(), 1);
    server.stop();
}

#[test]
fn the_cli_creates_appends_reads_trims_and_deletes() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    // Appending to a missing stream creates it.
    let first = cli_json(
        &addr,
        &["stream", "append", "events", "e0", "--header", "a=b"],
    );
    let first_id: StreamId = first["id"].as_str().unwrap().parse().unwrap();
    for i in 1..10 {
        cli_ok(&addr, &["stream", "append", "events", &format!("e{i}")]);
    }
    let info = cli_json(&addr, &["stream", "info", "events"]);
    assert_eq!(info["length"], 10);
    assert_eq!(info["partitions"], 2, "the default: one per shard");
    let page = cli_json(&addr, &["stream", "read", "events", "--count", "3"]);
    let records = page["records"].as_array().unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["payload"], "e0");
    assert_eq!(records[0]["headers"]["a"], "b");
    let next = page["next_after"].as_str().unwrap();
    let rest = cli_json(&addr, &["stream", "read", "events", "--after", next]);
    assert_eq!(rest["records"].as_array().unwrap().len(), 7);
    let from = cli_json(
        &addr,
        &["stream", "read", "events", "--from", &first_id.to_string()],
    );
    assert_eq!(
        from["records"].as_array().unwrap().len(),
        10,
        "--from includes its id"
    );
    let tail = cli_ok(&addr, &["stream", "tail", "events", "--count", "2"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].ends_with("\te8") && lines[1].ends_with("\te9"),
        "{tail}"
    );

    let dry = cli_json(
        &addr,
        &["stream", "trim", "events", "--max-len", "4", "--dry-run"],
    );
    assert_eq!(dry["removed"], 6);
    assert_eq!(cli_json(&addr, &["stream", "info", "events"])["length"], 10);
    let trimmed = cli_json(&addr, &["stream", "trim", "events", "--max-len", "4"]);
    assert_eq!(trimmed["removed"], 6);
    let left = cli_json(&addr, &["stream", "read", "events"]);
    let payloads: Vec<&str> = left["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["e6", "e7", "e8", "e9"]);
    let last = left["records"][3]["id"].as_str().unwrap();
    let before = cli_json(&addr, &["stream", "trim", "events", "--before", last]);
    assert_eq!(before["removed"], 3);

    let list = cli_json(&addr, &["stream", "list"]);
    assert_eq!(list["streams"][0]["name"], "events");
    cli_ok(&addr, &["stream", "delete", "events"]);
    let listed = cli_ok(&addr, &["stream", "list"]);
    assert_eq!(listed.trim(), "no streams");
    server.stop();
}

#[test]
fn bad_stream_requests_get_clear_errors() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    let e = cli_fails(&addr, &["stream", "read", "nowhere"]);
    assert!(e.contains("stream \"nowhere\" does not exist"), "{e}");
    let e = cli_fails_with(&addr, &["stream", "read", "s", "--after", "12-x"], 2);
    assert!(e.contains("not a stream id"), "{e}");
    let e = cli_fails_with(&addr, &["stream", "create", "bad name!"], 1);
    assert!(e.contains("stream name"), "{e}");

    c.create_stream("s", StreamConfig::default()).unwrap();
    let (code, e) = server_error(
        c.create_stream(
            "s",
            StreamConfig {
                partitions: Some(5),
                ..Default::default()
            },
        )
        .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Conflict, "{e}");
    let big = StreamRecordIn {
        payload: vec![b'x'; (1 << 20) + 1],
        ..Default::default()
    };
    let (code, e) = server_error(c.append("s", vec![big]).unwrap_err());
    assert_eq!(code, ErrorCode::BadRequest);
    assert!(e.contains("payload"), "{e}");
    let (code, e) = server_error(
        c.append_to("s", vec![record("x", None)], Some(9))
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::BadRequest);
    assert!(e.contains("no partition 9"), "{e}");
    let (code, _) = server_error(c.append("s", Vec::new()).unwrap_err());
    assert_eq!(code, ErrorCode::BadRequest);
    let zero = StreamReadSpec {
        stream: "s".into(),
        count: Some(0),
        ..Default::default()
    };
    let (code, _) = server_error(c.read_stream(zero).unwrap_err());
    assert_eq!(code, ErrorCode::BadRequest);
    // Nothing of that reached the stream, and the server serves on.
    assert_eq!(c.stream("s").unwrap().length, 0);
    c.append("s", vec![record("fine", None)]).unwrap();
    assert_eq!(c.stream("s").unwrap().length, 1);
    server.stop();
}

#[test]
fn stream_records_outlive_snapshots_and_the_segments_they_let_go() {
    let dir = temp_dir();
    let args = [
        "--shards",
        "1",
        "--segment-bytes",
        "65536",
        "--snapshot-bytes",
        "262144",
    ];
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    let payload = "p".repeat(300);
    for i in 0..3000 {
        c.append("big", vec![record(&format!("{i} {payload}"), None)])
            .unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(10), || c.status().unwrap().shards[0]
            .snapshot_lsn
            > 0),
        "a snapshot was taken"
    );
    let before = read_all(&mut c, "big", 1000);
    assert_eq!(before.len(), 3000);
    let status = c.status().unwrap();
    assert_eq!(status.shards[0].stream_records, 3000);
    server.kill9();
    let server = TestServer::start(dir.path(), &args);
    let mut c = server.client();
    assert_eq!(read_all(&mut c, "big", 1000), before);
    server.stop();
}

fn group_read(c: &mut Client, stream: &str, group: &str, consumer: &str, n: u32) -> Vec<StreamId> {
    let spec = GroupReadSpec {
        stream: stream.into(),
        group: group.into(),
        consumer: consumer.into(),
        count: Some(n),
        ..Default::default()
    };
    c.group_read(spec).unwrap().iter().map(|r| r.id).collect()
}

fn group_config(mode: GroupMode, timeout_ms: u64, max_deliveries: u32) -> GroupConfig {
    GroupConfig {
        mode,
        start: GroupStart::Start,
        max_deliveries: Some(max_deliveries),
        message_timeout_ms: Some(timeout_ms),
    }
}

#[test]
fn a_shared_group_gives_each_record_to_one_consumer_until_acked() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let config = StreamConfig {
        partitions: Some(3),
        ..Default::default()
    };
    c.create_stream("jobs", config).unwrap();
    let batch: Vec<_> = (0..30)
        .map(|i| record(&format!("j{i}"), Some(&format!("k{i}"))))
        .collect();
    let all = c.append("jobs", batch).unwrap();
    let shared = group_config(GroupMode::Shared, 10_000, 3);
    assert!(c.create_group("jobs", "workers", shared.clone()).unwrap());
    assert!(!c.create_group("jobs", "workers", shared).unwrap());
    // Three consumers share the records: each goes to exactly one.
    let mut seen = Vec::new();
    for round in 0..10 {
        for consumer in ["a", "b", "c"] {
            seen.extend(group_read(&mut c, "jobs", "workers", consumer, 2));
        }
        if seen.len() == 30 {
            break;
        }
        assert!(round < 9, "only {} of 30 delivered", seen.len());
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 30, "no record went to two consumers");
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(sorted, expected);
    assert!(group_read(&mut c, "jobs", "workers", "a", 10).is_empty());

    // Acked records are never delivered again; a nacked one is, at once.
    assert_eq!(c.ack("jobs", "workers", all[..20].to_vec()).unwrap(), 20);
    assert_eq!(
        c.ack("jobs", "workers", all[..20].to_vec()).unwrap(),
        0,
        "a repeat"
    );
    assert_eq!(c.nack("jobs", "workers", vec![all[20]], 0).unwrap(), 1);
    assert_eq!(group_read(&mut c, "jobs", "workers", "b", 10), [all[20]]);
    let info = &c.groups("jobs", Some("workers")).unwrap()[0];
    assert_eq!((info.pending, info.acked, info.lag), (10, 20, 0));

    // Past the message timeout the unacked records go to whoever reads; delivered too
    // often, they move to the dead-letter stream.
    c.advance_clock(10_001).unwrap();
    let again = group_read(&mut c, "jobs", "workers", "c", 100);
    assert_eq!(again.len(), 10);
    c.advance_clock(10_001).unwrap();
    // all[20] was delivered three times already (a read, the nack's, the timeout's).
    let third = group_read(&mut c, "jobs", "workers", "a", 100);
    assert_eq!(third.len(), 9);
    assert!(!third.contains(&all[20]));
    c.advance_clock(10_001).unwrap();
    let dead: Vec<StreamId> = group_read(&mut c, "jobs", "workers", "a", 100);
    assert!(dead.is_empty(), "{dead:?}");
    let info = &c.groups("jobs", Some("workers")).unwrap()[0];
    assert_eq!((info.pending, info.dead_lettered), (0, 10));
    let dlq = read_all(&mut c, "jobs:dlq", 100);
    assert_eq!(dlq.len(), 10);
    let page = c
        .read_stream(StreamReadSpec {
            stream: "jobs:dlq".into(),
            count: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.records[0].headers["flo-group"], "workers");
    assert!(page.records[0].headers.contains_key("flo-source-id"));
    server.stop();
}

#[test]
fn an_exclusive_group_serves_one_consumer_until_it_stops() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let config = StreamConfig {
        partitions: Some(1),
        ..Default::default()
    };
    c.create_stream("ledger", config).unwrap();
    for i in 0..6 {
        c.append("ledger", vec![record(&format!("e{i}"), None)])
            .unwrap();
    }
    let exclusive = group_config(GroupMode::Exclusive, 5_000, 16);
    c.create_group("ledger", "one", exclusive).unwrap();
    let first = group_read(&mut c, "ledger", "one", "primary", 2);
    assert_eq!(first.len(), 2);
    assert!(group_read(&mut c, "ledger", "one", "standby", 10).is_empty());
    let more = group_read(&mut c, "ledger", "one", "primary", 2);
    assert_eq!(more.len(), 2);
    c.ack("ledger", "one", [first, more].concat()).unwrap();
    // The primary stops: after the timeout the standby takes over where it stopped.
    c.advance_clock(5_001).unwrap();
    let taken = group_read(&mut c, "ledger", "one", "standby", 10);
    assert_eq!(taken.len(), 2, "the last two records");
    assert!(group_read(&mut c, "ledger", "one", "primary", 10).is_empty());
    server.stop();
}

#[test]
fn group_state_survives_kill_9_and_blocking_reads_wake_on_appends() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    c.create_stream("q", StreamConfig::default()).unwrap();
    let ids = c
        .append(
            "q",
            (0..10).map(|i| record(&format!("m{i}"), None)).collect(),
        )
        .unwrap();
    c.create_group("q", "g", group_config(GroupMode::Shared, 60_000, 16))
        .unwrap();
    let got = group_read(&mut c, "q", "g", "w1", 10);
    assert_eq!(got.len(), 10);
    c.ack("q", "g", ids[..6].to_vec()).unwrap();
    server.kill9();

    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let info = &c.groups("q", Some("g")).unwrap()[0];
    assert_eq!((info.pending, info.acked), (4, 6));
    // Nothing acked comes back; the unacked come back after their timeout.
    assert!(group_read(&mut c, "q", "g", "w2", 10).is_empty());
    c.advance_clock(60_001).unwrap();
    let mut back = group_read(&mut c, "q", "g", "w2", 10);
    back.sort();
    assert_eq!(back, ids[6..]);

    // A blocking read is answered by the next append.
    let addr = server.addr;
    let reader = std::thread::spawn(move || {
        let mut c = Client::connect(addr).unwrap();
        let spec = GroupReadSpec {
            stream: "q".into(),
            group: "g".into(),
            consumer: "w3".into(),
            count: Some(5),
            block_ms: Some(20_000),
            ..Default::default()
        };
        c.group_read(spec).unwrap()
    });
    std::thread::sleep(Duration::from_millis(200));
    let late = c.append("q", vec![record("late", None)]).unwrap()[0];
    let woke = reader.join().unwrap();
    assert_eq!(woke.iter().map(|r| r.id).collect::<Vec<_>>(), [late]);
    server.stop();
}

#[test]
fn bad_group_requests_get_clear_errors() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    let e = cli_fails(&addr, &["stream", "group", "create", "nowhere", "g"]);
    assert!(e.contains("does not exist"), "{e}");
    c.create_stream("s", StreamConfig::default()).unwrap();
    let e = cli_fails(
        &addr,
        &["stream", "group", "read", "s", "nogroup", "--consumer", "c"],
    );
    assert!(e.contains("no consumer group \"nogroup\""), "{e}");
    let e = cli_fails_with(&addr, &["stream", "group", "ack", "s", "g", "not-an-id"], 2);
    assert!(e.contains("not a stream id"), "{e}");
    c.create_group("s", "g", GroupConfig::default()).unwrap();
    let other = GroupConfig {
        mode: GroupMode::Exclusive,
        ..Default::default()
    };
    let (code, e) = server_error(c.create_group("s", "g", other).unwrap_err());
    assert_eq!(code, ErrorCode::Conflict);
    assert!(e.contains("(mode shared, max deliveries"), "{e}");
    // Each mode is one the CLI can create, under the name the docs give.
    cli_ok(
        &addr,
        &[
            "stream",
            "group",
            "create",
            "s",
            "keyed",
            "--mode",
            "key_shared",
        ],
    );
    let text = cli_ok(&addr, &["stream", "group", "info", "s", "keyed"]);
    assert!(text.contains("mode:            key_shared"), "{text}");
    cli_ok(&addr, &["stream", "group", "delete", "s", "keyed"]);
    c.create_stream(
        "limited",
        StreamConfig {
            max_len: Some(10),
            ..Default::default()
        },
    )
    .unwrap();
    let e = cli_fails(&addr, &["stream", "create", "limited"]);
    assert!(
        e.contains("retention none, max length 10, max bytes none"),
        "{e}"
    );
    // An id never delivered to the group: nothing to ack.
    let id = c.append("s", vec![record("x", None)]).unwrap()[0];
    assert_eq!(c.ack("s", "g", vec![id]).unwrap(), 0);
    let e = cli_fails(&addr, &["stream", "group", "create", "s:dlq", "g"]);
    assert!(e.contains("dead-letter"), "{e}");
    let text = cli_ok(&addr, &["stream", "group", "info", "s", "g"]);
    assert!(text.contains("mode:            shared"), "{text}");
    cli_ok(&addr, &["stream", "group", "delete", "s", "g"]);
    // Groups per stream are bounded.
    for i in 0..flo::protocol::GROUPS_PER_STREAM_MAX {
        c.create_group("s", &format!("g{i}"), GroupConfig::default())
            .unwrap();
    }
    let (code, e) = server_error(
        c.create_group("s", "one-more", GroupConfig::default())
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::Overloaded, "{e}");
    let e = cli_fails(&addr, &["stream", "group", "info", "s", "g"]);
    assert!(e.contains("g"), "{e}");
    server.stop();
}

#[test]
fn a_stream_worker_acks_what_it_handled_and_redelivers_what_failed() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let failures = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let failed = failures.clone();
    let worker = flo::StreamWorker::builder(server.addr)
        .stream("events")
        .group("processors")
        .worker_id("events-1")
        .concurrency(3)
        .batch_size(4)
        .block_ms(500)
        .handler(move |ctx| {
            let payload = String::from_utf8(ctx.payload().to_vec())?;
            assert_eq!((ctx.stream(), ctx.group()), ("events", "processors"));
            // The first delivery of "flaky" fails: it comes back and succeeds.
            if payload == "flaky" && failed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Err("not yet".into());
            }
            if payload == "boom" {
                panic!("a handler that panics");
            }
            log.lock().unwrap().push(payload);
            Ok(())
        })
        .spawn()
        .unwrap();
    // The worker registered as a stream worker and created the stream and its group.
    let registered = c.worker("events-1").unwrap();
    assert_eq!(registered.worker_type, flo::protocol::WorkerType::Stream);
    for i in 0..12 {
        c.append("events", vec![record(&format!("e{i}"), None)])
            .unwrap();
    }
    c.append("events", vec![record("flaky", None)]).unwrap();
    // A record whose handler always panics goes to the dead-letter stream.
    c.append("events", vec![record("boom", None)]).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || read_all(
            &mut c,
            "events:dlq",
            10
        )
        .len()
            == 1),
        "boom dead-lettered"
    );
    assert!(
        wait_until(Duration::from_secs(20), || seen.lock().unwrap().len() == 13),
        "handled {:?}",
        seen.lock().unwrap()
    );
    let info = &c.groups("events", Some("processors")).unwrap()[0];
    assert!(
        wait_until(Duration::from_secs(10), || {
            c.groups("events", Some("processors")).unwrap()[0].acked == 13
        }),
        "{info:?}"
    );
    let stats = worker.stop_and_join().unwrap();
    // "flaky" failed once, "boom" on each of its 16 deliveries.
    assert_eq!(
        (stats.tasks_completed, stats.tasks_failed),
        (13, 17),
        "{stats:?}"
    );
    assert!(c.worker("events-1").is_err(), "deregistered at the stop");
    let mut handled = seen.lock().unwrap().clone();
    handled.sort();
    handled.dedup();
    assert_eq!(
        handled.len(),
        13,
        "each record handled once after its success"
    );
}

#[test]
fn a_blocking_read_is_answered_by_the_next_append_or_empty_at_its_deadline() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let mut last = c.append("feed", vec![record("old", None)]).unwrap()[0];
    for _ in 0..3 {
        let addr = server.addr;
        let spec = StreamReadSpec {
            stream: "feed".into(),
            after: Some(last),
            block_ms: Some(20_000),
            ..Default::default()
        };
        let reader =
            std::thread::spawn(move || Client::connect(addr).unwrap().read_stream(spec).unwrap());
        std::thread::sleep(Duration::from_millis(200));
        assert!(!reader.is_finished(), "the read waits for a record");
        // From a new connection each time: it may land on any shard.
        let mut writer = server.client();
        last = writer.append("feed", vec![record("new", None)]).unwrap()[0];
        let page = reader.join().unwrap();
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].id, last);
    }
    let quick = StreamReadSpec {
        stream: "feed".into(),
        after: Some(last),
        block_ms: Some(300),
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let page = c.read_stream(quick).unwrap();
    assert!(page.records.is_empty());
    // The server counts whole milliseconds: a hair under 300 ms can be its 300.
    assert!(
        t.elapsed() >= Duration::from_millis(295),
        "it waited its time: {:?}",
        t.elapsed()
    );
    server.stop();
}

#[test]
fn a_key_shared_group_keeps_each_key_with_one_consumer_until_it_stops() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let config = StreamConfig {
        partitions: Some(1),
        ..Default::default()
    };
    c.create_stream("accounts", config).unwrap();
    // Interleaved keys a, b, c; one record without a key.
    let mut all = Vec::new();
    for i in 0..12 {
        let key = ["a", "b", "c"][i % 3];
        all.push((
            c.append("accounts", vec![record(&format!("{key}{i}"), Some(key))])
                .unwrap()[0],
            key,
        ));
    }
    c.append("accounts", vec![record("nokey", None)]).unwrap();
    c.create_group(
        "accounts",
        "ks",
        group_config(GroupMode::KeyShared, 5_000, 16),
    )
    .unwrap();
    let payloads = |c: &mut Client, consumer: &str, n: u32| -> Vec<String> {
        let spec = GroupReadSpec {
            stream: "accounts".into(),
            group: "ks".into(),
            consumer: consumer.into(),
            count: Some(n),
            ..Default::default()
        };
        c.group_read(spec)
            .unwrap()
            .iter()
            .map(|r| String::from_utf8(r.payload.clone()).unwrap())
            .collect()
    };
    // x takes the first records of a, b and c (their keys are free), in order.
    let x1 = payloads(&mut c, "x", 3);
    assert_eq!(x1, ["a0", "b1", "c2"]);
    // y finds every keyed record held by x: only the record without a key.
    assert_eq!(payloads(&mut c, "y", 10), ["nokey"]);
    let held_by_y: Vec<StreamId> = c
        .group_pending("accounts", "ks", None)
        .unwrap()
        .iter()
        .filter(|p| p.consumer == "y")
        .map(|p| p.id)
        .collect();
    assert_eq!(c.ack("accounts", "ks", held_by_y).unwrap(), 1);
    // x gets the rest of its keys, in order.
    let x2 = payloads(&mut c, "x", 100);
    assert_eq!(x2, ["a3", "b4", "c5", "a6", "b7", "c8", "a9", "b10", "c11"]);
    let info = &c.groups("accounts", Some("ks")).unwrap()[0];
    assert_eq!((info.pending, info.lag), (12, 0), "{info:?}");
    // x acks and stops; after the timeout, y takes over x's keys.
    let ids: Vec<StreamId> = all.iter().map(|(id, _)| *id).collect();
    c.ack("accounts", "ks", ids[..6].to_vec()).unwrap();
    for i in 12..15 {
        let key = ["a", "b", "c"][i % 3];
        c.append("accounts", vec![record(&format!("{key}{i}"), Some(key))])
            .unwrap();
    }
    assert!(
        payloads(&mut c, "y", 10).is_empty(),
        "x still holds its keys"
    );
    c.advance_clock(5_001).unwrap();
    // x's unacked records come first (due again), then the new ones, in order.
    let y = payloads(&mut c, "y", 100);
    assert_eq!(
        y,
        ["a6", "b7", "c8", "a9", "b10", "c11", "a12", "b13", "c14"]
    );
    server.stop();
}
