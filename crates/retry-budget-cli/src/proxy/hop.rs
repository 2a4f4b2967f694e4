//! Hop-by-hop fields (RFC 9110 §7.6.1): what a proxy must not forward.
//!
//! Hand-written: neither hyper, http nor tower-http removes them (hyper
//! handles framing of its own connection, not what a proxy relays), and the
//! rule is a short list plus the names the `Connection` field lists.
//!
//! Removed in both directions: `Connection` and every field it names,
//! `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding` (hyper frames each
//! hop itself), `Upgrade` (the proxy does not tunnel upgrades) and `TE`,
//! except `TE: trailers`, which gRPC needs end to end and HTTP/2 allows.
//! Also removed: `Proxy-Authorization` from requests (credentials meant
//! for this proxy, RFC 9110 §11.7.2; it checks none and relays none) and
//! `Proxy-Authenticate` from responses (a challenge meant for the next proxy
//! down, not for the caller).

use http::header::Entry;
use http::header::{
    CONNECTION, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderName};

/// `Keep-Alive` and `Proxy-Connection` (not in `http`'s constants).
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// What [`strip`] removes from a request: the fields removed in both
/// directions (`Connection` first), then `Proxy-Authorization` and `TE`.
static REQUEST: [HeaderName; 7] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
    TE,
];

/// The bit of `TE` in a mask of [`REQUEST`]'s names.
const REQUEST_TE: u32 = 1 << 6;

/// What [`strip`] removes from a response: the fields removed in both
/// directions (`Connection` first), then `TE` and `Proxy-Authenticate`.
static RESPONSE: [HeaderName; 7] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    TRANSFER_ENCODING,
    UPGRADE,
    TE,
    PROXY_AUTHENTICATE,
];

/// Removes the hop-by-hop fields of a request about to be forwarded.
pub fn strip_request(headers: &mut HeaderMap) {
    let present = present(headers, &REQUEST);
    let trailers = present & REQUEST_TE != 0
        && headers
            .get_all(TE)
            .iter()
            .any(|v| v.to_str().is_ok_and(names_trailers));
    strip(headers, &REQUEST, present);
    if trailers {
        headers.insert(TE, http::HeaderValue::from_static("trailers"));
    }
}

/// Removes the hop-by-hop fields of a response about to be relayed.
pub fn strip_response(headers: &mut HeaderMap) {
    let present = present(headers, &RESPONSE);
    strip(headers, &RESPONSE, present);
}

/// Which of the `listed` names are present, one bit each, in one pass over
/// the names present (most messages have none of them, or only
/// `Connection: keep-alive`, which names a listed field). A name is
/// compared with the listed ones only if one of them has its length: most
/// field names (`Host`, `Date`, `Content-Type`, ...) have none of the
/// listed lengths.
fn present(headers: &HeaderMap, listed: &[HeaderName; 7]) -> u32 {
    let mut present = 0u32;
    for name in headers.keys() {
        if !LISTED_LENGTHS.contains(&name.as_str().len()) {
            continue;
        }
        for (bit, hop) in listed.iter().enumerate() {
            if hop == name {
                present |= 1 << bit;
                break;
            }
        }
    }
    present
}

/// The lengths of the names in [`REQUEST`] and [`RESPONSE`] (`te`,
/// `upgrade`, `connection` and `keep-alive`, `proxy-connection`,
/// `transfer-encoding`, `proxy-authenticate`, `proxy-authorization`).
const LISTED_LENGTHS: [usize; 7] = [2, 7, 10, 16, 17, 18, 19];

/// Removes the `listed` names marked `present` and the fields `Connection`
/// (`listed[0]`) names; a field `Connection` names that is not listed is
/// removed by its name as written, with no `HeaderName` built for it.
fn strip(headers: &mut HeaderMap, listed: &[HeaderName; 7], present: u32) {
    if present == 0 {
        return;
    }
    // The fields `Connection` names, read from it before it is removed
    // (one lookup for both). A name that is listed is already marked if
    // present.
    let mut named: Vec<String> = Vec::new();
    if present & 1 != 0 {
        if let Entry::Occupied(connection) = headers.entry(CONNECTION) {
            // `to_str` leaves visible ASCII, spaces and tabs: ASCII
            // trimming is all a token needs.
            for value in connection.iter() {
                // The usual value, `keep-alive` (listed in both
                // directions): it names no other field, and needs no
                // splitting.
                if value.as_bytes().eq_ignore_ascii_case(b"keep-alive") {
                    continue;
                }
                let Ok(value) = value.to_str() else {
                    continue;
                };
                let tokens = value.split(',').map(str::trim_ascii);
                for token in tokens.filter(|token| !token.is_empty()) {
                    if !is_listed(token.as_bytes(), listed) {
                        named.push(token.to_owned());
                    }
                }
            }
            connection.remove();
        }
    }
    for (bit, name) in listed.iter().enumerate().skip(1) {
        if present & (1 << bit) != 0 {
            headers.remove(name);
        }
    }
    for name in named {
        // Not a valid field name: nothing by that name can be present.
        headers.remove(name.as_str());
    }
}

/// Whether `token` is one of the `listed` names (any case).
fn is_listed(token: &[u8], listed: &[HeaderName; 7]) -> bool {
    listed
        .iter()
        .any(|l| l.as_str().as_bytes().eq_ignore_ascii_case(token))
}

/// Whether a `TE` value lists `trailers` (case-insensitive, parameters
/// ignored).
fn names_trailers(value: &str) -> bool {
    value.split(',').any(|coding| {
        coding
            .split(';')
            .next()
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("trailers"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE};
    use http::HeaderValue;

    fn map(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn request_fields_and_those_connection_names_go() {
        let mut headers = map(&[
            ("connection", "keep-alive, X-Secret-Hop"),
            ("connection", "x-other"),
            ("x-secret-hop", "1"),
            ("x-other", "2"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("te", "gzip"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("authorization", "Bearer end-to-end"),
            ("cookie", "a=b"),
            ("content-type", "text/plain"),
        ]);
        strip_request(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(headers.contains_key(AUTHORIZATION));
        assert!(headers.contains_key(COOKIE));
        assert!(headers.contains_key(CONTENT_TYPE));
    }

    #[test]
    fn every_listed_name_has_a_listed_length() {
        for name in REQUEST.iter().chain(&RESPONSE) {
            assert!(LISTED_LENGTHS.contains(&name.as_str().len()), "{name}");
        }
    }

    #[test]
    fn te_trailers_is_kept_for_grpc() {
        let mut headers = map(&[("te", "gzip, Trailers;q=1")]);
        strip_request(&mut headers);
        assert_eq!(headers.get(TE).unwrap(), "trailers");
        let mut response = map(&[("te", "trailers"), ("proxy-authenticate", "Basic")]);
        strip_response(&mut response);
        assert!(response.is_empty());
    }

    #[test]
    fn a_connection_value_that_is_not_a_name_is_ignored() {
        let mut headers = map(&[("connection", "close, , bad name"), ("close", "x")]);
        strip_response(&mut headers);
        assert!(headers.is_empty());
    }
}
