//! Replaying request bodies that are not `Clone`.
//!
//! A retry must send the same bytes again, but most streaming bodies (a
//! tonic body, a boxed body, hyper's `Incoming`) cannot be cloned. Wrapping
//! the body in a [`ReplayBody`] makes it `Clone`: the first attempt streams
//! the inner body as usual and keeps a copy of what it sent, up to a limit
//! (64 KiB by default, as linkerd2-proxy does); a clone made for a retry
//! replays those bytes, then the trailers.
//!
//! A body larger than the limit still goes through once, untouched, but can
//! no longer be replayed: [`RetryBudget`](crate::RetryBudget) sees that
//! through the [`BodyReplay`] handle in the request's extensions and stops
//! the action as `not_replayable` instead of sending a truncated copy. Bodies
//! that are already `Clone` (`Full<Bytes>`, `Empty`) don't need this layer
//! and keep the cheap path.
//!
//! ```
//! use std::convert::Infallible;
//! use http_body_util::{BodyExt, Full};
//! use retry_budget::Policy;
//! use tower::{service_fn, ServiceBuilder};
//! use tower_retry_budget::{ReplayBody, ReplayBodyLayer, RetryBudgetLayer};
//!
//! // A body type that is not `Clone`.
//! type Boxed = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, Infallible>;
//!
//! let upstream = service_fn(|req: http::Request<ReplayBody<Boxed>>| async move {
//!     let body = req.into_body().collect().await.unwrap().to_bytes();
//!     Ok::<_, Infallible>(http::Response::new(body))
//! });
//! let client = ServiceBuilder::new()
//!     .layer(ReplayBodyLayer::new())
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .service(upstream);
//! # let _ = client;
//! # let _: Boxed = Full::new(bytes::Bytes::new()).boxed_unsync();
//! ```

mod body;
mod layer;
mod service;

pub use body::{BodyReplay, ReplayBody, ReplayError, DEFAULT_REPLAY_LIMIT};
pub use layer::ReplayBodyLayer;
pub use service::ReplayBodyService;
