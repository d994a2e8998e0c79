//! JSON-RPC 2.0 as `eth serve` reads it: requests checked one by one (a batch's bad entry
//! costs only its own answer), the methods answered privately and their parameters, and the
//! error objects. No I/O here: `serve` does the reading and the forwarding.

use serde_json::{json, Value};

use super::tables::{self, parse_word, shorten, ADDRESS_LEN};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// Geth's code for a state it does not have ("header not found", "missing trie node").
pub const NOT_SERVED: i64 = -32000;

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// One call of a request or batch.
#[derive(Clone, Debug)]
pub struct Call {
    /// `None`: a notification (no `id`), which gets no answer.
    pub id: Option<Value>,
    pub method: String,
    pub params: Vec<Value>,
    /// The call as it came (what is forwarded upstream).
    pub raw: Value,
}

/// Checks one call's envelope; an error comes with the id to answer it under (null when the
/// id itself is unusable).
pub fn parse_call(raw: Value) -> Result<Call, (Value, RpcError)> {
    let invalid = |id: Value, why: &str| Err((id, RpcError::new(INVALID_REQUEST, why)));
    let Value::Object(obj) = &raw else {
        return invalid(Value::Null, "a call is a JSON object");
    };
    let id = match obj.get("id") {
        None => None,
        Some(v @ (Value::Null | Value::String(_))) => Some(v.clone()),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Value::Number(n.clone())),
        Some(_) => return invalid(Value::Null, "id must be a string, an integer or null"),
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid(answer_id, "jsonrpc must be \"2.0\"");
    }
    let Some(Value::String(method)) = obj.get("method") else {
        return invalid(answer_id, "method must be a string");
    };
    let params = match obj.get("params") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err((
                answer_id,
                RpcError::params("params must be an array (by position)"),
            ))
        }
    };
    Ok(Call {
        id,
        method: method.clone(),
        params,
        raw,
    })
}

/// A read of the state, answered privately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Balance([u8; ADDRESS_LEN]),
    Nonce([u8; ADDRESS_LEN]),
    Code([u8; ADDRESS_LEN]),
    Storage([u8; ADDRESS_LEN], [u8; 32]),
    BlockNumber,
}

impl Read {
    pub fn address(&self) -> Option<&[u8; ADDRESS_LEN]> {
        match self {
            Read::Balance(a) | Read::Nonce(a) | Read::Code(a) | Read::Storage(a, _) => Some(a),
            Read::BlockNumber => None,
        }
    }
}

/// The block a read asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTag {
    Latest,
    Number(u64),
}

/// What to do with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Read(Read, BlockTag),
    ChainId,
    /// Not answered here: forwarded upstream, or refused.
    Other,
}

/// The method and parameters of a call.
pub fn classify(call: &Call) -> Result<Method, RpcError> {
    let p = &call.params;
    let method = match call.method.as_str() {
        "eth_getBalance" => Method::Read(Read::Balance(address(p, 0)?), block(p, 1, 2)?),
        "eth_getTransactionCount" => Method::Read(Read::Nonce(address(p, 0)?), block(p, 1, 2)?),
        "eth_getCode" => Method::Read(Read::Code(address(p, 0)?), block(p, 1, 2)?),
        "eth_getStorageAt" => {
            Method::Read(Read::Storage(address(p, 0)?, slot(p, 1)?), block(p, 2, 3)?)
        }
        "eth_blockNumber" => {
            no_more(p, 0)?;
            Method::Read(Read::BlockNumber, BlockTag::Latest)
        }
        "eth_chainId" => {
            no_more(p, 0)?;
            Method::ChainId
        }
        _ => Method::Other,
    };
    Ok(method)
}

fn no_more(p: &[Value], at_most: usize) -> Result<(), RpcError> {
    if p.len() > at_most {
        return Err(RpcError::params(format!(
            "{} parameters, at most {at_most} expected",
            p.len()
        )));
    }
    Ok(())
}

fn address(p: &[Value], i: usize) -> Result<[u8; ADDRESS_LEN], RpcError> {
    let bad = || {
        RpcError::params(format!(
            "parameter {i} must be an address: 0x and 40 hex digits"
        ))
    };
    let Some(Value::String(text)) = p.get(i) else {
        return Err(bad());
    };
    let digits = text.strip_prefix("0x").ok_or_else(bad)?;
    if digits.len() != 2 * ADDRESS_LEN {
        return Err(bad());
    }
    let bytes = hex::decode(digits).map_err(|_| bad())?;
    Ok(bytes.try_into().expect("20 bytes"))
}

fn slot(p: &[Value], i: usize) -> Result<[u8; 32], RpcError> {
    let bad = || {
        RpcError::params(format!(
            "parameter {i} must be a storage slot: 0x and up to 64 hex digits"
        ))
    };
    match p.get(i) {
        Some(Value::String(text)) if text.starts_with("0x") && text.len() > 2 => {
            parse_word(text).map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

/// The block parameter at `i` (absent: latest); nothing may follow it.
fn block(p: &[Value], i: usize, len: usize) -> Result<BlockTag, RpcError> {
    no_more(p, len)?;
    match p.get(i) {
        None | Some(Value::Null) => Ok(BlockTag::Latest),
        Some(Value::String(tag)) => block_text(tag),
        // EIP-1898: {"blockNumber": "0x…"} or {"blockHash": "0x…"}.
        Some(Value::Object(o)) => match (o.get("blockNumber"), o.get("blockHash")) {
            (Some(Value::String(n)), None) => block_text(n),
            (None, Some(_)) => Err(RpcError::new(
                NOT_SERVED,
                "blocks are named by number here (\"latest\" or the served block's number), \
                 not by hash",
            )),
            _ => Err(RpcError::params(
                "a block object has blockNumber or blockHash",
            )),
        },
        Some(_) => Err(RpcError::params(
            "the block is \"latest\" or a block number (0x…)",
        )),
    }
}

fn block_text(tag: &str) -> Result<BlockTag, RpcError> {
    match tag {
        "latest" => Ok(BlockTag::Latest),
        "earliest" | "pending" | "safe" | "finalized" => Err(RpcError::new(
            NOT_SERVED,
            format!(
                "block {tag:?} is not served: this endpoint answers the state of one block, \
                 \"latest\" (or that block's number)"
            ),
        )),
        _ => {
            let digits = tag.strip_prefix("0x").filter(|d| {
                !d.is_empty() && d.len() <= 16 && d.bytes().all(|b| b.is_ascii_hexdigit())
            });
            match digits.map(|d| u64::from_str_radix(d, 16)) {
                Some(Ok(n)) => Ok(BlockTag::Number(n)),
                _ => Err(RpcError::params(format!(
                    "block {:?} is neither \"latest\" nor a block number (0x…)",
                    shorten(tag)
                ))),
            }
        }
    }
}

/// A response object for `id`.
pub fn response(id: Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
        }
    }
}

/// The error of a read at `wanted` when the tables hold `served`.
pub fn check_block(wanted: BlockTag, served: u64) -> Result<(), RpcError> {
    match wanted {
        BlockTag::Number(n) if n != served => Err(RpcError::new(
            NOT_SERVED,
            format!(
                "block {} is not served: this endpoint answers block {} (\"latest\") only",
                tables::quantity(&n.to_be_bytes()),
                tables::quantity(&served.to_be_bytes())
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, params: Value) -> Result<Method, RpcError> {
        let c = parse_call(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .map_err(|(_, e)| e)?;
        classify(&c)
    }

    const A: &str = "0x00000000000000000000000000000000000000Aa";

    #[test]
    fn reads_parse_with_their_block() {
        let mut a = [0u8; 20];
        a[19] = 0xaa;
        assert_eq!(
            call("eth_getBalance", json!([A, "latest"])),
            Ok(Method::Read(Read::Balance(a), BlockTag::Latest))
        );
        assert_eq!(
            call("eth_getTransactionCount", json!([A, "0x10"])),
            Ok(Method::Read(Read::Nonce(a), BlockTag::Number(16)))
        );
        assert_eq!(
            call("eth_getCode", json!([A, {"blockNumber": "0x1"}])),
            Ok(Method::Read(Read::Code(a), BlockTag::Number(1)))
        );
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(
            call("eth_getStorageAt", json!([A, "0x1", "latest"])),
            Ok(Method::Read(Read::Storage(a, one), BlockTag::Latest))
        );
        assert_eq!(
            call("eth_blockNumber", json!([])),
            Ok(Method::Read(Read::BlockNumber, BlockTag::Latest))
        );
        assert_eq!(call("eth_chainId", json!([])), Ok(Method::ChainId));
        assert_eq!(
            call("eth_sendRawTransaction", json!(["0x00"])),
            Ok(Method::Other)
        );
    }

    #[test]
    fn bad_params_and_other_blocks_are_errors() {
        for (method, params, code) in [
            ("eth_getBalance", json!(["0x12", "latest"]), INVALID_PARAMS),
            (
                "eth_getBalance",
                json!([A.trim_start_matches("0x"), "latest"]),
                INVALID_PARAMS,
            ),
            ("eth_getBalance", json!([A, "pending"]), NOT_SERVED),
            ("eth_getBalance", json!([A, "earliest"]), NOT_SERVED),
            (
                "eth_getBalance",
                json!([A, {"blockHash": "0x00"}]),
                NOT_SERVED,
            ),
            ("eth_getBalance", json!([A, "0x"]), INVALID_PARAMS),
            ("eth_getBalance", json!([A, "latest", 3]), INVALID_PARAMS),
            (
                "eth_getStorageAt",
                json!([A, "1", "latest"]),
                INVALID_PARAMS,
            ),
            (
                "eth_getStorageAt",
                json!([A, format!("0x{}", "11".repeat(33)), "latest"]),
                INVALID_PARAMS,
            ),
            ("eth_blockNumber", json!([1]), INVALID_PARAMS),
        ] {
            let e = call(method, params.clone()).unwrap_err();
            assert_eq!(e.code, code, "{method} {params}: {e:?}");
        }
        assert_eq!(
            check_block(BlockTag::Number(5), 6).unwrap_err().code,
            NOT_SERVED
        );
        assert!(check_block(BlockTag::Number(6), 6).is_ok());
    }

    #[test]
    fn envelopes_are_checked() {
        let bad = |v: Value| parse_call(v).unwrap_err();
        assert_eq!(bad(json!([1])).1.code, INVALID_REQUEST);
        assert_eq!(
            bad(json!({"jsonrpc": "1.0", "id": 3, "method": "x"})).0,
            json!(3)
        );
        assert_eq!(
            bad(json!({"jsonrpc": "2.0", "id": 3})).1.code,
            INVALID_REQUEST
        );
        assert_eq!(
            bad(json!({"jsonrpc": "2.0", "id": [1], "method": "x"})).0,
            Value::Null
        );
        assert_eq!(
            bad(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {}}))
                .1
                .code,
            INVALID_PARAMS
        );
        let note = parse_call(json!({"jsonrpc": "2.0", "method": "eth_chainId"})).unwrap();
        assert!(note.id.is_none());
    }
}
