//! The key of a request in the hold-off map: scheme, host and port, and
//! nothing else.
//!
//! A hold belongs to the service that asked for it, which RFC 3986 names
//! by scheme, host and port. Userinfo (`user:password@`) is never part of
//! it: credentials must not sit in a map (or, with a shared store, in
//! Redis), and one service behind two sets of credentials is still one
//! service. The port is always written, the scheme's default filled in,
//! so that `http://a.test` and `http://a.test:80` are one key; the host is
//! lower-cased (RFC 3986 §3.2.2).

use std::cell::RefCell;
use std::sync::Arc;

use http::header::HOST;
use http::uri::{Authority, Scheme};
#[cfg(test)]
use http::Request;
use http::{HeaderMap, Uri};

/// The key of a request.
#[cfg(test)]
fn authority_of<B>(request: &Request<B>) -> Option<Arc<str>> {
    authority_in(request.uri(), request.headers())
}

/// The key of a request with this URI and these headers:
/// `scheme://host:port` from its URI, or from its `Host` header for a
/// relative URI (scheme `http` then, which is what a request in origin
/// form over a plain connection is). Shared: the hold-off and pacing ask
/// for it per request, and a key made before on this thread for the same
/// scheme and authority is handed out again without a copy.
pub(crate) fn authority_in(uri: &Uri, headers: &HeaderMap) -> Option<Arc<str>> {
    let scheme = uri.scheme().unwrap_or(&Scheme::HTTP);
    if let Some(authority) = uri.authority() {
        return Some(key(scheme, authority));
    }
    let host = headers.get(HOST)?.to_str().ok()?;
    let authority: Authority = host.parse().ok()?;
    Some(key(scheme, &authority))
}

fn key(scheme: &Scheme, authority: &Authority) -> Arc<str> {
    let text = authority.as_str();
    // The usual request: the same text as the key made last, which holds
    // no `@`, so that the text has no userinfo to cut. (Schemes equal
    // without case make one key: it is lower-cased.)
    let same = LAST.with_borrow(|last| {
        last.as_ref()
            .filter(|made| *made.authority == *text && made.scheme == *scheme)
            .map(|made| made.key.clone())
    });
    same.unwrap_or_else(|| key_of_userinfo_or_new(scheme, authority))
}

/// The key when the text is not the last one's: the same host and port
/// after userinfo, or a new key.
#[cold]
fn key_of_userinfo_or_new(scheme: &Scheme, authority: &Authority) -> Arc<str> {
    LAST.with_borrow_mut(|last| {
        // Host and port as written: never the userinfo.
        let text = authority.as_str();
        let raw_authority = text.rsplit_once('@').map_or(text, |(_, host)| host);
        match &*last {
            Some(made) if made.scheme == *scheme && *made.authority == *raw_authority => {
                made.key.clone()
            }
            _ => {
                let key: Arc<str> = make_key(scheme.as_str(), authority).into();
                *last = Some(Made {
                    scheme: scheme.clone(),
                    authority: raw_authority.into(),
                    key: key.clone(),
                });
                key
            }
        }
    })
}

/// A key made, with the scheme and the host and port it was made from,
/// as written.
struct Made {
    scheme: Scheme,
    authority: Box<str>,
    key: Arc<str>,
}

thread_local! {
    /// The last key made on this thread: a client sends nearly all its
    /// requests to a few services, and the key is asked for per request
    /// (by the hold-off and by pacing), so that one made from the same
    /// scheme and authority text is shared rather than parsed, lower-cased
    /// and allocated again.
    static LAST: RefCell<Option<Made>> = const { RefCell::new(None) };
}

fn make_key(scheme: &str, authority: &Authority) -> String {
    let host = authority.host();
    let port = authority.port_u16().or_else(|| {
        if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("ws") {
            Some(80)
        } else if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("wss") {
            Some(443)
        } else {
            None
        }
    });
    // One allocation per key made: `scheme://host:port`, lowercased.
    let mut key = String::with_capacity(scheme.len() + host.len() + 9);
    key.push_str(scheme);
    key.push_str("://");
    key.push_str(host);
    key.make_ascii_lowercase();
    if let Some(port) = port {
        key.push(':');
        key.push_str(itoa::Buffer::new().format(port));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(uri: &str) -> Option<Arc<str>> {
        authority_of(&Request::get(uri).body(()).unwrap())
    }

    #[test]
    fn the_key_made_last_is_reused_only_for_the_same_scheme_and_authority() {
        for _ in 0..2 {
            assert_eq!(of("http://A.test/x").as_deref(), Some("http://a.test:80"));
            assert_eq!(of("http://A.test/y").as_deref(), Some("http://a.test:80"));
            assert_eq!(
                of("https://A.test/x").as_deref(),
                Some("https://a.test:443")
            );
            assert_eq!(
                of("http://u:pw@A.test:81/x").as_deref(),
                Some("http://a.test:81")
            );
            assert_eq!(
                of("http://b.test:81/x").as_deref(),
                Some("http://b.test:81")
            );
        }
    }

    #[test]
    fn scheme_host_and_port_never_userinfo() {
        assert_eq!(of("http://A.Test/x").as_deref(), Some("http://a.test:80"));
        assert_eq!(
            of("http://a.test:80/y").as_deref(),
            Some("http://a.test:80")
        );
        assert_eq!(of("https://a.test/").as_deref(), Some("https://a.test:443"));
        assert_eq!(
            of("http://a.test:8080").as_deref(),
            Some("http://a.test:8080")
        );
        let with_credentials = of("https://alice:s3cret@a.test:8443/private").unwrap();
        assert_eq!(&*with_credentials, "https://a.test:8443");
        assert!(!with_credentials.contains("alice") && !with_credentials.contains("s3cret"));
        assert_eq!(
            of("http://[::1]:9000/").as_deref(),
            Some("http://[::1]:9000")
        );
    }

    #[test]
    fn a_relative_uri_uses_the_host_header() {
        let request = Request::get("/x")
            .header(HOST, "user:pw@B.test:81")
            .body(())
            .unwrap();
        assert_eq!(authority_of(&request).as_deref(), Some("http://b.test:81"));
        let request = Request::get("/x").header(HOST, "b.test").body(()).unwrap();
        assert_eq!(authority_of(&request).as_deref(), Some("http://b.test:80"));
        let request = Request::get("/x")
            .header(HOST, "not a host")
            .body(())
            .unwrap();
        assert_eq!(authority_of(&request), None);
        assert_eq!(authority_of(&Request::get("/x").body(()).unwrap()), None);
    }
}
