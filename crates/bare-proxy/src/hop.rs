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
/// pass over the names present finds the listed ones (most messages have
/// none, or only `Connection: keep-alive`, which names a listed field);
/// only those, and the other fields `Connection` names, are removed.
pub fn strip(headers: &mut HeaderMap) {
    let mut present = 0u8;
    for name in headers.keys() {
        if let Some(index) = HOP.iter().position(|hop| hop == name) {
            present |= 1 << index;
        }
    }
    if present == 0 {
        return;
    }
    // `HOP[0]` is `Connection`: the fields it names that are not listed.
    let named: Vec<HeaderName> = if present & 1 != 0 {
        headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|token| {
                !HOP.iter()
                    .any(|hop| token.eq_ignore_ascii_case(hop.as_str()))
            })
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .collect()
    } else {
        Vec::new()
    };
    for (index, name) in HOP.iter().enumerate() {
        if present & (1 << index) != 0 {
            headers.remove(name);
        }
    }
    for name in &named {
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
