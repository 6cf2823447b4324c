//! The console's JSON API on the HTTP port (`/api/...`) and the page (`/`): the routes, who
//! the caller is and what it may do. Each API call runs the protocol operation the CLI
//! sends for the same thing, through the in-process bridge (`bridge.rs`); with an auth
//! file, the caller's bearer token is looked up and the operation authorized by the same
//! policy as the binary protocol's (`flo_engine::auth::authorize`): 401 without a known
//! token, 403 when its role or namespaces do not grant the operation.

use super::caller::{API_BODY_BYTES_MAX, Console};
use super::errors::ApiError;
use super::{assets, catalog, overview, runs};
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};

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
        .route(
            "/api/workflow-runs/{id}/pause",
            post(runs::pause_workflow_run),
        )
        .route(
            "/api/workflow-runs/{id}/resume",
            post(runs::resume_workflow_run),
        )
        .route(
            "/api/workflow-runs/{id}/continue",
            post(runs::continue_workflow_run),
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
