//! Counts and reset times, read from raw values.
//!
//! Reset times go through the core's own reset parsers
//! ([`ResetHeaders`]): seconds, Unix time, Go durations and RFC 3339 are
//! read exactly as for a 429's reset header.

use std::time::{Duration, SystemTime};

use crate::reset::{ResetFormat, ResetHeaders, ResetIgnored, ResetReading};
use crate::retry_after::trim_ows;

use super::state::QuotaIgnored;

/// A `X-RateLimit-Reset` (or `RateLimit-Reset`) at or above this is read as
/// a Unix time when the operator did not say which: as a delta it would be
/// more than 31 years, as a Unix time it is September 2001 or later.
pub const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// A remaining count or quota: `1*DIGIT` (saturating), `-1` is unknown,
/// any other sign is negative.
pub(crate) fn count(raw: &[u8]) -> Result<u64, QuotaIgnored> {
    let raw = trim_ows(raw);
    if raw == b"-1" {
        return Err(QuotaIgnored::Unknown);
    }
    if let Some(rest) = raw.strip_prefix(b"-") {
        return Err(if !rest.is_empty() && rest.iter().all(u8::is_ascii_digit) {
            QuotaIgnored::Negative
        } else {
            QuotaIgnored::Malformed
        });
    }
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return Err(QuotaIgnored::Malformed);
    }
    Ok(raw.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(d.saturating_sub(b'0')))
    }))
}

/// A reset in `format` (`None`: seconds, or a Unix time from
/// [`UNIX_TIME_FROM`] on), as a wait from receipt.
pub(crate) fn reset(
    raw: &[u8],
    format: Option<ResetFormat>,
    calendar: Option<SystemTime>,
) -> Result<Duration, QuotaIgnored> {
    let trimmed = trim_ows(raw);
    if trimmed.first() == Some(&b'-') {
        return Err(if trimmed == b"-1" {
            QuotaIgnored::Unknown
        } else {
            QuotaIgnored::Negative
        });
    }
    let format = format.unwrap_or_else(|| match count(trimmed) {
        Ok(n) if n >= UNIX_TIME_FROM => ResetFormat::Unix,
        _ => ResetFormat::Seconds,
    });
    let mut one = ResetHeaders::new(None);
    one.push("", format, trimmed);
    let reading = one.read(calendar).next().map(|(_, reading)| reading);
    match reading {
        Some(ResetReading::Wait(wait)) => Ok(wait),
        Some(ResetReading::Ignored(ResetIgnored::NoTrustedCalendar)) => {
            Err(QuotaIgnored::NoTrustedCalendar)
        }
        _ => Err(QuotaIgnored::Malformed),
    }
}
