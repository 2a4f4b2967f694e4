//! `Idempotency-Key`: the caller's mark that a write may be repeated, read
//! the same way by `get` and the proxy.

use http::{HeaderMap, HeaderName};

/// `Idempotency-Key`.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Whether `headers` have an `Idempotency-Key` with a value: an empty one
/// is no key.
pub fn has_idempotency_key(headers: &HeaderMap) -> bool {
    headers
        .get_all(IDEMPOTENCY_KEY)
        .iter()
        .any(|v| v.as_bytes().iter().any(|b| !b.is_ascii_whitespace()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn an_empty_idempotency_key_is_no_key() {
        let mut headers = http::HeaderMap::new();
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static(""));
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("  "));
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("k-1"));
        assert!(has_idempotency_key(&headers));
    }
}
