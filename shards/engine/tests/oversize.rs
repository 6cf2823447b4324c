//! A step output whose JSON re-encoding is larger than a log record can hold used to panic
//! the shard in `Core::commit` (reachable from a guest's or a worker's output, and again on
//! every restart): now the step fails with a clear reason and the shard goes on.

#[path = "sim/cluster.rs"]
mod cluster;

use cluster::Cluster;
use flo_engine::{ExecResult, Input};
use flo_protocol::{ActionKind, ActionSpec, Op, WorkflowStartSpec};

const NS: &str = "default";

fn register(c: &mut Cluster) {
    c.client(
        0,
        1,
        1,
        Op::ActionRegister(ActionSpec {
            namespace: NS.into(),
            name: "big".into(),
            kind: ActionKind::Wasm,
            wasm: Some(b"(module)".to_vec()),
            timeout_ms: None,
            max_retries: Some(0),
            retry_delay_ms: None,
            description: None,
            memory_limit_mb: None,
        }),
    );
    loop {
        c.settle();
        let compiles = std::mem::take(&mut c.compiles);
        if compiles.is_empty() {
            break;
        }
        for (s, job) in compiles {
            c.step(
                s,
                Input::Compiled {
                    job,
                    result: Ok(None),
                },
            );
        }
    }
    assert!(matches!(c.take_reply(1, 1), Some(Ok(_))));
    c.client(
        0,
        1,
        2,
        Op::WorkflowCreate {
            namespace: NS.into(),
            yaml: "kind: Workflow\nname: w\nversion: \"1\"\nstart:\n  run: \"@actions/big\"\n  transitions:\n    success: flo.Completed\n    failure: flo.Failed\n".into(),
        },
    );
    c.settle();
    assert!(matches!(c.take_reply(1, 2), Some(Ok(_))));
}

#[test]
fn a_step_output_too_large_for_its_record_fails_the_step_and_the_shard_goes_on() {
    let mut c = Cluster::new(1, 1_000_000);
    register(&mut c);
    c.client(
        0,
        1,
        3,
        Op::WorkflowStart(WorkflowStartSpec {
            namespace: NS.into(),
            name: "w".into(),
            version: None,
            input: b"{}".to_vec(),
            idempotency_key: None,
            wait_ms: None,
            run_id: None,
        }),
    );
    c.settle();
    let (s, x) = c.executions.pop().expect("the step's action executes");
    // 2 MiB of 0x01: under the 4 MiB result limit; as a JSON string each byte is "\u0001".
    let result = ExecResult {
        output: Ok(vec![1u8; 2 << 20]),
        outcome: None,
        kv_writes: Vec::new(),
        logs: Vec::new(),
    };
    c.step(
        s,
        Input::Executed {
            exec: x.exec,
            result,
        },
    );
    c.settle();
    // The failed run is archived: its status is read back from the log.
    c.client(
        0,
        1,
        5,
        Op::WorkflowStatus {
            namespace: NS.into(),
            run_id: "wfrun-1".into(),
        },
    );
    c.settle();
    let run = match c.take_reply(1, 5) {
        Some(Ok(flo_protocol::Reply::WorkflowRun(run))) => run,
        other => panic!("{other:?}"),
    };
    assert_eq!(run.status, flo_protocol::WorkflowRunStatus::Failed);
    let error = run.error.clone().unwrap_or_default();
    assert!(error.contains("exceeds the maximum"), "{error}");
    // The shard still answers.
    c.client(
        0,
        1,
        4,
        Op::KvPut {
            namespace: NS.into(),
            key: "after".into(),
            value: b"v".to_vec(),
            ttl_ms: None,
            if_version: None,
            if_exists: false,
        },
    );
    c.settle();
    assert!(matches!(c.take_reply(1, 4), Some(Ok(_))));
}
