//! Publishing: the map hands each new or lengthened hold to a bounded queue
//! (never waiting), and the store's task writes it to Redis with a script
//! that only ever lengthens a hold, and announces it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Script;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use super::config::RedisStore;
use crate::hold_off::store::{Health, Share, StoreHealth};

/// Sets the hold's key with the longer of its current and the new TTL, on
/// Redis's own clock (no instant from one host is ever read by another),
/// and announces it only if it got longer: a shorter hold never replaces a
/// longer one, and a hold that changes nothing costs the other processes
/// nothing. Returns the TTL the key has now, in ms.
///
/// KEYS[1]: the hold's key. ARGV[1]: the hold, in ms. ARGV[2]: the channel.
/// ARGV[3]: the authority.
const LENGTHEN: &str = r"
local ttl = redis.call('PTTL', KEYS[1])
local hold = tonumber(ARGV[1])
if ttl >= hold then
  return ttl
end
redis.call('SET', KEYS[1], '1', 'PX', hold)
redis.call('PUBLISH', ARGV[2], ARGV[1] .. ' ' .. ARGV[3])
return hold
";

/// The map's side of the store: a queue to the publishing task, and the
/// store's health. Dropping it (with the last clone of the `HoldOff`) ends
/// both of the store's tasks.
pub(crate) struct Publisher {
    pub(super) queue: mpsc::Sender<(Box<str>, Duration)>,
    pub(super) health: Arc<Health>,
    pub(super) _stop: DropGuard,
}

impl Share for Publisher {
    fn publish(&self, authority: &str, hold: Duration) {
        if self.queue.try_send((authority.into(), hold)).is_err() {
            self.health.dropped();
        }
    }

    fn health(&self) -> StoreHealth {
        self.health.snapshot()
    }
}

/// The publishing task: one script call per hold, each bounded.
pub(super) async fn run(
    store: RedisStore,
    mut manager: ConnectionManager,
    mut queue: mpsc::Receiver<(Box<str>, Duration)>,
    health: Arc<Health>,
) {
    let script = Script::new(LENGTHEN);
    let channel = store.channel();
    while let Some((authority, hold)) = queue.recv().await {
        let mut call = script.key(store.key(&authority));
        call.arg(millis_ceil(hold)).arg(&channel).arg(&*authority);
        match tokio::time::timeout(store.op_timeout, call.invoke_async::<i64>(&mut manager)).await {
            Ok(Ok(_)) => health.published(),
            Ok(Err(error)) => {
                health.failed();
                tracing::debug!(%error, %store, "publishing a hold-off to Redis failed");
            }
            Err(_) => {
                health.failed();
                tracing::debug!(%store, "publishing a hold-off to Redis ran out of time");
            }
        }
    }
}

/// Whole milliseconds, rounded up (a hold is never shortened), at least 1.
pub(super) fn millis_ceil(hold: Duration) -> u64 {
    let ms = hold.as_millis() + u128::from(!hold.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms.max(1)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_rounded_up() {
        assert_eq!(millis_ceil(Duration::ZERO), 1);
        assert_eq!(millis_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(millis_ceil(Duration::from_millis(3000)), 3000);
        assert_eq!(millis_ceil(Duration::from_micros(2_999_001)), 3000);
        assert_eq!(millis_ceil(Duration::MAX), u64::MAX);
    }
}
