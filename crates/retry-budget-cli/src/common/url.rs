//! The URL of `get` (and of anything else that sends one): checked before
//! anything is sent, its credentials taken out and never shown.
//!
//! * Only `http://` and `https://`, with a host.
//! * A port, if written, is `1`–`65535` in digits (`http` parses
//!   `:99999` or `:abc` without a port, and the request would silently go
//!   to port 80): anything else is a usage error. An empty port (`host:`)
//!   is the scheme's default, as RFC 3986 §3.2.3 says.
//! * Userinfo (`http://user:password@host/`) is sent as `Authorization:
//!   Basic`, as curl does (percent-decoded, RFC 7617), marked sensitive, and
//!   removed from the request's URI, so neither the request line, the trace
//!   nor the hold-off key (scheme, host and port) ever carries it. It is
//!   shown as `http://user:***@host/` ([`redact::shown_uri`]); a user name without a
//!   password, often a token, as `***@host`.
//!
//! ```text
//! http://alice:s3cret@127.0.0.1:8080/x  →  sent to http://127.0.0.1:8080/x
//!                                          with Authorization: Basic YWxpY2U6czNjcmV0
//!                                          shown as http://alice:***@127.0.0.1:8080/x
//! ```

use base64::Engine as _;
use http::uri::{Authority, Uri};
use http::HeaderValue;
use percent_encoding::percent_decode_str;

use super::escape::escape;

/// Parses and checks a URL given by the user. The error never contains
/// the URL's userinfo.
///
/// # Errors
///
/// One line saying what is wrong: not a URL, a scheme other than http or
/// https, no host, or a port outside 1–65535.
pub fn parse(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("not a URL ({e}); give one such as http://127.0.0.1:8080/path"))?;
    check(&uri)?;
    Ok(uri)
}

/// Checks a parsed URI as [`parse`] does.
///
/// # Errors
///
/// See [`parse`].
pub fn check(uri: &Uri) -> Result<(), String> {
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(format!(
                "the scheme {}: is not supported: http:// or https:// only",
                escape(other)
            ))
        }
        None => return Err("no scheme: give a full URL such as http://127.0.0.1:8080/path".into()),
    }
    let Some(authority) = uri.authority() else {
        return Err("the URL has no host".into());
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    match port_text(authority) {
        None | Some("") => Ok(()),
        Some(port) => match port.parse::<u16>() {
            Ok(1..) if port.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
            _ => Err(format!(
                "the URL's port {} is not a port number from 1 to 65535",
                escape(&shorten(port))
            )),
        },
    }
}

/// The port as written after the host, if a `:` follows the host.
fn port_text(authority: &Authority) -> Option<&str> {
    let host_port = host_port(authority);
    let after_host = match host_port.strip_prefix('[') {
        Some(rest) => &rest[rest.find(']').map_or(rest.len(), |i| i + 1)..],
        None => host_port.find(':').map_or("", |i| &host_port[i..]),
    };
    after_host.strip_prefix(':')
}

/// The authority without its userinfo.
fn host_port(authority: &Authority) -> &str {
    let text = authority.as_str();
    text.rfind('@').map_or(text, |at| &text[at + 1..])
}

/// At most 20 characters of a piece of input.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(20) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// A URL's userinfo, as sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Userinfo {
    user: String,
    password: Option<String>,
}

impl std::fmt::Debug for Userinfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Userinfo(***)")
    }
}

impl Userinfo {
    /// `Authorization: Basic base64(user:password)`, marked sensitive (RFC
    /// 7617; an absent password is empty, as curl sends it).
    pub fn authorization(&self) -> HeaderValue {
        let pair = format!("{}:{}", self.user, self.password.as_deref().unwrap_or(""));
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
            .expect("base64 is a valid header value");
        value.set_sensitive(true);
        value
    }
}

/// Splits `uri` into the URI to send (without userinfo) and its userinfo.
///
/// # Errors
///
/// The URI without userinfo cannot be rebuilt (it always can for a URI
/// that passed [`check`]).
pub fn split(uri: &Uri) -> Result<(Uri, Option<Userinfo>), String> {
    let Some(authority) = uri.authority() else {
        return Ok((uri.clone(), None));
    };
    let Some((userinfo, host_port)) = authority.as_str().rsplit_once('@') else {
        return Ok((uri.clone(), None));
    };
    let decode = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
    let info = match userinfo.split_once(':') {
        Some((user, password)) => Userinfo {
            user: decode(user),
            password: Some(decode(password)),
        },
        None => Userinfo {
            user: decode(userinfo),
            password: None,
        },
    };
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(
        host_port
            .parse()
            .map_err(|e| format!("the URL's host cannot be read ({e})"))?,
    );
    let bare = Uri::from_parts(parts).map_err(|e| format!("the URL cannot be rebuilt ({e})"))?;
    Ok((bare, Some(info)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_outside_the_range_are_refused() {
        for good in [
            "http://127.0.0.1:8080/",
            "http://h:1/",
            "http://h:65535/",
            "http://h/",
            "http://h:/",
            "https://[::1]:443/x",
            "http://u:p@h:80/",
        ] {
            assert_eq!(parse(good).map(|_| ()), Ok(()), "{good}");
        }
        for bad in [
            "http://127.0.0.1:99999/",
            "http://h:0/",
            "http://h:65536/",
            "http://h:abc/",
            "http://[::1]:70000/",
            "http://u:p@h:99999/",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("1 to 65535"), "{bad}: {err}");
            assert!(!err.contains("u:p"), "{err}");
        }
    }

    #[test]
    fn userinfo_is_taken_out_and_sent_as_basic() {
        let uri = parse("http://alice:s3cret@127.0.0.1:8080/x?q=1").unwrap();
        let (bare, info) = split(&uri).unwrap();
        assert_eq!(bare, "http://127.0.0.1:8080/x?q=1");
        let auth = info.unwrap().authorization();
        assert_eq!(auth, "Basic YWxpY2U6czNjcmV0");
        assert!(auth.is_sensitive());

        // Percent-decoded, as curl does; a lone user is hidden too.
        let uri = parse("http://a%40b:p%3Aw@h/").unwrap();
        assert_eq!(
            split(&uri).unwrap().1.unwrap().authorization(),
            "Basic YUBiOnA6dw=="
        );
        let token = parse("https://TOKEN@h/").unwrap();
        assert_eq!(
            split(&token).unwrap().1.unwrap().authorization(),
            "Basic VE9LRU46"
        );
        assert_eq!(
            format!("{:?}", split(&token).unwrap().1),
            "Some(Userinfo(***))"
        );

        let plain = parse("http://h:8/p").unwrap();
        assert_eq!(split(&plain).unwrap(), (plain.clone(), None));
    }

    #[test]
    fn other_bad_urls() {
        assert!(parse("not a url").unwrap_err().starts_with("not a URL"));
        assert!(parse("ftp://h/").unwrap_err().contains("scheme ftp:"));
        assert!(parse("/just/a/path").unwrap_err().starts_with("no scheme"));
        assert!(parse("https://example.com/").is_ok());
    }
}
