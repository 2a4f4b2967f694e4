//! [`Pacing`]: the quota a service announces on its responses
//! (`RateLimit`, `X-RateLimit-*`, the AI providers' headers) respected
//! before it is spent, as an extra of the retry layer.
//!
//! Every response of an attempt (any status) is read by the core's
//! [`QuotaReader`] and observed by the [`Pacer`] of its upstream (the
//! request's authority, as the [hold-off](crate::hold_off) keys it); a new
//! action's first attempt is admitted by that pacer, and the core decides
//! ([`Action::pace`](retry_budget::Action::pace)) whether it waits for the
//! instant admitted or stops at once as [`paced`](retry_budget::Outcome::Paced),
//! nothing sent, when its first attempt would not fit its budget after
//! that. Retries are never paced: a retry waits what its response asked,
//! and its start is recorded in the pacer when it is planned (it spends
//! the window it lands in). Each start counts from the instant it is
//! sent.
//!
//! One [`Pacing`] is shared by every action of the layer; a clone shares
//! the same pacers (between layers, say). Across processes (a fleet of
//! proxies with one API token), `Pacing::shared` (feature `redis`) takes
//! each window's allowance from one count on Redis before a first attempt
//! is sent, so that the fleet together starts no more than the remaining
//! announced; Redis unreachable, each process paces alone.
//!
//! ```
//! use std::time::Duration;
//! use http::{Request, Response};
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_retry_budget::pace::Pacing;
//! use tower_retry_budget::{Policy, RetryBudgetLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // The service says: none left of 10 in this 2 s window.
//! let inner = service_fn(|_req: Request<String>| async {
//!     let response = Response::builder()
//!         .header("RateLimit", r#""default";r=0;t=2"#)
//!         .header("RateLimit-Policy", r#""default";q=10;w=2"#)
//!         .body(String::new())
//!         .unwrap();
//!     Ok::<_, std::convert::Infallible>(response)
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(Policy::default()).pace(Pacing::new()))
//!     .service(inner);
//! let get = || Request::get("http://api.test/").body(String::new()).unwrap();
//!
//! let start = tokio::time::Instant::now();
//! client.ready().await.unwrap().call(get()).await.unwrap();
//! // The next first attempt waits for the window's reset (and a small
//! // random spread).
//! client.ready().await.unwrap().call(get()).await.unwrap();
//! assert!(start.elapsed() >= Duration::from_secs(2));
//! # }
//! ```
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
#[cfg(feature = "redis")]
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Extensions, HeaderMap};
use retry_budget::pace::{
    Admission, HeldLimit, Pacer, PacerConfig, QuotaIgnored, QuotaNote, QuotaReader,
};
use retry_budget::trail::{Event, EventKind};
use retry_budget::{Action, Answer};
use tokio::time::Instant;

use crate::clock::{elapsed_since, instant_at, Clock};
use crate::extra::{ActionExtra, BeforeFirst, Extra, Moments};
#[cfg(feature = "redis")]
use crate::hold_off::{RedisAllowance, StoreHealth};

#[cfg(feature = "redis")]
mod fleet;
use crate::hold_off::authority::authority_in;

/// The default number of upstreams paced at once (see
/// [`Pacing::capacity`]).
pub const DEFAULT_PACING_CAPACITY: usize = 1024;

/// The pacers of a client's upstreams, one per upstream key, shared by
/// every action of the layers it is given to (see the
/// [module documentation](self)). Off unless given to
/// [`RetryBudgetLayer::pace`](crate::RetryBudgetLayer::pace).
#[derive(Clone)]
pub struct Pacing {
    inner: Arc<Inner>,
}

struct Inner {
    reader: QuotaReader,
    config: PacerConfig,
    capacity: usize,
    /// The fleet's shared allowance, if any.
    #[cfg(feature = "redis")]
    fleet: Option<RedisAllowance>,
    /// The elapsed zero of every pacer: the first time one is used.
    origin: OnceLock<Instant>,
    pacers: Mutex<Pacers>,
}

/// The pacers by upstream key.
#[derive(Default)]
struct Pacers {
    by_key: HashMap<Arc<str>, Slot>,
    /// The one looked up last: a client sends nearly all its requests to
    /// a few upstreams, and the key of each is most often the very one
    /// handed out before (see [`authority_in`]), so that it is found
    /// without hashing.
    last: Option<(Arc<str>, Slot)>,
}

impl Pacers {
    /// The slot of `key`, made if there is room: when full, an upstream
    /// whose limits have all expired makes room.
    fn slot(&mut self, key: &Arc<str>, capacity: usize, config: PacerConfig) -> Option<Slot> {
        if let Some((last, slot)) = &self.last {
            if Arc::ptr_eq(last, key) || **last == **key {
                return Some(Arc::clone(slot));
            }
        }
        let slot = match self.by_key.get(&**key) {
            Some(slot) => Arc::clone(slot),
            None => {
                if self.by_key.len() >= capacity {
                    self.evict_idle()?;
                }
                let slot = Arc::new(Mutex::new(Some(Pacer::new(config))));
                self.by_key.insert(Arc::clone(key), Arc::clone(&slot));
                slot
            }
        };
        self.last = Some((Arc::clone(key), Arc::clone(&slot)));
        Some(slot)
    }

    /// Lets go of a pacer whose limits have all expired, if any.
    fn evict_idle(&mut self) -> Option<()> {
        let idle = self
            .by_key
            .iter()
            .find(|(_, slot)| lock(slot).iter().all(|p| p.limits().next().is_none()))
            .map(|(key, _)| Arc::clone(key))?;
        if let Some(slot) = self.by_key.remove(&idle) {
            // An action holding it looks its key up again.
            lock(&slot).take();
        }
        if self.last.as_ref().is_some_and(|(last, _)| *last == idle) {
            self.last = None;
        }
        Some(())
    }
}

/// One upstream's pacer, held by the map and by the actions to that
/// upstream (each looks it up once): `None` once the map has let it go to
/// make room, so that an action holding it looks its key up again.
type Slot = Arc<Mutex<Option<Pacer>>>;

/// The pacer in `slot` (a panic elsewhere leaves it as it was: go on
/// with it).
fn lock(slot: &Slot) -> std::sync::MutexGuard<'_, Option<Pacer>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Pacing {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Pacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacing")
            .field("reader", &self.inner.reader)
            .field("config", &self.inner.config)
            .field("capacity", &self.inner.capacity)
            .finish_non_exhaustive()
    }
}

impl Pacing {
    /// Every field the core's [`QuotaReader`] knows, the pacer's default
    /// settings ([`PacerConfig::default`]), at most
    /// [`DEFAULT_PACING_CAPACITY`] upstreams.
    pub fn new() -> Self {
        Self::with(
            QuotaReader::new(),
            PacerConfig::default(),
            DEFAULT_PACING_CAPACITY,
        )
    }

    fn with(reader: QuotaReader, config: PacerConfig, capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                reader,
                config,
                capacity,
                #[cfg(feature = "redis")]
                fleet: None,
                origin: OnceLock::new(),
                pacers: Mutex::new(Pacers::default()),
            }),
        }
    }

    /// Reads the responses with `reader` (operator-named pairs, how
    /// `X-RateLimit-Reset` is read, the maximum hold). A new, unshared
    /// pacing: call before cloning.
    #[must_use]
    pub fn reader(self, reader: QuotaReader) -> Self {
        let new = Self::with(reader, self.inner.config, self.inner.capacity);
        self.rebuilt(new)
    }

    /// The pacers' settings (spread, placement, token threshold, maximum
    /// hold). A new, unshared pacing: call before cloning.
    #[must_use]
    pub fn config(self, config: PacerConfig) -> Self {
        let new = Self::with(self.inner.reader.clone(), config, self.inner.capacity);
        self.rebuilt(new)
    }

    /// At most `capacity` upstreams are paced at once: when full, an
    /// upstream whose limits have all expired makes room; otherwise a new
    /// upstream goes unpaced until one does. A new, unshared pacing: call
    /// before cloning.
    #[must_use]
    pub fn capacity(self, capacity: usize) -> Self {
        let new = Self::with(self.inner.reader.clone(), self.inner.config, capacity);
        self.rebuilt(new)
    }

    /// `new`, with the fleet's allowance of `self` (if any).
    #[cfg_attr(not(feature = "redis"), allow(unused_mut, clippy::unused_self))]
    fn rebuilt(&self, mut new: Self) -> Self {
        #[cfg(feature = "redis")]
        if let Some(inner) = Arc::get_mut(&mut new.inner) {
            inner.fleet.clone_from(&self.inner.fleet);
        }
        new
    }

    /// Shares each window's allowance with every process whose pacing is
    /// shared on the same Redis store (URL and namespace; see
    /// [`RedisAllowance`], whose documentation describes what is kept in
    /// Redis): before a new action's first attempt is sent, once its
    /// pacer admits it, one is taken from the fleet's count of each request
    /// limit's window; a window the fleet has spent goes back to the
    /// pacer, which holds the attempt until its end (or stops it as
    /// `paced` when it does not fit its budget). Redis down, refusing or
    /// slow: the process paces alone, and
    /// [`store_health`](Self::store_health) says so. A new, unshared
    /// pacing: call before cloning.
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn shared(self, allowance: RedisAllowance) -> Self {
        let mut new = Self::with(
            self.inner.reader.clone(),
            self.inner.config,
            self.inner.capacity,
        );
        if let Some(inner) = Arc::get_mut(&mut new.inner) {
            inner.fleet = Some(allowance);
        }
        new
    }

    /// The health of the fleet's shared allowance, if the pacing is
    /// [shared](Self::shared): `available` is whether its last take
    /// reached Redis.
    #[cfg(feature = "redis")]
    pub fn store_health(&self) -> Option<StoreHealth> {
        self.inner.fleet.as_ref().map(RedisAllowance::health)
    }

    /// The limits held for upstream `key` (an authority such as
    /// `https://api.test:443`), as last announced.
    pub fn limits(&self, key: &str) -> Vec<HeldLimit> {
        let Some(slot) = self.lock().by_key.get(key).cloned() else {
            return Vec::new();
        };
        let pacer = lock(&slot);
        pacer.iter().flat_map(Pacer::limits).cloned().collect()
    }

    /// Every upstream's limits held now (not yet reset), as last
    /// announced, by upstream key: for metrics. At most the pacing's
    /// capacity of upstreams, each at most
    /// [`MAX_LIMITS`](retry_budget::pace::MAX_LIMITS) limits.
    pub fn known(&self) -> Vec<(String, HeldLimit)> {
        let now = self.now();
        let mut known = Vec::new();
        for (key, slot) in &self.lock().by_key {
            let pacer = lock(slot);
            let held = pacer.iter().flat_map(Pacer::limits);
            known.extend(
                held.filter(|limit| limit.resets_at > now)
                    .map(|limit| (key.to_string(), limit.clone())),
            );
        }
        known
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pacers> {
        // A panic elsewhere leaves the map as it was: go on with it.
        self.inner
            .pacers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn origin(&self) -> Instant {
        *self.inner.origin.get_or_init(Instant::now)
    }

    /// The pacers' elapsed time now.
    fn now(&self) -> Duration {
        elapsed_since(self.origin())
    }

    /// The pacers' elapsed time at `at` (zero before their origin).
    fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin())
    }

    /// Runs `f` on the pacer of `key`, made if there is room; with it,
    /// the pacer's slot, for the action to use again without the map.
    fn with_pacer<T>(&self, key: &Arc<str>, f: impl FnOnce(&mut Pacer) -> T) -> Option<(T, Slot)> {
        let mut pacers = self.lock();
        let slot = pacers.slot(key, self.inner.capacity, self.inner.config)?;
        // Run with the map held, as the map lets a pacer go only then.
        let done = lock(&slot).as_mut().map(f)?;
        Some((done, slot))
    }
}

impl Extra for Pacing {
    type Part = Paced;

    fn start(&self, request: Option<&mut Parts>) -> Option<Paced> {
        let request = request?;
        let key = authority_in(&request.uri, &request.headers)?;
        Some(Paced {
            pacing: self.clone(),
            key,
            slot: None,
            admission: None,
            retry: None,
            sent_at: None,
            notes: Vec::new(),
            #[cfg(feature = "redis")]
            asking: fleet::Asking::default(),
        })
    }
}

/// One action's part: its upstream's key, the admission of its first
/// attempt (given back if that attempt is never sent), the time its
/// latest attempt was sent.
pub(crate) struct Paced {
    pacing: Pacing,
    key: Arc<str>,
    /// Its upstream's pacer, once looked up.
    slot: Option<Slot>,
    /// The start recorded for its first attempt (the instant admitted),
    /// until it is sent.
    admission: Option<Duration>,
    /// The start recorded for a planned retry, until it is sent.
    retry: Option<Duration>,
    sent_at: Option<Duration>,
    /// The quota fields of the latest response set aside or clamped, for
    /// the core's trail.
    notes: Vec<QuotaNote>,
    /// The fleet's answer for the first attempt, when shared.
    #[cfg(feature = "redis")]
    asking: fleet::Asking,
}

impl ActionExtra for Paced {
    /// Not the caller's leaving, the effects on the client, nor the
    /// report.
    const MOMENTS: Moments = Moments::BEFORE_FIRST
        .and(Moments::ATTEMPT)
        .and(Moments::HEAD)
        .and(Moments::ANSWER);

    /// The pacer admits the first attempt; a later instant is told to the
    /// core, which decides whether it waits or is never sent.
    fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        // The action's own reading of the clock (its origin, read now).
        let now = self.pacing.since(clock.instant());
        let Some(admission) = self.with_pacer(|pacer| pacer.admit(now)) else {
            return BeforeFirst::default();
        };
        self.admission = Some(admission.at);
        let paced = admission.reason.and_then(|reason| {
            let at = instant_at(self.pacing.origin(), admission.at)?;
            Some((clock.since(at), reason))
        });
        BeforeFirst {
            paced,
            asks: self.asks(),
            ..BeforeFirst::default()
        }
    }

    /// A shared pacing asks the fleet before the first attempt is sent, if
    /// its pacer holds a window to share.
    #[cfg(feature = "redis")]
    fn poll_first(&mut self, cx: &mut Context<'_>, clock: &mut Clock) -> Poll<crate::extra::Paced> {
        // A handle of its own, so that the pacer can be asked meanwhile.
        let pacing = self.pacing.clone();
        let Some(allowance) = pacing.inner.fleet.as_ref() else {
            return Poll::Ready(None);
        };
        if let fleet::Asking::Idle = self.asking {
            let now = pacing.now();
            let windows = self
                .with_pacer(|pacer| pacer.fleet_windows(now))
                .unwrap_or_default();
            if windows.is_empty() {
                return Poll::Ready(None);
            }
            self.asking.start(allowance, &self.key, now, windows);
        }
        let Some((limit, window_left)) = std::task::ready!(self.asking.poll(cx)) else {
            return Poll::Ready(None);
        };
        let (Some(admission), now) = (self.admission.take(), self.pacing.now()) else {
            return Poll::Ready(None);
        };
        // The pacer decides again, with the fleet's word.
        let Some(again) = self
            .with_pacer(|pacer| pacer.fleet_spent(&limit, now, window_left, &recorded(admission)))
        else {
            return Poll::Ready(None);
        };
        self.admission = Some(again.at);
        let paced = again.reason.and_then(|reason| {
            let at = instant_at(self.pacing.origin(), again.at)?;
            Some((clock.since(at), reason))
        });
        Poll::Ready(paced)
    }

    /// A planned retry's start is recorded in the pacer (a retry spends
    /// the window it lands in); the wait itself is the core's.
    fn listens(&self) -> bool {
        true
    }

    fn event(&mut self, event: &Event) {
        // A wait planned once an attempt was sent is a retry's (the first
        // attempt's own waits, paced or held off, come before).
        let (EventKind::WaitPlanned { wait, .. }, Some(_)) = (&event.kind, self.sent_at) else {
            return;
        };
        let wait = *wait;
        let now = self.pacing.now();
        let previous = self.retry.take();
        self.retry = self.with_pacer(|pacer| {
            if let Some(previous) = previous {
                pacer.release(&recorded(previous));
            }
            pacer.retry_planned(now, wait).at
        });
    }

    fn attempt(&mut self, _extensions: &mut Extensions, _action: &Action, clock: &mut Clock) {
        // At the step's reading: sent in the call that opened the action,
        // the one read before the first attempt.
        let now = self.pacing.since(clock.instant());
        self.sent_at = Some(now);
        // Sent: the recorded start moves to the instant it was sent.
        if let Some(at) = self.admission.take().or_else(|| self.retry.take()) {
            self.with_pacer(|pacer| pacer.sent(&recorded(at), now));
        }
    }

    fn head(&mut self, headers: &HeaderMap, calendar: &mut dyn FnMut() -> Option<SystemTime>) {
        let Some(sent_at) = self.sent_at else {
            return;
        };
        // Most heads hold no field the reader knows: their names tell.
        let reader = &self.pacing.inner.reader;
        if !headers.keys().any(|name| reader.knows(name.as_str())) {
            self.notes.clear();
            return;
        }
        let lines = || {
            headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
        };
        // The calendar is read only when a field needs it.
        let mut reading = self.pacing.inner.reader.read(lines(), None);
        if reading
            .notes
            .iter()
            .any(|note| note.why == QuotaIgnored::NoTrustedCalendar)
        {
            reading = self.pacing.inner.reader.read(lines(), calendar());
        }
        self.notes = std::mem::take(&mut reading.notes);
        if reading.states.is_empty() {
            return;
        }
        let received_at = self.pacing.now();
        self.with_pacer(|pacer| {
            pacer.observe(sent_at, received_at, &reading.states);
        });
    }

    /// The notes of the response just read go with its answer to the
    /// core, which records them in the trail.
    fn answer(&mut self, answer: &mut Answer<'_>) {
        if self.notes.is_empty() {
            return;
        }
        let notes = std::mem::take(&mut self.notes);
        crate::extra::amend(answer, |answer| answer.quota_notes(notes));
    }
}

impl Paced {
    /// Runs `f` on its upstream's pacer: the one looked up before, unless
    /// the map has let it go since; otherwise looked up (made if there is
    /// room).
    fn with_pacer<T>(&mut self, f: impl FnOnce(&mut Pacer) -> T) -> Option<T> {
        if let Some(slot) = &self.slot {
            if let Some(pacer) = lock(slot).as_mut() {
                return Some(f(pacer));
            }
        }
        let (done, slot) = self.pacing.with_pacer(&self.key, f)?;
        self.slot = Some(slot);
        Some(done)
    }

    /// Whether the first attempt waits for the fleet's answer.
    #[cfg(feature = "redis")]
    fn asks(&self) -> bool {
        self.pacing.inner.fleet.is_some()
            && self.slot.as_ref().is_some_and(|slot| {
                lock(slot)
                    .as_ref()
                    .is_some_and(|pacer| !pacer.fleet_windows(self.pacing.now()).is_empty())
            })
    }

    #[cfg(not(feature = "redis"))]
    #[allow(clippy::unused_self)]
    const fn asks(&self) -> bool {
        false
    }
}

impl Drop for Paced {
    /// The action ended before its first attempt (or a planned retry) was
    /// sent: its start no longer counts against any window.
    fn drop(&mut self) {
        if let Some(at) = self.admission.take().or_else(|| self.retry.take()) {
            self.with_pacer(|pacer| pacer.release(&recorded(at)));
        }
    }
}

/// The admission whose start was recorded at `at` (the pacer finds a
/// recorded start by its instant alone).
const fn recorded(at: Duration) -> Admission {
    Admission { at, reason: None }
}
