//! The concurrency gate: at most N actions of a kind at once, built from
//! tower's own layers, in the order that keeps a waiting action from
//! holding a slot.
//!
//! # Why this order
//!
//! Sending N requests at once makes each slower and the upstream more likely
//! to limit them, so the source document gives each kind of task a local
//! limit (2) and queues the rest. Its loop takes a slot for each attempt and
//! gives it back *before* the backoff sleep: an action that is only waiting
//! for a `Retry-After` to pass must not keep another action out.
//!
//! With tower that is a matter of order. Put
//! [`tower::limit::ConcurrencyLimitLayer`] **inside** [`RetryBudgetLayer`]:
//! the retry layer makes a clone of the limited service ready before each
//! attempt (taking a slot, or queueing for one), the slot travels with that
//! attempt's response future, and it is released as soon as the response
//! arrives. During the wait between attempts the action holds no slot; its
//! retry queues again like anyone else, and the time it spends queueing
//! counts in its budget (it stops as `budget_exhausted` rather than start
//! an attempt that could not finish).
//!
//! Put the limit *outside*, and one slot is held for the whole action,
//! waits included: four tasks through a gate of two then take as long as
//! the slowest backoff allows.
//!
//! # Queue or refuse
//!
//! Queueing is `ConcurrencyLimitLayer` alone. To refuse at once instead
//! ("already running, try later", the source's local runner), add
//! [`tower::load_shed::LoadShedLayer`] **outside** the retry layer: it
//! refuses a new action when no slot is free, but never a retry of an action
//! already admitted (that one queues). [`already_running`] turns tower's
//! `Overloaded` error into [`AlreadyRunning`], whose message says so.
//!
//! ```
//! use retry_budget::Policy;
//! use tower::{BoxError, ServiceBuilder};
//! use tower_retry_budget::{gate, RetryBudgetLayer};
//!
//! # let client = tower::service_fn(|_: http::Request<String>| async {
//! #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//! # });
//! // Queue: at most 2 attempts in flight; waits between attempts hold none.
//! let queued = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .concurrency_limit(2)
//!     .service(client.clone());
//!
//! // Refuse: a third action is turned away at once.
//! let refusing = ServiceBuilder::new()
//!     .map_err(gate::already_running)
//!     .load_shed()
//!     .layer(RetryBudgetLayer::new(Policy::default()))
//!     .concurrency_limit(2)
//!     .service(client);
//! # let _ = (queued, refusing);
//!
//! let refused: BoxError = gate::already_running(tower::load_shed::error::Overloaded::new().into());
//! assert!(refused.is::<gate::AlreadyRunning>());
//! assert_eq!(refused.to_string(), "already running: the concurrency limit is reached; try again later");
//! ```
//!
//! [`RetryBudgetLayer`]: crate::RetryBudgetLayer

use std::fmt;

use tower::load_shed::error::Overloaded;
use tower::BoxError;

/// A new action was refused because the concurrency limit is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlreadyRunning;

impl fmt::Display for AlreadyRunning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("already running: the concurrency limit is reached; try again later")
    }
}

impl std::error::Error for AlreadyRunning {}

/// Maps tower's `Overloaded` (from `LoadShed`) to [`AlreadyRunning`];
/// every other error is returned as is. For `ServiceBuilder::map_err`.
pub fn already_running(error: BoxError) -> BoxError {
    if error.is::<Overloaded>() {
        Box::new(AlreadyRunning)
    } else {
        error
    }
}
