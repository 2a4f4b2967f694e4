//! The one connector `get` and `proxy` open upstream connections with:
//! hyper-util's TCP connector (`TCP_NODELAY`, any scheme accepted) under
//! hyper-rustls, which speaks TLS through rustls for `https://` URLs
//! ([`crate::common::tls`] gives the configuration) and plain TCP for `http://`
//! ones; HTTP/1.1 always, HTTP/2 when asked. `--connect-to` (curl's) sends
//! a host's connections elsewhere while the request (its `Host`, its TLS
//! server name) keeps the name.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::ClientConfig;
use tower::Service;

/// The connector every hyper-util client of the CLI is built on.
pub type Connector = HttpsConnector<Tcp>;

/// The connector; `http2` also offers HTTP/2 (by ALPN over TLS; the
/// client decides whether to speak it over plain TCP).
pub fn build(tls: Arc<ClientConfig>, http2: bool) -> Connector {
    build_with(tls, http2, Vec::new())
}

/// [`build`], its connections sent where `connect_to` says.
pub fn build_with(tls: Arc<ClientConfig>, http2: bool, connect_to: Vec<ConnectTo>) -> Connector {
    let mut inner = HttpConnector::new();
    inner.enforce_http(false);
    inner.set_nodelay(true);
    let tcp = Tcp {
        inner,
        connect_to: connect_to.into(),
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(tls))
        .https_or_http()
        .enable_http1();
    if http2 {
        builder.enable_http2().wrap_connector(tcp)
    } else {
        builder.wrap_connector(tcp)
    }
}

/// One `--connect-to HOST:PORT:ADDR:PORT2` (curl's syntax): a connection
/// to `HOST:PORT` goes to `ADDR:PORT2` instead. An empty `HOST` or `PORT`
/// matches any; an empty `ADDR` or `PORT2` keeps the original. An IPv6
/// address is written in brackets (`[::1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectTo {
    host: Option<String>,
    port: Option<u16>,
    to_host: Option<String>,
    to_port: Option<u16>,
}

impl ConnectTo {
    /// Parses `HOST:PORT:ADDR:PORT2`.
    ///
    /// # Errors
    ///
    /// Not four fields, or a port that is not a number.
    pub fn parse(text: &str) -> Result<Self, String> {
        let fields = split_fields(text)
            .filter(|f| f.len() == 4)
            .ok_or_else(|| format!("expected HOST:PORT:ADDR:PORT2, not {text:?}"))?;
        let port = |raw: &str| -> Result<Option<u16>, String> {
            if raw.is_empty() {
                return Ok(None);
            }
            raw.parse()
                .map(Some)
                .map_err(|_| format!("{raw:?} is not a port (in {text:?})"))
        };
        let host = |raw: &str| (!raw.is_empty()).then(|| raw.to_ascii_lowercase());
        Ok(Self {
            host: host(fields[0]),
            port: port(fields[1])?,
            to_host: host(fields[2]),
            to_port: port(fields[3])?,
        })
    }

    /// Where a connection to `host:port` goes, if this entry matches it.
    fn route(&self, host: &str, port: u16) -> Option<(String, u16)> {
        let host_matches = self
            .host
            .as_deref()
            .is_none_or(|h| h.eq_ignore_ascii_case(host));
        if !host_matches || self.port.is_some_and(|p| p != port) {
            return None;
        }
        let to_host = self.to_host.clone().unwrap_or_else(|| host.to_owned());
        Some((to_host, self.to_port.unwrap_or(port)))
    }
}

/// `a:b:c:d` into its fields, a bracketed IPv6 address kept whole.
fn split_fields(text: &str) -> Option<Vec<&str>> {
    let mut fields = Vec::new();
    let mut rest = text;
    loop {
        let end = if rest.starts_with('[') {
            rest.find(']')? + 1
        } else {
            rest.find(':').unwrap_or(rest.len())
        };
        fields.push(&rest[..end]);
        match rest[end..].strip_prefix(':') {
            Some(after) => rest = after,
            None if end == rest.len() => return Some(fields),
            None => return None,
        }
    }
}

/// The TCP connector under TLS, with the `--connect-to` routes.
#[derive(Debug, Clone)]
pub struct Tcp {
    inner: HttpConnector,
    connect_to: Arc<[ConnectTo]>,
}

impl Service<Uri> for Tcp {
    type Response = <HttpConnector as Service<Uri>>::Response;
    type Error = <HttpConnector as Service<Uri>>::Error;
    type Future = <HttpConnector as Service<Uri>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let routed = uri.host().and_then(|host| {
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let (to_host, to_port) = self.connect_to.iter().find_map(|c| c.route(host, port))?;
            let scheme = uri.scheme_str().unwrap_or("http");
            Uri::try_from(format!("{scheme}://{to_host}:{to_port}/")).ok()
        });
        self.inner.call(routed.unwrap_or(uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curls_syntax() {
        let entry =
            ConnectTo::parse("generativelanguage.googleapis.com:80:127.0.0.1:8080").unwrap();
        assert_eq!(
            entry.route("generativelanguage.googleapis.com", 80),
            Some(("127.0.0.1".to_owned(), 8080))
        );
        assert_eq!(
            entry.route("GenerativeLanguage.googleapis.com", 80),
            Some(("127.0.0.1".to_owned(), 8080))
        );
        assert_eq!(entry.route("generativelanguage.googleapis.com", 443), None);
        assert_eq!(entry.route("example.com", 80), None);
        let any = ConnectTo::parse("::[::1]:").unwrap();
        assert_eq!(
            any.route("example.com", 443),
            Some(("[::1]".to_owned(), 443))
        );
        for bad in [
            "",
            "a:80:b",
            "a:80:b:c",
            "a:x:b:1",
            "a:80:b:1:2",
            "a:80:[::1:1",
        ] {
            assert!(ConnectTo::parse(bad).is_err(), "{bad}");
        }
    }
}
