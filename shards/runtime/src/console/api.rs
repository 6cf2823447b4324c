//! The console's JSON API on the HTTP port (`/api/...`) and the page (`/`): the routes, who
//! the caller is and what it may do. Each API call runs the protocol operation the CLI
//! sends for the same thing, through the in-process bridge (`bridge.rs`); with an auth
//! file, the caller's bearer token is looked up and the operation authorized by the same
//! policy as the binary protocol's (`flo_engine::auth::authorize`): 401 without a known
//! token, 403 when its role or namespaces do not grant the operation.

use super::bridge::Bridge;
use super::errors::ApiError;
use super::{assets, catalog, overview, runs};
use crate::metrics::{ServerMetrics, bearer_token};
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, header};
use axum::routing::{get, post};
use flo_engine::auth::{AuthTable, Namespaces, authorize, hide_counts};
use flo_protocol::{Op, Reply};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A console API request's body (a signal's payload, a cancel's reason).
pub(crate) const API_BODY_BYTES_MAX: usize = 64 << 10;

/// What every console request is served with.
#[derive(Clone)]
pub(crate) struct Console {
    bridge: Bridge,
    auth: Option<Arc<AuthTable>>,
    metrics: Arc<ServerMetrics>,
}

/// Who asks: the auth table's entry of its token (None: the server has no auth file).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    principal: Option<usize>,
}

impl Console {
    pub fn new(bridge: Bridge, auth: Option<Arc<AuthTable>>, metrics: Arc<ServerMetrics>) -> Self {
        Console {
            bridge,
            auth,
            metrics,
        }
    }

    /// The caller of a request: with an auth file, the one its bearer token names (else
    /// 401, counted with the HTTP port's other denials).
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(table) = &self.auth else {
            return Ok(Caller { principal: None });
        };
        let found = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|token| table.lookup(token));
        match found {
            Some(index) => Ok(Caller {
                principal: Some(index),
            }),
            None => {
                self.metrics.http_denials.fetch_add(1, Ordering::Relaxed);
                Err(ApiError::unauthenticated())
            }
        }
    }

    /// Runs `op` for `caller`: authorized as the binary protocol would, then sent to a
    /// shard; its reply, or its error as the API's.
    pub async fn call(&self, caller: Caller, op: Op) -> Result<Reply, ApiError> {
        if let (Some(table), Some(index)) = (&self.auth, caller.principal) {
            authorize(table.principal(index), &op).map_err(|d| {
                self.metrics.http_denials.fetch_add(1, Ordering::Relaxed);
                ApiError::forbidden(d.message)
            })?;
        }
        if !self.metrics.ready.load(Ordering::Relaxed) {
            return Err(ApiError::unavailable("the server is starting: try again"));
        }
        let mut reply = self.bridge.call(op).await?;
        if !self.sees_all(caller) {
            hide_counts(&mut reply);
        }
        Ok(reply)
    }

    /// Whether `caller` may see what adds up every namespace (a status's counts).
    fn sees_all(&self, caller: Caller) -> bool {
        match (&self.auth, caller.principal) {
            (Some(table), Some(index)) => table.principal(index).namespaces == Namespaces::All,
            _ => true,
        }
    }

    pub fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }
}

/// The page and its API, to be served beside the HTTP port's own routes.
pub(crate) fn router(console: Console) -> Router {
    let api = Router::new()
        .route("/api/overview", get(overview))
        .route("/api/status", get(catalog::status))
        .route("/api/runs", get(runs::list))
        .route("/api/workflow-runs/{id}", get(runs::workflow_run))
        .route("/api/workflow-runs/{id}/history", get(runs::history))
        .route("/api/workflow-runs/{id}/signal", post(runs::signal))
        .route(
            "/api/workflow-runs/{id}/cancel",
            post(runs::cancel_workflow_run),
        )
        .route("/api/action-runs/{id}", get(runs::action_run))
        .route(
            "/api/action-runs/{id}/cancel",
            post(runs::cancel_action_run),
        )
        .route("/api/action-runs/{id}/retry", post(runs::retry_action_run))
        .route("/api/workflows", get(catalog::workflows))
        .route("/api/workflows/{name}", get(catalog::workflow))
        .route("/api/actions", get(catalog::actions))
        .route("/api/workers", get(catalog::workers))
        .route("/api/workers/{id}/drain", post(catalog::drain_worker))
        .route("/api/streams", get(catalog::streams))
        .route("/api/streams/{name}/groups", get(catalog::groups))
        .route("/api/schedules", get(catalog::schedules))
        .route(
            "/api/schedules/{workflow}/pause",
            post(catalog::pause_schedule),
        )
        .route(
            "/api/schedules/{workflow}/resume",
            post(catalog::resume_schedule),
        )
        .route("/api/{*rest}", get(no_such_endpoint).post(no_such_endpoint))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(API_BODY_BYTES_MAX));
    Router::new()
        .route("/", get(assets::index))
        .route("/ui/{file}", get(assets::file))
        .merge(api)
        .with_state(console)
}

/// The live numbers of the overview (any known token may read them, as `/metrics`).
async fn overview(
    State(console): State<Console>,
    headers: HeaderMap,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    console.caller(&headers)?;
    Ok(axum::Json(overview::overview(console.metrics())))
}

async fn no_such_endpoint() -> ApiError {
    ApiError::not_found("no such API endpoint (see docs/operations.md, \"Web console\")")
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
