//! Worker requests: the registry, the long poll for tasks, and reporting their results.

use super::actions::run_of;
use super::request::{TypedRequest, unexpected};
use crate::client::{Error, FailMode, TaskRef};
use flo_protocol::{Op, Reply, RunInfo, TaskAssignment, WorkerInfo, WorkerSpec, WorkerStatus};

/// `register_worker` (`spec.namespace` is replaced by the client's namespace).
pub(crate) struct RegisterWorker {
    pub spec: WorkerSpec,
}

impl TypedRequest for RegisterWorker {
    type Output = WorkerInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkerRegister(WorkerSpec {
            namespace: namespace.into(),
            ..self.spec
        })
    }

    fn output(reply: Reply) -> Result<WorkerInfo, Error> {
        worker_of(reply)
    }
}

/// `heartbeat`: the worker's status.
pub(crate) struct Heartbeat<'a> {
    pub worker_id: &'a str,
    pub current_load: u32,
}

impl TypedRequest for Heartbeat<'_> {
    type Output = WorkerStatus;

    fn op(self, namespace: &str) -> Op {
        Op::WorkerHeartbeat {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
            current_load: self.current_load,
        }
    }

    fn output(reply: Reply) -> Result<WorkerStatus, Error> {
        match reply {
            Reply::WorkerStatus { status } => Ok(status),
            other => Err(unexpected(other)),
        }
    }
}

/// `drain_worker`.
pub(crate) struct DrainWorker<'a> {
    pub worker_id: &'a str,
}

impl TypedRequest for DrainWorker<'_> {
    type Output = WorkerInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkerDrain {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<WorkerInfo, Error> {
        worker_of(reply)
    }
}

/// `deregister_worker`.
pub(crate) struct DeregisterWorker<'a> {
    pub worker_id: &'a str,
}

impl TypedRequest for DeregisterWorker<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::WorkerDeregister {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::worker`.
pub(crate) struct GetWorker<'a> {
    pub worker_id: &'a str,
}

impl TypedRequest for GetWorker<'_> {
    type Output = WorkerInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkerGet {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<WorkerInfo, Error> {
        worker_of(reply)
    }
}

/// `Client::list_workers`.
pub(crate) struct ListWorkers;

impl TypedRequest for ListWorkers {
    type Output = Vec<WorkerInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::WorkerList {
            namespace: namespace.into(),
        }
    }

    fn output(reply: Reply) -> Result<Vec<WorkerInfo>, Error> {
        match reply {
            Reply::Workers(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}

/// `await_tasks`: up to `max_tasks` tasks leased to the worker (empty when none came).
pub(crate) struct AwaitTasks<'a> {
    pub worker_id: &'a str,
    pub actions: Vec<String>,
    pub max_tasks: u32,
    pub block_ms: u64,
    /// Only the tasks of the worker's home shard (`TaskAwait::home_only`).
    pub home_only: bool,
}

impl<'a> AwaitTasks<'a> {
    /// Takes the actions as any string slices (the clients' signatures differ there).
    pub fn new(
        worker_id: &'a str,
        actions: &[impl AsRef<str>],
        max_tasks: u32,
        block_ms: u64,
    ) -> Self {
        AwaitTasks {
            worker_id,
            actions: actions.iter().map(|a| a.as_ref().to_string()).collect(),
            max_tasks,
            block_ms,
            home_only: false,
        }
    }
}

impl TypedRequest for AwaitTasks<'_> {
    type Output = Vec<TaskAssignment>;

    fn op(self, namespace: &str) -> Op {
        Op::TaskAwait {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
            actions: self.actions,
            max_tasks: self.max_tasks,
            block_ms: self.block_ms,
            home_only: self.home_only,
        }
    }

    fn output(reply: Reply) -> Result<Vec<TaskAssignment>, Error> {
        match reply {
            Reply::Tasks(tasks) => Ok(tasks),
            other => Err(unexpected(other)),
        }
    }
}

/// The tasks of a `TaskAwait` reply.
pub(crate) fn tasks_of(reply: Result<Reply, Error>) -> Result<Vec<TaskAssignment>, Error> {
    reply.and_then(AwaitTasks::output)
}

/// `complete_task`.
pub(crate) struct CompleteTask<'a> {
    pub worker_id: &'a str,
    pub task: &'a TaskRef<'a>,
    pub result: &'a [u8],
    pub outcome: Option<&'a str>,
    /// A workflow step's task: fields (a JSON object) for the run's state.
    pub state: Option<&'a [u8]>,
}

impl TypedRequest for CompleteTask<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::TaskComplete {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
            task_id: self.task.task_id.into(),
            action: self.task.action.into(),
            attempt: self.task.attempt,
            result: self.result.to_vec(),
            outcome: self.outcome.map(str::to_string),
            state: self.state.map(<[u8]>::to_vec),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `fail_task`: the run as it is afterwards (pending for a retry, or failed).
pub(crate) struct FailTask<'a> {
    pub worker_id: &'a str,
    pub task: &'a TaskRef<'a>,
    pub error: &'a str,
    pub mode: FailMode,
    pub code: Option<&'a str>,
}

impl TypedRequest for FailTask<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::TaskFail {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
            task_id: self.task.task_id.into(),
            action: self.task.action.into(),
            attempt: self.task.attempt,
            error: self.error.into(),
            retry: self.mode == FailMode::Retry,
            non_retryable: self.mode == FailMode::NonRetryable,
            error_code: self.code.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

/// `touch_task`: when the lease now expires.
pub(crate) struct TouchTask<'a> {
    pub worker_id: &'a str,
    pub task: &'a TaskRef<'a>,
    pub extend_ms: u64,
}

impl TypedRequest for TouchTask<'_> {
    type Output = u64;

    fn op(self, namespace: &str) -> Op {
        Op::TaskTouch {
            namespace: namespace.into(),
            worker_id: self.worker_id.into(),
            task_id: self.task.task_id.into(),
            action: self.task.action.into(),
            extend_ms: self.extend_ms,
        }
    }

    fn output(reply: Reply) -> Result<u64, Error> {
        match reply {
            Reply::Lease { expires_at_ms } => Ok(expires_at_ms),
            other => Err(unexpected(other)),
        }
    }
}

/// The worker a `Reply::Worker` carries.
fn worker_of(reply: Reply) -> Result<WorkerInfo, Error> {
    match reply {
        Reply::Worker(info) => Ok(info),
        other => Err(unexpected(other)),
    }
}
