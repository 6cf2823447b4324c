//! Who calls the console's API and how a call reaches the shards: the caller's bearer
//! token looked up, the operation authorized by the binary protocol's own policy
//! (`flo_engine::auth::authorize`), then sent through the in-process bridge.

use super::bridge::Bridge;
use super::errors::ApiError;
use crate::metrics::{ServerMetrics, bearer_token};
use axum::http::{HeaderMap, header};
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
