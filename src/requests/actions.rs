//! Requests on actions and their runs.

use super::request::{TypedRequest, unexpected};
use crate::client::{Error, InvokeOptions, Page};
use flo_protocol::{ActionInfo, ActionSpec, InvokeSpec, Op, Reply, RunInfo, RunStatus};

/// `Client::register_action` (`spec.namespace` is replaced by the client's namespace).
pub(crate) struct RegisterAction {
    pub spec: ActionSpec,
}

impl TypedRequest for RegisterAction {
    type Output = ActionInfo;

    fn op(self, namespace: &str) -> Op {
        Op::ActionRegister(ActionSpec {
            namespace: namespace.into(),
            ..self.spec
        })
    }

    fn output(reply: Reply) -> Result<ActionInfo, Error> {
        action_of(reply)
    }
}

/// `Client::action`.
pub(crate) struct GetAction<'a> {
    pub name: &'a str,
}

impl TypedRequest for GetAction<'_> {
    type Output = ActionInfo;

    fn op(self, namespace: &str) -> Op {
        Op::ActionGet {
            namespace: namespace.into(),
            name: self.name.into(),
        }
    }

    fn output(reply: Reply) -> Result<ActionInfo, Error> {
        action_of(reply)
    }
}

/// `Client::list_actions`.
pub(crate) struct ListActions;

impl TypedRequest for ListActions {
    type Output = Vec<ActionInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::ActionList {
            namespace: namespace.into(),
        }
    }

    fn output(reply: Reply) -> Result<Vec<ActionInfo>, Error> {
        match reply {
            Reply::Actions(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::delete_action`.
pub(crate) struct DeleteAction<'a> {
    pub name: &'a str,
}

impl TypedRequest for DeleteAction<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::ActionDelete {
            namespace: namespace.into(),
            name: self.name.into(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::ActionDeleted { .. } => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::set_action_enabled`.
pub(crate) struct SetActionEnabled<'a> {
    pub name: &'a str,
    pub enabled: bool,
}

impl TypedRequest for SetActionEnabled<'_> {
    type Output = ActionInfo;

    fn op(self, namespace: &str) -> Op {
        Op::ActionSetEnabled {
            namespace: namespace.into(),
            name: self.name.into(),
            enabled: self.enabled,
        }
    }

    fn output(reply: Reply) -> Result<ActionInfo, Error> {
        action_of(reply)
    }
}

/// `Client::invoke`: the run's id.
pub(crate) struct Invoke<'a> {
    pub action: &'a str,
    pub input: &'a [u8],
    pub opts: InvokeOptions,
}

impl TypedRequest for Invoke<'_> {
    type Output = String;

    fn op(self, namespace: &str) -> Op {
        Op::ActionInvoke(invoke_spec(
            namespace,
            self.action,
            self.input,
            self.opts,
            None,
        ))
    }

    fn output(reply: Reply) -> Result<String, Error> {
        match reply {
            Reply::Invoked { run_id, .. } => Ok(run_id),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::invoke_and_wait`: the run's status once final or after `wait_ms`.
pub(crate) struct InvokeAndWait<'a> {
    pub action: &'a str,
    pub input: &'a [u8],
    pub opts: InvokeOptions,
    pub wait_ms: u64,
}

impl TypedRequest for InvokeAndWait<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::ActionInvoke(invoke_spec(
            namespace,
            self.action,
            self.input,
            self.opts,
            Some(self.wait_ms),
        ))
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

fn invoke_spec(
    namespace: &str,
    action: &str,
    input: &[u8],
    opts: InvokeOptions,
    wait_ms: Option<u64>,
) -> InvokeSpec {
    InvokeSpec {
        namespace: namespace.into(),
        action: action.into(),
        input: input.to_vec(),
        priority: opts.priority,
        delay_ms: opts.delay_ms,
        idempotency_key: opts.idempotency_key,
        labels: opts.labels,
        wait_ms,
    }
}

/// `Client::run`.
pub(crate) struct GetRun<'a> {
    pub run_id: &'a str,
}

impl TypedRequest for GetRun<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::RunStatus {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

/// `Client::wait_run`.
pub(crate) struct WaitRun<'a> {
    pub run_id: &'a str,
    pub timeout_ms: u64,
}

impl TypedRequest for WaitRun<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::RunWait {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            timeout_ms: self.timeout_ms,
        }
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

/// `Client::list_runs_page`.
pub(crate) struct ListRunsPage<'a> {
    pub action: &'a str,
    pub status: Option<RunStatus>,
    pub dead_letter: bool,
    pub limit: Option<u32>,
    pub cursor: Option<&'a str>,
    pub query: Option<&'a str>,
}

impl TypedRequest for ListRunsPage<'_> {
    type Output = Page<RunInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::RunList {
            namespace: namespace.into(),
            action: self.action.into(),
            status: self.status,
            dead_letter: self.dead_letter,
            limit: self.limit,
            cursor: self.cursor.map(str::to_string),
            query: self.query.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<Page<RunInfo>, Error> {
        match reply {
            Reply::Runs {
                runs, next_cursor, ..
            } => Ok(Page {
                items: runs,
                next_cursor,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::cancel_run`.
pub(crate) struct CancelRun<'a> {
    pub run_id: &'a str,
}

impl TypedRequest for CancelRun<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::RunCancel {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

/// `Client::redrive_run`.
pub(crate) struct RedriveRun<'a> {
    pub run_id: &'a str,
    pub action: Option<&'a str>,
}

impl TypedRequest for RedriveRun<'_> {
    type Output = RunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::RunRedrive {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            action: self.action.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<RunInfo, Error> {
        run_of(reply)
    }
}

/// The action a `Reply::Action` carries.
fn action_of(reply: Reply) -> Result<ActionInfo, Error> {
    match reply {
        Reply::Action(info) => Ok(info),
        other => Err(unexpected(other)),
    }
}

/// The run a `Reply::Run` carries (also the answer to a task failure).
pub(super) fn run_of(reply: Reply) -> Result<RunInfo, Error> {
    match reply {
        Reply::Run(info) => Ok(info),
        other => Err(unexpected(other)),
    }
}
