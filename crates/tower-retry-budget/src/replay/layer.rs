//! The [`ReplayBodyLayer`].

use tower::Layer;

use super::{ReplayBodyService, DEFAULT_REPLAY_LIMIT};

/// Wraps request bodies in [`ReplayBody`](super::ReplayBody) so that a
/// retry layer below can clone them. Place it *above*
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer).
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
