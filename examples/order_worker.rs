//! A worker for two user-hosted actions: `process-order` and `review-order`.
//!
//! Try it (`flo` is `target/release/flo` after `cargo build --release`):
//!
//! ```sh
//! flo server --data-dir /tmp/flo &                  # start the server on 127.0.0.1:9000
//! flo action register process-order                 # user-hosted (the default type)
//! flo action register review-order
//! cargo run --release --example order_worker &      # this worker; Ctrl-C (or kill %2) stops it
//! flo action invoke process-order '{"order_id":"o-1","amount":42}'     # → process-order-1
//! flo action status process-order-1                 # completed, {"status":"processed",...}
//! flo action invoke process-order '{"order_id":"o-2","amount":5000}'   # failed at once, no retry
//! flo action invoke review-order '{"order_id":"o-3","amount":250}'     # outcome needs_review
//! ```
//!
//! `FLO_ADDR` (default `127.0.0.1:9000`) and `FLO_NAMESPACE` (default `default`) choose the
//! server and namespace.

use flo::{ActionContext, ActionResult, ActionWorker, HandlerResult, NonRetryableError};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    amount: f64,
}

/// Processes an order; orders over $2000 fail for good (retrying cannot help).
fn process_order(ctx: &ActionContext) -> HandlerResult {
    let order: Order = ctx.json()?;
    println!(
        "processing order {} (${:.2}), attempt {}",
        order.order_id,
        order.amount,
        ctx.attempt()
    );
    if order.amount > 2000.0 {
        let message = format!("order amount ${} exceeds $2000 limit", order.amount);
        return Err(NonRetryableError::new(message).into());
    }
    ActionResult::json(&json!({"status": "processed", "order_id": order.order_id}))
}

/// Decides on an order; a workflow routes on the named outcome.
fn review_order(ctx: &ActionContext) -> HandlerResult {
    let order: Order = ctx.json()?;
    println!("reviewing order {} (${:.2})", order.order_id, order.amount);
    if order.amount < 100.0 {
        ctx.result(
            "approved",
            &json!({"order_id": order.order_id, "decision": "auto-approved"}),
        )
    } else if order.amount >= 500.0 {
        ctx.result(
            "rejected",
            &json!({"order_id": order.order_id, "reason": "amount too high"}),
        )
    } else {
        ctx.result(
            "needs_review",
            &json!({"order_id": order.order_id, "note": "manual review required"}),
        )
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("FLO_ADDR").unwrap_or_else(|_| "127.0.0.1:9000".into());
    let namespace = std::env::var("FLO_NAMESPACE").unwrap_or_else(|_| "default".into());
    let worker = ActionWorker::builder(&addr)
        .namespace(namespace.as_str())
        .concurrency(10)
        .action("process-order", process_order)
        .action("review-order", review_order)
        .build()?;
    println!(
        "worker {} serving {:?} in namespace {namespace} on {addr}; Ctrl-C stops it",
        worker.worker_id(),
        worker.actions()
    );
    let stats = worker.run_until_signal()?;
    println!(
        "stopped: {} completed, {} failed",
        stats.tasks_completed, stats.tasks_failed
    );
    Ok(())
}
