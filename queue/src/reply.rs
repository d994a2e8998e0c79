//! Raw reply parsing: the shapes of stream replies that `redis-rs` has no type for (or whose
//! RESP2 and RESP3 forms differ), turned into plain Rust values. Anything of another shape is
//! skipped rather than trusted.

use redis::Value;

/// The field/value pairs of one stream entry.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// One stream entry: its id and fields.
pub type Entry = (String, Fields);

/// `(entry id, delivery count, idle ms)` from an extended `XPENDING` reply.
pub fn pending(reply: Value) -> Vec<(String, u64, u64)> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(f) = item else { return None };
            let mut it = f.into_iter();
            let id = text(it.next()?)?;
            let _consumer = it.next()?;
            let idle = number(it.next()?)?;
            let count = number(it.next()?)?;
            Some((id, count, idle))
        })
        .collect()
}

/// Flattens an `XREADGROUP` reply (RESP2 arrays or RESP3 maps) into `(entry id, fields)`.
pub fn read_reply(reply: Value) -> Vec<Entry> {
    let streams: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items.into_iter().filter_map(pair).collect(),
        _ => Vec::new(),
    };
    streams
        .into_iter()
        .flat_map(|(_name, entries)| entries_of(entries))
        .collect()
}

/// `(next cursor, entries)` of an `XAUTOCLAIM` reply; `None` when it has another shape.
pub fn autoclaim(reply: Value) -> Option<(Option<String>, Vec<Entry>)> {
    let Value::Array(mut parts) = reply else {
        return None;
    };
    if parts.len() < 2 {
        return None;
    }
    let entries = parts.swap_remove(1);
    let cursor = text(parts.swap_remove(0));
    Some((cursor, entries_of(entries)))
}

/// `(entry id, fields)` of a list of stream entries; entries without fields (deleted ones, as
/// `XAUTOCLAIM` on Redis 6.2 returns them) have none.
pub fn entries_of(entries: Value) -> Vec<Entry> {
    let Value::Array(entries) = entries else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries {
        let Some((id, fields)) = pair(entry) else {
            continue;
        };
        let Some(id) = text(id) else {
            continue;
        };
        let flat = match fields {
            Value::Array(items) => items,
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => Vec::new(),
        };
        let mut it = flat.into_iter();
        let mut kv = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            if let (Some(k), Some(v)) = (bytes(k), bytes(v)) {
                kv.push((k, v));
            }
        }
        out.push((id, kv));
    }
    out
}

/// The value of `name` among an entry's fields.
pub fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(k, _)| k.as_slice() == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

/// An integer, or a string holding one.
pub fn number(v: Value) -> Option<u64> {
    match v {
        Value::Int(n) => Some(n.max(0) as u64),
        other => text(other).and_then(|s| s.parse().ok()),
    }
}

fn pair(v: Value) -> Option<(Value, Value)> {
    match v {
        Value::Array(items) if items.len() == 2 => {
            let mut it = items.into_iter();
            Some((it.next()?, it.next()?))
        }
        _ => None,
    }
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

fn text(v: Value) -> Option<String> {
    bytes(v).and_then(|b| String::from_utf8(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_and_resp3_stream_replies_read_alike() {
        let entry = Value::Array(vec![
            bulk("1-0"),
            Value::Array(vec![bulk("id"), bulk("abc"), bulk("job"), bulk("x")]),
        ]);
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("{p}:jobs"),
            Value::Array(vec![entry.clone()]),
        ])]);
        let resp3 = Value::Map(vec![(bulk("{p}:jobs"), Value::Array(vec![entry]))]);
        for reply in [resp2, resp3] {
            let entries = read_reply(reply);
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0].0, "1-0");
            assert_eq!(field(&entries[0].1, "id"), Some(&b"abc"[..]));
        }
    }

    #[test]
    fn odd_shapes_are_skipped() {
        assert!(read_reply(Value::Nil).is_empty());
        assert!(pending(Value::Int(3)).is_empty());
        assert!(autoclaim(Value::Array(vec![bulk("0-0")])).is_none());
        let deleted = Value::Array(vec![Value::Array(vec![bulk("2-0"), Value::Nil])]);
        assert_eq!(entries_of(deleted), vec![("2-0".to_string(), Vec::new())]);
    }
}
