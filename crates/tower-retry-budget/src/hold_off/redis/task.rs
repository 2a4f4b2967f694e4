//! The store's one task: connects (lazily, each operation bounded),
//! publishes this process's holds and applies everyone's, until the
//! [`Publisher`] is dropped.

use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{self, RedisStore};
use super::publish::{self, Publisher};
use super::subscribe;
use crate::hold_off::handle::Sink;
use crate::hold_off::store::Health;

/// Starts the store's task on `runtime`; the returned publisher ends it
/// when dropped.
pub(crate) fn start(store: RedisStore, sink: Sink, runtime: &tokio::runtime::Handle) -> Publisher {
    let (queue, receiver) = mpsc::channel(config::QUEUE);
    let health = Arc::new(Health::default());
    let stop = CancellationToken::new();
    let task_health = health.clone();
    let task_stop = stop.clone();
    let republish = queue.clone();
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
        let listening = subscribe::run(store, manager, sink, republish, task_health, task_stop);
        futures_util::future::join(publishing, listening).await;
    });
    Publisher {
        queue,
        health,
        _stop: stop.drop_guard(),
    }
}
