//! Stream triggers end to end: the reference's `order-processor.yaml` starts one run per
//! record appended to its stream (in another namespace), its step executed by an SDK
//! worker; exactly one run per record across kill -9; disabling pauses the trigger and
//! enabling resumes it; batches start one run per batch.

mod common;

use common::{TestServer, all_workflow_runs, temp_dir, user_action, wait_until};
use flo::protocol::{StreamConfig, StreamRecordIn, WorkflowRunInfo, WorkflowRunStatus};
use flo::{ActionResult, ActionWorker, Client};
use serde_json::{Value, json};
use std::time::Duration;

const ORDER_PROCESSOR: &str = include_str!("../testdata/workflows/order-processor.yaml");

fn order(i: u32) -> StreamRecordIn {
    StreamRecordIn {
        key: Some(format!("customer-{}", i % 5)),
        payload: serde_json::to_vec(&json!({"order_id": i, "amount": 10 * i})).unwrap(),
        ..Default::default()
    }
}

/// Every run of `workflow` (all pages).
fn runs(c: &mut Client, workflow: &str) -> Vec<WorkflowRunInfo> {
    all_workflow_runs(c, workflow)
}

fn completed(c: &mut Client, workflow: &str) -> usize {
    runs(c, workflow)
        .iter()
        .filter(|r| r.status == WorkflowRunStatus::Completed)
        .count()
}

fn worker(server: &TestServer) -> flo::RunningWorker {
    ActionWorker::builder(server.addr)
        .action("process-order", |ctx| {
            let order: Value = ctx.json()?;
            ActionResult::json(&json!({"processed": order["order_id"]}))
        })
        .spawn()
        .unwrap()
}

#[test]
fn the_order_processor_starts_one_run_per_record_exactly_once_across_a_kill() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "process-order", 30_000, 3, 50);
    let (name, _, created, _) = c.create_workflow(ORDER_PROCESSOR).unwrap();
    assert!(created);
    let mut prod = server.client().with_namespace("prod");
    let config = StreamConfig {
        partitions: Some(3),
        ..Default::default()
    };
    prod.create_stream("orders", config).unwrap();
    for i in 0..20 {
        prod.append("orders", vec![order(i)]).unwrap();
    }
    let w = worker(&server);
    assert!(
        wait_until(Duration::from_secs(30), || completed(&mut c, &name) == 20),
        "20 runs completed, got {}",
        completed(&mut c, &name)
    );
    // Each run had its record as input.
    let mut ids: Vec<u64> = runs(&mut c, &name)
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&r.input).unwrap()["order_id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..20).collect::<Vec<u64>>());
    w.stop_and_join().unwrap();

    // Records appended, then a kill -9 while their runs start: after the restart (and the
    // trigger's redelivery timeout) every record has exactly one run.
    for i in 20..60 {
        prod.append("orders", vec![order(i)]).unwrap();
    }
    server.kill9();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    c.advance_clock(31_000).unwrap();
    let w = worker(&server);
    assert!(
        wait_until(Duration::from_secs(60), || completed(&mut c, &name) == 60),
        "60 runs completed, got {}",
        completed(&mut c, &name)
    );
    std::thread::sleep(Duration::from_millis(500));
    c.advance_clock(31_000).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let all = runs(&mut c, &name);
    assert_eq!(all.len(), 60, "one run per record, no more");
    let info = &c.with_namespace("prod").groups("orders", None).unwrap()[0];
    assert_eq!(info.group, "wf-orders");
    assert_eq!((info.pending, info.lag), (0, 0), "{info:?}");
    w.stop_and_join().unwrap();
    server.stop();
}

#[test]
fn disabling_pauses_a_trigger_and_batches_start_one_run_each() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    user_action(&mut c, "process-order", 30_000, 3, 50);
    let yaml = ORDER_PROCESSOR
        .replace("name: order-processor", "name: batched")
        .replace("consumer_group: wf-orders", "consumer_group: wf-batched")
        .replace("batch_size: 1 ", "batch_size: 5 ")
        .replace("namespace: prod ", "namespace: default ");
    assert!(yaml.contains("batch_size: 5"), "{yaml}");
    c.create_workflow(&yaml).unwrap();
    c.create_stream(
        "orders",
        StreamConfig {
            partitions: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let w = ActionWorker::builder(server.addr)
        .action("process-order", |ctx| {
            let batch: Value = ctx.json()?;
            ActionResult::json(&json!({"orders": batch.as_array().map_or(0, |b| b.len())}))
        })
        .spawn()
        .unwrap();
    c.set_workflow_enabled("batched", false).unwrap();
    c.append("orders", (0..10).map(order).collect()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        runs(&mut c, "batched").is_empty(),
        "a disabled workflow starts nothing"
    );
    c.set_workflow_enabled("batched", true).unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || completed(&mut c, "batched")
            == 2),
        "two batches of five"
    );
    for run in runs(&mut c, "batched") {
        let input: Value = serde_json::from_slice(&run.input).unwrap();
        assert_eq!(input.as_array().unwrap().len(), 5, "{input}");
    }
    w.stop_and_join().unwrap();
    server.stop();
}
