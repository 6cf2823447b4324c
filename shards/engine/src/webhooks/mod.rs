//! Webhook deliveries (`fold/webhooks.rs` keeps them): sending the due ones
//! (`Effect::Deliver`, at most `INFLIGHT_MAX` per shard, each once its event's record is
//! durable — a receiver never hears of what a crash could take back) or appending them to
//! the definition's `eventStream` (on the partition's owner, like a client's append),
//! recording how each attempt ended (`Input::WebhookAnswered` → `WebhookAttempted`: delivered on a 2xx
//! answer, else tried again after the retry policy's delay, or given up after its last
//! attempt), and the operators' side: `flo webhook failed|pending` and `flo webhook
//! redeliver ID`.
//!
//! At least once: what is in flight is not recorded, so a delivery whose answer came but
//! whose record a crash lost is sent again after the restart (with the same id and body).

use crate::core::io::{Done, Effect, LogLine, LogSource, PeerRequest, ReplyResult, WebhookCall};
use crate::core::{Core, Waiting};
use crate::fold::record::Record;
use crate::fold::streams::{owner_of, partition_of_key};
use crate::fold::webhooks::{Delivery, Sink, event_lsn, parse_public_id};
use crate::pages::LIST_REPLY_BYTES_MAX;
use crate::tables::HashMap;
use flo_protocol::StreamRecordIn;
use flo_protocol::{
    ErrorCode, ErrorValue, Reply, WEBHOOKS_LIMIT_DEFAULT, WEBHOOKS_LIMIT_MAX, WebhookDelivery,
    check_namespace,
};
use flo_workflow::webhook::Webhook;

/// Attempts one shard has in flight at once.
pub const INFLIGHT_MAX: usize = 64;

/// What this shard has sent and not yet heard back about (lost on restart: sent again).
#[derive(Default)]
pub struct Deliveries {
    /// Delivery id → the attempt in flight.
    in_flight: HashMap<u64, u32>,
    /// When the earliest pending delivery not in flight is due (shard time), as the last
    /// `pump` found it.
    next_due_ms: Option<u64>,
}

impl Deliveries {
    /// When `pump` has work again (the engine's wake-up).
    pub fn next_due_ms(&self) -> Option<u64> {
        self.next_due_ms
    }
}

/// Sends the deliveries that are due, as far as the window allows.
pub fn pump(core: &mut Core, d: &mut Deliveries) {
    d.next_due_ms = None;
    let hooks = &core.state().webhooks;
    if d.in_flight.len() >= INFLIGHT_MAX || hooks.due().next().is_none() {
        return;
    }
    let (now, durable, shard) = (core.now_ms(), core.durable_lsn(), core.shard());
    let mut sends = Vec::new();
    for (due, id) in hooks.due() {
        if due > now {
            d.next_due_ms = Some(due);
            break;
        }
        if d.in_flight.contains_key(&id) {
            continue;
        }
        // Its event's record is not durable yet: `Input::Durable` comes back here.
        if event_lsn(id) > durable || d.in_flight.len() + sends.len() >= INFLIGHT_MAX {
            break;
        }
        let Some(delivery) = hooks.pending(id) else {
            continue;
        };
        sends.push(match &*delivery.sink {
            Sink::Http(w) => Send::Http(call(shard, id, delivery, w)),
            Sink::Stream { stream } => Send::Append {
                id,
                attempt: delivery.attempts + 1,
                namespace: delivery.namespace.to_string(),
                stream: stream.clone(),
                record: StreamRecordIn {
                    key: Some(delivery.run_id.to_string()),
                    headers: [
                        ("event".to_string(), delivery.event.as_str().to_string()),
                        ("delivery".to_string(), Delivery::public_id(shard, id)),
                    ]
                    .into(),
                    payload: delivery.body.to_vec(),
                },
            },
        });
    }
    for send in sends {
        match send {
            Send::Http(c) => {
                d.in_flight.insert(c.id, c.attempt);
                core.emit(Effect::Deliver(Box::new(c)));
            }
            Send::Append {
                id,
                attempt,
                namespace,
                stream,
                record,
            } => {
                d.in_flight.insert(id, attempt);
                append(core, d, (id, attempt), namespace, stream, record);
            }
        }
    }
}

/// One attempt, as `pump` found it.
enum Send {
    Http(WebhookCall),
    Append {
        id: u64,
        attempt: u32,
        namespace: String,
        stream: String,
        record: StreamRecordIn,
    },
}

fn call(shard: u32, id: u64, d: &Delivery, w: &Webhook) -> WebhookCall {
    WebhookCall {
        id,
        delivery_id: Delivery::public_id(shard, id),
        attempt: d.attempts + 1,
        url: w.url.clone(),
        headers: w.headers.clone(),
        secret: w.secret.clone(),
        event: d.event.as_str(),
        body: d.body.clone(),
        timeout_ms: w.timeout_ms,
    }
}

/// An event appended to its stream: on this shard when it owns the run's partition (the
/// attempt ends at once), else by the owner (`Waiting::SinkAppend`).
fn append(
    core: &mut Core,
    d: &mut Deliveries,
    (id, attempt): (u64, u32),
    namespace: String,
    stream: String,
    record: StreamRecordIn,
) {
    // A stream's own bounds hold for these records too (a body with a large state or
    // output can pass them): the attempt fails with the reason, and so do its retries
    // until it is listed as failed.
    if let Err(e) = flo_protocol::check_stream_record(&record) {
        let why = format!("the event does not fit in stream {stream}: {}", e.0);
        return on_answer(core, d, id, attempt, Err(why));
    }
    let partitions = match core.state().streams.existing(&namespace, &stream) {
        Ok(def) => def.partitions,
        Err(e) => return on_answer(core, d, id, attempt, Err(e.message)),
    };
    let key = record.key.as_deref().unwrap_or_default();
    let partition = partition_of_key(&namespace, key, partitions);
    let owner = owner_of(&core.partitioning(), &namespace, &stream, partition);
    if owner == core.shard() {
        let done =
            crate::streams::append_part(core, &namespace, &stream, partition, vec![record], None);
        let result = done.result.map(|_| 200).map_err(|e| e.message);
        return on_answer(core, d, id, attempt, result);
    }
    let req = PeerRequest::StreamAppend {
        namespace,
        stream,
        partition,
        records: vec![record],
        min_id: None,
    };
    core.call(owner, 0, req, Waiting::SinkAppend { id, attempt });
}

/// How attempt `attempt` of `id` ended: its record.
pub fn on_answer(
    core: &mut Core,
    d: &mut Deliveries,
    id: u64,
    attempt: u32,
    result: Result<u16, String>,
) {
    if d.in_flight.get(&id) != Some(&attempt) {
        return;
    }
    d.in_flight.remove(&id);
    let Some(delivery) = core.state().webhooks.pending(id) else {
        return;
    };
    if delivery.attempts + 1 != attempt {
        return;
    }
    let now = core.now_ms();
    let error = match result {
        Ok(status) if (200..300).contains(&status) => None,
        Ok(status) => Some(format!("HTTP {status}")),
        Err(why) => Some(why),
    };
    let policy = delivery.sink.retry();
    let retry_at_ms = match &error {
        Some(_) if attempt < policy.max_attempts => {
            let seed = xxhash_rust::xxh3::xxh3_64(
                &[id.to_le_bytes(), u64::from(attempt).to_le_bytes()].concat(),
            );
            let jitter = (seed >> 11) as f64 / (1u64 << 53) as f64;
            let at = now.saturating_add(policy.delay_ms(attempt, jitter));
            let within = policy
                .within_ms
                .is_none_or(|w| at.saturating_sub(delivery.created_ms) <= w);
            within.then_some(at)
        }
        _ => None,
    };
    if let (Some(why), None) = (&error, retry_at_ms) {
        let text = format!(
            "webhook delivery {} ({} of run {}) to {} given up after {attempt} attempt(s): {why}",
            Delivery::public_id(core.shard(), id),
            delivery.event.as_str(),
            delivery.run_id,
            delivery.sink.target(),
        );
        core.emit(LogLine::warn(LogSource::Webhook, text));
    }
    core.commit(Record::WebhookAttempted {
        id,
        attempt,
        at_ms: now,
        error,
        retry_at_ms,
    });
}

/// This shard's part of `flo webhook failed|pending`: its deliveries of `namespace`
/// (and `workflow`), oldest first.
pub fn list_part(
    core: &Core,
    namespace: &str,
    failed: bool,
    workflow: Option<&str>,
    limit: Option<u32>,
) -> Done {
    if let Err(e) = check_namespace(namespace) {
        return Done::now(Err(e.into()));
    }
    let limit = match page_limit(limit) {
        Ok(l) => l,
        Err(e) => return Done::now(Err(e)),
    };
    let shard = core.shard();
    let mut deliveries = Vec::new();
    let mut bytes = 0;
    let mut truncated = false;
    for (id, d) in core.state().webhooks.list(failed) {
        if &*d.namespace != namespace || workflow.is_some_and(|w| &*d.workflow != w) {
            continue;
        }
        let size = 128 + d.sink.target().len() + d.last_error.as_ref().map_or(0, String::len);
        if deliveries.len() >= limit || bytes + size > LIST_REPLY_BYTES_MAX / 2 {
            truncated = true;
            break;
        }
        bytes += size;
        deliveries.push(d.info(shard, id));
    }
    Done {
        result: Ok(Reply::WebhookDeliveries {
            deliveries,
            truncated,
        }),
        // What it shows may come from any record so far.
        wait_lsn: core.last_lsn(),
    }
}

fn page_limit(limit: Option<u32>) -> Result<usize, ErrorValue> {
    match limit.unwrap_or(WEBHOOKS_LIMIT_DEFAULT) {
        0 => Err(ErrorValue::bad_request(
            "limit 0: ask for 1 or more deliveries",
        )),
        n => Ok(n.min(WEBHOOKS_LIMIT_MAX) as usize),
    }
}

/// The shards' parts as one listing: oldest first, at most `limit`.
pub fn merge_lists(parts: Vec<Reply>, limit: Option<u32>) -> ReplyResult {
    let limit = page_limit(limit)?;
    let mut all: Vec<WebhookDelivery> = Vec::new();
    let mut truncated = false;
    for part in parts {
        if let Reply::WebhookDeliveries {
            deliveries,
            truncated: t,
        } = part
        {
            all.extend(deliveries);
            truncated |= t;
        }
    }
    all.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    if all.len() > limit {
        all.truncate(limit);
        truncated = true;
    }
    Ok(Reply::WebhookDeliveries {
        deliveries: all,
        truncated,
    })
}

/// `flo webhook redeliver ID`: a failed delivery of `namespace` is sent again.
pub fn redeliver(core: &mut Core, namespace: &str, id: &str) -> Done {
    let missing = || {
        Done::now(Err(ErrorValue::not_found(format!(
            "no failed webhook delivery {id:?} (see `flo webhook failed`)"
        ))))
    };
    let Some((shard, key)) = parse_public_id(id) else {
        return missing();
    };
    if shard != core.shard() {
        return missing();
    }
    let hooks = &core.state().webhooks;
    let Some(d) = hooks.failed(key).filter(|d| &*d.namespace == namespace) else {
        return match hooks.pending(key).filter(|d| &*d.namespace == namespace) {
            Some(d) => Done::now(Err(ErrorValue::conflict(format!(
                "webhook delivery {id} has not failed: attempt {} is due at {} ms",
                d.attempts + 1,
                d.at_ms
            )))),
            None => missing(),
        };
    };
    if !hooks.has_room(d.body.len()) {
        return Done::now(Err(ErrorValue::new(
            ErrorCode::Overloaded,
            "the webhook queue of this shard is full: try again once deliveries drain",
        )));
    }
    let at_ms = core.now_ms();
    let lsn = core.commit(Record::WebhookRedelivered { id: key, at_ms });
    Done {
        result: Ok(Reply::Done),
        wait_lsn: lsn,
    }
}
