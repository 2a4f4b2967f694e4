//! **The one mapping between an action's elapsed time and tokio's clock.**
//!
//! The core counts time as a [`Duration`] since the action's start; tokio's
//! timers want a [`tokio::time::Instant`]. Converting one into the other is
//! where an input becomes a panic: `Instant + Duration` panics when the sum
//! is past what the platform's clock can represent, and a budget, a cap or
//! a server's `Retry-After` may be anything up to [`Duration::MAX`]. So every
//! timer, deadline and hold-off in the adapter goes through this file, and
//! nothing else adds a duration to an instant (the crate's clippy settings
//! refuse `checked_add` on instants elsewhere, and the state-machine files
//! deny all unchecked arithmetic).
//!
//! Both directions saturate: a time beyond the clock's range is "never" (no
//! timer is armed for it: only the caller leaving ends such a wait), and an
//! instant before the origin is elapsed zero.
//!
//! One function, [`instant_at`], is public (re-exported at the crate's
//! root): code outside the layer that maps the core's elapsed times onto tokio's clock (the CLI
//! reading a body by its [`Report::body_deadline`](crate::Report::body_deadline))
//! uses the same saturating rule instead of a copy of it.

use std::time::Duration;

use tokio::time::Instant;

/// Where an action's elapsed zero lies on tokio's clock, read lazily.
///
/// An action's elapsed zero is the first moment it needs an instant on
/// tokio's clock: in [`call`](tower::Service::call) only when an extra
/// needs one (a hold-off compared with now, a pacer's or the client
/// budget's own clock: see [`instant`](Self::instant)), otherwise when its
/// response future first arms a timer or hands an origin to a report
/// slot. Until then every step happens at elapsed zero: a future that is
/// polled again has armed a timer before returning `Pending` (so its origin
/// was read by then, and the steps before happened at zero anyway). After
/// that, each poll reads the clock at most once, when a step first needs
/// the time, and every step of that poll happens at that reading. So a
/// request that answers at its first poll, with no extra needing an
/// instant, never reads the clock, and one that waits reads it once per
/// poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    origin: Option<Instant>,
    /// This poll's reading: whole seconds and nanoseconds, [`UNREAD`]
    /// nanoseconds if not taken (one word, not an `Option<Duration>`: the
    /// response future is smaller; a reading past `u32::MAX` seconds,
    /// about 136 years, saturates there).
    reading: (u32, u32),
}

/// The nanoseconds of a reading not taken in this poll (a reading's are
/// below a second: one comparison tells both apart and makes the
/// `Duration`).
const UNREAD: u32 = u32::MAX;

/// How far [`far_future`] lies: tokio's own "far future" for a `Sleep` that
/// should never fire (about 30 years).
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

impl Clock {
    /// A clock not read yet: steps before the first reading happen at
    /// elapsed zero.
    pub(crate) const fn unread() -> Self {
        Self {
            origin: None,
            reading: (0, 0),
        }
    }

    /// A clock whose elapsed zero is now.
    pub(crate) fn start() -> Self {
        Self {
            origin: Some(Instant::now()),
            reading: (0, 0),
        }
    }

    /// A new poll (or the drop) begins: the next step reads the clock again.
    pub(crate) fn new_poll(&mut self) {
        self.reading.1 = UNREAD;
    }

    /// Elapsed time now: this poll's reading, taken on first use.
    pub(crate) fn now(&mut self) -> Duration {
        let (secs, nanos) = self.reading;
        if nanos < 1_000_000_000 {
            return Duration::new(u64::from(secs), nanos);
        }
        // Not read yet: still elapsed zero (see the type's doc).
        let Some(origin) = self.origin else {
            self.reading = (0, 0);
            return Duration::ZERO;
        };
        let elapsed = Instant::now().saturating_duration_since(origin);
        self.reading = match u32::try_from(elapsed.as_secs()) {
            Ok(secs) => (secs, elapsed.subsec_nanos()),
            Err(_) => (u32::MAX, 999_999_999),
        };
        Duration::new(u64::from(self.reading.0), self.reading.1)
    }

    /// Elapsed time now, read afresh (the origin read at the first call,
    /// for a caller that arms no timer of its own before its next step).
    pub(crate) fn elapsed(&mut self) -> Duration {
        self.origin();
        self.new_poll();
        self.now()
    }

    /// The instant of elapsed zero, if it was read: not yet, every step
    /// so far happened in the call that opened the action, with nothing
    /// waited (see the type's doc).
    #[cfg(test)]
    pub(crate) const fn origin_read(&self) -> Option<Instant> {
        self.origin
    }

    /// The instant of elapsed zero, read now if it was not yet (this
    /// poll's reading is then that instant: elapsed zero).
    pub(crate) fn origin(&mut self) -> Instant {
        match self.origin {
            Some(origin) => origin,
            None => {
                self.reading = (0, 0);
                *self.origin.insert(Instant::now())
            }
        }
    }

    /// This step's instant on tokio's clock: the origin plus this poll's
    /// reading (each read on first use, the origin being then this poll's
    /// reading). For a part that keeps time from an origin of its own (a
    /// pacer, the client budget): every step of a poll, the action's own
    /// included, happens at one reading of the clock.
    pub(crate) fn instant(&mut self) -> Instant {
        let origin = self.origin();
        if self.reading == (0, 0) {
            // Elapsed zero (the call that opened the action, say).
            return origin;
        }
        let elapsed = self.now();
        // Beyond the range only past the reading's saturation (see the
        // type's doc): read afresh then.
        instant_at(origin, elapsed).unwrap_or_else(Instant::now)
    }

    /// Elapsed time at `at`; zero for an instant before the origin.
    pub(crate) fn since(&mut self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin())
    }

    /// The instant at elapsed `elapsed`, or `None` ("never") if it lies
    /// beyond the clock's range.
    pub(crate) fn at(&mut self, elapsed: Duration) -> Option<Instant> {
        instant_at(self.origin(), elapsed)
    }

    /// The instant at elapsed `elapsed`, or a far-future instant if it lies
    /// beyond the clock's range (for a consumer that must have an instant:
    /// the hold-off map, which clamps it to its own maximum hold anyway;
    /// `tower::retry`'s `Sleep`).
    pub(crate) fn at_or_far(&mut self, elapsed: Duration) -> Instant {
        self.at(elapsed).unwrap_or_else(far_future)
    }
}

/// **The one saturating mapping**: the instant at `elapsed` after `origin`
/// on tokio's clock, or `None` ("never") if that is beyond the clock's
/// range. The only addition of a duration to an instant in this crate.
#[allow(clippy::disallowed_methods)] // the one place allowed to
pub fn instant_at(origin: Instant, elapsed: Duration) -> Option<Instant> {
    origin.checked_add(elapsed)
}

/// Elapsed time since `origin`, now (zero for an origin in the future).
pub(crate) fn elapsed_since(origin: Instant) -> Duration {
    Instant::now().saturating_duration_since(origin)
}

/// An instant about 30 years from now (as tokio's own far future), or the
/// furthest step below that the clock can represent.
pub(crate) fn far_future() -> Instant {
    let now = Instant::now();
    let mut step = FAR;
    loop {
        if let Some(at) = instant_at(now, step) {
            return at;
        }
        step /= 2;
    }
}

/// The calendar time `wait` from now, in Unix milliseconds (saturating:
/// a time beyond the calendar's range is `u64::MAX`, one before the epoch
/// zero). For a shared store that keeps windows on a calendar clock.
#[cfg(feature = "redis")]
pub(crate) fn unix_ms_after(wait: Duration) -> u64 {
    std::time::SystemTime::now()
        .checked_add(wait)
        .map_or(u64::MAX, |at| {
            at.duration_since(std::time::UNIX_EPOCH).map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn round_trip_inside_the_range() {
        let mut clock = Clock::start();
        let at = clock.at(Duration::from_secs(7)).unwrap();
        assert_eq!(at.duration_since(clock.origin()), Duration::from_secs(7));
        assert_eq!(clock.since(at), Duration::from_secs(7));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(clock.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_until_an_instant_is_needed_then_read_once_per_poll() {
        let mut clock = Clock::unread();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.now(), Duration::ZERO, "before any poll");
        clock.new_poll();
        assert_eq!(clock.now(), Duration::ZERO, "no instant needed yet");
        assert_eq!(clock.origin_read(), None, "nothing read");
        // A timer is armed: the origin is read, now.
        let deadline = clock.at(Duration::from_secs(4)).unwrap();
        let origin = Instant::now();
        assert_eq!(clock.origin_read(), Some(origin));
        assert_eq!(deadline, origin + Duration::from_secs(4));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            clock.now(),
            Duration::ZERO,
            "the same poll, the same reading"
        );
        clock.new_poll();
        assert_eq!(clock.now(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn elapsed_reads_the_origin_at_its_first_call() {
        let mut clock = Clock::unread();
        assert_eq!(clock.elapsed(), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(clock.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn one_instant_per_poll_the_origin_first() {
        let mut clock = Clock::unread();
        let origin = Instant::now();
        assert_eq!(clock.instant(), origin, "the origin, read now");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.instant(), origin, "the same poll, the same reading");
        assert_eq!(clock.now(), Duration::ZERO);
        clock.new_poll();
        assert_eq!(clock.instant(), origin + Duration::from_secs(2));
        assert_eq!(clock.now(), Duration::from_secs(2));
        // The origin read in a later poll is that poll's reading.
        let mut later = Clock::unread();
        later.new_poll();
        assert_eq!(later.at(Duration::ZERO), Some(Instant::now()));
        assert_eq!(later.instant(), Instant::now());
        assert_eq!(later.now(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn beyond_the_range_is_never_and_before_the_origin_is_zero() {
        let before = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        let mut clock = Clock::start();
        assert_eq!(clock.at(Duration::MAX), None);
        assert_eq!(clock.at(Duration::from_secs(u64::MAX / 2)), None);
        assert_eq!(clock.since(before), Duration::ZERO);
        assert!(
            clock.at_or_far(Duration::MAX) > clock.at(Duration::from_secs(86_400 * 365)).unwrap()
        );
    }
}
