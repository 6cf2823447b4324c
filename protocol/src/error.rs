use serde::{Deserialize, Serialize};
use std::fmt;

/// How an `unavailable` error sent as request 0 starts when the server closed an idle
/// connection: no request of the client was taken, it may connect again and resend.
pub const IDLE_CLOSED_PREFIX: &str = "idle connection closed after";

/// The class of an error, stable across versions: clients branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or names invalid values; retrying it unchanged fails again.
    BadRequest,
    /// The named object does not exist.
    NotFound,
    /// The request conflicts with current state (version mismatch, already exists...).
    Conflict,
    /// The caller may not do this.
    Unauthorized,
    /// The server is saturated; retry later.
    Overloaded,
    /// The server cannot serve this now (shutting down, storage failed).
    Unavailable,
    /// A bug or an unexpected failure inside the server.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as a value on the wire: a code to branch on and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ErrorValue {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorValue {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorValue {
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}
