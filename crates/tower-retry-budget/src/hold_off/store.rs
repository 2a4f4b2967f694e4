//! The seam between the local map and a shared store (Redis, with the
//! `redis` feature): what the map hands the store, and what the store says
//! about its health.
//!
//! The local map stays the only thing a request reads: a store only
//! *receives* holds (without waiting: the map hands them over on a bounded
//! channel, and the store's own task does the I/O) and *applies* the holds
//! of other processes to the local map as they come. So a store that is
//! slow, down or refusing never delays or fails a request; it only stops
//! sharing, which [`StoreHealth`] says.

#[cfg(feature = "redis")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "redis")]
use std::time::Duration;

/// What a shared hold-off store has done, for metrics and diagnostics
/// ([`HoldOff::store_health`](super::HoldOff::store_health)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StoreHealth {
    /// Whether the store works now: its last operations succeeded and it is
    /// listening to other processes' holds. While `false`, this process
    /// keeps working on its local map alone.
    pub available: bool,
    /// Operations that failed or ran out of time (each bounded).
    pub failures: u64,
    /// Holds published to the store.
    pub published: u64,
    /// Holds not published because the store's queue was full (the store
    /// is slower than 429s arrive) or its task had ended.
    pub dropped: u64,
    /// Holds received from the store (from any process, this one included)
    /// and applied to the local map.
    pub received: u64,
}

#[cfg(feature = "redis")]
/// How the map hands holds to a store. Implemented by the stores of this
/// crate; `publish` is called under no lock, and must not wait.
pub(crate) trait Share: Send + Sync {
    /// `authority` asked to be left alone for `hold` from now.
    fn publish(&self, authority: &str, hold: Duration);
    /// The store's health now.
    fn health(&self) -> StoreHealth;
}

#[cfg(feature = "redis")]
/// The counters behind [`StoreHealth`], shared by a store's tasks.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The last command on the store succeeded.
    commands_ok: AtomicBool,
    /// Subscribed and up to date with the store's keys.
    listening: AtomicBool,
    failures: AtomicU64,
    published: AtomicU64,
    dropped: AtomicU64,
    received: AtomicU64,
}

#[cfg(feature = "redis")]
impl Health {
    pub(crate) fn snapshot(&self) -> StoreHealth {
        StoreHealth {
            available: self.commands_ok.load(Ordering::Relaxed)
                && self.listening.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            published: self.published.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn command_ok(&self) {
        self.commands_ok.store(true, Ordering::Relaxed);
    }

    pub(crate) fn published(&self) {
        self.published.fetch_add(1, Ordering::Relaxed);
        self.command_ok();
    }

    pub(crate) fn failed(&self) {
        self.commands_ok.store(false, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    pub(crate) fn listening(&self, listening: bool) {
        self.listening.store(listening, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }
}
