//! Whether an action's request may be sent again: the one input that says
//! it must not be (a write), and the question the adapter asks before it
//! keeps a copy of the request.

use super::{Action, Phase};

impl Action {
    /// Tells the action, before its first attempt, that its request must
    /// never be sent twice: a write that nothing marked as safe to repeat
    /// (an `Idempotency-Key` every copy keeps). A response the policy would
    /// retry then ends the action as [`Outcome::NotRetryable`](crate::Outcome::NotRetryable), with
    /// [`EventKind::NotRepeatable`](crate::trail::EventKind::NotRepeatable) in the trail saying why, where a policy
    /// of one attempt ends [`Outcome::AttemptsExhausted`](crate::Outcome::AttemptsExhausted); and
    /// [`retry_may_follow`](Self::retry_may_follow) is `false` from the
    /// start, so no copy of the request is ever kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Outcome, Policy, retry_after::RetryAfter};
    ///
    /// let mut action = Action::new(Policy::default());
    /// action.not_repeatable();
    /// assert!(!action.retry_may_follow());
    /// action.attempt_started(Duration::ZERO);
    /// let next = action.response(Duration::from_secs(1), 429, &RetryAfter::parse("1"), None);
    /// assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
    /// assert!(action.report().unwrap().message().contains("not safe to repeat"));
    /// ```
    pub fn not_repeatable(&mut self) {
        self.repeatable = false;
    }

    /// Whether another attempt may still follow the one in flight (or, before
    /// it starts, the next one): when `false`, that attempt is the last, and
    /// the caller may send the request itself instead of keeping a copy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy};
    ///
    /// let policy = Policy::builder().max_attempts(2).build()?;
    /// let mut action = Action::new(policy);
    /// assert!(action.retry_may_follow()); // the first of two
    /// action.attempt_started(Duration::ZERO);
    /// assert!(action.retry_may_follow());
    /// # use retry_budget::retry_after::RetryAfter;
    /// action.response(Duration::from_secs(1), 429, &RetryAfter::parse("1"), None);
    /// action.timer_woke(Duration::from_secs(2));
    /// assert!(!action.retry_may_follow()); // the next one is the last
    /// # Ok::<(), retry_budget::PolicyError>(())
    /// ```
    pub fn retry_may_follow(&self) -> bool {
        if !self.repeatable {
            return false;
        }
        let last = match self.phase {
            Phase::Stopped { .. } => return false,
            Phase::InFlight { .. } => self.attempts_started,
            Phase::Ready | Phase::Waiting { .. } => self.attempts_started.saturating_add(1),
        };
        last < self.policy.max_attempts()
    }
}
