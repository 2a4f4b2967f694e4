//! The [`SingleFlight`] service: which requests are coalesced, and under
//! which key.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Method, Request, Response, Uri};
use http_body::Body as HttpBody;
use tower::util::Oneshot;
use tower::{BoxError, Service};

use super::body::Body;
use super::config::Config;
use super::error::Error;
use super::flight::{Joined, Registry};
use super::future::{Collect, ResponseFuture};

/// What makes two requests "the same" for single flight.
///
/// Implemented by [`MethodAndUri`] (the default) and by every closure
/// `Fn(&http::request::Parts) -> Option<K>`. `None` means "never coalesce
/// this request". Whatever the key, only safe methods (GET, HEAD, OPTIONS,
/// TRACE) are ever coalesced.
///
/// The key must cover everything that can change the response: if two
/// users' requests to the same URI get different answers (credentials,
/// `Accept-Language`), put that in the key, or one user gets the other's
/// response.
///
/// ```
/// use http::request::Parts;
/// use tower_retry_budget::single_flight::SingleFlightLayer;
///
/// // Path and credentials; the query string does not matter here.
/// let layer = SingleFlightLayer::new().key(|parts: &Parts| {
///     let user = parts.headers.get("authorization")?.as_bytes().to_vec();
///     Some((parts.uri.path().to_owned(), user))
/// });
/// # let _ = layer;
/// ```
pub trait FlightKey {
    /// The key.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The key of a request, or `None` to never coalesce it.
    fn key(&self, request: &Parts) -> Option<Self::Key>;
}

/// The default [`FlightKey`]: method and full URI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MethodAndUri;

impl FlightKey for MethodAndUri {
    type Key = (Method, Uri);

    fn key(&self, request: &Parts) -> Option<Self::Key> {
        Some((request.method.clone(), request.uri.clone()))
    }
}

impl<F, K> FlightKey for F
where
    F: Fn(&Parts) -> Option<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;

    fn key(&self, request: &Parts) -> Option<K> {
        self(request)
    }
}

/// Makes identical in-flight safe requests share one upstream action. See
/// the [module docs](super).
///
/// # Readiness
///
/// `poll_ready` is always ready: a caller that joins a flight in progress
/// needs nothing from the inner service. Each request that does go upstream
/// (the first of a flight, or one that is not coalesced) waits for the
/// readiness of its own clone of the inner service, as
/// [`tower::util::Oneshot`] does, so back-pressure below (a concurrency
/// limit) applies to upstream calls only, never to joiners.
pub struct SingleFlight<S, K: FlightKey = MethodAndUri> {
    inner: S,
    key: K,
    config: Config,
    flights: Arc<Registry<K::Key>>,
}

impl<S, K: FlightKey> SingleFlight<S, K> {
    /// Wraps `inner`, coalescing by `key`, buffering shared bodies up to
    /// `body_limit` bytes, with the default cap on keys
    /// ([`DEFAULT_MAX_KEYS`](super::DEFAULT_MAX_KEYS)) and no body timeout
    /// of its own (the leader's deadline still applies). The
    /// [`SingleFlightLayer`](super::SingleFlightLayer) sets them all.
    pub fn new(inner: S, key: K, body_limit: usize) -> Self {
        Self::with_config(
            inner,
            key,
            Config {
                body_limit,
                ..Config::default()
            },
        )
    }

    pub(crate) fn with_config(inner: S, key: K, config: Config) -> Self {
        Self {
            inner,
            key,
            flights: Arc::new(Registry::new(config.max_keys)),
            config,
        }
    }

    /// Keys with a shared action in progress: at most the cap on keys (an
    /// entry goes when its action ends or its last caller leaves).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, K: FlightKey + Clone> Clone for SingleFlight<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            key: self.key.clone(),
            config: self.config,
            flights: self.flights.clone(),
        }
    }
}

impl<S: fmt::Debug, K: FlightKey + fmt::Debug> fmt::Debug for SingleFlight<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingleFlight")
            .field("inner", &self.inner)
            .field("key", &self.key)
            .field("body_limit", &self.config.body_limit)
            .field("max_keys", &self.config.max_keys)
            .field("body_timeout", &self.config.body_timeout)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for SingleFlight<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + Sync + 'static,
    ReqB: Send + 'static,
    ResB: HttpBody + Send + 'static,
    ResB::Error: Into<BoxError>,
    K: FlightKey,
{
    type Response = Response<Body<ResB>>;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S, ReqB, ResB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let (parts, body) = request.into_parts();
        // Only safe methods (RFC 9110 §9.2.1) are coalesced.
        let key = if parts.method.is_safe() {
            self.key.key(&parts)
        } else {
            None
        };
        let request = Request::from_parts(parts, body);
        let inner = self.inner.clone();
        let Some(key) = key else {
            return ResponseFuture::passthrough(Oneshot::new(inner, request));
        };
        let Config {
            body_limit,
            body_timeout,
            ..
        } = self.config;
        let call = Oneshot::new(inner, request);
        match self.flights.join_or_start(key, call, |call| {
            Collect::new(call, body_limit, body_timeout)
        }) {
            Joined::Flight(waiter) => ResponseFuture::flight(waiter),
            Joined::Alone(call) => ResponseFuture::passthrough(call),
        }
    }
}
