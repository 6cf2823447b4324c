use super::*;
use crate::client::{Error, FailMode, TaskRef};
use flo_protocol::{HISTORY_LIMIT_DEFAULT, Op, Reply, WorkerSpec, WorkerStatus, WorkerType};

/// A transport that records what it is asked to send and answers with one canned reply.
struct Canned {
    namespace: String,
    sent: Vec<Op>,
    reply: Reply,
}

impl Canned {
    fn new(reply: Reply) -> Self {
        Canned {
            namespace: "ns".into(),
            sent: Vec::new(),
            reply,
        }
    }
}

impl Transport for &mut Canned {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn call(self, op: Op) -> Result<Reply, Error> {
        self.sent.push(op);
        Ok(self.reply.clone())
    }
}

#[test]
fn a_request_is_sent_in_the_clients_namespace_and_its_reply_read() {
    let mut client = Canned::new(Reply::WorkerStatus {
        status: WorkerStatus::Draining,
    });
    let heartbeat = Heartbeat {
        worker_id: "w",
        current_load: 3,
    };
    assert_eq!(
        send(&mut client, heartbeat).unwrap(),
        WorkerStatus::Draining
    );
    assert_eq!(
        client.sent,
        [Op::WorkerHeartbeat {
            namespace: "ns".into(),
            worker_id: "w".into(),
            current_load: 3,
        }]
    );
}

#[test]
fn a_reply_to_another_operation_is_a_protocol_error() {
    let mut client = Canned::new(Reply::Done);
    let heartbeat = Heartbeat {
        worker_id: "w",
        current_load: 0,
    };
    match send(&mut client, heartbeat) {
        Err(Error::Protocol(message)) => assert!(message.starts_with("unexpected reply")),
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn a_registered_spec_takes_the_clients_namespace() {
    let spec = WorkerSpec {
        namespace: "elsewhere".into(),
        worker_id: "w".into(),
        worker_type: WorkerType::Action,
        max_concurrency: None,
        processes: vec!["a".into()],
        metadata: None,
        machine_id: None,
        labels: None,
    };
    match (RegisterWorker { spec }).op("ns") {
        Op::WorkerRegister(spec) => assert_eq!(spec.namespace, "ns"),
        other => panic!("expected a worker register, got {other:?}"),
    }
}

#[test]
fn a_history_page_always_asks_for_a_page() {
    let page = WorkflowHistoryPage {
        run_id: "r",
        limit: None,
        after: None,
    };
    match page.op("ns") {
        Op::WorkflowHistory { limit, after, .. } => {
            assert_eq!(limit, Some(HISTORY_LIMIT_DEFAULT));
            assert_eq!(after, None);
        }
        other => panic!("expected a history request, got {other:?}"),
    }
}

#[test]
fn a_fail_mode_becomes_the_wire_flags() {
    let task = TaskRef {
        task_id: "a-1",
        action: "a",
        attempt: Some(2),
    };
    let flags = |mode| match (FailTask {
        worker_id: "w",
        task: &task,
        error: "boom",
        mode,
        code: None,
    })
    .op("ns")
    {
        Op::TaskFail {
            retry,
            non_retryable,
            ..
        } => (retry, non_retryable),
        other => panic!("expected a task failure, got {other:?}"),
    };
    assert_eq!(flags(FailMode::Retry), (true, false));
    assert_eq!(flags(FailMode::NoRetry), (false, false));
    assert_eq!(flags(FailMode::NonRetryable), (false, true));
}
