//! The report of a finished action: what the caller is told.
//!
//! The last HTTP response and the outcome of the action are kept apart: a
//! `429` can end a `budget_exhausted` action, a `200` a `success`, and no
//! response at all an `attempt_timeout`. The visible status line
//! ([`Display`](std::fmt::Display)) says what happened without claiming that
//! the service recovered or failed for good.
//!
//! Its lines, in order: the headline (the outcome); the last response,
//! attempts and elapsed time; what the service asked when no retry followed
//! it; then, for every ending but `success`, the [`Category`] with its human
//! hint (`Category: rate_limit. ...`); and, if the result was shared by
//! identical requests (single flight), how many received it.

use std::fmt;
use std::time::Duration;

use crate::pace::PaceReason;
use crate::policy::Secs;
use crate::trail::{EventKind, ResetRead, RetryAfterSeen, Trail};
use crate::{Category, Outcome};

/// What happened to one action.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// How the action ended.
    pub outcome: Outcome,
    /// The last HTTP status received, if any.
    pub last_status: Option<u16>,
    /// Attempts started.
    pub attempts_started: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Elapsed time at the stop, since the first attempt's start.
    pub elapsed: Duration,
    /// Total time with a request in flight.
    pub request_time: Duration,
    /// Total time actually spent waiting between attempts.
    pub wait_time: Duration,
    /// The delay the last response asked for, before the local floor and
    /// any spread: its `Retry-After` (the longest valid value), or a reset
    /// header if that asked longer. `None` if the last response gave no
    /// usable one, was not a status the policy retries, or asked for a
    /// date that no trusted calendar could measure, whatever the outcome.
    pub server_requested_wait: Option<Duration>,
    /// The per-attempt cap in force.
    pub attempt_cap: Duration,
    /// The full trail.
    pub events: Trail,
    /// How many other callers received this same result because their
    /// identical requests were coalesced with this one (single flight);
    /// 0 when the result was not shared.
    pub shared_with: u32,
}

impl Report {
    /// The start of every attempt, read off the trail.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy, retry_after::RetryAfter};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(s(0));
    /// action.response(s(1), 429, &RetryAfter::Seconds(s(2)), None);
    /// action.timer_woke(s(3));
    /// action.attempt_started(s(3));
    /// action.response(s(4), 200, &RetryAfter::Missing, None);
    /// let report = action.into_report().unwrap();
    /// assert_eq!(report.starts(), [s(0), s(3)]);
    /// assert_eq!(report.waits(), [(s(1), s(3))]);
    /// ```
    pub fn starts(&self) -> Vec<Duration> {
        self.events
            .iter()
            .filter(|event| matches!(event.kind, EventKind::AttemptStarted { .. }))
            .map(|event| event.at)
            .collect()
    }

    /// Every wait actually spent, as `(from, to)`, read off the trail (a
    /// wait the caller left during ends where it left).
    pub fn waits(&self) -> Vec<(Duration, Duration)> {
        self.events
            .iter()
            .filter_map(|event| match event.kind {
                EventKind::Woke { waited_from, .. }
                | EventKind::CallerLeft {
                    waited_from: Some(waited_from),
                } => Some((waited_from, event.at)),
                _ => None,
            })
            .collect()
    }

    /// The visible status as one string (the same text as `Display`).
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// For a [`held_off`](Outcome::HeldOff) action: how long the service's
    /// hold-off still ran when the action stopped (its end, from the trail,
    /// minus the elapsed time). `None` for any other ending. What a proxy
    /// passes on to its own caller as a `Retry-After`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Outcome, Policy};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default());
    /// // The service asked the client to wait 30 s: the default 20 s budget
    /// // cannot hold the first attempt after that, nothing is sent.
    /// action.hold_off(s(0), s(30));
    /// let report = action.into_report().unwrap();
    /// assert_eq!(report.outcome, Outcome::HeldOff);
    /// assert_eq!(report.held_off_left(), Some(s(30)));
    /// ```
    pub fn held_off_left(&self) -> Option<Duration> {
        if self.outcome != Outcome::HeldOff {
            return None;
        }
        let until = self.events.iter().rev().find_map(|e| match e.kind {
            EventKind::HeldOff { until } => Some(until),
            _ => None,
        })?;
        Some(until.saturating_sub(self.elapsed))
    }

    /// For an action [paced](crate::Action::pace) before its first
    /// attempt (whether it then waited or stopped as
    /// [`paced`](Outcome::Paced)): the limit that paced it (which, what was
    /// left, when it resets).
    pub fn paced(&self) -> Option<&PaceReason> {
        self.paced_by().map(|(_, _, reason)| reason)
    }

    /// For a [`paced`](Outcome::Paced) action: how long the quota still
    /// left no start when the action stopped. `None` for any other ending.
    /// What a proxy passes on to its own caller as a `Retry-After`.
    pub fn paced_left(&self) -> Option<Duration> {
        if self.outcome != Outcome::Paced {
            return None;
        }
        let (_, until, _) = self.paced_by()?;
        Some(until.saturating_sub(self.elapsed))
    }

    /// The pace event: when, until when, and why.
    fn paced_by(&self) -> Option<(Duration, Duration, &PaceReason)> {
        self.events
            .iter()
            .rev()
            .find_map(|event| match &event.kind {
                EventKind::Paced { until, reason } => Some((event.at, *until, reason)),
                _ => None,
            })
    }

    /// The category of the ending: `None` for `success` (and for the
    /// model's `invalid_data`), otherwise what kind of failure or ending it
    /// was, from the outcome and the last status. A `held_off` action sent
    /// nothing, but the service had asked the client to wait: `rate_limit`.
    /// A retried status that said the quota is used up
    /// ([`Answer::quota`](crate::Answer::quota)): `quota`.
    pub fn category(&self) -> Option<Category> {
        match self.outcome {
            Outcome::Success | Outcome::InvalidData => None,
            Outcome::Cancelled => Some(Category::Cancelled),
            Outcome::AttemptTimeout => Some(Category::Timeout),
            Outcome::TransportError => Some(Category::Transport),
            Outcome::HeldOff if self.quota_code().is_some() => Some(Category::Quota),
            Outcome::HeldOff | Outcome::Paced => Some(Category::RateLimit),
            Outcome::NotRetryable if self.quota_code().is_some() => Some(Category::Quota),
            Outcome::NotRetryable
            | Outcome::BudgetExhausted
            | Outcome::AttemptsExhausted
            | Outcome::ClockUntrusted
            | Outcome::RetryThrottled
            | Outcome::NotReplayable => self.last_status.and_then(Category::of_status),
        }
    }

    /// The quota code of the last response, if it said the quota is used
    /// up ([`EventKind::QuotaExhausted`], just before the stop).
    fn quota_code(&self) -> Option<&str> {
        self.events
            .iter()
            .rev()
            .take(2)
            .find_map(|event| match &event.kind {
                EventKind::QuotaExhausted { code, .. } => Some(&**code),
                _ => None,
            })
    }

    /// The report as JSON, with the visible status under `message` and the
    /// category (or `null`) under `category`. Needs the `serde` feature.
    #[cfg(feature = "serde")]
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "category".into(),
                serde_json::to_value(self.category()).unwrap_or_default(),
            );
            map.insert("message".into(), self.message().into());
        }
        value
    }

    fn headline(&self) -> String {
        let attempt = self.attempts_started;
        match self.outcome {
            Outcome::Success => "Finished: the service answered.".into(),
            Outcome::NotRetryable if self.failed_after_data() => "Failed after the answer began: the service ended it with an error status (not retried once an answer has begun).".into(),
            Outcome::NotRetryable if self.quota_code().is_some() => format!(
                "Stopped: the service says the quota is used up ({}); retrying will not help.",
                self.quota_code().unwrap_or_default()
            ),
            Outcome::NotRetryable if self.retry_was_forbidden() => "Stopped: the service asked not to retry this request.".into(),
            Outcome::NotRetryable if self.was_not_repeatable() => "Stopped: the request is sent once: its method is not safe to repeat, and nothing marked it repeatable (an Idempotency-Key that every copy keeps, marked idempotent).".into(),
            Outcome::NotRetryable => "Stopped: the response is not one this policy retries.".into(),
            Outcome::BudgetExhausted => "Stopped: the retry budget cannot fit the next request.".into(),
            Outcome::AttemptsExhausted if self.max_attempts == 1 => {
                "Stopped: the one attempt allowed was used (retries are off).".into()
            }
            Outcome::AttemptsExhausted => format!(
                "Stopped: all {} attempts allowed were used.",
                self.max_attempts
            ),
            Outcome::Cancelled => "Cancelled: the caller left; no further request is sent.".into(),
            Outcome::ClockUntrusted => "Stopped: the service asked to wait until a date, and no trusted clock can measure it.".into(),
            Outcome::AttemptTimeout => format!(
                "Stopped: attempt {attempt} ran past its {} limit and was abandoned.",
                Secs(self.attempt_cap)
            ),
            Outcome::TransportError => format!(
                "Stopped: attempt {attempt} failed before any response arrived."
            ),
            Outcome::RetryThrottled => "Stopped: the client's shared retry budget refused the next request.".into(),
            Outcome::NotReplayable => "Stopped: the request body is larger than the replay limit, so it cannot be sent again.".into(),
            Outcome::HeldOff => "Stopped: the service asked this client to wait longer than the budget allows; nothing was sent.".into(),
            Outcome::Paced => "Stopped: the quota the service announced leaves no start before the budget runs out; nothing was sent.".into(),
            Outcome::InvalidData => "Stopped: the given data cannot be replayed.".into(),
        }
    }

    /// When the body of the response this action ended with must have been
    /// read by, as elapsed time since the action's start: the reservation
    /// end of the last attempt started (the one that produced the
    /// response), never past the total budget.
    ///
    /// The action includes its final body: a body that dribbles or never
    /// ends must not outlive the attempt that produced it. This is the one
    /// place that rule lives; a caller reading the body maps this elapsed
    /// time onto its clock. Without any attempt started, no body came from
    /// the service, and the answer is the stop's elapsed time (nothing is
    /// left to read).
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy, retry_after::RetryAfter};
    ///
    /// let secs = Duration::from_secs;
    /// let policy = Policy::builder()
    ///     .total_budget(secs(10))
    ///     .attempt_cap(secs(2))
    ///     .build()
    ///     .unwrap();
    /// let mut action = Action::new(policy);
    /// action.attempt_started(secs(0));
    /// action.response(secs(1), 429, &RetryAfter::Seconds(secs(1)), None);
    /// action.timer_woke(secs(2));
    /// action.attempt_started(secs(2));
    /// action.response(secs(3), 200, &RetryAfter::Missing, None);
    /// let report = action.report().unwrap();
    /// // The second attempt started at 2 s with a 2 s cap.
    /// assert_eq!(report.body_deadline(), secs(4));
    /// ```
    pub fn body_deadline(&self) -> Duration {
        self.events
            .iter()
            .rev()
            .find_map(|event| match event.kind {
                // An attempt starts only inside the budget, so there
                // `at + remaining_budget` is the total budget.
                EventKind::AttemptStarted {
                    reservation_end, ..
                } => Some(reservation_end.min(event.at.saturating_add(event.remaining_budget))),
                _ => None,
            })
            .unwrap_or(self.elapsed)
    }

    /// Whether the last response came with the server forbidding a retry.
    fn retry_was_forbidden(&self) -> bool {
        self.events
            .iter()
            .rev()
            .take(2)
            .any(|event| matches!(event.kind, EventKind::RetryForbidden { .. }))
    }

    /// Whether the last response would have been retried but the request
    /// must not be sent twice.
    fn was_not_repeatable(&self) -> bool {
        self.events
            .iter()
            .rev()
            .take(2)
            .any(|event| matches!(event.kind, EventKind::NotRepeatable { .. }))
    }

    /// The last response's `Retry-After`, if no attempt followed it.
    fn unanswered_retry_after(&self) -> Option<&RetryAfterSeen> {
        for event in self.events.iter().rev() {
            match &event.kind {
                EventKind::AttemptStarted { .. } => return None,
                EventKind::Response { retry_after, .. } => return Some(retry_after),
                _ => {}
            }
        }
        None
    }

    /// The reset header whose wait counted in the last response, if no
    /// attempt followed it: its name and wait.
    fn unanswered_reset_header(&self) -> Option<(&str, Duration)> {
        for event in self.events.iter().rev() {
            match &event.kind {
                EventKind::AttemptStarted { .. } | EventKind::Response { .. } => return None,
                EventKind::ResetHeader {
                    header,
                    reading: ResetRead::Wait { wait, used: true },
                    ..
                } => return Some((header, *wait)),
                EventKind::RetryAfterMs {
                    reading: ResetRead::Wait { wait, used: true },
                    ..
                } => return Some((crate::api_signals::RETRY_AFTER_MS, *wait)),
                _ => {}
            }
        }
        None
    }

    /// The hold-off this action could not honour, as the wait left at the
    /// stop.
    fn held_off_for(&self) -> Option<Duration> {
        self.events.iter().rev().find_map(|event| match event.kind {
            EventKind::HeldOff { until } => Some(until.saturating_sub(event.at)),
            _ => None,
        })
    }

    fn lines_after_status(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Outcome::Paced, Some((at, until, reason))) = (self.outcome, self.paced_by()) {
            write!(
                f,
                "\nLimit {}: {} left (announced {}), resets in {}; no start before {} more.",
                reason.limit,
                reason.left,
                reason.announced,
                Secs(reason.resets_at.saturating_sub(at)),
                Secs(until.saturating_sub(at))
            )?;
        }
        if let Some(wait) = self.held_off_for() {
            write!(
                f,
                "\nAnother request to this service was told to wait {} more; this one was not sent.",
                Secs(wait)
            )?;
        }
        if let Some(category) = self.category() {
            write!(f, "\nCategory: {category}. {}", category.hint())?;
        }
        if self.shared_with > 0 {
            write!(
                f,
                "\nShared: {} identical requests received this one result.",
                u64::from(self.shared_with) + 1
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.headline())?;
        match self.last_status {
            Some(status) => write!(f, "Last response: {status}. ")?,
            None => write!(f, "Last response: none. ")?,
        }
        write!(
            f,
            "Attempts: {} / {}. Elapsed: {}.",
            self.attempts_started,
            self.max_attempts,
            Secs(self.elapsed)
        )?;
        let retried_status = matches!(
            self.outcome,
            Outcome::BudgetExhausted
                | Outcome::AttemptsExhausted
                | Outcome::ClockUntrusted
                | Outcome::Cancelled
                | Outcome::RetryThrottled
                | Outcome::NotReplayable
        );
        if !retried_status || self.last_status.is_none() {
            return self.lines_after_status(f);
        }
        if let Some((header, wait)) = self.unanswered_reset_header() {
            write!(
                f,
                "\nThe service asked to wait {} (its {header} header); no retry was sent.",
                Secs(wait)
            )?;
            return self.lines_after_status(f);
        }
        match self.unanswered_retry_after() {
            Some(RetryAfterSeen::Seconds { value }) => write!(
                f,
                "\nThe service asked to wait {}; no retry was sent.",
                Secs(*value)
            ),
            Some(RetryAfterSeen::Date { date }) => write!(
                f,
                "\nThe service asked to wait until {}; no retry was sent.",
                httpdate::fmt_http_date(*date)
            ),
            Some(RetryAfterSeen::Missing) => {
                write!(f, "\nThe service gave no Retry-After; no retry was sent.")
            }
            Some(RetryAfterSeen::Invalid { raw }) => write!(
                f,
                "\nThe service sent an unusable Retry-After ({raw}); no retry was sent."
            ),
            Some(RetryAfterSeen::Unmeasured { raw }) => write!(
                f,
                "\nThe service asked to wait until a date ({raw}) that no trusted clock can measure; no retry was sent."
            ),
            None => Ok(()),
        }?;
        self.lines_after_status(f)
    }
}

/// JSON field names and units as before the trail's starts and waits became
/// methods: `starts_s` and `waits_s` are read off the trail.
#[cfg(feature = "serde")]
impl serde::Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;

        let secs = Duration::as_secs_f64;
        let mut out = serializer.serialize_struct("Report", 13)?;
        out.serialize_field("outcome", &self.outcome)?;
        out.serialize_field("last_status", &self.last_status)?;
        out.serialize_field("attempts_started", &self.attempts_started)?;
        out.serialize_field("max_attempts", &self.max_attempts)?;
        out.serialize_field("elapsed_s", &secs(&self.elapsed))?;
        out.serialize_field("request_s", &secs(&self.request_time))?;
        out.serialize_field("wait_s", &secs(&self.wait_time))?;
        out.serialize_field(
            "server_requested_wait_s",
            &self.server_requested_wait.as_ref().map(secs),
        )?;
        out.serialize_field("attempt_cap_s", &secs(&self.attempt_cap))?;
        let starts: Vec<f64> = self.starts().iter().map(secs).collect();
        out.serialize_field("starts_s", &starts)?;
        let waits: Vec<[f64; 2]> = self
            .waits()
            .iter()
            .map(|(a, b)| [secs(a), secs(b)])
            .collect();
        out.serialize_field("waits_s", &waits)?;
        out.serialize_field("events", &self.events)?;
        out.serialize_field("shared_with", &self.shared_with)?;
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{retry_after::RetryAfter, Action, Policy};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn policy(budget: u64, cap: u64) -> Policy {
        Policy::builder()
            .total_budget(secs(budget))
            .attempt_cap(secs(cap))
            .build()
            .unwrap()
    }

    #[test]
    fn the_body_deadline_is_the_last_attempts_reservation_end() {
        let mut action = Action::new(policy(10, 2));
        let _ = action.attempt_started(secs(0));
        let _ = action.response(secs(1), 429, &RetryAfter::Seconds(secs(1)), None);
        let _ = action.timer_woke(secs(2));
        let _ = action.attempt_started(secs(2));
        let _ = action.response(secs(3), 200, &RetryAfter::Missing, None);
        let report = action.report().expect("the action has ended");
        assert_eq!(report.body_deadline(), secs(4));
    }

    #[test]
    fn the_body_deadline_is_never_past_the_total_budget() {
        // The cap fills the whole budget: the reservation ends at the budget.
        let mut action = Action::new(policy(3, 3));
        let _ = action.attempt_started(secs(0));
        let _ = action.response(secs(1), 200, &RetryAfter::Missing, None);
        let report = action.report().expect("the action has ended");
        assert_eq!(report.body_deadline(), secs(3));
        // Cap and budget at their maximum: no overflow.
        let policy = Policy::builder()
            .total_budget(Duration::MAX)
            .attempt_cap(Duration::MAX)
            .build()
            .unwrap();
        let mut action = Action::new(policy);
        let _ = action.attempt_started(Duration::ZERO);
        let _ = action.response(secs(1), 200, &RetryAfter::Missing, None);
        let report = action.report().expect("the action has ended");
        assert_eq!(report.body_deadline(), Duration::MAX);
    }

    #[test]
    fn without_an_attempt_the_body_deadline_is_the_stop() {
        let mut action = Action::new(policy(10, 2));
        let _ = action.caller_left(secs(0));
        let report = action.report().expect("the action has ended");
        assert_eq!(report.starts(), Vec::<Duration>::new());
        assert_eq!(report.body_deadline(), report.elapsed);
    }
}
