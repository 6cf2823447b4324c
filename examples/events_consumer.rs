//! A stream worker: consumes the `events` stream through the group `processors`, one
//! handler call per record; `Ok` acknowledges it, an error has it delivered again.
//!
//! Try it (`flo` is `target/release/flo` after `cargo build --release`):
//!
//! ```sh
//! flo server --data-dir /tmp/flo &                       # the server on 127.0.0.1:9000
//! cargo run --release --example events_consumer &        # joins (creates) the group
//! flo stream append events '{"type":"signup","user":"u-1"}'
//! flo stream append events '{"type":"refund"}'            # fails: delivered again, up to
//!                                                         # 16 times, then events:dlq
//! flo stream group info events processors                 # pending, acked, consumers
//! ```
//!
//! `FLO_ADDR` (default `127.0.0.1:9000`) and `FLO_NAMESPACE` (default `default`) choose the
//! server and namespace.

use flo::{StreamContext, StreamWorker};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    user: Option<String>,
}

fn handle(ctx: &StreamContext) -> Result<(), flo::HandlerError> {
    let event: Event = ctx.json()?;
    println!(
        "{} {} (partition {}): {} {:?}",
        ctx.stream(),
        ctx.stream_id(),
        ctx.partition(),
        event.kind,
        event.user
    );
    if event.kind == "refund" {
        return Err("refunds are handled elsewhere".into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("FLO_ADDR").unwrap_or_else(|_| "127.0.0.1:9000".into());
    let namespace = std::env::var("FLO_NAMESPACE").unwrap_or_else(|_| "default".into());
    let worker = StreamWorker::builder(&addr)
        .namespace(namespace.as_str())
        .stream("events")
        .group("processors")
        .concurrency(5)
        .batch_size(10)
        .handler(handle)
        .spawn()?;
    println!("consuming events/processors in namespace {namespace} on {addr}; Ctrl-C stops it");
    let stats = worker.join()?;
    println!("stopped: {stats:?}");
    Ok(())
}
