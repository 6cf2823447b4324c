//! The spec's complete examples (`flo-workflows.md`) run end to end, their actions hosted by
//! the SDK's `ActionWorker`: "Order Processing with Signals" (step retry, custom terminals,
//! approval signal, signal timeout) and the non-plan part of "Payment Processing" (a
//! `pending` outcome polled with its backoff until it settles; a failed notification
//! still completing the run). Timers are driven by the test clock.

mod common;

use common::{TestServer, temp_dir, user_action, wait_until};
use flo::protocol::{WorkflowRunInfo, WorkflowRunStatus};
use flo::{ActionResult, ActionWorker, Client, StartOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const ORDER_PROCESSING: &str = include_str!("../testdata/workflows/order-processing.yaml");

/// "Payment Processing" with its plan replaced by one action (plans come in a later issue).
const PAYMENT_PROCESSING: &str = r#"
kind: Workflow
name: payment-processing
version: "1.0.0"
idempotency: required

start:
  run: "@actions/charge-stripe"
  inputMapping: '{"customer_id": "$.input.customer_id", "amount": "$.input.amount"}'
  transitions:
    success: notify_customer
    pending: check_payment_status
    failure: flo.Failed

steps:
  check_payment_status:
    run: "@actions/check-payment-status"
    inputMapping: '{"payment_id": "$.steps._start.output.payment_id"}'
    poll:
      initialDelayMs: 2000
      maxAttempts: 30
      backoff: exponential
      baseDelayMs: 2000
      maxDelayMs: 30000
    transitions:
      success: notify_customer
      failure: flo.Failed

  notify_customer:
    run: "@actions/send-notification"
    inputMapping: '{"customer_id": "$.input.customer_id", "template": "payment_success"}'
    transitions:
      success: flo.Completed
      failure: flo.Completed   # notification failure doesn't fail the workflow
"#;

fn start(c: &mut Client, name: &str, key: &str, input: Value) -> String {
    c.start_workflow(
        name,
        input.to_string().as_bytes(),
        StartOptions {
            idempotency_key: Some(key.into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

fn wait_final(c: &mut Client, run_id: &str) -> WorkflowRunInfo {
    let run = c.wait_workflow(run_id, 20_000).unwrap();
    assert!(run.status.is_final(), "run {run_id} still: {run:?}");
    run
}

/// Waits until the run is `waiting` in `step` with a retry/poll timer or a signal wait.
fn wait_in(c: &mut Client, run_id: &str, step: &str) -> WorkflowRunInfo {
    assert!(
        wait_until(Duration::from_secs(10), || {
            let r = c.workflow_run(run_id).unwrap();
            r.status == WorkflowRunStatus::Waiting
                && r.current_step.as_deref() == Some(step)
                && !r.waiting_for.as_deref().unwrap_or("").starts_with("action")
        }),
        "run {run_id} never waited in {step}: {:?}",
        c.workflow_run(run_id)
    );
    c.workflow_run(run_id).unwrap()
}

fn executions(run: &WorkflowRunInfo, step: &str) -> u32 {
    run.steps
        .iter()
        .find(|s| s.name == step)
        .map_or(0, |s| s.executions)
}

fn output(run: &WorkflowRunInfo, step: &str) -> Value {
    let s = run.steps.iter().find(|s| s.name == step).unwrap();
    serde_json::from_slice(s.output.as_deref().unwrap()).unwrap()
}

/// Delays (due - now) of the run's retry/poll timers, from the history.
fn timer_delays(c: &mut Client, run_id: &str, event: &str) -> Vec<u64> {
    c.workflow_history(run_id)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == event)
        .filter_map(|e| {
            let due: u64 = e.detail.rsplit(' ').next()?.parse().ok()?;
            Some(due - e.at_ms)
        })
        .collect()
}

#[test]
fn order_processing_with_signals_runs_on_sdk_workers() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    for a in [
        "validate-order",
        "charge-payment",
        "check-approval-needed",
        "ship-order",
    ] {
        user_action(&mut c, a, 60_000, 3, 1000);
    }
    c.create_workflow(ORDER_PROCESSING).unwrap();
    // The first charge of each order fails (a gateway hiccup); the retry succeeds.
    let charges = Arc::new(AtomicU32::new(0));
    let charged = charges.clone();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("orders")
        .concurrency(4)
        .block_ms(200)
        .action("validate-order", |ctx| {
            let order: Value = ctx.json()?;
            ActionResult::json(&json!({"order_id": order["order_id"], "valid": true}))
        })
        .action("charge-payment", move |ctx| {
            let order: Value = ctx.json()?;
            if charged.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
                return Err("payment gateway timed out".into());
            }
            ActionResult::json(&json!({"charged": order["amount"]}))
        })
        .action("check-approval-needed", |ctx| {
            let order: Value = ctx.json()?;
            if order["amount"].as_f64().unwrap_or(0.0) > 1000.0 {
                return Err("high-value order: approval needed".into());
            }
            ActionResult::json(&json!({"approval": "not needed"}))
        })
        .action("ship-order", |_ctx| {
            ActionResult::json(&json!({"tracking": "TRK-1"}))
        })
        .spawn()
        .unwrap();

    // Small order: validate, charge (fails, retried after 1 s), no approval, ship.
    let small = start(
        &mut c,
        "order-processing",
        "order-1",
        json!({"order_id": "ORD-1", "amount": 50}),
    );
    wait_in(&mut c, &small, "process_payment");
    assert_eq!(timer_delays(&mut c, &small, "step_retry"), vec![1000]);
    c.advance_clock(1000).unwrap();
    let run = wait_final(&mut c, &small);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Completed, Some("OrderCompleted")),
        "{run:?}"
    );
    assert_eq!(executions(&run, "process_payment"), 2);
    assert_eq!(output(&run, "fulfill"), json!({"tracking": "TRK-1"}));

    // Large order: waits for the manager's approval, then ships.
    let large = start(
        &mut c,
        "order-processing",
        "order-2",
        json!({"order_id": "ORD-2", "amount": 5000}),
    );
    wait_in(&mut c, &large, "process_payment");
    c.advance_clock(1000).unwrap();
    let run = wait_in(&mut c, &large, "await_approval");
    assert_eq!(run.waiting_for.as_deref(), Some("signal approval"));
    c.signal_workflow(
        &large,
        "approval",
        br#"{"decision": "approved", "approver": "manager@co.com"}"#,
    )
    .unwrap();
    let run = wait_final(&mut c, &large);
    assert_eq!(run.terminal.as_deref(), Some("OrderCompleted"), "{run:?}");
    assert_eq!(
        output(&run, "await_approval"),
        json!({"decision": "approved", "approver": "manager@co.com"})
    );

    // Large order nobody approves: rejected after the hour.
    let ignored = start(
        &mut c,
        "order-processing",
        "order-3",
        json!({"order_id": "ORD-3", "amount": 5000}),
    );
    wait_in(&mut c, &ignored, "process_payment");
    c.advance_clock(1000).unwrap();
    wait_in(&mut c, &ignored, "await_approval");
    c.advance_clock(3_600_000).unwrap();
    let run = wait_final(&mut c, &ignored);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Failed, Some("OrderRejected")),
        "{run:?}"
    );
    let events: Vec<String> = c
        .workflow_history(&ignored)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type.to_string())
        .collect();
    assert!(events.contains(&"signal_timeout".to_string()), "{events:?}");

    // The key dedups: the same order is not processed twice.
    assert_eq!(
        start(&mut c, "order-processing", "order-1", json!({})),
        small
    );
    worker.stop();
}

#[test]
fn payment_processing_polls_a_pending_charge_until_it_settles() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    for a in ["charge-stripe", "check-payment-status", "send-notification"] {
        user_action(&mut c, a, 60_000, 3, 1000);
    }
    c.create_workflow(PAYMENT_PROCESSING).unwrap();
    let checks = Arc::new(AtomicU32::new(0));
    let checked = checks.clone();
    let worker = ActionWorker::builder(server.addr)
        .worker_id("payments")
        .concurrency(4)
        .block_ms(200)
        .action("charge-stripe", |ctx| {
            let input: Value = ctx.json()?;
            assert_eq!(input["amount"], json!(120));
            ctx.result("pending", &json!({"payment_id": "pay_1"}))
        })
        .action("check-payment-status", move |ctx| {
            let input: Value = ctx.json()?;
            assert_eq!(input, json!({"payment_id": "pay_1"}));
            // Settles on the fourth check.
            if checked.fetch_add(1, Ordering::SeqCst) < 3 {
                ctx.result("pending", &json!({"state": "processing"}))
            } else {
                ActionResult::json(&json!({"state": "succeeded"}))
            }
        })
        .action("send-notification", |_ctx| Err("mail server down".into()))
        .spawn()
        .unwrap();

    let run_id = start(
        &mut c,
        "payment-processing",
        "pay-1",
        json!({"customer_id": "c-9", "amount": 120}),
    );
    // The first check runs at once; while it says `pending` it is polled again after
    // 2000 ms (initialDelayMs), then 2000 and 4000 (baseDelayMs, exponential).
    for (i, delay) in [2000, 2000, 4000].into_iter().enumerate() {
        let done = i as u32 + 1;
        let run = wait_in(&mut c, &run_id, "check_payment_status");
        assert_eq!(executions(&run, "check_payment_status"), done);
        let due: u64 = run
            .waiting_for
            .as_deref()
            .and_then(|w| w.strip_prefix("timer at "))
            .and_then(|w| w.strip_suffix(" ms"))
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no poll timer: {run:?}"));
        let polled_at = c
            .workflow_history(&run_id)
            .unwrap()
            .into_iter()
            .rfind(|e| e.event_type == "step_completed")
            .unwrap()
            .at_ms;
        assert_eq!(due - polled_at, delay, "poll {done}");
        c.advance_clock(delay).unwrap();
        assert!(wait_until(Duration::from_secs(10), || {
            executions(&c.workflow_run(&run_id).unwrap(), "check_payment_status") > done
        }));
    }
    let run = wait_final(&mut c, &run_id);
    assert_eq!(
        (run.status, run.terminal.as_deref()),
        (WorkflowRunStatus::Completed, Some("flo.Completed")),
        "a failed notification still completes the run: {run:?}"
    );
    assert_eq!(executions(&run, "check_payment_status"), 4);
    assert_eq!(
        output(&run, "check_payment_status"),
        json!({"state": "succeeded"})
    );
    let notify = run
        .steps
        .iter()
        .find(|s| s.name == "notify_customer")
        .unwrap();
    assert_eq!(notify.outcome.as_deref(), Some("failure"));
    assert_eq!(checks.load(Ordering::SeqCst), 4);
    worker.stop();
}
