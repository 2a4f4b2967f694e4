//! **The trail's events in words**, one rendering for every reader of a
//! trail: the CLI's live steps and replay tables, the tower layer's
//! `tracing` events, the proxy's metric labels. Each reader lays the words
//! out its own way (a time stamp, a table cell, a log message, a label);
//! what an event is called and what it says is written once, here.
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::trail::{EventKind, WaitBasis};
//! use retry_budget::trail_text::{basis_name, kind_name, Note, WaitReason};
//!
//! let basis = WaitBasis::Server { requested: Duration::from_secs(3) };
//! assert_eq!(basis_name(&basis), "server");
//! assert_eq!(WaitReason(&basis).to_string(), "server asked 3 s");
//! let forbidden = EventKind::RetryForbidden { attempt: 2 };
//! assert_eq!(kind_name(&forbidden), "retry_forbidden");
//! let note = Note::of(&forbidden).unwrap();
//! assert_eq!((note.attempt(), note.to_string()), (Some(2), "retry forbidden by the server".to_owned()));
//! ```

use core::fmt;

use crate::trail::{EventKind, WaitBasis};
use crate::Secs;

/// The `snake_case` name of an event's kind: its `kind` in the JSON
/// report.
#[must_use]
pub const fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::AttemptStarted { .. } => "attempt_started",
        EventKind::Response { .. } => "response",
        EventKind::WaitPlanned { .. } => "wait_planned",
        EventKind::Woke { .. } => "woke",
        EventKind::CallerLeft { .. } => "caller_left",
        EventKind::AttemptTimedOut { .. } => "attempt_timed_out",
        EventKind::TransportFailed { .. } => "transport_failed",
        EventKind::RetryRefused { .. } => "retry_refused",
        EventKind::HeldOff { .. } => "held_off",
        EventKind::Paced { .. } => "paced",
        EventKind::RetryForbidden { .. } => "retry_forbidden",
        EventKind::NotRepeatable { .. } => "not_repeatable",
        EventKind::Translated { .. } => "translated",
        EventKind::StatusAfterData { .. } => "status_after_data",
        EventKind::RetryAfterRepeated { .. } => "retry_after_repeated",
        EventKind::LenientDate { .. } => "lenient_date",
        EventKind::ResetHeader { .. } => "reset_header",
        EventKind::Spread { .. } => "spread",
        EventKind::RetryAfterMs { .. } => "retry_after_ms",
        EventKind::ShouldRetry { .. } => "should_retry",
        EventKind::QuotaExhausted { .. } => "quota_exhausted",
        EventKind::QuotaField { .. } => "quota_field",
        EventKind::SharedStoreUnavailable => "shared_store_unavailable",
        EventKind::Stopped { .. } => "stopped",
    }
}

/// The `snake_case` name of a wait's basis: its `source` in the JSON
/// report.
#[must_use]
pub const fn basis_name(basis: &WaitBasis) -> &'static str {
    match basis {
        WaitBasis::Server { .. } => "server",
        WaitBasis::Fallback { .. } => "fallback",
        WaitBasis::FallbackJittered { .. } => "fallback_jittered",
        WaitBasis::HoldOff => "hold_off",
        WaitBasis::Pace { .. } => "pace",
        WaitBasis::ResetHeader { .. } => "reset_header",
    }
}

/// Why a wait is as long as it is, in words (`server asked 3 s`).
#[derive(Debug, Clone, Copy)]
pub struct WaitReason<'a>(pub &'a WaitBasis);

impl fmt::Display for WaitReason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            WaitBasis::Server { requested } => write!(f, "server asked {}", Secs(*requested)),
            WaitBasis::Fallback { .. } => f.write_str("fallback: no usable Retry-After"),
            WaitBasis::FallbackJittered { unjittered, .. } => write!(
                f,
                "fallback {} with jitter: no usable Retry-After",
                Secs(*unjittered)
            ),
            WaitBasis::HoldOff => f.write_str("hold-off: the service asked this client to wait"),
            WaitBasis::Pace { left, resets_at } => write!(
                f,
                "pace: {left} left of the announced quota until its reset at {}",
                Secs(*resets_at)
            ),
            WaitBasis::ResetHeader { requested } => {
                write!(f, "reset header asked {}", Secs(*requested))
            }
        }
    }
}

/// What an `x-should-retry` value means (`says` as recorded).
#[must_use]
pub const fn should_retry_meaning(says: Option<bool>) -> &'static str {
    match says {
        Some(false) => "the server says not to retry",
        Some(true) => "changes nothing",
        None => "neither true nor false: ignored",
    }
}

/// An event that notes something about a response, beside the budget's
/// own steps (a retry forbidden, a translated status, a repeated or
/// lenient `Retry-After`, a reset header, ...), in words.
#[derive(Debug, Clone, Copy)]
pub struct Note<'a>(&'a EventKind);

impl<'a> Note<'a> {
    /// The note of `kind`, if it is one (not an attempt, a response, a
    /// wait, a wake, a leave, a refusal, a hold-off or the stop).
    #[must_use]
    pub const fn of(kind: &'a EventKind) -> Option<Self> {
        match kind {
            EventKind::RetryForbidden { .. }
            | EventKind::NotRepeatable { .. }
            | EventKind::Translated { .. }
            | EventKind::StatusAfterData { .. }
            | EventKind::RetryAfterRepeated { .. }
            | EventKind::LenientDate { .. }
            | EventKind::ResetHeader { .. }
            | EventKind::Spread { .. }
            | EventKind::RetryAfterMs { .. }
            | EventKind::ShouldRetry { .. }
            | EventKind::QuotaExhausted { .. }
            | EventKind::Paced { .. }
            | EventKind::QuotaField { .. }
            | EventKind::SharedStoreUnavailable => Some(Self(kind)),
            _ => None,
        }
    }

    /// The attempt it is about, if one.
    #[must_use]
    pub const fn attempt(&self) -> Option<u32> {
        match self.0 {
            EventKind::RetryForbidden { attempt }
            | EventKind::NotRepeatable { attempt }
            | EventKind::Translated { attempt, .. }
            | EventKind::StatusAfterData { attempt, .. }
            | EventKind::RetryAfterRepeated { attempt, .. }
            | EventKind::LenientDate { attempt, .. }
            | EventKind::ResetHeader { attempt, .. }
            | EventKind::Spread { attempt, .. }
            | EventKind::RetryAfterMs { attempt, .. }
            | EventKind::ShouldRetry { attempt, .. }
            | EventKind::QuotaExhausted { attempt, .. }
            | EventKind::QuotaField { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }
}

impl fmt::Display for Note<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            EventKind::RetryForbidden { .. } => f.write_str("retry forbidden by the server"),
            EventKind::NotRepeatable { .. } => {
                f.write_str("not repeated: the request is not marked safe to repeat")
            }
            EventKind::Translated { from, .. } => write!(f, "translated from {from}"),
            EventKind::StatusAfterData { status, from, .. } => write!(
                f,
                "after the answer began, the service ended it with {from} (as HTTP {status})"
            ),
            EventKind::RetryAfterRepeated { values, raw, .. } => write!(
                f,
                "Retry-After repeated ({values} values: {raw}); the longest valid wait counts"
            ),
            EventKind::LenientDate { raw, tolerated, .. } => {
                write!(f, "Retry-After date read leniently ({tolerated}): {raw}")
            }
            EventKind::ResetHeader {
                header,
                raw,
                reading,
                ..
            } => write!(f, "reset header {header}: {raw} ({reading})"),
            EventKind::Spread { extra, .. } => write!(
                f,
                "a random spread of {} added on top of the server's delay",
                Secs(*extra)
            ),
            EventKind::RetryAfterMs { raw, reading, .. } => {
                write!(f, "retry-after-ms {raw} ({reading})")
            }
            EventKind::ShouldRetry {
                header, raw, says, ..
            } => write!(f, "{header}: {raw} ({})", should_retry_meaning(*says)),
            EventKind::QuotaExhausted { attempt: 0, code } => write!(
                f,
                "held: the service said its quota is used up ({code}) to another request just before; nothing sent"
            ),
            EventKind::QuotaExhausted { code, .. } => write!(
                f,
                "the body says the quota is used up ({code}): not retried"
            ),
            EventKind::Paced { until, reason } => write!(
                f,
                "paced by limit {}: {} left (announced {}), resets at {}; no start before {}{}",
                reason.limit,
                reason.left,
                reason.announced,
                Secs(reason.resets_at),
                Secs(*until),
                if reason.clamped {
                    " (clamped to the maximum hold)"
                } else {
                    ""
                }
            ),
            EventKind::QuotaField {
                header, raw, why, ..
            } => write!(f, "quota field {header}: {raw} ({why})"),
            EventKind::SharedStoreUnavailable => f.write_str(
                "the shared hold-off store is unavailable: only this process's hold-offs apply",
            ),
            // `of` makes no other note.
            other => f.write_str(kind_name(other)),
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::Outcome;

    /// The names are the JSON report's own.
    #[test]
    fn names_match_the_json_tags() {
        let kinds = [
            EventKind::RetryForbidden { attempt: 1 },
            EventKind::SharedStoreUnavailable,
            EventKind::QuotaField {
                attempt: 1,
                header: "age".into(),
                raw: "3".into(),
                why: crate::pace::QuotaIgnored::Cached,
            },
            EventKind::Stopped {
                outcome: Outcome::Success,
            },
            EventKind::Spread {
                attempt: 1,
                extra: Duration::ZERO,
            },
        ];
        for kind in &kinds {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json["kind"], kind_name(kind));
        }
        let bases = [
            WaitBasis::HoldOff,
            WaitBasis::FallbackJittered {
                completed: 1,
                unjittered: Duration::ZERO,
            },
            WaitBasis::ResetHeader {
                requested: Duration::ZERO,
            },
        ];
        for basis in &bases {
            let json = serde_json::to_value(basis).unwrap();
            assert_eq!(json["source"], basis_name(basis));
        }
    }
}
