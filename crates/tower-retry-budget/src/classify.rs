//! A [`tower_http::classify::ClassifyResponse`] that sorts responses into the
//! same categories as the reports (`rate_limit`, `quota`, `not_configured`,
//! `client_error`, `server_error`, `transport`), so tower-http's
//! `TraceLayer` reports what the retry layer reports.
//!
//! Classification is kept apart from the retry decision, as in tower-http:
//! it names what a response is; only the [`Policy`](retry_budget::Policy)
//! decides what is retried.
//!
//! ```
//! use tower::ServiceBuilder;
//! use tower_retry_budget::{classify, RetryBudgetLayer};
//!
//! # let client = tower::service_fn(|_: http::Request<String>| async {
//! #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//! # });
//! let client = ServiceBuilder::new()
//!     .layer(classify::trace_layer())
//!     .layer(RetryBudgetLayer::new(Default::default()))
//!     .service(client);
//! # let _ = client;
//! ```

use std::fmt;

use http::Response;
use retry_budget::Category;
use tower_http::classify::{
    ClassifiedResponse, ClassifyResponse, NeverClassifyEos, SharedClassifier,
};
use tower_http::trace::TraceLayer;

/// Classifies responses by [`Category`]; 1xx, 2xx and 3xx are successes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitClassifier;

impl ClassifyResponse for RateLimitClassifier {
    type FailureClass = Category;
    type ClassifyEos = NeverClassifyEos<Category>;

    fn classify_response<B>(
        self,
        res: &Response<B>,
    ) -> ClassifiedResponse<Category, Self::ClassifyEos> {
        ClassifiedResponse::Ready(match Category::of_status(res.status().as_u16()) {
            Some(category) => Err(category),
            None => Ok(()),
        })
    }

    fn classify_error<E>(self, _error: &E) -> Category
    where
        E: fmt::Display + 'static,
    {
        Category::Transport
    }
}

/// tower-http's `TraceLayer` classifying with [`RateLimitClassifier`].
pub fn trace_layer() -> TraceLayer<SharedClassifier<RateLimitClassifier>> {
    TraceLayer::new(SharedClassifier::new(RateLimitClassifier))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(status: u16) -> Result<(), Category> {
        let res = Response::builder().status(status).body(()).unwrap();
        match RateLimitClassifier.classify_response(&res) {
            ClassifiedResponse::Ready(r) => r,
            ClassifiedResponse::RequiresEos(_) => unreachable!("never requires EOS"),
        }
    }

    #[test]
    fn categories() {
        assert_eq!(classify(200), Ok(()));
        assert_eq!(classify(304), Ok(()));
        assert_eq!(classify(429), Err(Category::RateLimit));
        assert_eq!(classify(402), Err(Category::Quota));
        assert_eq!(classify(401), Err(Category::NotConfigured));
        assert_eq!(classify(404), Err(Category::ClientError));
        assert_eq!(classify(503), Err(Category::ServerError));
        assert_eq!(
            RateLimitClassifier.classify_error(&"boom"),
            Category::Transport
        );
    }
}
