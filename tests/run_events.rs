//! The run event feed end to end: each run's lifecycle in order (started, steps started,
//! waiting and finished, state updated, completed / failed / cancelled), across shards,
//! paged by cursor, filtered by workflow, the same after kill -9, and followed live by
//! `flo workflow events --follow`.

mod common;

use common::{TestServer, cli_command, temp_dir};
use flo::StartOptions;
use flo::protocol::{WorkflowEvent, WorkflowRunStatus};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

const FLOW: &str = r#"kind: Workflow
name: evented
version: "1"
start:
  run: "@actions/prepare"
  transitions:
    success: approve
steps:
  approve:
    waitForState: {}
    transitions:
      success: flo.Completed
"#;

const OTHER: &str = "kind: Workflow\nname: other\nversion: \"1\"\nstart:\n  run: \"@actions/prepare\"\n  transitions:\n    success: flo.Completed\n";

/// Every event of the feed (of `workflow`), page by page of `limit`.
fn all_events(
    c: &mut flo::Client,
    workflow: Option<&str>,
    limit: u32,
) -> (Vec<WorkflowEvent>, String) {
    let mut cursor: Option<String> = None;
    let mut all = Vec::new();
    loop {
        let page = c
            .workflow_events(workflow, cursor.as_deref(), Some(limit))
            .unwrap();
        assert!(!page.gap);
        let done = page.events.is_empty();
        all.extend(page.events);
        cursor = Some(page.cursor);
        if done {
            return (all, cursor.unwrap());
        }
    }
}

fn of_run(events: &[WorkflowEvent], run_id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.run_id == run_id)
        .map(|e| match &e.step {
            Some(step) => format!("{} {step}", e.event),
            None => e.event.clone(),
        })
        .collect()
}

#[test]
fn the_feed_tells_each_run_in_order_pages_by_cursor_and_survives_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    common::fixed_wasm_action(&mut c, "prepare", r#"{"ready": true}"#);
    c.create_workflow(FLOW).unwrap();
    c.create_workflow(OTHER).unwrap();
    let runs: Vec<String> = (0..6)
        .map(|i| {
            let run_id = format!("ev-{i}");
            let opts = StartOptions {
                run_id: Some(run_id.clone()),
                ..StartOptions::default()
            };
            c.start_workflow("evented", b"{}", opts).unwrap()
        })
        .collect();
    let other = c
        .start_workflow("other", b"{}", StartOptions::default())
        .unwrap();
    assert_eq!(
        c.wait_workflow(&other, 20_000).unwrap().status,
        WorkflowRunStatus::Completed
    );
    for run_id in &runs {
        assert!(common::wait_until(Duration::from_secs(20), || {
            c.workflow_run(run_id).unwrap().status == WorkflowRunStatus::Waiting
        }));
    }
    c.update_workflow_state(&runs[0], br#"{"ok": true}"#, true)
        .unwrap();
    c.cancel_workflow(&runs[1], None).unwrap();
    assert_eq!(
        c.wait_workflow(&runs[0], 20_000).unwrap().status,
        WorkflowRunStatus::Completed
    );

    let (events, cursor) = all_events(&mut c, None, 1000);
    let started = [
        "workflow_started",
        "step_started _start",
        "step_finished _start",
        "step_waiting approve",
    ];
    let mut want: Vec<String> = started.iter().map(|s| s.to_string()).collect();
    want.extend(["state_updated", "step_finished approve", "completed"].map(String::from));
    assert_eq!(of_run(&events, &runs[0]), want);
    let mut cancelled: Vec<String> = started.iter().map(|s| s.to_string()).collect();
    cancelled.push("cancelled".into());
    assert_eq!(of_run(&events, &runs[1]), cancelled);
    // Both shards' runs are in the feed, each shard's positions increasing.
    let shards: std::collections::BTreeSet<u32> = events.iter().map(|e| e.shard).collect();
    assert_eq!(shards.len(), 2, "{events:?}");
    for s in shards {
        let pos: Vec<u64> = events
            .iter()
            .filter(|e| e.shard == s)
            .map(|e| e.position)
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
    }
    // Small pages give the same feed; a filter keeps one workflow.
    let (paged, _) = all_events(&mut c, None, 3);
    assert_eq!(paged, events);
    let (theirs, _) = all_events(&mut c, Some("other"), 5);
    assert_eq!(
        of_run(&theirs, &other),
        [
            "workflow_started",
            "step_started _start",
            "step_finished _start",
            "completed"
        ]
    );
    assert!(theirs.iter().all(|e| e.workflow == "other"));

    // The feed is the log's: the same after kill -9, and the cursor goes on from there.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    let (again, _) = all_events(&mut c, None, 1000);
    assert_eq!(again, events);
    c.update_workflow_state(&runs[2], b"{}", true).unwrap();
    assert_eq!(
        c.wait_workflow(&runs[2], 20_000).unwrap().status,
        WorkflowRunStatus::Completed
    );
    let next = c.workflow_events(None, Some(&cursor), None).unwrap();
    assert_eq!(
        of_run(&next.events, &runs[2]),
        ["state_updated", "step_finished approve", "completed"]
    );
    assert_eq!(next.events.len(), 3, "{next:?}");
    // A cursor from elsewhere is refused with the reason.
    let err = c.workflow_events(None, Some("ev.1"), None).unwrap_err();
    assert!(err.to_string().contains("2 shards"), "{err}");
}

#[test]
fn flo_workflow_events_follow_prints_events_as_they_happen() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    common::fixed_wasm_action(&mut c, "prepare", r#"{"ready": true}"#);
    c.create_workflow(OTHER).unwrap();
    let mut follower = cli_command()
        .args([
            "--addr",
            &server.addr_string(),
            "--json",
            "workflow",
            "events",
            "--follow",
            "--workflow",
            "other",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Started after the follower: it sees the run from its start to its end.
    std::thread::sleep(Duration::from_millis(300));
    let run_id = c
        .start_workflow("other", b"{}", StartOptions::default())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline && !seen.iter().any(|e: &String| e == "completed") {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
            let doc: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(doc["run_id"], run_id.as_str(), "{doc}");
            seen.push(doc["event"].as_str().unwrap().to_string());
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(
        seen,
        [
            "workflow_started",
            "step_started",
            "step_finished",
            "completed"
        ]
    );
}

const STREAMED: &str = r#"kind: Workflow
name: streamed
version: "1"
eventStream:
  stream: run-events
  events: [workflow_started, step_finished, completed]
start:
  run: "@actions/prepare"
  transitions:
    success: ship
steps:
  ship:
    run: "@actions/prepare"
    transitions:
      success: flo.Completed
"#;

/// Reads `group` until `n` different events came (or 20 s passed), acking each read:
/// every record read, an event appended again after a crash included.
fn read_all(c: &mut flo::Client, group: &str, n: usize) -> Vec<flo::protocol::StreamRecord> {
    let mut all: Vec<flo::protocol::StreamRecord> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let distinct = |all: &[flo::protocol::StreamRecord]| {
        let ids: std::collections::HashSet<&str> =
            all.iter().map(|r| r.headers["delivery"].as_str()).collect();
        ids.len()
    };
    while distinct(&all) < n && Instant::now() < deadline {
        let spec = flo::protocol::GroupReadSpec {
            stream: "run-events".into(),
            group: group.into(),
            consumer: "auditor".into(),
            count: Some(100),
            block_ms: Some(200),
            ..Default::default()
        };
        let records = c.group_read(spec).unwrap();
        let ids = records.iter().map(|r| r.id).collect();
        c.ack("run-events", group, ids).unwrap();
        all.extend(records);
    }
    all
}

#[test]
fn an_event_stream_is_read_through_consumer_groups_and_keeps_each_runs_order_across_kill_9() {
    use flo::protocol::{GroupConfig, GroupMode, GroupStart, StreamConfig};
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    common::fixed_wasm_action(&mut c, "prepare", r#"{"ready": true}"#);
    let config = StreamConfig {
        partitions: Some(4),
        ..StreamConfig::default()
    };
    c.create_stream("run-events", config).unwrap();
    let group = GroupConfig {
        mode: GroupMode::Shared,
        start: GroupStart::Start,
        max_deliveries: None,
        message_timeout_ms: None,
    };
    c.create_group("run-events", "audit", group).unwrap();
    c.create_workflow(STREAMED).unwrap();
    let start = |c: &mut flo::Client, run: &str| {
        let opts = StartOptions {
            run_id: Some(run.to_string()),
            ..StartOptions::default()
        };
        c.start_workflow("streamed", b"{}", opts).unwrap();
    };
    for i in 0..6 {
        start(&mut c, &format!("st-{i}"));
    }
    let expected = [
        "workflow_started -",
        "step_finished _start",
        "step_finished ship",
        "completed -",
    ];
    let check = |records: &[flo::protocol::StreamRecord], runs: std::ops::Range<usize>| {
        for i in runs {
            let run = format!("st-{i}");
            let told: Vec<String> = records
                .iter()
                .filter(|r| r.key.as_deref() == Some(run.as_str()))
                .map(|r| {
                    let body: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
                    assert_eq!(body["run_id"], run.as_str());
                    assert_eq!(r.headers["event"], body["event"].as_str().unwrap());
                    let step = body["step"].as_str().unwrap_or("-").to_string();
                    format!("{} {step}", body["event"].as_str().unwrap())
                })
                .collect();
            assert_eq!(told, expected, "{run}: its events in order, once each");
        }
    };
    let first = read_all(&mut c, "audit", 24);
    assert_eq!(first.len(), 24);
    check(&first, 0..6);
    // Runs started just before a kill -9: their events reach the stream after the restart.
    for i in 6..10 {
        start(&mut c, &format!("st-{i}"));
    }
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    let later = read_all(&mut c, "audit", 16);
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let unique: Vec<_> = later
        .into_iter()
        .filter(|r| seen.insert(r.headers["delivery"].clone()))
        .collect();
    assert_eq!(
        unique.len(),
        16,
        "every event of the four runs, at least once"
    );
    check(&unique, 6..10);
    // A stream that does not exist: refused with the reason once its retries are spent
    // (listed with `flo webhook pending` meanwhile).
    let bad = STREAMED
        .replace("name: streamed", "name: nowhere")
        .replace("stream: run-events", "stream: no-such-stream");
    c.create_workflow(&bad).unwrap();
    let opts = StartOptions::default();
    c.start_workflow("nowhere", b"{}", opts).unwrap();
    assert!(common::wait_until(Duration::from_secs(20), || {
        let (pending, _) = c.webhook_deliveries(false, Some("nowhere"), None).unwrap();
        pending.len() == 4
            && pending.iter().all(|d| {
                d.url == "stream:no-such-stream"
                    && d.last_error
                        .as_deref()
                        .is_some_and(|e| e.contains("no-such-stream"))
            })
    }));
    server.stop();
}
