//! Party URLs: checked before anything is sent, and plain HTTP only to this machine.

use std::net::{Ipv4Addr, Ipv6Addr};

use reqwest::Url;

use crate::ClientError;

/// Checks a party's base URL before anything is sent: an `http://` or `https://` URL with a
/// host (`host:port` without a scheme would otherwise fail later as "relative URL without a
/// base", or parse as a URL of scheme `localhost`), and plain `http://` only to a loopback
/// host (127.0.0.0/8, ::1, the exact name `localhost`) unless `insecure_http`; never
/// credentials (`user:pass@`: reqwest would send them as Basic auth, and errors print the URL).
///
/// Whoever sees both of a client's connections (its Wi-Fi, its ISP, a proxy) reads both DPF
/// keys of plain HTTP and learns the index, so a remote `http://` party is refused here,
/// before any name is resolved or connection made.
pub fn check_party_url(url: &str, insecure_http: bool) -> Result<Url, ClientError> {
    let bad = |hint: String| ClientError::BadUrl {
        url: url.to_string(),
        hint,
    };
    if has_credentials(url) {
        // The URL itself holds the secret: it is not repeated in the error.
        return Err(ClientError::BadUrl {
            url: "(a URL with credentials, not repeated here)".into(),
            hint: "it carries a user name or password (user:pass@), which would be sent as \
                   Basic auth and shown in errors; give the party's token with --token-a/--token-b \
                   (token_a/token_b in the library) and the URL without it"
                .into(),
        });
    }
    let parsed = match Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => u,
        _ if !url.contains("://") => {
            // Plain HTTP is what works (and is allowed) for this machine; https elsewhere.
            let scheme = match Url::parse(&format!("http://{url}")) {
                Ok(u) if is_loopback(&u) => "http",
                _ => "https",
            };
            return Err(bad(format!("it has no scheme; write {scheme}://{url}")));
        }
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            return Err(bad(format!(
                "scheme {:?}; write https://HOST:PORT (or http:// for this machine)",
                u.scheme()
            )))
        }
        Ok(_) => return Err(bad("it names no host; write https://HOST:PORT".into())),
        Err(e) => return Err(bad(format!("{e}; write https://HOST:PORT"))),
    };
    if parsed.scheme() == "http" && !insecure_http && !is_loopback(&parsed) {
        return Err(ClientError::InsecureHttp {
            url: url.to_string(),
        });
    }
    Ok(parsed)
}

/// [`check_party_url`] with the loopback rule on: the check of the library's and the CLI's
/// defaults.
pub fn check_url(url: &str) -> Result<(), ClientError> {
    check_party_url(url, false).map(|_| ())
}

/// Whether the URL's authority holds a user name or password (`user@`, `user:pass@`), looked
/// up in the text as well as in the parsed URL so that a URL that fails to parse is caught too.
fn has_credentials(url: &str) -> bool {
    if let Ok(u) = Url::parse(url) {
        if !u.username().is_empty() || u.password().is_some() {
            return true;
        }
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

/// Whether the URL's host is this machine by its address or by the exact name `localhost`
/// (which resolvers map to loopback without asking the network). Any other spelling is refused:
/// `localhost.` (or `localhost%2e`, which the URL parser decodes to it) is a fully qualified
/// name that the system resolver sends to DNS, so it can resolve anywhere.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip == Ipv6Addr::LOCALHOST || mapped_loopback(ip),
        // The URL parser lowercases the host of http(s) URLs: `LOCALHOST` arrives as this.
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    }
}

/// `::ffff:127.x.y.z`, the IPv4 loopback written as IPv6.
fn mapped_loopback(ip: Ipv6Addr) -> bool {
    ip.to_ipv4_mapped()
        .is_some_and(|v4: Ipv4Addr| v4.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn party_urls_need_a_scheme_and_a_host() {
        assert!(check_url("http://127.0.0.1:8080").is_ok());
        assert!(check_url("https://pir.example.invalid/").is_ok());
        for (bad, says) in [
            ("127.0.0.1:8080", "write http://127.0.0.1:8080"),
            ("localhost:8080", "write http://localhost:8080"),
            (
                "pir.example.invalid:443",
                "write https://pir.example.invalid:443",
            ),
            ("ftp://host:1", "scheme \"ftp\""),
            ("http://", "write https://HOST:PORT"),
        ] {
            let e = check_url(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_in_a_party_url_are_refused_and_not_repeated() {
        for url in [
            "https://user:secret-pass@pir.example.invalid",
            "https://user@pir.example.invalid:8443/",
            "http://admin:secret-pass@127.0.0.1:1",
            "https://:secret-pass@pir.example.invalid",
        ] {
            let e = check_party_url(url, true).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, ClientError::BadUrl { .. }), "{url}: {text}");
            assert!(text.contains("--token-a"), "{text}");
            assert!(!text.contains("secret-pass"), "{text}");
        }
        // An @ past the authority is a path, not credentials.
        assert!(check_url("https://pir.example.invalid/a@b").is_ok());
    }

    #[test]
    fn plain_http_only_to_loopback() {
        for ok in [
            "http://127.0.0.1:1",
            "http://127.9.8.7:1",
            "http://[::1]:1",
            "http://[::ffff:127.0.0.1]:1",
            "http://localhost:1",
            "http://LOCALHOST:1",
            "https://pir.example.invalid",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for remote in [
            "http://pir.example.invalid:8080",
            "http://10.0.0.1:8080",
            "http://[2001:db8::1]:80",
            "http://localhost.example.invalid",
            "http://128.0.0.1",
            // Fully qualified: the system resolver asks DNS for these (issue 36).
            "http://localhost.:1",
            "http://LOCALHOST.:1",
            "http://localhost%2e:1",
            "http://localhost%2E:1",
        ] {
            let e = check_url(remote).unwrap_err();
            assert!(
                matches!(e, ClientError::InsecureHttp { .. }),
                "{remote}: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("learns the index") && text.contains("https"),
                "{text}"
            );
            assert!(
                check_party_url(remote, true).is_ok(),
                "{remote} with insecure_http"
            );
        }
    }
}
