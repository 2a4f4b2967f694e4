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

use crate::api_signals::{RetryAfterMs, ShouldRetry};
use crate::pace::QuotaNote;
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
    pub(crate) replayable: bool,
    /// What a response rarely tells, apart (none: nothing of it).
    pub(crate) more: Option<Box<More>>,
}

/// The parts of an [`Answer`] a response rarely has (a translated status,
/// a provider's `retry-after-ms` or `x-should-retry`, a used-up quota, a
/// service's own rate limit, quota fields set aside), kept apart so that
/// the usual answer is small and carries none of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct More {
    pub(crate) translated_from: Option<String>,
    pub(crate) retry_after_ms: Option<RetryAfterMs>,
    pub(crate) should_retry: Option<ShouldRetry>,
    pub(crate) quota: Option<Box<str>>,
    pub(crate) rate_limited: Option<Box<str>>,
    pub(crate) quota_notes: Option<Box<[QuotaNote]>>,
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
            replayable: true,
            more: None,
        }
    }

    /// The quota fields read for pacing that were set aside or clamped
    /// ([`QuotaReading::notes`](crate::pace::QuotaReading::notes)): the
    /// trail says so, after the response, at most
    /// [`MAX_QUOTA_NOTES`](crate::pace::MAX_QUOTA_NOTES) of them. Any
    /// status; no decision changes.
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::pace::QuotaReader;
    /// use retry_budget::retry_after::RetryAfter;
    /// use retry_budget::trail::EventKind;
    /// use retry_budget::{Action, Answer, Policy};
    /// let reading = QuotaReader::new().read([("x-ratelimit-remaining", &b"-3"[..])], None);
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let missing = RetryAfter::Missing;
    /// action.respond(Duration::ZERO, Answer::new(200, &missing).quota_notes(reading.notes));
    /// assert!(matches!(action.events()[2].kind, EventKind::QuotaField { .. }));
    /// ```
    #[inline]
    pub fn quota_notes(mut self, notes: Vec<QuotaNote>) -> Self {
        let notes = (!notes.is_empty()).then(|| notes.into_boxed_slice());
        if notes.is_some() || self.more.is_some() {
            self.more().quota_notes = notes;
        }
        self
    }

    /// The rare parts, made if need be.
    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    /// The response says it is a transient rate limit of the service's
    /// own kind (`kind`: OpenRouter's `402` `in_flight_budget_exhausted`).
    /// When the policy retries `429` and the response carries a delay
    /// (`Retry-After` or `retry-after-ms`), the core retries it as a `429`
    /// (its category `rate_limit`), the trail saying so; without a delay
    /// it is the status it is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::retry_after::RetryAfter;
    /// use retry_budget::{Action, Answer, Decision, Outcome, Policy};
    ///
    /// let one = RetryAfter::parse("1");
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let answer = Answer::new(402, &one).rate_limited("in_flight_budget_exhausted");
    /// assert_eq!(action.respond(Duration::ZERO, answer), Decision::WaitUntil(Duration::from_secs(1)));
    ///
    /// let missing = RetryAfter::Missing;
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let answer = Answer::new(402, &missing).rate_limited("in_flight_budget_exhausted");
    /// assert_eq!(action.respond(Duration::ZERO, answer), Decision::Stop(Outcome::NotRetryable));
    /// ```
    #[inline]
    pub fn rate_limited(mut self, kind: impl Into<Box<str>>) -> Self {
        self.more().rate_limited = Some(kind.into());
        self
    }

    /// The response's `retry-after-ms` values (see [`RetryAfterMs`]):
    /// counted with `Retry-After` as one repeated field, the longest valid
    /// wait counting. Read only if the status is one the policy retries
    /// (or a `429`, for the shared hold-off), as `Retry-After` is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::api_signals::RetryAfterMs;
    /// use retry_budget::retry_after::RetryAfter;
    /// use retry_budget::{Action, Answer, Decision, Policy};
    ///
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let two = RetryAfter::parse("2");
    /// let answer = Answer::new(429, &two)
    ///     .retry_after_ms(RetryAfterMs::parse("2500"));
    /// // 2.5 s, never the shorter 2 s.
    /// assert_eq!(
    ///     action.respond(Duration::from_secs(1), answer),
    ///     Decision::WaitUntil(Duration::from_millis(3500))
    /// );
    /// ```
    #[inline]
    pub fn retry_after_ms(mut self, values: RetryAfterMs) -> Self {
        let values = (!values.is_empty()).then_some(values);
        if values.is_some() || self.more.is_some() {
            self.more().retry_after_ms = values;
        }
        self
    }

    /// The server's explicit word on retrying this response (see
    /// [`ShouldRetry`]): `false` forbids the retry of a status the policy
    /// retries, as [`forbidden`](Self::forbidden) does, with the header
    /// named in the trail; `true` changes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::api_signals::ShouldRetry;
    /// use retry_budget::retry_after::RetryAfter;
    /// use retry_budget::{Action, Answer, Decision, Outcome, Policy};
    ///
    /// let missing = RetryAfter::Missing;
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let answer = Answer::new(429, &missing).should_retry(ShouldRetry::parse("x-should-retry", b"false"));
    /// assert_eq!(action.respond(Duration::from_secs(1), answer), Decision::Stop(Outcome::NotRetryable));
    ///
    /// // `true` never makes a status the policy does not retry retryable.
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let answer = Answer::new(500, &missing).should_retry(ShouldRetry::parse("x-should-retry", b"true"));
    /// assert_eq!(action.respond(Duration::from_secs(1), answer), Decision::Stop(Outcome::NotRetryable));
    /// ```
    #[inline]
    pub fn should_retry(mut self, word: ShouldRetry) -> Self {
        self.more().should_retry = Some(word);
        self
    }

    /// The response says the account's quota is used up (`code`, as the
    /// service named it: OpenAI's `insufficient_quota`), although its
    /// status is one the policy retries (OpenAI sends it as `429`): a retry
    /// can never succeed. The action stops as
    /// [`Outcome::NotRetryable`](crate::Outcome::NotRetryable), its
    /// report's [category](crate::Report::category) is
    /// [`Quota`](crate::Category::Quota), and the trail records
    /// [`EventKind::QuotaExhausted`](crate::trail::EventKind::QuotaExhausted).
    /// Checked right after the status, before a forbidden retry.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::retry_after::RetryAfter;
    /// use retry_budget::{Action, Answer, Category, Decision, Outcome, Policy};
    ///
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// let one = RetryAfter::parse("1");
    /// let answer = Answer::new(429, &one).quota("insufficient_quota");
    /// assert_eq!(action.respond(Duration::from_secs(1), answer), Decision::Stop(Outcome::NotRetryable));
    /// assert_eq!(action.report().unwrap().category(), Some(Category::Quota));
    /// ```
    #[inline]
    pub fn quota(mut self, code: impl Into<Box<str>>) -> Self {
        self.more().quota = Some(code.into());
        self
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
        self.more().translated_from = Some(from.into());
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
