//! Errors as HTTP answers: a status, `{"error": {"code", "message", ...}}`, and `Retry-After`
//! where waiting helps.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{ErrorBody, ErrorEnvelope, WireError, JSON};

/// An error answer. Handlers return `Result<_, ApiError>`; the status comes from the code.
#[derive(Debug)]
pub struct ApiError {
    pub body: ErrorBody,
    status: StatusCode,
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        let status = StatusCode::from_u16(code.http_status()).expect("codes map to valid statuses");
        ApiError {
            body: ErrorBody::new(code, message),
            status,
            retry_after: None,
        }
    }

    pub fn key(code: ErrorCode, index: usize, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(code, message);
        e.body = e.body.with_key_index(index);
        e
    }

    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    pub fn not_found(id: &str) -> ApiError {
        ApiError::new(
            ErrorCode::NotFound,
            format!("no query with id {id:?} (unknown or expired)"),
        )
    }

    /// A Redis failure, in pirq's words ([`pirq_queue::QueueError::public_message`]): Redis's
    /// own text goes to the log, never to a client. Transient failures carry `Retry-After: 1`.
    pub fn redis(err: pirq_queue::QueueError) -> ApiError {
        tracing::debug!(error = %err, "redis failure answered to a client");
        let api = ApiError::new(err.code(), err.public_message());
        if err.is_transient() {
            api.retry_after(1)
        } else {
            api
        }
    }

    pub fn code(&self) -> &str {
        &self.body.code
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<WireError> for ApiError {
    fn from(e: WireError) -> ApiError {
        let mut api = ApiError::new(e.code, e.message);
        if let Some(i) = e.key_index {
            api.body = api.body.with_key_index(i);
        }
        api
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&ErrorEnvelope { error: self.body }).expect("serializes");
        let mut resp = (self.status, [(header::CONTENT_TYPE, JSON)], body).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
