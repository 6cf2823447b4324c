//! The HTTP port (`flo server --http`): `/metrics` in the Prometheus text format, read by a
//! Prometheus parser, moving as operations happen (requests, the log, runs, WASM executions
//! and failures, worker leases, queues and timers, consumer groups, runs by status);
//! `/healthz` and `/readyz`; the auth file's bearer tokens; `--http off`; a port that
//! cannot be had; bad requests answered without harm.

mod common;

use common::{
    TestServer, expect_refusal, fixed_wasm_action, guest_action, temp_dir, user_action, wait_until,
};
use flo::protocol::{
    GroupConfig, GroupMode, GroupReadSpec, GroupStart, RunStatus, StreamConfig, StreamRecordIn,
    WorkerSpec, WorkerType, WorkflowRunStatus,
};
use flo::{InvokeOptions, PutOptions, StartOptions};
use flo_testkit::http::{HttpResponse, http_get, http_raw};
use prometheus_parse::{Sample, Scrape, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "metrics-reader-token";
const AUTH_YAML: &str = r#"
tokens:
  - token: "metrics-reader-token"
    role: client
    namespaces: ["default"]
"#;

fn http_addr(server: &TestServer) -> SocketAddr {
    server.http.expect("the server serves HTTP")
}

fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> HttpResponse {
    http_get(addr, path, token).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// `/metrics`, parsed; panics unless it answers 200 in the Prometheus text format.
fn scrape(addr: SocketAddr, token: Option<&str>) -> Scrape {
    let answer = get(addr, "/metrics", token);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        answer.headers
    );
    let lines = answer.body.lines().map(|l| Ok(l.to_string()));
    Scrape::parse(lines).expect("the Prometheus text format")
}

fn value(sample: &Sample) -> f64 {
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
        Value::Summary(_) => panic!("no summaries are exported"),
    }
}

/// The sum over every shard (every other label given must match) of `metric`.
fn total(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(value)
        .sum()
}

#[test]
fn metrics_count_kv_puts_and_an_action_run_as_they_happen() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let before = scrape(http, None);
    let put_ok = [("op", "kv_put"), ("result", "ok")];
    let puts_before = total(&before, "flo_requests_total", &put_ok);

    let mut client = server.client();
    for i in 0..5 {
        let key = format!("metrics-key-{i}");
        client
            .kv_put(&key, b"v", PutOptions::default())
            .expect("put");
    }
    fixed_wasm_action(&mut client, "metered", r#"{"ok":true}"#);
    let run = client
        .invoke_and_wait("metered", b"{}", InvokeOptions::default(), 10_000)
        .expect("invoke");
    assert_eq!(run.status.as_str(), "completed");

    let after = scrape(http, None);
    assert_eq!(
        total(&after, "flo_requests_total", &put_ok) - puts_before,
        5.0
    );
    let put_latency = total(&after, "flo_request_duration_seconds", &[("op", "kv_put")]);
    assert!(
        put_latency >= 5.0,
        "kv_put latency observations: {put_latency}"
    );
    assert!(
        total(&after, "flo_log_records_total", &[]) > total(&before, "flo_log_records_total", &[])
    );
    assert!(total(&after, "flo_log_write_seconds", &[]) >= 1.0);
    assert_eq!(
        total(&after, "flo_wasm_executions_total", &[("result", "ok")]),
        1.0
    );
    // The engine's numbers are published once a second.
    let finished = [
        ("kind", "action"),
        ("name", "metered"),
        ("status", "completed"),
    ];
    let counted = wait_until(Duration::from_secs(5), || {
        total(&scrape(http, None), "flo_runs_finished_total", &finished) == 1.0
    });
    assert!(counted, "the run is counted as finished within 5 s");
    let published = scrape(http, None);
    assert!(
        total(
            &published,
            "flo_run_duration_seconds",
            &[("kind", "action")]
        ) >= 1.0
    );
    assert_eq!(total(&published, "flo_shard_serving", &[]), 2.0);
    // Each shard publishes its own numbers once a second: the keys on the other shard may
    // show a moment after the run.
    let keys = wait_until(Duration::from_secs(5), || {
        total(&scrape(http, None), "flo_kv_keys", &[]) >= 5.0
    });
    assert!(keys, "the five keys are published within 5 s");
}

/// Waits (the engine's numbers are published once a second) until `metric` with `labels`,
/// summed over the shards, is `want`; panics saying what it was.
fn wait_for_total(http: SocketAddr, metric: &str, labels: &[(&str, &str)], want: f64) {
    let mut seen = f64::NAN;
    let reached = wait_until(Duration::from_secs(10), || {
        seen = total(&scrape(http, None), metric, labels);
        seen == want
    });
    assert!(reached, "{metric} {labels:?} is {seen}, not {want}");
}

/// Waits for a signal (at most 10 minutes), then ends.
const SIGNAL_WORKFLOW: &str = r#"
kind: Workflow
name: metered-wait
version: "1"
start:
  waitForSignal:
    type: go
    timeoutMs: 600000
  transitions:
    success: flo.Completed
"#;

#[test]
fn metrics_count_leases_queues_timers_wasm_failures_groups_and_runs_by_status() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let http = http_addr(&server);
    let mut c = server.client();

    // Worker tasks: three queued, one leased, its lease run out. The lease lasts a minute
    // (the test clock runs with real time: a 1 s lease could end before the once-a-second
    // publication that shows it) and the clock is moved past it.
    user_action(&mut c, "metered-task", 60_000, 0, 100);
    for _ in 0..3 {
        c.invoke("metered-task", b"{}", InvokeOptions::default())
            .unwrap();
    }
    wait_for_total(http, "flo_tasks_queued", &[("queue", "worker")], 3.0);
    let pending = [("kind", "action"), ("status", "pending")];
    wait_for_total(http, "flo_runs_by_status", &pending, 3.0);
    c.register_worker(WorkerSpec {
        namespace: String::new(),
        worker_id: "metered-worker".into(),
        worker_type: WorkerType::Action,
        max_concurrency: None,
        processes: vec!["metered-task".into()],
        metadata: None,
        machine_id: None,
        labels: None,
    })
    .unwrap();
    let leased = c
        .await_tasks("metered-worker", &["metered-task"], 1, 5000)
        .unwrap();
    assert_eq!(leased.len(), 1);
    wait_for_total(http, "flo_worker_tasks_leased_total", &[], 1.0);
    wait_for_total(http, "flo_timers", &[("kind", "lease")], 1.0);
    wait_for_total(http, "flo_tasks_queued", &[("queue", "worker")], 2.0);
    let running = [("kind", "action"), ("status", "running")];
    wait_for_total(http, "flo_runs_by_status", &running, 1.0);
    c.advance_clock(60_000).unwrap();
    let expired = wait_until(Duration::from_secs(5), || {
        c.run(&leased[0].task_id).unwrap().status == RunStatus::TimedOut
    });
    assert!(expired, "the lease ran out");
    wait_for_total(http, "flo_worker_leases_expired_total", &[], 1.0);

    // A run delayed: a timer until it is due.
    let delayed = InvokeOptions {
        delay_ms: Some(60_000),
        ..InvokeOptions::default()
    };
    c.invoke("metered-task", b"{}", delayed).unwrap();
    wait_for_total(http, "flo_timers", &[("kind", "run_delay")], 1.0);

    // A guest that traps: a WASM failure by its reason, and its wait for a slot observed.
    guest_action(
        &mut c,
        "metered-trap",
        flo_testkit::guests::trap_guest(),
        None,
    );
    let run = c
        .invoke_and_wait("metered-trap", b"{}", InvokeOptions::default(), 10_000)
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let scrape_now = scrape(http, None);
    assert_eq!(
        total(
            &scrape_now,
            "flo_wasm_failures_total",
            &[("reason", "trap")]
        ),
        1.0
    );
    assert_eq!(
        total(
            &scrape_now,
            "flo_wasm_failures_total",
            &[("reason", "timeout")]
        ),
        0.0
    );
    wait_for_total(http, "flo_wasm_slot_wait_seconds", &[], 1.0);

    // A consumer group: 5 records, 2 delivered and not acked, 3 not delivered.
    c.create_stream("metered-orders", StreamConfig::default())
        .unwrap();
    let records: Vec<StreamRecordIn> = (0..5)
        .map(|i| StreamRecordIn {
            payload: format!("{{\"n\":{i}}}").into_bytes(),
            ..Default::default()
        })
        .collect();
    c.append("metered-orders", records).unwrap();
    let config = GroupConfig {
        mode: GroupMode::Shared,
        start: GroupStart::Start,
        max_deliveries: None,
        message_timeout_ms: None,
    };
    c.create_group("metered-orders", "billing", config).unwrap();
    let group = [("stream", "metered-orders"), ("group", "billing")];
    wait_for_total(http, "flo_stream_group_lag", &group, 5.0);
    let read = c
        .group_read(GroupReadSpec {
            stream: "metered-orders".into(),
            group: "billing".into(),
            consumer: "c1".into(),
            count: Some(2),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(read.len(), 2);
    wait_for_total(http, "flo_stream_group_pending", &group, 2.0);
    wait_for_total(http, "flo_stream_group_lag", &group, 3.0);

    // A workflow run waiting for its signal, with the signal's deadline as a timer.
    c.create_workflow(SIGNAL_WORKFLOW).unwrap();
    let run_id = c
        .start_workflow("metered-wait", b"{}", StartOptions::default())
        .unwrap();
    let waiting = wait_until(Duration::from_secs(5), || {
        c.workflow_run(&run_id).unwrap().status == WorkflowRunStatus::Waiting
    });
    assert!(waiting);
    let wf_waiting = [("kind", "workflow"), ("status", "waiting")];
    wait_for_total(http, "flo_runs_by_status", &wf_waiting, 1.0);
    wait_for_total(http, "flo_timers", &[("kind", "workflow")], 1.0);
    c.pause_workflow(&run_id).unwrap();
    let on_hold = [("kind", "workflow"), ("status", "on_hold")];
    wait_for_total(http, "flo_runs_by_status", &on_hold, 1.0);
}

#[test]
fn every_metric_is_named_the_prometheus_way() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let scrape = scrape(http_addr(&server), None);
    assert!(
        scrape.samples.len() > 20,
        "{} samples",
        scrape.samples.len()
    );
    for name in scrape.docs.keys() {
        assert!(name.starts_with("flo_"), "{name}");
    }
    for sample in &scrape.samples {
        if matches!(sample.value, Value::Counter(_)) {
            assert!(sample.metric.ends_with("_total"), "{}", sample.metric);
        }
        let shard = sample.labels.get("shard");
        assert!(shard.is_none_or(|s| s == "0"), "{sample:?}");
    }
}

#[test]
fn healthz_and_readyz_answer_200_once_the_server_is_ready() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let health = get(http, "/healthz", None);
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let ready = get(http, "/readyz", None);
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    assert_eq!(get(http, "/nowhere", None).status, 404);
}

fn auth_server(dir: &Path) -> TestServer {
    let file = dir.join("auth.yaml");
    std::fs::write(&file, AUTH_YAML).unwrap();
    TestServer::start(&dir.join("data"), &["--auth-file", file.to_str().unwrap()])
}

#[test]
fn with_an_auth_file_metrics_and_readyz_want_a_known_bearer_token() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let http = http_addr(&server);
    for path in ["/metrics", "/readyz"] {
        let none = get(http, path, None);
        assert_eq!(none.status, 401, "{path} without a token: {}", none.body);
        assert_eq!(none.header("www-authenticate"), Some("Bearer"));
        assert_eq!(get(http, path, Some("not-a-token")).status, 401, "{path}");
        assert_eq!(get(http, path, Some(TOKEN)).status, 200, "{path}");
    }
    assert_eq!(
        get(http, "/healthz", None).status,
        200,
        "healthz stays open"
    );
    let scrape = scrape(http, Some(TOKEN));
    assert_eq!(total(&scrape, "flo_http_auth_denials_total", &[]), 4.0);
}

#[test]
fn http_off_serves_no_http_and_says_so() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--http", "off"]);
    assert_eq!(server.http, None);
    assert!(
        server.ready_line.contains(", http off,"),
        "{}",
        server.ready_line
    );
}

#[test]
fn a_taken_http_port_fails_the_start_naming_the_address() {
    let dir = temp_dir();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let refused = expect_refusal(dir.path(), &["--http", &addr]);
    assert!(refused.stderr.contains(&addr), "{}", refused.stderr);
    assert!(refused.stderr.contains("--http"), "{}", refused.stderr);
}

#[test]
fn bad_http_requests_are_answered_and_the_server_goes_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let http = http_addr(&server);
    // Not HTTP at all, a header beyond the bound, a method no endpoint takes.
    let garbage = http_raw(http, b"\x00\x01 not http\r\n\r\n");
    assert!(garbage.is_err() || garbage.is_ok_and(|a| a.status == 400));
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(64 << 10)
    );
    let big = http_raw(http, huge.as_bytes());
    assert!(big.is_err() || big.is_ok_and(|a| a.status == 431 || a.status == 400));
    let post = http_raw(
        http,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .expect("an answer");
    assert_eq!(post.status, 405);
    assert_eq!(get(http, "/healthz", None).status, 200);
    let mut client = server.client();
    client
        .kv_put("still", b"serving", PutOptions::default())
        .expect("the shards serve on");
}
