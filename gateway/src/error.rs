//! Errors as HTTP answers: a status, `{"error": {"code", "message", ...}}`, and `Retry-After`
//! where waiting helps. Every conversion of another error into an answer is here, beside the
//! one error type (axum's error-handling example): a Redis failure ([`QueueError`]), a wire
//! error, a check's refusal ([`ErrorBody`]), and the answers several routes give alike; and
//! [`StateError`], why the gateway's state could not be built.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pirq_queue::QueueError;
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

    /// 503 `no_database`: no worker has registered the party's database (or the table's) yet.
    pub fn no_database() -> ApiError {
        ApiError::new(
            ErrorCode::NoDatabase,
            "no worker has registered a database for this party yet",
        )
        .retry_after(1)
    }

    /// 400 `invalid_id`: a path's query id that is not a request id (never echoed).
    pub fn invalid_id() -> ApiError {
        ApiError::new(
            ErrorCode::InvalidId,
            "a query id is 32 lowercase hex digits",
        )
    }

    /// 503 `not_durable` under `--durability <flag>`: the query may still be answered, and a
    /// retry with the same `Idempotency-Key` is answered, not run twice.
    pub fn not_durable(flag: &str, why: &str) -> ApiError {
        ApiError::new(
            ErrorCode::NotDurable,
            format!(
                "--durability {flag}: {why}; the query may still be answered, retry with the \
                 same Idempotency-Key"
            ),
        )
        .retry_after(1)
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

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> ApiError {
        ApiError::redis(e)
    }
}

/// A check's refusal (`pirq_shared::check`) as an answer: its code sets the status.
impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> ApiError {
        let code = ErrorCode::parse(&body.code).unwrap_or(ErrorCode::Internal);
        let mut e = ApiError::new(code, "");
        e.body = body;
        e
    }
}

/// Why the state could not be built (bad prefix or Redis URL).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Prefix(#[from] pirq_shared::layout::PrefixError),
    #[error(transparent)]
    Partitions(#[from] pirq_shared::layout::PartitionsError),
    #[error(transparent)]
    Producer(#[from] QueueError),
    /// `--redis` with its TLS files (a `rediss://` URL): [`pirq_party::RedisArgs::target`].
    #[error("{0:#}")]
    Target(anyhow::Error),
    /// `--query-tokens`: the file cannot be read or has no valid token.
    #[error("{0:#}")]
    Access(anyhow::Error),
    /// `--fetched-result-bytes` at or above `--max-redis-memory`.
    #[error(transparent)]
    Budget(#[from] crate::retention::BudgetError),
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
