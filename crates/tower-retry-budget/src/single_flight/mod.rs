//! Single flight: identical in-flight requests share one upstream action.
//!
//! # Why
//!
//! A user clicks "explain" three times: three identical requests leave, and
//! against a rate-limited service each spends quota, and each gets its own
//! 429 and its own retries. The source document keeps a map of tasks in
//! progress by key, and a second click on the same task gets the promise of
//! the first. [`SingleFlightLayer`] does the same for a tower client: while
//! a safe request (GET, HEAD, OPTIONS, TRACE) is in flight, an identical one
//! (same method and URI by default, or a [`FlightKey`] of your own) joins it
//! instead of starting a second upstream action.
//!
//! * **Everyone gets the response.** The shared response's body is read into
//!   a buffer (up to [`body_limit`](SingleFlightLayer::body_limit), 1 MiB by
//!   default) and each caller gets a copy: same status, headers,
//!   extensions and trailers, and a [`Shared`] extension saying how many
//!   callers received it. A larger body is never truncated: every caller
//!   gets [`Error::BodyTooLarge`]. An error is shared too ([`Error::Service`]
//!   holds it in an `Arc`).
//! * **Leaving is per caller.** One caller dropping its future does not
//!   cancel the shared action while others still wait for it; when the last
//!   one leaves, the shared action is dropped at once (with
//!   [`RetryBudget`](crate::RetryBudget) inside, that is its caller leaving:
//!   no retry follows). No task is spawned: the waiters drive the shared
//!   action themselves (`futures`' `Shared`), and none is ever blocked by
//!   another one's poll.
//! * **Unsafe methods are never coalesced**, whatever the key says: two
//!   POSTs are two actions.
//! * **Bounded.** At most [`max_keys`](SingleFlightLayer::max_keys) keys are
//!   in flight at once ([`DEFAULT_MAX_KEYS`]); beyond that a request with a
//!   new key runs on its own, exactly as without this layer. The shared
//!   body is read under the leader's deadline (the end of its attempt's
//!   reservation, from its report, and
//!   [`body_timeout`](SingleFlightLayer::body_timeout) if set): a body
//!   still incomplete then ends every caller with [`Error::BodyTimeout`],
//!   so a slow body holds no joiner past the leader's budget.
//! * **The report says it was shared.** Put it *outside*
//!   [`RetryBudgetLayer`](crate::RetryBudgetLayer): the callers then share
//!   one whole action (its retries included), and the
//!   [`Report`](retry_budget::Report) each of them gets has
//!   [`shared_with`](retry_budget::Report::shared_with) set and a line
//!   "Shared: N identical requests received this one result."
//!
//! A completed action is forgotten at once: single flight merges requests
//! that overlap in time; it is not a cache.
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use retry_budget::{Policy, Report};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_retry_budget::single_flight::{Shared, SingleFlightLayer};
//! use tower_retry_budget::RetryBudgetLayer;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let calls = Arc::new(AtomicUsize::new(0));
//! let counter = calls.clone();
//! let upstream = service_fn(move |_req: http::Request<()>| {
//!     counter.fetch_add(1, Ordering::SeqCst);
//!     async {
//!         tokio::time::sleep(Duration::from_secs(1)).await;
//!         Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("an explanation"))))
//!     }
//! });
//! let client = ServiceBuilder::new()
//!     .layer(SingleFlightLayer::new())
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .service(upstream);
//!
//! // Three clicks on "explain" while the first is in flight.
//! let click = || client.clone().oneshot(http::Request::get("http://ai.test/explain/7").body(()).unwrap());
//! let (a, b, c) = tokio::join!(click(), click(), click());
//! assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream action");
//! for response in [a, b, c] {
//!     let response = response.unwrap();
//!     assert_eq!(response.extensions().get::<Shared>().unwrap().callers, 3);
//!     assert_eq!(response.extensions().get::<Report>().unwrap().shared_with, 2);
//!     let body = response.into_body().collect().await.unwrap().to_bytes();
//!     assert_eq!(body, "an explanation");
//! }
//! # }
//! ```

mod body;
mod config;
mod error;
mod flight;
mod future;
mod layer;
mod service;

pub use body::Body;
pub use config::{DEFAULT_BODY_LIMIT, DEFAULT_MAX_KEYS};
pub use error::Error;
pub use future::{ResponseFuture, Shared};
pub use layer::SingleFlightLayer;
pub use service::{FlightKey, MethodAndUri, SingleFlight};
