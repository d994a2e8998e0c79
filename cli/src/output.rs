//! Machine-readable output of `pirq query --json` and `pirq get --json`: one JSON object a
//! line, bytes as hex or base64.

use base64::Engine as _;
use serde_json::{Map, Value};

/// How bytes are written into JSON (and how `pirq get` reads keys).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BytesAs {
    /// Lowercase hex digits.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

impl BytesAs {
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            BytesAs::Hex => hex::encode(bytes),
            BytesAs::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// One output object, fields in the order they are added.
pub struct JsonLine(Map<String, Value>);

impl JsonLine {
    pub fn new() -> JsonLine {
        JsonLine(Map::new())
    }

    pub fn num(&mut self, name: &str, n: u64) -> &mut Self {
        self.0.insert(name.into(), n.into());
        self
    }

    pub fn bool(&mut self, name: &str, b: bool) -> &mut Self {
        self.0.insert(name.into(), b.into());
        self
    }

    pub fn bytes(&mut self, name: &str, bytes: &[u8], how: BytesAs) -> &mut Self {
        self.0.insert(name.into(), how.encode(bytes).into());
        self
    }

    /// `bytes`, or `null` when absent.
    pub fn maybe_bytes(&mut self, name: &str, bytes: Option<&[u8]>, how: BytesAs) -> &mut Self {
        let v = bytes.map_or(Value::Null, |b| how.encode(b).into());
        self.0.insert(name.into(), v);
        self
    }

    /// The database digest the answers were computed from (64 hex digits).
    pub fn digest(&mut self, digest: Option<pirq_client::Digest>) -> &mut Self {
        let v = digest.map_or(Value::Null, |d| d.to_hex().into());
        self.0.insert("digest".into(), v);
        self
    }

    pub fn finish(&mut self) -> String {
        Value::Object(std::mem::take(&mut self.0)).to_string()
    }
}
