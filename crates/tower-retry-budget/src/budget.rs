//! [`ClientBudget`]: the retry budget shared by a client's actions.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use retry_budget::ratio::{Ratio, RatioBudget, RatioError};
use tokio::time::Instant;
use tower::retry::budget::Budget;

use crate::clock::Clock;

/// A retry budget shared by all actions of a client, with exact arithmetic
/// and tokio's clock, bounding retries to a ratio of first attempts.
/// Clones share one budget.
///
/// # Why
///
/// Each action's own budget bounds how long one user waits. It does not
/// bound what the client as a whole asks of a service that is already
/// refusing: with 3 attempts each, a storm of 429s can triple the load. A
/// budget shared by all actions (Finagle's `RetryBudget`, tower's
/// `TpsBudget`) lets first attempts through and allows retries only up to a
/// ratio of them, plus a small reserve.
///
/// [`RetryBudgetLayer::client_budget`](crate::RetryBudgetLayer::client_budget)
/// takes any [`tower::retry::budget::Budget`], so tower's `TpsBudget` plugs
/// in as is. [`ClientBudget`] is this crate's: the same idea with exact
/// integer arithmetic (tower's `TpsBudget` turns the ratio into a whole
/// "cost per retry" and so allows 1 retry per first attempt for any ratio
/// above 0.5, tower issue #857) and tokio's clock, so that paused-time tests
/// see exact windows. The arithmetic is the core's
/// [`retry_budget::ratio::RatioBudget`].
///
/// The layer deposits once per budgeted action, when its first attempt is
/// sent, and withdraws once per retry, when the retry is planned: a refused
/// retry ends the action at once as `retry_throttled` (the last response, a
/// 429, is returned with the report), instead of waiting for nothing.
///
/// ```
/// use std::time::Duration;
/// use retry_budget::{Policy, ratio::Ratio};
/// use tower::ServiceBuilder;
/// use tower_retry_budget::{budget::ClientBudget, RetryBudgetLayer};
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// // Retries may be 20 % of first attempts, plus 1 per second, over 10 s.
/// let budget = ClientBudget::new(Ratio::percent(20)?, 1, Duration::from_secs(10))?;
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()).client_budget(budget.clone()))
///     .service(client);
/// # let _ = client;
///
/// // tower's own budget plugs in the same way.
/// let tps = tower::retry::budget::TpsBudget::new(Duration::from_secs(10), 1, 0.2);
/// let layer = RetryBudgetLayer::new(Policy::default()).client_budget(tps);
/// # let _ = layer;
/// # Ok::<(), retry_budget::ratio::RatioError>(())
/// ```
#[derive(Clone)]
pub struct ClientBudget {
    inner: Arc<Mutex<RatioBudget>>,
    origin: Instant,
}

impl ClientBudget {
    /// Retries may be `ratio` of first attempts, plus `min_per_sec` per
    /// second, counted over `window` (1 s to 60 s).
    ///
    /// # Errors
    ///
    /// [`RatioError::WindowOutOfRange`].
    pub fn new(ratio: Ratio, min_per_sec: u32, window: Duration) -> Result<Self, RatioError> {
        Ok(Self::from_core(RatioBudget::new(
            ratio,
            min_per_sec,
            window,
        )?))
    }

    /// Wraps a core budget; its elapsed zero is now.
    pub fn from_core(budget: RatioBudget) -> Self {
        Self {
            inner: Arc::new(Mutex::new(budget)),
            origin: Instant::now(),
        }
    }

    /// Retries the budget could pay now.
    pub fn available(&self) -> u64 {
        let now = self.elapsed();
        self.lock().available(now)
    }

    /// First attempts and retries that the window holds now.
    pub fn counts(&self) -> (u64, u64) {
        let now = self.elapsed();
        self.lock().counts(now)
    }

    fn elapsed(&self) -> Duration {
        crate::clock::elapsed_since(self.origin)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RatioBudget> {
        // The budget is plain counters: a panic elsewhere cannot leave it
        // half-updated in a way that matters.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for ClientBudget {
    /// tower's `TpsBudget` default: 20 % of first attempts, 10 retries per
    /// second in reserve, a 10 s window.
    fn default() -> Self {
        let budget = Ratio::percent(20)
            .and_then(|ratio| RatioBudget::new(ratio, 10, Duration::from_secs(10)));
        match budget {
            Ok(budget) => Self::from_core(budget),
            Err(e) => unreachable!("the default budget is valid: {e}"),
        }
    }
}

impl Budget for ClientBudget {
    fn deposit(&self) {
        self.deposit_at(Instant::now());
    }

    fn withdraw(&self) -> bool {
        self.withdraw_at(Instant::now())
    }
}

impl ClientBudget {
    /// [`deposit`](Budget::deposit) at `now` (a reading the caller took).
    fn deposit_at(&self, now: Instant) {
        let now = now.saturating_duration_since(self.origin);
        self.lock().deposit(now);
    }

    /// [`withdraw`](Budget::withdraw) at `now` (a reading the caller took).
    fn withdraw_at(&self, now: Instant) -> bool {
        let now = now.saturating_duration_since(self.origin);
        self.lock().withdraw(now)
    }
}

impl fmt::Debug for ClientBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let budget = self.lock();
        f.debug_struct("ClientBudget")
            .field("ratio", &budget.ratio())
            .field("min_per_sec", &budget.min_per_sec())
            .field("window", &budget.window())
            .finish()
    }
}

/// The budget a layer holds: any [`Budget`], shared by the layer's clones.
/// A [`ClientBudget`] is kept as itself, to be told the action's reading of
/// the clock instead of reading it again.
#[derive(Clone)]
pub(crate) enum SharedBudget {
    /// This crate's.
    Client(ClientBudget),
    /// Any other, which reads its own clock.
    Other(Arc<dyn Budget + Send + Sync>),
}

impl SharedBudget {
    /// `budget`, kept as a [`ClientBudget`] if it is one.
    pub(crate) fn new<B: Budget + Send + Sync + 'static>(budget: B) -> Self {
        let any: &dyn std::any::Any = &budget;
        match any.downcast_ref::<ClientBudget>() {
            Some(client) => Self::Client(client.clone()),
            None => Self::Other(Arc::new(budget)),
        }
    }

    /// A first attempt is sent, in the step whose time `clock` holds.
    pub(crate) fn deposit(&self, clock: &mut Clock) {
        match self {
            Self::Client(budget) => budget.deposit_at(clock.instant()),
            Self::Other(budget) => budget.deposit(),
        }
    }

    /// A retry is planned, in the step whose time `clock` holds: whether
    /// the budget pays for it.
    pub(crate) fn withdraw(&self, clock: &mut Clock) -> bool {
        match self {
            Self::Client(budget) => budget.withdraw_at(clock.instant()),
            Self::Other(budget) => budget.withdraw(),
        }
    }
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedBudget(..)")
    }
}
