//! [`HoldOff`]: the map behind one short lock, shared by clones, with the
//! maximum hold applied to everything that goes in.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::config::{HoldOffBuilder, HoldOffError};
use super::map::{Held, Map};
#[cfg(feature = "redis")]
use super::store::Share;
use super::store::StoreHealth;

/// A bounded map from authority to the instant until which the service asked
/// the client to wait, each hold cut to a maximum. Clones share one map.
///
/// The shared hold-off: when a service tells one action to wait (429 with a
/// valid `Retry-After`), later first attempts to the same service wait too.
///
/// # Why
///
/// `Retry-After` is the server speaking to the *client*, not to one request:
/// "don't come back before then". Without a shared memory of it, every new
/// action of the client learns it again the hard way, with a request that
/// spends the service's quota and the user's time on a certain 429. With
/// [`RetryBudgetLayer::hold_off`](crate::RetryBudgetLayer::hold_off), a new
/// action to an authority that is being held off either waits until the
/// hold-off has passed, if its first attempt's full cap still fits in its
/// budget after that (the wait counts in its budget), or stops at once as
/// `held_off` without sending anything (an [`Error`](crate::Error) of kind
/// [`NotSent`](crate::ErrorKind::NotSent), with its report). The decision is
/// the core's ([`Action::hold_off`](retry_budget::Action::hold_off)); a
/// `HoldOff` only keeps the map.
///
/// A used-up quota (an action that ended `not_retryable`, category
/// `quota`, on a status its policy retries) holds the service too, for
/// [`QUOTA_HOLD`](retry_budget::defaults::QUOTA_HOLD) (the core's
/// [`ClientEffects::quota_hold_until`](retry_budget::ClientEffects::quota_hold_until)):
/// such a hold is not waited out, since no wait helps a used-up quota; a
/// first attempt it holds ends at once as `held_off`, category `quota`,
/// nothing sent ([`Action::quota_held`](retry_budget::Action::quota_held)),
/// so that a client's own immediate repeats of that answer (an SDK that
/// retries every 429) do not reach the service. Quota holds stay in this
/// process (a store shares only the delays).
///
/// Only first attempts consult it: a retry already waits for what its own
/// service asked. The key is the service, `scheme://host:port` (from the
/// request URI, or the `Host` header for a relative URI), case-insensitive;
/// never the userinfo of the URI, so no credentials are kept.
///
/// # Bounded
///
/// * **In time**: a hold is cut to the [maximum hold](HoldOffBuilder::max_hold)
///   (default [`DEFAULT_MAX_HOLD`](crate::hold_off::DEFAULT_MAX_HOLD), 10 minutes), so one `Retry-After:
///   1000000000` cannot hold a service for the life of the process. Any
///   instant is accepted, and none panics.
/// * **In space**: the map holds at most `capacity` authorities. When it is
///   full, expired entries are dropped first; if none has expired, the entry
///   that expires soonest is forgotten (the least of the hold-offs it knows).
///   Both cost O(log n) under the map's lock, never a scan (see `map.rs`).
///
/// ```
/// use retry_budget::Policy;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::{hold_off::HoldOff, RetryBudgetLayer};
///
/// # let client = tower::service_fn(|_: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let hold_off = HoldOff::new(256)?;
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone()))
///     .service(client);
/// # let _ = client;
/// assert!(hold_off.is_empty());
/// # Ok::<(), tower_retry_budget::hold_off::HoldOffError>(())
/// ```
#[derive(Clone)]
pub struct HoldOff {
    inner: Arc<Inner>,
}

struct Inner {
    map: Mutex<Map>,
    /// Services whose used-up quota holds first attempts back (kept apart
    /// from the delays: such a hold is not waited out, nothing is sent;
    /// this process's alone).
    quota: Mutex<Map>,
    /// `quota`'s length as its lock was last released.
    quota_entries: AtomicUsize,
    /// The map's length as its lock was last released: when zero, a lookup
    /// answers at once, with no lock, clock reading or hashing (the usual
    /// case, no service having asked for a wait).
    entries: AtomicUsize,
    capacity: usize,
    max_hold: Duration,
    /// Where holds are shared with other processes, if anywhere.
    #[cfg(feature = "redis")]
    shared: Option<Box<dyn Share>>,
}

impl HoldOff {
    /// A map of at most `capacity` authorities, with the
    /// [default maximum hold](super::DEFAULT_MAX_HOLD).
    ///
    /// # Errors
    ///
    /// [`HoldOffError::ZeroCapacity`].
    pub fn new(capacity: usize) -> Result<Self, HoldOffError> {
        Self::builder().capacity(capacity).build()
    }

    /// A builder, to set the capacity and the maximum hold.
    pub fn builder() -> HoldOffBuilder {
        HoldOffBuilder::default()
    }

    pub(super) fn from_config(config: HoldOffBuilder) -> Self {
        Self {
            inner: Arc::new(Inner {
                map: Mutex::new(Map::new(config.capacity)),
                quota: Mutex::new(Map::new(config.capacity)),
                quota_entries: AtomicUsize::new(0),
                entries: AtomicUsize::new(0),
                capacity: config.capacity,
                max_hold: config.max_hold,
                #[cfg(feature = "redis")]
                shared: None,
            }),
        }
    }

    /// A map whose holds are shared through `store`, whose task starts on
    /// `runtime`.
    #[cfg(feature = "redis")]
    pub(super) fn with_redis(
        config: HoldOffBuilder,
        store: super::redis::RedisStore,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        Self {
            inner: Arc::new_cyclic(|weak| {
                let sink = Sink(weak.clone());
                let publisher = super::redis::start(store, sink, runtime);
                Inner {
                    map: Mutex::new(Map::new(config.capacity)),
                    quota: Mutex::new(Map::new(config.capacity)),
                    quota_entries: AtomicUsize::new(0),
                    entries: AtomicUsize::new(0),
                    capacity: config.capacity,
                    max_hold: config.max_hold,
                    shared: Some(Box::new(publisher)),
                }
            }),
        }
    }

    /// The instant until which `authority` is held off, if that is still
    /// ahead.
    pub fn until(&self, authority: &str) -> Option<Instant> {
        if self.inner.entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        let key = lowercase(authority);
        let now = Instant::now();
        self.locked(|map| map.until(now, &key))
    }

    /// Records that `authority` asked the client to wait until `until`,
    /// cut to now + the [maximum hold](Self::max_hold), keeping the later
    /// of this and any hold-off already known. Any instant is accepted:
    /// one in the past changes nothing, one beyond the maximum is cut.
    ///
    /// With a shared store, a new or lengthened hold is also handed to the
    /// store (without waiting for it) for the other processes.
    pub fn hold(&self, authority: &str, until: Instant) {
        let key = lowercase(authority);
        let now = Instant::now();
        let until = self.clamp(now, until);
        let held = self.locked(|map| map.hold(now, &key, until));
        #[cfg(feature = "redis")]
        if let (Held::Lengthened, Some(shared)) = (held, &self.inner.shared) {
            shared.publish(&key, until.saturating_duration_since(now));
        }
        #[cfg(not(feature = "redis"))]
        let _: Held = held;
    }

    /// The instant until which `authority`'s used-up quota holds first
    /// attempts back, if that is still ahead (see
    /// [`hold_quota`](Self::hold_quota)).
    pub fn quota_until(&self, authority: &str) -> Option<Instant> {
        if self.inner.quota_entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        let key = lowercase(authority);
        let now = Instant::now();
        self.quota_locked(|map| map.until(now, &key))
    }

    /// Records that `authority` said its quota is used up, holding first
    /// attempts back until `until` (the core's
    /// [`ClientEffects::quota_hold_until`](retry_budget::ClientEffects::quota_hold_until)),
    /// cut to the maximum hold. Such a hold is not waited out: a request
    /// it holds is not sent ([`Action::quota_held`](retry_budget::Action::quota_held)).
    /// Kept in this process only, bounded as the delays are.
    pub fn hold_quota(&self, authority: &str, until: Instant) {
        let key = lowercase(authority);
        let now = Instant::now();
        let until = self.clamp(now, until);
        self.quota_locked(|map| map.hold(now, &key, until));
    }

    /// Runs `f` on the quota holds under their lock, and records the
    /// length it leaves.
    fn quota_locked<R>(&self, f: impl FnOnce(&mut Map) -> R) -> R {
        // Left whole by every method, as the map of delays.
        let mut map = self
            .inner
            .quota
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let result = f(&mut map);
        self.inner.quota_entries.store(map.len(), Ordering::Release);
        result
    }

    /// What the shared store (if any) has done, and whether it works now:
    /// `None` for a map of this process alone. For a metric such as "the
    /// shared hold-off store is unavailable".
    pub fn store_health(&self) -> Option<StoreHealth> {
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.inner.shared {
            return Some(shared.health());
        }
        None
    }

    /// The longest hold kept.
    pub fn max_hold(&self) -> Duration {
        self.inner.max_hold
    }

    /// Authorities currently in the map (expired ones included until the map
    /// is next used).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most authorities the map holds.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// `until`, or now + the maximum hold if that is sooner. Through the
    /// crate's one saturating mapping: if now + the maximum cannot be
    /// represented, `until` (which can) is already sooner.
    fn clamp(&self, now: Instant, until: Instant) -> Instant {
        match crate::clock::instant_at(now, self.inner.max_hold) {
            Some(latest) => until.min(latest),
            None => until,
        }
    }

    /// Runs `f` on the map under its lock, and records the length it
    /// leaves.
    fn locked<R>(&self, f: impl FnOnce(&mut Map) -> R) -> R {
        let mut map = self.lock();
        let result = f(&mut map);
        self.inner.entries.store(map.len(), Ordering::Release);
        result
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // The map is left whole by every method (no panic between its two
        // structures' updates), so a poisoned lock is still a good map.
        self.inner
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A weak handle on a map, through which a store applies the holds of
/// other processes (without publishing them again). It keeps nothing alive.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct Sink(Weak<Inner>);

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
impl Sink {
    /// Holds `authority` for `hold` from now, cut to the maximum hold;
    /// `None` once the map is gone.
    pub(crate) fn apply(&self, authority: &str, hold: Duration) -> Option<()> {
        let inner = self.0.upgrade()?;
        let map = HoldOff { inner };
        let now = Instant::now();
        let hold = hold.min(map.inner.max_hold);
        if let Some(until) = crate::clock::instant_at(now, hold) {
            map.locked(|map| map.hold(now, &lowercase(authority), until));
        }
        Some(())
    }

    /// Every live hold, with what is left of it; `None` once the map is
    /// gone.
    pub(crate) fn live(&self) -> Option<Vec<(Arc<str>, Duration)>> {
        let inner = self.0.upgrade()?;
        let map = HoldOff { inner };
        let now = Instant::now();
        let live = map.locked(|map| map.live(now));
        Some(
            live.into_iter()
                .map(|(key, until)| (key, until.saturating_duration_since(now)))
                .collect(),
        )
    }
}

/// Keys are lower-case; most already are, so this rarely allocates.
fn lowercase(authority: &str) -> Cow<'_, str> {
    if authority.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(authority.to_ascii_lowercase())
    } else {
        Cow::Borrowed(authority)
    }
}

impl Default for HoldOff {
    /// A map of [`DEFAULT_HOLD_OFF_CAPACITY`](super::DEFAULT_HOLD_OFF_CAPACITY)
    /// authorities with the [default maximum hold](super::DEFAULT_MAX_HOLD).
    fn default() -> Self {
        Self::from_config(HoldOffBuilder::default())
    }
}

impl fmt::Debug for HoldOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HoldOff")
            .field("authorities", &self.len())
            .field("capacity", &self.inner.capacity)
            .field("max_hold", &self.inner.max_hold)
            .field("store", &self.store_health())
            .finish()
    }
}

/// Built here, beside [`HoldOff`], so that the configuration's module
/// does not import the handle's (no import cycle).
impl HoldOffBuilder {
    /// The map (and, with a shared store, the store's task, started on the
    /// current tokio runtime).
    ///
    /// # Errors
    ///
    /// [`HoldOffError::ZeroCapacity`], [`HoldOffError::MaxHoldOutOfRange`];
    /// with a shared store, `HoldOffError::NoRuntime` outside a tokio
    /// runtime.
    pub fn build(self) -> Result<HoldOff, HoldOffError> {
        self.check()?;
        #[cfg(feature = "redis")]
        if let Some(store) = self.redis.clone() {
            let runtime =
                tokio::runtime::Handle::try_current().map_err(|_| HoldOffError::NoRuntime)?;
            return Ok(HoldOff::with_redis(self, store, &runtime));
        }
        Ok(HoldOff::from_config(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_map_answers_without_its_lock_and_a_hold_is_seen_until_it_ends() {
        let map = HoldOff::new(4).unwrap();
        let entries = |map: &HoldOff| map.inner.entries.load(Ordering::Acquire);
        assert_eq!((map.until("a.test:80"), entries(&map)), (None, 0));
        let until = Instant::now() + secs(3);
        map.hold("A.test:80", until);
        assert_eq!(entries(&map), 1);
        assert_eq!(map.until("a.test:80"), Some(until));
        assert_eq!(
            map.clone().until("A.TEST:80"),
            Some(until),
            "a clone shares it"
        );
        tokio::time::advance(secs(3)).await;
        // Ended: the lookup purges it and the count falls back to zero.
        assert_eq!(map.until("a.test:80"), None);
        assert_eq!(entries(&map), 0);
        assert_eq!(map.until("a.test:80"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_map_stays_bounded_and_keeps_the_longest_hold_offs() {
        let map = HoldOff::new(2).unwrap();
        let now = Instant::now();
        map.hold("a:80", now + secs(5));
        map.hold("b:80", now + secs(9));
        map.hold("c:80", now + secs(7));
        assert_eq!(map.len(), 2);
        assert_eq!(map.until("a:80"), None, "the soonest was forgotten");
        assert_eq!(map.until("C:80"), Some(now + secs(7)));
        // Shorter than all it knows: not worth a place.
        map.hold("d:80", now + secs(1));
        assert_eq!(map.until("d:80"), None);
        // Expired entries make room first.
        tokio::time::advance(secs(8)).await;
        map.hold("e:80", Instant::now() + secs(1));
        assert_eq!(map.len(), 2);
        assert!(map.until("b:80").is_some() && map.until("e:80").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_later_hold_off_wins_and_past_ones_are_ignored() {
        let map = HoldOff::default();
        let now = Instant::now();
        map.hold("a:80", now + secs(5));
        map.hold("a:80", now + secs(3));
        assert_eq!(map.until("a:80"), Some(now + secs(5)));
        map.hold("b:80", now);
        assert!(map.until("b:80").is_none());
        assert_eq!(HoldOff::new(0).unwrap_err(), HoldOffError::ZeroCapacity);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_is_cut_to_the_maximum_and_any_instant_is_accepted() {
        let map = HoldOff::builder().max_hold(secs(60)).build().unwrap();
        let now = Instant::now();
        // The furthest instant the runtime can represent: cut, no panic.
        let mut far = now;
        for shift in (0..64).rev() {
            if let Some(later) = crate::clock::instant_at(far, Duration::from_secs(1 << shift)) {
                far = later;
            }
        }
        map.hold("http://a:80", far);
        assert_eq!(map.until("http://a:80"), Some(now + secs(60)));
        tokio::time::advance(secs(60)).await;
        assert_eq!(
            map.until("http://a:80"),
            None,
            "the hold ended at the maximum"
        );
    }

    #[test]
    fn the_maximum_hold_is_checked() {
        let build = |d| HoldOff::builder().max_hold(d).build().map(|h| h.max_hold());
        assert_eq!(build(secs(1)), Ok(secs(1)));
        assert_eq!(
            build(super::super::MAX_MAX_HOLD),
            Ok(super::super::MAX_MAX_HOLD)
        );
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            secs(86_401),
            Duration::MAX,
        ] {
            assert_eq!(
                build(bad),
                Err(HoldOffError::MaxHoldOutOfRange { max_hold: bad })
            );
        }
        assert_eq!(
            HoldOff::default().max_hold(),
            super::super::DEFAULT_MAX_HOLD
        );
    }
}
