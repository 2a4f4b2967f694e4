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
//!   reads the current keys again, and goes on.
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

use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use config::{RedisStore, RedisStoreError, DEFAULT_REDIS_OP_TIMEOUT};
pub(crate) use publish::Publisher;

use super::handle::Sink;
use super::store::Health;

/// Starts the store's task on `runtime`; the returned publisher ends it
/// when dropped.
pub(crate) fn start(store: RedisStore, sink: Sink, runtime: &tokio::runtime::Handle) -> Publisher {
    let (queue, receiver) = mpsc::channel(config::QUEUE);
    let health = Arc::new(Health::default());
    let stop = CancellationToken::new();
    let task_health = health.clone();
    let task_stop = stop.clone();
    runtime.spawn(async move {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(store.op_timeout))
            .set_response_timeout(Some(store.op_timeout));
        let manager = match ConnectionManager::new_lazy_with_config(store.client.clone(), config) {
            Ok(manager) => manager,
            Err(error) => {
                task_health.failed();
                tracing::error!(%store, %error, "the shared hold-off store cannot start; holds stay local");
                return;
            }
        };
        let publishing = publish::run(store.clone(), manager.clone(), receiver, task_health.clone());
        let listening = subscribe::run(store, manager, sink, task_health, task_stop);
        futures_util::future::join(publishing, listening).await;
    });
    Publisher {
        queue,
        health,
        _stop: stop.drop_guard(),
    }
}
