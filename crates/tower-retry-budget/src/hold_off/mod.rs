//! The shared hold-off: when a service tells one action to wait (429 with a
//! valid `Retry-After`), later first attempts to the same service wait too.
//!
//! # Why
//!
//! `Retry-After` is the server speaking to the *client*, not to one request:
//! "don't come back before then". Without a shared memory of it, every new
//! action of the client learns it again the hard way, with a request that
//! spends the service's quota and the user's time on a certain 429. With
//! [`RetryBudgetLayer::hold_off`](crate::RetryBudgetLayer::hold_off), a new
//! action to an authority that is being held off either waits until the
//! hold-off has passed, if its first attempt's full cap still fits in its
//! budget after that (the wait counts in its budget), or stops at once as
//! `held_off` without sending anything (an [`Error`](crate::Error) of kind
//! [`NotSent`](crate::ErrorKind::NotSent), with its report). The decision is
//! the core's ([`Action::hold_off`](retry_budget::Action::hold_off)); this
//! file only keeps the map.
//!
//! Only first attempts consult it: a retry already waits for what its own
//! service asked. The key is the service, `scheme://host:port` (from the
//! request URI, or the `Host` header for a relative URI), case-insensitive;
//! never the userinfo of the URI, so no credentials are kept.
//!
//! # Bounded
//!
//! * **In time**: a hold is cut to the [maximum hold](HoldOffBuilder::max_hold)
//!   (default [`DEFAULT_MAX_HOLD`], 10 minutes), so one `Retry-After:
//!   1000000000` cannot hold a service for the life of the process. Any
//!   instant is accepted, and none panics.
//! * **In space**: the map holds at most `capacity` authorities. When it is
//!   full, expired entries are dropped first; if none has expired, the entry
//!   that expires soonest is forgotten (the least of the hold-offs it knows).
//!   Both cost O(log n) under the map's lock, never a scan (see `map.rs`).
//!
//! ```
//! use retry_budget::Policy;
//! use tower::ServiceBuilder;
//! use tower_retry_budget::{HoldOff, RetryBudgetLayer};
//!
//! # let client = tower::service_fn(|_: http::Request<String>| async {
//! #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//! # });
//! let hold_off = HoldOff::new(256)?;
//! let client = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone()))
//!     .service(client);
//! # let _ = client;
//! assert!(hold_off.is_empty());
//! # Ok::<(), tower_retry_budget::HoldOffError>(())
//! ```

mod authority;
mod config;
mod handle;
mod map;
#[cfg(feature = "redis")]
pub mod redis;
mod store;

pub(crate) use authority::authority_of;
pub use config::{
    HoldOffBuilder, HoldOffError, DEFAULT_HOLD_OFF_CAPACITY, DEFAULT_MAX_HOLD, MAX_MAX_HOLD,
};
pub use handle::HoldOff;
#[cfg(feature = "redis")]
pub use redis::{RedisStore, RedisStoreError, DEFAULT_REDIS_OP_TIMEOUT};
pub use store::StoreHealth;
