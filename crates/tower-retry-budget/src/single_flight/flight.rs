//! The sharing itself: one future driven by whichever of its waiters is
//! polled, its output cloned to each of them.
//!
//! A `tokio::sync::watch` (or `broadcast`) channel hands a result to many
//! receivers, but something must still *drive* the shared future, and that
//! something must not be a spawned task: the future must be dropped the
//! moment its last caller leaves, and run only while someone waits for it.
//! So the waiters drive it themselves, in the manner of `futures`'
//! `Shared`: the future is polled under a short lock by whichever waiter is
//! polled, always with a waker that wakes *every* waiter ([`Notifier`]), so
//! that a waiter leaving never leaves the future without anyone to poll it.
//! All safe code (`std::task::Wake`); no lock is held across an `await`.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while polling the shared future poisons the lock; the state
    // is still whole (the future stays where it was), so go on.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The flights in progress, by key. Holds only weak references: a flight
/// lives exactly as long as someone waits for it.
pub(crate) struct Registry<K> {
    map: Mutex<Flights<K>>,
}

struct Flights<K> {
    by_key: HashMap<K, Entry>,
    next_id: u64,
    /// Above this many entries, dead ones are swept before an insert.
    sweep_at: usize,
}

struct Entry {
    id: u64,
    flight: Weak<dyn Any + Send + Sync>,
}

const FIRST_SWEEP: usize = 64;

impl<K> Registry<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        Self {
            map: Mutex::new(Flights {
                by_key: HashMap::new(),
                next_id: 0,
                sweep_at: FIRST_SWEEP,
            }),
        }
    }

    /// Keys with a flight in progress.
    pub(crate) fn len(&self) -> usize {
        lock(&self.map).by_key.len()
    }

    /// Joins the flight in progress for `key`, or starts one with `start`.
    pub(crate) fn join_or_start<F, O>(
        self: &Arc<Self>,
        key: K,
        start: impl FnOnce() -> F,
    ) -> Waiter<F, O>
    where
        F: Future<Output = O> + Send + 'static,
        O: Clone + Send + Sync + 'static,
    {
        let mut flights = lock(&self.map);
        let running = flights
            .by_key
            .get(&key)
            .and_then(|entry| entry.flight.upgrade())
            .and_then(|any| any.downcast::<Flight<F, O>>().ok());
        if let Some(flight) = running {
            // Counted under the registry's lock, so that the last waiter
            // leaving cannot remove the entry under a joiner's feet.
            flight.waiters.fetch_add(1, Ordering::SeqCst);
            return Waiter::new(flight);
        }
        let id = flights.next_id;
        flights.next_id += 1;
        let registry = Arc::downgrade(self);
        let unregister_key = key.clone();
        let flight = Arc::new(Flight {
            state: Mutex::new(State::Running(Box::pin(start()))),
            notifier: Arc::new(Notifier::default()),
            next_waiter: AtomicU64::new(0),
            waiters: AtomicUsize::new(1),
            unregister: Box::new(move |waiters: &AtomicUsize, finished: bool| {
                if let Some(registry) = registry.upgrade() {
                    registry.remove(&unregister_key, id, waiters, finished);
                }
            }),
        });
        if flights.by_key.len() >= flights.sweep_at {
            flights
                .by_key
                .retain(|_, entry| entry.flight.strong_count() > 0);
            flights.sweep_at = (flights.by_key.len() * 2).max(FIRST_SWEEP);
        }
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&flight) as _;
        flights.by_key.insert(key, Entry { id, flight: weak });
        drop(flights);
        Waiter::new(flight)
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

enum State<F, O> {
    Running(Pin<Box<F>>),
    Done { output: O, callers: usize },
}

type Unregister = Box<dyn Fn(&AtomicUsize, bool) + Send + Sync>;

/// One shared action.
pub(crate) struct Flight<F, O> {
    state: Mutex<State<F, O>>,
    notifier: Arc<Notifier>,
    next_waiter: AtomicU64,
    /// Waiters still there.
    waiters: AtomicUsize,
    /// Takes the flight out of its registry (if it is still there).
    unregister: Unregister,
}

/// Wakes every waiter registered; they register again when polled.
#[derive(Default)]
struct Notifier {
    wakers: Mutex<HashMap<u64, Waker>>,
}

impl Notifier {
    fn register(&self, id: u64, waker: &Waker) {
        let mut wakers = lock(&self.wakers);
        match wakers.get_mut(&id) {
            Some(known) if known.will_wake(waker) => {}
            Some(known) => known.clone_from(waker),
            None => {
                wakers.insert(id, waker.clone());
            }
        }
    }

    fn forget(&self, id: u64) {
        lock(&self.wakers).remove(&id);
    }
}

impl Wake for Notifier {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let wakers: Vec<Waker> = lock(&self.wakers).drain().map(|(_, w)| w).collect();
        for waker in wakers {
            waker.wake();
        }
    }
}

/// One caller waiting for a flight. Dropping it is that caller leaving; the
/// last one leaving drops the flight, and with it the shared action.
pub(crate) struct Waiter<F, O> {
    flight: Arc<Flight<F, O>>,
    id: u64,
}

impl<F, O> Waiter<F, O> {
    fn new(flight: Arc<Flight<F, O>>) -> Self {
        let id = flight.next_waiter.fetch_add(1, Ordering::Relaxed);
        Self { flight, id }
    }
}

impl<F, O> Waiter<F, O>
where
    F: Future<Output = O>,
    O: Clone,
{
    /// The shared output, and how many callers were waiting for it when it
    /// arrived.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(O, usize)> {
        let flight = &self.flight;
        // Registered before polling, so that a wake during the poll reaches
        // this waiter too.
        flight.notifier.register(self.id, cx.waker());
        let mut state = lock(&flight.state);
        let output = match &mut *state {
            State::Done { output, callers } => return Poll::Ready((output.clone(), *callers)),
            State::Running(future) => {
                let waker = Waker::from(flight.notifier.clone());
                match future.as_mut().poll(&mut Context::from_waker(&waker)) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(output) => output,
                }
            }
        };
        let callers = flight.waiters.load(Ordering::SeqCst);
        // The future is dropped here; its output is kept for the waiters
        // that have not been polled yet.
        *state = State::Done {
            output: output.clone(),
            callers,
        };
        drop(state);
        (flight.unregister)(&flight.waiters, true);
        flight.notifier.wake_by_ref();
        Poll::Ready((output, callers))
    }
}

impl<F, O> Drop for Waiter<F, O> {
    fn drop(&mut self) {
        let flight = &self.flight;
        flight.notifier.forget(self.id);
        if flight.waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            (flight.unregister)(&flight.waiters, false);
        }
        // If this was the last waiter, dropping `self.flight` after this
        // drops the shared future: the shared action is cancelled.
    }
}
