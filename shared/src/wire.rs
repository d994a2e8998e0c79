//! HTTP request and result bodies (SPEC §4), in JSON and in the bincode binary twin.
//!
//! One Rust struct per body serves both forms:
//! - JSON goes through serde; binary fields are standard base64 with padding, and absent
//!   optional fields are left out.
//! - bincode goes through bincode's own `Encode`/`Decode` derive with the standard
//!   configuration: fields in declaration order, `Vec` as a varint length then the items,
//!   `Option` as a 0/1 byte then the value, enums as a varint variant index. serde attributes
//!   do not touch this form, so the binary twin always carries every field.
//!
//! `docs/http-api.md` reproduces these definitions for implementers in other languages; keep the
//! two in step. Requests are decoded through [`QueryRequest::from_json`] and
//! [`QueryRequest::from_bincode`], which name the offending key when a key is bad.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::ErrorCode;

/// Media type of JSON bodies.
pub const JSON: &str = "application/json";
/// Media type of the bincode binary twin.
pub const BINCODE: &str = "application/x-bincode";

/// Upper bound on the bytes a bincode decode may claim. Bodies are already size-limited before
/// decoding; this only stops a forged length prefix from asking for a huge allocation.
const DECODE_LIMIT: usize = 1 << 30;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// `POST /v1/queries`: one DPF key per wanted page, optionally pinned to an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct QueryRequest {
    /// DPF v1 key bytes (SPEC §1.3), all for the same database.
    pub keys: Vec<Vec<u8>>,
    /// Answer at exactly this epoch; `None` = the newest the party has.
    pub epoch: Option<u64>,
}

/// The JSON shape of [`QueryRequest`]: keys stay strings until each is decoded on its own, so a
/// bad one can be named by index.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct QueryRequestJson {
    keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch: Option<u64>,
}

/// Why a request body was rejected: the code, a message, and the key at fault if any.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
    pub key_index: Option<usize>,
}

impl WireError {
    fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
            key_index: None,
        }
    }
}

impl QueryRequest {
    /// Decodes a JSON body; keys must be standard base64 with padding.
    pub fn from_json(body: &[u8]) -> Result<QueryRequest, WireError> {
        let raw: QueryRequestJson = serde_json::from_slice(body)
            .map_err(|e| WireError::new(ErrorCode::InvalidJson, e.to_string()))?;
        let keys = raw
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                B64.decode(k).map_err(|e| WireError {
                    code: ErrorCode::InvalidBase64,
                    message: format!("key {i} is not standard base64 with padding: {e}"),
                    key_index: Some(i),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(QueryRequest {
            keys,
            epoch: raw.epoch,
        })
    }

    /// Decodes a bincode body; trailing bytes are an error.
    pub fn from_bincode(body: &[u8]) -> Result<QueryRequest, WireError> {
        decode_exact(body).map_err(|m| WireError::new(ErrorCode::InvalidBincode, m))
    }

    pub fn to_json(&self) -> Vec<u8> {
        let raw = QueryRequestJson {
            keys: self.keys.iter().map(|k| B64.encode(k)).collect(),
            epoch: self.epoch,
        };
        serde_json::to_vec(&raw).expect("plain struct serializes")
    }

    pub fn to_bincode(&self) -> Vec<u8> {
        encode(self)
    }
}

/// Where a query is on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Encode, Decode)]
#[serde(rename_all = "lowercase")]
pub enum QueryStatus {
    Queued,
    Running,
    Done,
    Failed,
}

impl QueryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryStatus::Queued => "queued",
            QueryStatus::Running => "running",
            QueryStatus::Done => "done",
            QueryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<QueryStatus> {
        match s {
            "queued" => Some(QueryStatus::Queued),
            "running" => Some(QueryStatus::Running),
            "done" => Some(QueryStatus::Done),
            "failed" => Some(QueryStatus::Failed),
            _ => None,
        }
    }

    /// Done or failed: the status will not change again.
    pub fn is_final(self) -> bool {
        matches!(self, QueryStatus::Done | QueryStatus::Failed)
    }
}

/// The `error` object of every error answer and of a failed result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct ErrorBody {
    /// Stable code from [`ErrorCode`].
    pub code: String,
    pub message: String,
    /// The offending key, when one key is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_index: Option<u32>,
    /// The epochs that are served, when an epoch was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<EpochRange>,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: code.as_str().to_string(),
            message: message.into(),
            key_index: None,
            window: None,
        }
    }

    pub fn with_window(mut self, window: EpochRange) -> ErrorBody {
        self.window = Some(window);
        self
    }

    pub fn with_key_index(mut self, index: usize) -> ErrorBody {
        self.key_index = Some(index as u32);
        self
    }
}

/// `{"error": {...}}`: the body of every non-2xx answer (always JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// A query's state: the 202 answers (`queued`/`running`), and the final `done`/`failed` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct QueryResult {
    /// Request id, 32 lowercase hex digits.
    pub id: String,
    pub status: QueryStatus,
    /// Epoch the pages answer (done only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// `pages[i]` answers `keys[i]` (done only; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "b64_list")]
    pub pages: Vec<Vec<u8>>,
    /// Why the query failed (failed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Digest (SPEC §2.1) of the database at `epoch`, the contents the pages were computed
    /// from (done only). A client combines two parties' answers only when their digests are
    /// equal. Added after the first release: the last field, so an older body simply ends
    /// before it (see [`QueryResult::from_bincode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
}

/// [`QueryResult`] as servers encoded it before `digest` existed: decoded when a body ends
/// before that field.
#[derive(Decode)]
struct QueryResultWithoutDigest {
    id: String,
    status: QueryStatus,
    epoch: Option<u64>,
    pages: Vec<Vec<u8>>,
    error: Option<ErrorBody>,
}

impl QueryResult {
    /// A pending (`queued` or `running`) state.
    pub fn pending(id: impl Into<String>, status: QueryStatus) -> QueryResult {
        QueryResult {
            id: id.into(),
            status,
            epoch: None,
            pages: Vec::new(),
            error: None,
            digest: None,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain struct serializes")
    }

    pub fn to_bincode(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_json(body: &[u8]) -> Result<QueryResult, WireError> {
        serde_json::from_slice(body)
            .map_err(|e| WireError::new(ErrorCode::InvalidJson, e.to_string()))
    }

    /// Decodes a bincode body; trailing bytes are an error. A body from a server older than the
    /// `digest` field (it ends right after `error`) decodes with `digest: None`.
    pub fn from_bincode(body: &[u8]) -> Result<QueryResult, WireError> {
        decode_exact(body)
            .or_else(|first| {
                decode_exact::<QueryResultWithoutDigest>(body)
                    .map(|r| QueryResult {
                        id: r.id,
                        status: r.status,
                        epoch: r.epoch,
                        pages: r.pages,
                        error: r.error,
                        digest: None,
                    })
                    .map_err(|_| first)
            })
            .map_err(|m| WireError::new(ErrorCode::InvalidBincode, m))
    }
}

/// A window of epochs, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Encode, Decode)]
pub struct EpochRange {
    pub oldest: u64,
    pub newest: u64,
}

impl EpochRange {
    pub fn contains(&self, epoch: u64) -> bool {
        (self.oldest..=self.newest).contains(&epoch)
    }
}

/// `GET /v1/info`: what the party's workers registered, and the gateway's own limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub num_pages: u64,
    pub page_size: u32,
    pub domain_bits: u8,
    /// The epochs answered exactly.
    pub epoch: EpochRange,
    pub max_keys_per_query: u32,
    /// Workers with a live heartbeat.
    pub workers: u32,
    /// Digest (SPEC §2.1) of the database at `epoch.newest`, once a worker has applied that
    /// epoch (absent for the moment between a pushed epoch and its first worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    /// This party's identity: 32 hex digits drawn once per party (all its gateways share it).
    /// A client refuses two URLs with the same `party`: one party would see both keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub party: Option<String>,
    /// The key-value layout of a kv database (`docs/spec/kv.md` §5); absent for page databases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<crate::kv::KvInfo>,
    /// The signing block of a signed database (SPEC §2.4, `docs/spec/signed.md`): who signed
    /// the pages and the database's identity; absent for unsigned pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<crate::signing::SigningInfo>,
    /// Sharded parties: every shard, its pages and its live workers (absent when unsharded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardInfo>,
}

/// `GET /v1/tables`: every table the party serves (issue 38), the table `default` first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    pub tables: Vec<TableSummary>,
}

/// One table in `GET /v1/tables`: what `GET /v1/tables/{name}/info` says of it in full.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSummary {
    /// The table's name; `default` is the one the routes without a table name mean.
    pub name: String,
    /// `pages` or `kv` (a key-value table, its layout in its info).
    pub kind: String,
    pub num_pages: u64,
    pub page_size: u32,
    /// The epochs answered exactly.
    pub epoch: EpochRange,
    /// Digest (SPEC §2.1) of the table at `epoch.newest`, once a worker applied that epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    /// The table's signing block when it is signed (`docs/spec/signed.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<crate::signing::SigningInfo>,
    /// Workers serving it with a live heartbeat.
    pub workers: u32,
}

/// One shard of a sharded party in `GET /v1/info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// Shard `index` of the party's `count`.
    pub index: u32,
    pub count: u32,
    /// The pages it serves, `[first, end)`.
    pub pages: [u64; 2],
    /// Its workers with a live heartbeat.
    pub workers: Vec<ShardWorker>,
    /// Whether one of them answers the party's newest epoch (the party is ready only when every
    /// shard is).
    pub ready: bool,
}

/// A live worker of a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardWorker {
    pub id: String,
    /// The epochs it answers now.
    pub epoch: EpochRange,
}

/// A job as the gateway puts it on the stream (field `job` of the entry, bincode).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Job {
    /// Key bytes as received; the gateway has parsed them, the worker parses them again.
    pub keys: Vec<Vec<u8>>,
    pub epoch: Option<u64>,
    /// Milliseconds since the Unix epoch when the gateway accepted the query.
    pub accepted_ms: u64,
    /// Where the answer goes (docs/redis.md, "A query's way").
    pub reply: Reply,
}

/// How a job's answer reaches its client: what the gateway wrote at submit, and so what the
/// worker must write when it finishes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
pub struct Reply {
    /// `Some(t)`: a gateway holds the client's request open for the answer (`Prefer: wait`)
    /// until `t` (Unix ms) and wrote no `queued` record: the answer travels in the completion
    /// event, and the record the worker writes is kept only briefly unless the job finishes
    /// close to or after `t` (then the gateway has answered 202 and the client polls). `None`:
    /// the client polls or follows events; a `queued` record was written at submit.
    pub held_until_ms: Option<u64>,
    /// For a held request (`held_until_ms`): how long, in milliseconds, the final record is
    /// kept when the job finishes well before `held_until_ms` (the worker keeps it no longer
    /// than its own bound, `HELD_KEEP`). The gateway gives its read-result retention here
    /// (gateway/src/retention.rs): these records are only a net for a missed completion event,
    /// and at full speed a fixed few seconds of them filled a small Redis, so they are kept
    /// within the same byte budget as read results. `None`: the worker's bound. An unsharded
    /// worker that writes a held request's `done` record shortens its Idempotency-Key record
    /// to the same time (`PEXPIRE … LT` in the same pipeline), so the gateway that hands the
    /// answer over has nothing left to shorten.
    pub held_keep_ms: Option<u64>,
    /// The request's `Idempotency-Key`, carried into the final record so that whichever
    /// gateway hands the answer over can shorten the key's record with it.
    pub idempotency_key: Option<String>,
    /// For a held request with an `Idempotency-Key`: the request's fingerprint, given when the
    /// gateway asks the worker to keep the answer's net (the record kept briefly for a missed
    /// event) in the key's record, `"<fingerprint> <id>\n<record>"`, instead of a record of its
    /// own beside it (docs/redis.md, "A held request"): one key and one command a query less.
    /// An unsharded worker does so when it keeps the record briefly (finished well before
    /// `held_until_ms`); otherwise, or with `None`, it writes the query's record as for any
    /// other query. The gateway gives it only where the key's record cannot have expired
    /// before the answer (its `--idempotency-ttl` outlasts the wait) and no `queued` record
    /// was written (not under `--durability replica`).
    pub idempotency_fingerprint: Option<String>,
}

impl Job {
    pub fn to_bincode(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bincode(bytes: &[u8]) -> Result<Job, WireError> {
        decode_exact(bytes).map_err(|m| WireError::new(ErrorCode::InvalidJob, m))
    }
}

fn encode<T: Encode>(value: &T) -> Vec<u8> {
    bincode::encode_to_vec(value, bincode_config()).expect("encoding into a Vec cannot fail")
}

fn decode_exact<T: Decode<()>>(bytes: &[u8]) -> Result<T, String> {
    let (value, used) =
        bincode::decode_from_slice(bytes, bincode_config()).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err(format!(
            "{} trailing bytes after the value",
            bytes.len() - used
        ));
    }
    Ok(value)
}

/// serde helper: `Vec<Vec<u8>>` as a list of base64 strings.
mod b64_list {
    use super::B64;
    use base64::Engine as _;
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(items: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(items.iter().map(|b| B64.encode(b)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let strings = Vec::<String>::deserialize(d)?;
        strings
            .iter()
            .enumerate()
            .map(|(i, s)| {
                B64.decode(s)
                    .map_err(|e| D::Error::custom(format!("item {i}: {e}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> QueryRequest {
        QueryRequest {
            keys: vec![vec![1, 2, 3], vec![0; 40]],
            epoch: Some(7),
        }
    }

    #[test]
    fn request_round_trips_both_forms() {
        let r = request();
        assert_eq!(QueryRequest::from_json(&r.to_json()).unwrap(), r);
        assert_eq!(QueryRequest::from_bincode(&r.to_bincode()).unwrap(), r);
        let no_epoch = QueryRequest { epoch: None, ..r };
        assert_eq!(
            QueryRequest::from_json(&no_epoch.to_json()).unwrap(),
            no_epoch
        );
        assert_eq!(
            QueryRequest::from_json(br#"{"keys":["AQID"]}"#)
                .unwrap()
                .keys,
            vec![vec![1, 2, 3]]
        );
    }

    #[test]
    fn bincode_layout_is_the_documented_one() {
        // keys: len 1, key len 2, bytes; epoch: Some (1) then varint 7.
        let r = QueryRequest {
            keys: vec![vec![0xaa, 0xbb]],
            epoch: Some(7),
        };
        assert_eq!(r.to_bincode(), vec![1, 2, 0xaa, 0xbb, 1, 7]);
        let done = QueryResult {
            id: "ab".into(),
            status: QueryStatus::Done,
            epoch: Some(3),
            pages: vec![vec![9]],
            error: None,
            digest: None,
        };
        assert_eq!(
            done.to_bincode(),
            vec![2, b'a', b'b', 2, 1, 3, 1, 1, 9, 0, 0]
        );
        let stamped = QueryResult {
            digest: Some(Digest([0xcd; 32])),
            ..done.clone()
        };
        let mut bytes = vec![2, b'a', b'b', 2, 1, 3, 1, 1, 9, 0, 1];
        bytes.extend([0xcd; 32]);
        assert_eq!(stamped.to_bincode(), bytes);
        assert_eq!(QueryResult::from_bincode(&bytes).unwrap(), stamped);
        // A body from a server that predates `digest` ends after `error`.
        assert_eq!(
            QueryResult::from_bincode(&[2, b'a', b'b', 2, 1, 3, 1, 1, 9, 0]).unwrap(),
            done
        );
    }

    #[test]
    fn bad_base64_names_the_key() {
        let e = QueryRequest::from_json(br#"{"keys":["AQID","not base64!"]}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidBase64);
        assert_eq!(e.key_index, Some(1));
        // Unpadded base64 is not the standard form.
        let e = QueryRequest::from_json(br#"{"keys":["AQI"]}"#).unwrap_err();
        assert_eq!((e.code, e.key_index), (ErrorCode::InvalidBase64, Some(0)));
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for body in [
            &b""[..],
            b"{",
            b"[]",
            br#"{"keys":"x"}"#,
            br#"{"keys":[],"extra":1}"#,
        ] {
            assert_eq!(
                QueryRequest::from_json(body).unwrap_err().code,
                ErrorCode::InvalidJson
            );
        }
        let mut bytes = request().to_bincode();
        bytes.push(0);
        assert_eq!(
            QueryRequest::from_bincode(&bytes).unwrap_err().code,
            ErrorCode::InvalidBincode
        );
        // A forged length prefix must not allocate: 2^62 keys.
        let forged = [0xff, 0, 0, 0, 0, 0, 0, 0, 0x40];
        assert!(QueryRequest::from_bincode(&forged).is_err());
        assert!(QueryRequest::from_bincode(&[1, 0xfd, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn result_json_leaves_out_absent_fields() {
        let queued = QueryResult::pending("ab", QueryStatus::Queued);
        assert_eq!(
            String::from_utf8(queued.to_json()).unwrap(),
            r#"{"id":"ab","status":"queued"}"#
        );
        let done = QueryResult {
            id: "ab".into(),
            status: QueryStatus::Done,
            epoch: Some(0),
            pages: vec![vec![1, 2, 3]],
            error: None,
            digest: None,
        };
        let json = String::from_utf8(done.to_json()).unwrap();
        assert_eq!(
            json,
            r#"{"id":"ab","status":"done","epoch":0,"pages":["AQID"]}"#
        );
        assert_eq!(QueryResult::from_json(json.as_bytes()).unwrap(), done);
        assert_eq!(QueryResult::from_bincode(&done.to_bincode()).unwrap(), done);
        let failed = QueryResult {
            error: Some(ErrorBody::new(ErrorCode::KeyLength, "short").with_key_index(2)),
            ..QueryResult::pending("ab", QueryStatus::Failed)
        };
        let json = String::from_utf8(failed.to_json()).unwrap();
        assert_eq!(
            json,
            r#"{"id":"ab","status":"failed","error":{"code":"key_length","message":"short","key_index":2}}"#
        );
        assert_eq!(
            QueryResult::from_bincode(&failed.to_bincode()).unwrap(),
            failed
        );
    }

    #[test]
    fn job_round_trips() {
        let job = Job {
            reply: Reply {
                held_until_ms: Some(1_700_000_005_000),
                held_keep_ms: Some(1_500),
                idempotency_key: Some("a-key".into()),
                idempotency_fingerprint: Some("00112233445566778899aabbccddeeff".into()),
            },
            keys: vec![vec![1; 52]],
            epoch: None,
            accepted_ms: 1_700_000_000_000,
        };
        assert_eq!(Job::from_bincode(&job.to_bincode()).unwrap(), job);
        assert_eq!(
            Job::from_bincode(&[0xff]).unwrap_err().code,
            ErrorCode::InvalidJob
        );
    }
}
