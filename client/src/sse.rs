//! Server-Sent Events framing (WHATWG HTML §9.2.6), as much as a result stream needs: events
//! end at a blank line; `event` and `data` fields; comments (keep-alives) ignored.

/// `(end of the event's text, end including the blank line)` of the first complete event.
pub(crate) fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| (i, i + 2));
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The `event` name and the joined `data` lines of one SSE event.
pub(crate) fn parse_event(raw: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(raw);
    let mut event = String::from("message");
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value.to_string(),
            "data" => data.push(value),
            _ => {}
        }
    }
    (event, data.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse() {
        let buf = b"event: status\ndata: {\"a\":1}\n\n: keep-alive\n\nevent:result\r\ndata:x\r\ndata:y\r\n\r\n";
        let (end, next) = find_event_end(buf).unwrap();
        assert_eq!(
            parse_event(&buf[..end]),
            ("status".into(), "{\"a\":1}".into())
        );
        let rest = &buf[next..];
        let (_, next2) = find_event_end(rest).unwrap();
        let rest = &rest[next2..];
        let (end, _) = find_event_end(rest).unwrap();
        assert_eq!(parse_event(&rest[..end]), ("result".into(), "x\ny".into()));
        assert_eq!(find_event_end(b"data: no end yet\n"), None);
    }
}
