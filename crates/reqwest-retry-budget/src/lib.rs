//! `429 Too Many Requests` retried inside a hard budget, for
//! [`reqwest`]: a [`reqwest_middleware::Middleware`] and a tower route.
//!
//! Two lines give a `reqwest_middleware` client the budget:
//!
//! ```
//! use reqwest_retry_budget::{Policy, RetryBudgetMiddleware};
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryBudgetMiddleware::new(Policy::default()))
//!     .build();
//! # let _ = client;
//! ```
//!
//! Every response to a request the budget governs carries its
//! [`Report`] in `reqwest::Response::extensions()`.
//!
//! # The rule is the layer's
//!
//! Nothing of the rule is here. [`RetryBudgetMiddleware`] runs
//! `tower-retry-budget`'s own service and response future (the pure state
//! machine of the `retry-budget` crate inside) over the rest of the
//! middleware chain, so it behaves as [`RetryBudgetLayer`] does, with every
//! option of a configured layer ([`RetryBudgetMiddleware::from_layer`]):
//!
//! * only **429** is retried (by default; a
//!   [`RetrySignal`](tower_retry_budget::response_signal::RetrySignal) can read more),
//!   and only for **safe methods** or requests marked [`Idempotent`]
//!   (`with_extension(Idempotent)`); any other request (a POST) is sent
//!   once, untouched, with no report;
//! * `Retry-After` is **never shortened** (seconds or an HTTP-date);
//! * an attempt starts only if its **whole per-attempt cap** fits in the
//!   **total budget** (20 s, 3 attempts, 4 s per attempt by default): a
//!   `Retry-After` that cannot fit stops the action at once, the 429 is
//!   returned with a report saying `budget_exhausted`;
//! * the caller leaving (**dropping the future**, or firing a
//!   [`CancellationToken`](tokio_util::sync::CancellationToken) put in the
//!   middleware extensions) stops everything, no task is spawned.
//!
//! # What the caller learns
//!
//! * The [`Report`] in the final response's extensions (see
//!   [`ReportMode`](tower_retry_budget::ReportMode) to leave it out of
//!   responses that needed no retry).
//! * A [`ReportSlot`] put in the middleware extensions is filled whatever
//!   the ending, errors and a dropped future included.
//! * An ending with no response is a `reqwest_middleware::Error::Middleware`
//!   holding this crate's [`Error`] (found with [`Error::of`]): its report,
//!   and reqwest's error as its `source()`.
//!
//! ```
//! use reqwest_retry_budget::{Error, Policy, Report, ReportSlot, RetryBudgetMiddleware};
//!
//! # async fn run(client: reqwest_middleware::ClientWithMiddleware) {
//! let slot = ReportSlot::new();
//! let result = client
//!     .get("http://127.0.0.1:9/palettes")
//!     .with_extension(slot.clone())
//!     .send()
//!     .await;
//! match result {
//!     Ok(response) => println!("{:?}", response.extensions().get::<Report>()),
//!     Err(error) => println!("{:?}", Error::of(&error).map(Error::outcome)),
//! }
//! println!("{:?}", slot.take().map(|report| report.outcome));
//! # }
//! ```
//!
//! # Bodies
//!
//! A body reqwest holds in memory (bytes, a string, JSON:
//! `reqwest::Request::try_clone` copies it) is sent whole with every
//! attempt. A streaming body is sent once: if a 429 to it would need a
//! resend, the action ends as `not_replayable` and the 429 is returned.
//!
//! # A tower route
//!
//! [`ReqwestService`] is `reqwest::Client` as a
//! `Service<http::Request<B>>`, for a tower stack with the layer's extras
//! (single flight, a gate, a hold-off shared with other clients):
//!
//! ```
//! use reqwest_retry_budget::{Policy, ReqwestService};
//! use tower::ServiceBuilder;
//! use tower_retry_budget::RetryBudgetLayer;
//!
//! let client = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .service(ReqwestService::new(reqwest::Client::new()));
//! # let _ = client;
//! ```
//!
//! # Weight
//!
//! `reqwest` and `reqwest-middleware` are taken with no default features:
//! no TLS backend, HTTP/2, charset or JSON support is forced on a user,
//! who enables on `reqwest` what the application needs.
//!
//! | file | job |
//! |---|---|
//! | `middleware.rs` | [`RetryBudgetMiddleware`]: the layer's service over the rest of the chain |
//! | `request.rs` | reqwest's request while the layer holds it: copied whole, or its streaming body sent once |
//! | `error.rs` | [`Error`]: an ending with no response, with its report |
//! | `service.rs` | [`ReqwestService`]: the client as an `http` service |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod middleware;
mod request;
mod service;

pub use error::Error;
pub use middleware::RetryBudgetMiddleware;
pub use request::NotCopied;
pub use service::{ReqwestService, ResponseFuture};
pub use tower_retry_budget::{
    Idempotent, Jitter, Outcome, Policy, Report, ReportSlot, RetryBudgetLayer,
};
