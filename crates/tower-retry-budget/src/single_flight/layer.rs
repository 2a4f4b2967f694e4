//! The [`SingleFlightLayer`] and its configuration.

use std::time::Duration;

use tower::Layer;

use super::config::Config;
use super::service::{MethodAndUri, SingleFlight};

/// Wraps a service in [`SingleFlight`]: identical in-flight safe requests
/// share one upstream action. See the [module docs](super).
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::single_flight::SingleFlightLayer;
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let client = ServiceBuilder::new()
///     .layer(
///         SingleFlightLayer::new()
///             .body_limit(64 * 1024)
///             .max_keys(1_000)
///             .body_timeout(Duration::from_secs(2)),
///     )
///     .service(client);
/// # let _ = client;
/// ```
#[derive(Debug, Clone)]
pub struct SingleFlightLayer<K = MethodAndUri> {
    key: K,
    config: Config,
}

impl SingleFlightLayer {
    /// Coalesces requests with the same method and URI, buffering shared
    /// bodies up to [`DEFAULT_BODY_LIMIT`](super::DEFAULT_BODY_LIMIT), at most [`DEFAULT_MAX_KEYS`](super::DEFAULT_MAX_KEYS)
    /// keys in flight.
    pub const fn new() -> Self {
        Self {
            key: MethodAndUri,
            config: Config::DEFAULT,
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
            config: self.config,
        }
    }

    /// The most bytes of a shared response body that are buffered; a larger
    /// body makes every caller of that flight get
    /// [`Error::BodyTooLarge`](super::Error::BodyTooLarge), never a
    /// truncated body.
    pub const fn body_limit(mut self, bytes: usize) -> Self {
        self.config.body_limit = bytes;
        self
    }

    /// The most keys in flight at once (default [`DEFAULT_MAX_KEYS`](super::DEFAULT_MAX_KEYS)).
    /// Beyond it, a request with a new key runs on its own, not shared: it
    /// goes upstream and gets its response streamed, exactly as without
    /// this layer. Requests joining a key already in flight still join.
    /// `0` shares nothing.
    pub const fn max_keys(mut self, keys: usize) -> Self {
        self.config.max_keys = keys;
        self
    }

    /// The longest a shared body may take once the head has arrived, on
    /// top of the leader's own deadline (the end of its attempt's
    /// reservation, which [`RetryBudget`](crate::RetryBudget) reports and
    /// which always applies). Without a `RetryBudget` inside, this is the
    /// only bound on the body read. Any duration is accepted; one past the
    /// clock's range means no bound. When it ends first, every caller gets
    /// [`Error::BodyTimeout`](super::Error::BodyTimeout).
    pub const fn body_timeout(mut self, timeout: Duration) -> Self {
        self.config.body_timeout = Some(timeout);
        self
    }
}

impl<S, K: super::FlightKey + Clone> Layer<S> for SingleFlightLayer<K> {
    type Service = SingleFlight<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        SingleFlight::with_config(inner, self.key.clone(), self.config)
    }
}
