//! CORS for browser pages on other origins (`--allowed-origins`).
//!
//! Off by default: with no allowed origin the router has no CORS layer, so no CORS header is
//! ever sent and browsers keep pages on other origins from reading answers. With origins set,
//! tower-http's `CorsLayer` wraps the whole router, outside the API-key check: a preflight
//! (`OPTIONS`) carries no credentials by design, so the layer answers it itself and it never
//! reaches the key check; the actual request then carries its key as usual. The allowed
//! headers mirror the preflight's `Access-Control-Request-Headers`, because the wildcard `*`
//! does not cover `Authorization`. Cookies are not allowed (no credentials mode): the API
//! authenticates by bearer token. An origin not on the list gets no `Access-Control-Allow-Origin`,
//! so its browser refuses the answer.

use std::time::Duration;

use axum::http::{header, HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// How long a browser may cache a preflight answer.
const MAX_AGE: Duration = Duration::from_secs(600);

/// Checks one `--allowed-origins` value: `*`, or `scheme://host[:port]` as browsers send it in
/// `Origin` (a trailing `/` is dropped; a path is refused, as it could never match).
pub fn parse_origin(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s == "*" {
        return Ok(s.to_string());
    }
    let origin = s.strip_suffix('/').unwrap_or(s);
    let Some((scheme, rest)) = origin.split_once("://") else {
        return Err(format!(
            "{s:?} is not an origin (expected `*` or e.g. https://example.com)"
        ));
    };
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok || rest.is_empty() || rest.contains(['/', '?', '#']) {
        return Err(format!(
            "{s:?} is not an origin: give scheme://host[:port] without a path"
        ));
    }
    if HeaderValue::from_str(origin).is_err() {
        return Err(format!("{s:?} cannot appear in an HTTP header"));
    }
    Ok(origin.to_string())
}

/// The CORS layer for `origins` (checked by `parse_origin`), or None when the list is empty.
/// `*` among them allows any origin.
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([header::RETRY_AFTER])
            .max_age(MAX_AGE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_and_normalised() {
        assert_eq!(parse_origin("*"), Ok("*".into()));
        assert_eq!(
            parse_origin("https://example.com/"),
            Ok("https://example.com".into())
        );
        assert_eq!(
            parse_origin("http://localhost:3000"),
            Ok("http://localhost:3000".into())
        );
        assert!(parse_origin("example.com").is_err());
        assert!(parse_origin("https://example.com/app").is_err());
        assert!(parse_origin("https://").is_err());
        assert!(parse_origin("ht tp://x").is_err());
    }
}
