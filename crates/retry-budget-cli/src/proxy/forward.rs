//! One request through the proxy, as a stack of steps, each of one job:
//!
//! 1. refuse what is never forwarded ([`refuse`]: `CONNECT`, `OPTIONS *`);
//! 2. select the route ([`Table::select`]: by host or path prefix; a
//!    request no route takes is refused, nothing sent), from the table in
//!    force when the request arrived (a reload swaps in another for the
//!    requests after it);
//! 3. map the path onto the route's upstream, prepared once
//!    ([`Upstream::uri_under`]: the route's prefix stripped);
//! 4. strip the hop-by-hop fields ([`hop`]), so that what decides below is
//!    what would be sent;
//! 5. classify the request ([`Class`]) and read the caller's deadline
//!    ([`deadline`]) into its per-request [`Policy`] ([`policy_of`]), under
//!    the route's policy;
//! 6. rewrite the head for the upstream ([`Upstream::prepare`]) and set up
//!    the action ([`start`]: extensions, span, log guard);
//! 7. send it through the route's stack, relay the end and log it
//!    ([`relay`]).
//!
//! Every wait, stop and outcome is then the layer's (the core's).
//!
//! [`Policy`]: retry_budget::Policy

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::{Request, Response, Version};
use hyper::body::Incoming;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::args::ProxyConfig;
use super::classify::{policy_of, Class};
use super::deadline;
use super::fields::Fields;
use super::hop;
use super::metrics::Metrics;
use super::refuse;
use super::relay;
use super::reply::ProxyBody;
use super::start::{self, Setup};
use super::table::Table;
#[cfg(doc)]
use super::upstream::Upstream;

/// What the request handlers of one worker share.
#[derive(Debug)]
pub struct Proxy {
    /// The configuration the process started with (its listeners, limits
    /// and log format stay; its routes are in `table`).
    pub config: Arc<ProxyConfig>,
    /// The worker's routes in force, each with its client stack, swapped
    /// whole on a reload.
    pub table: Arc<ArcSwap<Table>>,
    /// Fired when the drain time is over: actions still running stop as
    /// `cancelled`. (The worker's own child of the process's token, so
    /// that each connection's token ([`Proxy::connection_token`]) is made
    /// under a node no other thread touches.)
    pub cancel: CancellationToken,
    /// Numbers actions for the observer (one per request, whatever worker
    /// and layer instance serves it): this worker's next id, stepping by
    /// the number of workers.
    next_id: AtomicU64,
    id_step: u64,
    /// The metrics (also fed by the layer's observer).
    metrics: Metrics,
}

impl Proxy {
    /// The shared state of the handlers of worker `index` of `workers`.
    pub fn new(
        config: Arc<ProxyConfig>,
        table: Arc<ArcSwap<Table>>,
        metrics: Metrics,
        cancel: &CancellationToken,
        (index, workers): (usize, usize),
    ) -> Self {
        Self {
            config,
            table,
            cancel: cancel.child_token(),
            next_id: AtomicU64::new(index as u64),
            id_step: workers.max(1) as u64,
            metrics,
        }
    }

    /// The token of a new client connection: a child of the worker's.
    /// The actions of an HTTP/1 connection carry it itself: the connection
    /// serves one request at a time, and hyper reads no further request
    /// from it once a request body broke (the one case in which an action
    /// cancels its token), so no tree node is made per request. Each
    /// HTTP/2 stream's action gets a child of it ([`handle`]): a stream
    /// whose body breaks cancels its own action only.
    pub fn connection_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// A number no other action of this process has.
    fn next_id(&self) -> u64 {
        // Only this worker's thread numbers with it: no other thread
        // touches its cache line.
        self.next_id.fetch_add(self.id_step, Ordering::Relaxed)
    }
}

/// Handles one request, given its connection's token
/// ([`Proxy::connection_token`]); never fails (every failure is a
/// response).
pub async fn handle(
    proxy: Arc<Proxy>,
    request: Request<Incoming>,
    connection: CancellationToken,
) -> Result<Response<ProxyBody>, Infallible> {
    let received = Instant::now();
    let http2 = request.version() == Version::HTTP_2;
    if http2 {
        // hyper looks for a client's RST_STREAM only while the stream's
        // handler is pending. Pending once before anything is sent lets a
        // stream the client reset at once (HEADERS then RST_STREAM, as a
        // reset flood sends them) end here: no action, no upstream
        // connection opened for it.
        tokio::task::yield_now().await;
    }
    let (mut parts, body) = request.into_parts();
    if let Some(refused) = refuse::method(&parts) {
        return Ok(refused);
    }
    let config = &*proxy.config;
    // Held until the action ends: a reload does not take its route away.
    let table = proxy.table.load_full();
    let (route, strip) = match table.select(&parts) {
        Ok(selected) => selected,
        Err(miss) => return Ok(refuse::route(&parts, miss)),
    };
    let upstream = &route.config.upstream;
    let uri = match upstream.uri_under(parts.uri.path_and_query(), strip) {
        Ok(uri) => uri,
        Err(error) => return Ok(refuse::target(&parts, &error)),
    };
    hop::strip_request(&mut parts.headers);
    let fields = Fields::of(&parts.headers);
    let class = Class::of(&parts, &fields, uri.path(), &route.config);
    let allowed = deadline::read(&fields);
    let policy = match policy_of(route.config.policy, allowed.map(|a| a.time), class.once) {
        Ok(policy) => policy,
        Err(refused) => return Ok(refuse::policy(&parts, &refused)),
    };
    upstream.prepare(&mut parts, uri, &body);
    let setup = Setup {
        id: proxy.next_id(),
        cancel: if http2 {
            connection.child_token()
        } else {
            connection
        },
        metrics: &proxy.metrics,
        format: config.log_format,
        received,
        route: route.name.clone(),
    };
    let started = start::start(parts, body, (class, policy, allowed), setup);
    Ok(relay::run(route, &proxy.metrics, config, started).await)
}
