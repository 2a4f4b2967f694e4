//! The policy: what a user configures. Validated once, then immutable.
//!
//! A [`Policy`] is plain configuration, kept apart from the runtime state of an
//! action (see [`Action`](crate::Action)) in the manner of linkerd2-proxy's
//! `ExponentialBackoff`: it is `Copy`, so every action can own one without an
//! allocation or a reference count.

use std::fmt;
use std::time::Duration;

use crate::status::StatusSet;

/// How the local fallback wait is spread, so that clients refused together do
/// not retry together.
///
/// Jitter applies **only** to the local fallback (no usable `Retry-After`):
/// a server's delay is never shortened nor spread by it (an opt-in
/// [`PolicyBuilder::spread`] lengthens a server's delay). Let `w` be the fallback
/// wait after `k` completed attempts (`base^k` seconds, capped by
/// [`PolicyBuilder::fallback_cap`] if set) and `floor = min(min_wait, w)`:
///
/// | jitter | wait |
/// |---|---|
/// | [`None`](Jitter::None) (default) | exactly `w`: the given schedules stay exact |
/// | [`Full`](Jitter::Full) | uniform in `[floor, w]` |
/// | [`Equal`](Jitter::Equal) | uniform in `[max(floor, w/2), w]` |
/// | [`Decorrelated`](Jitter::Decorrelated) | uniform in `[w1, max(w1, 3 × previous)]`, capped, where `w1` is the first fallback wait (AWS's "decorrelated jitter") |
/// | [`Additive(x)`](Jitter::Additive) | `w` plus uniform in `[0, x]`: the source's `+ Math.random() * 500` (only ever lengthens) |
///
/// Draws are in whole milliseconds, from a generator seeded per action
/// ([`Action::with_seed`](crate::Action::with_seed)), so a seed reproduces a
/// schedule exactly. Whatever the draw, the reservation rule still decides
/// whether the next attempt may start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Jitter {
    /// No jitter: the fallback wait is exactly `base^k` seconds (capped).
    #[default]
    None,
    /// "Full jitter": uniform between the floor and the fallback wait.
    Full,
    /// "Equal jitter": at least half of the fallback wait, at most all of it.
    Equal,
    /// "Decorrelated jitter": each wait drawn from the first fallback wait up
    /// to three times the previous wait, capped.
    Decorrelated,
    /// The fallback wait plus a uniform extra of at most this much.
    Additive(Duration),
}

impl Jitter {
    /// The `snake_case` name: `none`, `full`, `equal`, `decorrelated`,
    /// `additive`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Full => "full",
            Self::Equal => "equal",
            Self::Decorrelated => "decorrelated",
            Self::Additive(_) => "additive",
        }
    }
}

/// The default total budget of one action: 20 s.
pub const DEFAULT_TOTAL_BUDGET: Duration = Duration::from_secs(20);
/// The default number of attempts, the first included: 3.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The default per-attempt cap, reserved in full before each attempt: 4 s.
pub const DEFAULT_ATTEMPT_CAP: Duration = Duration::from_secs(4);
/// The default local floor applied to a valid server delay: 1 s.
pub const DEFAULT_MIN_WAIT: Duration = Duration::from_secs(1);
/// The default fallback base: `2^k` seconds after `k` completed attempts.
pub const DEFAULT_FALLBACK_BASE: u32 = 2;
/// The largest `max_attempts` a policy accepts: 100.
///
/// The trail records every attempt, so the attempt count bounds the
/// report's size; a budget that needs more than a hundred tries of one
/// request is a loop, not a retry policy.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// A validated retry-budget policy.
///
/// Build one with [`Policy::builder`]; [`Policy::default`] is the policy of
/// the rule (20 s budget, 3 attempts, 4 s cap, 1 s floor, fallback `2^k` s,
/// only 429 retried).
///
/// ```
/// use std::time::Duration;
/// use retry_budget::{Jitter, Policy};
///
/// let policy = Policy::builder()
///     .total_budget(Duration::from_secs(10))
///     .max_attempts(2)
///     .attempt_cap(Duration::from_secs(2))
///     .build()?;
/// assert_eq!(policy.max_attempts(), 2);
///
/// // A cap larger than the budget can never be reserved: a typed error.
/// let err = Policy::builder()
///     .total_budget(Duration::from_secs(1))
///     .attempt_cap(Duration::from_secs(4))
///     .build()
///     .unwrap_err();
/// assert!(err.to_string().contains("per-attempt cap"));
///
/// // The source's local backoff: capped at 8 s, spread by jitter.
/// let spread = Policy::builder()
///     .jitter(Jitter::Equal)
///     .fallback_cap(Duration::from_secs(8))
///     .build()?;
/// assert_eq!(spread.fallback_wait(5), Duration::from_secs(8));
/// # Ok::<(), retry_budget::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    total_budget: Duration,
    max_attempts: u32,
    attempt_cap: Duration,
    min_wait: Duration,
    fallback_base: u32,
    fallback_cap: Option<Duration>,
    jitter: Jitter,
    retry_statuses: StatusSet,
    spread: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            total_budget: DEFAULT_TOTAL_BUDGET,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            attempt_cap: DEFAULT_ATTEMPT_CAP,
            min_wait: DEFAULT_MIN_WAIT,
            fallback_base: DEFAULT_FALLBACK_BASE,
            fallback_cap: None,
            jitter: Jitter::None,
            retry_statuses: StatusSet::TOO_MANY_REQUESTS,
            spread: Duration::ZERO,
        }
    }
}

impl Policy {
    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder {
            policy: Self::default(),
            statuses: None,
        }
    }

    /// A builder starting from this policy, to change a few fields.
    pub fn to_builder(self) -> PolicyBuilder {
        PolicyBuilder {
            policy: self,
            statuses: None,
        }
    }

    /// This policy for an action whose caller allows only `allowed` (a
    /// caller's deadline such as `grpc-timeout`): the total budget shrunk to
    /// `allowed`, and the per-attempt cap with it if it no longer fits. A
    /// caller allowing at least the whole budget changes nothing.
    ///
    /// # Errors
    ///
    /// [`PolicyError::ZeroBudget`] when the caller allows no time at all.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::Policy;
    ///
    /// let s = Duration::from_secs;
    /// let policy = Policy::default(); // 20 s, 4 s per attempt
    /// assert_eq!(policy.within(s(60))?, policy);
    /// let ten = policy.within(s(10))?;
    /// assert_eq!((ten.total_budget(), ten.attempt_cap()), (s(10), s(4)));
    /// let one = policy.within(s(1))?;
    /// assert_eq!((one.total_budget(), one.attempt_cap()), (s(1), s(1)));
    /// assert!(policy.within(Duration::ZERO).is_err());
    /// # Ok::<(), retry_budget::PolicyError>(())
    /// ```
    pub fn within(self, allowed: Duration) -> Result<Self, PolicyError> {
        if allowed >= self.total_budget() {
            return Ok(self);
        }
        self.to_builder()
            .total_budget(allowed)
            .attempt_cap(self.attempt_cap().min(allowed))
            .build()
    }

    /// The whole action's budget, counted from the first attempt's start.
    pub const fn total_budget(&self) -> Duration {
        self.total_budget
    }

    /// The maximum number of attempts, the first included.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The per-attempt cap: reserved in full before every attempt, and the
    /// attempt's deadline.
    pub const fn attempt_cap(&self) -> Duration {
        self.attempt_cap
    }

    /// The local floor applied to a valid server delay.
    pub const fn min_wait(&self) -> Duration {
        self.min_wait
    }

    /// The fallback base: after `k` completed attempts without a usable
    /// Retry-After, the wait is `base^k` seconds.
    pub const fn fallback_base(&self) -> u32 {
        self.fallback_base
    }

    /// The cap on the local fallback wait, if any (the source caps it at
    /// 8 s). A server's delay is never capped.
    pub const fn fallback_cap(&self) -> Option<Duration> {
        self.fallback_cap
    }

    /// The jitter applied to the local fallback wait (default
    /// [`Jitter::None`]).
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The most a server's delay is spread by (zero: no spread, the
    /// default). See [`PolicyBuilder::spread`].
    pub const fn spread(&self) -> Duration {
        self.spread
    }

    /// The statuses that are retried.
    pub const fn retry_statuses(&self) -> &StatusSet {
        &self.retry_statuses
    }

    /// Whether a response with this status is one the policy retries.
    #[inline]
    pub const fn retries(&self, status: u16) -> bool {
        self.retry_statuses.contains(status)
    }

    /// The fallback wait after `completed` attempts, before jitter:
    /// `base^completed` seconds, saturating at the largest `Duration` of
    /// whole seconds, then capped by the [fallback cap](Self::fallback_cap)
    /// if one is set.
    pub fn fallback_wait(&self, completed: u32) -> Duration {
        let secs = u64::from(self.fallback_base)
            .checked_pow(completed)
            .unwrap_or(u64::MAX);
        let wait = Duration::from_secs(secs);
        match self.fallback_cap {
            Some(cap) => wait.min(cap),
            None => wait,
        }
    }
}

/// Builds a [`Policy`]; [`build`](PolicyBuilder::build) validates it.
#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    policy: Policy,
    statuses: Option<Vec<u16>>,
}

impl PolicyBuilder {
    /// The whole action's budget (default 20 s).
    pub fn total_budget(mut self, budget: Duration) -> Self {
        self.policy.total_budget = budget;
        self
    }

    /// The maximum number of attempts, the first included (default 3, at
    /// most [`MAX_ATTEMPTS_LIMIT`]).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.policy.max_attempts = attempts;
        self
    }

    /// The per-attempt cap (default 4 s).
    pub fn attempt_cap(mut self, cap: Duration) -> Self {
        self.policy.attempt_cap = cap;
        self
    }

    /// The local floor applied to a valid server delay (default 1 s).
    pub fn min_wait(mut self, min_wait: Duration) -> Self {
        self.policy.min_wait = min_wait;
        self
    }

    /// The fallback base (default 2: waits of 2 s, then 4 s).
    pub fn fallback_base(mut self, base: u32) -> Self {
        self.policy.fallback_base = base;
        self
    }

    /// Caps the local fallback wait (default: no cap). The source caps it at
    /// 8 s. A server's delay is never capped. Must be greater than zero.
    pub fn fallback_cap(mut self, cap: Duration) -> Self {
        self.policy.fallback_cap = Some(cap);
        self
    }

    /// Spreads the local fallback wait (default [`Jitter::None`], which
    /// keeps every schedule exact). See [`Jitter`].
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.policy.jitter = jitter;
        self
    }

    /// Adds a uniform random extra wait in `[0, spread]` (whole
    /// milliseconds) on top of a server's delay (`Retry-After`, or a reset
    /// header), never shortening it (default: zero, no spread). Drawn from
    /// the action's seeded generator
    /// ([`Action::with_seed`](crate::Action::with_seed)).
    ///
    /// Why: a server that rounds its delay down (`Retry-After:
    /// int(reset - now)`) sees a client that waits exactly that long come
    /// back up to a second early, and spend an attempt on a certain 429;
    /// and many clients told the same delay at the same moment otherwise
    /// all come back in the same instant. The reservation rule still
    /// decides whether the longer wait fits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Policy, retry_after::RetryAfter};
    ///
    /// let policy = Policy::builder().spread(Duration::from_secs(1)).build()?;
    /// let mut action = Action::with_seed(policy, 7);
    /// action.attempt_started(Duration::ZERO);
    /// let Decision::WaitUntil(until) =
    ///     action.response(Duration::from_secs(1), 429, &RetryAfter::parse("3"), None)
    /// else { panic!() };
    /// assert!(until >= Duration::from_secs(4) && until <= Duration::from_secs(5));
    /// # Ok::<(), retry_budget::PolicyError>(())
    /// ```
    pub fn spread(mut self, spread: Duration) -> Self {
        self.policy.spread = spread;
        self
    }

    /// The statuses to retry (default: only 429). Each must be a 4xx or 5xx
    /// status.
    pub fn retry_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.statuses = Some(statuses.into_iter().collect());
        self
    }

    /// Validates the configuration.
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] naming the first field that cannot work.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let mut policy = self.policy;
        if let Some(statuses) = self.statuses {
            if statuses.is_empty() {
                return Err(PolicyError::NoRetryStatuses);
            }
            let mut set = StatusSet::EMPTY;
            for status in statuses {
                set = set
                    .with(status)
                    .ok_or(PolicyError::StatusNotRetryable(status))?;
            }
            policy.retry_statuses = set;
        }
        if policy.total_budget.is_zero() {
            return Err(PolicyError::ZeroBudget);
        }
        if policy.max_attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if policy.max_attempts > MAX_ATTEMPTS_LIMIT {
            return Err(PolicyError::TooManyAttempts {
                attempts: policy.max_attempts,
                limit: MAX_ATTEMPTS_LIMIT,
            });
        }
        if policy.attempt_cap.is_zero() {
            return Err(PolicyError::ZeroAttemptCap);
        }
        if policy.attempt_cap > policy.total_budget {
            return Err(PolicyError::CapExceedsBudget {
                cap: policy.attempt_cap,
                budget: policy.total_budget,
            });
        }
        if policy.fallback_base == 0 {
            return Err(PolicyError::ZeroFallbackBase);
        }
        if policy.fallback_cap == Some(Duration::ZERO) {
            return Err(PolicyError::ZeroFallbackCap);
        }
        Ok(policy)
    }
}

/// Why a policy cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The total budget is zero: no attempt could ever start.
    #[error("the total budget must be greater than zero")]
    ZeroBudget,
    /// Zero attempts: not even the first request could be sent.
    #[error("max attempts must be at least 1 (the first attempt counts)")]
    ZeroAttempts,
    /// More attempts than [`MAX_ATTEMPTS_LIMIT`]: the trail, which records
    /// every attempt, would have no useful bound.
    #[error("max attempts must be at most {limit} (got {attempts})")]
    TooManyAttempts {
        /// The configured count.
        attempts: u32,
        /// The limit, [`MAX_ATTEMPTS_LIMIT`].
        limit: u32,
    },
    /// A zero per-attempt cap would time every attempt out at once.
    #[error("the per-attempt cap must be greater than zero")]
    ZeroAttemptCap,
    /// The cap is reserved in full before each attempt, so it must fit in the
    /// budget.
    #[error("the per-attempt cap ({}) is larger than the total budget ({}): no attempt could be reserved", Secs(*.cap), Secs(*.budget))]
    CapExceedsBudget {
        /// The configured cap.
        cap: Duration,
        /// The configured budget.
        budget: Duration,
    },
    /// The set of retried statuses is empty: use `max_attempts(1)` to disable
    /// retries instead.
    #[error("the set of retried statuses is empty (to disable retries, set max attempts to 1)")]
    NoRetryStatuses,
    /// A retried status must be an error status (4xx or 5xx).
    #[error("status {0} cannot be retried: only 4xx and 5xx statuses can")]
    StatusNotRetryable(u16),
    /// A fallback base of zero would mean retrying without any wait.
    #[error("the fallback base must be at least 1")]
    ZeroFallbackBase,
    /// A fallback cap of zero would mean retrying without any wait.
    #[error("the fallback cap must be greater than zero")]
    ZeroFallbackCap,
}

/// Formats a duration as seconds, the way every message of this crate does:
/// `2 s`, `4.5 s`, `0.25 s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secs(pub Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0.as_secs();
        if whole == u64::MAX {
            // A saturated delay (`Retry-After: 99999999999999999999`): the
            // exact figure would suggest a precision the server never gave.
            return f.write_str("more than 584 billion years");
        }
        let millis = self.0.subsec_millis();
        if millis == 0 {
            write!(f, "{whole} s")
        } else {
            let frac = format!("{millis:03}");
            write!(f, "{whole}.{} s", frac.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec() {
        let p = Policy::default();
        assert_eq!(p.total_budget(), Duration::from_secs(20));
        assert_eq!(p.max_attempts(), 3);
        assert_eq!(p.attempt_cap(), Duration::from_secs(4));
        assert_eq!(p.min_wait(), Duration::from_secs(1));
        assert_eq!(p.fallback_base(), 2);
        assert!(p.retries(429));
        assert!(!p.retries(503));
        assert_eq!(Policy::builder().build(), Ok(p));
    }

    #[test]
    fn fallback_is_base_to_the_k() {
        let p = Policy::default();
        assert_eq!(p.fallback_wait(1), Duration::from_secs(2));
        assert_eq!(p.fallback_wait(2), Duration::from_secs(4));
        assert_eq!(p.fallback_wait(200), Duration::from_secs(u64::MAX));
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        let b = Policy::builder;
        assert_eq!(
            b().total_budget(Duration::ZERO).build(),
            Err(PolicyError::ZeroBudget)
        );
        assert_eq!(b().max_attempts(0).build(), Err(PolicyError::ZeroAttempts));
        assert_eq!(
            b().max_attempts(MAX_ATTEMPTS_LIMIT + 1).build(),
            Err(PolicyError::TooManyAttempts {
                attempts: 101,
                limit: 100
            })
        );
        assert_eq!(
            b().max_attempts(u32::MAX).build().unwrap_err().to_string(),
            "max attempts must be at most 100 (got 4294967295)"
        );
        assert_eq!(
            b().max_attempts(MAX_ATTEMPTS_LIMIT)
                .build()
                .map(|p| p.max_attempts()),
            Ok(100)
        );
        assert_eq!(
            b().attempt_cap(Duration::ZERO).build(),
            Err(PolicyError::ZeroAttemptCap)
        );
        assert_eq!(
            b().attempt_cap(Duration::from_secs(21)).build(),
            Err(PolicyError::CapExceedsBudget {
                cap: Duration::from_secs(21),
                budget: Duration::from_secs(20)
            })
        );
        assert_eq!(
            b().retry_statuses([]).build(),
            Err(PolicyError::NoRetryStatuses)
        );
        assert_eq!(
            b().retry_statuses([429, 200]).build(),
            Err(PolicyError::StatusNotRetryable(200))
        );
        assert_eq!(
            b().fallback_base(0).build(),
            Err(PolicyError::ZeroFallbackBase)
        );
        assert_eq!(
            b().fallback_cap(Duration::ZERO).build(),
            Err(PolicyError::ZeroFallbackCap)
        );
    }

    #[test]
    fn the_fallback_cap_bounds_the_exponential_only() {
        let p = Policy::builder()
            .fallback_cap(Duration::from_secs(8))
            .build()
            .unwrap();
        assert_eq!(p.fallback_wait(2), Duration::from_secs(4));
        assert_eq!(p.fallback_wait(3), Duration::from_secs(8));
        assert_eq!(p.fallback_wait(200), Duration::from_secs(8));
        assert_eq!(p.jitter(), Jitter::None, "jitter is off by default");
    }

    #[test]
    fn cap_equal_to_budget_is_allowed() {
        let p = b_secs(4, 4);
        assert_eq!(p.attempt_cap(), p.total_budget());
    }

    fn b_secs(budget: u64, cap: u64) -> Policy {
        Policy::builder()
            .total_budget(Duration::from_secs(budget))
            .attempt_cap(Duration::from_secs(cap))
            .build()
            .unwrap()
    }

    #[test]
    fn secs_format() {
        assert_eq!(Secs(Duration::from_secs(2)).to_string(), "2 s");
        assert_eq!(Secs(Duration::from_millis(4500)).to_string(), "4.5 s");
        assert_eq!(Secs(Duration::from_millis(250)).to_string(), "0.25 s");
        assert_eq!(
            Secs(Duration::from_secs(u64::MAX)).to_string(),
            "more than 584 billion years"
        );
    }

    #[test]
    fn the_budget_shrinks_to_what_the_caller_allows() {
        let base = Policy::default();
        assert_eq!(base.within(Duration::from_secs(60)), Ok(base));
        let one = base.within(Duration::from_secs(1)).unwrap();
        assert_eq!(one.total_budget(), Duration::from_secs(1));
        assert_eq!(one.attempt_cap(), Duration::from_secs(1));
        assert_eq!(one.max_attempts(), base.max_attempts());
        let ten = base.within(Duration::from_secs(10)).unwrap();
        assert_eq!(ten.attempt_cap(), base.attempt_cap());
        assert_eq!(base.within(Duration::ZERO), Err(PolicyError::ZeroBudget));
    }
}
