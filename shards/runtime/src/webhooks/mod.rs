//! Webhook deliveries: one thread for the whole server (`flo-webhooks`, `thread.rs`) sends
//! each attempt the shards' engines ask for (`Effect::Deliver`) as an HTTP `POST` with a
//! pooled client (`client.rs`), and answers it on the shard it came from
//! (`Input::WebhookAnswered`, through `shard.rs`). The engine decides what to deliver,
//! when, how often and what an answer means; this decides nothing durable.

mod client;
mod shard;
mod thread;

#[cfg(test)]
mod tests;

pub(crate) use shard::{WebhookOut, serve_answers};
pub(crate) use thread::{ShardWebhooks, start};
