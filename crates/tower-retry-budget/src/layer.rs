//! The [`RetryBudgetLayer`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use retry_budget::Policy;
use tower::retry::budget::Budget;
use tower::Layer;

use crate::budget::SharedBudget;
use crate::calendar::{DateReference, SystemCalendar};
use crate::hold_off::HoldOff;
use crate::observer::{Observer, SharedObserver};
use crate::signal::{HttpSignal, RetrySignal};
use crate::RetryBudget;

/// Wraps a service in [`RetryBudget`].
///
/// ```
/// use retry_budget::Policy;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::RetryBudgetLayer;
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(client);
/// # let _ = client;
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudgetLayer<C = SystemCalendar, G = HttpSignal> {
    policy: Policy,
    calendar: C,
    dates: DateReference,
    client: ClientState,
    signal: G,
}

/// What the actions of one client share: the cross-request budget, the
/// hold-off map and the jitter seeds. All optional, all cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct ClientState {
    pub(crate) budget: Option<SharedBudget>,
    pub(crate) hold_off: Option<HoldOff>,
    pub(crate) seeds: Option<Arc<Seeds>>,
    pub(crate) observer: Option<SharedObserver>,
}

impl ClientState {
    pub(crate) const NONE: Self = Self {
        budget: None,
        hold_off: None,
        seeds: None,
        observer: None,
    };
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
    /// measured against it.
    pub const fn new(policy: Policy) -> Self {
        Self {
            policy,
            calendar: SystemCalendar,
            dates: DateReference::LocalClock,
            client: ClientState::NONE,
            signal: HttpSignal,
        }
    }
}

impl<C, G> RetryBudgetLayer<C, G> {
    /// Uses another calendar clock for HTTP-date `Retry-After` values (for
    /// example [`UntrustedCalendar`](crate::UntrustedCalendar) on a host
    /// whose wall clock cannot be trusted).
    pub fn calendar<C2>(self, calendar: C2) -> RetryBudgetLayer<C2, G> {
        RetryBudgetLayer {
            policy: self.policy,
            calendar,
            dates: self.dates,
            client: self.client,
            signal: self.signal,
        }
    }

    /// Reads responses with another [`RetrySignal`]: for gRPC,
    /// [`GrpcSignal`](crate::GrpcSignal) (Trailers-Only `grpc-status: 8`
    /// RESOURCE_EXHAUSTED as `429`, `grpc-retry-pushback-ms` as the server's
    /// delay, a negative or malformed pushback forbidding the retry). The
    /// default, [`HttpSignal`], reads the status and `Retry-After`.
    ///
    /// ```
    /// use retry_budget::Policy;
    /// use tower_retry_budget::{GrpcSignal, RetryBudgetLayer};
    ///
    /// let layer = RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal);
    /// # let _ = layer;
    /// ```
    pub fn signal<G2: RetrySignal>(self, signal: G2) -> RetryBudgetLayer<C, G2> {
        RetryBudgetLayer {
            policy: self.policy,
            calendar: self.calendar,
            dates: self.dates,
            client: self.client,
            signal,
        }
    }

    /// Bounds the retries of all actions through this layer (and its clones)
    /// to a ratio of their first attempts: see [`ClientBudget`] and the
    /// [`budget` docs](crate::budget). Any [`Budget`] works, tower's
    /// `TpsBudget` included. A retry it refuses ends its action as
    /// `retry_throttled`.
    ///
    /// [`ClientBudget`]: crate::ClientBudget
    pub fn client_budget<B>(mut self, budget: B) -> Self
    where
        B: Budget + Send + Sync + 'static,
    {
        self.client.budget = Some(SharedBudget(Arc::new(budget)));
        self
    }

    /// Makes later first attempts to a service honour a `Retry-After` that
    /// service gave another action: see [`HoldOff`] and the
    /// [`hold_off` docs](crate::hold_off).
    pub fn hold_off(mut self, hold_off: HoldOff) -> Self {
        self.client.hold_off = Some(hold_off);
        self
    }

    /// Seeds the jitter of every action from `seed` (the n-th action gets
    /// its own seed derived from it), so that a run is reproducible. Without
    /// it, each action is seeded at random. Matters only if the policy has
    /// [`Jitter`](retry_budget::Jitter).
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.client.seeds = Some(Arc::new(Seeds {
            base: seed,
            next: AtomicU64::new(0),
        }));
        self
    }

    /// Hands every step of every budgeted action (typed
    /// [`Event`](retry_budget::Event)s with the request's [`ActionId`]) and
    /// every final report to `observer`: see [`Observer`]. The layer's clones and the
    /// services it makes share it, and share one id counter.
    ///
    /// [`ActionId`]: crate::ActionId
    /// [`Observer`]: crate::Observer
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.client.observer = Some(SharedObserver::new(observer));
        self
    }

    /// Chooses what an HTTP-date is measured against; see
    /// [`DateReference`].
    pub const fn dates(mut self, dates: DateReference) -> Self {
        self.dates = dates;
        self
    }

    /// The policy.
    pub const fn policy(&self) -> &Policy {
        &self.policy
    }
}

impl<S, C: Clone, G: Clone> Layer<S> for RetryBudgetLayer<C, G> {
    type Service = RetryBudget<S, C, G>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryBudget::from_parts(
            inner,
            self.policy,
            self.calendar.clone(),
            self.dates,
            self.client.clone(),
            self.signal.clone(),
        )
    }
}
