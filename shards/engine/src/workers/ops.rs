//! A worker's reports on its tasks (complete, fail, touch), on the shard owning the task,
//! and their count on the worker's home.

use super::registry::WorkerRegistry;
use super::tasks::{TaskFailure, TaskReport, complete_task, fail_task, touch_task};
use crate::actions::{Executions, run_status};
use crate::core::io::{Done, PeerRequest};
use crate::core::{Core, Task};
use flo_protocol::{ErrorValue, Op, Reply};

/// A worker's report on a task: `TaskComplete`, `TaskFail` or `TaskTouch`.
pub fn report(core: &mut Core, registry: &mut WorkerRegistry, execs: &Executions, op: Op) -> Done {
    match op {
        Op::TaskComplete {
            namespace,
            worker_id,
            task_id,
            action,
            attempt,
            result,
            outcome,
            state,
        } => {
            let r = TaskReport {
                namespace: &namespace,
                worker_id: &worker_id,
                task_id: &task_id,
                action: &action,
                attempt,
            };
            let done = complete(core, registry, &r, (result, outcome, state));
            if done.result.is_ok() {
                core.schedule(Task::ActionFinal((namespace, task_id)));
            }
            done
        }
        Op::TaskFail {
            namespace,
            worker_id,
            task_id,
            action,
            attempt,
            error,
            retry,
            non_retryable,
            error_code,
        } => {
            let r = TaskReport {
                namespace: &namespace,
                worker_id: &worker_id,
                task_id: &task_id,
                action: &action,
                attempt,
            };
            let failure = TaskFailure {
                error,
                error_code,
                retry,
                non_retryable,
            };
            fail(core, registry, execs, &r, failure)
        }
        Op::TaskTouch {
            namespace,
            worker_id,
            task_id,
            action,
            extend_ms,
        } => {
            let r = TaskReport {
                namespace: &namespace,
                worker_id: &worker_id,
                task_id: &task_id,
                action: &action,
                attempt: None,
            };
            touch(core, &r, extend_ms)
        }
        _ => Done::now(Err(ErrorValue::internal("not a task report"))),
    }
}

/// `TaskComplete` (the caller schedules what follows a completed run).
fn complete(
    core: &mut Core,
    registry: &mut WorkerRegistry,
    r: &TaskReport,
    completion: (Vec<u8>, Option<String>, Option<Vec<u8>>),
) -> Done {
    let now = core.now_ms();
    match complete_task(core, r, completion, now) {
        Ok(lsn) => {
            note_task_done(core, registry, r.namespace, r.worker_id, r.action, true);
            Done {
                result: Ok(Reply::Done),
                wait_lsn: lsn,
            }
        }
        Err(e) => Done::now(Err(e)),
    }
}

/// `TaskFail`: answers with the run's status after the failure.
fn fail(
    core: &mut Core,
    registry: &mut WorkerRegistry,
    execs: &Executions,
    r: &TaskReport,
    failure: TaskFailure,
) -> Done {
    let now = core.now_ms();
    match fail_task(core, r, failure, now) {
        Ok(failed) => {
            if failed.is_final {
                core.schedule(Task::ActionFinal((
                    r.namespace.to_string(),
                    r.task_id.to_string(),
                )));
            }
            note_task_done(core, registry, r.namespace, r.worker_id, r.action, false);
            let status = run_status(core, execs, r.namespace, r.task_id);
            Done {
                result: Ok(status.result.unwrap_or(Reply::Done)),
                wait_lsn: failed.lsn,
            }
        }
        Err(e) => Done::now(Err(e)),
    }
}

/// `TaskTouch`.
fn touch(core: &mut Core, r: &TaskReport, extend_ms: u64) -> Done {
    let now = core.now_ms();
    match touch_task(core, r, extend_ms, now) {
        Ok((expires_at_ms, lsn)) => Done {
            result: Ok(Reply::Lease { expires_at_ms }),
            wait_lsn: lsn,
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// Counts a finished task on the worker's registry entry (on its home shard).
pub fn note_task_done(
    core: &mut Core,
    registry: &mut WorkerRegistry,
    namespace: &str,
    worker_id: &str,
    action: &str,
    ok: bool,
) {
    let home = core.partitioning().shard_of(namespace, worker_id);
    let at_ms = core.now_ms();
    if home == core.shard() {
        registry.record_task(namespace, worker_id, action, ok, at_ms);
        return;
    }
    let req = PeerRequest::WorkerTaskDone {
        namespace: namespace.to_string(),
        worker_id: worker_id.to_string(),
        action: action.to_string(),
        ok,
        at_ms,
    };
    core.tell(home, 0, req);
}
