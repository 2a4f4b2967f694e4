//! A tower layer that retries `429 Too Many Requests`, and nothing else,
//! inside a hard budget.
//!
//! # Why
//!
//! A hand-written `tower::retry::Policy` usually answers "retry on 429" with
//! a loop that has no total deadline, shortens or ignores `Retry-After`, and
//! keeps retrying after the user has gone. [`RetryBudgetLayer`] gives every
//! tower HTTP client (hyper-util's `Client`, a tonic `Channel`, a proxy's
//! upstream stack) a finite, explainable schedule by composition:
//!
//! * only **429** is retried, and only for **safe methods** (GET, HEAD,
//!   OPTIONS, TRACE) or requests marked [`Idempotent`]; every other request
//!   passes straight through, with no copy and no timer;
//! * the server's `Retry-After` is **never shortened** (delay-seconds or any
//!   HTTP-date form), with a local floor and a `2^k` s fallback;
//! * an attempt starts only if its **whole per-attempt cap** fits in the
//!   **total budget**, and never beyond the **attempt count**; the cap is
//!   also a real deadline (`attempt_timeout`, not retried);
//! * the caller leaving (dropping the future, or firing a
//!   [`CancellationToken`](tokio_util::sync::CancellationToken) put in the
//!   request's extensions) **stops everything**: no task is spawned;
//! * every step is traced, and the final response carries a
//!   [`Report`](retry_budget::Report) in its extensions (the last response is
//!   returned as is, 429 included: it is never turned into an error).
//!
//! The rule itself is not here: it is the pure state machine of the
//! `retry-budget` crate ([`retry_budget::Action`]). This crate only feeds it
//! tokio's monotonic clock, the calendar clock and the inner service's
//! results, so tests under tokio's paused clock see exact instants.
//!
//! | file | job |
//! |---|---|
//! | `layer.rs` | [`RetryBudgetLayer`] |
//! | `service.rs` | [`RetryBudget`]: which requests are budgeted |
//! | `future.rs` | [`ResponseFuture`]: the timer and the attempt loop |
//! | `request.rs` | safe methods, [`Idempotent`], request copies |
//! | `calendar.rs` | the injectable calendar clock for HTTP-dates |
//! | `error.rs` | [`Error`], keeping the inner error typed |
//! | `classify.rs` | the tower-http classifier |
//! | `policy.rs` | [`BudgetPolicy`] for `tower::retry::Retry` |
//! | `trace.rs` | `tracing` events |
//! | `gate.rs` | the concurrency gate: tower's `ConcurrencyLimit` and `LoadShed`, in the right order |
//! | `single_flight/` | [`single_flight`]: identical in-flight requests share one action |
//! | `budget.rs` | [`ClientBudget`]: retries bounded to a ratio of first attempts, client-wide |
//! | `hold_off.rs` | [`HoldOff`]: a `Retry-After` honoured by the whole client |
//!
//! # Many actions at once
//!
//! When several rate-limited actions run together, compose (SPEC §3):
//! [`gate`] (at most N in flight, a waiting action holds no slot),
//! [`single_flight`], jitter on the local fallback
//! ([`Jitter`](retry_budget::Jitter) in the policy, seeded with
//! [`RetryBudgetLayer::jitter_seed`]), a [`ClientBudget`] (or tower's
//! `TpsBudget`) with [`RetryBudgetLayer::client_budget`], and a [`HoldOff`]
//! with [`RetryBudgetLayer::hold_off`]. `examples/lab.rs` plays the source
//! document's scene against a real loopback server:
//! `cargo run -p tower-retry-budget --example lab`.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//!
//! use retry_budget::{Outcome, Policy, Report};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_retry_budget::RetryBudgetLayer;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // An upstream that is rate limited once, then answers.
//! let calls = Arc::new(AtomicU32::new(0));
//! let upstream = service_fn(move |_req: http::Request<()>| {
//!     let n = calls.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         let status = if n == 0 { 429 } else { 200 };
//!         let res = http::Response::builder()
//!             .status(status)
//!             .header("retry-after", "1")
//!             .body(())
//!             .unwrap();
//!         Ok::<_, Infallible>(res)
//!     }
//! });
//!
//! let client = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .service(upstream);
//!
//! let response = client.oneshot(http::Request::new(())).await.unwrap();
//! let report = response.extensions().get::<Report>().unwrap();
//! assert_eq!(response.status(), 200);
//! assert_eq!(report.outcome, Outcome::Success);
//! assert_eq!(report.attempts_started, 2);
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
mod builder;
mod calendar;
pub mod classify;
mod error;
mod future;
pub mod gate;
pub mod hold_off;
mod layer;
mod policy;
pub mod replay;
mod request;
mod service;
pub mod single_flight;
mod trace;

pub use budget::ClientBudget;
pub use builder::ServiceBuilderExt;
pub use calendar::{Calendar, DateReference, FnCalendar, SystemCalendar, UntrustedCalendar};
pub use error::{Error, ErrorKind};
pub use future::ResponseFuture;
pub use hold_off::{HoldOff, HoldOffError, DEFAULT_HOLD_OFF_CAPACITY};
pub use layer::RetryBudgetLayer;
pub use policy::BudgetPolicy;
pub use replay::{BodyReplay, ReplayBody, ReplayBodyLayer, ReplayBodyService};
pub use request::{may_retry, Idempotent};
pub use service::RetryBudget;

pub use retry_budget;
