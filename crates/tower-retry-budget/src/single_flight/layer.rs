//! The [`SingleFlightLayer`].

use tower::Layer;

use super::service::{MethodAndUri, SingleFlight};

/// The default limit of the buffer a shared response body is read into:
/// 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// Wraps a service in [`SingleFlight`]: identical in-flight safe requests
/// share one upstream action. See the [module docs](super).
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_retry_budget::single_flight::SingleFlightLayer;
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(SingleFlightLayer::new().body_limit(64 * 1024))
///     .service(client);
/// # let _ = client;
/// ```
#[derive(Debug, Clone)]
pub struct SingleFlightLayer<K = MethodAndUri> {
    key: K,
    body_limit: usize,
}

impl SingleFlightLayer {
    /// Coalesces requests with the same method and URI, buffering shared
    /// bodies up to [`DEFAULT_BODY_LIMIT`].
    pub const fn new() -> Self {
        Self {
            key: MethodAndUri,
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }
}

impl Default for SingleFlightLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> SingleFlightLayer<K> {
    /// Uses another key: a [`FlightKey`](super::FlightKey), such as a
    /// closure `Fn(&http::request::Parts) -> Option<Key>` (`None`: never
    /// coalesce this request). Unsafe methods are never coalesced, whatever
    /// the key says.
    pub fn key<K2>(self, key: K2) -> SingleFlightLayer<K2> {
        SingleFlightLayer {
            key,
            body_limit: self.body_limit,
        }
    }

    /// The most bytes of a shared response body that are buffered; a larger
    /// body makes every caller of that flight get
    /// [`Error::BodyTooLarge`](super::Error::BodyTooLarge), never a
    /// truncated body.
    pub const fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }
}

impl<S, K: super::FlightKey + Clone> Layer<S> for SingleFlightLayer<K> {
    type Service = SingleFlight<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        SingleFlight::new(inner, self.key.clone(), self.body_limit)
    }
}
