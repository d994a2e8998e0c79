//! Reading request bodies, bounded in size and in time.
//!
//! Handlers take the raw [`Body`] and call [`read`] only once the checks that protect the
//! gateway have passed (the admin route checks its bearer token first): a request refused for
//! its credentials costs the gateway no body bytes. Then:
//!
//! - a `Content-Length` over the limit is answered 413 `body_too_large` at once, before a byte
//!   of the body is read (and before hyper sends `100 Continue`);
//! - a body without a length (chunked) is read through [`http_body_util::Limited`], which stops
//!   at the first byte past the limit, so an endless chunked body costs at most the limit;
//! - the whole body must arrive within the body timeout, else 408 `body_timeout`: a client that
//!   announces a length and never sends it holds its connection for that long, not forever.
//!
//! When a handler answers without reading the body, hyper closes the connection after the
//! answer instead of draining what the client still sends. Body bytes still unread in the
//! socket when it closes make the kernel reset the connection, and a client that has not yet
//! read the answer then loses it ("error sending request"; the HTTP fuzz test met it once in
//! 4,000 requests on CI). So a refusal that needs no credentials (a bad `Content-Type` or
//! `Idempotency-Key`) is answered only after the body, within these limits, is read; only
//! refusals that protect the gateway (over the limit, no credentials) answer at once.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use pirq_shared::error::ErrorCode;

use crate::error::ApiError;

/// What a route allows its body: at most `limit` bytes, all of them within `timeout`.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub limit: usize,
    pub timeout: Duration,
}

/// Reads the whole body within `limits`.
pub async fn read(headers: &HeaderMap, body: Body, limits: BodyLimits) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("request body exceeds the limit of {} bytes", limits.limit),
        )
    };
    if let Some(length) = content_length(headers)? {
        if length > limits.limit as u64 {
            return Err(too_large());
        }
    }
    let collected =
        tokio::time::timeout(limits.timeout, Limited::new(body, limits.limit).collect())
            .await
            .map_err(|_| {
                ApiError::new(
                    ErrorCode::BodyTimeout,
                    format!(
                        "the request body did not arrive within {} ms",
                        limits.timeout.as_millis()
                    ),
                )
            })?;
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// The declared `Content-Length`; 400 when it is not a number (hyper refuses most such requests
/// itself; this covers what reaches a handler).
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(header::CONTENT_LENGTH) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                "Content-Length is not a number",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use futures::stream;

    const LIMITS: BodyLimits = BodyLimits {
        limit: 8,
        timeout: Duration::from_millis(200),
    };

    fn with_length(n: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        h
    }

    #[tokio::test]
    async fn small_bodies_are_read() {
        let got = read(&with_length(3), Body::from("abc"), LIMITS)
            .await
            .unwrap();
        assert_eq!(&got[..], b"abc");
    }

    #[tokio::test]
    async fn a_large_declared_length_is_refused_without_reading() {
        // A body that would never end: the length alone decides.
        let endless = Body::from_stream(stream::pending::<Result<Bytes, std::io::Error>>());
        let e = read(&with_length(1 << 30), endless, LIMITS)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_chunked_body_is_cut_at_the_limit() {
        let endless = Body::from_stream(stream::repeat_with(|| {
            Ok::<_, std::io::Error>(Bytes::from_static(b"xxxx"))
        }));
        let e = read(&HeaderMap::new(), endless, LIMITS).await.unwrap_err();
        assert_eq!(e.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_body_that_never_comes_times_out() {
        let silent = Body::from_stream(stream::pending::<Result<Bytes, std::io::Error>>());
        let e = read(&with_length(4), silent, LIMITS).await.unwrap_err();
        assert_eq!(e.code(), "body_timeout");
        assert_eq!(e.status().as_u16(), 408);
    }
}
