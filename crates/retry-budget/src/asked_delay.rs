//! Which delay a response asks for: the choice among its `Retry-After`,
//! `retry-after-ms` and rate-limit reset values, a pure function
//! ([`choose`]).
//!
//! Every value is read as a wait at receipt, the longest counting:
//! `Retry-After` and `retry-after-ms` as one repeated field, then a reset
//! header only if it asks longer (it never shortens a valid `Retry-After`).
//! A date no trusted clock can measure stays unmeasurable whatever the
//! other fields say.

use std::time::{Duration, SystemTime};

use crate::api_signals::RetryAfterMs;
use crate::reset::{ResetHeaders, ResetReading, ResetValue};
use crate::retry_after::{Asked, RetryAfter};

/// Which header gave a server's delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DelaySource {
    /// `Retry-After` or `retry-after-ms`.
    RetryAfter,
    /// A rate-limit reset header.
    ResetHeader,
}

/// What the server asked in one response, measured at receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerAsked {
    /// Nothing usable: the local fallback applies.
    Nothing,
    /// A date that no trusted calendar reading can measure.
    Unmeasurable,
    /// This delay, from this header.
    Wait {
        requested: Duration,
        from: DelaySource,
    },
}

impl ServerAsked {
    /// The delay asked, if one was.
    pub(crate) const fn requested(self) -> Option<Duration> {
        match self {
            Self::Wait { requested, .. } => Some(requested),
            Self::Nothing | Self::Unmeasurable => None,
        }
    }
}

/// The choice, with what the trail says of each value: which
/// `retry-after-ms` value and which reset header counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AskedDelay<'a> {
    /// What counts.
    pub(crate) asked: ServerAsked,
    /// The index of the `retry-after-ms` value that counted (the first of
    /// equals), if one did.
    pub(crate) ms_used: Option<usize>,
    /// Every reset header value and how it read, in order.
    pub(crate) resets: Vec<(&'a ResetValue, ResetReading)>,
    /// The index in `resets` of the value that counted, if one did.
    pub(crate) reset_used: Option<usize>,
}

impl AskedDelay<'_> {
    /// Nothing asked, nothing read (a response whose delays are not read).
    pub(crate) const fn nothing() -> Self {
        Self {
            asked: ServerAsked::Nothing,
            ms_used: None,
            resets: Vec::new(),
            reset_used: None,
        }
    }
}

/// The delay a response asks for, given its fields and the calendar
/// reading at receipt (`None`: no trusted one).
pub(crate) fn choose<'a>(
    retry_after: &RetryAfter,
    retry_after_ms: Option<&RetryAfterMs>,
    reset_headers: Option<&'a ResetHeaders>,
    calendar: Option<SystemTime>,
) -> AskedDelay<'a> {
    let mut asked = match retry_after.asked(calendar) {
        Asked::Nothing => ServerAsked::Nothing,
        Asked::Unmeasurable => ServerAsked::Unmeasurable,
        Asked::Wait(requested) => ServerAsked::Wait {
            requested,
            from: DelaySource::RetryAfter,
        },
    };
    let mut ms_used = None;
    if let Some(ms) = retry_after_ms {
        // Longer than a valid Retry-After (or the only valid delay):
        // counts. A date no clock can measure stays unmeasurable.
        let used = ms.longest().filter(|wait| match asked {
            ServerAsked::Nothing => true,
            ServerAsked::Wait { requested, .. } => *wait > requested,
            ServerAsked::Unmeasurable => false,
        });
        if let Some(requested) = used {
            asked = ServerAsked::Wait {
                requested,
                from: DelaySource::RetryAfter,
            };
            ms_used = ms.values().iter().position(|v| v.wait() == used);
        }
    }
    let Some(headers) = reset_headers else {
        return AskedDelay {
            asked,
            ms_used,
            ..AskedDelay::nothing()
        };
    };
    let resets: Vec<_> = headers.read(calendar).collect();
    // The longest reset wait, first of equals; used only if longer than
    // a valid Retry-After (never shortening it).
    let mut longest: Option<(usize, Duration)> = None;
    for (i, (_, reading)) in resets.iter().enumerate() {
        if let ResetReading::Wait(wait) = reading {
            if longest.is_none_or(|(_, w)| *wait > w) {
                longest = Some((i, *wait));
            }
        }
    }
    let used = match (asked, longest) {
        (ServerAsked::Nothing, Some(found)) => Some(found),
        (ServerAsked::Wait { requested, .. }, Some(found)) if found.1 > requested => Some(found),
        _ => None,
    };
    if let Some((_, requested)) = used {
        asked = ServerAsked::Wait {
            requested,
            from: DelaySource::ResetHeader,
        };
    }
    AskedDelay {
        asked,
        ms_used,
        resets,
        reset_used: used.map(|(i, _)| i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reset::ResetFormat;

    const fn wait(secs: u64, from: DelaySource) -> ServerAsked {
        ServerAsked::Wait {
            requested: Duration::from_secs(secs),
            from,
        }
    }

    #[test]
    fn the_longest_valid_value_counts_and_a_reset_never_shortens() {
        let none = choose(&RetryAfter::Missing, None, None, None);
        assert_eq!(none, AskedDelay::nothing());

        let ms = RetryAfterMs::parse("5000");
        let longer_ms = choose(&RetryAfter::parse("3"), Some(&ms), None, None);
        assert_eq!(longer_ms.asked, wait(5, DelaySource::RetryAfter));
        assert_eq!(longer_ms.ms_used, Some(0));

        let ms = RetryAfterMs::from_values([&b"x"[..], &b"1000"[..], &b"1000"[..]]);
        let shorter_ms = choose(&RetryAfter::parse("3"), Some(&ms), None, None);
        assert_eq!(shorter_ms.asked, wait(3, DelaySource::RetryAfter));
        assert_eq!(shorter_ms.ms_used, None);
        let only_ms = choose(&RetryAfter::Missing, Some(&ms), None, None);
        assert_eq!(only_ms.ms_used, Some(1), "the first of equals");

        let mut resets = ResetHeaders::new(None);
        resets.push("ratelimit-reset", ResetFormat::Seconds, b"2");
        resets.push("x-ratelimit-reset", ResetFormat::Seconds, b"7");
        let longer_reset = choose(&RetryAfter::parse("3"), None, Some(&resets), None);
        assert_eq!(longer_reset.asked, wait(7, DelaySource::ResetHeader));
        assert_eq!(longer_reset.resets.len(), 2);
        assert_eq!(longer_reset.reset_used, Some(1));
        let longer_header = choose(&RetryAfter::parse("9"), None, Some(&resets), None);
        assert_eq!(longer_header.asked, wait(9, DelaySource::RetryAfter));
        assert_eq!(longer_header.reset_used, None);
    }

    #[test]
    fn only_a_spent_limit_gives_its_reset() {
        // Groq's tokens-per-minute 429: the requests-per-day reset is far
        // off but requests remain; the tokens limit is spent.
        let mut resets = ResetHeaders::new(None);
        resets.push_limit(
            "x-ratelimit-reset-requests",
            ResetFormat::Duration,
            b"2m59.56s",
            Some(b"14370"),
        );
        resets.push_limit(
            "x-ratelimit-reset-tokens",
            ResetFormat::Duration,
            b"7.66s",
            Some(b"0"),
        );
        let asked = choose(&RetryAfter::parse("2"), None, Some(&resets), None);
        assert_eq!(
            asked.asked,
            ServerAsked::Wait {
                requested: Duration::from_millis(7660),
                from: DelaySource::ResetHeader
            }
        );
        assert_eq!(asked.reset_used, Some(1));
    }

    #[test]
    fn an_unmeasurable_date_stays_unmeasurable() {
        let date = RetryAfter::parse("Monday, 01-Jan-24 12:00:06 GMT");
        let ms = RetryAfterMs::parse("5000");
        let mut resets = ResetHeaders::new(None);
        resets.push("ratelimit-reset", ResetFormat::Seconds, b"7");
        let asked = choose(&date, Some(&ms), Some(&resets), None);
        assert_eq!(asked.asked, ServerAsked::Unmeasurable);
        assert_eq!((asked.ms_used, asked.reset_used), (None, None));
    }
}
