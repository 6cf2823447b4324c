//! Executes operations routed to this shard: synchronous ones at once, the rest (registry
//! changes, waits on runs) in tasks that reply later.

use super::shard::{COORDINATOR, ReplyResult, ReplyTo, Shard, ShardOp};
use super::wasm_runner;
use super::worker_host;
use super::workflow_host;
use crate::clock::Clock;
use crate::record::Record;
use flo_protocol::{
    ErrorValue, KV_LIST_LIMIT_DEFAULT, Op, RUN_LIST_LIMIT_DEFAULT, RUN_WAIT_MS_MAX, Reply,
    StatusInfo,
};
use std::rc::Rc;
use std::time::Duration;

pub(crate) fn handle(shard: &Rc<Shard>, op: ShardOp, to: ReplyTo) {
    if shard.stopping.get() {
        shard.reply(
            to,
            0,
            Err(ErrorValue::unavailable(
                "the server is shutting down; retry against it once restarted",
            )),
        );
        return;
    }
    match op {
        ShardOp::Client(op) => handle_client(shard, op, to),
        ShardOp::ApplyRegistry(record) => {
            let lsn = shard.commit(record);
            shard.reply(to, lsn, Ok(Reply::Done));
        }
        ShardOp::RegistrySync(defs) => {
            let records = shard
                .core
                .borrow()
                .state
                .registry
                .plan_sync(defs, shard.now_ms());
            commit_all_and_reply(shard, records, to);
        }
        ShardOp::WorkflowSync(entries) => {
            let records = shard.core.borrow().state.workflows.plan_sync(&entries);
            commit_all_and_reply(shard, records, to);
        }
        ShardOp::Want(msg) => {
            let origin = match &to {
                ReplyTo::Peer { shard, .. } => *shard,
                _ => shard.id,
            };
            worker_host::on_want(shard, origin, *msg, to);
        }
        ShardOp::WantCancel {
            namespace,
            worker_id,
            want_id,
        } => {
            worker_host::cancel_want(shard, &namespace, &worker_id, want_id);
            shard.reply(to, 0, Ok(Reply::Done));
        }
        ShardOp::TasksDelivered {
            namespace,
            worker_id,
            want_id,
            from,
            tasks,
        } => {
            worker_host::on_delivery(shard, &namespace, &worker_id, want_id, from, tasks, false);
            shard.reply(to, 0, Ok(Reply::Done));
        }
        ShardOp::ReleaseLeases {
            namespace,
            worker_id,
            run_ids,
        } => {
            let lsn = shard
                .core
                .borrow_mut()
                .release_tasks(&namespace, &worker_id, run_ids);
            if lsn > 0 {
                shard.flush.notify();
                worker_host::dispatch_soon(shard);
            }
            shard.reply(to, lsn, Ok(Reply::Done));
        }
        ShardOp::WorkerTaskDone {
            namespace,
            worker_id,
            action,
            ok,
            at_ms,
        } => {
            shard
                .core
                .borrow_mut()
                .workers
                .record_task(&namespace, &worker_id, &action, ok, at_ms);
            shard.reply(to, 0, Ok(Reply::Done));
        }
        ShardOp::RemoteWrites {
            origin_shard,
            origin_lsn,
            namespace,
            writes,
        } => {
            let at_ms = shard.now_ms();
            let lsn = shard.commit(Record::KvRemoteWrites {
                origin_shard,
                origin_lsn,
                namespace,
                writes,
                at_ms,
            });
            shard.reply(to, lsn, Ok(Reply::Done));
        }
    }
}

fn handle_client(shard: &Rc<Shard>, op: Op, to: ReplyTo) {
    match op {
        Op::ActionRegister(_)
        | Op::ActionDelete { .. }
        | Op::ActionSetEnabled { .. }
        | Op::WorkflowCreate { .. }
        | Op::WorkflowSetEnabled { .. } => {
            debug_assert_eq!(shard.id, COORDINATOR);
            let shard = shard.clone();
            glommio::spawn_local(async move {
                let result = registry_change(&shard, op).await;
                shard.reply(to, 0, result);
            })
            .detach();
        }
        Op::RunWait {
            namespace,
            run_id,
            timeout_ms,
        } => wait_for_run(shard, namespace, run_id, timeout_ms, to),
        // The clock is shared; the origin moved it, each shard re-reads its timers.
        Op::TestAdvanceClock { .. } => {
            shard.timer_signal.notify();
            shard.reply(to, 0, Ok(Reply::Done));
        }
        Op::ActionInvoke(spec) => {
            let (namespace, wait_ms, delayed) = (
                spec.namespace.clone(),
                spec.wait_ms,
                spec.delay_ms.unwrap_or(0) > 0,
            );
            let done = shard.execute(Op::ActionInvoke(spec));
            if delayed {
                shard.timer_signal.notify();
            }
            wasm_runner::kick(shard);
            worker_host::dispatch_soon(shard);
            match (wait_ms, done.result) {
                (Some(wait_ms), Ok(Reply::Invoked { run_id, .. })) => {
                    wait_for_run(shard, namespace, run_id, wait_ms, to)
                }
                (_, result) => shard.reply(to, done.wait_lsn, result),
            }
        }
        Op::WorkflowStart(spec) => workflow_host::start(shard, spec, to),
        Op::WorkflowSignal {
            namespace,
            run_id,
            signal_type,
            payload,
        } => workflow_host::signal(shard, namespace, run_id, signal_type, payload, to),
        Op::WorkflowCancel {
            namespace,
            run_id,
            reason,
        } => workflow_host::cancel(shard, namespace, run_id, reason, to),
        Op::WorkflowWait {
            namespace,
            run_id,
            timeout_ms,
        } => workflow_host::wait(shard, namespace, run_id, timeout_ms, to),
        Op::TaskAwait {
            namespace,
            worker_id,
            actions,
            max_tasks,
            block_ms,
        } => worker_host::await_tasks(
            shard, namespace, worker_id, actions, max_tasks, block_ms, to,
        ),
        op @ (Op::TaskComplete { .. } | Op::TaskFail { .. }) => worker_host::report(shard, op, to),
        Op::WorkerDrain {
            namespace,
            worker_id,
        } => {
            let result = shard
                .core
                .borrow_mut()
                .workers
                .drain(&namespace, &worker_id)
                .map(Reply::Worker);
            worker_host::worker_gone(shard, &namespace, &worker_id);
            shard.reply(to, 0, result);
        }
        Op::WorkerDeregister {
            namespace,
            worker_id,
        } => {
            let result = shard
                .core
                .borrow_mut()
                .workers
                .deregister(&namespace, &worker_id)
                .map(|()| Reply::Done);
            worker_host::worker_gone(shard, &namespace, &worker_id);
            shard.reply(to, 0, result);
        }
        Op::RunCancel { namespace, run_id } => {
            let done = shard.execute(Op::RunCancel {
                namespace: namespace.clone(),
                run_id: run_id.clone(),
            });
            if done.result.is_ok() {
                shard.run_final(&namespace, &run_id);
            }
            shard.reply(to, done.wait_lsn, done.result);
        }
        op => {
            let done = shard.execute(op);
            shard.reply(to, done.wait_lsn, done.result);
        }
    }
}

/// Replies with the run once it is final, or after `timeout_ms` with its current status.
fn wait_for_run(
    shard: &Rc<Shard>,
    namespace: String,
    run_id: String,
    timeout_ms: u64,
    to: ReplyTo,
) {
    let status = shard.core.borrow().run_status(&namespace, &run_id);
    let is_final = matches!(&status.result, Ok(Reply::Run(info)) if info.status.is_final());
    if status.result.is_err() || is_final || timeout_ms == 0 {
        shard.reply(to, status.wait_lsn, status.result);
        return;
    }
    // Deadlines on the real clock: the test clock moves runs, not client patience.
    let deadline = crate::clock::SystemClock.now_ms() + timeout_ms.min(RUN_WAIT_MS_MAX);
    shard.watch_run((namespace, run_id), deadline, to);
    if deadline < shard.watch_wake_ms.get() {
        shard.watch_signal.notify();
    }
}

/// Answers waits whose deadline passed.
pub(crate) async fn watch_expiry_loop(shard: Rc<Shard>) {
    loop {
        let now = crate::clock::SystemClock.now_ms();
        let next = match (
            shard.expire_watches(now),
            worker_host::expire_awaits(&shard, now),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep_ms = next.map_or(WATCH_TICK_MS_MAX, |d| {
            d.saturating_sub(crate::clock::SystemClock.now_ms())
                .clamp(1, WATCH_TICK_MS_MAX)
        });
        shard
            .watch_wake_ms
            .set(crate::clock::SystemClock.now_ms() + sleep_ms);
        futures_lite::future::or(
            glommio::timer::sleep(Duration::from_millis(sleep_ms)),
            shard.watch_signal.wait(),
        )
        .await;
    }
}

/// Longest the wait-expiry task sleeps without looking.
const WATCH_TICK_MS_MAX: u64 = 1000;

/// Orders a registry change (on the coordinator): validate, log and apply it on every
/// shard, reply once all have it durably.
async fn registry_change(shard: &Rc<Shard>, op: Op) -> ReplyResult {
    let _turn = shard
        .registry_turn
        .acquire_permit(1)
        .await
        .map_err(|e| ErrorValue::internal(e.to_string()))?;
    let now = shard.now_ms();
    if let Op::WorkflowCreate { .. } | Op::WorkflowSetEnabled { .. } = op {
        return workflow_change(shard, op, now).await;
    }
    let (namespace, name, record) = match op {
        Op::ActionRegister(spec) => {
            let describe = match &spec.wasm {
                Some(bytes) => wasm_runner::compile_for_registration(shard, bytes.clone()).await?,
                None => None,
            };
            let (ns, name) = (spec.namespace.clone(), spec.name.clone());
            let record = shard
                .core
                .borrow()
                .state
                .registry
                .plan_register(spec, describe, now)?;
            (ns, name, record)
        }
        Op::ActionDelete { namespace, name } => {
            let record = shard
                .core
                .borrow()
                .state
                .registry
                .plan_delete(&namespace, &name, now)?;
            (namespace, name, record)
        }
        Op::ActionSetEnabled {
            namespace,
            name,
            enabled,
        } => {
            let record = shard
                .core
                .borrow()
                .state
                .registry
                .plan_set_enabled(&namespace, &name, enabled, now)?;
            (namespace, name, record)
        }
        _ => return Err(ErrorValue::internal("not a registry change")),
    };
    let deleting = matches!(record, Record::ActionRemoved { .. });
    let calls: Vec<_> = (0..shard.partitioning.shards)
        .filter(|&s| s != shard.id)
        .map(|s| shard.begin_shard_call(s, ShardOp::ApplyRegistry(record.clone())))
        .collect();
    let lsn = shard.commit(record);
    shard.wait_durable(lsn).await;
    for call in calls {
        call.finish(shard).await?;
    }
    if deleting {
        return Ok(Reply::ActionDeleted { deleted: true });
    }
    shard.execute(Op::ActionGet { namespace, name }).result
}

/// A workflow definition change (on the coordinator, in its registry turn): validate, log and
/// apply it on every shard, reply once all have it durably.
async fn workflow_change(shard: &Rc<Shard>, op: Op, now: u64) -> ReplyResult {
    let (record, after) = match op {
        Op::WorkflowCreate { namespace, yaml } => {
            let (record, name, version, warnings) =
                shard.core.borrow().wf_plan_create(&namespace, &yaml, now)?;
            let reply = Reply::WorkflowCreated {
                name,
                version,
                created: record.is_some(),
                warnings,
            };
            match record {
                Some(record) => (record, Ok(reply)),
                None => return Ok(reply),
            }
        }
        Op::WorkflowSetEnabled {
            namespace,
            name,
            enabled,
        } => {
            let record = shard
                .core
                .borrow()
                .wf_plan_set_enabled(&namespace, &name, enabled, now)?;
            (record, Err((namespace, name)))
        }
        _ => return Err(ErrorValue::internal("not a workflow change")),
    };
    // The coordinator's record is durable before any other shard sees it: the start-up
    // sync only adds what the coordinator has, so no shard may hold a version it lacks.
    let lsn = shard.commit(record.clone());
    shard.wait_durable(lsn).await;
    let calls: Vec<_> = (0..shard.partitioning.shards)
        .filter(|&s| s != shard.id)
        .map(|s| shard.begin_shard_call(s, ShardOp::ApplyRegistry(record.clone())))
        .collect();
    for call in calls {
        call.finish(shard).await?;
    }
    match after {
        Ok(reply) => Ok(reply),
        Err((namespace, name)) => {
            shard
                .execute(Op::WorkflowGet {
                    namespace,
                    name,
                    version: None,
                })
                .result
        }
    }
}

/// Logs `records` (a start-up sync's) and replies once they are durable.
fn commit_all_and_reply(shard: &Rc<Shard>, records: Vec<Record>, to: ReplyTo) {
    let lsn = records
        .into_iter()
        .map(|r| shard.commit(r))
        .max()
        .unwrap_or(0);
    shard.reply(to, lsn, Ok(Reply::Done));
}

/// On the coordinator at start-up: bring every shard's registry (actions and workflow
/// definitions) to the coordinator's (a crash during a registry change may have left it on
/// some shards only).
pub(crate) async fn registry_sync(shard: Rc<Shard>) {
    let Ok(_turn) = shard.registry_turn.acquire_permit(1).await else {
        return;
    };
    let defs: Vec<_> = {
        let core = shard.core.borrow();
        core.state
            .registry
            .all()
            .map(|(ns, name, def)| (ns.to_string(), name.to_string(), def.clone()))
            .collect()
    };
    let workflows = shard.core.borrow().state.workflows.sync_entries();
    let calls: Vec<_> = (0..shard.partitioning.shards)
        .filter(|&s| s != shard.id)
        .flat_map(|s| {
            [
                shard.begin_shard_call(s, ShardOp::RegistrySync(defs.clone())),
                shard.begin_shard_call(s, ShardOp::WorkflowSync(workflows.clone())),
            ]
        })
        .collect();
    for call in calls {
        if let Err(e) = call.finish(&shard).await {
            eprintln!("warning: registry sync at start-up failed: {e}");
        }
    }
}

/// Runs `op` on every shard and merges the parts.
pub(crate) async fn fan_out(shard: &Rc<Shard>, op: Op) -> ReplyResult {
    if let Op::TestAdvanceClock { ms } = op {
        let Some(clock) = &shard.test_clock else {
            return Err(ErrorValue::new(
                flo_protocol::ErrorCode::Unauthorized,
                "the clock can only be moved on a server started with --test-clock",
            ));
        };
        clock.advance(ms);
        let calls: Vec<_> = (0..shard.partitioning.shards)
            .filter(|&s| s != shard.id)
            .map(|s| shard.begin_shard_call(s, ShardOp::Client(op.clone())))
            .collect();
        shard.timer_signal.notify();
        for call in calls {
            call.finish(shard).await?;
        }
        return Ok(Reply::Done);
    }
    let calls: Vec<_> = (0..shard.partitioning.shards)
        .map(|s| shard.begin_call(s, op.clone()))
        .collect();
    let mut parts = Vec::with_capacity(calls.len());
    for call in calls {
        parts.push(call.finish(shard).await?);
    }
    match op {
        Op::Status => {
            let mut shards: Vec<_> = parts
                .into_iter()
                .filter_map(|p| {
                    if let Reply::ShardStatus(info) = p {
                        Some(info)
                    } else {
                        None
                    }
                })
                .collect();
            shards.sort_by_key(|s| s.shard);
            Ok(Reply::Status(StatusInfo {
                server_version: super::conn::SERVER_VERSION.to_string(),
                durability: shard.durability.as_str().to_string(),
                partitions: shard.partitioning.partitions,
                shards,
            }))
        }
        Op::KvList { limit, .. } => {
            let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT) as usize;
            let mut entries = Vec::new();
            let mut truncated = false;
            for part in parts {
                if let Reply::KvList {
                    entries: e,
                    truncated: t,
                } = part
                {
                    entries.extend(e);
                    truncated |= t;
                }
            }
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            if entries.len() > limit {
                entries.truncate(limit);
                truncated = true;
            }
            Ok(Reply::KvList { entries, truncated })
        }
        Op::WorkerList { .. } => {
            let mut workers: Vec<_> = parts
                .into_iter()
                .flat_map(|p| match p {
                    Reply::Workers(list) => list,
                    _ => Vec::new(),
                })
                .collect();
            workers.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
            Ok(Reply::Workers(workers))
        }
        Op::WorkflowListRuns { limit, .. } => {
            let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT) as usize;
            let mut runs = Vec::new();
            let mut truncated = false;
            for part in parts {
                if let Reply::WorkflowRuns {
                    runs: r,
                    truncated: t,
                } = part
                {
                    runs.extend(r);
                    truncated |= t;
                }
            }
            runs.sort_by(|a, b| {
                (b.created_at_ms, b.run_id.len(), &b.run_id).cmp(&(
                    a.created_at_ms,
                    a.run_id.len(),
                    &a.run_id,
                ))
            });
            if runs.len() > limit {
                runs.truncate(limit);
                truncated = true;
            }
            Ok(Reply::WorkflowRuns { runs, truncated })
        }
        Op::RunList { limit, .. } => {
            let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT) as usize;
            let mut runs = Vec::new();
            let mut truncated = false;
            for part in parts {
                if let Reply::Runs {
                    runs: r,
                    truncated: t,
                } = part
                {
                    runs.extend(r);
                    truncated |= t;
                }
            }
            // Newest first; ties in the same millisecond by id, `a-10` after `a-9`.
            runs.sort_by(|a, b| {
                (b.created_at_ms, b.run_id.len(), &b.run_id).cmp(&(
                    a.created_at_ms,
                    a.run_id.len(),
                    &a.run_id,
                ))
            });
            if runs.len() > limit {
                runs.truncate(limit);
                truncated = true;
            }
            Ok(Reply::Runs { runs, truncated })
        }
        _ => Err(ErrorValue::internal("operation cannot fan out")),
    }
}
