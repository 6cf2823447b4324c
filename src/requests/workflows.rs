//! Workflow requests: definitions, runs, signals, history.

use super::request::{TypedRequest, unexpected};
use crate::client::{Error, HistoryPage, Page, StartOptions};
use flo_protocol::{
    HISTORY_LIMIT_DEFAULT, HistoryEvent, Op, PlanExecutorInfo, Reply, RunSummary, ScheduleInfo,
    TimedOutFilter, ValidationIssue, WorkflowControl, WorkflowInfo, WorkflowRunInfo,
    WorkflowRunStatus, WorkflowStartSpec,
};

/// `Client::create_workflow`: (name, version, created, warnings).
pub(crate) struct CreateWorkflow<'a> {
    pub yaml: &'a str,
}

impl TypedRequest for CreateWorkflow<'_> {
    type Output = (String, String, bool, Vec<ValidationIssue>);

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowCreate {
            namespace: namespace.into(),
            yaml: self.yaml.into(),
        }
    }

    fn output(reply: Reply) -> Result<Self::Output, Error> {
        match reply {
            Reply::WorkflowCreated {
                name,
                version,
                created,
                warnings,
            } => Ok((name, version, created, warnings)),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::workflow`: `version`, or the latest.
pub(crate) struct GetWorkflow<'a> {
    pub name: &'a str,
    pub version: Option<&'a str>,
}

impl TypedRequest for GetWorkflow<'_> {
    type Output = WorkflowInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowGet {
            namespace: namespace.into(),
            name: self.name.into(),
            version: self.version.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<WorkflowInfo, Error> {
        workflow_of(reply)
    }
}

/// `Client::list_workflows`.
pub(crate) struct ListWorkflows;

impl TypedRequest for ListWorkflows {
    type Output = Vec<WorkflowInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowList {
            namespace: namespace.into(),
        }
    }

    fn output(reply: Reply) -> Result<Vec<WorkflowInfo>, Error> {
        match reply {
            Reply::Workflows(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::set_workflow_enabled`.
pub(crate) struct SetWorkflowEnabled<'a> {
    pub name: &'a str,
    pub enabled: bool,
}

impl TypedRequest for SetWorkflowEnabled<'_> {
    type Output = WorkflowInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowSetEnabled {
            namespace: namespace.into(),
            name: self.name.into(),
            enabled: self.enabled,
        }
    }

    fn output(reply: Reply) -> Result<WorkflowInfo, Error> {
        workflow_of(reply)
    }
}

/// `Client::start_workflow`: the run's id.
pub(crate) struct StartWorkflow<'a> {
    pub name: &'a str,
    pub input: &'a [u8],
    pub opts: StartOptions,
}

impl TypedRequest for StartWorkflow<'_> {
    type Output = String;

    fn op(self, namespace: &str) -> Op {
        start_op(namespace, self.name, self.input, self.opts, None)
    }

    fn output(reply: Reply) -> Result<String, Error> {
        match reply {
            Reply::WorkflowStarted { run_id, .. } => Ok(run_id),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::start_workflow_and_wait`: the run's status once final or after `wait_ms`.
pub(crate) struct StartWorkflowAndWait<'a> {
    pub name: &'a str,
    pub input: &'a [u8],
    pub opts: StartOptions,
    pub wait_ms: u64,
}

impl TypedRequest for StartWorkflowAndWait<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        start_op(
            namespace,
            self.name,
            self.input,
            self.opts,
            Some(self.wait_ms),
        )
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

fn start_op(
    namespace: &str,
    name: &str,
    input: &[u8],
    opts: StartOptions,
    wait_ms: Option<u64>,
) -> Op {
    Op::WorkflowStart(WorkflowStartSpec {
        namespace: namespace.into(),
        name: name.into(),
        version: opts.version,
        input: input.to_vec(),
        idempotency_key: opts.idempotency_key,
        wait_ms,
        run_id: opts.run_id,
        group: opts.group,
        webhook: opts.webhook,
    })
}

/// `Client::workflow_run`.
pub(crate) struct GetWorkflowRun<'a> {
    pub run_id: &'a str,
}

impl TypedRequest for GetWorkflowRun<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowStatus {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
        }
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

/// `Client::wait_workflow`.
pub(crate) struct WaitWorkflow<'a> {
    pub run_id: &'a str,
    pub timeout_ms: u64,
}

impl TypedRequest for WaitWorkflow<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowWait {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            timeout_ms: self.timeout_ms,
        }
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

/// `Client::workflow_history`: every event, in one reply.
pub(crate) struct WorkflowHistory<'a> {
    pub run_id: &'a str,
}

impl TypedRequest for WorkflowHistory<'_> {
    type Output = Vec<HistoryEvent>;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowHistory {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            limit: None,
            after: None,
        }
    }

    fn output(reply: Reply) -> Result<Vec<HistoryEvent>, Error> {
        match reply {
            Reply::WorkflowHistory(events) => Ok(events),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::workflow_history_page` (`limit` none: the server's default page).
pub(crate) struct WorkflowHistoryPage<'a> {
    pub run_id: &'a str,
    pub limit: Option<u32>,
    pub after: Option<u64>,
}

impl TypedRequest for WorkflowHistoryPage<'_> {
    type Output = HistoryPage;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowHistory {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            // Always a limit: without `after` either, the server would send every event.
            limit: Some(self.limit.unwrap_or(HISTORY_LIMIT_DEFAULT)),
            after: self.after,
        }
    }

    fn output(reply: Reply) -> Result<HistoryPage, Error> {
        match reply {
            Reply::WorkflowHistoryPage { events, next_after } => {
                Ok(HistoryPage { events, next_after })
            }
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::workflow_events`.
pub(crate) struct WorkflowEvents<'a> {
    pub workflow: Option<&'a str>,
    pub cursor: Option<&'a str>,
    pub limit: Option<u32>,
}

impl TypedRequest for WorkflowEvents<'_> {
    type Output = crate::client::EventsPage;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowEvents {
            namespace: namespace.into(),
            workflow: self.workflow.map(str::to_string),
            cursor: self.cursor.map(str::to_string),
            limit: self.limit,
        }
    }

    fn output(reply: Reply) -> Result<crate::client::EventsPage, Error> {
        match reply {
            Reply::WorkflowEvents {
                events,
                cursor,
                gap,
            } => Ok(crate::client::EventsPage {
                events,
                cursor,
                gap,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::signal_workflow`.
pub(crate) struct SignalWorkflow<'a> {
    pub run_id: &'a str,
    pub signal_type: &'a str,
    pub payload: &'a [u8],
}

impl TypedRequest for SignalWorkflow<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowSignal {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            signal_type: self.signal_type.into(),
            payload: self.payload.to_vec(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::cancel_workflow`.
pub(crate) struct CancelWorkflow<'a> {
    pub run_id: &'a str,
    pub reason: Option<&'a str>,
}

impl TypedRequest for CancelWorkflow<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowCancel {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            reason: self.reason.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

/// `Client::list_workflow_runs_page`.
pub(crate) struct ControlWorkflow<'a> {
    pub run_id: &'a str,
    pub control: WorkflowControl,
}

impl TypedRequest for ControlWorkflow<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowControl {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            control: self.control,
        }
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

/// `Client::update_workflow_state`, `Client::set_workflow_state`.
pub(crate) struct UpdateWorkflowState<'a> {
    pub run_id: &'a str,
    /// A JSON object.
    pub state: &'a [u8],
    pub replace: bool,
    pub continue_run: bool,
}

impl TypedRequest for UpdateWorkflowState<'_> {
    type Output = WorkflowRunInfo;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowUpdateState {
            namespace: namespace.into(),
            run_id: self.run_id.into(),
            state: self.state.to_vec(),
            replace: self.replace,
            continue_run: self.continue_run,
        }
    }

    fn output(reply: Reply) -> Result<WorkflowRunInfo, Error> {
        workflow_run_of(reply)
    }
}

pub(crate) struct ListWorkflowRunsPage<'a> {
    pub name: &'a str,
    pub status: Option<WorkflowRunStatus>,
    pub limit: Option<u32>,
    pub cursor: Option<&'a str>,
    pub timed_out: Option<TimedOutFilter>,
}

impl TypedRequest for ListWorkflowRunsPage<'_> {
    type Output = Page<WorkflowRunInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowListRuns {
            namespace: namespace.into(),
            name: self.name.into(),
            status: self.status,
            limit: self.limit,
            cursor: self.cursor.map(str::to_string),
            timed_out: self.timed_out,
        }
    }

    fn output(reply: Reply) -> Result<Page<WorkflowRunInfo>, Error> {
        match reply {
            Reply::WorkflowRuns {
                runs, next_cursor, ..
            } => Ok(Page {
                items: runs,
                next_cursor,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// The definition a `Reply::Workflow` carries.
fn workflow_of(reply: Reply) -> Result<WorkflowInfo, Error> {
    match reply {
        Reply::Workflow(info) => Ok(info),
        other => Err(unexpected(other)),
    }
}

/// The run a `Reply::WorkflowRun` carries.
fn workflow_run_of(reply: Reply) -> Result<WorkflowRunInfo, Error> {
    match reply {
        Reply::WorkflowRun(info) => Ok(info),
        other => Err(unexpected(other)),
    }
}

/// `Client::list_schedules`.
pub(crate) struct ListSchedules;

impl TypedRequest for ListSchedules {
    type Output = Vec<ScheduleInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::ScheduleList {
            namespace: namespace.into(),
        }
    }

    fn output(reply: Reply) -> Result<Vec<ScheduleInfo>, Error> {
        match reply {
            Reply::Schedules(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::pause_schedule` / `resume_schedule`.
pub(crate) struct PauseSchedule<'a> {
    pub name: &'a str,
    pub paused: bool,
}

impl TypedRequest for PauseSchedule<'_> {
    type Output = ScheduleInfo;

    fn op(self, namespace: &str) -> Op {
        Op::SchedulePause {
            namespace: namespace.into(),
            name: self.name.into(),
            paused: self.paused,
        }
    }

    fn output(reply: Reply) -> Result<ScheduleInfo, Error> {
        match reply {
            Reply::Schedule(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::trigger_schedule`: the id of the run started.
pub(crate) struct TriggerSchedule<'a> {
    pub name: &'a str,
}

impl TypedRequest for TriggerSchedule<'_> {
    type Output = String;

    fn op(self, namespace: &str) -> Op {
        Op::ScheduleTrigger {
            namespace: namespace.into(),
            name: self.name.into(),
        }
    }

    fn output(reply: Reply) -> Result<String, Error> {
        match reply {
            Reply::WorkflowStarted { run_id, .. } => Ok(run_id),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::query_workflow_runs`.
pub(crate) struct QueryWorkflowRuns<'a> {
    pub workflow: Option<&'a str>,
    pub query: &'a str,
    pub ascending: bool,
    pub limit: Option<u32>,
    pub cursor: Option<&'a str>,
}

impl TypedRequest for QueryWorkflowRuns<'_> {
    type Output = Page<RunSummary>;

    fn op(self, namespace: &str) -> Op {
        Op::WorkflowQuery {
            namespace: namespace.into(),
            workflow: self.workflow.map(str::to_string),
            query: self.query.into(),
            ascending: self.ascending,
            limit: self.limit,
            cursor: self.cursor.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<Page<RunSummary>, Error> {
        match reply {
            Reply::RunSummaries {
                items, next_cursor, ..
            } => Ok(Page { items, next_cursor }),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::plan_status`.
pub(crate) struct PlanStatus<'a> {
    pub workflow: &'a str,
    pub plan: Option<&'a str>,
}

impl TypedRequest for PlanStatus<'_> {
    type Output = Vec<PlanExecutorInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::PlanStatus {
            namespace: namespace.into(),
            workflow: self.workflow.into(),
            plan: self.plan.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<Vec<PlanExecutorInfo>, Error> {
        match reply {
            Reply::PlanStatus(rows) => Ok(rows),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::invalidate_plan_cache`: the cached outputs dropped.
pub(crate) struct InvalidatePlanCache<'a> {
    pub event: &'a str,
    pub key: Option<&'a str>,
}

impl TypedRequest for InvalidatePlanCache<'_> {
    type Output = u64;

    fn op(self, namespace: &str) -> Op {
        Op::PlanInvalidate {
            namespace: namespace.into(),
            event: self.event.into(),
            key: self.key.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<u64, Error> {
        match reply {
            Reply::Invalidated { entries } => Ok(entries),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::webhook_deliveries`.
pub(crate) struct WebhookDeliveries<'a> {
    pub failed: bool,
    pub workflow: Option<&'a str>,
    pub limit: Option<u32>,
}

impl TypedRequest for WebhookDeliveries<'_> {
    type Output = (Vec<flo_protocol::WebhookDelivery>, bool);

    fn op(self, namespace: &str) -> Op {
        Op::WebhookDeliveries {
            namespace: namespace.into(),
            failed: self.failed,
            workflow: self.workflow.map(str::to_string),
            limit: self.limit,
        }
    }

    fn output(reply: Reply) -> Result<Self::Output, Error> {
        match reply {
            Reply::WebhookDeliveries {
                deliveries,
                truncated,
            } => Ok((deliveries, truncated)),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::redeliver_webhook`.
pub(crate) struct RedeliverWebhook<'a> {
    pub id: &'a str,
}

impl TypedRequest for RedeliverWebhook<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::WebhookRedeliver {
            namespace: namespace.into(),
            id: self.id.into(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
