//! The SDK's `ActionWorker` against a real server: handlers' results, retries, errors,
//! panics, named outcomes, lease extension, drain and stop (spec `flo-workers.md`).

mod common;

use common::{TestServer, cli_ok, temp_dir, user_action, wait_until};
use flo::protocol::{RunInfo, RunStatus};
use flo::{
    ActionResult, ActionWorker, Client, InvokeOptions, MuxClient, MuxOptions, NonRetryableError,
};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn wait_final(client: &mut Client, run_id: &str) -> RunInfo {
    let run = client.wait_run(run_id, 20_000).expect("wait");
    assert!(run.status.is_final(), "run {run_id} still {:?}", run.status);
    run
}

fn output_json(run: &RunInfo) -> Value {
    serde_json::from_slice(run.output.as_deref().expect("output")).expect("JSON output")
}

#[test]
fn handlers_results_errors_and_outcomes_reach_the_runs() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "process-order", 30_000, 3, 50);
    user_action(&mut c, "validate-order", 30_000, 3, 50);
    user_action(&mut c, "review-order", 30_000, 3, 50);
    user_action(&mut c, "explode", 30_000, 1, 50);
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let calls = flaky_calls.clone();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("orders-1")
        .concurrency(4)
        .action("process-order", move |ctx| {
            let order: Value = ctx.json()?;
            // Fails its first attempt, succeeds on the retry.
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err("payment gateway timed out".into());
            }
            ActionResult::json(&json!({"status": "processed", "order_id": order["order_id"], "attempt": ctx.attempt()}))
        })
        .action("validate-order", |ctx| {
            let order: Value = ctx.json()?;
            if order["amount"].as_f64().unwrap_or(0.0) > 2000.0 {
                return Err(NonRetryableError::new("order amount exceeds $2000 limit").into());
            }
            ActionResult::json(&json!({"valid": true}))
        })
        .action("review-order", |ctx| {
            let order: Value = ctx.json()?;
            let amount = order["amount"].as_f64().unwrap_or(0.0);
            if amount < 100.0 {
                ctx.result("approved", &json!({"decision": "auto-approved"}))
            } else if amount >= 500.0 {
                ctx.result("rejected", &json!({"reason": "amount too high"}))
            } else {
                ctx.result("needs_review", &json!({"note": "manual review required"}))
            }
        })
        .action("explode", |_ctx| panic!("boom in the handler"))
        .spawn()
        .expect("worker starts");

    let retried = c
        .invoke(
            "process-order",
            br#"{"order_id":"o-1"}"#,
            InvokeOptions::default(),
        )
        .unwrap();
    let run = wait_final(&mut c, &retried);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.attempt, 2, "retry then success");
    assert_eq!(
        output_json(&run),
        json!({"status":"processed","order_id":"o-1","attempt":2})
    );

    let rejected = c
        .invoke(
            "validate-order",
            br#"{"amount":5000}"#,
            InvokeOptions::default(),
        )
        .unwrap();
    let run = wait_final(&mut c, &rejected);
    assert_eq!(
        (run.status, run.attempt),
        (RunStatus::Failed, 1),
        "no retry"
    );
    assert!(
        !run.dead_lettered,
        "a non-retryable failure is not dead-lettered"
    );
    assert!(run.error.unwrap().contains("exceeds $2000"));

    for (amount, outcome) in [(50, "approved"), (900, "rejected"), (250, "needs_review")] {
        let input = format!(r#"{{"amount":{amount}}}"#);
        let id = c
            .invoke("review-order", input.as_bytes(), InvokeOptions::default())
            .unwrap();
        let run = wait_final(&mut c, &id);
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(run.outcome.as_deref(), Some(outcome));
    }

    let exploded = c
        .invoke("explode", b"{}", InvokeOptions::default())
        .unwrap();
    let run = wait_final(&mut c, &exploded);
    assert_eq!(
        (run.status, run.attempt),
        (RunStatus::Failed, 2),
        "a panic is retried"
    );
    assert!(run.dead_lettered);
    assert!(run.error.unwrap().contains("boom in the handler"));
    // The worker survived its panicking handler.
    let id = c
        .invoke("review-order", br#"{"amount":1}"#, InvokeOptions::default())
        .unwrap();
    assert_eq!(wait_final(&mut c, &id).status, RunStatus::Completed);

    // Counted on the worker's home shard (a message after each report).
    assert!(
        wait_until(Duration::from_secs(5), || {
            let info = c.worker("orders-1").unwrap();
            (info.tasks_completed, info.tasks_failed) == (5, 4)
        }),
        "{:?}",
        c.worker("orders-1")
    );
    let stats = worker.stop_and_join().unwrap();
    assert_eq!((stats.tasks_completed, stats.tasks_failed), (5, 4));
    // Stopping deregisters the worker.
    assert!(c.worker("orders-1").is_err());
}

#[test]
fn touch_keeps_a_task_that_outlives_its_timeout() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "generate-report", 800, 0, 50);
    let worker = ActionWorker::builder(server.addr)
        .action("generate-report", |ctx| {
            for _ in 0..6 {
                std::thread::sleep(Duration::from_millis(300));
                ctx.touch(800)?;
            }
            ActionResult::json(&json!({"pages": 6}))
        })
        .spawn()
        .unwrap();
    let id = c
        .invoke("generate-report", b"{}", InvokeOptions::default())
        .unwrap();
    let run = wait_final(&mut c, &id);
    assert_eq!(
        (run.status, run.attempt),
        (RunStatus::Completed, 1),
        "{run:?}"
    );
    worker.stop_and_join().unwrap();
}

#[test]
fn stopping_finishes_tasks_in_flight_and_a_drained_worker_leaves() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "slow", 30_000, 0, 50);
    let worker = ActionWorker::builder(server.addr)
        .worker_id("stopper")
        .concurrency(3)
        .action("slow", |_ctx| {
            std::thread::sleep(Duration::from_millis(700));
            Ok(ActionResult::bytes(b"done".to_vec()))
        })
        .spawn()
        .unwrap();
    let ids: Vec<String> = (0..3)
        .map(|_| c.invoke("slow", b"{}", InvokeOptions::default()).unwrap())
        .collect();
    assert!(wait_until(Duration::from_secs(10), || {
        ids.iter()
            .all(|id| c.run(id).unwrap().status == RunStatus::Running)
    }));
    let stats = worker.stop_and_join().unwrap();
    assert_eq!(
        stats.tasks_completed, 3,
        "in-flight tasks finished before the stop"
    );
    for id in &ids {
        assert_eq!(c.run(id).unwrap().status, RunStatus::Completed);
    }

    // Drained from the CLI: the worker stops taking tasks and leaves on its own.
    let worker = ActionWorker::builder(server.addr)
        .worker_id("drained")
        .heartbeat_interval(Duration::from_millis(100))
        .action("slow", |_ctx| Ok(ActionResult::empty()))
        .spawn()
        .unwrap();
    let addr = server.addr_string();
    let out = cli_ok(
        &addr,
        &["--json", "worker", "drain", "--worker-id", "drained"],
    );
    assert!(out.contains("draining"), "{out}");
    assert!(wait_until(Duration::from_secs(10), || worker.is_finished()));
    let stats = worker.join().unwrap();
    assert!(stats.drained);
    let pending = c.invoke("slow", b"{}", InvokeOptions::default()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.run(&pending).unwrap().status, RunStatus::Pending);
}

/// The worker's `action_timeout` (spec `flo-workers.md`, default 5 min): a handler still
/// running past it fails its attempt, which is retried per the action's policy, and the
/// worker goes on taking tasks while that handler is left to finish in the background.
#[test]
fn a_handler_past_the_action_timeout_fails_its_attempt_and_the_worker_goes_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "slow", 60_000, 3, 50);
    user_action(&mut c, "quick", 60_000, 3, 50);
    // The first attempt's handler blocks until the test ends (it never finishes in time).
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let worker = ActionWorker::builder(server.addr)
        .worker_id("timed")
        .concurrency(1)
        .action_timeout(Duration::from_millis(1_000))
        .action("slow", move |ctx| {
            if ctx.attempt() == 1 {
                let held = held.lock().unwrap_or_else(|e| e.into_inner());
                let _ = held.recv_timeout(Duration::from_secs(120));
            }
            ActionResult::json(&json!({"attempt": ctx.attempt()}))
        })
        .action("quick", |_ctx| Ok(ActionResult::bytes("done")))
        .spawn()
        .expect("worker starts");

    let slow = c.invoke("slow", b"{}", InvokeOptions::default()).unwrap();
    let run = wait_final(&mut c, &slow);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert!(run.attempt >= 2, "the stuck attempt failed: {run:?}");
    assert_eq!(output_json(&run)["attempt"], json!(run.attempt));
    // One slot, its first handler still stuck: the worker takes and completes more.
    let quick = c.invoke("quick", b"{}", InvokeOptions::default()).unwrap();
    let run = wait_final(&mut c, &quick);
    assert_eq!(
        (run.status, run.output.as_deref()),
        (RunStatus::Completed, Some(&b"done"[..]))
    );
    let stats = worker.stats();
    assert!(stats.tasks_timed_out >= 1, "{stats:?}");
    assert!(stats.tasks_failed >= 1, "{stats:?}");
    // The stuck handler returns at last: its result is ignored, the run stays as it was.
    release.send(()).unwrap();
    let stats = worker.stop_and_join().unwrap();
    assert_eq!(stats.reports_lost, 0, "{stats:?}");
    let run = c.run(&slow).unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");

    // A zero timeout is refused when the worker is built.
    let refused = ActionWorker::builder(server.addr)
        .action_timeout(Duration::ZERO)
        .action("quick", |_ctx| Ok(ActionResult::empty()))
        .build();
    assert!(matches!(refused, Err(flo::WorkerError::Config(e)) if e.contains("action timeout")));
}

/// `spawn_on_every_shard`: a worker per shard, each homed on and connected to its shard,
/// takes that shard's tasks and no other's; tasks invoked on every shard all complete.
#[test]
fn workers_spawned_on_every_shard_each_take_their_own_shards_tasks() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    user_action(&mut c, "resize", 30_000, 3, 50);
    let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let record = seen.clone();
    let workers = ActionWorker::builder(server.addr)
        .worker_id("resizer")
        .concurrency(4)
        .action("resize", move |ctx| {
            let taken = (ctx.worker_id().to_string(), ctx.task_id().to_string());
            record.lock().unwrap().push(taken);
            ActionResult::json(&json!({"resized": true}))
        })
        .spawn_on_every_shard()
        .expect("workers start");
    let map = c.shard_map().unwrap();
    let homes: Vec<Option<u32>> = workers
        .iter()
        .map(|w| map.shard_of("default", w.worker_id()))
        .collect();
    assert_eq!(homes, [Some(0), Some(1)], "one worker homed on each shard");

    let mut runs = Vec::new();
    for shard in 0..2 {
        let mut on = Client::connect_on_shard(server.addr, None, shard).unwrap();
        for n in 0..10 {
            let input = format!(r#"{{"image":{n}}}"#);
            let run_id = on
                .invoke("resize", input.as_bytes(), InvokeOptions::default())
                .unwrap();
            assert_eq!(map.shard_of("default", &run_id), Some(shard));
            runs.push(run_id);
        }
    }
    for run_id in &runs {
        let run = wait_final(&mut c, run_id);
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), runs.len(), "each task taken once");
    for (worker, task) in &seen {
        assert_eq!(
            map.shard_of("default", worker),
            map.shard_of("default", task),
            "worker {worker} took task {task} of another shard"
        );
    }
    for worker in workers {
        let stats = worker.stop_and_join().unwrap();
        assert_eq!(stats.tasks_completed, 10, "{stats:?}");
    }
}

/// `MuxOptions::shard`: the connection lands on the shard asked for; a shard the server
/// does not have is a clear error.
#[test]
fn a_mux_client_lands_on_the_shard_it_asks_for() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    for shard in [0, 1, 1, 0] {
        let options = MuxOptions {
            shard: Some(shard),
            ..MuxOptions::default()
        };
        let mux = MuxClient::connect_with(server.addr, options).unwrap();
        assert_eq!(mux.shard(), Some(shard));
    }
    let options = MuxOptions {
        shard: Some(2),
        ..MuxOptions::default()
    };
    match MuxClient::connect_with(server.addr, options) {
        Err(e) => assert!(e.to_string().contains("no shard 2"), "{e}"),
        Ok(_) => panic!("landed on a shard the server does not have"),
    }
}
