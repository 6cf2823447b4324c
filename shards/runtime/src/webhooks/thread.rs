//! The delivery thread, `flo-webhooks`: one for the whole server, a current-thread tokio
//! runtime running one task per call. The shards send their calls over one channel, each
//! tagged with its shard; each answer goes back over that shard's own channel.
//!
//! Every call gets exactly one answer while its shard listens (the engine counts its calls
//! in flight): the receiver's status or why none came, or `the server is stopping` when a
//! stop was asked before it was sent. At most `REQUESTS_INFLIGHT_MAX` requests are in
//! flight at once over all shards; the others wait for a permit, in the order they came,
//! and their time (`timeout_ms`) starts when they are sent. The engine bounds the calls a
//! shard has in flight, so the calls waiting are bounded too.
//!
//! The thread never holds up a stop: it ends once every shard dropped its end (the shards
//! have stopped), abandoning the requests in flight, and nobody waits for it.

use super::client::Client;
pub(super) use super::client::REQUESTS_INFLIGHT_MAX;
use flo_engine::{Input, WebhookCall};
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures_lite::StreamExt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Semaphore;

/// The answer to a call its shard sent while the server stops, or that could not reach
/// the thread.
pub(super) const STOPPING: &str = "the server is stopping";

/// A call on its way to the thread, and the shard that sent it.
pub(super) struct Job {
    pub shard: u32,
    pub call: Box<WebhookCall>,
}

/// The answer to one call, on its way back to its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub id: u64,
    pub attempt: u32,
    pub result: Result<u16, String>,
}

impl Answer {
    pub fn to(call: &WebhookCall, result: Result<u16, String>) -> Answer {
        Answer {
            id: call.id,
            attempt: call.attempt,
            result,
        }
    }

    pub fn into_input(self) -> Input {
        Input::WebhookAnswered {
            id: self.id,
            attempt: self.attempt,
            result: self.result,
        }
    }
}

/// A shard's ends: where it sends its calls, and where their answers come.
pub(crate) struct ShardWebhooks {
    pub out: super::WebhookOut,
    pub answers: UnboundedReceiver<Answer>,
}

/// Starts the delivery thread for `shards` shards and returns each shard's ends (in shard
/// order). From `stop` on, calls not yet sent are answered `STOPPING`.
pub(crate) fn start(shards: u32, stop: Arc<AtomicBool>) -> io::Result<Vec<ShardWebhooks>> {
    let client = Client::new()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let (calls, ends) = channels(shards);
    let (answers, ends): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
    std::thread::Builder::new()
        .name("flo-webhooks".into())
        .spawn(move || {
            runtime.block_on(serve(calls, answers, client, stop, REQUESTS_INFLIGHT_MAX));
            // Requests still in flight are abandoned: their shards are gone. A name
            // lookup in progress (on tokio's blocking pool) is not waited for either.
            runtime.shutdown_background();
        })?;
    Ok(ends)
}

/// The thread's end of the calls, and for each shard the sender of its answers and its
/// own ends.
pub(super) fn channels(
    shards: u32,
) -> (
    UnboundedReceiver<Job>,
    Vec<(UnboundedSender<Answer>, ShardWebhooks)>,
) {
    let (calls, received) = unbounded();
    let ends = (0..shards)
        .map(|shard| {
            let (answer, answers) = unbounded();
            let out = super::WebhookOut::new(shard, calls.clone());
            (answer, ShardWebhooks { out, answers })
        })
        .collect();
    (received, ends)
}

/// Takes the calls until every shard dropped its end; a task per call sends it once a
/// permit is free (`inflight_max` in all) and answers it.
pub(super) async fn serve(
    mut calls: UnboundedReceiver<Job>,
    answers: Vec<UnboundedSender<Answer>>,
    client: Client,
    stop: Arc<AtomicBool>,
    inflight_max: usize,
) {
    let permits = Arc::new(Semaphore::new(inflight_max));
    while let Some(Job { shard, call }) = calls.next().await {
        // Each shard's `WebhookOut` carries its own id (`channels`).
        let answer = answers[shard as usize].clone();
        let (client, permits, stop) = (client.clone(), permits.clone(), stop.clone());
        tokio::spawn(async move {
            // Held until the answer is in (the semaphore is never closed).
            let permit = permits.acquire_owned().await;
            let result = if permit.is_err() || stop.load(Ordering::Relaxed) {
                Err(STOPPING.to_string())
            } else {
                client.deliver(&call).await
            };
            drop(permit);
            // A shard that stopped no longer listens.
            let _ = answer.unbounded_send(Answer::to(&call, result));
        });
    }
}
