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
//!    ([`Relay`]).
//!
//! Every wait, stop and outcome is then the layer's (the core's).
//!
//! [`Policy`]: retry_budget::Policy

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use arc_swap::ArcSwap;
use http::{Request, Response, Version};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::args::ProxyConfig;
use super::classify::{policy_of, Class};
use super::deadline;
use super::fields::Fields;
use super::hop;
use super::metrics::Metrics;
use super::refuse;
use super::relay::Relay;
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
/// response). An HTTP/1 request is prepared here, its action sent when the
/// future is first polled; an HTTP/2 stream's waits first (see
/// [`Handled::Paused`]).
pub fn handle(
    proxy: &Arc<Proxy>,
    request: Request<Incoming>,
    connection: &CancellationToken,
) -> Handled<impl Future<Output = ()> + Send> {
    let received = Instant::now();
    if request.version() == Version::HTTP_2 {
        return Handled::Paused {
            pause: tokio::task::yield_now(),
            held: Some((proxy.clone(), request, connection.clone(), received)),
        };
    }
    prepare(proxy, request, (connection, false), received)
}

/// What an HTTP/2 stream's handler holds while it pends once (see
/// [`Handled::Paused`]): the proxy, the request, its connection's token
/// and when it was received.
type Held = (Arc<Proxy>, Request<Incoming>, CancellationToken, Instant);

pin_project! {
    /// The future of one request's handling (see [`handle`]). Written out,
    /// not an `async fn`: it holds the action's [`Relay`] once, not beside
    /// the request it was made from.
    #[project = HandledProj]
    pub enum Handled<P> {
        /// An HTTP/2 stream, pending once before anything is sent: hyper
        /// looks for a client's RST_STREAM only while the stream's handler
        /// is pending, so a stream the client reset at once (HEADERS then
        /// RST_STREAM, as a reset flood sends them) ends here: no action,
        /// no upstream connection opened for it.
        Paused {
            #[pin]
            pause: P,
            held: Option<Held>,
        },
        /// The action, sent; the route's table held until it ends, so
        /// that a reload does not take its route away.
        Relaying {
            #[pin]
            relay: Relay,
            table: Arc<Table>,
        },
        /// The proxy's own answer, nothing sent.
        Answered { response: Option<Response<ProxyBody>> },
    }
}

impl<P: Future<Output = ()>> Future for Handled<P> {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                HandledProj::Paused { pause, held } => {
                    ready!(pause.poll(cx));
                    let Some((proxy, request, connection, received)) = held.take() else {
                        panic!("`Handled` polled after completion");
                    };
                    let next = prepare(&proxy, request, (&connection, true), received);
                    self.set(next);
                }
                HandledProj::Relaying { relay, .. } => return relay.poll(cx).map(Ok),
                HandledProj::Answered { response } => {
                    let response = response.take();
                    return Poll::Ready(Ok(response.expect("`Handled` polled after completion")));
                }
            }
        }
    }
}

/// The proxy's own answer.
fn answered<P>(response: Response<ProxyBody>) -> Handled<P> {
    Handled::Answered {
        response: Some(response),
    }
}

/// Steps 1 to 6 of the [module docs](self), then the action sent; or the
/// proxy's own answer. `http2`: whether each stream's action gets a token
/// of its own (see [`Proxy::connection_token`]).
fn prepare<P>(
    proxy: &Proxy,
    request: Request<Incoming>,
    (connection, http2): (&CancellationToken, bool),
    received: Instant,
) -> Handled<P> {
    let (mut parts, body) = request.into_parts();
    if let Some(refused) = refuse::method(&parts) {
        return answered(refused);
    }
    let config = &*proxy.config;
    let table = proxy.table.load_full();
    let (route, strip) = match table.select(&parts) {
        Ok(selected) => selected,
        Err(miss) => return answered(refuse::route(&parts, miss)),
    };
    let upstream = &route.config.upstream;
    let uri = match upstream.uri_under(parts.uri.path_and_query(), strip) {
        Ok(uri) => uri,
        Err(error) => return answered(refuse::target(&parts, &error)),
    };
    hop::strip_request(&mut parts.headers);
    let fields = Fields::of(&parts.headers);
    let class = Class::of(&parts, &fields, uri.path(), &route.config);
    let allowed = deadline::read(&fields);
    let policy = match policy_of(route.config.policy, allowed.map(|a| a.time), class.once) {
        Ok(policy) => policy,
        Err(refused) => return answered(refuse::policy(&parts, &refused)),
    };
    upstream.prepare(&mut parts, uri, &body);
    let setup = Setup {
        id: proxy.next_id(),
        cancel: if http2 {
            connection.child_token()
        } else {
            connection.clone()
        },
        metrics: &proxy.metrics,
        format: config.log_format,
        received,
        route: route.name.clone(),
    };
    let started = start::start(parts, body, (class, policy, allowed), setup);
    let relay = Relay::new(route, &proxy.metrics, config, started);
    Handled::Relaying { relay, table }
}
