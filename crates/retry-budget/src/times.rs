//! An action's four kept times, packed: a [`Duration`] is 16 bytes, 4 of
//! them padding, so four of them (three optional) take 48 bytes here
//! instead of 64, which keeps a waiting action of the layer under its
//! memory goal (`BENCHMARKS.md`). Hand-written: no crate packs durations.

use std::time::Duration;

/// The nanoseconds of a time that is not there (a real one is below a
/// second, [`SECOND`]: one comparison tells both apart and makes the
/// `Duration`, as for an `Option<Duration>`).
const NONE: u32 = u32::MAX;
const SECOND: u32 = 1_000_000_000;

/// Which of the four times.
const LATEST: usize = 0;
const REQUESTED: usize = 1;
const FALLBACK: usize = 2;
const ASKED_UNTIL: usize = 3;

/// The latest elapsed time seen, the wait the server requested with the
/// last retried status, the last jittered fallback wait, and the end of
/// the wait the service asked for (see the `Action` fields they stand for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Times {
    secs: [u64; 4],
    nanos: [u32; 4],
}

impl Times {
    /// The latest time zero, the others not there.
    pub(crate) const fn new() -> Self {
        Self {
            secs: [0; 4],
            nanos: [0, NONE, NONE, NONE],
        }
    }

    #[inline(always)]
    const fn get(&self, which: usize) -> Option<Duration> {
        let nanos = self.nanos[which];
        if nanos < SECOND {
            Some(Duration::new(self.secs[which], nanos))
        } else {
            None
        }
    }

    #[inline(always)]
    fn set(&mut self, which: usize, time: Option<Duration>) {
        match time {
            Some(time) => {
                self.secs[which] = time.as_secs();
                self.nanos[which] = time.subsec_nanos();
            }
            None => self.nanos[which] = NONE,
        }
    }

    /// The latest elapsed time seen.
    #[inline(always)]
    pub(crate) fn latest(&self) -> Duration {
        // Always there.
        match self.get(LATEST) {
            Some(latest) => latest,
            None => Duration::ZERO,
        }
    }

    /// Sets the latest elapsed time seen to `now` if it is later, and
    /// returns the latest (a time that goes backwards reads as it).
    #[inline(always)]
    pub(crate) fn advance(&mut self, now: Duration) -> Duration {
        let (secs, nanos) = (self.secs[LATEST], self.nanos[LATEST]);
        if (now.as_secs(), now.subsec_nanos()) >= (secs, nanos) {
            self.set(LATEST, Some(now));
            now
        } else {
            Duration::new(secs, nanos)
        }
    }

    /// The wait the server requested with the last retried status.
    pub(crate) fn requested(&self) -> Option<Duration> {
        self.get(REQUESTED)
    }

    /// Sets the wait the server requested.
    #[inline(always)]
    pub(crate) fn set_requested(&mut self, requested: Option<Duration>) {
        self.set(REQUESTED, requested);
    }

    /// The last jittered fallback wait.
    pub(crate) fn fallback(&self) -> Option<Duration> {
        self.get(FALLBACK)
    }

    /// Sets the last jittered fallback wait.
    pub(crate) fn set_fallback(&mut self, fallback: Option<Duration>) {
        self.set(FALLBACK, fallback);
    }

    /// The end of the wait the service asked for.
    #[inline(always)]
    pub(crate) const fn asked_until(&self) -> Option<Duration> {
        self.get(ASKED_UNTIL)
    }

    /// Sets the end of the wait the service asked for.
    #[inline(always)]
    pub(crate) fn set_asked_until(&mut self, until: Option<Duration>) {
        self.set(ASKED_UNTIL, until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_time_reads_back_what_was_set_and_the_others_stay() {
        let mut times = Times::new();
        assert_eq!(times.latest(), Duration::ZERO);
        assert_eq!(
            (times.requested(), times.fallback(), times.asked_until()),
            (None, None, None)
        );
        let (a, b, max) = (
            Duration::new(3, 999_999_999),
            Duration::from_millis(1),
            Duration::MAX,
        );
        assert_eq!(times.advance(a), a);
        assert_eq!(times.advance(Duration::from_secs(1)), a);
        times.set_requested(Some(b));
        times.set_fallback(Some(max));
        times.set_asked_until(Some(Duration::ZERO));
        assert_eq!(times.latest(), a);
        assert_eq!(times.requested(), Some(b));
        assert_eq!(times.fallback(), Some(max));
        assert_eq!(times.asked_until(), Some(Duration::ZERO));
        times.set_requested(None);
        assert_eq!((times.requested(), times.fallback()), (None, Some(max)));
        assert!(size_of::<Times>() < 4 * size_of::<Duration>());
    }
}
