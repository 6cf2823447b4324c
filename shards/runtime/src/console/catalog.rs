//! The console's other pages: the server's status, workflow definitions (with their graph
//! and versions), actions, workers (and draining one), streams and their groups, schedules
//! (pause, resume). Each sends the operation the CLI sends.

use super::caller::Console;
use super::errors::ApiError;
use super::params::Params;
use super::runs::path_param;
use super::{graph, views};
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use flo_protocol::{Op, Reply};
use serde_json::{Value, json};

type Answer = Result<Json<Value>, ApiError>;

/// Runs `op` for the request's caller, in the namespace its query string names (`ns`).
async fn call(
    console: &Console,
    headers: &HeaderMap,
    query: Option<String>,
    op: impl FnOnce(&Params) -> Result<Op, ApiError>,
) -> Result<Reply, ApiError> {
    let caller = console.caller(headers)?;
    let params = Params::parse(query.as_deref())?;
    console.call(caller, op(&params)?).await
}

/// `GET /api/status`: `flo status`.
pub(crate) async fn status(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    match call(&console, &headers, query, |_| Ok(Op::Status)).await? {
        Reply::Status(info) => Ok(Json(json!(info))),
        _ => Err(ApiError::unexpected("status")),
    }
}

/// `GET /api/workflows`: `flo workflow list`.
pub(crate) async fn workflows(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |p: &Params| {
        Ok(Op::WorkflowList {
            namespace: p.namespace(),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Workflows(list) => Ok(Json(list_of(list.iter().map(views::workflow_row)))),
        _ => Err(ApiError::unexpected("workflow_list")),
    }
}

/// `GET /api/workflows/{name}?version=`: `flo workflow get NAME`, with the definition's
/// graph.
pub(crate) async fn workflow(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let name = path_param(path)?;
    let op = |p: &Params| {
        Ok(Op::WorkflowGet {
            namespace: p.namespace(),
            name,
            version: p.get("version").map(str::to_string),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Workflow(w) => {
            let mut doc = views::workflow_row(&w);
            doc["yaml"] = json!(w.yaml);
            doc["graph"] = graph::graph(&w.yaml);
            Ok(Json(doc))
        }
        _ => Err(ApiError::unexpected("workflow_get")),
    }
}

/// `GET /api/actions`: `flo action list`.
pub(crate) async fn actions(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |p: &Params| {
        Ok(Op::ActionList {
            namespace: p.namespace(),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Actions(list) => Ok(Json(list_of(list.iter().map(views::action)))),
        _ => Err(ApiError::unexpected("action_list")),
    }
}

/// `GET /api/workers`: `flo worker list`.
pub(crate) async fn workers(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |p: &Params| {
        Ok(Op::WorkerList {
            namespace: p.namespace(),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Workers(list) => Ok(Json(list_of(list.iter().map(views::worker)))),
        _ => Err(ApiError::unexpected("worker_list")),
    }
}

/// `POST /api/workers/{id}/drain`: `flo worker drain ID`.
pub(crate) async fn drain_worker(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let worker_id = path_param(path)?;
    let op = |p: &Params| {
        Ok(Op::WorkerDrain {
            namespace: p.namespace(),
            worker_id,
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Worker(w) => Ok(Json(views::worker(&w))),
        _ => Err(ApiError::unexpected("worker_drain")),
    }
}

/// `GET /api/streams`: `flo stream list`.
pub(crate) async fn streams(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |p: &Params| {
        Ok(Op::StreamList {
            namespace: p.namespace(),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Streams(list) => Ok(Json(list_of(list.iter().map(views::stream)))),
        _ => Err(ApiError::unexpected("stream_list")),
    }
}

/// `GET /api/streams/{name}/groups`: `flo stream group info NAME`.
pub(crate) async fn groups(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let stream = path_param(path)?;
    let op = |p: &Params| {
        Ok(Op::StreamGroupInfo {
            namespace: p.namespace(),
            stream,
            group: None,
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Groups(list) => Ok(Json(list_of(list.iter().map(views::group)))),
        _ => Err(ApiError::unexpected("stream_group_info")),
    }
}

/// `GET /api/schedules`: `flo schedule list`.
pub(crate) async fn schedules(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |p: &Params| {
        Ok(Op::ScheduleList {
            namespace: p.namespace(),
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Schedules(list) => Ok(Json(list_of(list.iter().map(views::schedule)))),
        _ => Err(ApiError::unexpected("schedule_list")),
    }
}

/// `POST /api/schedules/{workflow}/pause`: `flo schedule pause WORKFLOW`.
pub(crate) async fn pause_schedule(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    set_paused(console, headers, path, query, true).await
}

/// `POST /api/schedules/{workflow}/resume`: `flo schedule resume WORKFLOW`.
pub(crate) async fn resume_schedule(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    set_paused(console, headers, path, query, false).await
}

async fn set_paused(
    console: Console,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Option<String>,
    paused: bool,
) -> Answer {
    let name = path_param(path)?;
    let op = |p: &Params| {
        Ok(Op::SchedulePause {
            namespace: p.namespace(),
            name,
            paused,
        })
    };
    match call(&console, &headers, query, op).await? {
        Reply::Schedule(s) => Ok(Json(views::schedule(&s))),
        _ => Err(ApiError::unexpected("schedule_pause")),
    }
}

fn list_of(items: impl Iterator<Item = Value>) -> Value {
    json!({"items": items.collect::<Vec<_>>()})
}
