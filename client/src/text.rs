//! What a client takes from a party's text before using or showing it (SPEC §4.1): request ids
//! are checked before they become part of a URL, and error text is made safe for a terminal.

use pirq_shared::RequestId;

/// The most characters of a party's text a client shows (SPEC §4.1): enough for any real
/// error message, too few to flood a terminal or a log.
pub const MAX_PARTY_TEXT_CHARS: usize = 300;

/// Whether `id` is a request id as the spec defines it: 32 lowercase hex digits (128 random
/// bits; [`RequestId`], the gateways' own type). Anything else is refused before it is put into
/// a URL: a party returning `../../v1/info?x=` must not steer the client's next request.
pub fn is_request_id(id: &str) -> bool {
    RequestId::parse(id).is_ok()
}

/// Whether `id` is a party id as gateways give it in `/v1/info` (`party`): 32 lowercase hex
/// digits, drawn once per party. The same-party check compares only ids of this form: anything
/// else (an empty string, a proxy's placeholder) could not tell two parties apart.
pub fn is_party_id(id: &str) -> bool {
    is_request_id(id)
}

/// A party's text as a client shows it: every control character (Unicode category Cc: C0,
/// DEL and C1, which includes the single-character CSI U+009B) removed, then cut to
/// [`MAX_PARTY_TEXT_CHARS`] characters with `…` appended when cut. Escape sequences therefore
/// reach no terminal, and a 5,000-character message becomes one readable line.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_PARTY_TEXT_CHARS * 4));
    for (kept, c) in text.chars().filter(|c| !c.is_control()).enumerate() {
        if kept == MAX_PARTY_TEXT_CHARS {
            out.push('…');
            break;
        }
        out.push(c);
    }
    out
}

/// [`sanitize`] for bytes that may not be UTF-8 (invalid sequences become U+FFFD).
pub fn sanitize_bytes(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(MAX_PARTY_TEXT_CHARS * 4)];
    sanitize(&String::from_utf8_lossy(head))
}

/// A party's error body with its text made safe ([`sanitize`]).
pub(crate) fn sanitize_error(mut e: pirq_shared::wire::ErrorBody) -> pirq_shared::wire::ErrorBody {
    e.code = sanitize(&e.code);
    e.message = sanitize(&e.message);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_32_lowercase_hex_digits() {
        assert!(is_request_id("0123456789abcdef0123456789abcdef"));
        for bad in [
            "",
            "../../v1/info?x=",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789abcdef0123456789abcde/",
            "0123456789abcdef0123456789abcdé",
        ] {
            assert!(!is_request_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn control_characters_are_removed_and_long_text_cut() {
        let hostile = "\u{1b}[31mred\u{7}\r\n\u{9b}2Jcleared\u{7f}\u{85}!";
        assert_eq!(sanitize(hostile), "[31mred2Jcleared!");
        let long = "é".repeat(5000);
        let shown = sanitize(&long);
        assert_eq!(shown.chars().count(), MAX_PARTY_TEXT_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(sanitize("short"), "short");
        assert_eq!(sanitize_bytes(b"\xff\x1bok"), "\u{fffd}ok");
    }
}
