//! Request headers given on the command line (`-H 'Name: value'`): parsed,
//! marked sensitive, and checked against what will really be sent.
//!
//! * **Sensitive** headers ([`Sensitive`]: `Authorization`, `Cookie`,
//!   `Proxy-Authorization`, and any name given with `--sensitive NAME`)
//!   have their values marked sensitive (`HeaderValue::set_sensitive`), so
//!   tower-http's `SetSensitiveRequestHeadersLayer` and every `Debug` print
//!   hide them; no message of this module ever contains a value, and names
//!   are shown with their control characters escaped.
//! * **Framing** headers describe the message itself, so a wrong one makes
//!   the request lie about its own length: `Content-Length` must equal the
//!   body's length, `Transfer-Encoding` is never right (the body is sent
//!   whole), and `Host` must name the URL's host and port. Anything else is
//!   a usage error, and nothing is sent.

use http::header::{
    AUTHORIZATION, CONTENT_LENGTH, COOKIE, HOST, PROXY_AUTHORIZATION, TRANSFER_ENCODING,
};
use http::{HeaderName, HeaderValue, Uri};

use super::escape::escape;

/// One `-H 'Name: value'`.
#[derive(Debug, Clone)]
pub struct Header {
    /// The name.
    pub name: HeaderName,
    /// The value, marked sensitive if its name is.
    pub value: HeaderValue,
}

/// The names whose values are never shown.
#[derive(Debug, Clone)]
pub struct Sensitive(Vec<HeaderName>);

impl Default for Sensitive {
    fn default() -> Self {
        Self(vec![AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION])
    }
}

impl Sensitive {
    /// The default names plus `extra` (`--sensitive NAME`, repeatable).
    ///
    /// # Errors
    ///
    /// A name that is not a header name, in one line.
    pub fn with<'a>(extra: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut names = Self::default();
        for name in extra {
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                format!(
                    "--sensitive: {:?} is not a header name",
                    escape(name.trim())
                )
            })?;
            if !names.contains(&name) {
                names.0.push(name);
            }
        }
        Ok(names)
    }

    /// Whether values of `name` are hidden.
    pub fn contains(&self, name: &HeaderName) -> bool {
        self.0.contains(name)
    }

    /// Whether `name` (as typed) is one of them, ignoring case and blanks.
    pub fn contains_str(&self, name: &str) -> bool {
        HeaderName::from_bytes(name.trim().as_bytes()).is_ok_and(|n| self.contains(&n))
    }

    /// The names, for tower-http's `SetSensitiveRequestHeadersLayer`.
    pub fn names(&self) -> Vec<HeaderName> {
        self.0.clone()
    }
}

/// Parses one `-H` argument.
///
/// # Errors
///
/// One line naming what is wrong; it never contains the value.
pub fn parse(text: &str, sensitive: &Sensitive) -> Result<Header, String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err("-H: expected 'Name: value' (no ':' found)".to_owned());
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("-H: {:?} is not a valid header name", escape(name.trim())))?;
    let value = value.trim();
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        let at = value
            .char_indices()
            .find(|(_, c)| c.is_control() || !c.is_ascii())
            .map(|(i, _)| i + 1)
            .unwrap_or_default();
        format!("-H {name}: the value has a character not allowed in a header (a control or non-ASCII character at position {at})")
    })?;
    value.set_sensitive(sensitive.contains(&name));
    Ok(Header { name, value })
}

/// Checks the framing headers among `headers` against a request to `uri`
/// with a body of `body_len` bytes.
///
/// # Errors
///
/// The first header that disagrees, in one line.
pub fn check_framing(headers: &[Header], uri: &Uri, body_len: u64) -> Result<(), String> {
    for header in headers {
        let shown = || {
            if header.value.is_sensitive() {
                "***".to_owned()
            } else {
                escape(&String::from_utf8_lossy(header.value.as_bytes()))
            }
        };
        if header.name == CONTENT_LENGTH {
            let given = header
                .value
                .to_str()
                .ok()
                .and_then(|v| v.parse::<u64>().ok());
            if given != Some(body_len) {
                return Err(format!(
                    "-H Content-Length: {} disagrees with the body, which is {body_len} bytes: leave it out, it is set from the body",
                    shown()
                ));
            }
        } else if header.name == TRANSFER_ENCODING {
            return Err(format!(
                "-H Transfer-Encoding: {}: the body is sent whole, never with a transfer coding: leave it out",
                shown()
            ));
        } else if header.name == HOST && !host_matches(&header.value, uri) {
            return Err(format!(
                "-H Host: {} disagrees with the URL's host: change the URL instead",
                shown()
            ));
        }
    }
    Ok(())
}

/// Whether a `Host` value names the URL's host and port (the port may be
/// left out when it is the scheme's default).
fn host_matches(value: &HeaderValue, uri: &Uri) -> bool {
    let (Ok(given), Some(host)) = (value.to_str(), uri.host()) else {
        return false;
    };
    let default = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let port = uri.port_u16().unwrap_or(default);
    let given = given.trim();
    let (given_host, given_port) = match given.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, p.parse::<u16>().ok()),
        _ => (given, Some(default)),
    };
    given_host.eq_ignore_ascii_case(host) && given_port == Some(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> Header {
        parse(text, &Sensitive::default()).unwrap()
    }

    #[test]
    fn sensitive_values_are_marked_and_never_in_errors() {
        let sensitive = Sensitive::with(["X-Api-Key"]).unwrap();
        let h = parse("Authorization: Bearer tok", &sensitive).unwrap();
        assert!(h.value.is_sensitive());
        assert!(parse("x-api-key: k", &sensitive)
            .unwrap()
            .value
            .is_sensitive());
        assert!(!parse("X-Trace: 1", &sensitive)
            .unwrap()
            .value
            .is_sensitive());
        assert!(sensitive.contains_str(" COOKIE "));
        let err = parse("Authorization: Bearer \u{1b}[31mtok", &sensitive).unwrap_err();
        assert!(!err.contains("tok") && !err.contains('\u{1b}'), "{err}");
        assert!(err.contains("position 8"), "{err}");
        let err = parse("Authorization Bearer tok", &sensitive).unwrap_err();
        assert!(!err.contains("tok"), "{err}");
        let err = parse("Bad\nName: v", &sensitive).unwrap_err();
        assert_eq!(err, r#"-H: "Bad\\nName" is not a valid header name"#);
        assert!(Sensitive::with(["bad name"]).is_err());
    }

    #[test]
    fn framing_headers_must_match_what_is_sent() {
        let uri: Uri = "http://Example.com:8080/x".parse().unwrap();
        let ok = |text: &str| check_framing(&[header(text)], &uri, 0);
        assert!(ok("Content-Length: 0").is_ok());
        assert!(ok("Content-Length: 5").unwrap_err().contains("0 bytes"));
        assert!(ok("Content-Length: x").is_err());
        assert!(ok("Transfer-Encoding: chunked").is_err());
        assert!(ok("Host: example.com:8080").is_ok());
        assert!(ok("Host: example.com").is_err());
        assert!(ok("Host: other:8080").is_err());
        let default: Uri = "https://h/".parse().unwrap();
        assert!(check_framing(&[header("Host: h")], &default, 0).is_ok());
        assert!(check_framing(&[header("Host: h:443")], &default, 0).is_ok());
        assert!(check_framing(&[header("Host: h:80")], &default, 0).is_err());
        assert!(ok("X-Other: 5").is_ok());
    }
}
