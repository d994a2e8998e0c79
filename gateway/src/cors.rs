//! Cross-origin access for browser clients (`--cors-origin`).
//!
//! A web page may call a party only if the party names the page's origin: browsers send a
//! preflight `OPTIONS` before a JSON `POST` with an `Idempotency-Key`, and hide every answer that
//! lacks `Access-Control-Allow-Origin`. Off by default, so a party serves no browser until its
//! operator names the origins; tower-http's `CorsLayer` does the protocol (preflights, `Vary`,
//! exact origin matching). No credentials (cookies) are allowed: a query token travels in the
//! `Authorization` header, which a page sets itself, so `*` is safe where an operator wants
//! every origin.

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// One allowed origin: `scheme://host[:port]` exactly as browsers send it, or `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin(String);

impl Origin {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Parses one `--cors-origin` value: `*`, or `http(s)://host[:port]` with no path, query or
/// trailing slash (browsers never send those, so such an entry would match nothing).
pub fn parse_origin(value: &str) -> Result<Origin, String> {
    let value = value.trim();
    if value == "*" {
        return Ok(Origin(value.to_string()));
    }
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"))
        .ok_or_else(|| format!("origin {value:?} must start with http:// or https://"))?;
    let valid_host = !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
    if !valid_host {
        return Err(format!(
            "origin {value:?} must be scheme://host[:port], without a path or trailing slash"
        ));
    }
    Ok(Origin(value.to_ascii_lowercase()))
}

/// The layer for `origins`; `None` when the list is empty (CORS off).
pub fn layer(origins: &[Origin]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o.as_str() == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .map(|o| HeaderValue::from_str(o.as_str()).expect("parse_origin checked it")),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::CONTENT_TYPE,
                header::ACCEPT,
                // Query tokens (`--query-tokens`): a header, never a cookie, so `*` stays safe.
                header::AUTHORIZATION,
                HeaderName::from_static("idempotency-key"),
                HeaderName::from_static("prefer"),
            ])
            // What a client reads besides the body: where the query lives, when to retry, how
            // long the scan took, whether the answer was held (`Prefer: wait`).
            .expose_headers([
                header::LOCATION,
                header::RETRY_AFTER,
                HeaderName::from_static("server-timing"),
                HeaderName::from_static("preference-applied"),
            ])
            // One preflight per origin and route every 10 minutes rather than one per query.
            .max_age(Duration::from_secs(600)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_port() {
        assert_eq!(
            parse_origin("https://Wallet.example:8443")
                .unwrap()
                .as_str(),
            "https://wallet.example:8443"
        );
        assert_eq!(parse_origin("*").unwrap().as_str(), "*");
        assert!(parse_origin("http://[::1]:3000").is_ok());
        for bad in [
            "wallet.example",
            "https://wallet.example/",
            "https://wallet.example/app",
            "https://",
            "ftp://x",
            "https://a b",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn no_origins_no_layer() {
        assert!(layer(&[]).is_none());
        assert!(layer(&[parse_origin("http://127.0.0.1:3000").unwrap()]).is_some());
    }
}
