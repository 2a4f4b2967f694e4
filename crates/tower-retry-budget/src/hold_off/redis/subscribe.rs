//! Listening: every process applies the holds announced on the channel to
//! its local map as they come, and reads the current keys each time it
//! (re)connects.
//!
//! The `redis` crate's `ConnectionManager` reconnects commands by itself;
//! the subscription is reconnected here, by hand, because the order
//! matters and the manager does not tell when it resubscribed: first
//! subscribe, *then* read the keys, so that a hold published in between is
//! seen one way or the other. A session ends when the connection does; the
//! next one starts after a short, growing pause (100 ms to 2 s).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use super::config::RedisStore;
use crate::hold_off::handle::Sink;
use crate::hold_off::store::Health;

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);
/// Keys asked for per SCAN step.
const SCAN_COUNT: usize = 256;

/// Why a session ended.
enum Ended {
    Redis(redis::RedisError),
    TimedOut(&'static str),
    Closed,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Redis(e) => write!(f, "{e}"),
            Self::TimedOut(what) => write!(f, "{what} ran out of time"),
            Self::Closed => f.write_str("the connection closed"),
        }
    }
}

/// The listening task: sessions until the `HoldOff` is dropped.
pub(super) async fn run(
    store: RedisStore,
    manager: ConnectionManager,
    sink: Sink,
    health: Arc<Health>,
    stop: CancellationToken,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        let session = session(&store, manager.clone(), &sink, &health);
        let ended = match stop.run_until_cancelled(session).await {
            Some(ended) => ended,
            None => return,
        };
        let was_listening = health.is_listening();
        health.listening(false);
        health.failed();
        if was_listening {
            tracing::warn!(%store, reason = %ended, "the shared hold-off store is unavailable; holds stay local until it returns");
            pause = FIRST_PAUSE;
        } else {
            tracing::debug!(%store, reason = %ended, "the shared hold-off store is still unavailable");
        }
        if stop
            .run_until_cancelled(tokio::time::sleep(pause))
            .await
            .is_none()
        {
            return;
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Subscribe, read the current keys, then apply announcements until the
/// connection ends.
async fn session(
    store: &RedisStore,
    mut manager: ConnectionManager,
    sink: &Sink,
    health: &Health,
) -> Ended {
    let bound = store.op_timeout;
    let mut pubsub = match tokio::time::timeout(bound, store.client.get_async_pubsub()).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(e)) => return Ended::Redis(e),
        Err(_) => return Ended::TimedOut("connecting"),
    };
    match tokio::time::timeout(bound, pubsub.subscribe(store.channel())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Ended::Redis(e),
        Err(_) => return Ended::TimedOut("subscribing"),
    }
    if let Err(ended) = read_keys(store, &mut manager, sink, health).await {
        return ended;
    }
    health.command_ok();
    health.listening(true);
    tracing::debug!(%store, "listening to the shared hold-off store");
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        let payload = message.get_payload_bytes();
        match parse(payload) {
            Some((hold, authority)) => {
                if sink.apply(authority, hold).is_none() {
                    return Ended::Closed;
                }
                health.received();
            }
            None => tracing::debug!(%store, "ignored a malformed hold-off announcement"),
        }
    }
    Ended::Closed
}

/// SCAN the namespace's keys and apply each one's remaining TTL.
async fn read_keys(
    store: &RedisStore,
    manager: &mut ConnectionManager,
    sink: &Sink,
    health: &Health,
) -> Result<(), Ended> {
    let prefix = store.key_prefix();
    let pattern = format!("{prefix}*");
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, keys) = bounded(
            store,
            "reading the keys",
            scan.query_async::<(u64, Vec<String>)>(manager),
        )
        .await?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("PTTL").arg(key);
            }
            let ttls = bounded(
                store,
                "reading the TTLs",
                pipe.query_async::<Vec<i64>>(manager),
            )
            .await?;
            for (key, ttl) in keys.iter().zip(ttls) {
                let (Some(authority), Ok(ms)) = (key.strip_prefix(&prefix), u64::try_from(ttl))
                else {
                    continue; // gone (-2) or without a TTL (-1): not ours to apply
                };
                if sink.apply(authority, Duration::from_millis(ms)).is_none() {
                    return Err(Ended::Closed);
                }
                health.received();
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

async fn bounded<T>(
    store: &RedisStore,
    what: &'static str,
    op: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, Ended> {
    match tokio::time::timeout(store.op_timeout, op).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Ended::Redis(e)),
        Err(_) => Err(Ended::TimedOut(what)),
    }
}

/// `"<ms> <authority>"`.
fn parse(payload: &[u8]) -> Option<(Duration, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (ms, authority) = text.split_once(' ')?;
    let ms: u64 = ms.parse().ok()?;
    (!authority.is_empty()).then_some((Duration::from_millis(ms), authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_parsed_or_ignored() {
        assert_eq!(
            parse(b"3000 http://a.test:80"),
            Some((Duration::from_millis(3000), "http://a.test:80"))
        );
        for bad in [
            &b""[..],
            b"3000",
            b"x http://a",
            b"-1 http://a",
            b"3000 ",
            b"\xff 1",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
