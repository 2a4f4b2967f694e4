//! A sealed extension trait for [`tower::ServiceBuilder`], in the manner of
//! tower-http's `ServiceBuilderExt`, named so that both can be imported together.

use retry_budget::Policy;
use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::RetryBudgetLayer;

mod sealed {
    pub trait Sealed<T> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

/// Adds [`RetryBudgetLayer`] to a [`ServiceBuilder`].
///
/// ```
/// use retry_budget::Policy;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::RetryBudgetServiceBuilderExt;
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .retry_budget(Policy::default())
///     .service(client);
/// # let _ = client;
/// ```
pub trait RetryBudgetServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Retries 429 inside `policy`'s budget.
    fn retry_budget(self, policy: Policy) -> ServiceBuilder<Stack<RetryBudgetLayer, L>>;
}

impl<L> RetryBudgetServiceBuilderExt<L> for ServiceBuilder<L> {
    fn retry_budget(self, policy: Policy) -> ServiceBuilder<Stack<RetryBudgetLayer, L>> {
        self.layer(RetryBudgetLayer::new(policy))
    }
}
