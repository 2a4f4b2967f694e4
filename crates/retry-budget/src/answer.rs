//! [`Answer`]: what one response tells an [`Action`](crate::Action).
//!
//! An adapter reads a response once (its status, its `Retry-After`, the
//! calendar reading if a date needs one, the reset headers it was asked to
//! read, whether the server forbade a retry, where a translated status came
//! from, whether the request can still be sent again in full) and gives it
//! all in one call, [`Action::respond`](crate::Action::respond): nothing
//! has to be told "before" the response, and nothing told for one response
//! can leak into the next.

use std::time::SystemTime;

use crate::{reset::ResetHeaders, retry_after::RetryAfter};

/// Everything one response tells the action; see
/// [`Action::respond`](crate::Action::respond). Built with
/// [`Answer::new`] (a status and its `Retry-After`) and the setters for
/// the rest, each of which defaults to "nothing more".
///
/// ```
/// use std::time::Duration;
/// use retry_budget::{Action, Answer, Decision, Outcome, Policy, reset::{ResetFormat, ResetHeaders}, retry_after::RetryAfter};
///
/// let s = Duration::from_secs;
/// let missing = RetryAfter::Missing;
///
/// // No Retry-After, but a reset header: its 5 s instead of the 2 s fallback.
/// let mut action = Action::new(Policy::default());
/// action.attempt_started(s(0));
/// let mut resets = ResetHeaders::new(None);
/// resets.push("ratelimit-reset", ResetFormat::Seconds, b"5");
/// let next = action.respond(s(1), Answer::new(429, &missing).resets(resets));
/// assert_eq!(next, Decision::WaitUntil(s(6)));
///
/// // The server forbids the retry (gRPC: a negative pushback).
/// let mut action = Action::new(Policy::default());
/// action.attempt_started(s(0));
/// let next = action.respond(s(1), Answer::new(429, &missing).forbidden(true));
/// assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
///
/// // The request's body went over its replay limit: it cannot be sent again.
/// let mut action = Action::new(Policy::default());
/// action.attempt_started(s(0));
/// let next = action.respond(s(1), Answer::new(429, &RetryAfter::parse("1")).replayable(false));
/// assert_eq!(next, Decision::Stop(Outcome::NotReplayable));
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Answer<'a> {
    pub(crate) status: u16,
    pub(crate) retry_after: &'a RetryAfter,
    pub(crate) calendar: Option<SystemTime>,
    pub(crate) resets: Option<ResetHeaders>,
    pub(crate) forbidden: bool,
    pub(crate) translated_from: Option<String>,
    pub(crate) replayable: bool,
}

impl<'a> Answer<'a> {
    /// A response with this status and `Retry-After`, and nothing more: no
    /// calendar reading, no reset headers, a retry not forbidden, not
    /// translated, the request replayable.
    #[inline]
    pub const fn new(status: u16, retry_after: &'a RetryAfter) -> Self {
        Self {
            status,
            retry_after,
            calendar: None,
            resets: None,
            forbidden: false,
            translated_from: None,
            replayable: true,
        }
    }

    /// The trusted calendar time at receipt (`None`, the default, when there
    /// is none): used only to turn an HTTP-date (or a Unix-time or RFC 3339
    /// reset header) into a wait, once.
    #[inline]
    pub const fn calendar(mut self, calendar: Option<SystemTime>) -> Self {
        self.calendar = calendar;
        self
    }

    /// The rate-limit reset headers of this response, raw (see
    /// [`ResetHeaders`] for the rule). Read only if the status is one the
    /// policy retries.
    #[inline]
    pub fn resets(mut self, resets: ResetHeaders) -> Self {
        self.resets = (!resets.is_empty()).then_some(resets);
        self
    }

    /// Whether the server has forbidden a retry of this response (gRPC: a
    /// `grpc-retry-pushback-ms` that is negative or malformed, gRFC A6). If
    /// the status is one the policy retries, the action stops as
    /// [`Outcome::NotRetryable`](crate::Outcome::NotRetryable) (with an
    /// [`EventKind::RetryForbidden`](crate::trail::EventKind::RetryForbidden) in
    /// the trail), right after the status check and before the
    /// attempts-left check.
    #[inline]
    pub const fn forbidden(mut self, forbidden: bool) -> Self {
        self.forbidden = forbidden;
        self
    }

    /// The adapter translated this response from another protocol's signal
    /// (gRPC: `grpc-status: 8` told as `429`); `from` says what the service
    /// actually sent. Recorded in the trail just before the response
    /// ([`EventKind::Translated`](crate::trail::EventKind::Translated)); changes
    /// no decision.
    #[inline]
    pub fn translated_from(mut self, from: impl Into<String>) -> Self {
        self.translated_from = Some(from.into());
        self
    }

    /// Whether the request can still be sent again in full (`true`, the
    /// default). When it cannot (its body went over a replay limit), a
    /// retried status stops the action as
    /// [`Outcome::NotReplayable`](crate::Outcome::NotReplayable), after the
    /// status and attempts-left checks and before any wait is planned.
    #[inline]
    pub const fn replayable(mut self, replayable: bool) -> Self {
        self.replayable = replayable;
        self
    }
}
