//! How a [`SingleFlight`](super::SingleFlight) shares: its defaults and
//! the configuration its layer hands it (a module of its own, so that the
//! layer and the service both use it without importing each other).

use std::time::Duration;

/// The default limit of the buffer a shared response body is read into:
/// 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// The default cap on keys in flight at once: 10 000.
///
/// Each key in flight costs one map entry and one shared future; a request
/// whose key is new while this many are in flight runs on its own (it is
/// not shared, nothing else changes for it), so the map stays bounded
/// whatever the traffic.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// How a [`SingleFlight`](super::SingleFlight) shares (apart from its key).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) body_limit: usize,
    pub(crate) max_keys: usize,
    pub(crate) body_timeout: Option<Duration>,
}

impl Config {
    pub(crate) const DEFAULT: Self = Self {
        body_limit: DEFAULT_BODY_LIMIT,
        max_keys: DEFAULT_MAX_KEYS,
        body_timeout: None,
    };
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}
