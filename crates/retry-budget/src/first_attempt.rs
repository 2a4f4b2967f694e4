//! The first attempt's decisions, answered from the policy alone.
//!
//! # Why
//!
//! Most actions are one attempt that answers with a status the policy does
//! not retry. An adapter on every request of a client would rather not
//! create an [`Action`] (and its trail) for those: when nobody reads the
//! trail (no report asked for, nothing listening) and nothing is shared with
//! other actions, the action is fully decided by the policy until its first
//! response. These functions give the core's answers for that stretch, so an
//! adapter can create the `Action` only when it needs one, by then replaying
//! the first start at elapsed zero ([`Action::attempt_started`]): the trail
//! it gets is the one it would have had. The rule stays here; the tests in
//! this file hold the shortcut to the `Action`'s own answers.
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::{Action, Decision, Outcome, Policy};
//!
//! let policy = Policy::default();
//! // What a new action answers when its first attempt starts at zero...
//! assert_eq!(policy.first_attempt(), Action::new(policy).attempt_started(Duration::ZERO));
//! // ...and whether a response ends it whatever its time and headers.
//! assert_eq!(policy.ends_first_attempt(200), Some(Outcome::Success));
//! assert_eq!(policy.ends_first_attempt(404), Some(Outcome::NotRetryable));
//! assert_eq!(policy.ends_first_attempt(429), None); // retried (and shared)
//! ```

use std::time::Duration;

use crate::{Action, Decision, Outcome, Policy};

impl Policy {
    /// What a new action answers when its first attempt starts at elapsed
    /// zero: [`Decision::AwaitResponse`] with the attempt cap as deadline, or
    /// [`Decision::Stop`] if the cap does not fit the budget (a budget
    /// shrunk by [`Policy::within`]).
    pub fn first_attempt(&self) -> Decision {
        match Action::may_start_at(self, 0, Duration::ZERO) {
            Ok(deadline) => Decision::AwaitResponse {
                attempt: 1,
                deadline,
            },
            Err(outcome) => Decision::Stop(outcome),
        }
    }

    /// Whether another attempt may follow the first (see
    /// [`Action::retry_may_follow`]): if not, the request need not be
    /// copied.
    pub const fn retry_may_follow_first(&self) -> bool {
        1 < self.max_attempts()
    }

    /// The outcome a first response with `status` ends the action with,
    /// whatever its time, its headers and the request: `Some` when the
    /// status is not one the policy retries and not a `429` (whose delay
    /// the client shares). `None`: the action must see the response.
    pub const fn ends_first_attempt(&self, status: u16) -> Option<Outcome> {
        if self.retries(status) || status == 429 {
            None
        } else {
            Some(Outcome::of_final_status(status))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryAfter;

    fn policies() -> Vec<Policy> {
        let s = Duration::from_secs;
        let mut all = vec![Policy::default()];
        for (budget, cap, attempts) in [(10, 2, 1), (10, 2, 2), (3, 3, 5), (60, 10, 3)] {
            all.push(
                Policy::builder()
                    .total_budget(s(budget))
                    .attempt_cap(s(cap))
                    .max_attempts(attempts)
                    .build()
                    .unwrap(),
            );
        }
        // A caller's deadline shorter than the cap: no first attempt fits.
        all.push(Policy::default().within(s(1)).unwrap());
        all.push(
            Policy::builder()
                .retry_statuses([429, 503])
                .build()
                .unwrap(),
        );
        all
    }

    #[test]
    fn the_shortcut_answers_as_the_action_does() {
        for policy in policies() {
            let mut action = Action::new(policy);
            assert_eq!(
                policy.first_attempt(),
                action.attempt_started(Duration::ZERO),
                "{policy:?}"
            );
            assert_ne!(policy.first_attempt(), Decision::StartNow);
            if let Decision::AwaitResponse { .. } = policy.first_attempt() {
                assert_eq!(policy.retry_may_follow_first(), action.retry_may_follow());
            }
            for status in [100, 200, 204, 301, 304, 400, 404, 429, 500, 503, 599] {
                let Decision::AwaitResponse { .. } = policy.first_attempt() else {
                    continue;
                };
                let mut action = Action::new(policy);
                action.attempt_started(Duration::ZERO);
                let at = Duration::from_millis(30);
                let decision = action.response(at, status, &RetryAfter::Missing, None);
                let effects = action.client_effects();
                match policy.ends_first_attempt(status) {
                    Some(outcome) => {
                        assert_eq!(decision, Decision::Stop(outcome), "{status} {policy:?}");
                        assert!(effects.hold_until.is_none() && !effects.withdraw);
                    }
                    None => assert!(policy.retries(status) || status == 429),
                }
            }
        }
    }
}
