//! [`IdempotentPathsLayer`]: a method allow-list for retries.

use std::collections::HashSet;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower::{Layer, Service};

use crate::Idempotent;

/// Marks requests whose path is listed as [`Idempotent`].
///
/// A method allow-list: [`IdempotentPathsLayer`] marks the requests whose
/// URI path is listed as [`Idempotent`], so that a caller need not mark each
/// call.
///
/// For gRPC the path is `/package.Service/Method`; list the methods whose
/// `idempotency_level` is `NO_SIDE_EFFECTS` or `IDEMPOTENT` in their proto
/// definition. Place the layer **above** [`ReplayBodyLayer`](crate::body_replay::ReplayBodyLayer)
/// (which copies only the bodies of requests that may be retried) and
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer).
///
/// ```
/// use retry_budget::Policy;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::{idempotent_paths::IdempotentPathsLayer, body_replay::ReplayBodyLayer, RetryBudgetLayer};
///
/// # let channel = tower::service_fn(|_: http::Request<tower_retry_budget::body_replay::ReplayBody<String>>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let stack = ServiceBuilder::new()
///     .layer(IdempotentPathsLayer::new(["/shop.Catalog/GetItem"]))
///     .layer(ReplayBodyLayer::new())
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(channel);
/// # let _ = stack;
/// ```
#[derive(Debug, Clone)]
pub struct IdempotentPathsLayer {
    paths: Arc<HashSet<String>>,
}

impl IdempotentPathsLayer {
    /// Marks requests to exactly these paths (no patterns, no query).
    pub fn new<I, P>(paths: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        Self {
            paths: Arc::new(paths.into_iter().map(Into::into).collect()),
        }
    }

    /// Whether requests to `path` are marked (a caller deciding before
    /// the stack, e.g. a proxy choosing a request's policy).
    ///
    /// ```
    /// use tower_retry_budget::idempotent_paths::IdempotentPathsLayer;
    ///
    /// let layer = IdempotentPathsLayer::new(["/v1/embeddings"]);
    /// assert!(layer.lists("/v1/embeddings"));
    /// assert!(!layer.lists("/v1/chat/completions"));
    /// ```
    pub fn lists(&self, path: &str) -> bool {
        self.paths.contains(path)
    }
}

impl<S> Layer<S> for IdempotentPathsLayer {
    type Service = IdempotentPaths<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotentPaths {
            inner,
            paths: self.paths.clone(),
        }
    }
}

/// The service of [`IdempotentPathsLayer`].
#[derive(Debug, Clone)]
pub struct IdempotentPaths<S> {
    inner: S,
    paths: Arc<HashSet<String>>,
}

impl<S, B> Service<Request<B>> for IdempotentPaths<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if self.paths.contains(request.uri().path()) {
            request.extensions_mut().insert(Idempotent);
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::may_retry;
    use tower::{service_fn, ServiceExt};

    #[tokio::test]
    async fn only_listed_paths_are_marked() {
        let layer = IdempotentPathsLayer::new(["/shop.Catalog/GetItem"]);
        let svc = layer.layer(service_fn(|req: Request<()>| async move {
            Ok::<_, std::convert::Infallible>(may_retry(&req))
        }));
        let post = |path: &str| {
            Request::post(format!("http://shop.test{path}"))
                .body(())
                .unwrap()
        };
        assert!(svc
            .clone()
            .oneshot(post("/shop.Catalog/GetItem"))
            .await
            .unwrap());
        assert!(!svc
            .clone()
            .oneshot(post("/shop.Catalog/Buy"))
            .await
            .unwrap());
        assert!(!svc.oneshot(post("/shop.Catalog/GetItemX")).await.unwrap());
    }
}
