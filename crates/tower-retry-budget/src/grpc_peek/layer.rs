//! [`GrpcTrailersLayer`]: the configuration-free layer.

use tower::Layer;

use super::GrpcTrailers;

/// Applies [`GrpcTrailers`]: place it **below**
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer) (closer to the channel),
/// with [`GrpcSignal`](crate::GrpcSignal). See the [module docs](super).
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcTrailersLayer;

impl GrpcTrailersLayer {
    /// The layer.
    pub const fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for GrpcTrailersLayer {
    type Service = GrpcTrailers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcTrailers::new(inner)
    }
}
