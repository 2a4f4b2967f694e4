//! How a [`HoldOff`](super::HoldOff) is configured: its capacity and its maximum hold, each
//! checked once, when it is built.

use std::fmt;
use std::time::Duration;

/// The default capacity of a [`HoldOff`](super::HoldOff): 1024 authorities.
pub const DEFAULT_HOLD_OFF_CAPACITY: usize = 1024;

/// The default maximum hold of a [`HoldOff`](super::HoldOff): 10 minutes.
///
/// Like the `maxInterval` of a service mesh's rate-limited back-off: a
/// server may ask for any `Retry-After`, but one answer never holds every
/// later request to it for longer than this.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(600);

/// The longest maximum hold a [`HoldOff`](super::HoldOff) accepts: one day. A hold longer
/// than that is a server's mistake or an attack, not a plan; it also keeps
/// every hold a whole number of milliseconds that any store can keep.
pub const MAX_MAX_HOLD: Duration = Duration::from_secs(86_400);

/// Why a [`HoldOff`](super::HoldOff) cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldOffError {
    /// A map of capacity zero could hold nothing.
    ZeroCapacity,
    /// The maximum hold must be at least 1 ms and at most
    /// [`MAX_MAX_HOLD`].
    MaxHoldOutOfRange {
        /// The maximum hold asked for.
        max_hold: Duration,
    },
    /// A hold-off with a shared store must be built inside a tokio
    /// runtime: it starts the store's task there.
    #[cfg(feature = "redis")]
    NoRuntime,
}

impl fmt::Display for HoldOffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCapacity => f.write_str("the hold-off map's capacity must be at least 1"),
            Self::MaxHoldOutOfRange { max_hold } => write!(
                f,
                "the hold-off's maximum hold must be between 1 ms and {} s, not {max_hold:?}",
                MAX_MAX_HOLD.as_secs()
            ),
            #[cfg(feature = "redis")]
            Self::NoRuntime => f.write_str(
                "a hold-off shared through Redis must be built inside a tokio runtime (it starts the store's task)",
            ),
        }
    }
}

impl std::error::Error for HoldOffError {}

/// Builds a [`HoldOff`](super::HoldOff): `HoldOff::builder().capacity(..).max_hold(..).build()`.
///
/// ```
/// use std::time::Duration;
/// use tower_retry_budget::hold_off::HoldOff;
///
/// let hold_off = HoldOff::builder()
///     .capacity(10_000)
///     .max_hold(Duration::from_secs(60))
///     .build()?;
/// assert_eq!(hold_off.max_hold(), Duration::from_secs(60));
///
/// // Every setting is checked.
/// assert!(HoldOff::builder().max_hold(Duration::ZERO).build().is_err());
/// # Ok::<(), tower_retry_budget::hold_off::HoldOffError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct HoldOffBuilder {
    pub(super) capacity: usize,
    pub(super) max_hold: Duration,
    #[cfg(feature = "redis")]
    pub(super) redis: Option<super::redis::RedisStore>,
}

impl Default for HoldOffBuilder {
    fn default() -> Self {
        Self {
            capacity: DEFAULT_HOLD_OFF_CAPACITY,
            max_hold: DEFAULT_MAX_HOLD,
            #[cfg(feature = "redis")]
            redis: None,
        }
    }
}

impl HoldOffBuilder {
    /// The most authorities the map keeps (default
    /// [`DEFAULT_HOLD_OFF_CAPACITY`]).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// The longest hold kept, whatever a server asks (default
    /// [`DEFAULT_MAX_HOLD`]).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// Shares the holds with every process using the same Redis store and
    /// namespace (the `redis` feature's `RedisStore`).
    /// The local map stays the only thing a request reads.
    #[cfg(feature = "redis")]
    pub fn redis(mut self, store: super::redis::RedisStore) -> Self {
        self.redis = Some(store);
        self
    }
    pub(super) fn check(&self) -> Result<(), HoldOffError> {
        if self.capacity == 0 {
            return Err(HoldOffError::ZeroCapacity);
        }
        if self.max_hold < Duration::from_millis(1) || self.max_hold > MAX_MAX_HOLD {
            return Err(HoldOffError::MaxHoldOutOfRange {
                max_hold: self.max_hold,
            });
        }
        Ok(())
    }
}
