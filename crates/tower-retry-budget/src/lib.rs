//! A tower layer that retries `429 Too Many Requests`, and nothing else,
//! inside a hard budget.
//!
//! One `use` line and one [`ServiceBuilder`](tower::ServiceBuilder) line
//! ([`RetryBudgetServiceBuilderExt::retry_budget`]); [`RetryBudgetLayer`] configures
//! the rest (an observer, a client budget, a shared hold-off, the report):
//!
//! ```
//! use tower::ServiceBuilder;
//! use tower_retry_budget::{Policy, Report, RetryBudgetServiceBuilderExt};
//!
//! # let client = tower::service_fn(|_: http::Request<String>| async {
//! #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//! # });
//! let client = ServiceBuilder::new().retry_budget(Policy::default()).service(client);
//! // Each response carries its `Report` in its extensions.
//! # let _ = (client, std::marker::PhantomData::<Report>);
//! ```
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
//! * every step is traced, handed to an [`Observer`](crate::observer::Observer) if the layer has one
//!   (typed [`Event`](crate::observer::Event)s with the request's [`ActionId`](crate::observer::ActionId)), and the final
//!   response or error carries a [`Report`] in its extensions (the last
//!   response is returned as is, 429 included: it is never turned into an
//!   error); see [`ReportMode`] to leave it out of responses that needed no
//!   retry;
//! * no header, setting or readiness result can panic it: time beyond
//!   tokio's clock means "never", and every ending, readiness errors
//!   included, goes through the core.
//!
//! The rule itself is not here: it is the pure state machine of the
//! `retry-budget` crate ([`retry_budget::Action`]). This crate only feeds it
//! tokio's monotonic clock, the calendar clock and the inner service's
//! results, and obeys its answers (when to start, wait or stop, whether to
//! copy or move the request, what to tell the client budget and the
//! hold-off map), so tests under tokio's paused clock see exact instants.
//! [`Policy`], [`Report`], [`Outcome`] and [`Jitter`] are re-exported
//! here: one `use` line suffices for the common case.
//!
//! # Where things are
//!
//! The root holds what nearly every user needs: the layer, the service,
//! its future and error, [`Idempotent`], [`BudgetThis`], [`ReportSlot`],
//! [`AttemptDeadline`] and the core's policy and report. Each capability
//! has a module of its own, as tower-http gives each middleware one:
//! [`hold_off`] (with its Redis store, feature `redis`), [`body_replay`] (request
//! bodies that are not `Clone`), [`peek`] (a gRPC status in trailers, what
//! a JSON error body says: one layer below the retry layer),
//! [`response_signal`] (what a response head tells the budget), [`calendar`],
//! [`budget`] (the client-wide retry ratio), [`observer`], [`gate`],
//! [`single_flight`] (feature `single-flight`), [`idempotent_paths`],
//! [`tower_policy`] (a `tower::retry::Policy` over the same core) and
//! `classify` (feature `tower-http`).
//!
//! # What it costs when nothing goes wrong
//!
//! A request that is not retryable passes straight through: no copy, no
//! timer, no report. A retryable one is copied once, as `tower::retry`
//! copies it (not at all under a policy of one attempt), and keeps an
//! [`Action`](retry_budget::Action) in its future, whose trail allocates
//! only once it holds more than a first answer (or is read event by
//! event). It reads the clock only once it needs an instant (to arm a
//! timer, or for a hold-off, a pacer or a client budget, which share that
//! reading), then once per poll that tells the core something: one that
//! answers at its first poll, with none of those, reads it not at all. Its
//! per-attempt timer is created only if the attempt is still pending when
//! first polled. The report the caller gets by default is most of what remains;
//! [`ReportMode::WhenRetried`] leaves it out of responses that needed no
//! retry. With a `tracing` subscriber at INFO (the layer's events are all
//! at DEBUG) the cost is one `enabled!` check per action. The figures,
//! against `tower::retry` in the configuration a service runs (a
//! subscriber, request and response extensions), are in `BENCHMARKS.md`.
//!
//! The map of the crate, by file (the adapter first, then each extra and
//! each layer of its own):
//!
//! | file | job |
//! |---|---|
//! | `layer.rs` | [`RetryBudgetLayer`] and its configuration, shared by every action: the policy, the signal, the list of extras |
//! | `builder.rs` | [`RetryBudgetServiceBuilderExt`]: the one `ServiceBuilder` line |
//! | `service.rs` | [`RetryBudget`]: which requests are budgeted |
//! | `future.rs` | [`ResponseFuture`]: the state machine (an attempt, between attempts, done) and its one timer |
//! | `ctx.rs` | one action's runtime: the only way to the core, the one place a response is told to it and the one place an action ends |
//! | `extra.rs` | the one interface between an action and the extras (`Extra`, built once by the layer; its part of each action, called at fixed moments): the fixed set of them, each action's parts in one allocation |
//! | `request.rs` | safe methods, [`Idempotent`], [`BudgetThis`], request copies |
//! | `held.rs` | the 429 held during a wait, its header table made to fit |
//! | `clock.rs` | the one saturating mapping between elapsed time and tokio's clock |
//! | `calendar.rs` | the injectable calendar clock for HTTP-dates |
//! | `error.rs` | [`Error`], keeping the inner error typed |
//! | `response_signal/` | [`RetrySignal`](crate::response_signal::RetrySignal): what a response head tells the budget, read into the core's `Answer` ([`HttpSignal`](crate::response_signal::HttpSignal) in `mod.rs`, [`GrpcSignal`](crate::response_signal::GrpcSignal) in `grpc.rs`, [`ResetSignal`](crate::response_signal::ResetSignal) in `reset.rs`, the providers' tables as data in `provider.rs`) |
//! | `trace.rs` | `tracing` events |
//! | `observer.rs` | extra: [`Observer`](crate::observer::Observer), the typed trail of every action, with its [`ActionId`](crate::observer::ActionId) |
//! | `hold_off/` | extra: [`HoldOff`](crate::hold_off::HoldOff), a `Retry-After` honoured by the whole client, and a used-up quota's short hold, bounded in time and space |
//! | `pace.rs`, `pace/` | extra: [`Pacing`](crate::pace::Pacing), the quota a service announces respected before it is spent (one pacer per upstream; `pace/fleet.rs`: a window's allowance taken on Redis by a fleet) |
//! | `report_slot.rs` | [`ReportSlot`], the report for clients that drop response extensions |
//! | `caller.rs` | extra: what a request carries for the layer (the caller's report slot, token and [`ActionId`](crate::observer::ActionId), one extension each or three in one [`CallerExtensions`]; a replay handle), found at once, one part of the action |
//! | `cancel.rs` | the caller's `CancellationToken`, watched |
//! | `attempt_info.rs` | extra: [`AttemptDeadline`] on every attempt, when asked |
//! | `body_replay/` | [`ReplayBodyLayer`](crate::body_replay::ReplayBodyLayer): request bodies that are not `Clone`; extra: its replay handle |
//! | `budget.rs` | [`ClientBudget`](crate::budget::ClientBudget): retries bounded to a ratio of first attempts, client-wide |
//! | `peek/` | [`PeekLayer`](crate::peek::PeekLayer): the one layer that reads the start of a body (a gRPC status in trailers; with feature `quota`, what a JSON error body says: a quota used up, a delay, a retryable rate limit), its findings told through one extension, [`BodySignals`](crate::peek::BodySignals) |
//! | `gate.rs` | the concurrency gate: tower's `ConcurrencyLimit` and `LoadShed`, in the right order |
//! | `single_flight/` | [`single_flight`]: identical in-flight requests share one action |
//! | `idempotent_paths.rs` | [`IdempotentPathsLayer`](crate::idempotent_paths::IdempotentPathsLayer): a method allow-list |
//! | `tower_policy.rs` | [`BudgetPolicy`](crate::tower_policy::BudgetPolicy) for `tower::retry::Retry` |
//! | `classify.rs` | the tower-http classifier (feature `tower-http`) |
//!
//! # Many actions at once
//!
//! When several rate-limited actions run together, compose:
//! [`gate`] (at most N in flight, a waiting action holds no slot),
//! [`single_flight`], jitter on the local fallback
//! ([`Jitter`] in the policy, seeded with
//! [`RetryBudgetLayer::jitter_seed`]), a [`ClientBudget`](crate::budget::ClientBudget) (or tower's
//! `TpsBudget`) with [`RetryBudgetLayer::client_budget`], and a [`HoldOff`](crate::hold_off::HoldOff)
//! with [`RetryBudgetLayer::hold_off`]. The repository's `examples/lab.rs`
//! plays the source document's scene against a real loopback server
//! (`cargo run --example lab` in a checkout).
//!
//! # gRPC / tonic
//!
//! A tonic `Channel` gets the same budget by composition. Its request body
//! is not `Clone`, so [`ReplayBodyLayer`](crate::body_replay::ReplayBodyLayer) goes above the retry layer and a
//! map back to `tonic::body::Body` below it; [`GrpcSignal`](crate::response_signal::GrpcSignal) reads
//! RESOURCE_EXHAUSTED and `grpc-retry-pushback-ms` (see [`RetrySignal`](crate::response_signal::RetrySignal)):
//!
//! ```
//! use tonic::body::Body;
//! use tower::ServiceBuilder;
//! use tower_retry_budget::{response_signal::GrpcSignal, peek::PeekLayer, Idempotent, Policy, ReportSlot, RetryBudgetLayer, body_replay::{ReplayBody, ReplayBodyLayer}};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
//! let stack = ServiceBuilder::new()
//!     .layer(ReplayBodyLayer::new())
//!     .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
//!     .layer(PeekLayer::grpc())
//!     .map_request(|req: http::Request<ReplayBody<Body>>| req.map(Body::new))
//!     .service(channel);
//! let grpc = tonic::client::Grpc::new(stack); // or a generated client's `new(stack)`
//!
//! // gRPC calls are POST: only a call marked safe to repeat is retried.
//! let slot = ReportSlot::new();
//! let mut request = tonic::Request::new(());
//! request.extensions_mut().insert(Idempotent);
//! request.extensions_mut().insert(slot.clone());
//! # let _ = (grpc, request);
//! # Ok(())
//! # }
//! ```
//!
//! * **What is retried.** Every gRPC call is a `POST`: none is budgeted
//!   unless the caller marks it [`Idempotent`] (per call, through
//!   `tonic::Request::extensions_mut()`; think of the method's
//!   `idempotency_level`: `NO_SIDE_EFFECTS` or `IDEMPOTENT`), or lists its
//!   path (`/package.Service/Method`) in an [`IdempotentPathsLayer`](crate::idempotent_paths::IdempotentPathsLayer) placed
//!   above the replay layer. Other calls pass through untouched, once.
//! * **What counts as "rate limited".** An intermediary's HTTP `429` (tonic
//!   would report it as `Unavailable`) is retried as any `429`. With
//!   [`GrpcSignal`](crate::response_signal::GrpcSignal), a Trailers-Only `grpc-status: 8` (RESOURCE_EXHAUSTED) is
//!   told to the budget as its HTTP equivalent, `429`, and
//!   `grpc-retry-pushback-ms` as the server's delay; a negative or malformed
//!   pushback forbids the retry (gRFC A6), and the action ends as
//!   `not_retryable`. The trail records the translation
//!   ([`EventKind::Translated`](crate::observer::EventKind::Translated)).
//! * **A status in trailers.** An answer that sends its initial metadata
//!   first puts `grpc-status` in the trailers: [`PeekLayer::grpc`](crate::peek::PeekLayer::grpc), below
//!   the retry layer, reads the first frame of such an answer so that
//!   trailers with no message are read like a Trailers-Only head.
//!   `success` means the service *began an answer* with no
//!   error status; a stream whose final `grpc-status` is not OK has its
//!   [`ReportSlot`] report corrected to `not_retryable` when that status
//!   arrives.
//! * **Where the report is.** On an OK call, in
//!   `tonic::Response::extensions()`. A call that ends with a non-OK
//!   `grpc-status` comes back as a `tonic::Status`, which keeps the headers
//!   (as metadata) but no extensions: read the report from a [`ReportSlot`]
//!   put in the request. A transport failure's `tonic::Status` has the
//!   layer's [`Error`] (with its report) as its `source()`.
//! * **Errors.** tonic needs the stack's error to be `Into<BoxError>`:
//!   [`Error<E>`](Error) is `std::error::Error + Send + Sync + 'static`
//!   whenever `E` is (tonic's transport error is).
//!
//! `cargo run -p tower-retry-budget --example tonic_client` runs it against
//! its own loopback tonic server, without `protoc` (a raw-bytes codec and a
//! hand-written server service).
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//!
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_retry_budget::{Outcome, Policy, Report, RetryBudgetLayer};
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
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attempt_info;
pub mod body_replay;
pub mod budget;
mod builder;
pub mod calendar;
mod caller;
mod cancel;
#[cfg(feature = "tower-http")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower-http")))]
pub mod classify;
mod clock;
mod ctx;
mod error;
mod extra;
mod future;
pub mod gate;
mod held;
pub mod hold_off;
pub mod idempotent_paths;
mod layer;
pub mod observer;
pub mod pace;
pub mod peek;
mod report_slot;
mod request;
pub mod response_signal;
mod service;
#[cfg(feature = "single-flight")]
#[cfg_attr(docsrs, doc(cfg(feature = "single-flight")))]
pub mod single_flight;
pub mod tower_policy;
mod trace;

pub use attempt_info::AttemptDeadline;
pub use builder::RetryBudgetServiceBuilderExt;
pub use caller::CallerExtensions;
pub use clock::instant_at;
pub use error::{Error, ErrorKind};
pub use future::ResponseFuture;
pub use layer::{ReportMode, RetryBudgetLayer};
pub use report_slot::ReportSlot;
pub use request::{is_budgeted, may_retry, BudgetThis, Idempotent};
pub use retry_budget::{Jitter, Outcome, Policy, Report};
pub use service::RetryBudget;
