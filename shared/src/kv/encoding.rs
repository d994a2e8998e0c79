//! How a table's keys and values are written as text (KV §3.0), and the codes that record it in
//! the layout block (KV §2, header bytes 74 and 75).
//!
//! The table records its encodings so that every reader (the CLI, both clients, the update
//! tools) turns a user's key into the same bytes the builder hashed, and prints a value the way
//! it was given, without being told again: a key typed as text must not silently become the
//! bytes its hex reading would give. A table built before encodings were recorded has zero in
//! both bytes and reads as hex, as it always did.

use base64::Engine as _;

/// An encoding of keys or values as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// The text's own UTF-8 bytes, exactly as written (nothing trimmed or normalised).
    Utf8,
    /// Two hex digits a byte, either case.
    Hex,
    /// RFC 4648 §4 standard alphabet, `=` padding optional.
    Base64,
    /// Values only: any JSON value, stored as its compact JSON text (what `serde_json` and
    /// `JSON.stringify` write), printed back as JSON.
    Json,
}

/// Base64 as KV §3.0 takes it: the standard alphabet, with or without `=` padding.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl Encoding {
    /// Every encoding, in the order of their codes.
    pub const ALL: [Encoding; 4] = [
        Encoding::Utf8,
        Encoding::Hex,
        Encoding::Base64,
        Encoding::Json,
    ];

    /// The layout block's byte (KV §2); 0 means "not recorded".
    pub fn code(self) -> u8 {
        match self {
            Encoding::Utf8 => 1,
            Encoding::Hex => 2,
            Encoding::Base64 => 3,
            Encoding::Json => 4,
        }
    }

    /// The encoding of a block byte: `Ok(None)` for 0 (not recorded), `Err` for an unknown
    /// code.
    pub fn from_code(code: u8) -> Result<Option<Encoding>, u8> {
        match code {
            0 => Ok(None),
            _ => Encoding::ALL
                .into_iter()
                .find(|e| e.code() == code)
                .map(Some)
                .ok_or(code),
        }
    }

    /// The name `/v1/info`, the tools' flags and `pirq kv stats` use.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
            Encoding::Json => "json",
        }
    }

    /// The encoding of a name; `text` is another name for `utf8`.
    pub fn from_name(name: &str) -> Option<Encoding> {
        match name {
            "text" => Some(Encoding::Utf8),
            _ => Encoding::ALL.into_iter().find(|e| e.name() == name),
        }
    }

    /// Whether keys may be written this way (JSON is for values only).
    pub fn for_keys(self) -> bool {
        self != Encoding::Json
    }

    /// The bytes `text` stands for. Hex and base64 ignore surrounding whitespace; UTF-8 text is
    /// taken as is; JSON text must parse and is stored compact.
    pub fn decode(self, text: &str) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Hex => hex::decode(text.trim()).map_err(|e| format!("not hex: {e}")),
            Encoding::Base64 => BASE64
                .decode(text.trim())
                .map_err(|e| format!("not base64: {e}")),
            Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
            Encoding::Json => serde_json::from_str::<serde_json::Value>(text)
                .map(|v| v.to_string().into_bytes())
                .map_err(|e| format!("not JSON: {e}")),
        }
    }

    /// `bytes` written in this encoding; `None` when they are not UTF-8 (text) or not JSON.
    pub fn encode(self, bytes: &[u8]) -> Option<String> {
        match self {
            Encoding::Hex => Some(hex::encode(bytes)),
            Encoding::Base64 => Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            Encoding::Utf8 => String::from_utf8(bytes.to_vec()).ok(),
            Encoding::Json => serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .map(|v| v.to_string()),
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Encoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Encoding, String> {
        Encoding::from_name(s)
            .ok_or_else(|| format!("{s:?} is not an encoding (utf8 or text, hex, base64, json)"))
    }
}

/// What a table records about its keys and values; `None` = not recorded (a table built before
/// encodings were recorded), which reads as hex.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Encodings {
    pub key: Option<Encoding>,
    pub value: Option<Encoding>,
}

impl Encodings {
    /// Recorded encodings.
    pub fn recorded(key: Encoding, value: Encoding) -> Encodings {
        Encodings {
            key: Some(key),
            value: Some(value),
        }
    }

    /// How keys are read: as recorded, else hex.
    pub fn key_or_hex(&self) -> Encoding {
        self.key.unwrap_or(Encoding::Hex)
    }

    /// How values are written back: as recorded, else hex.
    pub fn value_or_hex(&self) -> Encoding {
        self.value.unwrap_or(Encoding::Hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for e in Encoding::ALL {
            assert_eq!(Encoding::from_code(e.code()), Ok(Some(e)));
            assert_eq!(Encoding::from_name(e.name()), Some(e));
            assert_eq!(e.name().parse::<Encoding>(), Ok(e));
        }
        assert_eq!(Encoding::from_code(0), Ok(None));
        assert_eq!(Encoding::from_code(5), Err(5));
        assert_eq!(Encoding::from_name("text"), Some(Encoding::Utf8));
        assert!("utf-16".parse::<Encoding>().unwrap_err().contains("utf8"));
        assert!(!Encoding::Json.for_keys());
    }

    #[test]
    fn decode_and_encode() {
        assert_eq!(Encoding::Hex.decode(" 0A0b ").unwrap(), vec![10, 11]);
        assert!(Encoding::Hex
            .decode("xyz")
            .unwrap_err()
            .starts_with("not hex"));
        assert_eq!(Encoding::Base64.decode("AQ").unwrap(), vec![1]);
        assert_eq!(Encoding::Base64.encode(&[255, 255]).unwrap(), "//8=");
        assert_eq!(
            Encoding::Utf8.decode(" Café ").unwrap(),
            " Café ".as_bytes()
        );
        assert_eq!(Encoding::Utf8.encode(&[0xff]), None);
        // JSON is stored compact, whatever its spacing as given.
        assert_eq!(
            Encoding::Json.decode("{ \"a\": [1, 2] }").unwrap(),
            br#"{"a":[1,2]}"#
        );
        assert_eq!(Encoding::Json.decode("\"x\"").unwrap(), br#""x""#);
        assert!(Encoding::Json
            .decode("{")
            .unwrap_err()
            .starts_with("not JSON"));
        assert_eq!(Encoding::Json.encode(b"[1]").unwrap(), "[1]");
        assert_eq!(Encoding::Json.encode(b"not json"), None);
    }
}
