//! Webhook deliveries (a definition's `webhook:`, a run's `--webhook URL`) and appends to
//! its `eventStream:`: the outbox of run events on their way to receivers or to a stream,
//! and the deliveries given up on. A delivery is
//! derived in `apply` from the event its record says (`fold/events.rs`) — as durable as
//! that record, no record of its own — with the body the receiver gets built there, once.
//! Each attempt's end is a record (`WebhookAttempted`: delivered, retried at, or given up)
//! and so is an operator's `flo webhook redeliver` (`WebhookRedelivered`). Sending is the
//! handlers' (`webhooks/`): what is in flight is not kept here, so after a restart every
//! pending delivery is sent again (at least once).
//!
//! Bounded per shard: `PENDING_MAX` deliveries and `PENDING_BYTES_MAX` bytes of bodies
//! waiting; a delivery beyond goes straight to the failed list saying so (a dead receiver
//! never grows the shard's memory without bound); the failed list keeps the newest
//! `FAILED_MAX` (and `FAILED_BYTES_MAX`).

use crate::fold::events::{EventKind, RunEvent};
use crate::fold::workflows::Workflows;
use flo_protocol::WebhookDelivery;
use flo_workflow::RetryPolicy;
use flo_workflow::webhook::{Webhook, default_retry};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Deliveries waiting to be sent or retried on one shard.
pub const PENDING_MAX: usize = 10_000;
pub const PENDING_BYTES_MAX: usize = 64 << 20;
/// Failed deliveries kept on one shard (the oldest are dropped beyond).
pub const FAILED_MAX: usize = 10_000;
pub const FAILED_BYTES_MAX: usize = 64 << 20;

/// The bit of a delivery's id that marks an append to the definition's `eventStream`
/// (the rest is the event's position, as for its webhook delivery).
pub const STREAM_SINK: u64 = 1 << 63;

/// The LSN of the record whose event delivery `id` carries.
pub fn event_lsn(id: u64) -> u64 {
    crate::fold::events::lsn_of(id & !STREAM_SINK)
}

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sink {
    Http(Webhook),
    /// Appended to this stream of the run's namespace, keyed by run id.
    Stream {
        stream: String,
    },
}

impl Sink {
    pub fn retry(&self) -> RetryPolicy {
        match self {
            Sink::Http(w) => w.retry.clone(),
            Sink::Stream { .. } => default_retry(),
        }
    }

    /// As listings show it: the URL, or `stream:NAME`.
    pub fn target(&self) -> String {
        match self {
            Sink::Http(w) => w.url.clone(),
            Sink::Stream { stream } => format!("stream:{stream}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub namespace: Arc<str>,
    pub workflow: Arc<str>,
    pub run_id: Box<str>,
    pub event: EventKind,
    pub sink: Arc<Sink>,
    /// JSON, the same on every attempt.
    #[serde(with = "arc_bytes")]
    pub body: Arc<[u8]>,
    pub created_ms: u64,
    /// Attempts made (since the last redelivery).
    pub attempts: u32,
    /// Pending: when the next attempt is due. Failed: when it was given up.
    pub at_ms: u64,
    pub last_error: Option<String>,
}

impl Delivery {
    /// The id receivers and operators see: the shard and the event's position there.
    pub fn public_id(shard: u32, id: u64) -> String {
        format!("{shard}-{id}")
    }

    pub fn info(&self, shard: u32, id: u64) -> WebhookDelivery {
        WebhookDelivery {
            id: Delivery::public_id(shard, id),
            workflow: self.workflow.to_string(),
            run_id: self.run_id.to_string(),
            event: self.event.as_str().to_string(),
            url: self.sink.target(),
            attempts: self.attempts,
            created_ms: self.created_ms,
            at_ms: self.at_ms,
            last_error: self.last_error.clone(),
        }
    }
}

/// `"S-P"` as (shard, id), if it is one.
pub fn parse_public_id(id: &str) -> Option<(u32, u64)> {
    let (shard, pos) = id.split_once('-')?;
    Some((shard.parse().ok()?, pos.parse().ok()?))
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhooks {
    /// By id (the event's position: its record's LSN, shifted).
    pending: BTreeMap<u64, Delivery>,
    failed: BTreeMap<u64, Delivery>,
    /// Failed deliveries dropped to keep the list bounded.
    failed_dropped: u64,
    /// Pending ones by when they are due (derived: rebuilt on load).
    #[serde(skip)]
    due: BTreeSet<(u64, u64)>,
    #[serde(skip)]
    pending_bytes: usize,
    #[serde(skip)]
    failed_bytes: usize,
    /// Some definition or run has a webhook: events are looked at (set again on load).
    #[serde(skip)]
    armed: bool,
}

impl Webhooks {
    /// After a snapshot is loaded: the derived parts.
    pub fn rebuild(&mut self, workflows: &Workflows) {
        self.due = self.pending.iter().map(|(id, d)| (d.at_ms, *id)).collect();
        self.pending_bytes = self.pending.values().map(|d| d.body.len()).sum();
        self.failed_bytes = self.failed.values().map(|d| d.body.len()).sum();
        self.armed = workflows.any_webhooks();
    }

    /// Events are looked at from now on (a definition or run with a webhook appeared).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    pub fn armed(&self) -> bool {
        self.armed
    }

    /// The deliveries `events` (just noted, their record applied) ask for.
    pub fn note<'a>(
        &mut self,
        shard: u32,
        events: impl Iterator<Item = &'a RunEvent>,
        workflows: &Workflows,
    ) {
        for e in events {
            let Some(run) = workflows.run(&e.namespace, &e.run_id) else {
                continue;
            };
            let def = run.def.as_ref().ok();
            let def_hook = def.and_then(|d| d.webhook.as_ref());
            let webhook = match (&run.webhook_url, def_hook) {
                (Some(url), def) => Some(Webhook::for_run(def, url)),
                (None, Some(w)) => Some(w.clone()),
                (None, None) => None,
            }
            .filter(|w| w.wants(e.kind.as_str()));
            let stream = def
                .and_then(|d| d.event_stream.as_ref())
                .filter(|s| s.wants(e.kind.as_str()));
            if webhook.is_none() && stream.is_none() {
                continue;
            }
            let body: Arc<[u8]> = body(shard, e, run).into();
            let delivery = |sink: Sink| Delivery {
                namespace: e.namespace.clone(),
                workflow: e.workflow.clone(),
                run_id: e.run_id.clone(),
                event: e.kind,
                sink: Arc::new(sink),
                body: body.clone(),
                created_ms: e.at_ms,
                attempts: 0,
                at_ms: e.at_ms,
                last_error: None,
            };
            if let Some(w) = webhook {
                self.add(e.pos, delivery(Sink::Http(w)));
            }
            if let Some(s) = stream {
                let sink = Sink::Stream {
                    stream: s.stream.clone(),
                };
                self.add(e.pos | STREAM_SINK, delivery(sink));
            }
        }
    }

    fn add(&mut self, id: u64, mut d: Delivery) {
        let full = self.pending.len() >= PENDING_MAX
            || self.pending_bytes + d.body.len() > PENDING_BYTES_MAX;
        if full {
            d.last_error = Some(format!(
                "not sent: the webhook queue is full ({} deliveries, {} bytes wait on this shard)",
                self.pending.len(),
                self.pending_bytes
            ));
            self.fail(id, d);
            return;
        }
        self.pending_bytes += d.body.len();
        self.due.insert((d.at_ms, id));
        self.pending.insert(id, d);
    }

    fn fail(&mut self, id: u64, d: Delivery) {
        self.failed_bytes += d.body.len();
        self.failed.insert(id, d);
        while self.failed.len() > FAILED_MAX || self.failed_bytes > FAILED_BYTES_MAX {
            let Some((_, old)) = self.failed.pop_first() else {
                break;
            };
            self.failed_bytes -= old.body.len();
            self.failed_dropped += 1;
        }
    }

    fn take_pending(&mut self, id: u64) -> Option<Delivery> {
        let d = self.pending.remove(&id)?;
        self.due.remove(&(d.at_ms, id));
        self.pending_bytes -= d.body.len();
        Some(d)
    }

    /// `WebhookAttempted`: attempt `attempt` of `id` was delivered (`error` None), is
    /// retried at `retry_at_ms`, or was the last. False: no such pending delivery.
    pub fn apply_attempted(
        &mut self,
        id: u64,
        attempt: u32,
        at_ms: u64,
        error: Option<String>,
        retry_at_ms: Option<u64>,
    ) -> bool {
        let Some(mut d) = self.take_pending(id) else {
            return false;
        };
        d.attempts = attempt;
        let Some(error) = error else {
            return true;
        };
        d.last_error = Some(error);
        match retry_at_ms {
            Some(at) => {
                d.at_ms = at;
                self.pending_bytes += d.body.len();
                self.due.insert((at, id));
                self.pending.insert(id, d);
            }
            None => {
                d.at_ms = at_ms;
                self.fail(id, d);
            }
        }
        true
    }

    /// `WebhookRedelivered`: failed delivery `id` is due again at `at_ms`, its attempts
    /// counted from 1 again. False: no such failed delivery.
    pub fn apply_redelivered(&mut self, id: u64, at_ms: u64) -> bool {
        let Some(mut d) = self.failed.remove(&id) else {
            return false;
        };
        self.failed_bytes -= d.body.len();
        d.attempts = 0;
        d.at_ms = at_ms;
        self.pending_bytes += d.body.len();
        self.due.insert((at_ms, id));
        self.pending.insert(id, d);
        true
    }

    pub fn pending(&self, id: u64) -> Option<&Delivery> {
        self.pending.get(&id)
    }

    pub fn failed(&self, id: u64) -> Option<&Delivery> {
        self.failed.get(&id)
    }

    /// Pending deliveries by when they are due (id order among equals).
    pub fn due(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.due.iter().copied()
    }

    /// The pending (`failed`: the failed) deliveries, oldest first.
    pub fn list(&self, failed: bool) -> impl Iterator<Item = (u64, &Delivery)> {
        let map = if failed { &self.failed } else { &self.pending };
        map.iter().map(|(id, d)| (*id, d))
    }

    /// Whether a delivery may be added back to the pending ones.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.pending.len() < PENDING_MAX && self.pending_bytes + bytes <= PENDING_BYTES_MAX
    }

    /// (pending, failed, failed dropped) for status and the digest.
    pub fn counts(&self) -> (usize, usize, u64) {
        (self.pending.len(), self.failed.len(), self.failed_dropped)
    }
}

/// What the receiver gets for event `e` of `run`: the event, and what it concerns — a
/// finished step's outcome and output; the run's output, error and state at its end; the
/// state after an update.
fn body(shard: u32, e: &RunEvent, run: &crate::fold::workflows::WfRun) -> Vec<u8> {
    let mut b = json!({
        "id": Delivery::public_id(shard, e.pos),
        "event": e.kind.as_str(),
        "namespace": &*e.namespace,
        "workflow": &*e.workflow,
        "version": run.version,
        "run_id": &*e.run_id,
        "step": e.step.as_deref(),
        "at_ms": e.at_ms,
        "status": run.status().as_str(),
    });
    let fields = b.as_object_mut().expect("an object");
    match e.kind {
        EventKind::StepFinished => {
            let step = e
                .step
                .as_deref()
                .and_then(|s| run.steps.iter().find(|x| x.name == s));
            if let Some(s) = step {
                fields.insert(
                    "outcome".into(),
                    json!(s.outcome.as_ref().map(|o| o.to_string())),
                );
                fields.insert("output".into(), s.output.clone().unwrap_or(Value::Null));
            }
        }
        EventKind::Completed | EventKind::Failed | EventKind::Cancelled | EventKind::TimedOut => {
            let output = match &run.lead.phase {
                crate::fold::workflows::RunPhase::Ended { output, .. } => output.clone(),
                _ => None,
            };
            fields.insert("output".into(), output.unwrap_or(Value::Null));
            fields.insert("error".into(), json!(run.error));
            fields.insert("state".into(), run.state.clone());
        }
        EventKind::StateUpdated => {
            fields.insert("state".into(), run.state.clone());
        }
        _ => {}
    }
    serde_json::to_vec(&b).unwrap_or_default()
}

/// `Arc<[u8]>` as MessagePack `bin`.
mod arc_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(bytes: &Arc<[u8]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[u8]>, D::Error> {
        let bytes: serde_bytes::ByteBuf = Deserialize::deserialize(d)?;
        Ok(bytes.into_vec().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(body_len: usize) -> Delivery {
        Delivery {
            namespace: "ns".into(),
            workflow: "w".into(),
            run_id: "r".into(),
            event: EventKind::Completed,
            sink: Arc::new(Sink::Http(Webhook::for_run(None, "http://h/"))),
            body: vec![b'x'; body_len].into(),
            created_ms: 1,
            attempts: 0,
            at_ms: 1,
            last_error: None,
        }
    }

    #[test]
    fn the_language_names_every_event_kind() {
        let kinds: Vec<&str> = crate::fold::events::ALL
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(kinds, flo_workflow::webhook::RUN_EVENT_NAMES);
    }

    #[test]
    fn an_attempt_delivers_retries_or_gives_up_and_redelivery_brings_it_back() {
        let mut w = Webhooks::default();
        w.add(8, delivery(10));
        w.add(16, delivery(10));
        assert_eq!(w.due().collect::<Vec<_>>(), [(1, 8), (1, 16)]);
        assert!(w.apply_attempted(8, 1, 5, None, None), "delivered");
        assert!(w.apply_attempted(16, 1, 5, Some("HTTP 500".into()), Some(100)));
        assert_eq!(w.due().collect::<Vec<_>>(), [(100, 16)]);
        assert!(!w.apply_attempted(8, 2, 5, None, None), "gone");
        assert!(w.apply_attempted(16, 2, 100, Some("HTTP 502".into()), None));
        assert_eq!(w.counts(), (0, 1, 0));
        let failed = w.failed(16).unwrap();
        assert_eq!((failed.attempts, failed.at_ms), (2, 100));
        assert_eq!(failed.last_error.as_deref(), Some("HTTP 502"));
        assert!(w.apply_redelivered(16, 200));
        assert!(!w.apply_redelivered(16, 200));
        assert_eq!(w.pending(16).unwrap().attempts, 0);
        assert_eq!(w.due().collect::<Vec<_>>(), [(200, 16)]);
        assert_eq!((w.pending_bytes, w.failed_bytes), (10, 0));
    }

    #[test]
    fn a_full_queue_fails_new_deliveries_and_the_failed_list_keeps_the_newest() {
        let mut w = Webhooks::default();
        w.add(1, delivery(PENDING_BYTES_MAX - 5));
        w.add(2, delivery(10));
        assert_eq!(w.counts(), (1, 1, 0));
        let why = w.failed(2).unwrap().last_error.clone().unwrap();
        assert!(why.contains("queue is full"), "{why}");
        for id in 10..(10 + FAILED_MAX as u64) {
            w.fail(id, delivery(1));
        }
        let (_, failed, dropped) = w.counts();
        assert_eq!((failed, dropped), (FAILED_MAX, 1));
        assert!(w.failed(2).is_none(), "the oldest went");
        let mut copy = w.clone();
        copy.due.clear();
        copy.rebuild(&Workflows::default());
        assert_eq!(copy.due, w.due);
        assert_eq!(
            (copy.pending_bytes, copy.failed_bytes),
            (w.pending_bytes, w.failed_bytes)
        );
        assert_eq!(parse_public_id("3-77"), Some((3, 77)));
        assert_eq!(parse_public_id("x-1"), None);
        assert_eq!(Delivery::public_id(3, 77), "3-77");
    }
}
