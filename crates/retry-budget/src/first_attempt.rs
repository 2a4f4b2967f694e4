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

use std::time::{Duration, SystemTime};

use crate::trail::RetryAfterSeen;
use crate::trail_store::FirstFacts;
use crate::{Action, Decision, Outcome, Policy, Report, RetryAfter, Trail};

impl Policy {
    /// What a new action answers when its first attempt starts at elapsed
    /// zero: [`Decision::AwaitResponse`] with the attempt cap as deadline.
    /// (A policy with no room for a first attempt would answer
    /// [`Decision::Stop`], as the `Action` does; the builder refuses one, a
    /// cap over the budget or zero attempts, but an adapter obeys the
    /// answer rather than assume it.)
    #[inline]
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
    #[inline]
    pub const fn retry_may_follow_first(&self) -> bool {
        1 < self.max_attempts()
    }

    /// The outcome a first response with `status` ends the action with,
    /// whatever its time, its headers and the request: `Some` when the
    /// status is not one the policy retries and not a `429` (whose delay
    /// the client shares). `None`: the action must see the response.
    #[inline]
    pub const fn ends_first_attempt(&self, status: u16) -> Option<Outcome> {
        if self.retries(status) || status == 429 {
            None
        } else {
            Some(Outcome::of_final_status(status))
        }
    }

    /// The first response of an action whose first attempt started at
    /// elapsed zero with no [`Action`], when it ends the action
    /// ([`ends_first_attempt`](Self::ends_first_attempt)): what its report
    /// needs, kept small until asked for (see [`FirstAnswer::into_report`]).
    /// `None`: the action must see the response.
    pub fn first_answer(
        &self,
        at: Duration,
        status: u16,
        retry_after: &RetryAfter,
        calendar: Option<SystemTime>,
    ) -> Option<FirstAnswer> {
        let outcome = self.ends_first_attempt(status)?;
        Some(FirstAnswer {
            at,
            status,
            outcome,
            retry_after: RetryAfterSeen::at_receipt(retry_after, calendar),
        })
    }
}

/// A first response that ended an action started without an [`Action`]
/// (see [`Policy::first_answer`]); its report is built when asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstAnswer {
    pub(crate) at: Duration,
    pub(crate) status: u16,
    pub(crate) outcome: Outcome,
    pub(crate) retry_after: RetryAfterSeen,
}

impl FirstAnswer {
    /// How the action ended.
    pub const fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The report the action's [`Action`] would give: its first attempt
    /// started at zero, this response, the stop (written out when its
    /// trail is first read).
    pub fn into_report(self, policy: &Policy) -> Report {
        let (at, status, outcome) = (self.at, self.status, self.outcome);
        let events = Trail::first_answer(FirstFacts {
            answer: self,
            budget: policy.total_budget(),
            cap: policy.attempt_cap(),
        });
        Report {
            outcome,
            last_status: Some(status),
            attempts_started: 1,
            max_attempts: policy.max_attempts(),
            elapsed: at,
            request_time: at,
            wait_time: Duration::ZERO,
            server_requested_wait: None,
            attempt_cap: policy.attempt_cap(),
            events,
            shared_with: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

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
        // A caller's deadline shorter than the cap: the cap shrinks with it.
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
                    None => {
                        assert!(policy.retries(status) || status == 429);
                        // Only where the `Action` does more than stop as
                        // the status alone would say.
                        assert_ne!(
                            decision,
                            Decision::Stop(Outcome::of_final_status(status)),
                            "{status} {policy:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_first_answer_reports_as_the_action_does() {
        let s = Duration::from_secs;
        let calendar = UNIX_EPOCH + s(1_700_000_000);
        let values = [
            RetryAfter::Missing,
            RetryAfter::parse("5"),
            RetryAfter::parse("Tue, 14 Nov 2023 22:13:40 GMT"),
            RetryAfter::parse("soon"),
            RetryAfter::from_values([&b"3"[..], &b"7"[..]]),
        ];
        let times = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(30),
            s(4),
            s(45),
            Duration::MAX,
        ];
        for policy in policies() {
            let Decision::AwaitResponse { .. } = policy.first_attempt() else {
                continue;
            };
            for status in [100, 200, 204, 301, 404, 418, 429, 500, 503] {
                for value in &values {
                    for &at in &times {
                        for calendar in [None, Some(calendar)] {
                            let answer = policy.first_answer(at, status, value, calendar);
                            let mut action = Action::new(policy);
                            action.attempt_started(Duration::ZERO);
                            action.response(at, status, value, calendar);
                            match answer {
                                Some(answer) => {
                                    assert_eq!(Some(answer.outcome()), action.outcome());
                                    assert_eq!(
                                        Some(answer.into_report(&policy)),
                                        action.into_report(),
                                        "{status} {value:?} {at:?} {policy:?}"
                                    );
                                }
                                None => assert_eq!(policy.ends_first_attempt(status), None),
                            }
                        }
                    }
                }
            }
        }
    }
}
