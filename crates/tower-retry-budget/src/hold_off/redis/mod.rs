//! The hold-off shared across processes through Redis (the `redis`
//! feature): a fleet honours one `Retry-After`.
//!
//! # Why
//!
//! Twenty replicas of a worker share one API token's quota; one gets `429
//! Retry-After: 60`, and without sharing, the other nineteen keep sending
//! first attempts that are certain to be refused. With a [`RedisStore`],
//! every hold this process records is published, and every process applies
//! every published hold to its own map.
//!
//! * **Off the hot path.** A request only ever reads the local map. A new or
//!   lengthened hold goes on a bounded queue (never waiting; a full queue
//!   drops it and counts it) to the store's one task, which does all the I/O.
//! * **Redis's clock only.** A hold is a key whose TTL is the hold, in
//!   milliseconds, set by a script that keeps the longer of the existing and
//!   the new TTL (so a shorter hold never replaces a longer one), and
//!   announced on a channel as `"<ms> <authority>"`. A receiver holds the
//!   authority for that long from when it hears it: no wall-clock instant
//!   from one host is read by another.
//! * **The maximum hold applies** to what comes from Redis too, and the key
//!   is `scheme://host:port` (never credentials) under an optional
//!   namespace (a tenant, a hash of the API token: never the token):
//!   `retry-budget:hold-off:NAMESPACE:scheme://host:port` (`NAMESPACE`
//!   empty when none is set), announced on the channel
//!   `retry-budget:hold-off-channel:NAMESPACE`.
//! * **Faults.** Every Redis operation is bounded
//!   ([`DEFAULT_REDIS_OP_TIMEOUT`], 50 ms). When Redis is slow, down or
//!   refusing, each process keeps working on its local map alone, and
//!   [`HoldOff::store_health`](crate::HoldOff::store_health) says so
//!   (`available: false`, `failures`); the store reconnects by itself,
//!   reads the current keys again, publishes the live holds it knows and
//!   Redis does not (recorded during the outage, or lost with a restarted
//!   Redis), and goes on.
//!
//! ```no_run
//! use retry_budget::Policy;
//! use tower_retry_budget::hold_off::RedisStore;
//! use tower_retry_budget::{HoldOff, RetryBudgetLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::new("redis://127.0.0.1:6379")?.namespace("tenant-42")?;
//! // Inside a tokio runtime: the store starts its task.
//! let hold_off = HoldOff::builder().redis(store).build()?;
//! let layer = RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone());
//! # let _ = layer;
//! // For a metric: whether the shared store works now.
//! let available = hold_off.store_health().is_some_and(|h| h.available);
//! # let _ = available;
//! # Ok(())
//! # }
//! ```

mod config;
mod publish;
mod subscribe;
mod task;

pub use config::{RedisStore, RedisStoreError, DEFAULT_REDIS_OP_TIMEOUT};
pub(crate) use task::start;
