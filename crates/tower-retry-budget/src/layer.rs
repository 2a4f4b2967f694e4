//! The [`RetryBudgetLayer`].

use retry_budget::Policy;
use tower::Layer;

use crate::calendar::{DateReference, SystemCalendar};
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
pub struct RetryBudgetLayer<C = SystemCalendar> {
    policy: Policy,
    calendar: C,
    dates: DateReference,
}

impl RetryBudgetLayer {
    /// A layer with this policy, the system calendar clock, and dates
    /// measured against it.
    pub const fn new(policy: Policy) -> Self {
        Self {
            policy,
            calendar: SystemCalendar,
            dates: DateReference::LocalClock,
        }
    }
}

impl<C> RetryBudgetLayer<C> {
    /// Uses another calendar clock for HTTP-date `Retry-After` values (for
    /// example [`UntrustedCalendar`](crate::UntrustedCalendar) on a host
    /// whose wall clock cannot be trusted).
    pub fn calendar<C2>(self, calendar: C2) -> RetryBudgetLayer<C2> {
        RetryBudgetLayer {
            policy: self.policy,
            calendar,
            dates: self.dates,
        }
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

impl<S, C: Clone> Layer<S> for RetryBudgetLayer<C> {
    type Service = RetryBudget<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryBudget::from_parts(inner, self.policy, self.calendar.clone(), self.dates)
    }
}
