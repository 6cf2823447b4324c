//! A client's request: refused while stopping or while the disk is full, routed (here, to
//! its owner, to every shard), and the listings each shard answers its part of.

use super::fanout;
use super::routing::{Target, frees_space, mutates, target};
use super::{Engine, LOG_BACKLOG_BYTES_MAX};
use crate::actions::{self};
use crate::archive::{self, ListQuery, Live, Want};
use crate::core::Waiting;
use crate::core::io::{Dest, DiskSpace, Done, PeerRequest, ReplyResult, ReplyTo};
use crate::fold::archive::RunKind;
use crate::hash::HASH_NAME;
use crate::kv;
use crate::pages::{self, Pos};
use crate::plans;
use crate::run_query::RunQuery;
use crate::schedules;
use crate::streams;
use crate::workers;
use crate::workflows;
use flo_protocol::{
    ErrorCode, ErrorValue, Op, PROTOCOL_VERSION, RUN_LIST_LIMIT_DEFAULT, Reply, ShardInfo, ShardMap,
};
use std::sync::Arc;

impl Engine {
    pub(super) fn refuse_if_stopping(&mut self, to: ReplyTo) -> bool {
        if self.stopping {
            let e = ErrorValue::unavailable(
                "the server is shutting down; retry against it once restarted",
            );
            self.core.reply_op(to, 0, Err(e));
        }
        self.stopping
    }

    /// A client's request on the shard it is connected to: route it.
    pub(super) fn client(&mut self, to: ReplyTo, op: Op) {
        if self.refuse_if_stopping(to) {
            return;
        }
        let me = self.core.shard();
        match target(&op, me, &self.core.partitioning()) {
            Target::Here => {
                let result = self.connection_op(op);
                self.core.reply_op(to, 0, result);
            }
            Target::Shard(s) if s == me => self.execute(to, op),
            Target::Shard(s) => match op {
                Op::TaskAwait { .. } => {
                    workers::forward_await(&mut self.core, &mut self.awaits, s, to, op)
                }
                Op::KvGet {
                    wait_ms: Some(1..), ..
                } => kv::forward_wait(&mut self.core, &mut self.kv_waits, s, to, op),
                Op::RunWait {
                    timeout_ms: 1.., ..
                }
                | Op::WorkflowWait {
                    timeout_ms: 1.., ..
                } => self.forward_watch(s, to, op),
                op => {
                    self.core
                        .call(s, 0, PeerRequest::Client(op), Waiting::Relay(to));
                }
            },
            Target::All => self.fan_out(to, op),
            Target::Streams => {
                let refusal = self.log_refusal();
                streams::scatter(&mut self.core, &mut self.streams, to, op, refusal);
            }
        }
    }

    pub(super) fn connection_op(&self, op: Op) -> ReplyResult {
        let partitioning = self.core.partitioning();
        match op {
            Op::Hello {
                protocol_version, ..
            } => {
                if protocol_version != PROTOCOL_VERSION {
                    return Err(ErrorValue::bad_request(format!(
                        "protocol version {protocol_version} is not supported; this server \
                         speaks version {PROTOCOL_VERSION}"
                    )));
                }
                Ok(Reply::Hello {
                    protocol_version: PROTOCOL_VERSION,
                    server_version: super::SERVER_VERSION.to_string(),
                    shard_count: partitioning.shards,
                    partitions: partitioning.partitions,
                    shard: Some(self.core.shard()),
                })
            }
            _ => Ok(Reply::ShardMap(ShardMap {
                hash: HASH_NAME.to_string(),
                partitions: partitioning.partitions,
                shard_count: partitioning.shards,
                owners: partitioning.owners(),
            })),
        }
    }

    fn fan_out(&mut self, to: ReplyTo, op: Op) {
        let req = match &op {
            Op::TestAdvanceClock { ms } => {
                if !self.core.advance_clock(*ms) {
                    let e = ErrorValue::new(
                        ErrorCode::Unauthorized,
                        "the clock can only be moved on a server started with --test-clock",
                    );
                    self.core.reply_op(to, 0, Err(e));
                    return;
                }
                self.tick();
                PeerRequest::ClockMoved
            }
            op => PeerRequest::Client(op.clone()),
        };
        let id = fanout::open(&mut self.core, &mut self.fanouts, to, op.clone(), req);
        let local = match &op {
            Op::TestAdvanceClock { .. } => Some(Done::now(Ok(Reply::Done))),
            op => self.part(op.clone(), Dest::FanOut(id)),
        };
        if let Some(done) = local {
            fanout::on_local_part(&mut self.core, &mut self.fanouts, id, done);
        }
    }

    /// Where an answer computed later (a read of the log) goes.
    pub(super) fn deliver(&mut self, dest: Dest, done: Done) {
        match dest {
            Dest::Reply(to) => self.core.reply_op(to, done.wait_lsn, done.result),
            Dest::FanOut(id) => fanout::on_local_part(&mut self.core, &mut self.fanouts, id, done),
            Dest::Redrive { to, lsn, action } => {
                let execs = &self.executions;
                let action = action.as_deref();
                let done = actions::redrive_archived(&mut self.core, execs, lsn, done, action);
                self.core.reply_op(to, done.wait_lsn, done.result);
            }
        }
    }

    /// This shard's part of a fan-out; None when it goes to `dest` later (archived runs
    /// are read from the log).
    pub(super) fn part(&mut self, op: Op, dest: Dest) -> Option<Done> {
        let core = &self.core;
        Some(match op {
            Op::Status => Done::now(Ok(Reply::ShardStatus(ShardInfo {
                shard: core.shard(),
                lsn: core.last_lsn(),
                durable_lsn: core.durable_lsn(),
                segments: self.segments,
                kv_keys: core.state().kv.key_count(),
                runs: core.state().runs.len() as u64,
                workflow_runs: core.state().workflows.run_count() as u64,
                archived_runs: core.state().archive.len() as u64,
                run_index_bytes: core.state().archive.memory_bytes(),
                snapshot_lsn: self.storage.snapshot_lsn,
                snapshot_age_ms: (self.storage.snapshot_lsn > 0)
                    .then(|| core.wall_ms().saturating_sub(self.storage.snapshot_at_ms)),
                snapshot_pause_ms: self.storage.snapshot_pause_ms,
                snapshot_write_ms: self.storage.snapshot_write_ms,
                disk_bytes: self.storage.disk_bytes,
                disk_full: core.disk() == DiskSpace::Full,
                executions: self.executions.len() as u32,
                run_waits: (self.watches.len() + self.watches.relayed_len()) as u64,
                module_cache: self.module_cache,
                stream_records: core.state().streams.totals().0,
                stream_bytes: core.state().streams.totals().1,
            }))),
            Op::KvList {
                namespace,
                prefix,
                limit,
                cursor,
            } => kv::kv_list(core, &namespace, &prefix, limit, cursor.as_deref()),
            Op::RunList {
                namespace,
                action,
                status,
                dead_letter,
                limit,
                cursor,
                query,
            } => {
                let from = match self.list_position(cursor.as_deref()) {
                    Ok(from) => from,
                    Err(e) => return Some(Done::now(Err(e))),
                };
                let filter = match query.as_deref().map(RunQuery::parse).transpose() {
                    Ok(filter) => filter.map(Arc::new),
                    Err(e) => return Some(Done::now(Err(e))),
                };
                if action.is_empty() && filter.is_none() {
                    return Some(Done::now(Err(ErrorValue::bad_request(
                        "name an action, or give a query",
                    ))));
                }
                let query = ListQuery {
                    namespace,
                    name: action,
                    status: status.map(crate::fold::archived::action_status_code),
                    dead_letter,
                    filter,
                    limit: limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT),
                    from,
                    shard: core.shard(),
                };
                let live = actions::run_list(core, &self.executions, &query, status);
                return self.with_archived(query, live, dest);
            }
            Op::WorkerList { namespace } => {
                Done::now(Ok(Reply::Workers(self.workers.list(&namespace))))
            }
            Op::WorkflowListRuns {
                namespace,
                name,
                status,
                limit,
                cursor,
                timed_out,
            } => {
                let from = match self.list_position(cursor.as_deref()) {
                    Ok(from) => from,
                    Err(e) => return Some(Done::now(Err(e))),
                };
                let execs = &self.executions;
                let filter = workflows::RunFilter { status, timed_out };
                let live =
                    workflows::list_runs(core, execs, &namespace, &name, filter, limit, &from);
                // A run past its step's timeout is in flight: nothing archived can be.
                if timed_out.is_some() {
                    return Some(live_only(live, core.shard()));
                }
                let query = ListQuery {
                    namespace,
                    name,
                    status: status.map(crate::fold::archived::workflow_status_code),
                    dead_letter: false,
                    filter: None,
                    limit: limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT),
                    from,
                    shard: core.shard(),
                };
                return self.with_archived(query, live, dest);
            }
            Op::StreamRead(spec) => streams::read_part(core, &spec),
            Op::StreamGet { namespace, name } => streams::info_part(core, &namespace, Some(&name)),
            Op::StreamList { namespace } => streams::info_part(core, &namespace, None),
            Op::StreamTrim {
                namespace,
                stream,
                before,
                dry_run,
            } => streams::trim_part(&mut self.core, &namespace, &stream, before, dry_run),
            Op::StreamGroupPending {
                namespace,
                stream,
                group,
                count,
            } => streams::pending_part(core, &namespace, &stream, &group, count),
            Op::StreamGroupInfo {
                namespace,
                stream,
                group,
            } => streams::group_info_part(core, &namespace, &stream, group.as_deref()),
            Op::ScheduleList { namespace } => schedules::list_part(core, &namespace),
            Op::PlanStatus {
                namespace,
                workflow,
                plan,
            } => plans::status_part(&mut self.core, &namespace, &workflow, plan.as_deref()),
            Op::PlanInvalidate {
                namespace,
                event,
                key,
            } => plans::invalidate_part(&mut self.core, &namespace, &event, key.as_deref()),
            Op::WorkflowQuery {
                namespace,
                workflow,
                query,
                ascending,
                limit,
                cursor,
            } => workflows::query_part(
                core,
                &workflows::QueryAsk {
                    namespace: &namespace,
                    workflow: workflow.as_deref(),
                    query: &query,
                    ascending,
                    limit,
                    cursor: cursor.as_deref(),
                },
            ),
            Op::WebhookDeliveries {
                namespace,
                failed,
                workflow,
                limit,
            } => crate::webhooks::list_part(core, &namespace, failed, workflow.as_deref(), limit),
            Op::WorkflowEvents {
                namespace,
                workflow,
                cursor,
                limit,
            } => workflows::events_part(
                core,
                &namespace,
                workflow.as_deref(),
                cursor.as_deref(),
                limit,
            ),
            _ => Done::now(Err(ErrorValue::internal("operation cannot fan out"))),
        })
    }

    /// Where this shard's part of a run list starts, from the client's cursor.
    fn list_position(&self, cursor: Option<&str>) -> Result<Pos, ErrorValue> {
        let core = &self.core;
        let mut positions = pages::decode_cursor(cursor, core.partitioning().shards)?;
        Ok(positions.swap_remove(core.shard() as usize))
    }

    /// A list of live runs, completed with the archived runs that match `query`.
    fn with_archived(&mut self, query: ListQuery, live: Done, dest: Dest) -> Option<Done> {
        let (runs, more) = match live.result {
            Ok(Reply::Runs {
                runs, truncated, ..
            }) => (Live::Runs(runs), truncated),
            Ok(Reply::WorkflowRuns {
                runs, truncated, ..
            }) => (Live::WfRuns(runs), truncated),
            result => {
                return Some(Done {
                    result,
                    wait_lsn: live.wait_lsn,
                });
            }
        };
        let (core, reads) = (&mut self.core, &mut self.reads);
        archive::read_list(core, reads, query, runs, live.wait_lsn, more, dest)
    }

    /// Starts the read of an archived run for `to`: false when it is not archived.
    pub(super) fn read_archived(
        &mut self,
        kind: RunKind,
        want: Want,
        ns: &str,
        id: &str,
        to: ReplyTo,
    ) -> bool {
        let Some(entry) = self.core.state().archived(kind, ns, id) else {
            return false;
        };
        let dest = Dest::Reply(to);
        archive::read_one(
            &mut self.core,
            &mut self.reads,
            entry,
            kind,
            want,
            ns,
            id,
            dest,
        );
        true
    }

    /// Refuses a client mutation while this shard's disk is full (read-only), or while
    /// its log writer is far behind (backpressure: the records not yet handed to the disk
    /// are held in memory): the one place they are gated, on the shard that would log
    /// them.
    pub(super) fn refuse_if_cannot_log(&mut self, to: ReplyTo, op: &Op) -> bool {
        if !mutates(op) {
            return false;
        }
        // A delete is taken while the disk is full (read-only), not while the writer is
        // far behind.
        let refusal = match frees_space(op) && self.core.disk() == DiskSpace::Full {
            true => self.backlog_refusal(),
            false => self.log_refusal(),
        };
        let Some(e) = refusal else {
            return false;
        };
        self.core.reply_op(to, 0, Err(e));
        true
    }

    /// Why this shard cannot log a client's mutation now, if it cannot.
    pub(super) fn log_refusal(&self) -> Option<ErrorValue> {
        let shard = self.core.shard();
        if self.core.disk() == DiskSpace::Full {
            return Some(ErrorValue::unavailable(format!(
                "disk full on shard {shard}: it is read-only until space is freed (reads \
                 and deletes still work); delete what is no longer needed or free disk \
                 space, then retry"
            )));
        }
        self.backlog_refusal()
    }

    /// Why this shard cannot log anything more now: its writer is far behind.
    fn backlog_refusal(&self) -> Option<ErrorValue> {
        let shard = self.core.shard();
        (self.core.pending_log_bytes() >= LOG_BACKLOG_BYTES_MAX).then(|| {
            ErrorValue::new(
                flo_protocol::ErrorCode::Overloaded,
                format!(
                    "shard {shard} is {} MiB behind writing its log (a slow disk); retry later",
                    self.core.pending_log_bytes() >> 20
                ),
            )
        })
    }

    /// A run that is not found but whose id this shard handed out finished and was
    /// forgotten after the retention window: say so.
    pub(super) fn explain_forgotten(
        &self,
        kind: RunKind,
        namespace: &str,
        run_id: &str,
        done: Done,
    ) -> Done {
        let state = self.core.state();
        let issued = match kind {
            RunKind::Action => state.runs.was_issued(namespace, run_id),
            RunKind::Workflow => state.workflows.was_issued(namespace, run_id),
        };
        match done.result {
            Err(e) if e.code == ErrorCode::NotFound && issued => {
                Done::now(Err(ErrorValue::not_found(format!(
                    "{} — it finished and expired after the retention window ({} s)",
                    e.message,
                    self.retention_ms / 1000
                ))))
            }
            result => Done {
                result,
                wait_lsn: done.wait_lsn,
            },
        }
    }
}

/// A list part of in-flight runs only (no archived run can match): each run's position, and
/// the end where the live list stopped.
fn live_only(live: Done, shard: u32) -> Done {
    let Ok(Reply::WorkflowRuns {
        runs, truncated, ..
    }) = live.result
    else {
        return live;
    };
    let after_each: Vec<crate::pages::Pos> = runs
        .iter()
        .map(|r| crate::pages::Pos::Live {
            created_ms: r.created_at_ms,
            id: r.run_id.clone(),
        })
        .collect();
    let end = match (truncated, after_each.last()) {
        (true, Some(last)) => last.clone(),
        _ => crate::pages::Pos::Done,
    };
    let part = crate::pages::Part {
        shard,
        after_each,
        end,
    };
    Done {
        wait_lsn: live.wait_lsn,
        result: Ok(Reply::WorkflowRuns {
            runs,
            truncated,
            next_cursor: Some(part.encode()),
        }),
    }
}
