//! A status that arrives after the answer has begun.
//!
//! The budget decides on a response's *head*. A protocol that sends its
//! status at the end of the answer (gRPC, whose `grpc-status` normally comes
//! in the trailers after the messages) can report a failure after the action
//! has stopped as `success` and the response has been handed to the caller.
//! Nothing can be retried any more (part of the answer was delivered), but the
//! report must not keep saying `success` for a call that failed:
//! [`Report::status_after_data`] is the one rule for that correction, so an
//! adapter only tells the core what arrived and when.

use std::time::Duration;

use crate::trail::{Event, EventKind};
use crate::{Outcome, Report};

impl Report {
    /// Tells the report that `status` (an HTTP status, or the HTTP
    /// equivalent of another protocol's status) arrived at elapsed `at`, after
    /// the response had been returned and part of its answer delivered.
    /// `from` is what the service actually sent, kept in the trail.
    ///
    /// The rule:
    ///
    /// * only a `success` report changes, and only for a status that is not
    ///   itself a success (outside 200–399): the outcome becomes
    ///   `not_retryable` (an answer under way is never retried, whatever the
    ///   status), `last_status` becomes `status`, and an
    ///   [`EventKind::StatusAfterData`] event is appended at `at` (never
    ///   before the last event already in the trail);
    /// * the timing fields (`elapsed`, `request_s`, `starts`, ...) keep
    ///   describing the action up to the response head: the event's `at` says
    ///   when the late status arrived;
    /// * anything else (an action that already ended otherwise, a success
    ///   status, a report already corrected) changes nothing.
    ///
    /// Returns whether the report changed.
    ///
    /// For example, a gRPC answer whose final `grpc-status`, in the trailers
    /// after its messages, is not OK:
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Outcome, Policy, trail::EventKind, retry_after::RetryAfter};
    ///
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// action.response(Duration::from_millis(300), 200, &RetryAfter::Missing, None);
    /// let mut report = action.into_report().unwrap();
    /// assert_eq!(report.outcome, Outcome::Success);
    ///
    /// // The stream ends, 2 s later, with RESOURCE_EXHAUSTED (429) in its trailers.
    /// let changed = report.status_after_data(Duration::from_millis(2300), 429, "grpc-status 8 (RESOURCE_EXHAUSTED)");
    /// assert!(changed);
    /// assert_eq!(report.outcome, Outcome::NotRetryable);
    /// assert_eq!(report.last_status, Some(429));
    /// assert!(matches!(report.events.last().unwrap().kind, EventKind::StatusAfterData { status: 429, .. }));
    /// assert!(report.to_string().starts_with(
    ///     "Failed after the answer began: the service ended it with an error status (not retried once an answer has begun)."
    /// ));
    /// ```
    pub fn status_after_data(
        &mut self,
        at: Duration,
        status: u16,
        from: impl Into<String>,
    ) -> bool {
        if self.outcome != Outcome::Success || Outcome::of_final_status(status) == Outcome::Success
        {
            return false;
        }
        let (last_at, budget_end) = self
            .events
            .last()
            .map_or((Duration::ZERO, Duration::ZERO), |e| {
                (e.at, e.at.saturating_add(e.remaining_budget))
            });
        let at = at.max(last_at);
        self.events.push(Event {
            at,
            remaining_budget: budget_end.saturating_sub(at),
            kind: EventKind::StatusAfterData {
                attempt: self.attempts_started,
                status,
                from: from.into(),
            },
        });
        self.outcome = Outcome::NotRetryable;
        self.last_status = Some(status);
        true
    }

    /// Whether the report was corrected by [`Report::status_after_data`].
    pub(crate) fn failed_after_data(&self) -> bool {
        self.outcome == Outcome::NotRetryable
            && self
                .events
                .last()
                .is_some_and(|e| matches!(e.kind, EventKind::StatusAfterData { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{retry_after::RetryAfter, Action, Policy};

    fn ended(status: u16) -> Report {
        let mut action = Action::new(Policy::default());
        action.attempt_started(Duration::ZERO);
        action.response(Duration::from_secs(1), status, &RetryAfter::Missing, None);
        action.into_report().unwrap()
    }

    #[test]
    fn a_success_becomes_not_retryable_with_the_late_status() {
        let mut report = ended(200);
        assert!(report.status_after_data(
            Duration::from_secs(5),
            503,
            "grpc-status 14 (UNAVAILABLE)"
        ));
        assert_eq!(report.outcome, Outcome::NotRetryable);
        assert_eq!(report.last_status, Some(503));
        let last = report.events.last().unwrap();
        assert_eq!(last.at, Duration::from_secs(5));
        // Default budget 20 s.
        assert_eq!(last.remaining_budget, Duration::from_secs(15));
        assert_eq!(
            last.kind,
            EventKind::StatusAfterData {
                attempt: 1,
                status: 503,
                from: "grpc-status 14 (UNAVAILABLE)".into()
            }
        );
        // The timing fields still describe the action up to the head.
        assert_eq!(report.elapsed, Duration::from_secs(1));
        assert_eq!(report.category(), Some(crate::Category::ServerError));
        assert!(
            report
                .to_string()
                .contains("Last response: 503. Attempts: 1 / 3. Elapsed: 1 s."),
            "{report}"
        );
    }

    #[test]
    fn a_late_success_status_or_a_report_that_is_not_a_success_changes_nothing() {
        let mut report = ended(200);
        let before = report.clone();
        assert!(!report.status_after_data(Duration::from_secs(5), 200, "grpc-status 0"));
        assert_eq!(report, before);

        let mut report = ended(503);
        let before = report.clone();
        assert!(!report.status_after_data(Duration::from_secs(5), 429, "grpc-status 8"));
        assert_eq!(report, before);

        // Corrected once: a second late status changes nothing.
        let mut report = ended(200);
        assert!(report.status_after_data(Duration::from_secs(5), 429, "grpc-status 8"));
        let before = report.clone();
        assert!(!report.status_after_data(Duration::from_secs(6), 500, "grpc-status 13"));
        assert_eq!(report, before);
    }

    #[test]
    fn the_event_never_goes_back_in_time_and_past_the_budget_leaves_zero() {
        let mut report = ended(200);
        assert!(report.status_after_data(Duration::ZERO, 429, "x"));
        assert_eq!(report.events.last().unwrap().at, Duration::from_secs(1));

        let mut report = ended(200);
        assert!(report.status_after_data(Duration::MAX, 429, "x"));
        let last = report.events.last().unwrap();
        assert_eq!(last.at, Duration::MAX);
        assert_eq!(last.remaining_budget, Duration::ZERO);
    }
}
