//! `Engine::step`: one input in, the effects it released out. The input's handler runs,
//! then the agenda it left is drained by a loop (never by nested calls) within the input's
//! step budget; what is left over is continued by `Input::Continue`. Time: ticks, wake-ups,
//! housekeeping.

use super::{EXPIRY_SWEEP_KEYS_MAX, Engine, HOUSEKEEPING_MS, STREAM_SWEEP_PARTITIONS_MAX};
use crate::actions::{self, on_executed, start_executions};
use crate::archive::{self};
use crate::core::Task;
use crate::core::io::{DiskSpace, Effect, Input, ReplyTo};
use crate::definitions;
use crate::fold::archive::RunKind;
use crate::kv;
use crate::schedules;
use crate::streams;
use crate::webhooks;
use crate::workers;
use crate::workflows;
use flo_protocol::ErrorValue;

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
                if let Some(step) = on_executed(&mut self.core, &mut self.executions, exec, result)
                {
                    workflows::on_step_executed(&mut self.core, step);
                }
            }
            Input::Compiled { job, result } => {
                definitions::on_compiled(&mut self.core, &mut self.definitions, job, result)
            }
            Input::GuestRead { exec, read, key } => {
                let namespace = self.executions.namespace_of(exec).map(str::to_string);
                match namespace {
                    Some(ns) => kv::guest_read(&mut self.core, exec, read, &ns, &key),
                    None => self.core.emit(Effect::GuestValue {
                        exec,
                        read,
                        value: Err("the execution is no longer running here".to_string()),
                    }),
                }
            }
            Input::ConnClosed { conn } => {
                workers::conn_closed(&mut self.core, &mut self.awaits, conn);
                kv::conn_closed(&mut self.core, &mut self.kv_waits, conn);
                streams::conn_closed(&mut self.streams, conn);
                self.watches_conn_closed(conn);
            }
            Input::ModuleCache(info) => self.module_cache = Some(info),
            Input::Storage(info) => {
                self.segments = info.segments;
                self.storage = *info;
            }
            Input::DiskSpace(space) => self.disk_space(space),
            Input::LogRead { token, result } => {
                if let Some((dest, done)) =
                    archive::on_read(&mut self.core, &mut self.reads, token, result)
                {
                    self.deliver(dest, done);
                }
            }
            Input::WebhookAnswered {
                id,
                attempt,
                result,
            } => webhooks::on_answer(&mut self.core, &mut self.webhooks, id, attempt, result),
            Input::Stop => self.stopping = true,
        }
        workers::serve_held(&mut self.core, &mut self.awaits, &mut self.workers);
        self.drain_agenda();
        loop {
            // Steps whose action went away fail at once (their runs move on, and may
            // queue more).
            let failed = start_executions(&mut self.core, &mut self.executions);
            if failed.is_empty() {
                break;
            }
            for step in failed {
                workflows::on_step_executed(&mut self.core, step);
            }
            self.drain_agenda();
        }
        if !self.stopping {
            webhooks::pump(&mut self.core, &mut self.webhooks);
        }
        kv::start_forwards(&mut self.core, &mut self.forwarder);
        kv::serve_waits(&mut self.core, &mut self.kv_waits);
        if self
            .streams
            .next_deadline()
            .is_some_and(|at| at <= self.core.wall_ms())
        {
            let refusal = self.log_refusal();
            streams::poll_parked(&mut self.core, &mut self.streams, refusal);
        }
        self.pump_triggers();
        let can_fire = !self.stopping && self.log_refusal().is_none();
        schedules::pump(&mut self.core, &mut self.tickers, can_fire);
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
                self.note_action_ended(&run.0, &run.1);
                actions::stop_if_executing(&mut self.core, &self.executions, &run);
                let key = (run, false);
                self.answer_watchers(&key);
                let ((namespace, run_id), _) = key;
                workflows::on_action_final(&mut self.core, &namespace, &run_id);
                archive::archive_if_done(&mut self.core, RunKind::Action, &namespace, &run_id);
            }
            Task::WfAdvance((namespace, run_id)) => workflows::advance(core, &namespace, &run_id),
            Task::WfFinal((namespace, run_id)) => {
                self.note_workflow_ended(&namespace, &run_id);
                let key = ((namespace, run_id), true);
                actions::stop_steps_of(&mut self.core, &self.executions, &key.0);
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

    pub(super) fn started(&mut self) {
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

    pub(super) fn tick(&mut self) {
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
            streams::sweep_expired(&mut self.core, STREAM_SWEEP_PARTITIONS_MAX);
            self.retry_trigger_groups();
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
            self.tickers.next_due().map(to_wall),
            Some(to_wall(self.next_housekeeping_ms)),
            self.watches.next_deadline(),
            self.awaits.next_deadline(),
            self.kv_waits.next_deadline(),
            self.streams.next_deadline(),
            self.webhooks.next_due_ms().map(to_wall),
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
}
