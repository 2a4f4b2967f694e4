//! The client stack every request goes through, outermost first:
//!
//! ```text
//! ReplayBodyLayer        (64 KiB of a retryable body kept; larger: sent once)
//!   → RetryBudgetLayer   (this request's policy; reset headers if asked;
//!                         the client-wide budget, hold-off and observer
//!                         shared by all)
//!   → PeekLayer          (--preset openai: a 429's JSON body read for
//!                         insufficient_quota; otherwise untouched)
//!   → ConcurrencyLimit   (--concurrency: inside the retry layer, so an
//!                         action waiting between attempts holds no slot)
//!   → AttemptLayer       (retry-budget-attempt, deadline header, attempt span)
//!   → hyper-util Client  (HTTP/1.1 or HTTP/2, http:// or https://)
//! ```
//!
//! Each worker thread has a stack of its own for each route (its own
//! hyper-util client, so its upstream connections are driven on its own
//! thread); what the actions of all workers share ([`Shared`]: the client
//! budget, the hold-off map, the `--concurrency` semaphore, the metrics
//! observer) is built once per route and passed in by handle, so the
//! many-action parts work across requests and workers as in one
//! long-lived layer. (The handler
//! puts an `ActionId` in each request, so the observer's ids stay unique.)
//!
//! The whole service is built once per worker and route for the two
//! policies nearly every request has (the route's own, and the one-attempt
//! policy of a request that must go once) and cloned per request; only a request whose
//! caller sent a deadline, which gives it a [`Policy`] of its own, gets a
//! retry layer made for it.

use std::sync::Arc;

use http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use retry_budget::trail::{Event, EventKind};
use retry_budget::Policy;
use retry_budget::Report;
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::util::Either;
use tower::{Layer, ServiceBuilder};
use tower_retry_budget::observer::{ActionId, Observer};
use tower_retry_budget::{
    body_replay::{ReplayBody, ReplayBodyLayer},
    budget::ClientBudget,
    calendar::UntrustedCalendar,
    hold_off::{HoldOff, RedisAllowance},
    pace::Pacing,
    peek::{Peek, PeekLayer},
    response_signal::ResetSignal,
    RetryBudget, RetryBudgetLayer,
};

use crate::common::connector::{self, Connector};

use super::attempt::{Attempt, AttemptLayer};
use super::metrics::Metrics;
use super::relay_body::CallerBody;
use super::route::RouteConfig;
use super::route_metrics::RouteSeries;

/// The body sent upstream: the caller's, replayable up to 64 KiB.
pub type UpstreamBody = ReplayBody<CallerBody>;

/// The hyper-util client.
pub type UpstreamClient = Client<Connector, UpstreamBody>;

/// Everything below the retry layer.
pub type Below =
    Either<tower::limit::ConcurrencyLimit<Attempt<SharedClient>>, Attempt<SharedClient>>;

/// The service one request is sent through.
pub type PerRequest = tower_retry_budget::body_replay::ReplayBodyService<RetryBudget<Peek<Below>>>;

/// A worker's client, shared by the services of its requests: cloning one
/// (once per request, with the rest of its service) takes one reference,
/// not a copy of each of the client's parts. (hyper-util's `Client::request`
/// takes `&self`; its tower `Service` impl is for an owned or borrowed
/// client only.)
#[derive(Debug, Clone)]
pub struct SharedClient(Arc<UpstreamClient>);

impl tower::Service<Request<UpstreamBody>> for SharedClient {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // As the client's own: always ready (its pool waits in the call).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<UpstreamBody>) -> Self::Future {
        self.0.request(request)
    }
}

/// What the stacks of all workers share, built once; see the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct Shared {
    /// The TLS configuration (roots read once, not once per worker).
    tls: Arc<rustls::ClientConfig>,
    hold_off: Option<HoldOff>,
    /// The pacers of the upstream (one per authority), unless `--no-pace`.
    pacing: Option<Pacing>,
    /// `--concurrency`: one limit over all workers and routes.
    concurrency: Option<Arc<Semaphore>>,
    /// The metrics, and the route's own series for a route of a file.
    observer: RouteObserver,
}

impl Shared {
    /// Builds the shared parts of a route, with its hold-off (made by
    /// [`hold_off`], or another route's with the same settings).
    ///
    /// # Errors
    ///
    /// A one-line message: the TLS roots could not be loaded.
    pub fn new(
        config: &RouteConfig,
        (concurrency, named): (Option<Arc<Semaphore>>, bool),
        metrics: Metrics,
        hold_off: Option<HoldOff>,
    ) -> Result<Self, String> {
        let tls = crate::common::tls::client_config(
            config.cacert.as_deref(),
            config.upstream.is_https(),
        )?;
        if let Some(map) = hold_off
            .as_ref()
            .filter(|_| config.hold_off_redis.is_some())
        {
            metrics.watch_hold_off(map.clone());
        }
        if let Some(pacing) = &config.pacing {
            metrics.watch_pacing(pacing.clone());
        }
        Ok(Self {
            tls,
            hold_off,
            pacing: config.pacing.clone(),
            concurrency,
            observer: RouteObserver::new(metrics, named.then_some(config.name.as_str())),
        })
    }
}

/// One route's stack on one worker; see the [module docs](self).
#[derive(Clone)]
pub struct Stack {
    below: Below,
    /// `--untrusted-clock`: no calendar time for Retry-After dates.
    untrusted_clock: bool,
    reset: Option<ResetSignal>,
    /// Reads a 429's JSON body for a quota used up (no codes: untouched).
    quota: PeekLayer,
    client_budget: Option<ClientBudget>,
    shared: Shared,
    /// The service of every request under one of these policies, built
    /// once.
    built: Vec<(Policy, PerRequest)>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("untrusted_clock", &self.untrusted_clock)
            .field("client_budget", &self.client_budget)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// The shared hold-off map of the proxy, if on, shared with other proxies
/// through Redis if `--hold-off-redis` is given (its task starts on the
/// current runtime).
///
/// # Errors
///
/// A one-line message naming the flag.
pub fn hold_off(config: &RouteConfig) -> Result<Option<HoldOff>, String> {
    if !config.hold_off {
        return Ok(None);
    }
    let mut builder = HoldOff::builder().max_hold(config.max_hold);
    if let Some(store) = &config.hold_off_redis {
        builder = builder.redis(store.clone());
    }
    builder
        .build()
        .map(Some)
        .map_err(|e| format!("--hold-off-redis: {e}"))
}

/// A route's pacing, unless it is off; with `--hold-off-redis`, its
/// windows' allowance shared with the other proxies on the same store (its
/// task starts on the current runtime).
///
/// # Errors
///
/// A one-line message naming the flag.
pub fn pacing(config: &RouteConfig) -> Result<Option<Pacing>, String> {
    let Some(pacing) = config.pacing.clone() else {
        return Ok(None);
    };
    let Some(store) = &config.hold_off_redis else {
        return Ok(Some(pacing));
    };
    let allowance = RedisAllowance::new(store).map_err(|e| format!("--hold-off-redis: {e}"))?;
    Ok(Some(pacing.shared(allowance)))
}

impl Stack {
    /// Builds a worker's client, and its services for `policies` (the
    /// policies most requests have).
    pub fn new(config: &RouteConfig, shared: &Shared, policies: &[Policy]) -> Self {
        let client = SharedClient(Arc::new(client(config, shared.tls.clone())));
        let below = ServiceBuilder::new()
            .option_layer(
                shared
                    .concurrency
                    .clone()
                    .map(GlobalConcurrencyLimitLayer::with_semaphore),
            )
            .layer(AttemptLayer)
            .service(client);
        let mut stack = Self {
            below,
            untrusted_clock: !config.trusted_clock,
            reset: config.reset.clone(),
            quota: config.quota.clone(),
            client_budget: config.client_budget.clone(),
            shared: shared.clone(),
            built: Vec::new(),
        };
        stack.built = policies.iter().map(|p| (*p, stack.build(*p))).collect();
        stack
    }

    /// The service for one request under `policy`.
    pub fn service(&self, policy: Policy) -> PerRequest {
        match self.built.iter().find(|(p, _)| *p == policy) {
            Some((_, service)) => service.clone(),
            None => self.build(policy),
        }
    }

    fn build(&self, policy: Policy) -> PerRequest {
        let mut layer = RetryBudgetLayer::new(policy)
            .observer(self.shared.observer.clone())
            .attempt_deadlines();
        if self.untrusted_clock {
            layer = layer.calendar(UntrustedCalendar);
        }
        if let Some(reset) = &self.reset {
            layer = layer.signal(reset.clone());
        }
        if let Some(budget) = &self.client_budget {
            layer = layer.client_budget(budget.clone());
        }
        if let Some(map) = &self.shared.hold_off {
            layer = layer.hold_off(map.clone());
        }
        if let Some(pacing) = &self.shared.pacing {
            layer = layer.pace(pacing.clone());
        }
        let below = self.quota.layer(self.below.clone());
        ReplayBodyLayer::new().layer(layer.layer(below))
    }
}

/// The hyper-util client over the CLI's one connector, HTTP/2 only if
/// asked.
fn client(config: &RouteConfig, tls: Arc<rustls::ClientConfig>) -> UpstreamClient {
    let connector = connector::build(tls, config.upstream.http2);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_only(config.upstream.http2)
        .build(connector)
}

/// A route's observer: the proxy-wide metrics, and the route's own series
/// for a route of a config file; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct RouteObserver {
    metrics: Metrics,
    series: Option<Arc<RouteSeries>>,
}

impl RouteObserver {
    /// The observer of route `name` (`None`: the flags' one route, no
    /// series of its own).
    pub fn new(metrics: Metrics, name: Option<&str>) -> Self {
        let series = name.map(|name| Arc::new(metrics.route_families().series(name)));
        Self { metrics, series }
    }
}

impl Observer for RouteObserver {
    fn on_event(&self, id: ActionId, event: &Event) {
        self.metrics.event(id.0, event);
        if let (Some(series), EventKind::Response { status, .. }) = (&self.series, &event.kind) {
            series.response(*status);
        }
    }

    fn on_report(&self, id: ActionId, report: &Report) {
        self.metrics.report_of(id.0, report);
        if let Some(series) = &self.series {
            series.report(report);
        }
    }
}
