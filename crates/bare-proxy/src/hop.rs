//! Hop-by-hop fields (RFC 9110 §7.6.1): what a proxy must not forward.
//!
//! Hand-written, as in the sidecar (`hop.rs` there): neither hyper nor
//! `http` removes them from a message a proxy relays. Removed: `Connection`
//! and every field it names, `Keep-Alive`, `Proxy-Connection`, `TE`,
//! `Transfer-Encoding` (hyper frames each hop itself), `Upgrade` (no
//! tunnels here), `Proxy-Authorization` and `Proxy-Authenticate`
//! (credentials and challenges of this hop).

use http::header::{
    CONNECTION, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderName};

/// The fields removed whether or not `Connection` names them.
static HOP: [HeaderName; 8] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TE,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
    PROXY_AUTHENTICATE,
];

/// Removes the hop-by-hop fields of a message about to be forwarded. One
/// pass over the names present when there are none (the common case).
pub fn strip(headers: &mut HeaderMap) {
    if !headers.keys().any(|name| HOP.contains(name)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in HOP.iter().chain(&named) {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn removes_the_listed_fields_and_those_connection_names() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, X-Secret"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert(PROXY_AUTHORIZATION, HeaderValue::from_static("Basic eA=="));
        headers.insert("x-kept", HeaderValue::from_static("2"));
        strip(&mut headers);
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers["x-kept"], "2");
    }

    #[test]
    fn leaves_a_message_without_them_alone() {
        let mut headers = HeaderMap::new();
        headers.insert("x-kept", HeaderValue::from_static("2"));
        headers.append("x-kept", HeaderValue::from_static("3"));
        let before = headers.clone();
        strip(&mut headers);
        assert_eq!(headers, before);
    }
}
