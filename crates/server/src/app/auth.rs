//! API-key checks: the comparison in constant time, and the rule for which requests need it.
//!
//! The comparison touches every byte of both strings whatever they hold, so its duration tells
//! an attacker only the lengths, never how long a matching prefix was.

use axum::http::{header, HeaderMap, Method};

/// Anthropic's key header.
const X_API_KEY: &str = "x-api-key";

/// Whether `headers` carry the key: `Authorization: Bearer <expected>` (OpenAI's clients) or
/// `x-api-key: <expected>` (Anthropic's), on any route. Both are compared when both are sent.
pub fn authorized(headers: &HeaderMap, expected: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let x_api_key = headers
        .get(X_API_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Both comparisons run whatever the first gives, so the time tells nothing more.
    let a = bearer_matches(bearer.trim(), expected);
    let b = bearer_matches(x_api_key.trim(), expected);
    a | b
}

/// Whether a request with `method` can only be for a key-protected route. Every route that
/// takes a body (every `POST` and `DELETE`) is an API route; the open ones (the playground,
/// and `/health` and `/metrics` unless protected) are `GET`s. So a request of another method
/// without the key can be refused before its body is read: an unauthenticated client cannot
/// make the server buffer a body up to the limit.
pub fn needs_key_before_body(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether `given` equals `expected`, in time independent of where they differ.
pub fn bearer_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    // Keep the optimizer from turning the loop into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_read_from_either_header() {
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, "sk"));
        h.insert("x-api-key", "sk".parse().expect("a header value"));
        assert!(authorized(&h, "sk"));
        h.insert("x-api-key", "other".parse().expect("a header value"));
        assert!(!authorized(&h, "sk"));
        h.insert(
            header::AUTHORIZATION,
            "Bearer sk".parse().expect("a header value"),
        );
        assert!(
            authorized(&h, "sk"),
            "a right bearer key with a wrong x-api-key"
        );
        h.remove("x-api-key");
        assert!(authorized(&h, "sk"));
    }

    #[test]
    fn equal_keys_match_and_any_difference_does_not() {
        assert!(bearer_matches("sk-abc", "sk-abc"));
        assert!(!bearer_matches("sk-abd", "sk-abc"));
        assert!(!bearer_matches("sk-ab", "sk-abc"));
        assert!(!bearer_matches("sk-abc\0", "sk-abc"));
        assert!(!bearer_matches("", "sk-abc"));
    }
}
