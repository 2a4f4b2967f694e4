//! The sharing itself: a registry of flights by key, each flight one future
//! driven by whichever of its waiters is polled, its output cloned to each.
//!
//! # Why `futures`' `Shared`
//!
//! Something must *drive* the shared future, and that something must not
//! be a spawned task: the future must be dropped the moment its last caller
//! leaves, and run only while someone waits for it. `futures`' [`Shared`]
//! does exactly that: whichever clone is polled polls the future, without
//! holding any lock while it does (an atomic state says who is polling;
//! only the list of wakers is behind a mutex, never held across the poll),
//! and every clone is woken when the future can progress or completes.
//! Dropping the last clone drops the future.
//!
//! What `Shared` does not do is written here: the registry (find the flight
//! of a key, [`WeakShared`] so that the registry never keeps a flight
//! alive), the cap on keys, and the count of waiters (for the
//! [`Shared`](super::Shared) extension, and so that the entry goes the
//! moment the last waiter leaves).

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_util::future::{FutureExt, Shared, WeakShared};
use pin_project_lite::pin_project;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only maps and counters are behind these locks, and no future is
    // polled under them: a panic elsewhere cannot leave them half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The flights in progress, by key, at most `max_keys` of them. Holds only
/// weak references: a flight lives exactly as long as someone waits for it,
/// and its entry goes when it ends or its last waiter leaves.
pub(crate) struct Registry<K> {
    map: Mutex<Flights<K>>,
    max_keys: usize,
}

struct Flights<K> {
    by_key: HashMap<K, Entry>,
    next_id: u64,
}

struct Entry {
    id: u64,
    /// A `WeakShared<Tracked<F>>`, and the flight's waiter count.
    flight: Box<dyn Any + Send + Sync>,
    waiters: Arc<AtomicUsize>,
}

/// What [`Registry::join_or_start`] did with a request.
pub(crate) enum Joined<C, F: Future> {
    /// The caller waits for a flight (its own, new, or one in progress).
    Flight(Waiter<F>),
    /// The registry is full (`max_keys` flights in progress): the request
    /// runs on its own, not shared. Here is its call back.
    Alone(C),
}

impl<K> Registry<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            map: Mutex::new(Flights {
                by_key: HashMap::new(),
                next_id: 0,
            }),
            max_keys,
        }
    }

    /// Keys with a flight in progress.
    pub(crate) fn len(&self) -> usize {
        lock(&self.map).by_key.len()
    }

    /// Joins the flight in progress for `key` (dropping `call`), or makes
    /// `share(call)` the flight of `key`, or, if `max_keys` flights are in
    /// progress, hands `call` back to run alone.
    pub(crate) fn join_or_start<C, F>(
        self: &Arc<Self>,
        key: K,
        call: C,
        share: impl FnOnce(C) -> F,
    ) -> Joined<C, F>
    where
        F: Future + Send + 'static,
        F::Output: Clone + Send + Sync + 'static,
    {
        let mut flights = lock(&self.map);
        if let Some(entry) = flights.by_key.get(&key) {
            let running = entry
                .flight
                .downcast_ref::<WeakShared<Tracked<F>>>()
                .and_then(WeakShared::upgrade);
            if let Some(shared) = running {
                // Counted under the registry's lock, so that the last waiter
                // leaving cannot remove the entry under a joiner's feet.
                entry.waiters.fetch_add(1, Ordering::SeqCst);
                let waiters = entry.waiters.clone();
                let id = entry.id;
                drop(flights);
                drop(call);
                return Joined::Flight(Waiter {
                    shared,
                    leave: Leave::new(self, key, id, waiters),
                });
            }
            // Unreachable in practice (an entry goes when its last waiter
            // leaves); a dead entry is simply replaced.
        } else if flights.by_key.len() >= self.max_keys {
            return Joined::Alone(call);
        }
        let id = flights.next_id;
        flights.next_id += 1;
        let waiters = Arc::new(AtomicUsize::new(1));
        let leave = Leave::new(self, key.clone(), id, waiters.clone());
        let shared = Tracked {
            action: share(call),
            done: Some(leave.clone()),
        }
        .shared();
        let weak = shared
            .downgrade()
            .expect("a Shared that was never polled has its future");
        flights.by_key.insert(
            key,
            Entry {
                id,
                flight: Box::new(weak),
                waiters,
            },
        );
        drop(flights);
        Joined::Flight(Waiter { shared, leave })
    }

    /// Removes `key`'s entry if it is flight `id` and, unless the flight is
    /// over, nobody waits for it any more.
    fn remove(&self, key: &K, id: u64, waiters: &AtomicUsize, finished: bool) {
        let mut flights = lock(&self.map);
        if !finished && waiters.load(Ordering::SeqCst) > 0 {
            return;
        }
        if flights.by_key.get(key).is_some_and(|entry| entry.id == id) {
            flights.by_key.remove(key);
        }
    }
}

/// How a waiter (or the flight, when it ends) takes the flight out of its
/// registry; the key's type is erased so that it stays out of the public
/// future's type.
#[derive(Clone)]
struct Leave {
    waiters: Arc<AtomicUsize>,
    remove: Arc<dyn Fn(bool) + Send + Sync>,
}

impl Leave {
    fn new<K>(registry: &Arc<Registry<K>>, key: K, id: u64, waiters: Arc<AtomicUsize>) -> Self
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
    {
        let registry = Arc::downgrade(registry);
        let count = waiters.clone();
        Self {
            waiters,
            remove: Arc::new(move |finished| {
                if let Some(registry) = registry.upgrade() {
                    registry.remove(&key, id, &count, finished);
                }
            }),
        }
    }
}

pin_project! {
    /// The shared action, which, when it ends, leaves the registry (so that
    /// no one joins a finished flight) and counts who was waiting.
    pub(crate) struct Tracked<F> {
        #[pin]
        action: F,
        done: Option<Leave>,
    }
}

impl<F: Future> Future for Tracked<F> {
    /// The output, and how many callers were waiting for it when it arrived.
    type Output = (F::Output, usize);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = std::task::ready!(this.action.poll(cx));
        let callers = match this.done.take() {
            Some(leave) => {
                // Out of the registry first: from here on nobody joins, so
                // the count is final.
                (leave.remove)(true);
                leave.waiters.load(Ordering::SeqCst)
            }
            None => 1,
        };
        Poll::Ready((output, callers))
    }
}

/// One caller waiting for a flight. Dropping it is that caller leaving; the
/// last one leaving drops the flight, and with it the shared action.
pub(crate) struct Waiter<F: Future> {
    shared: Shared<Tracked<F>>,
    leave: Leave,
}

impl<F> Waiter<F>
where
    F: Future,
    F::Output: Clone,
{
    /// The shared output, and how many callers were waiting for it when it
    /// arrived.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(F::Output, usize)> {
        Pin::new(&mut self.shared).poll(cx)
    }
}

impl<F: Future> Drop for Waiter<F> {
    fn drop(&mut self) {
        if self.leave.waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The registry re-checks the count under its lock: a joiner may
            // have come in between.
            (self.leave.remove)(false);
        }
        // If this was the last waiter, dropping `self.shared` after this
        // drops the shared future: the shared action is cancelled.
    }
}
