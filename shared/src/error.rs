//! Error codes shared by the gateway and the worker.
//!
//! A code is part of the HTTP API: clients match on it, so a code never changes meaning and is
//! never reused. The gateway turns an [`ErrorCode`] into an HTTP status with
//! [`ErrorCode::http_status`]; the worker stores the code of a failed job in Redis and the gateway
//! hands it back unchanged. Key parse errors keep the codes of [`KeyError::code`].

use std::fmt;

use crate::dpf::KeyError;

/// Every error code pirq answers with. `docs/http-api.md` lists them with their statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The body is not valid JSON or does not have the request's shape.
    InvalidJson,
    /// The body is not a valid bincode `QueryRequest`.
    InvalidBincode,
    /// A key is not valid standard base64 with padding.
    InvalidBase64,
    /// `Content-Type` is neither JSON nor bincode.
    UnsupportedMediaType,
    /// The body is larger than the gateway's limit.
    BodyTooLarge,
    /// `keys` is empty.
    NoKeys,
    /// More keys than the gateway accepts in one query.
    TooManyKeys,
    /// Key bytes rejected by the SPEC §1.3 parser (one code per [`KeyError`] variant).
    KeyTooShort,
    KeyVersion,
    KeyParty,
    KeyDomainBits,
    KeyLength,
    KeyControlByte,
    /// A well-formed key whose domain differs from the database's.
    KeyDomainMismatch,
    /// The request pins an epoch the party does not serve.
    EpochUnavailable,
    /// A query parameter (such as `wait`) is malformed.
    InvalidParameter,
    /// Unknown or expired request id.
    NotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// Redis cannot be reached.
    RedisUnavailable,
    /// No worker has registered a database for this prefix yet.
    NoDatabase,
    /// The worker could not run the scan for this job.
    ScanFailed,
    /// A job entry in the stream could not be decoded (it did not come from a gateway).
    InvalidJob,
    /// A bug: something that should not happen did.
    Internal,
    /// Admin request without the right bearer token, or a query or result read without one of
    /// the party's query tokens (`--query-tokens`).
    Unauthorized,
    /// Admin route called on a gateway started without an admin token.
    AdminDisabled,
    /// An epoch update whose number is not the newest epoch + 1.
    EpochNotNext,
    /// An epoch update that is malformed or does not fit the database.
    InvalidUpdate,
    /// An epoch update for a signed database with a page that does not carry the database
    /// publisher's signature as changed at the update's epoch (`docs/spec/signed.md` §3).
    UnsignedUpdate,
    /// A job delivered more than `--max-deliveries` times without an answer (dead-lettered).
    DeliveryLimit,
    /// An `Idempotency-Key` reused with a different request body.
    IdempotencyKeyReused,
    /// An `Idempotency-Key` header that is empty, too long or not printable ASCII.
    InvalidIdempotencyKey,
    /// The party's backlog is over `--max-backlog`: retry after `Retry-After`.
    BacklogFull,
    /// `--durability fsync|replica`: Redis did not confirm the job on disk, or on a replica, in
    /// time.
    NotDurable,
    /// `/readyz`: no live worker serves the party's newest epoch.
    NoWorkers,
    /// A request id in a path that is not 32 lowercase hex digits.
    InvalidId,
    /// The body did not arrive within `--body-timeout-ms`.
    BodyTimeout,
    /// The request target is longer than the gateway accepts.
    UriTooLong,
    /// The request headers are larger than the gateway accepts.
    HeadersTooLarge,
    /// The gateway holds `--max-connections` open connections and none of them is idle.
    TooManyConnections,
    /// `--max-waiters` long-polls and event streams are open: retry after `Retry-After`.
    TooManyWaiters,
    /// Redis holds more than the gateway's `--max-redis-memory`: retry after `Retry-After`.
    StorageFull,
    /// A sharded party with a shard that has no live worker at the newest epoch (`/readyz`).
    ShardUnavailable,
    /// More queries a second than `--token-rate` (per token) or `--ip-rate` (per client
    /// address) allow: retry after `Retry-After`.
    RateLimited,
    /// `GET /v1/manifests` on a party that serves no publisher manifests (no `--manifests`, or
    /// its file is not there yet).
    NoManifests,
    /// `/v1/tables/{name}/…` names a table the party does not serve (issue 38).
    UnknownTable,
}

impl ErrorCode {
    /// Every code, for documentation tests.
    pub const ALL: [ErrorCode; 45] = [
        ErrorCode::InvalidJson,
        ErrorCode::InvalidBincode,
        ErrorCode::InvalidBase64,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::BodyTooLarge,
        ErrorCode::NoKeys,
        ErrorCode::TooManyKeys,
        ErrorCode::KeyTooShort,
        ErrorCode::KeyVersion,
        ErrorCode::KeyParty,
        ErrorCode::KeyDomainBits,
        ErrorCode::KeyLength,
        ErrorCode::KeyControlByte,
        ErrorCode::KeyDomainMismatch,
        ErrorCode::EpochUnavailable,
        ErrorCode::InvalidParameter,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RedisUnavailable,
        ErrorCode::NoDatabase,
        ErrorCode::ScanFailed,
        ErrorCode::InvalidJob,
        ErrorCode::Internal,
        ErrorCode::Unauthorized,
        ErrorCode::AdminDisabled,
        ErrorCode::EpochNotNext,
        ErrorCode::InvalidUpdate,
        ErrorCode::UnsignedUpdate,
        ErrorCode::DeliveryLimit,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::InvalidIdempotencyKey,
        ErrorCode::BacklogFull,
        ErrorCode::NotDurable,
        ErrorCode::NoWorkers,
        ErrorCode::InvalidId,
        ErrorCode::BodyTimeout,
        ErrorCode::UriTooLong,
        ErrorCode::HeadersTooLarge,
        ErrorCode::TooManyConnections,
        ErrorCode::TooManyWaiters,
        ErrorCode::StorageFull,
        ErrorCode::ShardUnavailable,
        ErrorCode::RateLimited,
        ErrorCode::NoManifests,
        ErrorCode::UnknownTable,
    ];

    /// The stable string clients see in `{"error": {"code": ...}}`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidBincode => "invalid_bincode",
            ErrorCode::InvalidBase64 => "invalid_base64",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::NoKeys => "no_keys",
            ErrorCode::TooManyKeys => "too_many_keys",
            ErrorCode::KeyTooShort => "key_too_short",
            ErrorCode::KeyVersion => "key_version",
            ErrorCode::KeyParty => "key_party",
            ErrorCode::KeyDomainBits => "key_domain_bits",
            ErrorCode::KeyLength => "key_length",
            ErrorCode::KeyControlByte => "key_control_byte",
            ErrorCode::KeyDomainMismatch => "key_domain_mismatch",
            ErrorCode::EpochUnavailable => "epoch_unavailable",
            ErrorCode::InvalidParameter => "invalid_parameter",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::RedisUnavailable => "redis_unavailable",
            ErrorCode::NoDatabase => "no_database",
            ErrorCode::ScanFailed => "scan_failed",
            ErrorCode::InvalidJob => "invalid_job",
            ErrorCode::Internal => "internal",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::AdminDisabled => "admin_disabled",
            ErrorCode::EpochNotNext => "epoch_not_next",
            ErrorCode::InvalidUpdate => "invalid_update",
            ErrorCode::UnsignedUpdate => "unsigned_update",
            ErrorCode::DeliveryLimit => "delivery_limit",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::InvalidIdempotencyKey => "invalid_idempotency_key",
            ErrorCode::BacklogFull => "backlog_full",
            ErrorCode::NoWorkers => "no_workers",
            ErrorCode::NotDurable => "not_durable",
            ErrorCode::InvalidId => "invalid_id",
            ErrorCode::BodyTimeout => "body_timeout",
            ErrorCode::UriTooLong => "uri_too_long",
            ErrorCode::HeadersTooLarge => "headers_too_large",
            ErrorCode::TooManyConnections => "too_many_connections",
            ErrorCode::TooManyWaiters => "too_many_waiters",
            ErrorCode::StorageFull => "storage_full",
            ErrorCode::ShardUnavailable => "shard_unavailable",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::NoManifests => "no_manifests",
            ErrorCode::UnknownTable => "unknown_table",
        }
    }

    /// The HTTP status an error with this code is answered with. Job failures (`scan_failed`,
    /// `invalid_job`, and key codes found by a worker) travel inside a 200 `failed` result
    /// instead; the status here is what the gateway uses when it finds the error itself.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidJson
            | ErrorCode::InvalidBincode
            | ErrorCode::InvalidBase64
            | ErrorCode::NoKeys
            | ErrorCode::TooManyKeys
            | ErrorCode::KeyTooShort
            | ErrorCode::KeyVersion
            | ErrorCode::KeyParty
            | ErrorCode::KeyDomainBits
            | ErrorCode::KeyLength
            | ErrorCode::KeyControlByte
            | ErrorCode::KeyDomainMismatch
            | ErrorCode::InvalidParameter
            | ErrorCode::InvalidUpdate
            | ErrorCode::InvalidIdempotencyKey
            | ErrorCode::InvalidId
            | ErrorCode::InvalidJob => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::AdminDisabled => 403,
            ErrorCode::NotFound | ErrorCode::NoManifests | ErrorCode::UnknownTable => 404,
            ErrorCode::EpochNotNext => 409,
            // Well-formed, but not what this database takes: its publisher did not sign it.
            ErrorCode::UnsignedUpdate => 422,
            // Outside the window of epochs the party answers exactly.
            ErrorCode::EpochUnavailable => 410,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::BodyTimeout => 408,
            ErrorCode::BodyTooLarge => 413,
            ErrorCode::UriTooLong => 414,
            ErrorCode::HeadersTooLarge => 431,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::IdempotencyKeyReused => 422,
            ErrorCode::BacklogFull | ErrorCode::StorageFull | ErrorCode::RateLimited => 429,
            ErrorCode::ScanFailed | ErrorCode::DeliveryLimit | ErrorCode::Internal => 500,
            ErrorCode::RedisUnavailable
            | ErrorCode::NoDatabase
            | ErrorCode::NotDurable
            | ErrorCode::NoWorkers
            | ErrorCode::TooManyConnections
            | ErrorCode::TooManyWaiters
            | ErrorCode::ShardUnavailable => 503,
        }
    }

    /// Parses a code string back (for results read from Redis); `None` for unknown codes.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl From<&KeyError> for ErrorCode {
    fn from(e: &KeyError) -> ErrorCode {
        match e {
            KeyError::TooShort { .. } => ErrorCode::KeyTooShort,
            KeyError::Version(_) => ErrorCode::KeyVersion,
            KeyError::Party(_) => ErrorCode::KeyParty,
            KeyError::DomainBits(_) => ErrorCode::KeyDomainBits,
            KeyError::Length { .. } => ErrorCode::KeyLength,
            KeyError::ControlByte { .. } => ErrorCode::KeyControlByte,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate code {code}");
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert!((400..600).contains(&code.http_status()));
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }

    #[test]
    fn key_errors_keep_their_codes() {
        let errors = [
            KeyError::TooShort { len: 2 },
            KeyError::Version(2),
            KeyError::Party(2),
            KeyError::DomainBits(0),
            KeyError::Length {
                n: 8,
                expected: 52,
                actual: 51,
            },
            KeyError::ControlByte { level: 0, value: 4 },
        ];
        for e in &errors {
            assert_eq!(ErrorCode::from(e).as_str(), e.code());
        }
    }
}
