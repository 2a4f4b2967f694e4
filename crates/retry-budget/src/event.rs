//! The events of the trail: one [`Event`] for every step of an action, what
//! happened ([`EventKind`]) and why a wait is as long as it is
//! ([`WaitBasis`]). Public as [`crate::trail`]; where the events are kept is
//! [`Trail`](crate::trail::Trail)'s job.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::pace::{PaceReason, QuotaIgnored};
use crate::policy::Secs;
use crate::retry_after::Asked;
use crate::{
    reset::{ResetFormat, ResetIgnored},
    retry_after::RetryAfter,
    Outcome,
};

/// One step of an action.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Event {
    /// Elapsed time since the action's first start.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "at_s", serialize_with = "crate::secs::ser")
    )]
    pub at: Duration,
    /// The budget left at `at` (`total_budget - at`, never negative).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "remaining_budget_s", serialize_with = "crate::secs::ser")
    )]
    pub remaining_budget: Duration,
    /// What happened.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub kind: EventKind,
}

/// What happened at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum EventKind {
    /// An attempt was sent; its full cap is reserved up to `reservation_end`.
    AttemptStarted {
        /// 1-based attempt number.
        attempt: u32,
        /// The attempt's deadline, `at + cap`.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "reservation_end_s", serialize_with = "crate::secs::ser")
        )]
        reservation_end: Duration,
    },
    /// A response arrived.
    Response {
        /// 1-based attempt number.
        attempt: u32,
        /// Its HTTP status.
        status: u16,
        /// The `Retry-After` it carried.
        retry_after: RetryAfterSeen,
    },
    /// A wait was planned (the next attempt fits).
    WaitPlanned {
        /// How long, from `at`.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "wait_s", serialize_with = "crate::secs::ser")
        )]
        wait: Duration,
        /// The earliest next start.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "until_s", serialize_with = "crate::secs::ser")
        )]
        until: Duration,
        /// Where the next attempt's reservation would end.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "reservation_end_s", serialize_with = "crate::secs::ser")
        )]
        reservation_end: Duration,
        /// Why this long.
        basis: WaitBasis,
    },
    /// The timer fired; the wait actually spent ran from `waited_from` to `at`.
    Woke {
        /// When the wait began.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "waited_from_s", serialize_with = "crate::secs::ser")
        )]
        waited_from: Duration,
        /// How late the timer fired compared with the plan.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "late_by_s", serialize_with = "crate::secs::ser")
        )]
        late_by: Duration,
    },
    /// The caller left. If it left during a wait, the wait actually spent ran
    /// from `waited_from` to `at`.
    CallerLeft {
        /// When the interrupted wait began, if one was interrupted.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "waited_from_s", serialize_with = "crate::secs::ser_opt")
        )]
        waited_from: Option<Duration>,
    },
    /// The attempt ran past its cap and was abandoned.
    AttemptTimedOut {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// The transport failed before a response arrived.
    TransportFailed {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// The client's shared retry budget refused the retry just planned: the
    /// wait is abandoned at once.
    RetryRefused {
        /// The 1-based number of the attempt that will not be sent.
        attempt: u32,
    },
    /// Before its first attempt, the action learnt that the service asked
    /// the client to wait until `until` (elapsed), and the first attempt's
    /// reservation would not fit after that: nothing is sent.
    HeldOff {
        /// When the service's hold-off ends.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "until_s", serialize_with = "crate::secs::ser")
        )]
        until: Duration,
    },
    /// Before its first attempt, the action was paced: the quota the
    /// service announced leaves no start before `until` (elapsed). Followed
    /// by the wait ([`WaitBasis::Pace`]), or by the stop as
    /// [`Outcome::Paced`] when the first attempt's reservation would not fit
    /// after `until`: nothing is sent.
    Paced {
        /// The earliest start the quota allows.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "until_s", serialize_with = "crate::secs::ser")
        )]
        until: Duration,
        /// Which limit, what was left, when it resets.
        reason: PaceReason,
    },
    /// The server forbade retrying the response of this attempt (gRPC: a
    /// negative or malformed `grpc-retry-pushback-ms`), although its status
    /// is one the policy retries: the action stops as `not_retryable`.
    RetryForbidden {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// The response of this attempt has a status the policy retries, but
    /// the request must not be sent twice (a write that nothing marked as
    /// safe to repeat; [`Action::not_repeatable`](crate::Action::not_repeatable)):
    /// the action stops as `not_retryable`.
    NotRepeatable {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// The adapter translated this attempt's response from another
    /// protocol's signal before telling it to the action (gRPC:
    /// `grpc-status: 8` RESOURCE_EXHAUSTED as `429`, `grpc-retry-pushback-ms`
    /// as the server's delay). The next event is that response, as told.
    Translated {
        /// 1-based attempt number.
        attempt: u32,
        /// What the service actually sent, e.g.
        /// `grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000`.
        from: String,
    },
    /// A status that arrived after the response had been returned to the
    /// caller as a success, and after part of its answer (gRPC: a non-OK
    /// `grpc-status` in the trailers after messages). Nothing can be retried
    /// any more; the report is corrected by
    /// [`Report::status_after_data`](crate::Report::status_after_data).
    /// Recorded after the `stopped` event.
    StatusAfterData {
        /// 1-based number of the attempt whose answer failed.
        attempt: u32,
        /// The HTTP equivalent of the late status (gRPC RESOURCE_EXHAUSTED:
        /// `429`).
        status: u16,
        /// What the service actually sent, e.g. `grpc-status 13 (INTERNAL),
        /// no grpc-retry-pushback-ms`.
        from: String,
    },
    /// The response carried several `Retry-After` values (field lines, or
    /// a list in one line): the longest valid wait among them counts. Just
    /// after its [`Response`](EventKind::Response), which shows the value
    /// that counts.
    RetryAfterRepeated {
        /// 1-based attempt number.
        attempt: u32,
        /// How many values.
        values: u32,
        /// The values as received, joined with `, ` (shortened if long).
        raw: String,
    },
    /// A `Retry-After` date was accepted although it is not in one of the
    /// forms RFC 9110 requires: one of the documented near-misses (see
    /// [`HttpDate`](crate::http_date::HttpDate)). Just after its
    /// [`Response`](EventKind::Response).
    LenientDate {
        /// 1-based attempt number.
        attempt: u32,
        /// The date as received.
        raw: String,
        /// What was tolerated (`one-digit day, zone UTC`).
        tolerated: String,
    },
    /// A rate-limit reset header was read (opt-in; see
    /// [`ResetHeaders`](crate::reset::ResetHeaders)).
    ResetHeader {
        /// 1-based attempt number.
        attempt: u32,
        /// The header's name.
        header: Box<str>,
        /// How it was read.
        format: ResetFormat,
        /// The value as received (shortened if long).
        raw: Box<str>,
        /// What it said.
        #[cfg_attr(feature = "serde", serde(flatten))]
        reading: ResetRead,
    },
    /// A random spread drawn on top of the server's delay (see
    /// [`PolicyBuilder::spread`](crate::PolicyBuilder::spread)): the
    /// [`WaitPlanned`](EventKind::WaitPlanned) that follows waits the
    /// floored delay plus `extra`.
    Spread {
        /// 1-based attempt number of the response that asked.
        attempt: u32,
        /// The extra wait drawn, in `[0, spread]`.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "extra_s", serialize_with = "crate::secs::ser")
        )]
        extra: Duration,
    },
    /// A `retry-after-ms` value was read (see
    /// [`RetryAfterMs`](crate::api_signals::RetryAfterMs)): counted with `Retry-After`,
    /// the longest valid wait counting. Just after its
    /// [`Response`](EventKind::Response), one event per value.
    RetryAfterMs {
        /// 1-based attempt number.
        attempt: u32,
        /// The value as received (shortened if long).
        raw: Box<str>,
        /// What it said: a wait (`used` if it is the one that counted), or
        /// ignored as malformed.
        #[cfg_attr(feature = "serde", serde(flatten))]
        reading: ResetRead,
    },
    /// The server's explicit word on retrying (see
    /// [`ShouldRetry`](crate::api_signals::ShouldRetry)), read on a status the policy
    /// retries: `false` is followed by
    /// [`RetryForbidden`](EventKind::RetryForbidden); `true` or any other
    /// value changes nothing.
    ShouldRetry {
        /// 1-based attempt number.
        attempt: u32,
        /// The header (`x-should-retry`).
        header: Box<str>,
        /// The value as received (shortened if long).
        raw: Box<str>,
        /// `false`: do not retry; `true`: fine; `null`: neither word.
        says: Option<bool>,
    },
    /// The response says the quota is used up (OpenAI's
    /// `insufficient_quota`, sent as `429`): the action stops as
    /// `not_retryable`, with the category `quota`.
    QuotaExhausted {
        /// 1-based attempt number; 0 before any attempt: another request's
        /// answer said so, and the action was held
        /// ([`Action::quota_held`](crate::Action::quota_held)).
        attempt: u32,
        /// The code the service gave.
        code: Box<str>,
    },
    /// A quota field read for pacing (see
    /// [`QuotaReader`](crate::pace::QuotaReader)) was set aside or clamped:
    /// a response from a cache (`Age`), a malformed, negative, unknown or
    /// absurd value. Just after its [`Response`](EventKind::Response), at
    /// most [`MAX_QUOTA_NOTES`](crate::pace::MAX_QUOTA_NOTES) per
    /// response; changes no decision of the action's own.
    QuotaField {
        /// 1-based attempt number.
        attempt: u32,
        /// The header's name (lower case).
        header: Box<str>,
        /// The value as received (shortened if long).
        raw: Box<str>,
        /// What happened to it.
        why: QuotaIgnored,
    },
    /// The client's shared hold-off store (across processes, e.g. Redis)
    /// was unavailable when the action started: its hold-offs were read from
    /// this process's own map alone (holds from other processes may be
    /// missing). Recorded once, before the first attempt; changes no
    /// decision.
    SharedStoreUnavailable,
    /// The action stopped.
    Stopped {
        /// Why.
        outcome: Outcome,
    },
}

/// Why a wait is as long as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "source", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum WaitBasis {
    /// The server's delay, raised to the local floor if shorter (plus a
    /// [`EventKind::Spread`] just before, if any).
    Server {
        /// The delay the server asked for (for a date: date − calendar time
        /// at receipt, never negative).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "requested_s", serialize_with = "crate::secs::ser")
        )]
        requested: Duration,
    },
    /// No usable `Retry-After`: `base^completed` seconds (capped, if the
    /// policy caps the fallback).
    Fallback {
        /// Attempts completed so far.
        completed: u32,
    },
    /// No usable `Retry-After`: the fallback wait, spread by the policy's
    /// [`Jitter`](crate::Jitter).
    FallbackJittered {
        /// Attempts completed so far.
        completed: u32,
        /// The fallback wait before jitter.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "unjittered_s", serialize_with = "crate::secs::ser")
        )]
        unjittered: Duration,
    },
    /// Before the first attempt: another action to the same service was
    /// asked to wait (429 with `Retry-After`), and this one honours it.
    HoldOff,
    /// Before the first attempt: the quota the service announced leaves no
    /// start before then (the [`EventKind::Paced`] just before names the
    /// limit).
    Pace {
        /// What the pacer counted as left in the window.
        left: u64,
        /// When the window resets (elapsed).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "resets_at_s", serialize_with = "crate::secs::ser")
        )]
        resets_at: Duration,
    },
    /// The server's delay from a rate-limit reset header (no usable
    /// `Retry-After`, or a shorter one), raised to the local floor if
    /// shorter (plus a [`EventKind::Spread`] just before, if any). The
    /// [`EventKind::ResetHeader`] marked `used` names it.
    ResetHeader {
        /// The delay the header asked for.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "requested_s", serialize_with = "crate::secs::ser")
        )]
        requested: Duration,
    },
}

/// What a reset header said, as recorded in the trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "reading", rename_all = "snake_case"))]
pub enum ResetRead {
    /// A wait; `used` if it is the wait that counted (longer than any valid
    /// `Retry-After` and than the other reset headers).
    Wait {
        /// The wait from receipt.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "wait_s", serialize_with = "crate::secs::ser")
        )]
        wait: Duration,
        /// Whether this wait counted.
        used: bool,
    },
    /// Ignored.
    Ignored {
        /// Why.
        why: ResetIgnored,
    },
}

/// What the reading came to, in words (`asks 3 s, used`, `asks 3 s, not
/// used (a longer wait counts)`, `ignored: ...`), for a progress line or a
/// trace.
///
/// ```
/// use std::time::Duration;
/// use retry_budget::trail::ResetRead;
///
/// let read = ResetRead::Wait { wait: Duration::from_millis(2500), used: true };
/// assert_eq!(read.to_string(), "asks 2.5 s, used");
/// let read = ResetRead::Wait { wait: Duration::from_secs(1), used: false };
/// assert_eq!(read.to_string(), "asks 1 s, not used (a longer wait counts)");
/// ```
impl fmt::Display for ResetRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Wait { wait, used: true } => write!(f, "asks {}, used", Secs(*wait)),
            Self::Wait { wait, used: false } => {
                write!(f, "asks {}, not used (a longer wait counts)", Secs(*wait))
            }
            Self::Ignored { why } => write!(f, "ignored: {why}"),
        }
    }
}

/// The `Retry-After` of a response, as recorded in the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "form", rename_all = "snake_case"))]
pub enum RetryAfterSeen {
    /// No header.
    Missing,
    /// `delay-seconds`.
    Seconds {
        /// The delay.
        #[cfg_attr(
            feature = "serde",
            serde(rename = "value_s", serialize_with = "crate::secs::ser")
        )]
        value: Duration,
    },
    /// An HTTP-date (written back as IMF-fixdate).
    Date {
        /// The date.
        #[cfg_attr(feature = "serde", serde(serialize_with = "ser_date"))]
        date: SystemTime,
    },
    /// Not usable; the raw value is kept.
    Invalid {
        /// The raw value (shortened if long).
        raw: String,
    },
    /// A date that could not be turned into a wait: no trusted calendar
    /// reading at receipt to place an RFC 850 two-digit year, or to compare
    /// a date with the other values of a repeated field.
    Unmeasured {
        /// The raw value (shortened if long).
        raw: String,
    },
}

impl RetryAfterSeen {
    /// The header as the trail records it at receipt, given the calendar
    /// reading then: for several values, the one whose wait counts.
    pub fn at_receipt(value: &RetryAfter, calendar: Option<SystemTime>) -> Self {
        match value {
            RetryAfter::Missing => Self::Missing,
            RetryAfter::Seconds(value) => Self::Seconds { value: *value },
            RetryAfter::Date(date) => match date.placed(calendar) {
                Some(date) => Self::Date { date },
                None => Self::Unmeasured {
                    raw: date.raw().unwrap_or_default().to_owned(),
                },
            },
            // The raw text as received (cut and made valid UTF-8 by the
            // parser), not a quoted rendering of it.
            RetryAfter::Invalid(inv) => Self::Invalid {
                raw: inv.raw().to_owned(),
            },
            RetryAfter::Repeated(repeated) => match value.asked_with_value(calendar) {
                (Asked::Wait(_), Some(counted)) => Self::at_receipt(counted, calendar),
                (Asked::Unmeasurable, _) => Self::Unmeasured {
                    raw: repeated.raw().to_owned(),
                },
                _ => Self::Invalid {
                    raw: repeated.raw().to_owned(),
                },
            },
        }
    }
}

/// One rendering of a `Retry-After` for people and logs, for the value as
/// received ([`RetryAfter`], shown as seen without a calendar reading) and
/// as the trail records it: `none (missing)`, `3 s (valid)`,
/// `Mon, 01 Jan 2024 12:00:06 GMT (valid date)`, `1.5 (invalid)`, or the
/// date followed by `(a date no trusted clock can measure)`. Raw values
/// are shown as received (a header value holds no control character).
///
/// ```
/// use retry_budget::{retry_after::RetryAfter, trail::RetryAfterSeen};
///
/// assert_eq!(RetryAfter::parse("3").to_string(), "3 s (valid)");
/// assert_eq!(RetryAfter::parse("1.5").to_string(), "1.5 (invalid)");
/// assert_eq!(RetryAfterSeen::Missing.to_string(), "none (missing)");
/// ```
impl fmt::Display for RetryAfterSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("none (missing)"),
            Self::Seconds { value } => write!(f, "{} (valid)", Secs(*value)),
            Self::Date { date } => write!(f, "{} (valid date)", httpdate::fmt_http_date(*date)),
            Self::Invalid { raw } => write!(f, "{raw} (invalid)"),
            Self::Unmeasured { raw } => {
                write!(f, "{raw} (a date no trusted clock can measure)")
            }
        }
    }
}

/// As [`RetryAfterSeen`] shows it, seen without a calendar reading.
impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RetryAfterSeen::from(self).fmt(f)
    }
}

/// As recorded without a calendar reading (see
/// [`RetryAfterSeen::at_receipt`]).
impl From<&RetryAfter> for RetryAfterSeen {
    fn from(value: &RetryAfter) -> Self {
        Self::at_receipt(value, None)
    }
}

#[cfg(feature = "serde")]
fn ser_date<S: serde::Serializer>(date: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&httpdate::fmt_http_date(*date))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trail_keeps_the_raw_text_and_one_rendering_serves_both_types() {
        let seen = |raw: &str| RetryAfterSeen::from(&RetryAfter::parse(raw));
        assert_eq!(
            seen("tomorrow"),
            RetryAfterSeen::Invalid {
                raw: "tomorrow".into()
            }
        );
        assert_eq!(
            seen("\"quoted\""),
            RetryAfterSeen::Invalid {
                raw: "\"quoted\"".into()
            }
        );
        let repeated = RetryAfter::from_values([&b"soon"[..], &b"later"[..]]);
        assert_eq!(
            RetryAfterSeen::from(&repeated),
            RetryAfterSeen::Invalid {
                raw: "soon, later".into()
            }
        );
        for (value, shown) in [
            ("3", "3 s (valid)"),
            ("1.5", "1.5 (invalid)"),
            ("tomorrow", "tomorrow (invalid)"),
            (
                "Mon, 01 Jan 2024 12:00:06 GMT",
                "Mon, 01 Jan 2024 12:00:06 GMT (valid date)",
            ),
        ] {
            assert_eq!(RetryAfter::parse(value).to_string(), shown);
        }
        assert_eq!(seen("tomorrow").to_string(), "tomorrow (invalid)");
        let unmeasured = RetryAfterSeen::Unmeasured {
            raw: "Monday, 01-Jan-24 12:00:06 GMT".into(),
        };
        assert_eq!(
            unmeasured.to_string(),
            "Monday, 01-Jan-24 12:00:06 GMT (a date no trusted clock can measure)"
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_110_400);
        let dated = RetryAfterSeen::at_receipt(
            &RetryAfter::parse("Mon, 01 Jan 2024 12:00:06 GMT"),
            Some(at),
        );
        assert_eq!(
            dated.to_string(),
            "Mon, 01 Jan 2024 12:00:06 GMT (valid date)"
        );
    }
}
