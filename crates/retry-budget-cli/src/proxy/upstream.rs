//! An upstream, prepared once when its route is made (from `--upstream` or
//! a config file's `[[route]]`): where a request goes, and how its head is
//! rewritten for it (the path mapped under the prefix, `Host`, the
//! version). Nothing here reads the configuration per request; the table
//! of routes (`table.rs`) holds one [`Upstream`] per route.

use std::borrow::Cow;

use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Method, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;

use super::path::{normalize, PathError};

/// The upstream: scheme, authority (no userinfo), path prefix and HTTP
/// version, prepared once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host[:port]`, never with userinfo.
    pub authority: Authority,
    /// The path prefix without its trailing `/` (empty for none).
    pub prefix: String,
    /// The `Host` field every forwarded request carries: the authority,
    /// made once.
    pub host: HeaderValue,
    /// Whether requests go upstream as HTTP/2 (`--upstream-http2`).
    pub http2: bool,
}

impl Upstream {
    /// The upstream URI of an incoming request's path and query: the path
    /// with its dot-segments removed ([`normalize`]), then joined to the
    /// prefix, so that it never leaves the prefix.
    ///
    /// # Errors
    ///
    /// The path is refused (see [`PathError`]), or the joined text is not a
    /// URI, which a valid incoming path and a valid prefix cannot produce;
    /// the caller answers 400.
    #[cfg(test)]
    pub fn uri_for(&self, target: Option<&PathAndQuery>) -> Result<Uri, TargetError> {
        self.uri_under(target, 0)
    }

    /// As [`Self::uri_for`], the first `strip` bytes of the path removed
    /// first (a route's path prefix, matched at a segment boundary; an
    /// empty rest is `/`): the rest is normalized on its own, so that it
    /// never leaves the upstream's prefix, whatever route it came by.
    ///
    /// # Errors
    ///
    /// As [`Self::uri_for`].
    pub fn uri_under(
        &self,
        target: Option<&PathAndQuery>,
        strip: usize,
    ) -> Result<Uri, TargetError> {
        let (path, query) = target.map_or(("/", None), |p| (p.path(), p.query()));
        let path = path
            .get(strip..)
            .filter(|rest| !rest.is_empty())
            .unwrap_or("/");
        let path = normalize(path).map_err(TargetError::Path)?;
        let path_and_query = match (target, &path) {
            // No prefix and nothing removed: the target as received (a
            // clone of its shared bytes, not a new parse).
            (Some(target), Cow::Borrowed(_)) if self.prefix.is_empty() && strip == 0 => {
                target.clone()
            }
            _ => {
                let mut joined = String::with_capacity(
                    self.prefix.len() + path.len() + query.map_or(0, |q| q.len() + 1),
                );
                joined.push_str(&self.prefix);
                joined.push_str(&path);
                if let Some(query) = query {
                    joined.push('?');
                    joined.push_str(query);
                }
                PathAndQuery::try_from(joined)
                    .map_err(|e| TargetError::Uri(http::Error::from(e)))?
            }
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path_and_query);
        Uri::from_parts(parts).map_err(|e| TargetError::Uri(e.into()))
    }

    /// The upstream of `--upstream URL` (HTTP/1.1 until [`Self::http2`]).
    ///
    /// # Errors
    ///
    /// The URL is refused, in one line.
    pub fn parse(text: &str) -> Result<Self, String> {
        // Scheme, host and port are checked as for `get`.
        let uri = crate::common::url::parse(text)?;
        let scheme = if uri.scheme() == Some(&Scheme::HTTPS) {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        let authority = uri.authority().ok_or("the URL has no host")?;
        if authority.as_str().contains('@') {
            return Err(
                "the URL has credentials (user:password@): the proxy never sends or logs them; \
                 let the caller send an Authorization header instead"
                    .into(),
            );
        }
        if uri.query().is_some() {
            return Err(
                "the URL has a query: give only scheme, host, port and a path prefix".into(),
            );
        }
        // An authority `http` parsed is a valid field value.
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|_| "the URL's host cannot be sent as a Host field")?;
        Ok(Self {
            scheme,
            authority: authority.clone(),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            host,
            http2: false,
        })
    }

    /// This upstream, spoken to as HTTP/2 if `http2`.
    #[must_use]
    pub fn http2(self, http2: bool) -> Self {
        Self { http2, ..self }
    }

    /// Turns the caller's request head (hop-by-hop fields already removed)
    /// into the upstream's: `uri` (from [`Self::uri_for`]), `Host`, the
    /// version, and a chunked body where hyper would drop one.
    pub fn prepare(&self, parts: &mut Parts, uri: Uri, body: &Incoming) {
        // hyper's HTTP/1 client sends no body for a GET or HEAD of unknown
        // length unless told to: a caller's chunked (or HTTP/2, no
        // Content-Length) body is forwarded chunked rather than dropped.
        let unknown_length = !body.is_end_stream()
            && body.size_hint().exact().is_none()
            && !parts.headers.contains_key(CONTENT_LENGTH);
        if !self.http2
            && unknown_length
            && (parts.method == Method::GET || parts.method == Method::HEAD)
        {
            parts
                .headers
                .insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        }
        parts.headers.insert(HOST, self.host.clone());
        parts.uri = uri;
        parts.version = if self.http2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
    }

    /// Whether TLS is needed.
    pub fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

/// Why a request target cannot be sent upstream.
#[derive(Debug)]
pub enum TargetError {
    /// The path is refused.
    Path(PathError),
    /// The joined text is not a URI.
    Uri(http::Error),
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path(e) => e.fmt(f),
            Self::Uri(e) => write!(f, "the upstream URI cannot be built: {e}"),
        }
    }
}

impl std::error::Error for TargetError {}
