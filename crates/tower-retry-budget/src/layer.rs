//! The [`RetryBudgetLayer`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};
use retry_budget::{Action, Policy};
use tower::retry::budget::Budget;
use tower::Layer;

use crate::attempt_info::AttemptDeadlines;
use crate::budget::SharedBudget;
use crate::calendar::{Calendar, DateReference, SystemCalendar};
use crate::extra::ExtraList;
use crate::hold_off::HoldOff;
use crate::observer::{Observer, SharedObserver};
use crate::pace::Pacing;
use crate::response_signal::{HttpSignal, RetrySignal, Signal};
use crate::RetryBudget;

/// Wraps a service in [`RetryBudget`].
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_retry_budget::{Policy, RetryBudgetLayer};
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(client);
/// # let _ = client;
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryBudgetLayer {
    config: Arc<Config>,
}

/// The layer's configuration, shared (not copied) by every service it makes
/// and every action they run: the policy, how responses are read, and what
/// the actions of one client share (the cross-request budget, the hold-off
/// map, the jitter seeds, the observer). Runtime state lives in the
/// response future.
#[derive(Clone)]
pub(crate) struct Config {
    /// Shared by every action under it (an action keeps a reference).
    pub(crate) policy: Arc<Policy>,
    /// The calendar clock for HTTP-dates; `None`: the system's.
    pub(crate) calendar: Option<Arc<dyn Calendar + Send + Sync>>,
    pub(crate) dates: DateReference,
    /// How a response head is read; `None`: [`HttpSignal`].
    pub(crate) signal: Option<Arc<dyn RetrySignal + Send + Sync>>,
    pub(crate) budget: Option<SharedBudget>,
    pub(crate) seeds: Option<Arc<Seeds>>,
    pub(crate) report_mode: ReportMode,
    /// What the actions tell besides the core (a hold-off map, an observer,
    /// attempt deadlines, and what a request's extensions ask for): each
    /// reached through [`extra`](crate::extra) only.
    pub(crate) extras: ExtraList,
}

impl Default for Config {
    fn default() -> Self {
        Self::new(Policy::default())
    }
}

/// Which responses carry a [`Report`](crate::Report) in their extensions;
/// see [`RetryBudgetLayer::report_mode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportMode {
    /// Every budgeted response (the default): the caller always learns what
    /// happened.
    #[default]
    Always,
    /// Only responses of actions that sent more than one attempt, or that
    /// the caller asked about (a [`ReportSlot`](crate::ReportSlot) in the
    /// request) or an [`Observer`] watches. A response to a first attempt
    /// that ended the action carries none: no report is built. That saves
    /// the report's allocations (its box and, if the
    /// response has none yet, its extension map), most of what the layer
    /// costs on a request answered at once (`BENCHMARKS.md`). Errors always
    /// carry their report.
    WhenRetried,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field(
                "calendar",
                &self.calendar.as_ref().map_or("system", |_| "custom"),
            )
            .field("dates", &self.dates)
            .field("signal", &self.signal.as_ref().map_or("http", |_| "custom"))
            .field("budget", &self.budget)
            .field("seeds", &self.seeds)
            .field("report_mode", &self.report_mode)
            .field("extras", &self.extras)
            .finish()
    }
}

impl Config {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            policy: Arc::new(policy),
            calendar: None,
            dates: DateReference::default(),
            signal: None,
            budget: None,
            seeds: None,
            report_mode: ReportMode::default(),
            extras: ExtraList::default(),
        }
    }

    /// A new action under this configuration.
    #[inline(always)]
    pub(crate) fn action(&self) -> Action {
        match &self.seeds {
            Some(seeds) => Action::with_seed(self.policy.clone(), seeds.next()),
            None => Action::new(self.policy.clone()),
        }
    }

    /// What a response head tells the budget.
    pub(crate) fn read(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Signal {
        match &self.signal {
            None => HttpSignal.read(status, headers, extensions),
            Some(signal) => signal.read(status, headers, extensions),
        }
    }

    /// The calendar reading at receipt of a response with these headers.
    pub(crate) fn calendar_reading(&self, headers: &HeaderMap) -> Option<SystemTime> {
        match &self.calendar {
            None => self.dates.reading(&SystemCalendar, headers),
            Some(calendar) => self.dates.reading(calendar.as_ref(), headers),
        }
    }
}

/// Per-action jitter seeds derived from one seed: the n-th action of the
/// layer gets `splitmix64(seed + n)`.
#[derive(Debug)]
pub(crate) struct Seeds {
    base: u64,
    next: AtomicU64,
}

impl Seeds {
    pub(crate) fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        splitmix64(self.base.wrapping_add(n))
    }
}

/// Sebastiano Vigna's SplitMix64 finaliser: consecutive inputs give
/// unrelated seeds.
const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl RetryBudgetLayer {
    /// A layer with this policy, the system calendar clock, and dates
    /// measured against it. [`RetryBudgetLayer::default`] is the same with
    /// [`Policy::default`].
    pub fn new(policy: Policy) -> Self {
        Self {
            config: Arc::new(Config::new(policy)),
        }
    }

    /// The layer with its configuration changed by `set` (copied first if
    /// a service made by the layer shares it).
    fn with(mut self, set: impl FnOnce(&mut Config)) -> Self {
        let config = Arc::make_mut(&mut self.config);
        set(config);
        self
    }

    /// Uses another calendar clock for HTTP-date `Retry-After` values (for
    /// example [`UntrustedCalendar`](crate::calendar::UntrustedCalendar) on a host
    /// whose wall clock cannot be trusted). It is read only when a response
    /// carries a date.
    pub fn calendar(self, calendar: impl Calendar + Send + Sync + 'static) -> Self {
        self.with(|c| c.calendar = Some(Arc::new(calendar)))
    }

    /// Reads responses with another [`RetrySignal`]: for gRPC,
    /// [`GrpcSignal`](crate::response_signal::GrpcSignal) (Trailers-Only `grpc-status: 8`
    /// RESOURCE_EXHAUSTED as `429`, `grpc-retry-pushback-ms` as the server's
    /// delay, a negative or malformed pushback forbidding the retry). The
    /// default, [`HttpSignal`], reads the status and `Retry-After`.
    ///
    /// ```
    /// use tower_retry_budget::{response_signal::GrpcSignal, Policy, RetryBudgetLayer};
    ///
    /// let layer = RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal);
    /// # let _ = layer;
    /// ```
    pub fn signal(self, signal: impl RetrySignal + Send + Sync + 'static) -> Self {
        self.with(|c| c.signal = Some(Arc::new(signal)))
    }

    /// Bounds the retries of all actions through this layer (and its clones)
    /// to a ratio of their first attempts: see [`ClientBudget`]. Any
    /// [`Budget`] works, tower's
    /// `TpsBudget` included. A retry it refuses ends its action as
    /// `retry_throttled`.
    ///
    /// [`ClientBudget`]: crate::budget::ClientBudget
    pub fn client_budget<B>(self, budget: B) -> Self
    where
        B: Budget + Send + Sync + 'static,
    {
        self.with(|c| c.budget = Some(SharedBudget::new(budget)))
    }

    /// Makes later first attempts to a service honour a `Retry-After` that
    /// service gave another action: see [`HoldOff`].
    pub fn hold_off(self, hold_off: HoldOff) -> Self {
        self.with(|c| c.extras.hold_off = Some(hold_off))
    }

    /// Paces first attempts by the quota the services announce on their
    /// responses (`RateLimit`, `X-RateLimit-*`, ...): see [`Pacing`]. Off
    /// by default; retries are never paced.
    ///
    /// ```
    /// use tower_retry_budget::pace::Pacing;
    /// use tower_retry_budget::{Policy, RetryBudgetLayer};
    ///
    /// let layer = RetryBudgetLayer::new(Policy::default()).pace(Pacing::new());
    /// # let _ = layer;
    /// ```
    pub fn pace(self, pacing: Pacing) -> Self {
        self.with(|c| c.extras.pacing = Some(pacing))
    }

    /// Seeds the jitter of every action from `seed` (the n-th action gets
    /// its own seed derived from it), so that a run is reproducible. Without
    /// it, each action is seeded at random. Matters only if the policy has
    /// [`Jitter`](crate::Jitter). Under a seeded layer every action creates
    /// its core `Action` when it starts (the seeds then follow the actions,
    /// whatever listens), which costs a first attempt answered at once
    /// about what [`ReportMode::Always`] costs.
    pub fn jitter_seed(self, seed: u64) -> Self {
        self.with(|c| {
            c.seeds = Some(Arc::new(Seeds {
                base: seed,
                next: AtomicU64::new(0),
            }))
        })
    }

    /// Hands every step of every budgeted action (typed
    /// [`Event`](crate::observer::Event)s with the request's [`ActionId`]) and
    /// every final report to `observer`: see [`Observer`]. The layer's
    /// clones and the services it makes share it, and share one id counter.
    ///
    /// [`ActionId`]: crate::observer::ActionId
    pub fn observer(self, observer: impl Observer) -> Self {
        self.with(|c| c.extras.observer = Some(SharedObserver::new(observer)))
    }

    /// Chooses which responses carry a report: [`ReportMode::Always`] (the
    /// default) or [`ReportMode::WhenRetried`], for a proxy that counts
    /// outcomes through an [`Observer`] and would rather not pay for a
    /// report on every response that needed no retry.
    ///
    /// ```
    /// use tower_retry_budget::{Policy, ReportMode, RetryBudgetLayer};
    ///
    /// let layer = RetryBudgetLayer::new(Policy::default()).report_mode(ReportMode::WhenRetried);
    /// # let _ = layer;
    /// ```
    pub fn report_mode(self, mode: ReportMode) -> Self {
        self.with(|c| c.report_mode = mode)
    }

    /// Puts an [`AttemptDeadline`](crate::AttemptDeadline) (the attempt's
    /// number and the time the core reserved for it) in the extensions of
    /// every attempt sent, for a layer below that tells the upstream its
    /// deadline (a proxy writing `grpc-timeout`). Off by default: the first
    /// extension of a request allocates its extension map, which costs more
    /// than the rest of a first attempt that answers at once.
    ///
    /// ```
    /// use tower_retry_budget::{Policy, RetryBudgetLayer};
    ///
    /// let layer = RetryBudgetLayer::new(Policy::default()).attempt_deadlines();
    /// # let _ = layer;
    /// ```
    pub fn attempt_deadlines(self) -> Self {
        self.with(|c| c.extras.deadlines = Some(AttemptDeadlines))
    }

    /// Chooses what an HTTP-date is measured against; see
    /// [`DateReference`].
    pub fn dates(self, dates: DateReference) -> Self {
        self.with(|c| c.dates = dates)
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.config.policy
    }
}

impl<S> Layer<S> for RetryBudgetLayer {
    type Service = RetryBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryBudget::from_config(inner, self.config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_copies_a_configuration_a_service_shares() {
        let plain = RetryBudgetLayer::new(Policy::default());
        let shared = plain.clone();
        let _service = shared.layer(tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        }));
        let seeded = shared.jitter_seed(1).attempt_deadlines();
        let deadlines = |layer: &RetryBudgetLayer| layer.config.extras.deadlines.is_some();
        assert!(seeded.config.seeds.is_some() && deadlines(&seeded));
        assert!(plain.config.seeds.is_none() && !deadlines(&plain));
        assert!(!Arc::ptr_eq(&plain.config, &seeded.config));
    }
}
