//! `Engine::step`: one input in, the effects it released out. The input's handler runs,
//! then the agenda it left is drained by a loop (never by nested calls) within the input's
//! step budget; what is left over is continued by `Input::Continue`.

use super::fanout;
use super::routing::{Target, mutates, target};
use super::watches::Watched;
use super::{EXPIRY_SWEEP_KEYS_MAX, Engine, HOUSEKEEPING_MS, LOG_BACKLOG_BYTES_MAX};
use crate::actions::{self, on_executed, start_executions};
use crate::archive::{self, ListQuery, Live, Want};
use crate::core::io::{
    Dest, DiskSpace, Done, Effect, Input, PeerMsg, PeerRequest, ReplyResult, ReplyTo,
};
use crate::core::{Task, Waiting};
use crate::definitions;
use crate::fold::archive::RunKind;
use crate::hash::HASH_NAME;
use crate::kv;
use crate::pages::{self, Pos};
use crate::workers;
use crate::workflows;
use flo_protocol::{
    ErrorCode, ErrorValue, Op, PROTOCOL_VERSION, RUN_LIST_LIMIT_DEFAULT, RUN_WAIT_MS_MAX, Reply,
    ShardInfo, ShardMap,
};

impl Engine {
    /// Handles one input; appends the effects it released to `out`.
    pub fn step(&mut self, input: Input, out: &mut Vec<Effect>) {
        self.core.begin_input();
        match input {
            Input::Started => self.started(),
            Input::Client { from, op } => self.client(ReplyTo::Client(from), op),
            Input::Peer { from, msg } => self.peer(from, msg),
            Input::Durable { lsn, segments } => {
                self.segments = segments;
                self.core.set_durable(lsn);
            }
            Input::Tick => self.tick(),
            Input::Idle => workers::dispatch(&mut self.core, &mut self.awaits),
            Input::Continue => {}
            Input::Executed { exec, result } => {
                on_executed(&mut self.core, &mut self.executions, exec, result)
            }
            Input::Compiled { job, result } => {
                definitions::on_compiled(&mut self.core, &mut self.definitions, job, result)
            }
            Input::GuestRead { exec, read, key } => {
                let namespace = self.executions.run_of(exec).map(|k| k.0.clone());
                match namespace {
                    Some(ns) => kv::guest_read(&mut self.core, exec, read, &ns, &key),
                    None => self.core.emit(Effect::GuestValue {
                        exec,
                        read,
                        value: None,
                    }),
                }
            }
            Input::ConnClosed { conn } => {
                workers::conn_closed(&mut self.core, &mut self.awaits, conn);
                kv::conn_closed(&mut self.core, &mut self.kv_waits, conn);
            }
            Input::ModuleCache(info) => self.module_cache = Some(info),
            Input::Storage(info) => {
                self.segments = info.segments;
                self.storage = *info;
            }
            Input::DiskSpace(space) => self.disk_space(space),
            Input::LogRead { token, result } => {
                if let Some((dest, done)) = archive::on_read(&mut self.reads, token, result) {
                    self.deliver(dest, done);
                }
            }
            Input::Stop => self.stopping = true,
        }
        self.drain_agenda();
        start_executions(&mut self.core, &mut self.executions);
        kv::start_forwards(&mut self.core, &mut self.forwarder);
        kv::serve_waits(&mut self.core, &mut self.kv_waits);
        self.ask_wake();
        self.core.take_effects(out);
    }

    /// Runs queued tasks until none is left or the input's budget is spent.
    fn drain_agenda(&mut self) {
        while let Some(task) = self.core.next_task() {
            self.run_task(task);
        }
        if self.core.has_tasks() {
            self.core.emit(Effect::Continue);
        }
    }

    fn run_task(&mut self, task: Task) {
        let core = &mut self.core;
        match task {
            Task::ActionFinal(run) => {
                actions::stop_if_executing(&mut self.core, &self.executions, &run);
                let key = (run, false);
                self.answer_watchers(&key);
                let ((namespace, run_id), _) = key;
                workflows::on_action_final(&mut self.core, &namespace, &run_id);
                archive::archive_if_done(&mut self.core, RunKind::Action, &namespace, &run_id);
            }
            Task::WfAdvance((namespace, run_id)) => workflows::advance(core, &namespace, &run_id),
            Task::WfFinal((namespace, run_id)) => {
                let key = ((namespace, run_id), true);
                self.answer_watchers(&key);
                let ((namespace, run_id), _) = key;
                workflows::notify_parent(&mut self.core, &namespace, &run_id);
                archive::archive_if_done(&mut self.core, RunKind::Workflow, &namespace, &run_id);
            }
            Task::Archive(kind, (namespace, run_id)) => {
                archive::archive_if_done(core, kind, &namespace, &run_id)
            }
            Task::WfResume((namespace, run_id)) => workflows::resume(core, &namespace, &run_id),
            Task::Delivered {
                worker,
                want_id,
                from,
                tasks,
            } => workers::on_delivery(core, &mut self.awaits, &worker, want_id, from, tasks, false),
        }
    }

    // ---- life cycle and time ----

    fn started(&mut self) {
        definitions::sync_all(&mut self.core);
        for key in workflows::open_runs(&self.core) {
            self.core.schedule(Task::WfResume(key));
        }
        // After the resumed runs took the steps they waited on.
        for task in archive::final_runs(self.core.state()) {
            self.core.schedule(task);
        }
        self.tick();
    }

    fn tick(&mut self) {
        self.wake_asked = None;
        let now = self.core.now_ms();
        self.core.fire_due_runs(now);
        workers::expire_leases(&mut self.core);
        let mut more = workflows::fire_timers(&mut self.core);
        let wall = self.core.wall_ms();
        for (run, to) in self.watches.expire(wall) {
            self.answer_watch(&run, to);
        }
        workers::expire_awaits(&mut self.core, &mut self.awaits);
        kv::expire_waits(&mut self.core, &mut self.kv_waits);
        // Expired keys are removed as fast as they expire: a full sweep comes back at once
        // (in slices, so other inputs are served between them), not a second later.
        if now >= self.next_housekeeping_ms || self.expiry_backlog {
            self.expiry_backlog =
                kv::sweep_expired(&mut self.core, EXPIRY_SWEEP_KEYS_MAX) == EXPIRY_SWEEP_KEYS_MAX;
            more |= self.expiry_backlog;
        }
        if more {
            // More came due than one tick handles: come back at once.
            self.wake_asked = Some(0);
            let wall = self.core.wall_ms();
            self.core.emit(Effect::WakeAt { wall_ms: wall });
        }
        if now >= self.next_housekeeping_ms {
            self.next_housekeeping_ms = now + HOUSEKEEPING_MS;
            archive::forget_expired(&mut self.core, self.retention_ms);
            self.workers.check_health(now);
            workers::sweep_wants(&self.core, &mut self.awaits);
            self.time_out_peer_calls();
        }
    }

    /// A client's operation waiting on a shard that does not answer (stuck, or its
    /// disk is) answers `unavailable` instead of waiting forever; a late answer finds
    /// no call and is dropped.
    fn time_out_peer_calls(&mut self) {
        let wall = self.core.wall_ms();
        let Some(sent_by) = wall.checked_sub(self.peer_timeout_ms) else {
            return;
        };
        for (tag, shard) in self.core.overdue_client_calls(sent_by) {
            let e = ErrorValue::unavailable(format!(
                "shard {shard} did not answer within {} ms",
                self.peer_timeout_ms
            ));
            self.peer_reply(tag, Err(e));
        }
    }

    /// Asks the runtime for a tick at the earliest deadline, if it is not asked already.
    fn ask_wake(&mut self) {
        let now = self.core.now_ms();
        let wall = self.core.wall_ms();
        // Deadlines on the shard's clock, moved to the wall clock the runtime sleeps on.
        let to_wall = |due: u64| wall.saturating_add(due.saturating_sub(now));
        let next = [
            self.core.index().next_due_ms().map(to_wall),
            Some(to_wall(self.next_housekeeping_ms)),
            self.watches.next_deadline(),
            self.awaits.next_deadline(),
            self.kv_waits.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            return;
        };
        if self.wake_asked.is_some_and(|asked| asked <= next) {
            return;
        }
        self.wake_asked = Some(next);
        self.core.emit(Effect::WakeAt { wall_ms: next });
    }

    /// The log writer found the disk full, or space again: read-only while full; once
    /// space returns, the wants parked meanwhile get the tasks that wait for them.
    fn disk_space(&mut self, space: DiskSpace) {
        let returned = self.core.disk() == DiskSpace::Full && space == DiskSpace::Available;
        self.core.set_disk(space);
        if returned {
            workers::serve_parked(&mut self.core, &mut self.awaits);
        }
    }

    // ---- clients ----

    fn refuse_if_stopping(&mut self, to: ReplyTo) -> bool {
        if self.stopping {
            let e = ErrorValue::unavailable(
                "the server is shutting down; retry against it once restarted",
            );
            self.core.reply_op(to, 0, Err(e));
        }
        self.stopping
    }

    /// A client's request on the shard it is connected to: route it.
    fn client(&mut self, to: ReplyTo, op: Op) {
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
                op => {
                    self.core
                        .call(s, 0, PeerRequest::Client(op), Waiting::Relay(to));
                }
            },
            Target::All => self.fan_out(to, op),
        }
    }

    fn connection_op(&self, op: Op) -> ReplyResult {
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
    fn deliver(&mut self, dest: Dest, done: Done) {
        match dest {
            Dest::Reply(to) => self.core.reply_op(to, done.wait_lsn, done.result),
            Dest::FanOut(id) => fanout::on_local_part(&mut self.core, &mut self.fanouts, id, done),
        }
    }

    /// This shard's part of a fan-out; None when it goes to `dest` later (archived runs
    /// are read from the log).
    fn part(&mut self, op: Op, dest: Dest) -> Option<Done> {
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
                module_cache: self.module_cache,
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
            } => {
                let from = match self.list_position(cursor.as_deref()) {
                    Ok(from) => from,
                    Err(e) => return Some(Done::now(Err(e))),
                };
                let query = ListQuery {
                    namespace,
                    name: action,
                    status: status.map(crate::fold::archived::action_status_code),
                    dead_letter,
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
            } => {
                let from = match self.list_position(cursor.as_deref()) {
                    Ok(from) => from,
                    Err(e) => return Some(Done::now(Err(e))),
                };
                let live = workflows::list_runs(core, &namespace, &name, status, limit, &from);
                let query = ListQuery {
                    namespace,
                    name,
                    status: status.map(crate::fold::archived::workflow_status_code),
                    dead_letter: false,
                    limit: limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT),
                    from,
                    shard: core.shard(),
                };
                return self.with_archived(query, live, dest);
            }
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
    fn read_archived(
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
    fn refuse_if_cannot_log(&mut self, to: ReplyTo, op: &Op) -> bool {
        if !mutates(op) {
            return false;
        }
        let shard = self.core.shard();
        let e = if self.core.disk() == DiskSpace::Full {
            ErrorValue::unavailable(format!(
                "disk full on shard {shard}: it is read-only until space is freed (reads \
                 still work); retry later"
            ))
        } else if self.core.pending_log_bytes() >= LOG_BACKLOG_BYTES_MAX {
            ErrorValue::new(
                flo_protocol::ErrorCode::Overloaded,
                format!(
                    "shard {shard} is {} MiB behind writing its log (a slow disk); retry later",
                    self.core.pending_log_bytes() >> 20
                ),
            )
        } else {
            return false;
        };
        self.core.reply_op(to, 0, Err(e));
        true
    }

    /// Executes an operation this shard owns (a client's, or one routed here).
    fn execute(&mut self, to: ReplyTo, op: Op) {
        if self.refuse_if_cannot_log(to, &op) {
            return;
        }
        let done = match op {
            Op::KvGet {
                namespace,
                key,
                wait_ms,
                after_version,
            } => {
                return kv::get_or_wait(
                    &mut self.core,
                    &mut self.kv_waits,
                    to,
                    namespace,
                    key,
                    wait_ms,
                    after_version,
                );
            }
            Op::KvPut {
                namespace,
                key,
                value,
                ttl_ms,
                if_version,
                if_exists,
            } => {
                let condition = crate::fold::kv::PutCondition {
                    if_version,
                    if_exists,
                };
                kv::kv_put(&mut self.core, namespace, key, value, ttl_ms, condition)
            }
            Op::KvDelete {
                namespace,
                key,
                if_version,
            } => kv::kv_delete(&mut self.core, &namespace, &key, if_version),
            Op::ActionRegister(_)
            | Op::ActionDelete { .. }
            | Op::ActionSetEnabled { .. }
            | Op::WorkflowCreate { .. }
            | Op::WorkflowSetEnabled { .. } => {
                return definitions::submit(&mut self.core, &mut self.definitions, to, op);
            }
            Op::ActionGet { namespace, name } => actions::action_get(&self.core, &namespace, &name),
            Op::ActionList { namespace } => actions::action_list(&self.core, &namespace),
            Op::ActionInvoke(spec) => {
                let (namespace, wait_ms) = (spec.namespace.clone(), spec.wait_ms);
                let done = actions::invoke(&mut self.core, spec);
                match (wait_ms, done.result) {
                    (Some(wait_ms), Ok(Reply::Invoked { run_id, .. })) => {
                        return self.wait_for((namespace, run_id), false, wait_ms, to);
                    }
                    (_, result) => Done {
                        result,
                        wait_lsn: done.wait_lsn,
                    },
                }
            }
            Op::RunStatus { namespace, run_id } => {
                if self.read_archived(RunKind::Action, Want::RunStatus, &namespace, &run_id, to) {
                    return;
                }
                let done = actions::run_status(&self.core, &self.executions, &namespace, &run_id);
                self.explain_forgotten(RunKind::Action, &namespace, &run_id, done)
            }
            Op::RunWait {
                namespace,
                run_id,
                timeout_ms,
            } => return self.wait_for((namespace, run_id), false, timeout_ms, to),
            Op::RunCancel { namespace, run_id } => {
                actions::cancel(&mut self.core, &self.executions, &namespace, &run_id)
            }
            Op::WorkerRegister(spec) => {
                let now = self.core.now_ms();
                Done::now(self.workers.register(spec, now).map(Reply::Worker))
            }
            Op::WorkerHeartbeat {
                namespace,
                worker_id,
                current_load,
            } => {
                let now = self.core.now_ms();
                Done::now(
                    self.workers
                        .heartbeat(&namespace, &worker_id, current_load, now)
                        .map(|status| Reply::WorkerStatus { status }),
                )
            }
            Op::WorkerGet {
                namespace,
                worker_id,
            } => Done::now(self.workers.info(&namespace, &worker_id).map(Reply::Worker)),
            Op::WorkerDrain {
                namespace,
                worker_id,
            } => {
                let result = self
                    .workers
                    .drain(&namespace, &worker_id)
                    .map(Reply::Worker);
                workers::worker_gone(&mut self.core, &mut self.awaits, &namespace, &worker_id);
                Done::now(result)
            }
            Op::WorkerDeregister {
                namespace,
                worker_id,
            } => {
                let result = self
                    .workers
                    .deregister(&namespace, &worker_id)
                    .map(|()| Reply::Done);
                workers::worker_gone(&mut self.core, &mut self.awaits, &namespace, &worker_id);
                Done::now(result)
            }
            Op::TaskAwait {
                namespace,
                worker_id,
                actions,
                max_tasks,
                block_ms,
            } => {
                return workers::await_tasks(
                    &mut self.core,
                    &mut self.awaits,
                    &self.workers,
                    to,
                    namespace,
                    worker_id,
                    actions,
                    max_tasks,
                    block_ms,
                );
            }
            op @ (Op::TaskComplete { .. } | Op::TaskFail { .. } | Op::TaskTouch { .. }) => {
                workers::report(&mut self.core, &mut self.workers, &self.executions, op)
            }
            // Definition reads wait for the last definition change, like action reads.
            Op::WorkflowGet {
                namespace,
                name,
                version,
            } => Done {
                result: workflows::info(&self.core, &namespace, &name, version.as_deref())
                    .map(Reply::Workflow),
                wait_lsn: self.core.definitions_lsn(),
            },
            Op::WorkflowList { namespace } => Done {
                result: Ok(Reply::Workflows(workflows::list(&self.core, &namespace))),
                wait_lsn: self.core.definitions_lsn(),
            },
            Op::WorkflowStart(spec) => {
                let (namespace, wait_ms) = (spec.namespace.clone(), spec.wait_ms);
                let done = workflows::start(&mut self.core, spec);
                match (wait_ms, done.result) {
                    (Some(wait_ms), Ok(Reply::WorkflowStarted { run_id, .. })) => {
                        return self.wait_for((namespace, run_id), true, wait_ms, to);
                    }
                    (_, result) => Done {
                        result,
                        wait_lsn: done.wait_lsn,
                    },
                }
            }
            Op::WorkflowStatus { namespace, run_id } => {
                let wf = RunKind::Workflow;
                if self.read_archived(wf, Want::WfStatus, &namespace, &run_id, to) {
                    return;
                }
                let done = workflows::status(&self.core, &namespace, &run_id);
                self.explain_forgotten(wf, &namespace, &run_id, done)
            }
            Op::WorkflowWait {
                namespace,
                run_id,
                timeout_ms,
            } => return self.wait_for((namespace, run_id), true, timeout_ms, to),
            Op::WorkflowHistory {
                namespace,
                run_id,
                limit,
                after,
            } => {
                let wf = RunKind::Workflow;
                let want = Want::WfHistory { limit, after };
                if self.read_archived(wf, want, &namespace, &run_id, to) {
                    return;
                }
                let done = workflows::history(&self.core, &namespace, &run_id, limit, after);
                self.explain_forgotten(wf, &namespace, &run_id, done)
            }
            Op::WorkflowSignal {
                namespace,
                run_id,
                signal_type,
                payload,
            } => workflows::signal(&mut self.core, &namespace, &run_id, signal_type, payload),
            Op::WorkflowCancel {
                namespace,
                run_id,
                reason,
            } => workflows::cancel(&mut self.core, &namespace, &run_id, reason),
            op @ (Op::Status
            | Op::KvList { .. }
            | Op::RunList { .. }
            | Op::WorkerList { .. }
            | Op::WorkflowListRuns { .. }) => match self.part(op, Dest::Reply(to)) {
                Some(done) => done,
                None => return,
            },
            op @ (Op::Hello { .. } | Op::ShardMap) => Done::now(self.connection_op(op)),
            Op::TestAdvanceClock { .. } => Done::now(Err(ErrorValue::internal(
                "a clock move reached a shard directly",
            ))),
        };
        self.core.reply_op(to, done.wait_lsn, done.result);
    }

    /// A run that is not found but whose id this shard handed out finished and was
    /// forgotten after the retention window: say so.
    fn explain_forgotten(&self, kind: RunKind, namespace: &str, run_id: &str, done: Done) -> Done {
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

    // ---- waits on runs ----

    fn status_of(&self, run: &Watched) -> Done {
        let ((namespace, run_id), workflow) = run;
        if *workflow {
            workflows::status(&self.core, namespace, run_id)
        } else {
            actions::run_status(&self.core, &self.executions, namespace, run_id)
        }
    }

    /// Answers with the run once it is final, or after `timeout_ms` with its status.
    fn wait_for(&mut self, run: (String, String), workflow: bool, timeout_ms: u64, to: ReplyTo) {
        let run = (run, workflow);
        // Archived: final.
        if self.read_archived_status(&run, to) {
            return;
        }
        let status = self.status_of(&run);
        let is_final = match &status.result {
            Ok(Reply::Run(info)) => info.status.is_final(),
            Ok(Reply::WorkflowRun(info)) => info.status.is_final(),
            _ => true,
        };
        if is_final || timeout_ms == 0 {
            self.core.reply_op(to, status.wait_lsn, status.result);
            return;
        }
        // Deadlines on the real clock: a test clock moves runs, not client patience.
        let deadline = self.core.wall_ms() + timeout_ms.min(RUN_WAIT_MS_MAX);
        self.watches.watch(run, deadline, to);
    }

    /// Starts the read of a watched run's status when it is archived.
    fn read_archived_status(&mut self, run: &Watched, to: ReplyTo) -> bool {
        let ((namespace, run_id), workflow) = run;
        let (kind, want) = match workflow {
            true => (RunKind::Workflow, Want::WfStatus),
            false => (RunKind::Action, Want::RunStatus),
        };
        self.read_archived(kind, want, namespace, run_id, to)
    }

    fn answer_watch(&mut self, run: &Watched, to: ReplyTo) {
        if self.read_archived_status(run, to) {
            return;
        }
        let status = self.status_of(run);
        self.core.reply_op(to, status.wait_lsn, status.result);
    }

    fn answer_watchers(&mut self, run: &Watched) {
        for to in self.watches.take(run) {
            self.answer_watch(run, to);
        }
    }

    // ---- other shards ----

    fn peer(&mut self, from: u32, msg: Box<PeerMsg>) {
        match *msg {
            PeerMsg::Request { tag, req } => {
                let to = ReplyTo::Peer { shard: from, tag };
                // A guest's read is still answered while stopping (an error would read as
                // "absent" and the guest's result would be built on it).
                let read = matches!(req, PeerRequest::KvRead { .. });
                if !read && self.refuse_if_stopping(to) {
                    return;
                }
                self.peer_request(from, to, req);
            }
            PeerMsg::Reply { tag, result } => self.peer_reply(tag, result),
        }
    }

    fn peer_request(&mut self, from: u32, to: ReplyTo, req: PeerRequest) {
        let core = &mut self.core;
        match req {
            PeerRequest::Client(op) => self.execute(to, op),
            PeerRequest::Definition(record) => definitions::apply_change(core, to, record),
            PeerRequest::DefinitionSync { actions, workflows } => {
                definitions::apply_sync(core, to, actions, workflows)
            }
            PeerRequest::Want(msg) => workers::on_want(core, &mut self.awaits, from, msg, to),
            PeerRequest::WantCancel { want_id, .. } => {
                workers::cancel_want(&mut self.awaits, from, want_id)
            }
            PeerRequest::TasksDelivered {
                namespace,
                worker_id,
                want_id,
                tasks,
            } => {
                let worker = (namespace, worker_id);
                workers::on_delivery(core, &mut self.awaits, &worker, want_id, from, tasks, false)
            }
            PeerRequest::ReleaseLeases {
                namespace,
                worker_id,
                run_ids,
            } => {
                workers::release_tasks(core, &namespace, &worker_id, run_ids);
            }
            PeerRequest::WorkerTaskDone {
                namespace,
                worker_id,
                action,
                ok,
                at_ms,
            } => self
                .workers
                .record_task(&namespace, &worker_id, &action, ok, at_ms),
            PeerRequest::AbandonAwait {
                namespace,
                worker_id,
                tag,
            } => workers::abandon_forwarded(
                core,
                &mut self.awaits,
                from,
                (namespace, worker_id),
                tag,
            ),
            PeerRequest::RemoteWrites {
                origin_lsn,
                namespace,
                writes,
            } => {
                let lsn = kv::on_remote_writes(core, from, origin_lsn, namespace, writes);
                core.reply(to, lsn, Ok(Reply::Done));
            }
            PeerRequest::KvWaitAbandon { tag } => kv::abandon_wait(&mut self.kv_waits, from, tag),
            PeerRequest::KvRead { namespace, key } => {
                // The guest's result may depend on what it read: answered once durable.
                let done = kv::get(core, &namespace, &key);
                core.reply(to, done.wait_lsn, done.result);
            }
            PeerRequest::ClockMoved => {
                self.tick();
                self.core.reply(to, 0, Ok(Reply::Done));
            }
        }
    }

    fn peer_reply(&mut self, tag: u64, result: ReplyResult) {
        let Some(waiting) = self.core.take_call(tag) else {
            return;
        };
        let core = &mut self.core;
        match waiting {
            Waiting::Relay(to) => core.reply_op(to, 0, result),
            Waiting::KvWaitRelay(to) => {
                kv::on_wait_relayed(core, &mut self.kv_waits, tag, to, result)
            }
            Waiting::AwaitRelay { to, worker } => {
                workers::on_await_relayed(core, &mut self.awaits, tag, to, worker, result)
            }
            Waiting::FanOut(id) => fanout::on_part(core, &mut self.fanouts, id, result),
            Waiting::Definition(id) => {
                definitions::on_applied(core, &mut self.definitions, id, result)
            }
            Waiting::WantShare {
                worker,
                want_id,
                from,
            } => workers::on_want_share(core, &mut self.awaits, worker, want_id, from, result),
            Waiting::GuestRead { exec, read } => core.emit(Effect::GuestValue {
                exec,
                read,
                value: kv::guest_value(result),
            }),
            Waiting::Forward { origin_lsn } => {
                kv::on_forwarded(core, &mut self.forwarder, origin_lsn, result.is_ok())
            }
            Waiting::Nothing => {
                if let Err(e) = result {
                    core.emit(Effect::Log(format!(
                        "warning: shard {}: a request to another shard failed: {e}",
                        core.shard()
                    )));
                }
            }
        }
    }
}
