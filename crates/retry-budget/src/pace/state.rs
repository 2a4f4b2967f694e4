//! What one response says about one limit, and what was set aside.

use std::fmt;
use std::time::Duration;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum LimitKind {
    /// Requests: every first attempt spends one, so the pacer spreads
    /// starts over what is left.
    Requests,
    /// Tokens (or another unit whose cost per request is unknown): paced
    /// only when what is left is at or below the pacer's threshold.
    Tokens,
}

impl LimitKind {
    /// `requests` or `tokens`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Tokens => "tokens",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One limit's state as one response announced it, measured at receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaState {
    /// The limit's name: the IETF policy name (`"default"`), or the
    /// header family it came from (`x-ratelimit`, `requests`, `tokens`,
    /// `input-tokens`...). Cut to [`MAX_NAME_LEN`] bytes.
    pub name: String,
    /// What it counts.
    pub kind: LimitKind,
    /// What is left in the current window.
    pub remaining: u64,
    /// Time from receipt until the window resets, at most the reader's
    /// maximum hold.
    pub reset: Duration,
    /// The window's quota, when announced.
    pub quota: Option<u64>,
    /// The window's length, when announced.
    pub window: Option<Duration>,
}

/// The longest limit name kept, in bytes (a hostile server could send any
/// length).
pub const MAX_NAME_LEN: usize = 64;

/// The most limits read from one response; further ones are set aside
/// ([`QuotaIgnored::TooMany`]).
pub const MAX_LIMITS: usize = 16;

/// The most quota notes one response adds to an action's trail
/// ([`EventKind::QuotaField`](crate::trail::EventKind::QuotaField)); the
/// rest are left out (a hostile server could send any number).
pub const MAX_QUOTA_NOTES: usize = 8;

/// Why a value was set aside (or changed) while reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum QuotaIgnored {
    /// The response came from a cache (`Age` present): its fields describe
    /// another moment; nothing of it was read.
    Cached,
    /// Not in the field's format.
    Malformed,
    /// A negative count or time.
    Negative,
    /// `-1`: the server does not know (Azure OpenAI).
    Unknown,
    /// A remaining count without a reset time (or the reverse): nothing to
    /// pace by.
    Unpaired,
    /// A calendar time (Unix or RFC 3339) and no trusted calendar reading
    /// at receipt.
    NoTrustedCalendar,
    /// The reset was further than the maximum hold: held for the maximum
    /// instead.
    ResetClamped,
    /// More than [`MAX_LIMITS`] limits in one response.
    TooMany,
    /// The field was sent more than once; the first line counts.
    Repeated,
}

impl fmt::Display for QuotaIgnored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cached => "from a cache (Age present): not read",
            Self::Malformed => "malformed",
            Self::Negative => "negative",
            Self::Unknown => "unknown (-1)",
            Self::Unpaired => "no remaining count and reset time together",
            Self::NoTrustedCalendar => "a calendar time needs a trusted calendar clock",
            Self::ResetClamped => "reset beyond the maximum hold: clamped to it",
            Self::TooMany => "too many limits in one response",
            Self::Repeated => "sent more than once: the first counts",
        })
    }
}

/// One value set aside or changed while reading, for the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaNote {
    /// The header's name (lower case).
    pub header: String,
    /// The value as received (lossy UTF-8, cut to
    /// [`MAX_KEPT_RAW`](crate::retry_after::MAX_KEPT_RAW) characters).
    pub raw: String,
    /// What happened to it.
    pub why: QuotaIgnored,
}

/// Everything one response says about its limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaReading {
    /// The limits read, at most [`MAX_LIMITS`].
    pub states: Vec<QuotaState>,
    /// What was set aside or clamped, and why.
    pub notes: Vec<QuotaNote>,
}

impl QuotaReading {
    /// Whether the response announced no usable limit.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub(crate) fn note(&mut self, header: &str, raw: &[u8], why: QuotaIgnored) {
        self.notes.push(QuotaNote {
            header: header.to_ascii_lowercase(),
            raw: crate::retry_after::keep(raw),
            why,
        });
    }
}

/// `name`, cut to [`MAX_NAME_LEN`] bytes on a character boundary.
pub(crate) fn limit_name(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME_LEN);
    while !name.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    name[..end].to_owned()
}
