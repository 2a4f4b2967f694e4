//! The client stack every request goes through, outermost first:
//!
//! ```text
//! ReplayBodyLayer        (64 KiB of a retryable body kept; larger: sent once)
//!   → mark Idempotent    (every request is budgeted; its policy says how often)
//!   → RetryBudgetLayer   (this request's policy; reset headers if asked;
//!                         the client-wide budget, hold-off and observer
//!                         shared by all)
//!   → QuotaLayer         (--preset openai: a 429's JSON body read for
//!                         insufficient_quota; otherwise untouched)
//!   → ConcurrencyLimit   (--concurrency: inside the retry layer, so an
//!                         action waiting between attempts holds no slot)
//!   → AttemptLayer       (retry-budget-attempt, deadline header, attempt span)
//!   → hyper-util Client  (HTTP/1.1 or HTTP/2, http:// or https://)
//! ```
//!
//! The part below the retry layer is built once and cloned per request
//! (the clones share the connection pool and the limit's semaphore). The
//! retry layer is made per request, because a caller's deadline or a
//! request that must go once gives that request its own [`Policy`]; what
//! the actions share (client budget, hold-off map, the metrics observer)
//! is passed in by handle, so the many-action parts work across requests as
//! in one long-lived layer. (The handler puts an `ActionId` in each
//! request, so the observer's ids stay unique across these layers.)

use http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use retry_budget::Policy;
use tower::limit::ConcurrencyLimitLayer;
use tower::util::Either;
use tower::{Layer, ServiceBuilder};
use tower_retry_budget::{
    budget::ClientBudget,
    calendar::UntrustedCalendar,
    hold_off::HoldOff,
    quota::{Quota, QuotaLayer},
    replay::{ReplayBody, ReplayBodyLayer},
    signal::ResetSignal,
    Idempotent, RetryBudget, RetryBudgetLayer,
};

use crate::connector::{self, Connector};

use super::args::Config;
use super::attempt::{Attempt, AttemptLayer};
use super::body::CallerBody;
use super::metrics::Metrics;

/// The body sent upstream: the caller's, replayable up to 64 KiB.
pub type UpstreamBody = ReplayBody<CallerBody>;

/// The hyper-util client.
pub type UpstreamClient = Client<Connector, UpstreamBody>;

/// Everything below the retry layer.
pub type Below =
    Either<tower::limit::ConcurrencyLimit<Attempt<UpstreamClient>>, Attempt<UpstreamClient>>;

/// The service one request is sent through.
pub type PerRequest = tower_retry_budget::replay::ReplayBodyService<
    tower::util::MapRequest<
        RetryBudget<Quota<Below>>,
        fn(Request<UpstreamBody>) -> Request<UpstreamBody>,
    >,
>;

/// The shared parts of the stack; see the [module docs](self).
#[derive(Clone)]
pub struct Stack {
    below: Below,
    /// `--untrusted-clock`: no calendar time for Retry-After dates.
    untrusted_clock: bool,
    reset: Option<ResetSignal>,
    /// Reads a 429's JSON body for a quota used up (no codes: untouched).
    quota: QuotaLayer,
    client_budget: Option<ClientBudget>,
    hold_off: Option<HoldOff>,
    metrics: Metrics,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("untrusted_clock", &self.untrusted_clock)
            .field("client_budget", &self.client_budget)
            .field("hold_off", &self.hold_off)
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
pub fn hold_off(config: &Config) -> Result<Option<HoldOff>, String> {
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

impl Stack {
    /// Builds the client and the shared parts.
    ///
    /// # Errors
    ///
    /// A one-line message: the TLS roots could not be loaded, or the
    /// hold-off's store could not start.
    pub fn new(config: &Config, metrics: Metrics) -> Result<Self, String> {
        let client = client(config)?;
        let below = ServiceBuilder::new()
            .option_layer(
                config
                    .concurrency
                    .map(|n| ConcurrencyLimitLayer::new(n.get())),
            )
            .layer(AttemptLayer)
            .service(client);
        let hold_off = hold_off(config)?;
        if let Some(map) = &hold_off {
            metrics.watch_hold_off(map.clone());
        }
        Ok(Self {
            below,
            untrusted_clock: !config.trusted_clock,
            reset: config.reset.clone(),
            quota: config.quota.clone(),
            client_budget: config.client_budget.clone(),
            hold_off,
            metrics,
        })
    }

    /// The service for one request under `policy`.
    pub fn service(&self, policy: Policy) -> PerRequest {
        let mut layer = RetryBudgetLayer::new(policy)
            .observer(self.metrics.clone())
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
        if let Some(map) = &self.hold_off {
            layer = layer.hold_off(map.clone());
        }
        let mark: fn(Request<UpstreamBody>) -> Request<UpstreamBody> = budget_it;
        let below = self.quota.layer(self.below.clone());
        ReplayBodyLayer::new().layer(tower::util::MapRequest::new(layer.layer(below), mark))
    }
}

/// Every request is budgeted, so that every one has a deadline, can be
/// cancelled, and gets a report; a write that must not be repeated is given
/// a one-attempt policy by the caller of [`Stack::service`] instead. Placed
/// below the replay layer, which has already chosen how much of the body to
/// keep (nothing for a write not marked idempotent by the caller).
fn budget_it(mut request: Request<UpstreamBody>) -> Request<UpstreamBody> {
    request.extensions_mut().insert(Idempotent);
    request
}

/// The hyper-util client over the CLI's one connector, HTTP/2 only if
/// asked.
fn client(config: &Config) -> Result<UpstreamClient, String> {
    let tls = crate::tls::client_config(config.cacert.as_deref(), config.upstream.is_https())?;
    let connector = connector::build(tls, config.upstream_http2);
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_only(config.upstream_http2)
        .build(connector))
}
