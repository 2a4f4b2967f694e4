//! [`RedisAllowance`]: the allowance of a rate-limit window, shared by a
//! fleet through the hold-off's Redis store. Its design note (how the layer
//! uses it, why it never blocks, what it keeps in Redis) is the type's
//! documentation, so that it is published with it.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use tokio::time::Instant;

use super::config::RedisStore;
use crate::hold_off::store::{Health, StoreHealth};

/// How long a window's key outlives the window's end.
pub const ALLOWANCE_EXPIRY_MARGIN: Duration = Duration::from_secs(1);

/// The first pause after a failed take, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The largest number given to the script: Lua counts in doubles, exact up
/// to 2^53; no window ends or holds more than this.
const LARGEST: u64 = 1 << 52;

/// Takes one from a window's allowance; see the module's documentation.
///
/// KEYS[1]: the window's hash. ARGV[1]: the announced end, Unix ms.
/// ARGV[2]: the announced remaining. ARGV[3]: the expiry margin, ms.
/// Returns `{answer, left, ms to the end}`, answer 1 granted, 0 refused,
/// 2 the announced window is over on Redis's clock (nothing written).
const TAKE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local announced_end = tonumber(ARGV[1])
local announced = tonumber(ARGV[2])
if announced_end <= now then
  return {2, 0, 0}
end
local stored = redis.call('HMGET', KEYS[1], 'end', 'left')
local window_end = tonumber(stored[1])
local left = tonumber(stored[2])
if window_end == nil or left == nil or window_end <= now then
  window_end = announced_end
  left = announced
else
  if announced_end < window_end then window_end = announced_end end
  if announced < left then left = announced end
end
local answer = 0
if left > 0 then
  left = left - 1
  answer = 1
end
redis.call('HSET', KEYS[1], 'end', window_end, 'left', left)
redis.call('PEXPIREAT', KEYS[1], window_end + tonumber(ARGV[3]))
return {answer, left, window_end - now}
";

/// The answer of Redis to a [`take`](RedisAllowance::take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Take {
    /// One taken: the first attempt may start.
    Granted {
        /// What the fleet has left of the window after this one.
        left: u64,
    },
    /// The fleet has spent the window: no first attempt before its end.
    Refused {
        /// How long the window lasts yet, on Redis's clock.
        window_left: Duration,
    },
    /// The window announced is already over on Redis's clock (the caller's
    /// state is stale, or its host's clock behind Redis's): nothing was
    /// taken or written; the pacer's own answer stands.
    Ended,
}

/// Why a take has no answer: the caller paces alone (fail open).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Unavailable {
    /// Redis answered with an error, or the connection failed; the `redis`
    /// crate's error is the [source](std::error::Error::source).
    Redis {
        /// What the `redis` crate said.
        source: redis::RedisError,
    },
    /// No answer within the store's bound on each operation.
    TimedOut,
    /// A recent take failed: Redis is not asked again until a short pause
    /// has passed.
    Pausing,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis { .. } => f.write_str("the shared allowance store failed"),
            Self::TimedOut => f.write_str("the shared allowance store did not answer in time"),
            Self::Pausing => {
                f.write_str("the shared allowance store failed recently and is not asked yet")
            }
        }
    }
}

impl std::error::Error for Unavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis { source } => Some(source),
            Self::TimedOut | Self::Pausing => None,
        }
    }
}

/// Why a [`RedisAllowance`] cannot be made.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AllowanceError {
    /// Made outside a tokio runtime (the connection's task needs one).
    NoRuntime,
    /// The `redis` crate refused the connection's settings; its error is the
    /// [source](std::error::Error::source).
    Redis {
        /// What the `redis` crate said.
        source: redis::RedisError,
    },
}

impl fmt::Display for AllowanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRuntime => f.write_str("the shared allowance needs a tokio runtime"),
            Self::Redis { .. } => f.write_str("the shared allowance's connection cannot be made"),
        }
    }
}

impl std::error::Error for AllowanceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis { source } => Some(source),
            Self::NoRuntime => None,
        }
    }
}

/// The allowance of rate-limit windows shared by every process with the
/// same [`RedisStore`] (URL and namespace). Clones share one connection.
///
/// A server counts every client of one API token together: when each of N
/// proxies reads "R left until T" and spends R, the server gets N × R. With
/// a `RedisAllowance` (made from the same [`RedisStore`] as the shared
/// hold-off, so one `--hold-off-redis` gives both), the processes take the
/// window's allowance from one counter in Redis, so together they start no
/// more than R first attempts before T.
///
/// # How the layer uses it
///
/// The pacer of each process stays the one that decides (in the core, with
/// no I/O); the allowance only adds the fleet's count. This is what
/// [`Pacing::shared`](crate::pace::Pacing::shared) does:
///
/// 1. A new action asks its process's pacer when its first attempt may
///    start, and waits for that (locally, as without Redis).
/// 2. When the pacer admits it and the upstream announced a window (a
///    limit's name, its remaining `R` and its end), the action calls
///    [`take`](RedisAllowance::take) once, before sending:
///    * [`Take::Granted`] — send.
///    * [`Take::Refused`] — the fleet has spent the window; the action hands
///      "remaining 0 until `window_left` from now" to its pacer (as a state
///      read from a response would be), which decides the wait (or, if the
///      first attempt's cap does not fit after it, the stop) as for any other
///      pacing wait.
///    * [`Take::Ended`] — on Redis's clock the window is already over; there
///      is nothing to share, and the pacer's own answer stands: send.
///    * `Err(`[`Unavailable`]`)` — Redis is down, refusing or slower than the
///      store's bound ([`RedisStore::op_timeout`]); the process paces alone
///      (fail open): send, as the pacer allowed. Never a refusal.
/// 3. Retries never take: they wait for what their own 429 asked.
///
/// # Never blocking
///
/// * A take is one round trip, one script (`EVALSHA`, falling back to
///   `EVAL` once when Redis has not seen the script), bounded by the store's
///   operation bound; nothing holds a lock across it, and concurrent takes
///   share one multiplexed connection, which reconnects by itself.
/// * After a failed take, takes answer [`Unavailable`] at once, without any
///   I/O, for a short pause (100 ms, doubling up to 2 s while Redis stays
///   away), so an outage costs each action nothing, not a bound each.
/// * [`health`](RedisAllowance::health) says whether the last take reached
///   Redis, for the same metrics and readiness check as the hold-off's store.
///
/// # In Redis
///
/// One hash per window of one limit of one upstream:
/// `retry-budget:allowance:NAMESPACE:KEY` (`NAMESPACE` as the hold-off's;
/// `KEY` the caller's, such as `http://api.test:80 requests`: never a
/// credential), with the fields `end` (Unix ms, on Redis's clock) and `left`.
/// The script reads Redis's own clock (`TIME`), so whether a window is over
/// is decided by one clock for the whole fleet (a script that reads the
/// clock and then writes needs Redis 5 or later; an older one answers with an
/// error, which is [`Unavailable`]):
///
/// * no live window (no key, or its `end` has passed): the announcement
///   starts one, `left` = the announced remaining;
/// * a live window: a lower announced remaining lowers `left` (the
///   responses of the fleet's own attempts say so), a higher one never
///   raises it; an earlier announced end brings `end` forward (servers round
///   their resets up), a later one does not push it back (an announcement of
///   the next window, made before this one ended on Redis's clock, waits for
///   it: it may cost a little time, never a 429);
/// * then `left` > 0 is decremented and granted; `left` = 0 is refused;
/// * the key expires at `end` plus a margin ([`ALLOWANCE_EXPIRY_MARGIN`],
///   `PEXPIREAT`): nothing outlives its window by more.
///
///
/// ```no_run
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tower_retry_budget::hold_off::{RedisAllowance, RedisStore, Take};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::new("redis://127.0.0.1:6379")?.namespace("tenant-42")?;
/// let allowance = RedisAllowance::new(&store)?;
/// // A response said: 10 requests left, reset in 2 s.
/// let end = SystemTime::now() + Duration::from_secs(2);
/// let end_ms = end.duration_since(UNIX_EPOCH)?.as_millis() as u64;
/// match allowance.take("http://api.test:80 requests", end_ms, 10).await {
///     Ok(Take::Refused { window_left }) => { /* remaining 0 for window_left */ }
///     Ok(_) => { /* send */ }
///     Err(_unavailable) => { /* pace alone: send */ }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisAllowance {
    inner: Arc<Inner>,
}

struct Inner {
    store: RedisStore,
    manager: ConnectionManager,
    script: Script,
    health: Health,
    /// After a failure: not before when Redis is asked again, and the
    /// pause after the next failure.
    paused: Mutex<Option<(Instant, Duration)>>,
}

impl RedisAllowance {
    /// An allowance on `store`'s Redis, in its namespace, each take bounded
    /// by its operation bound. Nothing connects yet: the first take does
    /// (within its bound), and later ones reconnect as needed.
    ///
    /// # Errors
    ///
    /// [`AllowanceError::NoRuntime`] outside a tokio runtime,
    /// [`AllowanceError::Redis`].
    pub fn new(store: &RedisStore) -> Result<Self, AllowanceError> {
        tokio::runtime::Handle::try_current().map_err(|_| AllowanceError::NoRuntime)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(store.op_timeout))
            .set_response_timeout(Some(store.op_timeout));
        let manager = ConnectionManager::new_lazy_with_config(store.client.clone(), config)
            .map_err(|source| AllowanceError::Redis { source })?;
        let health = Health::default();
        // The allowance listens to nothing: whether it works is whether its
        // last take did.
        health.listening(true);
        Ok(Self {
            inner: Arc::new(Inner {
                store: store.clone(),
                manager,
                script: Script::new(TAKE),
                health,
                paused: Mutex::new(None),
            }),
        })
    }

    /// Takes one first attempt from the window of `key` (an upstream and
    /// one of its limits, such as `http://api.test:80 requests`) that ends
    /// at `window_end_unix_ms` (Unix time, ms) and of which a response
    /// announced `announced_remaining` left. See
    /// [the type's documentation](Self) for the rules.
    ///
    /// Any values are accepted (cut to 2^52, which Lua counts exactly).
    ///
    /// # Errors
    ///
    /// [`Unavailable`]: no answer from Redis; the caller paces alone.
    pub async fn take(
        &self,
        key: &str,
        window_end_unix_ms: u64,
        announced_remaining: u64,
    ) -> Result<Take, Unavailable> {
        let inner = &*self.inner;
        if self.pausing(Instant::now()) {
            inner.health.dropped();
            return Err(Unavailable::Pausing);
        }
        let mut call = inner.script.key(self.key(key));
        call.arg(window_end_unix_ms.min(LARGEST))
            .arg(announced_remaining.min(LARGEST))
            .arg(u64::try_from(ALLOWANCE_EXPIRY_MARGIN.as_millis()).unwrap_or(LARGEST));
        let mut manager = inner.manager.clone();
        let answer = tokio::time::timeout(
            inner.store.op_timeout,
            call.invoke_async::<(i64, i64, i64)>(&mut manager),
        )
        .await;
        let failure = match answer {
            Ok(Ok((answer, left, until_end))) => {
                self.succeeded();
                let left = u64::try_from(left).unwrap_or(0);
                let until_end = Duration::from_millis(u64::try_from(until_end).unwrap_or(0));
                return Ok(match answer {
                    1 => Take::Granted { left },
                    0 => Take::Refused {
                        window_left: until_end,
                    },
                    _ => Take::Ended,
                });
            }
            Ok(Err(source)) => Unavailable::Redis { source },
            Err(_) => Unavailable::TimedOut,
        };
        self.failed(Instant::now());
        tracing::debug!(store = %inner.store, error = %failure, "a take from the shared allowance failed; pacing alone");
        Err(failure)
    }

    /// What the allowance's store has done: `available` whether the last
    /// take reached Redis (`false` until one has), `failures` the takes
    /// that failed or ran out of time, `published` the takes Redis
    /// answered, `dropped` the takes answered [`Unavailable::Pausing`]
    /// without asking Redis; `received` stays 0.
    pub fn health(&self) -> StoreHealth {
        self.inner.health.snapshot()
    }

    /// The hash of `key`'s window.
    fn key(&self, key: &str) -> String {
        format!(
            "retry-budget:allowance:{}:{key}",
            self.inner.store.namespace
        )
    }

    fn pausing(&self, now: Instant) -> bool {
        self.paused().is_some_and(|(until, _)| now < until)
    }

    fn succeeded(&self) {
        *self.paused() = None;
        self.inner.health.published();
    }

    fn failed(&self, now: Instant) {
        self.inner.health.failed();
        let mut paused = self.paused();
        let pause = paused.map_or(FIRST_PAUSE, |(_, next)| next);
        // A pause past the clock's range: the next take asks Redis anyway.
        let until = crate::clock::instant_at(now, pause).unwrap_or(now);
        *paused = Some((until, pause.saturating_mul(2).min(LONGEST_PAUSE)));
    }

    fn paused(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Duration)>> {
        // Set whole under the lock, nothing to leave half-done.
        self.inner
            .paused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for RedisAllowance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAllowance")
            .field("store", &self.inner.store)
            .field("health", &self.health())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn after_a_failure_redis_is_not_asked_for_a_growing_pause() {
        let store = RedisStore::new("redis://127.0.0.1:1").unwrap();
        let allowance = RedisAllowance::new(&store).unwrap();
        let now = Instant::now();
        assert!(!allowance.pausing(now));
        allowance.failed(now);
        assert!(allowance.pausing(now));
        assert!(allowance.pausing(now + Duration::from_millis(99)));
        assert!(!allowance.pausing(now + FIRST_PAUSE));
        allowance.failed(now);
        assert_eq!(
            *allowance.paused(),
            Some((now + FIRST_PAUSE * 2, FIRST_PAUSE * 4))
        );
        for _ in 0..10 {
            allowance.failed(now);
        }
        assert_eq!(
            *allowance.paused(),
            Some((now + LONGEST_PAUSE, LONGEST_PAUSE))
        );
        let health = allowance.health();
        assert_eq!((health.available, health.failures), (false, 12));
        // While pausing, a take answers at once, without Redis.
        assert_eq!(
            allowance.take("k", u64::MAX, u64::MAX).await,
            Err(Unavailable::Pausing)
        );
        assert_eq!(allowance.health().dropped, 1);
        allowance.succeeded();
        assert!(!allowance.pausing(now));
        assert!(allowance.health().available);
    }

    #[test]
    fn outside_a_runtime_it_says_so() {
        let store = RedisStore::new("redis://127.0.0.1:1").unwrap();
        assert_eq!(
            RedisAllowance::new(&store).unwrap_err(),
            AllowanceError::NoRuntime
        );
    }
}
