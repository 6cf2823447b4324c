//! Stream triggers: an enabled workflow with `trigger:` starts one run per record of its
//! stream (or per batch), read through its consumer group as the consumer `flo-trigger`.
//!
//! The coordinator creates the group once the stream exists, starting at the workflow's
//! creation. Each partition's owner delivers records to the trigger (a durable
//! `StreamDelivered`), starts each run on the shard owning its id, and acknowledges the
//! records once the run's start is durable there. The run id derives from the workflow and
//! the record's id: a record delivered again after a crash finds its run instead of starting
//! a second (exactly once per record). A redelivery takes exactly one earlier delivery (the
//! due records delivered at the same moment), so a batch is redelivered whole. Disabling the
//! workflow pauses its trigger; enabling it goes on from where it stopped.

use super::Engine;
use crate::core::Waiting;
use crate::core::io::{LogLine, LogSource, PeerRequest, ReplyResult, ReplyTo};
use crate::definitions::{self, COORDINATOR};
use crate::fold::record::Record;
use crate::fold::stream_group_ops::GroupAt;
use crate::hash::stable_hash;
use crate::tables::HashMap;
use crate::workflows;
use flo_protocol::{
    ErrorCode, ErrorValue, GroupConfig, GroupStart, Op, Reply, StreamId, WorkflowStartSpec,
};
use std::collections::HashSet;

/// The consumer name triggers read as.
pub const TRIGGER_CONSUMER: &str = "flo-trigger";
/// Runs a trigger starts at once per partition (records delivered, not yet acknowledged).
const TRIGGER_IN_FLIGHT_MAX: u32 = 64;
/// A trigger's records unacknowledged this long (a crash between delivery and start) are
/// delivered again.
const TRIGGER_MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// A record whose run cannot start (input refused, the workflow gone) is tried again after
/// this long, and dead-lettered after the group's max deliveries.
const TRIGGER_RETRY_MS: u64 = 1_000;

/// One enabled workflow's trigger.
#[derive(Debug, Clone)]
struct Trigger {
    namespace: String,
    workflow: String,
    source: String,
    stream: String,
    group: String,
    mode: flo_protocol::GroupMode,
    batch_size: u32,
    created_at_ms: u64,
}

/// Where a delivery of a trigger's records stands: (source namespace, stream, partition,
/// group).
type PartKey = (String, String, u32, String);

#[derive(Default)]
pub struct Triggers {
    /// Enabled triggers, as of the definitions at `seen_lsn`.
    list: Vec<Trigger>,
    seen_lsn: Option<u64>,
    /// Runs being started, per partition.
    in_flight: HashMap<PartKey, u32>,
    /// When each partition last delivered a batch (one batch per millisecond, so that a
    /// redelivery finds a batch by its delivery time).
    last_batch_ms: HashMap<PartKey, u64>,
    /// Groups the coordinator asked for and has not seen yet.
    asked: HashSet<(String, String, String)>,
}

impl Triggers {
    pub fn len(&self) -> usize {
        self.in_flight.values().map(|&n| n as usize).sum()
    }
}

use crate::core::TriggerStart;

/// The id of the run a trigger starts for the batch whose first record is `first`.
fn run_id(t: &Trigger, partition_first: StreamId) -> String {
    let h = stable_hash(&t.source, &format!("{}\u{0}{}", t.stream, t.workflow));
    format!("trig-{h:016x}-{partition_first}")
}

impl Engine {
    /// The enabled triggers, refreshed when a definition changed.
    fn refresh_triggers(&mut self) {
        let lsn = self.core.definitions_lsn();
        if self.triggers.seen_lsn == Some(lsn) {
            return;
        }
        self.triggers.seen_lsn = Some(lsn);
        let mut list = Vec::new();
        for ((ns, name), entry) in self.core.state().workflows.defs.iter() {
            let Some(latest) = entry.versions.last() else {
                continue;
            };
            let (true, Ok(def)) = (entry.enabled, &latest.def) else {
                continue;
            };
            let Some(t) = &def.trigger else {
                continue;
            };
            list.push(Trigger {
                namespace: ns.clone(),
                workflow: name.clone(),
                source: t.namespace.clone().unwrap_or_else(|| ns.clone()),
                stream: t.stream.clone(),
                group: t.consumer_group.clone(),
                mode: t.mode,
                batch_size: t.batch_size,
                created_at_ms: latest.created_at_ms,
            });
        }
        list.sort_by(|a, b| (&a.namespace, &a.workflow).cmp(&(&b.namespace, &b.workflow)));
        self.triggers.list = list;
    }

    /// Delivers what the triggers' partitions held here have for them and starts the runs;
    /// on the coordinator, creates the groups triggers need.
    pub(super) fn pump_triggers(&mut self) {
        self.refresh_triggers();
        if self.triggers.list.is_empty() || self.stopping || self.log_refusal().is_some() {
            return;
        }
        // What each trigger has to do, found without copying the list; copies only for
        // the triggers with work.
        let now = self.core.now_ms();
        let streams = &self.core.state().streams;
        let mut work: Vec<(usize, Option<Vec<u32>>)> = Vec::new();
        for (i, t) in self.triggers.list.iter().enumerate() {
            let Some(def) = streams.def(&t.source, &t.stream) else {
                continue;
            };
            if !def.groups.contains_key(&t.group) {
                work.push((i, None));
                continue;
            }
            let partitions: Vec<u32> = streams
                .local_partitions(&t.source, &t.stream)
                .filter(|(_, part)| has_work(part, &t.group, now))
                .map(|(p, _)| p)
                .collect();
            if !partitions.is_empty() {
                work.push((i, Some(partitions)));
            }
        }
        for (i, partitions) in work {
            let t = self.triggers.list[i].clone();
            match partitions {
                None => self.ask_for_group(&t),
                Some(partitions) => {
                    for p in partitions {
                        self.deliver_to_trigger(&t, p);
                    }
                }
            }
        }
    }

    fn ask_for_group(&mut self, t: &Trigger) {
        let key = (t.source.clone(), t.stream.clone(), t.group.clone());
        if self.core.shard() != COORDINATOR || !self.triggers.asked.insert(key) {
            return;
        }
        let op = Op::StreamGroupCreate {
            namespace: t.source.clone(),
            stream: t.stream.clone(),
            group: t.group.clone(),
            config: GroupConfig {
                mode: t.mode,
                start: GroupStart::At(StreamId::new(t.created_at_ms, 0)),
                max_deliveries: None,
                message_timeout_ms: Some(TRIGGER_MESSAGE_TIMEOUT_MS),
            },
        };
        // Nobody waits for the answer (tag 0); the group shows in the definitions.
        let to = ReplyTo::Peer {
            shard: COORDINATOR,
            tag: 0,
        };
        definitions::submit(&mut self.core, &mut self.definitions, to, op);
    }

    /// Forgets the groups asked for (they are asked again if still missing): after a
    /// refusal, the next housekeeping tries again.
    pub(super) fn retry_trigger_groups(&mut self) {
        self.triggers.asked.clear();
    }

    fn deliver_to_trigger(&mut self, t: &Trigger, partition: u32) {
        let key: PartKey = (
            t.source.clone(),
            t.stream.clone(),
            partition,
            t.group.clone(),
        );
        let in_flight = self.triggers.in_flight.get(&key).copied().unwrap_or(0);
        let now = self.core.now_ms();
        let batch = t.batch_size > 1;
        if batch && (in_flight > 0 || self.triggers.last_batch_ms.get(&key) == Some(&now)) {
            return;
        }
        let room = TRIGGER_IN_FLIGHT_MAX.saturating_sub(in_flight);
        let count = if batch { t.batch_size } else { room };
        if count == 0 {
            return;
        }
        let at = GroupAt {
            namespace: &t.source,
            stream: &t.stream,
            partition,
            group: &t.group,
        };
        let streams = &self.core.state().streams;
        let planned = streams.plan_delivery(at, TRIGGER_CONSUMER, count as usize, now, true);
        let Ok(records) = planned else {
            return;
        };
        let mut ids = Vec::new();
        for record in records {
            if let Record::StreamDelivered { ids: delivered, .. } = &record {
                ids.clone_from(delivered);
            }
            self.core.commit(record);
        }
        if ids.is_empty() {
            return;
        }
        self.triggers.last_batch_ms.insert(key.clone(), now);
        let chunks: Vec<Vec<StreamId>> = if batch {
            vec![ids]
        } else {
            ids.into_iter().map(|id| vec![id]).collect()
        };
        *self.triggers.in_flight.entry(key.clone()).or_insert(0) += chunks.len() as u32;
        for chunk in chunks {
            self.start_triggered(t, &key, chunk);
        }
    }

    /// Starts the run of one record (or batch) on the shard owning its id.
    fn start_triggered(&mut self, t: &Trigger, key: &PartKey, ids: Vec<StreamId>) {
        let part = self
            .core
            .state()
            .streams
            .partition(&t.source, &t.stream, key.2);
        let payloads: Vec<serde_json::Value> = ids
            .iter()
            .filter_map(|id| part.and_then(|p| p.entry(*id)))
            .map(|e| {
                serde_json::from_slice(&e.payload).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&e.payload).into_owned())
                })
            })
            .collect();
        let input = if t.batch_size > 1 {
            serde_json::Value::Array(payloads)
        } else {
            payloads
                .into_iter()
                .next()
                .unwrap_or(serde_json::Value::Null)
        };
        let run_id = run_id(t, ids[0]);
        let spec = WorkflowStartSpec {
            namespace: t.namespace.clone(),
            name: t.workflow.clone(),
            version: None,
            input: serde_json::to_vec(&input).unwrap_or_default(),
            idempotency_key: Some(run_id.clone()),
            wait_ms: None,
            run_id: Some(run_id.clone()),
            group: None,
            webhook: None,
        };
        let start = TriggerStart {
            namespace: key.0.clone(),
            stream: key.1.clone(),
            partition: key.2,
            group: key.3.clone(),
            ids,
        };
        let owner = self.core.partitioning().shard_of(&t.namespace, &run_id);
        if owner != self.core.shard() {
            let req = PeerRequest::Client(Op::WorkflowStart(spec));
            self.core
                .call(owner, 0, req, Waiting::TriggerStart(Box::new(start)));
            return;
        }
        let result = match workflows::start(&mut self.core, spec) {
            workflows::Started::Done(done) => done.result,
            // Triggered starts carry no idempotency key.
            workflows::Started::CheckArchived { run_id, .. } => Err(ErrorValue::conflict(format!(
                "workflow run {run_id:?} exists already"
            ))),
        };
        self.on_trigger_started(start, result);
    }

    /// A triggered run's start answered: its records are acknowledged when it started (or
    /// existed: a redelivery), else delivered again later.
    pub(super) fn on_trigger_started(&mut self, start: TriggerStart, result: ReplyResult) {
        let TriggerStart {
            namespace,
            stream,
            partition,
            group,
            ids,
        } = start;
        let key = (namespace, stream, partition, group);
        if let Some(n) = self.triggers.in_flight.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.triggers.in_flight.remove(&key);
            }
        }
        let started = match &result {
            Ok(Reply::WorkflowStarted { .. }) => true,
            // The id of an earlier delivery's run (and not a disabled workflow).
            Err(e) => e.code == ErrorCode::Conflict && e.message.contains("exists already"),
            Ok(_) => false,
        };
        let (ns, stream, partition, group) = key;
        let now = self.core.now_ms();
        let nack_due = (!started).then_some(now + TRIGGER_RETRY_MS);
        let settled = self
            .core
            .state()
            .streams
            .plan_settle(&ns, &stream, &group, partition, ids, nack_due);
        if let Ok((Some(record), _)) = settled {
            self.core.commit(record);
        }
        if let (false, Err(e)) = (started, &result) {
            let line = format!("a trigger of stream {stream:?} could not start its run: {e}");
            self.core.emit(LogLine::warn(LogSource::Trigger, line));
        }
    }
}

/// Whether a partition has records for a group now: due again, or not delivered yet.
fn has_work(part: &crate::fold::streams::Partition, group: &str, now_ms: u64) -> bool {
    let Some(g) = part.groups.get(group) else {
        return false;
    };
    g.due(now_ms).next().is_some() || part.count_after(g.cursor) > 0
}
