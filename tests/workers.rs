//! Workers end to end at the protocol level (the SDK's blocking `Client`): registry,
//! long-poll across shards, leases, reports, retries, expiry, labels, priority, drain,
//! health, and restarts (spec `flo-workers.md`, worker sections of `flo-actions.md`).

mod common;

use common::{TestServer, temp_dir, user_action, wait_until};
use flo::protocol::{ErrorCode, RunStatus, TaskAssignment, WorkerSpec, WorkerStatus, WorkerType};
use flo::{Client, Error, FailMode, InvokeOptions, TaskRef};
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn worker(client: &mut Client, id: &str, actions: &[&str], labels: Option<&str>) {
    client
        .register_worker(WorkerSpec {
            namespace: String::new(),
            worker_id: id.into(),
            worker_type: WorkerType::Action,
            max_concurrency: None,
            processes: actions.iter().map(|a| a.to_string()).collect(),
            metadata: None,
            machine_id: None,
            labels: labels.map(str::to_string),
        })
        .expect("register worker");
}

fn await_one(client: &mut Client, id: &str, action: &str, block_ms: u64) -> Option<TaskAssignment> {
    let mut tasks = client
        .await_tasks(id, &[action], 1, block_ms)
        .expect("await");
    assert!(tasks.len() <= 1, "asked for one task, got {}", tasks.len());
    tasks.pop()
}

fn server_code(e: Error) -> ErrorCode {
    match e {
        Error::Server(v) => v.code,
        other => panic!("expected a server error, got {other}"),
    }
}

#[test]
fn a_worker_completes_a_task_and_the_run_records_its_result() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "process-order", 30_000, 3, 1000);
    worker(&mut c, "w1", &["process-order"], None);
    let run_id = c
        .invoke(
            "process-order",
            br#"{"order_id":"o-1"}"#,
            InvokeOptions::default(),
        )
        .unwrap();
    let task = await_one(&mut c, "w1", "process-order", 5000).expect("a task");
    assert_eq!(task.task_id, run_id);
    assert_eq!(task.action, "process-order");
    assert_eq!(task.attempt, 1);
    assert_eq!(task.payload, br#"{"order_id":"o-1"}"#);
    assert_eq!(c.run(&run_id).unwrap().status, RunStatus::Running);
    c.complete_task(
        "w1",
        &TaskRef::from(&task),
        br#"{"status":"done"}"#,
        Some("approved"),
    )
    .unwrap();
    let run = c.run(&run_id).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.output.as_deref(), Some(&br#"{"status":"done"}"#[..]));
    assert_eq!(run.outcome.as_deref(), Some("approved"));
    assert!(wait_until(Duration::from_secs(5), || {
        c.worker("w1").unwrap().tasks_completed == 1
    }));
    let info = c.worker("w1").unwrap();
    assert_eq!(info.processes[0].run_count, 1);
    assert!(info.processes[0].last_run_at_ms.is_some());
    // A completed task is never offered again.
    assert!(await_one(&mut c, "w1", "process-order", 0).is_none());
}

#[test]
fn a_waiting_worker_receives_tasks_from_every_shard() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    let addr = server.addr;
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(addr).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < 40 && Instant::now() < deadline {
            for task in c.await_tasks("w1", &["job"], 8, 2000).unwrap() {
                c.complete_task("w1", &TaskRef::from(&task), b"ok", None)
                    .unwrap();
                got.push(task.task_id);
            }
        }
        got
    });
    std::thread::sleep(Duration::from_millis(200));
    // Idempotency keys give ids that hash over both shards (plain ids are handed out by
    // the shard the client is connected to).
    let mut ids = HashSet::new();
    for i in 0..40 {
        let opts = InvokeOptions {
            idempotency_key: Some(format!("k-{i}")),
            ..Default::default()
        };
        ids.insert(c.invoke("job", format!("{i}").as_bytes(), opts).unwrap());
    }
    let got: HashSet<String> = waiter.join().unwrap().into_iter().collect();
    assert_eq!(got, ids, "every task delivered exactly once");
    let shards: HashSet<u32> = ids
        .iter()
        .map(|id| flo_shard_of("default", id, 2))
        .collect();
    assert_eq!(shards.len(), 2, "the tasks lived on both shards");
}

fn flo_shard_of(namespace: &str, key: &str, shards: u32) -> u32 {
    flo_engine::hash::Partitioning::new(flo_engine::hash::PARTITIONS_DEFAULT, shards)
        .shard_of(namespace, key)
}

#[test]
fn a_failure_with_retry_comes_back_as_the_next_attempt_after_backoff() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    user_action(&mut c, "flaky", 30_000, 2, 1000);
    worker(&mut c, "w1", &["flaky"], None);
    let run_id = c.invoke("flaky", b"{}", InvokeOptions::default()).unwrap();
    let task = await_one(&mut c, "w1", "flaky", 5000).unwrap();
    let run = c
        .fail_task("w1", &TaskRef::from(&task), "temporary", FailMode::Retry)
        .unwrap();
    assert_eq!(run.status, RunStatus::Pending);
    assert_eq!(run.attempt, 2);
    assert_eq!(run.error.as_deref(), Some("temporary"));
    // Backoff: not offered before retry_delay_ms.
    assert!(await_one(&mut c, "w1", "flaky", 300).is_none());
    c.advance_clock(1000).unwrap();
    let task = await_one(&mut c, "w1", "flaky", 5000).expect("attempt 2");
    assert_eq!((task.task_id.as_str(), task.attempt), (run_id.as_str(), 2));
    // Second failure: backoff doubles.
    c.fail_task("w1", &TaskRef::from(&task), "again", FailMode::Retry)
        .unwrap();
    c.advance_clock(1000).unwrap();
    assert!(await_one(&mut c, "w1", "flaky", 300).is_none());
    c.advance_clock(1000).unwrap();
    let task = await_one(&mut c, "w1", "flaky", 5000).expect("attempt 3");
    assert_eq!(task.attempt, 3);
    // Retries exhausted (max_retries 2): failed and dead-lettered.
    let run = c
        .fail_task("w1", &TaskRef::from(&task), "still broken", FailMode::Retry)
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.dead_lettered);
    let (dlq, _) = c.list_runs("flaky", None, true, None).unwrap();
    assert_eq!(dlq.len(), 1);
    assert!(wait_until(Duration::from_secs(5), || {
        c.worker("w1").unwrap().tasks_failed == 3
    }));
}

#[test]
fn failures_without_retry_are_final() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "strict", 30_000, 3, 1000);
    worker(&mut c, "w1", &["strict"], None);
    c.invoke("strict", b"1", InvokeOptions::default()).unwrap();
    c.invoke("strict", b"2", InvokeOptions::default()).unwrap();
    let mut tasks = c.await_tasks("w1", &["strict"], 2, 5000).unwrap();
    while tasks.len() < 2 {
        tasks.extend(c.await_tasks("w1", &["strict"], 1, 5000).unwrap());
    }
    let run = c
        .fail_task(
            "w1",
            &TaskRef::from(&tasks[0]),
            "invalid input",
            FailMode::NoRetry,
        )
        .unwrap();
    assert_eq!((run.status, run.dead_lettered), (RunStatus::Failed, true));
    let run = c
        .fail_task(
            "w1",
            &TaskRef::from(&tasks[1]),
            "over limit",
            FailMode::NonRetryable,
        )
        .unwrap();
    assert_eq!((run.status, run.dead_lettered), (RunStatus::Failed, false));
    assert_eq!(run.error.as_deref(), Some("over limit"));
}

#[test]
fn an_expired_lease_is_a_failed_attempt_and_the_task_goes_to_another_worker() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    user_action(&mut c, "slow", 1000, 1, 500);
    worker(&mut c, "w1", &["slow"], None);
    worker(&mut c, "w2", &["slow"], None);
    let run_id = c.invoke("slow", b"{}", InvokeOptions::default()).unwrap();
    let first = await_one(&mut c, "w1", "slow", 5000).unwrap();
    c.advance_clock(1000).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        c.run(&run_id).unwrap().status == RunStatus::Pending
    }));
    let run = c.run(&run_id).unwrap();
    assert_eq!(run.attempt, 2);
    assert!(
        run.error.unwrap().contains("lease expired"),
        "error says why"
    );
    // The late report of the first worker is refused.
    let err = c
        .complete_task("w1", &TaskRef::from(&first), b"late", None)
        .unwrap_err();
    assert_eq!(server_code(err), ErrorCode::Conflict);
    c.advance_clock(500).unwrap();
    let second = await_one(&mut c, "w2", "slow", 5000).expect("re-delivered");
    assert_eq!(
        (second.task_id.as_str(), second.attempt),
        (run_id.as_str(), 2)
    );
    // Attempt 2 expires too: retries exhausted → timed out, dead-lettered.
    c.advance_clock(1000).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        c.run(&run_id).unwrap().status == RunStatus::TimedOut
    }));
    assert!(c.run(&run_id).unwrap().dead_lettered);
}

#[test]
fn touch_keeps_a_long_task_leased() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    user_action(&mut c, "report", 1000, 0, 100);
    worker(&mut c, "w1", &["report"], None);
    let run_id = c.invoke("report", b"{}", InvokeOptions::default()).unwrap();
    let task = await_one(&mut c, "w1", "report", 5000).unwrap();
    for _ in 0..5 {
        c.advance_clock(800).unwrap();
        let expires = c.touch_task("w1", &TaskRef::from(&task), 1000).unwrap();
        assert!(expires > task.lease_expires_at_ms);
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(c.run(&run_id).unwrap().status, RunStatus::Running);
    c.complete_task("w1", &TaskRef::from(&task), b"done", None)
        .unwrap();
    assert_eq!(c.run(&run_id).unwrap().status, RunStatus::Completed);
    // Touching or completing by another worker is refused.
    let err = c.touch_task("w2", &TaskRef::from(&task), 1000).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::Conflict);
}

#[test]
fn a_drained_worker_gets_no_new_task() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    let addr = server.addr;
    let waiting = std::thread::spawn(move || {
        let mut c = Client::connect(addr).unwrap();
        let start = Instant::now();
        let tasks = c.await_tasks("w1", &["job"], 1, 20_000).unwrap();
        (tasks.len(), start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let info = c.drain_worker("w1").unwrap();
    assert_eq!(info.status, WorkerStatus::Draining);
    let (n, waited) = waiting.join().unwrap();
    assert_eq!(n, 0);
    assert!(
        waited < Duration::from_secs(10),
        "the open await was answered at drain"
    );
    c.invoke("job", b"{}", InvokeOptions::default()).unwrap();
    assert!(await_one(&mut c, "w1", "job", 500).is_none());
    // Draining is sticky.
    assert_eq!(c.heartbeat("w1", 0).unwrap(), WorkerStatus::Draining);
    c.deregister_worker("w1").unwrap();
    let err = c.worker("w1").unwrap_err();
    assert_eq!(server_code(err), ErrorCode::NotFound);
}

#[test]
fn labelled_tasks_go_only_to_matching_workers() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "render", 30_000, 3, 1000);
    worker(
        &mut c,
        "small",
        &["render"],
        Some(r#"{"gpu":true,"vram_gb":16}"#),
    );
    worker(
        &mut c,
        "big",
        &["render"],
        Some(r#"{"gpu":true,"vram_gb":24,"region":"us-east"}"#),
    );
    let opts = InvokeOptions {
        labels: Some(r#"{"gpu":true,"vram_gb":24}"#.into()),
        ..Default::default()
    };
    let run_id = c.invoke("render", b"{}", opts).unwrap();
    assert!(await_one(&mut c, "small", "render", 300).is_none());
    let task = await_one(&mut c, "big", "render", 5000).expect("matching worker");
    assert_eq!(task.task_id, run_id);
    // A task without labels goes to any worker.
    let plain = c.invoke("render", b"{}", InvokeOptions::default()).unwrap();
    assert_eq!(
        await_one(&mut c, "small", "render", 5000).unwrap().task_id,
        plain
    );
}

#[test]
fn higher_priority_tasks_are_leased_first() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    for (input, priority) in [("low", 1u8), ("high", 200), ("mid", 50), ("default", 10)] {
        let opts = InvokeOptions {
            priority: Some(priority),
            ..Default::default()
        };
        c.invoke("job", input.as_bytes(), opts).unwrap();
    }
    let order: Vec<String> = (0..4)
        .map(|_| {
            let t = await_one(&mut c, "w1", "job", 5000).unwrap();
            String::from_utf8(t.payload).unwrap()
        })
        .collect();
    assert_eq!(order, ["high", "mid", "default", "low"]);
}

#[test]
fn a_silent_worker_becomes_unhealthy_and_a_heartbeat_recovers_it() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    assert_eq!(c.worker("w1").unwrap().status, WorkerStatus::Active);
    c.advance_clock(85_000).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_ne!(c.worker("w1").unwrap().status, WorkerStatus::Unhealthy);
    c.advance_clock(6_000).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        c.worker("w1").unwrap().status == WorkerStatus::Unhealthy
    }));
    assert_eq!(c.heartbeat("w1", 2).unwrap(), WorkerStatus::Active);
    assert_eq!(c.worker("w1").unwrap().current_load, 2);
    // Answered and shown `active` at load 0 too (heartbeat → active, the spec's diagram).
    assert_eq!(c.heartbeat("w1", 0).unwrap(), WorkerStatus::Active);
    let info = c.worker("w1").unwrap();
    assert_eq!((info.status, info.current_load), (WorkerStatus::Active, 0));
    let list = c.list_workers().unwrap();
    assert_eq!(list.len(), 1);
}

#[test]
fn bad_worker_requests_get_clear_errors() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    let err = c.await_tasks("ghost", &["job"], 1, 0).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::NotFound);
    worker(&mut c, "w1", &["job"], None);
    let err = c.await_tasks("w1", &["other"], 1, 0).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::NotFound, "unknown action");
    user_action(&mut c, "other", 30_000, 3, 1000);
    let err = c.await_tasks("w1", &["other"], 1, 0).unwrap_err();
    let Error::Server(e) = err else { panic!() };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(
        e.message.contains("not registered for action"),
        "{}",
        e.message
    );
    let err = c.await_tasks("w1", &["job"], 0, 0).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::BadRequest);
    c.invoke("job", b"{}", InvokeOptions::default()).unwrap();
    let task = await_one(&mut c, "w1", "job", 5000).unwrap();
    let err = c
        .complete_task("w2", &TaskRef::from(&task), b"", None)
        .unwrap_err();
    let Error::Server(e) = err else { panic!() };
    assert_eq!(e.code, ErrorCode::Conflict);
    // The refusal names the reporting worker, never the one holding the lease.
    assert!(
        e.message.contains("not leased to worker \"w2\"") && !e.message.contains("w1"),
        "{}",
        e.message
    );
    let wrong_action = TaskRef {
        action: "other",
        ..TaskRef::from(&task)
    };
    let err = c.complete_task("w1", &wrong_action, b"", None).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::BadRequest);
    let stale = TaskRef {
        attempt: Some(7),
        ..TaskRef::from(&task)
    };
    let err = c.complete_task("w1", &stale, b"", None).unwrap_err();
    assert_eq!(server_code(err), ErrorCode::Conflict);
    c.complete_task("w1", &TaskRef::from(&task), b"", None)
        .unwrap();
    let err = c
        .complete_task("w1", &TaskRef::from(&task), b"", None)
        .unwrap_err();
    assert_eq!(server_code(err), ErrorCode::Conflict, "completed twice");
}

#[test]
fn leases_and_completions_survive_kill_9() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "job", 1500, 3, 100);
    worker(&mut c, "w1", &["job"], None);
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(
            c.invoke("job", format!("{i}").as_bytes(), InvokeOptions::default())
                .unwrap(),
        );
    }
    let mut leased = Vec::new();
    while leased.len() < 10 {
        leased.extend(c.await_tasks("w1", &["job"], 10, 5000).unwrap());
    }
    let (done, held) = leased.split_at(6);
    for task in done {
        c.complete_task("w1", &TaskRef::from(task), b"ok", None)
            .unwrap();
    }
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for task in done {
        assert_eq!(c.run(&task.task_id).unwrap().status, RunStatus::Completed);
    }
    for task in held {
        assert_eq!(c.run(&task.task_id).unwrap().status, RunStatus::Running);
    }
    // Workers register again after a restart; leased tasks come back once their lease
    // expired, completed ones never.
    worker(&mut c, "w2", &["job"], None);
    let mut again = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while again.len() < held.len() && Instant::now() < deadline {
        for task in c.await_tasks("w2", &["job"], 10, 1000).unwrap() {
            assert_eq!(task.attempt, 2, "a re-offered task is the next attempt");
            c.complete_task("w2", &TaskRef::from(&task), b"ok", None)
                .unwrap();
            again.insert(task.task_id);
        }
    }
    let held_ids: HashSet<String> = held.iter().map(|t| t.task_id.clone()).collect();
    if again != held_ids {
        let runs: Vec<_> = held.iter().map(|t| c.run(&t.task_id)).collect();
        panic!(
            "re-offered {again:?}, expected {held_ids:?}; the held runs: {runs:?}; server stderr:\n{}",
            server.stderr()
        );
    }
    assert!(c.await_tasks("w2", &["job"], 10, 500).unwrap().is_empty());
    for id in &ids {
        assert_eq!(c.run(id).unwrap().status, RunStatus::Completed);
    }
}

// ---- review: suspected bugs (each test states the expected behaviour) ----

/// A batch of assignments larger than one frame (4 MiB) must not be leased and then lost:
/// inputs may be 1 MiB each and an await may ask for up to 1024 tasks.
#[test]
fn review_a_batch_larger_than_a_frame_is_still_delivered() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "big", 30_000, 3, 1000);
    worker(&mut c, "w1", &["big"], None);
    let payload = format!("\"{}\"", "x".repeat(1_000_000));
    let mut ids = HashSet::new();
    for _ in 0..5 {
        ids.insert(
            c.invoke("big", payload.as_bytes(), InvokeOptions::default())
                .unwrap(),
        );
    }
    let mut got = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < ids.len() && Instant::now() < deadline {
        match c.await_tasks("w1", &["big"], 8, 1000) {
            Ok(tasks) => got.extend(tasks.into_iter().map(|t| t.task_id)),
            Err(e) => {
                let stuck: Vec<RunStatus> =
                    ids.iter().map(|id| c.run(id).unwrap().status).collect();
                panic!(
                    "await failed: {e}; the tasks it leased are now {stuck:?} and offered to nobody"
                );
            }
        }
    }
    assert_eq!(got, ids);
}

/// A non-blocking await (`--block 0`) must return a task that is already queued, whichever
/// shard holds it.
#[test]
fn review_a_non_blocking_await_sees_tasks_on_other_shards() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    let home = flo_shard_of("default", "w1", 2);
    let key = (0..)
        .map(|i| format!("k-{i}"))
        .find(|k| flo_shard_of("default", &format!("job:{k}"), 2) != home)
        .unwrap();
    let opts = InvokeOptions {
        idempotency_key: Some(key),
        ..Default::default()
    };
    let run_id = c.invoke("job", b"{}", opts).unwrap();
    assert_ne!(flo_shard_of("default", &run_id, 2), home);
    let mut got = None;
    for _ in 0..10 {
        if let Some(t) = await_one(&mut c, "w1", "job", 0) {
            got = Some(t);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        got.map(|t| t.task_id),
        Some(run_id),
        "10 polls with --block 0 never returned the queued task on the other shard"
    );
}

/// A worker whose connection closed while its await was open (crash, network blip, SDK
/// reconnect) must not be leased tasks created afterwards: they should go to a live worker.
#[test]
fn review_tasks_do_not_go_to_an_await_whose_connection_closed() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "dead", &["job"], None);
    worker(&mut c, "live", &["job"], None);
    {
        let mux = flo::MuxClient::connect(server.addr).unwrap();
        let _pending = mux
            .send(flo::protocol::Op::TaskAwait {
                namespace: "default".into(),
                worker_id: "dead".into(),
                actions: vec!["job".into()],
                max_tasks: 10,
                block_ms: 20_000,
                home_only: false,
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        mux.close(); // the worker process dies
    }
    std::thread::sleep(Duration::from_millis(300));
    let run_id = c.invoke("job", b"{}", InvokeOptions::default()).unwrap();
    let task = await_one(&mut c, "live", "job", 3000);
    let run = c.run(&run_id).unwrap();
    assert_eq!(
        task.map(|t| t.task_id),
        Some(run_id),
        "the live worker got nothing; the run is {:?} (leased to the closed connection's worker)",
        run.status
    );
}

/// Scheduler state must be the same after recovery as live. Live, a pending task of a
/// deleted action stays queued and is leased once the action is registered again; after a
/// restart in between, `Scheduler::rebuild` skips it (no definition) and it stays pending
/// forever.
#[test]
fn review_a_pending_task_of_a_re_registered_action_is_offered_after_a_restart() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    let run_id = c.invoke("job", b"{}", InvokeOptions::default()).unwrap();
    c.delete_action("job").unwrap();
    server.stop();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    assert_eq!(c.run(&run_id).unwrap().status, RunStatus::Pending);
    let task = await_one(&mut c, "w1", "job", 2000);
    assert_eq!(
        task.map(|t| t.task_id),
        Some(run_id),
        "the pending task is never offered (without the restart it is)"
    );
}

/// Control for the test above: without the restart the task is offered.
#[test]
fn review_control_a_pending_task_of_a_re_registered_action_is_offered_live() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "job", 30_000, 3, 1000);
    let run_id = c.invoke("job", b"{}", InvokeOptions::default()).unwrap();
    c.delete_action("job").unwrap();
    user_action(&mut c, "job", 30_000, 3, 1000);
    worker(&mut c, "w1", &["job"], None);
    let task = await_one(&mut c, "w1", "job", 2000);
    assert_eq!(task.map(|t| t.task_id), Some(run_id));
}

fn worker_of(client: &mut Client, id: &str, actions: &[&str], max_concurrency: u32) {
    client
        .register_worker(WorkerSpec {
            namespace: String::new(),
            worker_id: id.into(),
            worker_type: WorkerType::Action,
            max_concurrency: Some(max_concurrency),
            processes: actions.iter().map(|a| a.to_string()).collect(),
            metadata: None,
            machine_id: None,
            labels: None,
        })
        .expect("register worker");
}

fn await_op(worker_id: &str, action: &str, max_tasks: u32, block_ms: u64) -> flo::protocol::Op {
    flo::protocol::Op::TaskAwait {
        namespace: "default".into(),
        worker_id: worker_id.into(),
        actions: vec![action.into()],
        max_tasks,
        block_ms,
        home_only: false,
    }
}

fn invoke_op(action: &str, input: &str) -> flo::protocol::Op {
    flo::protocol::Op::ActionInvoke(flo::protocol::InvokeSpec {
        namespace: "default".into(),
        action: action.into(),
        input: input.as_bytes().to_vec(),
        priority: None,
        delay_ms: None,
        idempotency_key: None,
        labels: None,
        wait_ms: None,
    })
}

fn tasks_of(reply: Result<flo::protocol::Reply, Error>) -> Vec<TaskAssignment> {
    match reply {
        Ok(flo::protocol::Reply::Tasks(tasks)) => tasks,
        other => panic!("an await answered {other:?}"),
    }
}

/// A worker's load (its heartbeat's `current_load`, plus the tasks handed to it since,
/// minus those it reported) is used when tasks are offered: at its declared concurrency it
/// gets nothing more, and an await held meanwhile is served once a report or a heartbeat
/// frees a slot. One shard: requests pipelined on one connection are taken in order.
#[test]
fn a_worker_at_its_concurrency_gets_no_more_tasks_until_its_load_goes_down() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    let mux = flo::MuxClient::connect(server.addr).unwrap();
    user_action(&mut c, "job", 60_000, 3, 1000);
    worker_of(&mut c, "one-at-a-time", &["job"], 1);
    for i in 0..3 {
        c.invoke(
            "job",
            format!("{{\"n\":{i}}}").as_bytes(),
            Default::default(),
        )
        .unwrap();
    }
    // Five asked for, one slot: one task.
    let first = c.await_tasks("one-at-a-time", &["job"], 5, 5_000).unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(c.worker("one-at-a-time").unwrap().current_load, 1);
    // At its concurrency: nothing, though two tasks wait.
    let none = c.await_tasks("one-at-a-time", &["job"], 5, 300).unwrap();
    assert!(none.is_empty(), "{none:?}");
    // An await held at the concurrency is served once the task in flight is reported.
    let held = mux
        .send(await_op("one-at-a-time", "job", 5, 20_000))
        .unwrap();
    c.complete_task("one-at-a-time", &TaskRef::from(&first[0]), b"{}", None)
        .unwrap();
    let second = tasks_of(held.wait());
    assert_eq!(second.len(), 1, "{second:?}");
    c.complete_task("one-at-a-time", &TaskRef::from(&second[0]), b"{}", None)
        .unwrap();
    // A heartbeat saying the slot is busy holds the next await; one saying it is free
    // releases it.
    assert_eq!(
        c.heartbeat("one-at-a-time", 1).unwrap(),
        WorkerStatus::Active
    );
    assert!(
        c.await_tasks("one-at-a-time", &["job"], 1, 300)
            .unwrap()
            .is_empty()
    );
    let held = mux
        .send(await_op("one-at-a-time", "job", 1, 20_000))
        .unwrap();
    mux.heartbeat("one-at-a-time", 0).unwrap();
    assert_eq!(tasks_of(held.wait()).len(), 1);
}

/// Among workers waiting for tasks, the least loaded is served first (spec
/// `flo-workers.md`: the load "so the server can make load-aware routing decisions").
#[test]
fn among_awaiting_workers_the_least_loaded_is_served_first() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    let mux = flo::MuxClient::connect(server.addr).unwrap();
    user_action(&mut c, "job", 60_000, 3, 1000);
    worker_of(&mut c, "busy", &["job"], 10);
    worker_of(&mut c, "idle", &["job"], 10);
    c.heartbeat("busy", 6).unwrap();
    c.heartbeat("idle", 1).unwrap();
    // The busy worker waits first; the task created after both goes to the idle one.
    let busy = mux.send(await_op("busy", "job", 1, 20_000)).unwrap();
    let idle = mux.send(await_op("idle", "job", 1, 20_000)).unwrap();
    mux.send(invoke_op("job", "{\"n\":1}"))
        .unwrap()
        .wait()
        .unwrap();
    let got = tasks_of(idle.wait());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].payload, b"{\"n\":1}");
    // The next one goes to the busy worker, the only one still waiting.
    mux.send(invoke_op("job", "{\"n\":2}"))
        .unwrap()
        .wait()
        .unwrap();
    let got = tasks_of(busy.wait());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].payload, b"{\"n\":2}");
    assert_eq!(c.worker("idle").unwrap().current_load, 2);
    assert_eq!(c.worker("busy").unwrap().current_load, 7);
}
