//! Parsing `Retry-After` (RFC 9110 §10.2.3) exactly, and nothing more.
//!
//! The header is either `delay-seconds` (`1*DIGIT`, nothing else) or an
//! `HTTP-date` in any of the three forms RFC 9110 §5.6.7 obliges a recipient to
//! accept (IMF-fixdate, RFC 850, asctime), which [`httpdate`] parses.
//!
//! *Missing* and *invalid* are distinct results: both lead to the local
//! fallback wait, but an invalid value is kept (see [`InvalidRetryAfter`]) so
//! the trail can show what the server actually sent. A valid but huge number of
//! seconds is a very long wait, not an invalid header: it saturates instead of
//! overflowing.
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::RetryAfter;
//!
//! assert_eq!(RetryAfter::parse("3"), RetryAfter::Seconds(Duration::from_secs(3)));
//! assert!(matches!(RetryAfter::parse("1.5"), RetryAfter::Invalid(_)));
//! assert!(matches!(
//!     RetryAfter::parse("Mon, 01 Jan 2024 12:00:06 GMT"),
//!     RetryAfter::Date(_)
//! ));
//! assert_eq!(RetryAfter::from_values(std::iter::empty::<&[u8]>()), RetryAfter::Missing);
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

/// The longest raw value kept for the trail; longer values are cut (on a
/// character boundary) and marked with `…`.
pub const MAX_KEPT_RAW: usize = 64;

/// A parsed `Retry-After` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryAfter {
    /// No `Retry-After` header.
    Missing,
    /// `delay-seconds`, saturated at `u64::MAX` seconds.
    Seconds(Duration),
    /// An `HTTP-date`.
    Date(SystemTime),
    /// A header that is neither form.
    Invalid(InvalidRetryAfter),
}

/// A `Retry-After` value that could not be used, kept for the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRetryAfter {
    raw: String,
    reason: InvalidReason,
}

/// Why a `Retry-After` value is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidReason {
    /// Neither `1*DIGIT` nor an HTTP-date (`1.5`, `-1`, `+5`, `5s`, `NaN`,
    /// `tomorrow`, an empty value, a date out of range).
    Malformed,
    /// The bytes are not visible ASCII, so the value cannot be either form.
    NotAscii,
    /// More than one `Retry-After` field: the response is ambiguous, so none
    /// of them is trusted.
    Repeated,
}

impl InvalidRetryAfter {
    /// The raw value as received (lossy for non-UTF-8 bytes, cut to
    /// [`MAX_KEPT_RAW`] characters).
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// Why it was rejected.
    pub fn reason(&self) -> InvalidReason {
        self.reason
    }
}

impl fmt::Display for InvalidRetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            InvalidReason::Repeated => write!(f, "several Retry-After fields ({:?})", self.raw),
            InvalidReason::NotAscii | InvalidReason::Malformed => write!(f, "{:?}", self.raw),
        }
    }
}

fn keep(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    if text.chars().count() <= MAX_KEPT_RAW {
        text.into_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_KEPT_RAW).collect();
        cut.push('…');
        cut
    }
}

impl RetryAfter {
    /// Parses one header value given as text.
    pub fn parse(value: &str) -> Self {
        Self::parse_bytes(value.as_bytes())
    }

    /// Parses one header value given as bytes (as `http::HeaderValue` holds it).
    ///
    /// Optional whitespace around the value is not part of it (RFC 9110 §5.5)
    /// and is ignored; anything else that is not `1*DIGIT` or an HTTP-date is
    /// [`RetryAfter::Invalid`].
    pub fn parse_bytes(value: &[u8]) -> Self {
        let trimmed = trim_ows(value);
        let invalid = |reason| {
            Self::Invalid(InvalidRetryAfter {
                raw: keep(value),
                reason,
            })
        };
        if !trimmed.is_empty() && trimmed.iter().all(u8::is_ascii_digit) {
            // 1*DIGIT: accumulate with saturation; leading zeros are fine.
            let secs = trimmed.iter().fold(0u64, |acc, d| {
                acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
            });
            return Self::Seconds(Duration::from_secs(secs));
        }
        let Ok(text) = std::str::from_utf8(trimmed) else {
            return invalid(InvalidReason::NotAscii);
        };
        if !text.is_ascii() {
            return invalid(InvalidReason::NotAscii);
        }
        match httpdate::parse_http_date(text) {
            Ok(date) => Self::Date(date),
            Err(_) => invalid(InvalidReason::Malformed),
        }
    }

    /// Parses every `Retry-After` field of a response: none is
    /// [`RetryAfter::Missing`], one is parsed, several are
    /// [`InvalidReason::Repeated`] (the response is ambiguous, so the local
    /// fallback applies).
    pub fn from_values<'a, I>(values: I) -> Self
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return Self::Missing;
        };
        let Some(second) = values.next() else {
            return Self::parse_bytes(first);
        };
        let mut joined = [first, second].join(&b", "[..]);
        for more in values {
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(more);
        }
        Self::Invalid(InvalidRetryAfter {
            raw: keep(&joined),
            reason: InvalidReason::Repeated,
        })
    }

    /// Whether the value is usable (`Seconds` or `Date`).
    pub const fn is_valid(&self) -> bool {
        matches!(self, Self::Seconds(_) | Self::Date(_))
    }
}

fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> RetryAfter {
        RetryAfter::Seconds(Duration::from_secs(n))
    }

    fn assert_invalid(raw: &str) {
        match RetryAfter::parse(raw) {
            RetryAfter::Invalid(inv) => {
                assert_eq!(inv.raw(), raw);
                assert_eq!(inv.reason(), InvalidReason::Malformed, "{raw:?}");
            }
            other => panic!("{raw:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(RetryAfter::parse("0"), secs(0));
        assert_eq!(RetryAfter::parse("3"), secs(3));
        assert_eq!(RetryAfter::parse("007"), secs(7));
        assert_eq!(RetryAfter::parse(" 5\t"), secs(5));
    }

    #[test]
    fn huge_delay_saturates() {
        assert_eq!(RetryAfter::parse("99999999999999999999"), secs(u64::MAX));
        assert_eq!(RetryAfter::parse("18446744073709551615"), secs(u64::MAX));
        assert_eq!(
            RetryAfter::parse("18446744073709551614"),
            secs(u64::MAX - 1)
        );
    }

    #[test]
    fn not_delay_seconds() {
        for raw in [
            "1.5", "-1", "+5", "5s", "NaN", "tomorrow", "", "  ", "1 2", "0x10", "１",
        ] {
            if raw == "１" {
                assert!(matches!(
                    RetryAfter::parse(raw),
                    RetryAfter::Invalid(ref i) if i.reason() == InvalidReason::NotAscii
                ));
                continue;
            }
            assert_invalid(raw);
        }
    }

    #[test]
    fn the_three_date_forms() {
        let expected = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        for raw in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(RetryAfter::parse(raw), RetryAfter::Date(expected), "{raw}");
        }
    }

    #[test]
    fn dates_at_the_edges() {
        assert!(matches!(
            RetryAfter::parse("Fri, 31 Dec 9999 23:59:59 GMT"),
            RetryAfter::Date(_)
        ));
        // Before 1970 cannot be represented by httpdate: invalid, not zero.
        assert_invalid("Thu, 01 Jan 1960 00:00:00 GMT");
        assert_invalid("Mon, 01 Jan 2024 12:00:06 PST");
    }

    #[test]
    fn non_utf8_and_long_values_are_kept_short() {
        let v = RetryAfter::parse_bytes(b"\xff\xfe5");
        assert!(matches!(v, RetryAfter::Invalid(ref i) if i.reason() == InvalidReason::NotAscii));
        let long = "x".repeat(10_000);
        match RetryAfter::parse(&long) {
            RetryAfter::Invalid(i) => assert_eq!(i.raw().chars().count(), MAX_KEPT_RAW + 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_single_and_repeated_fields() {
        assert_eq!(
            RetryAfter::from_values(Vec::<&[u8]>::new()),
            RetryAfter::Missing
        );
        assert_eq!(RetryAfter::from_values([&b"4"[..]]), secs(4));
        match RetryAfter::from_values([&b"4"[..], b"5"]) {
            RetryAfter::Invalid(i) => {
                assert_eq!(i.reason(), InvalidReason::Repeated);
                assert_eq!(i.raw(), "4, 5");
            }
            other => panic!("{other:?}"),
        }
    }
}
