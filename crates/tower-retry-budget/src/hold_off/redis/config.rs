//! [`RedisStore`]: where the shared hold-off lives, checked when it is made.

use std::fmt;
use std::time::Duration;

/// The default bound on every Redis operation: 50 ms.
pub const DEFAULT_REDIS_OP_TIMEOUT: Duration = Duration::from_millis(50);

/// The most holds waiting to be published at once; more are dropped (and
/// counted in [`StoreHealth::dropped`](crate::hold_off::StoreHealth::dropped)).
pub(super) const QUEUE: usize = 1024;

/// A hold-off store on Redis: where it is, and the namespace of its keys.
/// Give it to [`HoldOffBuilder::redis`](crate::hold_off::HoldOffBuilder::redis).
///
/// ```
/// use tower_retry_budget::hold_off::RedisStore;
///
/// let store = RedisStore::new("redis://127.0.0.1:6379")?.namespace("tenant-42")?;
/// assert_eq!(store.to_string(), "redis://127.0.0.1:6379 (namespace tenant-42)");
///
/// assert!(RedisStore::new("http://not-redis").is_err());
/// assert!(RedisStore::new("redis://h:1")?.namespace("a token: secret").is_err());
/// # Ok::<(), tower_retry_budget::hold_off::RedisStoreError>(())
/// ```
///
/// The hold-off shared across processes through Redis (the `redis`
/// feature): a fleet honours one `Retry-After`.
///
/// # Why
///
/// Twenty replicas of a worker share one API token's quota; one gets `429
/// Retry-After: 60`, and without sharing, the other nineteen keep sending
/// first attempts that are certain to be refused. With a [`RedisStore`],
/// every hold this process records is published, and every process applies
/// every published hold to its own map.
///
/// * **Off the hot path.** A request only ever reads the local map. A new or
///   lengthened hold goes on a bounded queue (never waiting; a full queue
///   drops it and counts it) to the store's one task, which does all the I/O.
/// * **Redis's clock only.** A hold is a key whose TTL is the hold, in
///   milliseconds, set by a script that keeps the longer of the existing and
///   the new TTL (so a shorter hold never replaces a longer one), and
///   announced on a channel as `"<ms> <authority>"`. A receiver holds the
///   authority for that long from when it hears it: no wall-clock instant
///   from one host is read by another.
/// * **The maximum hold applies** to what comes from Redis too, and the key
///   is `scheme://host:port` (never credentials) under an optional
///   namespace (a tenant, a hash of the API token: never the token):
///   `retry-budget:hold-off:NAMESPACE:scheme://host:port` (`NAMESPACE`
///   empty when none is set), announced on the channel
///   `retry-budget:hold-off-channel:NAMESPACE`.
/// * **Faults.** Every Redis operation is bounded
///   ([`DEFAULT_REDIS_OP_TIMEOUT`], 50 ms). When Redis is slow, down or
///   refusing, each process keeps working on its local map alone, and
///   [`HoldOff::store_health`](crate::hold_off::HoldOff::store_health) says so
///   (`available: false`, `failures`); the store reconnects by itself,
///   reads the current keys again, publishes the live holds it knows and
///   Redis does not (recorded during the outage, or lost with a restarted
///   Redis), and goes on.
///
/// ```no_run
/// use retry_budget::Policy;
/// use tower_retry_budget::hold_off::RedisStore;
/// use tower_retry_budget::{hold_off::HoldOff, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::new("redis://127.0.0.1:6379")?.namespace("tenant-42")?;
/// // Inside a tokio runtime: the store starts its task.
/// let hold_off = HoldOff::builder().redis(store).build()?;
/// let layer = RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone());
/// # let _ = layer;
/// // For a metric: whether the shared store works now.
/// let available = hold_off.store_health().is_some_and(|h| h.available);
/// # let _ = available;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(super) client: redis::Client,
    pub(super) namespace: String,
    pub(super) op_timeout: Duration,
}

/// Why a [`RedisStore`] cannot be made.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL is not one the `redis` crate can connect to; the `redis`
    /// crate's error is the [source](std::error::Error::source).
    Url {
        /// What the `redis` crate said.
        source: redis::RedisError,
    },
    /// A namespace is 1 to 64 ASCII letters, digits, `.`, `_` or `-` (a
    /// tenant name or a hash of an API token; never the token itself).
    Namespace {
        /// The namespace asked for.
        namespace: String,
    },
    /// The bound on each operation must be between 1 ms and 10 s.
    OpTimeout {
        /// The bound asked for.
        timeout: Duration,
    },
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url { .. } => f.write_str("not a usable Redis URL"),
            Self::Namespace { namespace } => write!(
                f,
                "the hold-off namespace {namespace:?} must be 1 to 64 ASCII letters, digits, '.', '_' or '-'"
            ),
            Self::OpTimeout { timeout } => write!(
                f,
                "the bound on each Redis operation must be between 1 ms and 10 s, not {timeout:?}"
            ),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Url { source } => Some(source),
            Self::Namespace { .. } | Self::OpTimeout { .. } => None,
        }
    }
}

impl RedisStore {
    /// A store at `url` (`redis://[user:password@]host:port[/db]`, or
    /// `rediss://` with the `redis` crate's TLS features), with no namespace
    /// and operations bounded by [`DEFAULT_REDIS_OP_TIMEOUT`]. Nothing
    /// connects yet: the store connects (and reconnects) in its own task
    /// once the [`HoldOff`](crate::hold_off::HoldOff) is built.
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::Url`].
    pub fn new(url: &str) -> Result<Self, RedisStoreError> {
        let client = redis::Client::open(url).map_err(|source| RedisStoreError::Url { source })?;
        Ok(Self {
            client,
            namespace: String::new(),
            op_timeout: DEFAULT_REDIS_OP_TIMEOUT,
        })
    }

    /// Holds are shared only between processes with the same namespace.
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::Namespace`].
    pub fn namespace(mut self, namespace: &str) -> Result<Self, RedisStoreError> {
        let valid = (1..=64).contains(&namespace.len())
            && namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(RedisStoreError::Namespace {
                namespace: namespace.to_owned(),
            });
        }
        self.namespace = namespace.to_owned();
        Ok(self)
    }

    /// The bound on every Redis operation (default
    /// [`DEFAULT_REDIS_OP_TIMEOUT`]).
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::OpTimeout`].
    pub fn op_timeout(mut self, timeout: Duration) -> Result<Self, RedisStoreError> {
        if timeout < Duration::from_millis(1) || timeout > Duration::from_secs(10) {
            return Err(RedisStoreError::OpTimeout { timeout });
        }
        self.op_timeout = timeout;
        Ok(self)
    }

    /// The key of `authority`'s hold.
    pub(super) fn key(&self, authority: &str) -> String {
        format!("{}{authority}", self.key_prefix())
    }

    /// What every key of this namespace starts with (no glob character in
    /// it: namespaces are checked).
    pub(super) fn key_prefix(&self) -> String {
        format!("retry-budget:hold-off:{}:", self.namespace)
    }

    /// The channel holds are announced on.
    pub(super) fn channel(&self) -> String {
        format!("retry-budget:hold-off-channel:{}", self.namespace)
    }
}

/// Where, never with the password.
impl fmt::Display for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "redis://{}", self.client.get_connection_info().addr())?;
        if !self.namespace.is_empty() {
            write!(f, " (namespace {})", self.namespace)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("at", &self.client.get_connection_info().addr().to_string())
            .field("namespace", &self.namespace)
            .field("op_timeout", &self.op_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_bad_url_keeps_the_redis_error_as_its_source() {
        let Err(error) = RedisStore::new("http://not-redis.test") else {
            panic!("an http URL is not a Redis URL");
        };
        let RedisStoreError::Url { source } = &error else {
            panic!("not the URL error: {error:?}");
        };
        assert_eq!(error.to_string(), "not a usable Redis URL");
        let from_source = error.source().expect("the redis crate's error");
        assert_eq!(from_source.to_string(), source.to_string());
        assert!(!source.to_string().is_empty());
    }
}
