//! The HTTP port (`--http`): `/healthz`, `/readyz` and `/metrics`, served by axum on hyper
//! in a thread of its own (`flo-http`) with a current-thread tokio runtime, off the shards'
//! executors: a scrape costs the shards nothing but the atomics they bump anyway.
//!
//! Bounded: at most `HTTP_CONNECTIONS_MAX` connections (one more is closed at once), a
//! request's head within `REQUEST_HEAD_BYTES_MAX` and `HEADER_READ_TIMEOUT`, its body within
//! `REQUEST_BODY_BYTES_MAX`, its answer within `REQUEST_TIMEOUT`, a connection's life within
//! `CONNECTION_LIFETIME` (a scraper connects again). With an auth file, `/metrics` and
//! `/readyz` want `Authorization: Bearer TOKEN`, a token of that file (any role);
//! `/healthz` stays open. Other routes (the web console's) are served beside these, with
//! their own body bound and checks.

use super::export::{ServerMetrics, encode_text};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flo_engine::auth::AuthTable;
use prometheus_client::registry::Registry;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// HTTP connections open at once; one more is closed as soon as it is accepted.
pub const HTTP_CONNECTIONS_MAX: usize = 64;
/// A request's line and headers (hyper's read buffer; its least is 8 KiB).
const REQUEST_HEAD_BYTES_MAX: usize = 16 << 10;
/// A request's body to these routes (none reads one).
const REQUEST_BODY_BYTES_MAX: usize = 4 << 10;
/// A request's head must arrive within this long.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request is answered within this long, or answered 408.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed this long after it was accepted, whatever it does.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
/// How often the thread looks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Accepting again after a failure (out of file descriptors, say) waits this long; a
/// failure is reported at most once per `ACCEPT_REPORT_EVERY`.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
const ACCEPT_REPORT_EVERY: Duration = Duration::from_secs(10);
/// Pending connections the kernel holds for the accept loop.
const LISTEN_BACKLOG: i32 = 128;

/// Binds the HTTP port (at start-up, so that a port that cannot be had fails the start).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    // A restarted server takes its port back while old connections linger in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The HTTP thread, serving until `stop` or dropped.
pub struct HttpPort {
    pub addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl HttpPort {
    /// Stops serving (connections in progress are dropped) and waits for the thread.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for HttpPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What every request is served with.
#[derive(Clone)]
struct App {
    metrics: Arc<ServerMetrics>,
    registry: Arc<Registry>,
    auth: Option<Arc<AuthTable>>,
    /// The server was asked to stop: not ready any more.
    stopping: Arc<AtomicBool>,
}

/// Starts the HTTP thread on `listener`, serving these routes and `beside` (routes of
/// their own: the web console).
pub fn start(
    listener: std::net::TcpListener,
    metrics: Arc<ServerMetrics>,
    auth: Option<Arc<AuthTable>>,
    stopping: Arc<AtomicBool>,
    beside: Router,
) -> io::Result<HttpPort> {
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let app = App {
        registry: Arc::new(metrics.registry()),
        metrics,
        auth,
        stopping,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("flo-http".into())
        .spawn(move || runtime.block_on(serve(listener, router(app, beside), stopped)))?;
    Ok(HttpPort {
        addr,
        thread: Some(thread),
        stop,
    })
}

fn router(app: App, beside: Router) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route_layer(middleware::from_fn_with_state(app.clone(), require_token));
    let own = Router::new()
        .route("/healthz", get(healthz))
        .merge(guarded)
        .layer(RequestBodyLimitLayer::new(REQUEST_BODY_BYTES_MAX))
        .with_state(app);
    own.merge(beside).layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        REQUEST_TIMEOUT,
    ))
}

/// Accepts and serves connections until `stop` is set.
async fn serve(listener: std::net::TcpListener, app: Router, stop: Arc<AtomicBool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(target: "flo::http", "the HTTP port cannot serve: {e}");
            return;
        }
    };
    let stopped = async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(STOP_POLL).await;
        }
    };
    futures_lite::future::or(accept_loop(listener, app), stopped).await;
}

async fn accept_loop(listener: tokio::net::TcpListener, app: Router) {
    let slots = Arc::new(tokio::sync::Semaphore::new(HTTP_CONNECTIONS_MAX));
    let mut reported: Option<Instant> = None;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                if reported.is_none_or(|at| at.elapsed() >= ACCEPT_REPORT_EVERY) {
                    reported = Some(Instant::now());
                    tracing::warn!(target: "flo::http", "the HTTP port cannot accept a connection: {e}");
                }
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        // Over the bound: closed at once (dropped).
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(REQUEST_HEAD_BYTES_MAX);
            let io = hyper_util::rt::TokioIo::new(stream);
            let conn = builder.serve_connection(io, service);
            // Whatever ends it (the client, an error, its time), the slot is freed.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            drop(slot);
        });
    }
}

/// With an auth file: the request must carry `Authorization: Bearer TOKEN` with a token of
/// that file, else it is answered 401.
async fn require_token(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(table) = &app.auth else {
        return next.run(request).await;
    };
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if token.is_some_and(|t| table.lookup(t).is_some()) {
        return next.run(request).await;
    }
    app.metrics.http_denials.fetch_add(1, Ordering::Relaxed);
    let message = "unauthorized: give the header Authorization: Bearer TOKEN, with a token of \
                   the server's auth file\n";
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        message,
    )
        .into_response()
}

/// The token of an `Authorization` header's value `Bearer TOKEN` (the scheme in any case).
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The process is up and answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 once every shard has recovered and serves, until a stop is asked; else 503 saying
/// why.
async fn readyz(State(app): State<App>) -> Response {
    if app.stopping.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: stopping\n").into_response();
    }
    let waiting = app.metrics.shards_not_serving();
    if !waiting.is_empty() {
        let list: Vec<String> = waiting.iter().map(u32::to_string).collect();
        let message = format!("not ready: shards {} are starting\n", list.join(", "));
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    if !app.metrics.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n").into_response();
    }
    (StatusCode::OK, "ready\n").into_response()
}

async fn metrics(State(app): State<App>) -> Response {
    match encode_text(&app.registry) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal: the metrics could not be encoded\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_whatever_the_schemes_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
