//! **The cross-request budget lives here.** A [`RatioBudget`] is shared by
//! all actions of a client and bounds their *retries* to a ratio of their
//! *first attempts*, so that a storm of 429s cannot multiply the load the
//! client sends ("naive retries turn one limit into a stampede").
//!
//! Each action's own budget ([`Action`](crate::Action)) bounds how long one
//! user waits; this one bounds what all of them together ask of the service.
//! It follows Finagle's `RetryBudget` and tower's `TpsBudget`: every first
//! attempt deposits, every retry withdraws, over a sliding window, with a
//! small reserve (`min_per_sec × window`) so that a quiet client can still
//! retry at all.
//!
//! # Exact arithmetic
//!
//! tower's `TpsBudget` turns the ratio into an integer "cost per retry"
//! (`1 / ratio`, truncated), so a ratio of 0.3 allows one retry per 3 first
//! attempts (0.33), and any ratio above 0.5 allows one per first attempt
//! (tower issue #857). Here the ratio is a fraction `num / den` and the
//! balance is kept in units of `1 / den`: a first attempt deposits `num`
//! units, a retry costs `den`, the reserve is `reserve × den`. A retry is
//! allowed if and only if, counting what the window holds,
//!
//! ```text
//! (retries + 1) × den <= reserve × den + num × first_attempts
//! ```
//!
//! which is `retries + 1 <= reserve + ratio × first_attempts`, exactly, with
//! no rounding and no overflow (128-bit intermediates).
//!
//! # Time
//!
//! Pure: time is an input (`now`, a [`Duration`] since any fixed origin of
//! a monotonic clock). The window is [`BUCKETS`](RatioBudget::BUCKETS)
//! buckets of a tenth of its length; the counts of a bucket expire together,
//! so an event is forgotten between 0.9 and 1 window after it happened.
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::ratio::{Ratio, RatioBudget};
//!
//! // Retries may be 20 % of first attempts, no reserve, 10 s window.
//! let mut budget = RatioBudget::new(Ratio::new(1, 5)?, 0, Duration::from_secs(10))?;
//! let now = Duration::ZERO;
//! for _ in 0..10 {
//!     budget.deposit(now);
//! }
//! assert!(budget.withdraw(now));
//! assert!(budget.withdraw(now));
//! assert!(!budget.withdraw(now), "2 retries for 10 first attempts, not 3");
//! // Ten seconds later the window has forgotten all of it.
//! assert_eq!(budget.available(Duration::from_secs(10)), 0);
//! # Ok::<(), retry_budget::ratio::RatioError>(())
//! ```

use std::fmt;
use std::time::Duration;

/// The largest ratio accepted: ten retries per first attempt (tower's
/// `TpsBudget` accepts up to 1000 %).
pub const MAX_RATIO: u32 = 10;

/// The shortest window accepted (as Finagle and tower).
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest window accepted (as Finagle and tower).
pub const MAX_WINDOW: Duration = Duration::from_secs(60);

/// Retries allowed per first attempt, as an exact fraction in `(0, 10]`.
///
/// ```
/// use retry_budget::ratio::Ratio;
///
/// assert_eq!(Ratio::from_f64(0.3)?, Ratio::new(3, 10)?);
/// assert_eq!(Ratio::percent(20)?, Ratio::new(1, 5)?);
/// assert!(Ratio::from_f64(0.0).is_err());
/// assert!(Ratio::new(11, 1).is_err());
/// # Ok::<(), retry_budget::ratio::RatioError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: u32,
    den: u32,
}

impl Ratio {
    /// `num / den` retries per first attempt, kept exactly (reduced to
    /// lowest terms, so equal ratios compare equal).
    ///
    /// # Errors
    ///
    /// [`RatioError::ZeroDenominator`], or [`RatioError::OutOfRange`] unless
    /// `0 < num / den <= 10`.
    pub fn new(num: u32, den: u32) -> Result<Self, RatioError> {
        if den == 0 {
            return Err(RatioError::ZeroDenominator);
        }
        if num == 0 || u64::from(num) > u64::from(MAX_RATIO) * u64::from(den) {
            return Err(RatioError::OutOfRange {
                ratio: f64::from(num) / f64::from(den),
            });
        }
        let divisor = gcd(num, den);
        Ok(Self {
            num: num / divisor,
            den: den / divisor,
        })
    }

    /// `percent / 100` retries per first attempt.
    ///
    /// # Errors
    ///
    /// [`RatioError::OutOfRange`] unless `0 < percent <= 1000`.
    pub fn percent(percent: u32) -> Result<Self, RatioError> {
        Self::new(percent, 100)
    }

    /// The ratio to the nearest millionth (so `0.3` is exactly `3 / 10`, not
    /// the binary number nearest to it).
    ///
    /// # Errors
    ///
    /// [`RatioError::OutOfRange`] unless the value is finite and, to the
    /// nearest millionth, in `(0, 10]`.
    pub fn from_f64(ratio: f64) -> Result<Self, RatioError> {
        const MILLION: f64 = 1_000_000.0;
        let millionths = (ratio * MILLION).round();
        if !millionths.is_finite()
            || millionths < 1.0
            || millionths > f64::from(MAX_RATIO) * MILLION
        {
            return Err(RatioError::OutOfRange { ratio });
        }
        // In range: at most 10^7, exact in both f64 and u32.
        Self::new(millionths as u32, 1_000_000)
    }

    /// The numerator.
    pub const fn numerator(self) -> u32 {
        self.num
    }

    /// The denominator.
    pub const fn denominator(self) -> u32 {
        self.den
    }

    /// The ratio as a float, for display only.
    pub fn as_f64(self) -> f64 {
        f64::from(self.num) / f64::from(self.den)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// Why a [`Ratio`] or a [`RatioBudget`] cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RatioError {
    /// A fraction with a zero denominator.
    #[error("the ratio's denominator must not be zero")]
    ZeroDenominator,
    /// The ratio is not in `(0, 10]`.
    #[error("the retry ratio must be greater than 0 and at most {MAX_RATIO} (got {ratio})")]
    OutOfRange {
        /// The ratio given.
        ratio: f64,
    },
    /// The window is shorter than 1 s or longer than 60 s.
    #[error("the window must be between 1 s and 60 s (got {} s)", .0.as_secs_f64())]
    WindowOutOfRange(Duration),
}

/// A retry budget shared by all actions of a client: retries bounded to a
/// [`Ratio`] of first attempts over a sliding window, plus a reserve. See the
/// [module docs](self).
///
/// Not synchronised: the tower adapter keeps one behind a mutex and feeds it
/// tokio's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatioBudget {
    ratio: Ratio,
    min_per_sec: u32,
    window: Duration,
    /// Width of one bucket, in nanoseconds (at least 100 ms).
    width_nanos: u128,
    /// The reserve in whole retries: `floor(min_per_sec × window)`.
    reserve: u64,
    deposits: [u64; RatioBudget::BUCKETS],
    withdrawals: [u64; RatioBudget::BUCKETS],
    /// The number of the current bucket (`now / width`).
    current: u64,
}

impl RatioBudget {
    /// How many buckets the window is cut into.
    pub const BUCKETS: usize = 10;

    /// A budget allowing `ratio` retries per first attempt, plus
    /// `min_per_sec` retries per second of window, counted over `window`
    /// (between 1 s and 60 s).
    ///
    /// # Errors
    ///
    /// [`RatioError::WindowOutOfRange`].
    pub fn new(ratio: Ratio, min_per_sec: u32, window: Duration) -> Result<Self, RatioError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
            return Err(RatioError::WindowOutOfRange(window));
        }
        let reserve = u128::from(min_per_sec) * window.as_millis() / 1000;
        Ok(Self {
            ratio,
            min_per_sec,
            window,
            width_nanos: window.as_nanos() / Self::BUCKETS as u128,
            reserve: u64::try_from(reserve).unwrap_or(u64::MAX),
            deposits: [0; Self::BUCKETS],
            withdrawals: [0; Self::BUCKETS],
            current: 0,
        })
    }

    /// The ratio.
    pub const fn ratio(&self) -> Ratio {
        self.ratio
    }

    /// The reserve's rate, in retries per second.
    pub const fn min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The reserve: retries allowed in a window without any first attempt,
    /// `floor(min_per_sec × window)`.
    pub const fn reserve(&self) -> u64 {
        self.reserve
    }

    /// A first attempt was sent at `now`.
    pub fn deposit(&mut self, now: Duration) {
        let slot = self.advance(now);
        self.deposits[slot] = self.deposits[slot].saturating_add(1);
    }

    /// A retry is due at `now`: takes it from the budget and answers `true`,
    /// or answers `false` (and changes nothing) if the budget cannot pay it.
    pub fn withdraw(&mut self, now: Duration) -> bool {
        let slot = self.advance(now);
        if self.balance_units() < u128::from(self.ratio.den) {
            return false;
        }
        self.withdrawals[slot] = self.withdrawals[slot].saturating_add(1);
        true
    }

    /// How many retries the budget could pay at `now`.
    pub fn available(&mut self, now: Duration) -> u64 {
        self.advance(now);
        let whole = self.balance_units() / u128::from(self.ratio.den);
        u64::try_from(whole).unwrap_or(u64::MAX)
    }

    /// First attempts and retries that the window holds at `now`.
    pub fn counts(&mut self, now: Duration) -> (u64, u64) {
        self.advance(now);
        (sum(&self.deposits), sum(&self.withdrawals))
    }

    /// `reserve × den + num × deposits − den × withdrawals` over the window,
    /// clamped at zero (first attempts can expire before the retries they
    /// paid for; the debt then stays until those retries expire too).
    fn balance_units(&self) -> u128 {
        let den = u128::from(self.ratio.den);
        let income = u128::from(self.reserve) * den
            + u128::from(self.ratio.num) * u128::from(sum(&self.deposits));
        income.saturating_sub(den * u128::from(sum(&self.withdrawals)))
    }

    /// Moves the window to `now` (time that goes backwards counts in the
    /// current bucket) and returns the current bucket's slot.
    fn advance(&mut self, now: Duration) -> usize {
        let bucket = u64::try_from(now.as_nanos() / self.width_nanos).unwrap_or(u64::MAX);
        if bucket > self.current {
            let steps = (bucket - self.current).min(Self::BUCKETS as u64);
            for step in 1..=steps {
                let slot = slot_of(self.current.wrapping_add(step));
                self.deposits[slot] = 0;
                self.withdrawals[slot] = 0;
            }
            self.current = bucket;
        }
        slot_of(self.current)
    }
}

const fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn slot_of(bucket: u64) -> usize {
    (bucket % RatioBudget::BUCKETS as u64) as usize
}

fn sum(counts: &[u64]) -> u64 {
    counts.iter().fold(0, |a, b| a.saturating_add(*b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn ratios_above_one_half_are_not_rounded_up_to_one() {
        // TpsBudget would allow 10 retries for 10 first attempts at 0.7.
        let mut budget = RatioBudget::new(Ratio::from_f64(0.7).unwrap(), 0, s(10)).unwrap();
        for _ in 0..10 {
            budget.deposit(s(0));
        }
        let paid = (0..20).filter(|_| budget.withdraw(s(0))).count();
        assert_eq!(paid, 7);
    }

    #[test]
    fn the_reserve_allows_retries_without_first_attempts() {
        let mut budget = RatioBudget::new(Ratio::percent(20).unwrap(), 2, s(10)).unwrap();
        assert_eq!(budget.reserve(), 20);
        assert_eq!(budget.available(s(0)), 20);
        let paid = (0..30).filter(|_| budget.withdraw(s(0))).count();
        assert_eq!(paid, 20);
    }

    #[test]
    fn counts_expire_by_bucket() {
        let mut budget = RatioBudget::new(Ratio::new(1, 1).unwrap(), 0, s(10)).unwrap();
        budget.deposit(s(0));
        budget.deposit(Duration::from_millis(4_500));
        assert_eq!(budget.counts(Duration::from_millis(9_999)), (2, 0));
        // Bucket 0 ([0, 1 s)) expires when bucket 10 begins.
        assert_eq!(budget.counts(s(10)), (1, 0));
        assert_eq!(budget.counts(s(15)), (0, 0));
        // A long silence clears everything at once.
        budget.deposit(s(16));
        assert_eq!(budget.counts(s(3_600)), (0, 0));
    }

    #[test]
    fn time_going_backwards_counts_in_the_current_bucket() {
        let mut budget = RatioBudget::new(Ratio::new(1, 1).unwrap(), 0, s(10)).unwrap();
        budget.deposit(s(5));
        budget.deposit(s(1));
        assert_eq!(budget.counts(s(5)), (2, 0));
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        assert_eq!(Ratio::new(1, 0), Err(RatioError::ZeroDenominator));
        assert!(matches!(
            Ratio::new(0, 1),
            Err(RatioError::OutOfRange { .. })
        ));
        assert!(matches!(
            Ratio::from_f64(f64::NAN),
            Err(RatioError::OutOfRange { .. })
        ));
        assert!(matches!(
            Ratio::from_f64(10.1),
            Err(RatioError::OutOfRange { .. })
        ));
        assert!(Ratio::from_f64(10.0).is_ok());
        let one = Ratio::new(1, 1).unwrap();
        assert_eq!(
            RatioBudget::new(one, 0, Duration::from_millis(999)),
            Err(RatioError::WindowOutOfRange(Duration::from_millis(999)))
        );
        assert!(RatioBudget::new(one, 0, s(61)).is_err());
    }
}
