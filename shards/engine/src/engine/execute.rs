//! An operation on the shard that owns it, executed by its domain.

use super::Engine;
use super::run_waits::Asked;
use crate::actions;
use crate::archive::{self, Want};
use crate::core::io::{Dest, Done, ReplyTo};
use crate::definitions;
use crate::fold::archive::RunKind;
use crate::kv;
use crate::schedules;
use crate::workers;
use crate::workflows;
use flo_protocol::{ErrorValue, Op, Reply};

impl Engine {
    /// An operation this shard owns: to the domain that executes it.
    pub(super) fn execute(&mut self, to: ReplyTo, op: Op) {
        if self.refuse_if_cannot_log(to, &op) {
            return;
        }
        let done = match op {
            op @ (Op::KvGet { .. } | Op::KvPut { .. } | Op::KvDelete { .. }) => {
                self.execute_kv(to, op)
            }
            op @ (Op::ActionGet { .. }
            | Op::ActionList { .. }
            | Op::ActionInvoke(_)
            | Op::RunStatus { .. }
            | Op::RunWait { .. }
            | Op::RunCancel { .. }
            | Op::RunRedrive { .. }) => self.execute_actions(to, op),
            op @ (Op::WorkerRegister(_)
            | Op::WorkerHeartbeat { .. }
            | Op::WorkerGet { .. }
            | Op::WorkerDrain { .. }
            | Op::WorkerDeregister { .. }
            | Op::TaskAwait { .. }
            | Op::TaskComplete { .. }
            | Op::TaskFail { .. }
            | Op::TaskTouch { .. }) => self.execute_workers(to, op),
            op @ (Op::WorkflowGet { .. }
            | Op::WorkflowList { .. }
            | Op::WorkflowStart(_)
            | Op::WorkflowStatus { .. }
            | Op::WorkflowWait { .. }
            | Op::WorkflowHistory { .. }
            | Op::WorkflowSignal { .. }
            | Op::WorkflowCancel { .. }
            | Op::WorkflowControl { .. }
            | Op::WorkflowUpdateState { .. }) => self.execute_workflows(to, op),
            Op::ActionRegister(_)
            | Op::ActionDelete { .. }
            | Op::ActionSetEnabled { .. }
            | Op::WorkflowCreate { .. }
            | Op::WorkflowSetEnabled { .. }
            | Op::StreamCreate { .. }
            | Op::StreamDelete { .. }
            | Op::StreamGroupCreate { .. }
            | Op::StreamGroupDelete { .. } => {
                return definitions::submit(&mut self.core, &mut self.definitions, to, op);
            }
            op @ (Op::Status
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
            | Op::PlanInvalidate { .. }) => self.part(op, Dest::Reply(to)),
            Op::WebhookRedeliver { namespace, id } => {
                Some(crate::webhooks::redeliver(&mut self.core, &namespace, &id))
            }
            Op::SchedulePause {
                namespace,
                name,
                paused,
            } => Some(schedules::pause(
                &mut self.core,
                &mut self.tickers,
                &namespace,
                &name,
                paused,
            )),
            Op::ScheduleTrigger { namespace, name } => {
                Some(schedules::trigger(&mut self.core, &namespace, &name))
            }
            // Split by partition where the client is connected (`Target::Streams`).
            op @ (Op::StreamAppend { .. }
            | Op::StreamGroupRead(_)
            | Op::StreamGroupAck { .. }
            | Op::StreamGroupNack { .. }) => Some(misrouted(&op)),
            op @ (Op::Hello { .. } | Op::ShardMap) => Some(Done::now(self.connection_op(op))),
            Op::TestAdvanceClock { .. } => Some(Done::now(Err(ErrorValue::internal(
                "a clock move reached a shard directly",
            )))),
        };
        if let Some(done) = done {
            self.core.reply_op(to, done.wait_lsn, done.result);
        }
    }

    /// A KV operation on a key this shard owns. None when the answer goes later.
    fn execute_kv(&mut self, to: ReplyTo, op: Op) -> Option<Done> {
        let done = match op {
            Op::KvGet {
                namespace,
                key,
                wait_ms,
                after_version,
                newer_than_current,
            } => {
                let after = match (after_version, newer_than_current) {
                    (Some(v), _) => kv::After::Version(v),
                    (None, true) => kv::After::Current,
                    (None, false) => kv::After::Any,
                };
                kv::get_or_wait(
                    &mut self.core,
                    &mut self.kv_waits,
                    to,
                    namespace,
                    key,
                    wait_ms,
                    after,
                );
                return None;
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
            op => misrouted(&op),
        };
        Some(done)
    }

    /// An operation on actions and their runs. None when the answer goes later.
    fn execute_actions(&mut self, to: ReplyTo, op: Op) -> Option<Done> {
        let done = match op {
            Op::ActionGet { namespace, name } => actions::action_get(&self.core, &namespace, &name),
            Op::ActionList { namespace } => actions::action_list(&self.core, &namespace),
            Op::ActionInvoke(spec) => {
                let (namespace, wait_ms) = (spec.namespace.clone(), spec.wait_ms);
                let done = actions::invoke(&mut self.core, spec);
                match (wait_ms, done.result) {
                    (Some(wait_ms), Ok(Reply::Invoked { run_id, .. })) => {
                        self.wait_for((namespace, run_id), false, wait_ms, to, Asked::Start);
                        return None;
                    }
                    (_, result) => Done {
                        result,
                        wait_lsn: done.wait_lsn,
                    },
                }
            }
            Op::RunStatus { namespace, run_id } => {
                if self.read_archived(RunKind::Action, Want::RunStatus, &namespace, &run_id, to) {
                    return None;
                }
                let done = actions::run_status(&self.core, &self.executions, &namespace, &run_id);
                self.explain_forgotten(RunKind::Action, &namespace, &run_id, done)
            }
            Op::RunWait {
                namespace,
                run_id,
                timeout_ms,
            } => {
                self.wait_for((namespace, run_id), false, timeout_ms, to, Asked::Wait);
                return None;
            }
            Op::RunCancel { namespace, run_id } => {
                actions::cancel(&mut self.core, &self.executions, &namespace, &run_id)
            }
            Op::RunRedrive {
                namespace,
                run_id,
                action,
            } => {
                let kind = RunKind::Action;
                let archived = self.core.state().archived(kind, &namespace, &run_id);
                if let Some(entry) = archived {
                    // Its document is in the log: read, then redriven (`Dest::Redrive`).
                    if let Err(e) = actions::redrivable_entry(&entry, &run_id) {
                        return Some(Done {
                            result: Err(e),
                            wait_lsn: entry.lsn,
                        });
                    }
                    let dest = Dest::Redrive {
                        to,
                        lsn: entry.lsn,
                        action,
                    };
                    let want = Want::RunStatus;
                    archive::read_one(
                        &mut self.core,
                        &mut self.reads,
                        entry,
                        kind,
                        want,
                        &namespace,
                        &run_id,
                        dest,
                    );
                    return None;
                }
                if self.core.state().runs.get(&namespace, &run_id).is_none() {
                    let missing = crate::fold::runs::run_not_found(&namespace, &run_id);
                    let missing = Done::now(Err(missing));
                    return Some(self.explain_forgotten(kind, &namespace, &run_id, missing));
                }
                let action = action.as_deref();
                let execs = &self.executions;
                actions::redrive(&mut self.core, execs, &namespace, &run_id, action)
            }
            op => misrouted(&op),
        };
        Some(done)
    }

    /// An operation of a worker homed here, or a report on a task this shard owns. None
    /// when the answer goes later.
    fn execute_workers(&mut self, to: ReplyTo, op: Op) -> Option<Done> {
        let done = match op {
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
            op @ Op::TaskAwait { .. } => {
                workers::await_tasks(&mut self.core, &mut self.awaits, &self.workers, to, op);
                return None;
            }
            op @ (Op::TaskComplete { .. } | Op::TaskFail { .. } | Op::TaskTouch { .. }) => {
                workers::report(&mut self.core, &mut self.workers, &self.executions, op)
            }
            op => misrouted(&op),
        };
        Some(done)
    }

    /// An operation on workflow definitions or runs this shard owns. None when the answer
    /// goes later.
    fn execute_workflows(&mut self, to: ReplyTo, op: Op) -> Option<Done> {
        let done = match op {
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
                let done = match workflows::start(&mut self.core, spec) {
                    workflows::Started::Done(done) => done,
                    workflows::Started::CheckArchived {
                        run_id,
                        workflow,
                        key,
                    } => {
                        let want = Want::WfStartRepeat { workflow, key };
                        let wf = RunKind::Workflow;
                        if self.read_archived(wf, want, &namespace, &run_id, to) {
                            return None;
                        }
                        // Found archived by the start just now, in this same step: cannot
                        // be gone, but an answer is better than a panic if it were.
                        Done::now(Err(workflows::run_id_taken(&run_id, "?", "archived")))
                    }
                };
                match (wait_ms, done.result) {
                    (Some(wait_ms), Ok(Reply::WorkflowStarted { run_id, .. })) => {
                        self.wait_for((namespace, run_id), true, wait_ms, to, Asked::Start);
                        return None;
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
                    return None;
                }
                let done = workflows::status(&self.core, &self.executions, &namespace, &run_id);
                self.explain_forgotten(wf, &namespace, &run_id, done)
            }
            Op::WorkflowWait {
                namespace,
                run_id,
                timeout_ms,
            } => {
                self.wait_for((namespace, run_id), true, timeout_ms, to, Asked::Wait);
                return None;
            }
            Op::WorkflowHistory {
                namespace,
                run_id,
                limit,
                after,
            } => {
                let wf = RunKind::Workflow;
                let want = Want::WfHistory { limit, after };
                if self.read_archived(wf, want, &namespace, &run_id, to) {
                    return None;
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
            } => workflows::cancel(
                &mut self.core,
                &self.executions,
                &namespace,
                &run_id,
                reason,
            ),
            Op::WorkflowControl {
                namespace,
                run_id,
                control,
            } => workflows::control(
                &mut self.core,
                &self.executions,
                &namespace,
                &run_id,
                control,
            ),
            Op::WorkflowUpdateState {
                namespace,
                run_id,
                state,
                replace,
                continue_run,
            } => workflows::update_state(
                &mut self.core,
                &self.executions,
                &namespace,
                &run_id,
                state,
                (replace, continue_run),
            ),
            op => misrouted(&op),
        };
        Some(done)
    }
}

/// An operation that reached a domain that does not execute it: a bug in `execute`.
fn misrouted(op: &Op) -> Done {
    debug_assert!(false, "{op:?} reached the wrong domain");
    Done::now(Err(ErrorValue::internal(
        "an operation reached the wrong part of the server",
    )))
}
