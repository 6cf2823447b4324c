use super::*;
use crate::NonRetryableError;
use crate::fake_server::{FakeServer, Inner};
use crate::handler::ActionResult;
use flo_protocol::Op;
use std::sync::atomic::AtomicUsize;

const WAIT: Duration = Duration::from_secs(10);

fn builder(fake: &FakeServer) -> ActionWorkerBuilder {
    ActionWorker::builder(fake.addr).worker_id("w-1")
}

fn echo(ctx: &ActionContext) -> HandlerResult {
    Ok(ActionResult::bytes(ctx.input().to_vec()))
}

/// Waits for the worker's counts to satisfy `cond`.
fn wait_stats(worker: &RunningWorker, cond: impl Fn(&WorkerStats) -> bool) -> WorkerStats {
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = worker.stats();
        if cond(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "timed out; stats: {stats:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Completion {
    task_id: String,
    attempt: Option<u32>,
    result: Vec<u8>,
    outcome: Option<String>,
}

fn completions(inner: &Inner) -> Vec<Completion> {
    inner
        .requests
        .iter()
        .filter_map(|op| match op {
            Op::TaskComplete {
                task_id,
                attempt,
                result,
                outcome,
                ..
            } => Some(Completion {
                task_id: task_id.clone(),
                attempt: *attempt,
                result: result.clone(),
                outcome: outcome.clone(),
            }),
            _ => None,
        })
        .collect()
}

fn failures(inner: &Inner) -> Vec<(String, String, bool, bool)> {
    inner
        .requests
        .iter()
        .filter_map(|op| match op {
            Op::TaskFail {
                task_id,
                error,
                retry,
                non_retryable,
                ..
            } => Some((task_id.clone(), error.clone(), *retry, *non_retryable)),
            _ => None,
        })
        .collect()
}

fn position(inner: &Inner, pred: impl Fn(&Op) -> bool) -> Option<usize> {
    inner.requests.iter().position(pred)
}

#[test]
fn defaults_follow_the_spec() {
    let worker = ActionWorker::builder("127.0.0.1:9000")
        .action("echo", echo)
        .build()
        .unwrap();
    let o = worker.options();
    assert_eq!(o.addr, "127.0.0.1:9000");
    assert_eq!(o.namespace, "default");
    assert_eq!(o.concurrency, 10);
    assert_eq!(o.block_ms, 30_000);
    assert_eq!(o.heartbeat_interval, Duration::from_secs(30));
    assert_eq!(o.machine_id, hostname());
    let (host, hex) = o.worker_id.rsplit_once('-').unwrap();
    assert_eq!(Some(host.to_string()), hostname().or(Some("worker".into())));
    assert!(hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(worker.actions(), ["echo"]);
}

#[test]
fn generated_worker_ids_differ() {
    assert_ne!(generate_worker_id(), generate_worker_id());
}

#[test]
fn invalid_settings_are_refused_at_build() {
    fn refused(builder: ActionWorkerBuilder) -> String {
        match builder.build() {
            Err(WorkerError::Config(message)) => message,
            Ok(_) => panic!("expected a configuration error"),
            Err(e) => panic!("expected a configuration error, got {e}"),
        }
    }
    let base = || ActionWorker::builder("127.0.0.1:9000");
    assert!(refused(base()).contains("no action"));
    assert!(refused(base().action("a", echo).action("a", echo)).contains("two handlers"));
    assert!(refused(base().action("", echo)).contains("action name"));
    assert!(refused(base().action("a", echo).concurrency(0)).contains("concurrency"));
    assert!(refused(base().action("a", echo).concurrency(5_000)).contains("concurrency"));
    assert!(refused(base().action("a", echo).block_ms(300_001)).contains("block_ms"));
    assert!(refused(base().action("a", echo).worker_id("")).contains("worker id"));
    assert!(refused(base().action("a", echo).namespace("")).contains("namespace"));
    assert!(refused(base().action("a", echo).labels("[1]")).contains("JSON object"));
    assert!(refused(base().action("a", echo).labels(r#"{"gpu":{"n":1}}"#)).contains("flat"));
    assert!(refused(base().action("a", echo).metadata("{")).contains("metadata"));
    let fine = base()
        .action("a", echo)
        .labels(r#"{"gpu":true,"vram_gb":24,"region":"eu"}"#)
        .metadata(r#"{"version":"1.2"}"#)
        .build();
    assert!(fine.is_ok());
}

#[test]
fn spawn_fails_when_the_server_is_unreachable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let result = ActionWorker::builder(port).action("a", echo).spawn();
    assert!(matches!(result, Err(WorkerError::Client(Error::Io(_)))));
}

#[test]
fn worker_registers_runs_tasks_and_reports_completions() {
    let fake = FakeServer::start();
    let worker = builder(&fake)
        .namespace("default")
        .machine_id("host-01")
        .concurrency(2)
        .labels(r#"{"gpu":true}"#)
        .action("echo", echo)
        .action("other", echo)
        .spawn()
        .unwrap();
    let spec = fake
        .with(|s| s.workers.get("w-1").cloned())
        .expect("registered");
    assert_eq!(spec.processes, ["echo", "other"]);
    assert_eq!(spec.max_concurrency, Some(2));
    assert_eq!(spec.labels.as_deref(), Some(r#"{"gpu":true}"#));
    assert_eq!(spec.machine_id.as_deref(), Some("host-01"));
    assert_eq!(spec.worker_type, WorkerType::Action);

    let ids: Vec<String> = (0..5)
        .map(|i| fake.push_task("echo", &format!(r#"{{"n":{i}}}"#)))
        .collect();
    wait_stats(&worker, |s| s.tasks_completed == 5);
    let mut done = fake.with(|s| completions(s));
    done.sort();
    for (i, done) in done.into_iter().enumerate() {
        let expected = Completion {
            task_id: ids[i].clone(),
            attempt: Some(1),
            result: format!(r#"{{"n":{i}}}"#).into_bytes(),
            outcome: None,
        };
        assert_eq!(done, expected);
    }
    let polls_ok = fake.with(|s| {
        s.requests.iter().all(|op| match op {
            Op::TaskAwait {
                actions,
                max_tasks,
                block_ms,
                ..
            } => actions == &["echo", "other"] && *max_tasks <= 2 && *block_ms == 30_000,
            _ => true,
        })
    });
    assert!(
        polls_ok,
        "every poll names both actions and asks for free slots only"
    );

    let stats = worker.stop_and_join().unwrap();
    assert_eq!(stats.tasks_received, 5);
    assert_eq!(stats.tasks_completed, 5);
    assert_eq!(
        (stats.tasks_failed, stats.reports_lost, stats.in_flight),
        (0, 0, 0)
    );
    fake.with(|s| {
        let drain = position(s, |op| matches!(op, Op::WorkerDrain { .. }));
        let deregister = position(s, |op| matches!(op, Op::WorkerDeregister { .. }));
        assert!(
            drain.is_some() && drain < deregister,
            "drained, then deregistered"
        );
        assert!(s.workers.is_empty());
    });
}

#[test]
fn handler_errors_and_panics_are_reported_as_failures() {
    let fake = FakeServer::start();
    let worker = builder(&fake)
        .action("flaky", |ctx| match ctx.input() {
            b"retry" => Err("the gateway timed out".into()),
            b"fatal" => Err(NonRetryableError::new("amount exceeds $2000").into()),
            _ => panic!("boom"),
        })
        .spawn()
        .unwrap();
    let retry = fake.push_task("flaky", "retry");
    let fatal = fake.push_task("flaky", "fatal");
    let panics = fake.push_task("flaky", "panic");
    wait_stats(&worker, |s| s.tasks_failed == 3);
    let mut failed = fake.with(|s| failures(s));
    failed.sort();
    let expected = [
        (fatal, "amount exceeds $2000".to_string(), false, true),
        (
            panics,
            "the action handler panicked: boom".to_string(),
            true,
            false,
        ),
        (retry, "the gateway timed out".to_string(), true, false),
    ];
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(failed, expected);
    let stats = worker.stop_and_join().unwrap();
    assert_eq!(stats.tasks_completed, 0);
}

#[test]
fn named_outcome_and_touch_reach_the_server() {
    let fake = FakeServer::start();
    let worker = builder(&fake)
        .action("review-order", |ctx| {
            let expires = ctx.touch(5_000)?;
            assert_eq!(ctx.lease_expires_at_ms(), expires);
            ctx.result(
                "approved",
                &serde_json::json!({"decision": "auto-approved"}),
            )
        })
        .spawn()
        .unwrap();
    let task_id = fake.push_task("review-order", r#"{"amount":50}"#);
    wait_stats(&worker, |s| s.tasks_completed == 1);
    fake.with(|s| {
        let done = completions(s);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].task_id, task_id);
        assert_eq!(done[0].outcome.as_deref(), Some("approved"));
        let touched = s.requests.iter().any(|op| {
            matches!(op, Op::TaskTouch { task_id: t, extend_ms: 5_000, worker_id, .. }
                if *t == task_id && worker_id == "w-1")
        });
        assert!(touched);
    });
    worker.stop_and_join().unwrap();
}

#[test]
fn concurrency_bounds_the_tasks_in_flight() {
    let fake = FakeServer::start();
    for _ in 0..12 {
        fake.push_task("slow", "{}");
    }
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let worker = builder(&fake)
        .concurrency(3)
        .action("slow", move |_| {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(30));
            r.fetch_sub(1, Ordering::SeqCst);
            Ok(ActionResult::empty())
        })
        .spawn()
        .unwrap();
    wait_stats(&worker, |s| s.tasks_completed == 12);
    assert_eq!(most.load(Ordering::SeqCst), 3, "three at once, never more");
    let asked_too_much = fake.with(|s| {
        s.requests
            .iter()
            .any(|op| matches!(op, Op::TaskAwait { max_tasks, .. } if *max_tasks > 3))
    });
    assert!(!asked_too_much);
    worker.stop_and_join().unwrap();
}

#[test]
fn stop_finishes_tasks_in_flight_before_deregistering() {
    let fake = FakeServer::start();
    let (open, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    let worker = builder(&fake)
        .action("gated", move |_| {
            let _ = gate.lock().unwrap().recv_timeout(WAIT);
            Ok(ActionResult::bytes("done"))
        })
        .spawn()
        .unwrap();
    fake.push_task("gated", "1");
    fake.push_task("gated", "2");
    wait_stats(&worker, |s| s.in_flight == 2);
    worker.stop();
    let drained = fake.wait_until(WAIT, |s| {
        s.count(|op| matches!(op, Op::WorkerDrain { .. })) == 1
    });
    assert!(drained, "a stopping worker drains itself");
    thread::sleep(Duration::from_millis(100));
    assert!(!worker.is_finished(), "it waits for its tasks");
    fake.with(|s| assert!(s.workers.contains_key("w-1")));
    open.send(()).unwrap();
    open.send(()).unwrap();
    let stats = worker.join().unwrap();
    assert_eq!(stats.tasks_completed, 2);
    fake.with(|s| {
        let last_complete = s
            .requests
            .iter()
            .rposition(|op| matches!(op, Op::TaskComplete { .. }));
        let deregister = position(s, |op| matches!(op, Op::WorkerDeregister { .. }));
        assert!(last_complete < deregister, "reported, then deregistered");
    });
}

#[test]
fn drain_from_the_server_stops_the_worker() {
    let fake = FakeServer::start();
    let worker = builder(&fake)
        .heartbeat_interval(Duration::from_millis(20))
        .action("echo", echo)
        .spawn()
        .unwrap();
    let beat = fake.wait_until(WAIT, |s| {
        s.requests.iter().any(|op| {
            matches!(op, Op::WorkerHeartbeat { worker_id, current_load: 0, .. } if worker_id == "w-1")
        })
    });
    assert!(beat, "heartbeats carry the load");
    fake.with(|s| s.draining.insert("w-1".into()));
    let stats = wait_stats(&worker, |s| s.drained);
    assert!(stats.drained);
    let stats = worker.join().unwrap();
    assert!(stats.drained);
    fake.with(|s| {
        assert_eq!(s.count(|op| matches!(op, Op::WorkerDrain { .. })), 0);
        assert!(s.workers.is_empty(), "deregistered");
    });
}

#[test]
fn lost_connection_reconnects_and_registers_again() {
    let fake = FakeServer::start();
    let worker = builder(&fake).action("echo", echo).spawn().unwrap();
    assert!(
        fake.wait_until(WAIT, |s| s.count(|op| matches!(op, Op::TaskAwait { .. }))
            > 0)
    );
    fake.cut_connections();
    let stats = wait_stats(&worker, |s| s.registrations == 2);
    assert_eq!(stats.reconnects, 1);
    assert_eq!(fake.with(|s| s.connections), 2);
    fake.push_task("echo", "after");
    wait_stats(&worker, |s| s.tasks_completed == 1);
    worker.stop_and_join().unwrap();
}

#[test]
fn forgotten_worker_registers_again() {
    let fake = FakeServer::start();
    let worker = builder(&fake).action("echo", echo).spawn().unwrap();
    assert!(
        fake.wait_until(WAIT, |s| s.count(|op| matches!(op, Op::TaskAwait { .. }))
            > 0)
    );
    fake.with(|s| s.workers.clear());
    let stats = wait_stats(&worker, |s| s.registrations == 2);
    assert_eq!(stats.reconnects, 0, "the same connection");
    assert!(stats.last_error.unwrap().contains("not registered"));
    fake.push_task("echo", "after");
    wait_stats(&worker, |s| s.tasks_completed == 1);
    worker.stop_and_join().unwrap();
}

#[test]
fn run_returns_when_stopped_from_another_thread() {
    let fake = FakeServer::start();
    // A poll parked for the longest a worker may ask: a stop that waited for its answer
    // would take minutes.
    let worker = builder(&fake)
        .action("echo", echo)
        .block_ms(TASK_AWAIT_MS_MAX)
        .build()
        .unwrap();
    let stop = worker.stop_handle();
    let (ran, running) = std::sync::mpsc::channel();
    thread::spawn(move || ran.send(worker.run()));
    assert!(
        fake.wait_until(WAIT, |s| s.count(|op| matches!(op, Op::TaskAwait { .. }))
            > 0)
    );
    stop.stop();
    let stats = running
        .recv_timeout(WAIT)
        .expect("a parked poll does not delay the stop")
        .unwrap();
    assert_eq!(stats.registrations, 1);
    fake.with(|s| assert!(s.workers.is_empty()));
}

#[test]
fn result_too_large_to_send_fails_the_attempt() {
    let fake = FakeServer::start();
    let worker = builder(&fake)
        .action("huge", |_| Ok(ActionResult::bytes(vec![b'x'; 5 << 20])))
        .spawn()
        .unwrap();
    let task_id = fake.push_task("huge", "{}");
    wait_stats(&worker, |s| s.tasks_failed == 1);
    let failed = fake.with(|s| failures(s));
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, task_id);
    assert!(
        failed[0].1.starts_with("cannot report the result"),
        "{failed:?}"
    );
    assert!(failed[0].2, "retried");
    worker.stop_and_join().unwrap();
}

#[test]
fn sigint_stops_a_worker_run_until_signal() {
    let fake = FakeServer::start();
    let worker = builder(&fake).action("echo", echo).build().unwrap();
    let running = thread::spawn(move || worker.run_until_signal());
    assert!(
        fake.wait_until(WAIT, |s| s.count(|op| matches!(op, Op::TaskAwait { .. }))
            > 0)
    );
    signal_hook::low_level::raise(signal_hook::consts::SIGINT).unwrap();
    let stats = running.join().unwrap().unwrap();
    assert_eq!(stats.registrations, 1);
    fake.with(|s| assert!(s.workers.is_empty(), "deregistered"));
}
