//! The one table of typed requests both clients serve. Each operation the SDK offers is a
//! type here: the caller's arguments, the `Op` they become in a namespace, and the output
//! its reply carries. `Client` and `MuxClient` implement `Transport` (send one `Op`, wait
//! for the `Reply`), so each of their methods is `send(self, SomeRequest { .. })`.

mod actions;
mod kv;
mod request;
mod server;
mod streams;
mod workers;
mod workflows;

pub(crate) use actions::{
    CancelRun, DeleteAction, GetAction, GetRun, Invoke, InvokeAndWait, ListActions, ListRunsPage,
    RedriveRun, RegisterAction, SetActionEnabled, WaitRun,
};
pub(crate) use kv::{KvDelete, KvGet, KvListPage, KvPut};
pub(crate) use request::{Transport, TypedRequest, is_not_found, send};
pub(crate) use server::{AdvanceClock, GetShardMap, Hello, ServerHello, Status};
pub use streams::RecordsPage;
pub(crate) use streams::{
    Append, CreateGroup, CreateStream, DeleteGroup, DeleteStream, GetStream, GroupPending,
    GroupRead, Groups, ListStreams, ReadStream, Settle, TrimStream,
};
pub(crate) use workers::{
    AwaitTasks, CompleteTask, DeregisterWorker, DrainWorker, FailTask, GetWorker, Heartbeat,
    ListWorkers, RegisterWorker, TouchTask, tasks_of,
};
pub(crate) use workflows::{
    CancelWorkflow, ControlWorkflow, CreateWorkflow, GetWorkflow, GetWorkflowRun,
    InvalidatePlanCache, ListSchedules, ListWorkflowRunsPage, ListWorkflows, PauseSchedule,
    PlanStatus, QueryWorkflowRuns, RedeliverWebhook, SetWorkflowEnabled, SignalWorkflow,
    StartWorkflow, StartWorkflowAndWait, TriggerSchedule, UpdateWorkflowState, WaitWorkflow,
    WebhookDeliveries, WorkflowEvents, WorkflowHistory, WorkflowHistoryPage,
};

#[cfg(test)]
mod tests;
