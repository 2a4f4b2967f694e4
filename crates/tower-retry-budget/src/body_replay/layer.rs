//! The [`ReplayBodyLayer`].

use tower::Layer;

use super::{ReplayBodyService, DEFAULT_REPLAY_LIMIT};

/// Wraps request bodies in [`ReplayBody`](super::ReplayBody) so that a
/// retry layer below can clone them. Place it *above*
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer).
///
/// Replaying request bodies that are not `Clone`.
///
/// A retry must send the same bytes again, but most streaming bodies (a
/// tonic body, a boxed body, hyper's `Incoming`) cannot be cloned. Wrapping
/// the body in a [`ReplayBody`](crate::body_replay::ReplayBody) makes it `Clone`: the first attempt streams
/// the inner body as usual and keeps a copy of what it sent, up to a limit
/// (64 KiB by default, as linkerd2-proxy does); a clone made for a retry
/// replays those bytes, then the trailers.
///
/// A body larger than the limit still goes through once, untouched, but can
/// no longer be replayed: [`RetryBudget`](crate::RetryBudget) sees that
/// through the [`ReplayHandle`](crate::body_replay::ReplayHandle) handle in the request's extensions and stops
/// the action as `not_replayable` instead of sending a truncated copy. Bodies
/// that are already `Clone` (`Full<Bytes>`, `Empty`) don't need this layer
/// and keep the cheap path.
///
/// ```
/// use std::convert::Infallible;
/// use http_body_util::{BodyExt, Full};
/// use retry_budget::Policy;
/// use tower::{service_fn, ServiceBuilder};
/// use tower_retry_budget::{body_replay::{ReplayBody, ReplayBodyLayer}, RetryBudgetLayer};
///
/// // A body type that is not `Clone`.
/// type Boxed = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, Infallible>;
///
/// let upstream = service_fn(|req: http::Request<ReplayBody<Boxed>>| async move {
///     let body = req.into_body().collect().await.unwrap().to_bytes();
///     Ok::<_, Infallible>(http::Response::new(body))
/// });
/// let client = ServiceBuilder::new()
///     .layer(ReplayBodyLayer::new())
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(upstream);
/// # let _ = client;
/// # let _: Boxed = Full::new(bytes::Bytes::new()).boxed_unsync();
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ReplayBodyLayer {
    limit: usize,
}

impl ReplayBodyLayer {
    /// Keeps up to 64 KiB of each retryable request body.
    pub const fn new() -> Self {
        Self {
            limit: DEFAULT_REPLAY_LIMIT,
        }
    }

    /// Keeps up to `limit` bytes of each retryable request body; a larger
    /// body goes through once and is not retried.
    pub const fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

impl Default for ReplayBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for ReplayBodyLayer {
    type Service = ReplayBodyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReplayBodyService::new(inner, self.limit)
    }
}
