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
            wasm_entrypoint: None,
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
            group: None,
            webhook: None,
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
        state_patch: None,
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

fn create(c: &mut Cluster, id: u64, yaml: String) -> Result<flo_protocol::Reply, String> {
    c.client(
        0,
        1,
        id,
        Op::WorkflowCreate {
            namespace: NS.into(),
            yaml,
        },
    );
    c.settle();
    match c.take_reply(1, id) {
        Some(Ok(reply)) => Ok(reply),
        Some(Err(e)) => Err(e.message),
        None => panic!("no reply to the definition"),
    }
}

/// Issue 21, item 3: a ~100 KB definition whose aliases repeat a 64 KiB scalar expanded
/// into a 655 MB definition record, which the log refused and `Core::commit` stopped the
/// server on. Now the definition is refused before it is expanded.
#[test]
fn a_definition_that_expands_through_aliases_is_refused_and_the_shard_goes_on() {
    let mut c = Cluster::new(1, 1_000_000);
    register(&mut c);
    let mut yaml = format!(
        "kind: Workflow\nname: bomb\nversion: \"1\"\ndescription: &s \"{}\"\nstart:\n  \
         run: \"@actions/big\"\n  inputMapping:\n",
        "x".repeat(64 << 10)
    );
    for i in 0..1000 {
        yaml.push_str(&format!("    k{i}: *s\n"));
    }
    yaml.push_str("  transitions:\n    success: flo.Completed\n");
    assert!(yaml.len() < 100_000);
    let err = create(&mut c, 10, yaml).unwrap_err();
    assert!(err.contains("aliases"), "{err}");
    // The same definition without the repetition is accepted.
    let fine = "kind: Workflow\nname: bomb\nversion: \"1\"\nstart:\n  run: \"@actions/big\"\n  \
                transitions:\n    success: flo.Completed\n";
    create(&mut c, 11, fine.into()).expect("a plain definition is accepted");
}

/// The largest text a definition may be (1 MiB), made of the smallest steps, normalises to
/// a definition that still fits in one log record, or is refused with a reason — never a
/// record the log cannot hold.
#[test]
fn the_largest_definition_text_is_stored_or_refused_never_oversize() {
    let mut c = Cluster::new(1, 1_000_000);
    register(&mut c);
    let mut yaml = String::from(
        "kind: Workflow\nname: wide\nversion: \"1\"\nstart:\n  run: \"@actions/big\"\n  \
         transitions:\n    success: s0\nsteps:\n",
    );
    let mut i = 0;
    loop {
        let step = format!(
            "  s{i}:\n    run: \"@actions/big\"\n    transitions:\n      success: s{}\n",
            i + 1
        );
        if yaml.len() + step.len() + 200 > flo_workflow::DEFINITION_BYTES_MAX {
            break;
        }
        yaml.push_str(&step);
        i += 1;
    }
    yaml.push_str(&format!(
        "  s{i}:\n    run: \"@actions/big\"\n    transitions:\n      success: flo.Completed\n"
    ));
    match create(&mut c, 20, yaml) {
        Ok(_) => {}
        Err(e) => assert!(e.contains("at most"), "{e}"),
    }
    // The shard still answers either way.
    c.client(
        0,
        1,
        21,
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
    assert!(matches!(c.take_reply(1, 21), Some(Ok(_))));
}
