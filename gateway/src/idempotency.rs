//! `Idempotency-Key` on `POST /v1/queries` (IETF httpapi draft "The Idempotency-Key HTTP Header
//! Field").
//!
//! The first request with a key is processed as usual and the key is remembered with the
//! request's fingerprint and id for `--idempotency-ttl` seconds, in the same atomic step that
//! queues the job (`{P}:idem:<key>`, see [`pirq_queue::producer`]): two requests with one key can never
//! both queue a job. A later request with the same key:
//!
//! - and the same request (same keys, same epoch, whatever the encoding) → the first request's
//!   id: 202 while it is pending, 200 with the result once final (404 once that expired);
//! - and a different request → 422 `idempotency_key_reused`.
//!
//! The fingerprint is the 128-bit XXH3 of the request's canonical bincode: it tells apart
//! honest mistakes, it is not a secret. Keys are meant to be unique and unguessable (UUIDv4).

use axum::http::{HeaderMap, HeaderName};
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::QueryRequest;

use crate::error::ApiError;

/// The request header (a `HeaderName` constant: a lookup by `&str` parses and checks the name
/// on every request).
pub const HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The key of a request, if it has one. The draft's syntax is a structured-field string
/// (`"…"`); a bare token is accepted too. 1..=255 printable ASCII characters, no quotes or
/// backslashes inside; anything else is 400 `invalid_idempotency_key`.
pub fn key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            format!("Idempotency-Key {why}; use 1 to {MAX_KEY_LEN} printable ASCII characters, e.g. a UUID"),
        )
    };
    if values.next().is_some() {
        return Err(invalid("is given more than once"));
    }
    let raw = value.to_str().map_err(|_| invalid("is not ASCII"))?.trim();
    let inner = match raw.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| invalid("has an unterminated quote"))?,
        None => raw,
    };
    if inner.is_empty() {
        return Err(invalid("is empty"));
    }
    if inner.len() > MAX_KEY_LEN {
        return Err(invalid("is too long"));
    }
    if !inner
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    {
        return Err(invalid("has characters outside printable ASCII"));
    }
    Ok(Some(inner.to_string()))
}

/// The request's fingerprint: 32 hex digits of the XXH3-128 of its canonical bincode (its
/// big-endian bytes in hex: the digits `{:032x}` writes, without the formatting machinery;
/// `hex::encode`, which collects its digits as chars one by one, cost more than `format!`).
pub fn fingerprint(request: &QueryRequest) -> String {
    let hash = xxhash_rust::xxh3::xxh3_128(&request.to_bincode());
    let mut digits = [0u8; 32];
    hex::encode_to_slice(hash.to_be_bytes(), &mut digits).expect("32 digits for 16 bytes");
    std::str::from_utf8(&digits)
        .expect("hex digits are ASCII")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn keys_are_parsed_and_checked() {
        assert_eq!(key(&HeaderMap::new()).unwrap(), None);
        assert_eq!(key(&headers("abc-1")).unwrap().as_deref(), Some("abc-1"));
        assert_eq!(
            key(&headers("\"abc-1\"")).unwrap().as_deref(),
            Some("abc-1")
        );
        for bad in ["", "\"\"", "\"abc", "a b", &"x".repeat(256)] {
            let e = key(&headers(bad)).unwrap_err();
            assert_eq!(e.code(), "invalid_idempotency_key", "{bad:?}");
        }
    }

    #[test]
    fn fingerprints_see_keys_and_epoch() {
        let a = QueryRequest {
            keys: vec![vec![1, 2, 3]],
            epoch: None,
        };
        let b = QueryRequest {
            keys: vec![vec![1, 2, 3]],
            epoch: Some(0),
        };
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        // The digits stored in Redis by earlier gateways: a retry across an upgrade matches.
        for request in [&a, &b] {
            let formatted = format!(
                "{:032x}",
                xxhash_rust::xxh3::xxh3_128(&request.to_bincode())
            );
            assert_eq!(fingerprint(request), formatted);
        }
    }
}
