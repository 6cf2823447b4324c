//! Where a client operation executes: the one place that classifies an `Op`.

use crate::definitions::COORDINATOR;
use crate::fold::runs::idempotent_run_id;
use crate::fold::streams::owner_of;
use crate::hash::Partitioning;
use crate::workflows::idempotent_workflow_run_id;
use flo_protocol::{InvokeSpec, Op, WorkflowStartSpec};

/// Where an operation executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Shard(u32),
    /// Every shard, the parts merged (`fanout::merge`).
    All,
    /// The shard the client is connected to, whoever owns anything (connection-level).
    Here,
    /// A stream append, group read, ack or nack: split by partition on the shard the
    /// client is connected to (`streams::scatter`), each part to its partition's owner.
    Streams,
}

/// The key that places a keyed operation: (namespace, key).
pub fn route_key(op: &Op) -> Option<(&str, String)> {
    Some(match op {
        Op::KvGet { namespace, key, .. }
        | Op::KvPut { namespace, key, .. }
        | Op::KvDelete { namespace, key, .. } => (namespace, key.clone()),
        Op::RunStatus { namespace, run_id }
        | Op::RunWait {
            namespace, run_id, ..
        }
        | Op::RunCancel { namespace, run_id }
        | Op::RunRedrive {
            namespace, run_id, ..
        } => (namespace, run_id.clone()),
        Op::TaskComplete {
            namespace, task_id, ..
        }
        | Op::TaskFail {
            namespace, task_id, ..
        }
        | Op::TaskTouch {
            namespace, task_id, ..
        } => (namespace, task_id.clone()),
        Op::WorkerRegister(spec) => (&spec.namespace, spec.worker_id.clone()),
        Op::WorkflowStatus { namespace, run_id }
        | Op::WorkflowWait {
            namespace, run_id, ..
        }
        | Op::WorkflowHistory {
            namespace, run_id, ..
        }
        | Op::WorkflowSignal {
            namespace, run_id, ..
        }
        | Op::WorkflowCancel {
            namespace, run_id, ..
        }
        | Op::WorkflowControl {
            namespace, run_id, ..
        }
        | Op::WorkflowUpdateState {
            namespace, run_id, ..
        } => (namespace, run_id.clone()),
        // A run id the caller chose places the run (and finds it again on a repeat).
        Op::WorkflowStart(WorkflowStartSpec {
            namespace,
            run_id: Some(run_id),
            ..
        }) => (namespace, run_id.clone()),
        Op::WorkflowStart(WorkflowStartSpec {
            namespace,
            name,
            idempotency_key: Some(key),
            ..
        }) => (namespace, idempotent_workflow_run_id(name, key)),
        Op::WorkerHeartbeat {
            namespace,
            worker_id,
            ..
        }
        | Op::WorkerDrain {
            namespace,
            worker_id,
        }
        | Op::WorkerDeregister {
            namespace,
            worker_id,
        }
        | Op::WorkerGet {
            namespace,
            worker_id,
        }
        | Op::TaskAwait {
            namespace,
            worker_id,
            ..
        } => (namespace, worker_id.clone()),
        Op::ActionInvoke(InvokeSpec {
            namespace,
            action,
            idempotency_key: Some(key),
            ..
        }) => (namespace, idempotent_run_id(action, key)),
        // A schedule lives on the shard its workflow's name hashes to.
        Op::SchedulePause {
            namespace, name, ..
        }
        | Op::ScheduleTrigger { namespace, name } => (namespace, name.clone()),
        // Not keyed: placed by `target`. Listed one by one so that a new operation has to
        // be placed here or there.
        Op::Hello { .. }
        | Op::Status
        | Op::ShardMap
        | Op::KvList { .. }
        | Op::ActionRegister(_)
        | Op::ActionGet { .. }
        | Op::ActionList { .. }
        | Op::ActionDelete { .. }
        | Op::ActionSetEnabled { .. }
        | Op::ActionInvoke(_)
        | Op::RunList { .. }
        | Op::WorkerList { .. }
        | Op::WorkflowCreate { .. }
        | Op::WorkflowGet { .. }
        | Op::WorkflowList { .. }
        | Op::WorkflowSetEnabled { .. }
        | Op::WorkflowStart(_)
        | Op::WorkflowListRuns { .. }
        | Op::StreamCreate { .. }
        | Op::StreamDelete { .. }
        | Op::StreamAppend { .. }
        | Op::StreamRead(_)
        | Op::StreamGet { .. }
        | Op::StreamList { .. }
        | Op::StreamTrim { .. }
        | Op::StreamGroupCreate { .. }
        | Op::StreamGroupDelete { .. }
        | Op::StreamGroupRead(_)
        | Op::StreamGroupAck { .. }
        | Op::StreamGroupNack { .. }
        | Op::StreamGroupPending { .. }
        | Op::StreamGroupInfo { .. }
        | Op::ScheduleList { .. }
        | Op::WorkflowQuery { .. }
        | Op::WorkflowEvents { .. }
        | Op::WebhookDeliveries { .. }
        | Op::WebhookRedeliver { .. }
        | Op::PlanStatus { .. }
        | Op::PlanInvalidate { .. }
        | Op::TestAdvanceClock { .. } => return None,
    })
}

/// Where `op`, received by shard `me`, executes.
pub fn target(op: &Op, me: u32, partitioning: &Partitioning) -> Target {
    if let Some((namespace, key)) = route_key(op) {
        return Target::Shard(partitioning.shard_of(namespace, &key));
    }
    match op {
        Op::ActionRegister(_)
        | Op::ActionDelete { .. }
        | Op::ActionSetEnabled { .. }
        | Op::WorkflowCreate { .. }
        | Op::WorkflowSetEnabled { .. }
        | Op::StreamCreate { .. }
        | Op::StreamDelete { .. }
        | Op::StreamGroupCreate { .. }
        | Op::StreamGroupDelete { .. } => Target::Shard(COORDINATOR),
        // A blocking read waits where the client is connected.
        Op::StreamRead(spec) if spec.block_ms.is_some_and(|ms| ms > 0) && !spec.tail => {
            Target::Streams
        }
        // One partition's read goes to its owner.
        Op::StreamRead(spec) if spec.partition.is_some() => {
            let p = spec.partition.unwrap_or(0);
            Target::Shard(owner_of(partitioning, &spec.namespace, &spec.stream, p))
        }
        // The streams domain splits an append over the partitions it goes to.
        Op::StreamAppend { .. }
        | Op::StreamGroupRead(_)
        | Op::StreamGroupAck { .. }
        | Op::StreamGroupNack { .. } => Target::Streams,
        // Definitions live on every shard; a new run takes an id this shard owns.
        Op::ActionGet { .. }
        | Op::ActionList { .. }
        | Op::ActionInvoke(_)
        | Op::WorkflowGet { .. }
        | Op::WorkflowList { .. }
        | Op::WorkflowStart(_) => Target::Shard(me),
        Op::Status
        | Op::KvList { .. }
        | Op::RunList { .. }
        | Op::WorkerList { .. }
        | Op::WorkflowListRuns { .. }
        | Op::StreamRead(_)
        | Op::StreamGet { .. }
        | Op::StreamList { .. }
        | Op::StreamTrim { .. }
        | Op::StreamGroupPending { .. }
        | Op::StreamGroupInfo { .. }
        | Op::ScheduleList { .. }
        | Op::WorkflowQuery { .. }
        | Op::WorkflowEvents { .. }
        | Op::WebhookDeliveries { .. }
        | Op::PlanStatus { .. }
        | Op::PlanInvalidate { .. }
        | Op::TestAdvanceClock { .. } => Target::All,
        // A delivery lives on the shard its id names (an id naming none: here, which
        // answers that it does not exist).
        Op::WebhookRedeliver { id, .. } => Target::Shard(
            crate::fold::webhooks::parse_public_id(id)
                .map(|(shard, _)| shard)
                .filter(|s| *s < partitioning.shards)
                .unwrap_or(me),
        ),
        Op::Hello { .. } | Op::ShardMap => Target::Here,
        // Keyed: `route_key` placed them above.
        Op::KvGet { .. }
        | Op::KvPut { .. }
        | Op::KvDelete { .. }
        | Op::RunStatus { .. }
        | Op::RunWait { .. }
        | Op::RunCancel { .. }
        | Op::RunRedrive { .. }
        | Op::WorkerRegister(_)
        | Op::WorkerHeartbeat { .. }
        | Op::WorkerDrain { .. }
        | Op::WorkerDeregister { .. }
        | Op::WorkerGet { .. }
        | Op::TaskAwait { .. }
        | Op::TaskComplete { .. }
        | Op::TaskFail { .. }
        | Op::TaskTouch { .. }
        | Op::WorkflowStatus { .. }
        | Op::WorkflowWait { .. }
        | Op::WorkflowHistory { .. }
        | Op::WorkflowSignal { .. }
        | Op::WorkflowCancel { .. }
        | Op::WorkflowControl { .. }
        | Op::WorkflowUpdateState { .. }
        | Op::SchedulePause { .. }
        | Op::ScheduleTrigger { .. } => Target::Shard(me),
    }
}

/// Whether `op` only removes data (a key, an action, a stream or a consumer group, a
/// stream's oldest records): a mutation a shard whose disk is full still takes, as the
/// way out through flo — its record is small, and the snapshot the runtime takes while
/// the disk is full then lets the segments below go (`docs/operations.md`).
pub fn frees_space(op: &Op) -> bool {
    matches!(
        op,
        Op::KvDelete { .. }
            | Op::ActionDelete { .. }
            | Op::StreamDelete { .. }
            | Op::StreamTrim { dry_run: false, .. }
            | Op::StreamGroupDelete { .. }
    )
}

/// Whether `op` is a client mutation: it exists to change durable state, so it commits a
/// record on the shard that executes it. A shard whose disk is full refuses these and
/// serves the rest (reads, waits, the worker registry, which is not logged; a worker's
/// await is served, though a full shard leases it nothing).
pub fn mutates(op: &Op) -> bool {
    match op {
        Op::KvPut { .. }
        | Op::KvDelete { .. }
        | Op::ActionRegister(_)
        | Op::ActionDelete { .. }
        | Op::ActionSetEnabled { .. }
        | Op::ActionInvoke(_)
        | Op::RunCancel { .. }
        | Op::RunRedrive { .. }
        | Op::TaskComplete { .. }
        | Op::TaskFail { .. }
        | Op::TaskTouch { .. }
        | Op::WorkflowCreate { .. }
        | Op::WorkflowSetEnabled { .. }
        | Op::WorkflowStart(_)
        | Op::WorkflowSignal { .. }
        | Op::WorkflowCancel { .. }
        | Op::WorkflowControl { .. }
        | Op::WorkflowUpdateState { .. }
        | Op::StreamCreate { .. }
        | Op::StreamDelete { .. }
        | Op::StreamAppend { .. }
        | Op::StreamTrim { dry_run: false, .. }
        | Op::StreamGroupCreate { .. }
        | Op::StreamGroupDelete { .. }
        | Op::StreamGroupRead(_)
        | Op::StreamGroupAck { .. }
        | Op::StreamGroupNack { .. }
        | Op::SchedulePause { .. }
        | Op::ScheduleTrigger { .. }
        | Op::WebhookRedeliver { .. } => true,
        Op::Hello { .. }
        | Op::Status
        | Op::ShardMap
        | Op::KvGet { .. }
        | Op::KvList { .. }
        | Op::ActionGet { .. }
        | Op::ActionList { .. }
        | Op::RunStatus { .. }
        | Op::RunWait { .. }
        | Op::RunList { .. }
        | Op::WorkerRegister(_)
        | Op::WorkerHeartbeat { .. }
        | Op::WorkerDrain { .. }
        | Op::WorkerDeregister { .. }
        | Op::WorkerGet { .. }
        | Op::WorkerList { .. }
        | Op::TaskAwait { .. }
        | Op::WorkflowGet { .. }
        | Op::WorkflowList { .. }
        | Op::WorkflowStatus { .. }
        | Op::WorkflowWait { .. }
        | Op::WorkflowHistory { .. }
        | Op::WorkflowListRuns { .. }
        | Op::StreamRead(_)
        | Op::StreamGet { .. }
        | Op::StreamList { .. }
        | Op::StreamTrim { dry_run: true, .. }
        | Op::StreamGroupPending { .. }
        | Op::StreamGroupInfo { .. }
        | Op::ScheduleList { .. }
        | Op::WorkflowQuery { .. }
        | Op::WorkflowEvents { .. }
        | Op::WebhookDeliveries { .. }
        | Op::PlanStatus { .. }
        | Op::PlanInvalidate { .. }
        | Op::TestAdvanceClock { .. } => false,
    }
}
