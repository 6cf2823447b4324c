use super::*;
use crate::fake_server::FakeServer;
use crate::requests::AwaitTasks;
use flo_protocol::{ErrorCode, WorkerType};

fn spec(worker_id: &str) -> WorkerSpec {
    WorkerSpec {
        namespace: String::new(),
        worker_id: worker_id.into(),
        worker_type: WorkerType::Action,
        max_concurrency: None,
        processes: vec!["a".into()],
        metadata: None,
        machine_id: None,
        labels: None,
    }
}

fn connect(fake: &FakeServer) -> Arc<MuxClient> {
    Arc::new(MuxClient::connect(fake.addr).expect("connect to the fake server"))
}

fn awaits(fake: &FakeServer) -> usize {
    fake.with(|s| s.count(|op| matches!(op, Op::TaskAwait { .. })))
}

fn wait_for_awaits(fake: &FakeServer, n: usize) {
    let seen = fake.wait_until(Duration::from_secs(10), |s| {
        s.count(|op| matches!(op, Op::TaskAwait { .. })) >= n
    });
    assert!(
        seen,
        "{n} polls should reach the server, saw {}",
        awaits(fake)
    );
}

fn is_io(result: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(result, Err(Error::Io(_)))
}

#[test]
fn handshake_reports_the_server() {
    let fake = FakeServer::start();
    let client = MuxClient::connect(fake.addr).unwrap().with_namespace("t");
    assert_eq!(client.server_version(), "fake");
    assert_eq!(client.shard_count(), 1);
    assert_eq!(client.namespace(), "t");
    assert!(!client.is_closed());
}

#[test]
fn long_poll_does_not_hold_up_other_calls() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    client.register_worker(spec("w")).unwrap();
    let poll = {
        let client = client.clone();
        thread::spawn(move || client.await_tasks("w", &["a"], 1, 10_000))
    };
    wait_for_awaits(&fake, 1);
    assert_eq!(client.heartbeat("w", 0).unwrap(), WorkerStatus::Active);
    // Answered while the poll still waits: a heartbeat queued behind the poll would have
    // come back only after it (at its 10 s limit at the earliest).
    assert!(!poll.is_finished(), "the poll is still waiting for a task");
    let task_id = fake.push_task("a", "{}");
    let tasks = poll.join().unwrap().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].task_id, task_id);
}

#[test]
fn calls_from_many_threads_each_get_their_own_reply() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let client = client.clone();
            thread::spawn(move || {
                for i in 0..50u64 {
                    let extend_ms = t * 1_000 + i;
                    let task = TaskRef {
                        task_id: "a-1",
                        action: "a",
                        attempt: None,
                    };
                    let expires = client.touch_task("w", &task, extend_ms).unwrap();
                    assert_eq!(expires, 1_000 + extend_ms);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn server_errors_come_back_as_server_errors() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    match client.heartbeat("nobody", 0) {
        Err(Error::Server(e)) => assert_eq!(e.code, ErrorCode::NotFound),
        other => panic!("expected not_found, got {other:?}"),
    }
    assert!(
        !client.is_closed(),
        "a server error leaves the connection up"
    );
}

#[test]
fn connection_loss_fails_every_waiting_call_with_io() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    client.register_worker(spec("w")).unwrap();
    let polls: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || client.await_tasks("w", &["a"], 1, 30_000))
        })
        .collect();
    wait_for_awaits(&fake, 3);
    fake.cut_connections();
    for poll in polls {
        let result = poll.join().unwrap();
        // An io error, not the empty answer of the poll's own 30 s limit: the cut ended it.
        assert!(is_io(&result), "expected an io error, got {result:?}");
    }
    assert!(client.is_closed());
    assert!(is_io(&client.heartbeat("w", 0)), "later calls are refused");
}

#[test]
fn unanswered_call_times_out_and_the_connection_stays_usable() {
    let fake = FakeServer::start();
    let options = MuxOptions {
        reply_timeout: Duration::from_millis(200),
        ..MuxOptions::default()
    };
    let client = MuxClient::connect_with(fake.addr, options).unwrap();
    fake.with(|s| s.stalled = true);
    match client.heartbeat("w", 0) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    fake.with(|s| s.stalled = false);
    client.register_worker(spec("w")).unwrap();
}

#[test]
fn close_fails_waiting_calls_and_ends_the_reader() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    client.register_worker(spec("w")).unwrap();
    let poll = {
        let client = client.clone();
        thread::spawn(move || client.await_tasks("w", &["a"], 1, 30_000))
    };
    wait_for_awaits(&fake, 1);
    client.close();
    let result = poll.join().unwrap();
    match result {
        Err(Error::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::NotConnected),
        other => panic!("expected an io error, got {other:?}"),
    }
    assert!(
        lock(&client.reader).is_none(),
        "the reader thread was joined"
    );
}

#[test]
fn dropped_pending_reply_is_forgotten() {
    let fake = FakeServer::start();
    let client = connect(&fake);
    client.register_worker(spec("w")).unwrap();
    let pending = client
        .send(AwaitTasks::new("w", &["a"], 1, 30_000).op("default"))
        .unwrap();
    assert!(pending.wait_timeout(Duration::from_millis(10)).is_none());
    drop(pending);
    assert!(lock(&client.shared.waiters).by_id.is_empty());
    // The late reply (to nobody) is ignored and later calls still work.
    fake.push_task("a", "{}");
    assert_eq!(client.heartbeat("w", 0).unwrap(), WorkerStatus::Active);
}
