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
//! that. Retries are never paced: a retry waits what its response asked.
//!
//! One [`Pacing`] is shared by every action of the layer; a clone shares
//! the same pacers (between layers, say).
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
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Extensions, HeaderMap};
use retry_budget::pace::{Admission, HeldLimit, Pacer, PacerConfig, QuotaIgnored, QuotaReader};
use retry_budget::Action;
use tokio::time::Instant;

use crate::clock::{elapsed_since, instant_at, Clock};
use crate::extra::{ActionExtra, BeforeFirst, Extra};
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
    /// The elapsed zero of every pacer: the first time one is used.
    origin: OnceLock<Instant>,
    pacers: Mutex<HashMap<String, Pacer>>,
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
                origin: OnceLock::new(),
                pacers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Reads the responses with `reader` (operator-named pairs, how
    /// `X-RateLimit-Reset` is read, the maximum hold). A new, unshared
    /// pacing: call before cloning.
    #[must_use]
    pub fn reader(self, reader: QuotaReader) -> Self {
        Self::with(reader, self.inner.config, self.inner.capacity)
    }

    /// The pacers' settings (spread, placement, token threshold, maximum
    /// hold). A new, unshared pacing: call before cloning.
    #[must_use]
    pub fn config(self, config: PacerConfig) -> Self {
        Self::with(self.inner.reader.clone(), config, self.inner.capacity)
    }

    /// At most `capacity` upstreams are paced at once: when full, an
    /// upstream whose limits have all expired makes room; otherwise a new
    /// upstream goes unpaced until one does. A new, unshared pacing: call
    /// before cloning.
    #[must_use]
    pub fn capacity(self, capacity: usize) -> Self {
        Self::with(self.inner.reader.clone(), self.inner.config, capacity)
    }

    /// The limits held for upstream `key` (an authority such as
    /// `https://api.test:443`), as last announced.
    pub fn limits(&self, key: &str) -> Vec<HeldLimit> {
        self.lock()
            .get(key)
            .map(|pacer| pacer.limits().cloned().collect())
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pacer>> {
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

    /// Runs `f` on the pacer of `key`, made if there is room.
    fn with_pacer<T>(&self, key: &str, f: impl FnOnce(&mut Pacer) -> T) -> Option<T> {
        let mut pacers = self.lock();
        if let Some(pacer) = pacers.get_mut(key) {
            return Some(f(pacer));
        }
        if pacers.len() >= self.inner.capacity {
            let idle = pacers
                .iter()
                .find(|(_, pacer)| pacer.limits().next().is_none())
                .map(|(key, _)| key.clone())?;
            pacers.remove(&idle);
        }
        let pacer = pacers
            .entry(key.to_owned())
            .or_insert_with(|| Pacer::new(self.inner.config));
        Some(f(pacer))
    }
}

impl Extra for Pacing {
    fn start(&self, request: Option<&mut Parts>) -> Option<Box<dyn ActionExtra>> {
        let request = request?;
        let key = authority_in(&request.uri, &request.headers)?;
        Some(Box::new(Paced {
            pacing: self.clone(),
            key,
            admission: None,
            sent_at: None,
        }))
    }
}

/// One action's part: its upstream's key, the admission of its first
/// attempt (given back if that attempt is never sent), the time its
/// latest attempt was sent.
struct Paced {
    pacing: Pacing,
    key: Arc<str>,
    admission: Option<Admission>,
    sent_at: Option<Duration>,
}

impl ActionExtra for Paced {
    /// The pacer admits the first attempt; a later instant is told to the
    /// core, which decides whether it waits or is never sent.
    fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        let now = self.pacing.now();
        let Some(admission) = self.pacing.with_pacer(&self.key, |pacer| pacer.admit(now)) else {
            return BeforeFirst::default();
        };
        let paced = admission.reason.clone().and_then(|reason| {
            let at = instant_at(self.pacing.origin(), admission.at)?;
            Some((clock.since(at), reason))
        });
        self.admission = Some(admission);
        BeforeFirst {
            paced,
            ..BeforeFirst::default()
        }
    }

    fn attempt(&mut self, _extensions: &mut Extensions, _action: &Action) {
        self.sent_at = Some(self.pacing.now());
        // Sent: the admission is spent.
        self.admission = None;
    }

    fn head(&mut self, headers: &HeaderMap, calendar: &mut dyn FnMut() -> Option<SystemTime>) {
        let Some(sent_at) = self.sent_at else {
            return;
        };
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
        if reading.states.is_empty() {
            return;
        }
        let received_at = self.pacing.now();
        self.pacing.with_pacer(&self.key, |pacer| {
            pacer.observe(sent_at, received_at, &reading.states);
        });
    }
}

impl Drop for Paced {
    /// The action ended before its first attempt was sent: its start no
    /// longer counts against any window.
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            self.pacing
                .with_pacer(&self.key, |pacer| pacer.release(&admission));
        }
    }
}
