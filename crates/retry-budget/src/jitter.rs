//! The local fallback wait and its jitter: how long to wait when the server
//! asked nothing usable, drawn from an action's own generator so that the
//! same seed and inputs give the same schedule.

use std::time::Duration;

use crate::times::Times;
use crate::trail::WaitBasis;
use crate::{Jitter, Policy};

/// The local fallback wait after `completed` attempts under `policy`,
/// spread by its jitter (see [`Jitter`]) with draws from `rng`. `previous`
/// is the last jittered wait (decorrelated jitter grows from it), updated.
pub(crate) fn fallback(
    policy: &Policy,
    rng: &mut fastrand::Rng,
    previous: &mut Times,
    completed: u32,
) -> (Duration, WaitBasis) {
    let unjittered = policy.fallback_wait(completed);
    let floor = policy.min_wait().min(unjittered);
    let wait = match policy.jitter() {
        Jitter::None => return (unjittered, WaitBasis::Fallback { completed }),
        Jitter::Full => uniform(rng, floor, unjittered),
        Jitter::Equal => uniform(rng, (unjittered / 2).max(floor), unjittered),
        Jitter::Decorrelated => {
            let first = policy.fallback_wait(1);
            let last = previous.fallback().unwrap_or(first);
            let mut high = last.saturating_mul(3).max(first);
            if let Some(cap) = policy.fallback_cap() {
                high = high.min(cap);
            }
            uniform(rng, first.min(high), high).max(floor)
        }
        Jitter::Additive(extra) => unjittered.saturating_add(uniform(rng, Duration::ZERO, extra)),
    };
    previous.set_fallback(Some(wait));
    (
        wait,
        WaitBasis::FallbackJittered {
            completed,
            unjittered,
        },
    )
}

/// A uniform draw from `rng` in whole milliseconds within `[low, high]`
/// (`low` if no whole millisecond lies strictly above it).
pub(crate) fn uniform(rng: &mut fastrand::Rng, low: Duration, high: Duration) -> Duration {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let sub_milli = u64::from(!low.subsec_nanos().is_multiple_of(1_000_000));
    let lo = millis(low).saturating_add(sub_milli);
    let hi = millis(high);
    if lo >= hi {
        return low;
    }
    Duration::from_millis(rng.u64(lo..=hi))
}
