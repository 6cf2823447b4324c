//! Streams end to end against a real server: order across partitions and per key, reads by
//! id and from the tail, retention by length and by age, exact trims, snapshots and kill -9,
//! and the errors bad requests get.

mod common;

use common::{TestServer, cli_fails, cli_fails_with, cli_json, cli_ok, temp_dir, wait_until};
use flo::Client;
use flo::Error;
use flo::protocol::{ErrorCode, StreamConfig, StreamId, StreamReadSpec, StreamRecordIn};
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
