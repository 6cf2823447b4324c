//! The console API's errors: every one answered as JSON, `{"error": {"code", "message"}}`,
//! with the HTTP status its code maps to.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use flo_protocol::{ErrorCode, ErrorValue};
use serde_json::json;

/// An error the API answers with.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::BadRequest.as_str(),
            message: message.into(),
        }
    }

    /// No token, or one the auth file does not hold (the page then asks for one).
    pub fn unauthenticated() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthenticated",
            message: "give the header Authorization: Bearer TOKEN, with a token of the \
                      server's auth file"
                .into(),
        }
    }

    /// A known token whose role or namespaces do not grant the operation.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: ErrorCode::Unauthorized.as_str(),
            message: format!("not authorized: {}", message.into()),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: ErrorCode::NotFound.as_str(),
            message: message.into(),
        }
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: ErrorCode::BadRequest.as_str(),
            message: "this endpoint does not take that method (reads are GET, actions POST)".into(),
        }
    }

    /// A request body over the API's bound, or one that could not be read.
    pub fn body(status: StatusCode, message: String) -> ApiError {
        ApiError {
            status,
            code: ErrorCode::BadRequest.as_str(),
            message,
        }
    }

    /// The server is starting or stopping.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::from(ErrorValue::unavailable(message))
    }

    /// A reply that does not answer the operation sent (a bug).
    pub fn unexpected(op: &str) -> ApiError {
        ApiError::from(ErrorValue::internal(format!(
            "unexpected reply to {op}: please report this"
        )))
    }
}

impl From<ErrorValue> for ApiError {
    fn from(e: ErrorValue) -> ApiError {
        let status = match e.code {
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::Unauthorized => StatusCode::FORBIDDEN,
            ErrorCode::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            code: e.code.as_str(),
            message: e.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        if self.status == StatusCode::UNAUTHORIZED {
            return (self.status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response();
        }
        (self.status, body).into_response()
    }
}
