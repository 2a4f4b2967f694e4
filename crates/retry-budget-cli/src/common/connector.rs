//! The one connector `get` and `proxy` open upstream connections with:
//! hyper-util's TCP connector (`TCP_NODELAY`, any scheme accepted) under
//! hyper-rustls, which speaks TLS through rustls for `https://` URLs
//! ([`crate::common::tls`] gives the configuration) and plain TCP for `http://`
//! ones; HTTP/1.1 always, HTTP/2 when asked.

use std::sync::Arc;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::ClientConfig;

/// The connector every hyper-util client of the CLI is built on.
pub type Connector = HttpsConnector<HttpConnector>;

/// The connector; `http2` also offers HTTP/2 (by ALPN over TLS; the
/// client decides whether to speak it over plain TCP).
pub fn build(tls: Arc<ClientConfig>, http2: bool) -> Connector {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
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
