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
//! service asked. The key is the request URI's authority (`host:port`, or the
//! `Host` header for a relative URI), case-insensitive.
//!
//! # Bounded
//!
//! The map holds at most `capacity` authorities. When it is full, expired
//! entries are dropped first; if none has expired, the entry that expires
//! soonest is forgotten (the least of the hold-offs it knows).
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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use http::header::HOST;
use http::Request;
use tokio::time::Instant;

/// The default capacity of a [`HoldOff`]: 1024 authorities.
pub const DEFAULT_HOLD_OFF_CAPACITY: usize = 1024;

/// A bounded map from authority to the instant until which the service asked
/// the client to wait. Clones share one map. See the [module docs](self).
#[derive(Clone)]
pub struct HoldOff {
    inner: Arc<Mutex<Map>>,
}

struct Map {
    until: HashMap<Box<str>, Instant>,
    capacity: usize,
}

/// Why a [`HoldOff`] cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldOffError {
    /// A map of capacity zero could hold nothing.
    ZeroCapacity,
}

impl fmt::Display for HoldOffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCapacity => f.write_str("the hold-off map's capacity must be at least 1"),
        }
    }
}

impl std::error::Error for HoldOffError {}

impl HoldOff {
    /// A map of at most `capacity` authorities.
    ///
    /// # Errors
    ///
    /// [`HoldOffError::ZeroCapacity`].
    pub fn new(capacity: usize) -> Result<Self, HoldOffError> {
        if capacity == 0 {
            return Err(HoldOffError::ZeroCapacity);
        }
        Ok(Self {
            inner: Arc::new(Mutex::new(Map {
                until: HashMap::new(),
                capacity,
            })),
        })
    }

    /// The instant until which `authority` is held off, if that is still
    /// ahead.
    pub fn until(&self, authority: &str) -> Option<Instant> {
        let key = authority.to_ascii_lowercase();
        let now = Instant::now();
        let mut map = self.lock();
        match map.until.get(key.as_str()) {
            Some(until) if *until > now => Some(*until),
            Some(_) => {
                map.until.remove(key.as_str());
                None
            }
            None => None,
        }
    }

    /// Records that `authority` asked the client to wait until `until`
    /// (keeping the later of this and any hold-off already known).
    pub fn hold(&self, authority: &str, until: Instant) {
        let key = authority.to_ascii_lowercase();
        let now = Instant::now();
        if until <= now {
            return;
        }
        let mut map = self.lock();
        if let Some(known) = map.until.get_mut(key.as_str()) {
            *known = (*known).max(until);
            return;
        }
        if map.until.len() >= map.capacity {
            map.until.retain(|_, until| *until > now);
        }
        if map.until.len() >= map.capacity {
            let soonest = map
                .until
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(key, until)| (key.clone(), *until));
            match soonest {
                Some((_, soonest)) if soonest >= until => return,
                Some((key, _)) => {
                    map.until.remove(&key);
                }
                None => {}
            }
        }
        map.until.insert(key.into_boxed_str(), until);
    }

    /// Authorities currently in the map (expired ones included until they
    /// are next looked at or pushed out).
    pub fn len(&self) -> usize {
        self.lock().until.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most authorities the map holds.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for HoldOff {
    /// A map of [`DEFAULT_HOLD_OFF_CAPACITY`] authorities.
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Map {
                until: HashMap::new(),
                capacity: DEFAULT_HOLD_OFF_CAPACITY,
            })),
        }
    }
}

impl fmt::Debug for HoldOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = self.lock();
        f.debug_struct("HoldOff")
            .field("authorities", &map.until.len())
            .field("capacity", &map.capacity)
            .finish()
    }
}

/// The key of a request: its URI's authority, else its `Host` header.
pub(crate) fn authority_of<B>(request: &Request<B>) -> Option<String> {
    if let Some(authority) = request.uri().authority() {
        return Some(authority.as_str().to_ascii_lowercase());
    }
    request
        .headers()
        .get(HOST)
        .and_then(|host| host.to_str().ok())
        .map(str::to_ascii_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_map_stays_bounded_and_keeps_the_longest_hold_offs() {
        let map = HoldOff::new(2).unwrap();
        let now = Instant::now();
        map.hold("a:80", now + Duration::from_secs(5));
        map.hold("b:80", now + Duration::from_secs(9));
        map.hold("c:80", now + Duration::from_secs(7));
        assert_eq!(map.len(), 2);
        assert_eq!(map.until("a:80"), None, "the soonest was forgotten");
        assert_eq!(map.until("C:80"), Some(now + Duration::from_secs(7)));
        // Shorter than all it knows: not worth a place.
        map.hold("d:80", now + Duration::from_secs(1));
        assert_eq!(map.until("d:80"), None);
        // Expired entries make room first.
        tokio::time::advance(Duration::from_secs(8)).await;
        map.hold("e:80", Instant::now() + Duration::from_secs(1));
        assert_eq!(map.len(), 2);
        assert!(map.until("b:80").is_some() && map.until("e:80").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_later_hold_off_wins_and_past_ones_are_ignored() {
        let map = HoldOff::default();
        let now = Instant::now();
        map.hold("a:80", now + Duration::from_secs(5));
        map.hold("a:80", now + Duration::from_secs(3));
        assert_eq!(map.until("a:80"), Some(now + Duration::from_secs(5)));
        map.hold("b:80", now);
        assert!(map.until("b:80").is_none());
        assert_eq!(HoldOff::new(0).unwrap_err(), HoldOffError::ZeroCapacity);
    }
}
