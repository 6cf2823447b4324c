//! The console's runs: lists (by workflow or action, status and the run query languages,
//! paged by cursor; every kind and name at once in `all_runs.rs`), a run whole, a workflow
//! run's history, and what a user does to a run — signal, cancel, pause, resume, continue,
//! retry a dead letter. Each sends the operation the CLI sends.

use super::all_runs;
use super::caller::{Caller, Console};
use super::errors::ApiError;
use super::params::{Params, bool_field, json_body, text_field};
use super::views;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use flo_protocol::{HISTORY_LIMIT_MAX, Op, Reply, WorkflowControl};
use serde_json::{Value, json};

/// Runs per page unless the page asks for another number, and at most.
const RUNS_PAGE_DEFAULT: u32 = 50;
const RUNS_PAGE_MAX: u32 = 500;
/// History events per page unless asked otherwise.
const HISTORY_PAGE_DEFAULT: u32 = 500;

type Answer = Result<Json<Value>, ApiError>;

/// A path's parameter, or the API's error for one that cannot be read.
pub(crate) fn path_param(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(p)| p)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

/// A request's body as a JSON object (over `API_BODY_BYTES_MAX`: 413).
pub(crate) fn body_json(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body.map_err(|e| ApiError::body(e.status(), e.body_text()))?;
    json_body(&body)
}

/// The caller and the query string's parameters of a request.
fn begin(
    console: &Console,
    headers: &HeaderMap,
    query: Option<String>,
) -> Result<(Caller, Params), ApiError> {
    let caller = console.caller(headers)?;
    Ok((caller, Params::parse(query.as_deref())?))
}

/// `GET /api/runs?kind=workflow|action|all&name=&status=&query=&dead_letter=&limit=&cursor=`
pub(crate) async fn list(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Answer {
    let (caller, p) = begin(&console, &headers, query)?;
    let limit = p.number::<u32>("limit")?.unwrap_or(RUNS_PAGE_DEFAULT);
    if !(1..=RUNS_PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {RUNS_PAGE_MAX}"
        )));
    }
    let op = match p.get("kind").unwrap_or("workflow") {
        "action" => action_runs_op(&p, limit)?,
        "workflow" => workflow_runs_op(&p, limit)?,
        "all" => return Ok(Json(all_runs::list(&console, caller, &p, limit).await?)),
        other => {
            return Err(ApiError::bad_request(format!(
                "kind {other:?}: runs are of kind workflow or action, or all"
            )));
        }
    };
    let (rows, next_cursor, scanned) = match console.call(caller, op).await? {
        Reply::Runs {
            runs, next_cursor, ..
        } => (
            runs.iter().map(views::action_run_row).collect(),
            next_cursor,
            None,
        ),
        Reply::WorkflowRuns {
            runs, next_cursor, ..
        } => (
            runs.iter().map(views::workflow_run_row).collect(),
            next_cursor,
            None,
        ),
        Reply::RunSummaries {
            items,
            next_cursor,
            scanned,
        } => (
            items.iter().map(views::summary_row).collect(),
            next_cursor,
            Some(scanned),
        ),
        _ => return Err(ApiError::unexpected("a run list")),
    };
    let rows: Vec<Value> = rows;
    Ok(Json(json!({
        "runs": rows,
        "next_cursor": next_cursor,
        "scanned": scanned,
    })))
}

/// `flo action runs [NAME] [--status S] [--query Q]`, or `flo action dlq NAME`.
fn action_runs_op(p: &Params, limit: u32) -> Result<Op, ApiError> {
    Ok(Op::RunList {
        namespace: p.namespace(),
        action: p.get("name").unwrap_or_default().to_string(),
        status: p.run_status()?,
        dead_letter: p.flag("dead_letter")?,
        limit: Some(limit),
        cursor: p.get("cursor").map(str::to_string),
        query: p.get("query").map(str::to_string),
    })
}

/// `flo workflow list-runs [NAME] [--status S] [--query Q]`: a query runs on the query
/// index (its status added as the CLI adds it), else the workflow's runs are listed.
fn workflow_runs_op(p: &Params, limit: u32) -> Result<Op, ApiError> {
    let namespace = p.namespace();
    let name = p.get("name").map(str::to_string);
    let status = p.workflow_status()?;
    let cursor = p.get("cursor").map(str::to_string);
    if let Some(query) = p.get("query") {
        let query = match status {
            Some(s) => format!("status = \"{}\" AND ({query})", s.as_str()),
            None => query.to_string(),
        };
        return Ok(Op::WorkflowQuery {
            namespace,
            workflow: name,
            query,
            ascending: false,
            limit: Some(limit),
            cursor,
        });
    }
    let Some(name) = name else {
        return Err(ApiError::bad_request(
            "choose the workflow whose runs to list, or give a query",
        ));
    };
    Ok(Op::WorkflowListRuns {
        namespace,
        name,
        status,
        limit: Some(limit),
        cursor,
        timed_out: None,
    })
}

/// `GET /api/workflow-runs/{id}`: `flo workflow status ID`.
pub(crate) async fn workflow_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let (caller, p) = begin(&console, &headers, query)?;
    let op = Op::WorkflowStatus {
        namespace: p.namespace(),
        run_id: path_param(path)?,
    };
    match console.call(caller, op).await? {
        Reply::WorkflowRun(run) => Ok(Json(views::workflow_run(&run))),
        _ => Err(ApiError::unexpected("workflow_status")),
    }
}

/// `GET /api/workflow-runs/{id}/history?after=&limit=`: one page, oldest first.
pub(crate) async fn history(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let (caller, p) = begin(&console, &headers, query)?;
    let limit = p.number::<u32>("limit")?.unwrap_or(HISTORY_PAGE_DEFAULT);
    if !(1..=HISTORY_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {HISTORY_LIMIT_MAX}"
        )));
    }
    let op = Op::WorkflowHistory {
        namespace: p.namespace(),
        run_id: path_param(path)?,
        limit: Some(limit),
        after: p.number("after")?,
    };
    match console.call(caller, op).await? {
        Reply::WorkflowHistoryPage { events, next_after } => {
            let events: Vec<Value> = events.iter().map(views::event).collect();
            Ok(Json(json!({"events": events, "next_after": next_after})))
        }
        _ => Err(ApiError::unexpected("workflow_history")),
    }
}

/// `POST /api/workflow-runs/{id}/signal` with `{"type": T, "payload": JSON}`:
/// `flo workflow signal ID T --payload JSON` (payload `{}` when none is given).
pub(crate) async fn signal(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let (caller, p) = begin(&console, &headers, query)?;
    let body = body_json(body)?;
    let Some(signal_type) = text_field(&body, "type")? else {
        return Err(ApiError::bad_request("give the signal's type"));
    };
    let payload = match body.get("payload") {
        None | Some(Value::Null) => b"{}".to_vec(),
        Some(v) => v.to_string().into_bytes(),
    };
    let op = Op::WorkflowSignal {
        namespace: p.namespace(),
        run_id: path_param(path)?,
        signal_type: signal_type.to_string(),
        payload,
    };
    match console.call(caller, op).await? {
        Reply::Done => Ok(Json(json!({"signalled": true}))),
        _ => Err(ApiError::unexpected("workflow_signal")),
    }
}

/// `POST /api/workflow-runs/{id}/cancel` with `{"reason": R}`: `flo workflow cancel ID`.
pub(crate) async fn cancel_workflow_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let (caller, p) = begin(&console, &headers, query)?;
    let body = body_json(body)?;
    let op = Op::WorkflowCancel {
        namespace: p.namespace(),
        run_id: path_param(path)?,
        reason: text_field(&body, "reason")?.map(str::to_string),
    };
    match console.call(caller, op).await? {
        Reply::WorkflowRun(run) => Ok(Json(views::workflow_run(&run))),
        _ => Err(ApiError::unexpected("workflow_cancel")),
    }
}

/// `POST /api/workflow-runs/{id}/pause`: `flo workflow pause ID`.
pub(crate) async fn pause_workflow_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let control = |_: &Value| Ok(WorkflowControl::Pause);
    control_workflow_run(&console, &headers, path, query, None, control).await
}

/// `POST /api/workflow-runs/{id}/resume`: `flo workflow resume ID`.
pub(crate) async fn resume_workflow_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let control = |_: &Value| Ok(WorkflowControl::Resume);
    control_workflow_run(&console, &headers, path, query, None, control).await
}

/// `POST /api/workflow-runs/{id}/continue` with `{"reset_visits": B}`: `flo workflow
/// continue ID [--reset-visits]`.
pub(crate) async fn continue_workflow_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let control = |body: &Value| {
        let reset_visits = bool_field(body, "reset_visits")?;
        Ok(WorkflowControl::Continue { reset_visits })
    };
    control_workflow_run(&console, &headers, path, query, Some(body), control).await
}

/// Pauses, resumes or continues a workflow run (`Op::WorkflowControl`), answered with the
/// run; `control` reads the body (`{}` when there is none).
async fn control_workflow_run(
    console: &Console,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Option<String>,
    body: Option<Result<Bytes, BytesRejection>>,
    control: impl FnOnce(&Value) -> Result<WorkflowControl, ApiError>,
) -> Answer {
    let (caller, p) = begin(console, headers, query)?;
    let body = match body {
        Some(body) => body_json(body)?,
        None => json!({}),
    };
    let op = Op::WorkflowControl {
        namespace: p.namespace(),
        run_id: path_param(path)?,
        control: control(&body)?,
    };
    match console.call(caller, op).await? {
        Reply::WorkflowRun(run) => Ok(Json(views::workflow_run(&run))),
        _ => Err(ApiError::unexpected("workflow_control")),
    }
}

/// `GET /api/action-runs/{id}`: `flo action status ID`.
pub(crate) async fn action_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |namespace, run_id| Op::RunStatus { namespace, run_id };
    on_action_run(&console, &headers, path, query, "run_status", op).await
}

/// `POST /api/action-runs/{id}/cancel`: `flo action cancel ID`.
pub(crate) async fn cancel_action_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |namespace, run_id| Op::RunCancel { namespace, run_id };
    on_action_run(&console, &headers, path, query, "run_cancel", op).await
}

/// `POST /api/action-runs/{id}/retry`: a dead-lettered run queued again as a new attempt
/// (`flo action dlq NAME --redrive`).
pub(crate) async fn retry_action_run(
    State(console): State<Console>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Answer {
    let op = |namespace, run_id| Op::RunRedrive {
        namespace,
        run_id,
        action: None,
    };
    on_action_run(&console, &headers, path, query, "run_redrive", op).await
}

/// An action run's endpoint: `op` of the namespace and the run id in the path, answered
/// with the run (`name`: the operation, for an unexpected reply).
async fn on_action_run(
    console: &Console,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Option<String>,
    name: &'static str,
    op: impl FnOnce(String, String) -> Op,
) -> Answer {
    let (caller, p) = begin(console, headers, query)?;
    let op = op(p.namespace(), path_param(path)?);
    run_reply(console.call(caller, op).await?, name)
}

fn run_reply(reply: Reply, op: &str) -> Answer {
    match reply {
        Reply::Run(run) => Ok(Json(views::action_run(&run))),
        _ => Err(ApiError::unexpected(op)),
    }
}
