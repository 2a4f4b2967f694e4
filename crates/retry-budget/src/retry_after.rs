//! Parsing `Retry-After` (RFC 9110 §10.2.3): see [`RetryAfter`].

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::http_date::{weekday_name, HttpDate};

/// The longest raw value kept for the trail; longer values are cut (on a
/// character boundary) and marked with `…`.
pub const MAX_KEPT_RAW: usize = 64;

/// A parsed `Retry-After` header (RFC 9110 §10.2.3), exactly, and nothing
/// more.
///
/// The header is either `delay-seconds` (`1*DIGIT`, nothing else) or an
/// `HTTP-date` ([`HttpDate`]: the three forms RFC 9110 §5.6.7 obliges a
/// recipient to accept, second 60 included, plus a documented list of
/// near-misses).
///
/// *Missing* and *invalid* are distinct results: both lead to the local
/// fallback wait, but an invalid value is kept (see [`InvalidRetryAfter`]) so
/// the trail can show what the server actually sent. A valid but huge number of
/// seconds is a very long wait, not an invalid header: it saturates instead of
/// overflowing.
///
/// **Several values** (several field lines, or one line holding a
/// comma-separated list, as a proxy joins them) are [`RetryAfter::Repeated`]:
/// the longest valid wait among them counts, so that the client never returns
/// sooner than any of them asked; none valid is invalid. Seconds and dates may
/// be mixed, so they are compared as waits at receipt, by the core, with the
/// calendar reading ([`RetryAfter::asked`]). A comma right after a weekday
/// name is the date's own comma, not a separator.
///
/// ```
/// use std::time::Duration;
/// use retry_budget::retry_after::{Asked, RetryAfter};
///
/// assert_eq!(RetryAfter::parse("3"), RetryAfter::Seconds(Duration::from_secs(3)));
/// assert!(matches!(RetryAfter::parse("1.5"), RetryAfter::Invalid(_)));
/// assert!(matches!(
///     RetryAfter::parse("Mon, 01 Jan 2024 12:00:06 GMT"),
///     RetryAfter::Date(_)
/// ));
/// assert_eq!(RetryAfter::from_values(std::iter::empty::<&[u8]>()), RetryAfter::Missing);
///
/// // Repeated: the longest valid wait counts.
/// let twice = RetryAfter::from_values([&b"1"[..], b"30"]);
/// assert!(matches!(twice, RetryAfter::Repeated(_)));
/// assert_eq!(twice.asked(None), Asked::Wait(Duration::from_secs(30)));
/// assert_eq!(RetryAfter::parse("1, 30, soon").asked(None), Asked::Wait(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryAfter {
    /// No `Retry-After` header.
    Missing,
    /// `delay-seconds`, saturated at `u64::MAX` seconds.
    Seconds(Duration),
    /// An `HTTP-date`.
    Date(HttpDate),
    /// A header that is neither form.
    Invalid(InvalidRetryAfter),
    /// Several values (field lines or list elements), at least two: the
    /// longest valid wait counts.
    Repeated(Repeated),
}

/// Several `Retry-After` values received together. See [`RetryAfter::Repeated`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeated {
    /// Each value, parsed: `Seconds`, `Date` or `Invalid`.
    values: Vec<RetryAfter>,
    raw: String,
}

impl Repeated {
    /// Each value, in the order received.
    pub fn values(&self) -> &[RetryAfter] {
        &self.values
    }

    /// The values as received, joined with `, ` (cut to
    /// [`MAX_KEPT_RAW`] characters).
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

/// What a `Retry-After` asks, measured at receipt (see [`RetryAfter::asked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// No usable value (missing or invalid): the local fallback applies.
    Nothing,
    /// A date, and no trusted calendar reading to measure it (or, repeated,
    /// to compare it with the other values).
    Unmeasurable,
    /// This long from receipt (a date: date − calendar reading at receipt,
    /// never negative).
    Wait(Duration),
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
    /// Several `Retry-After` values, none of them valid.
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

pub(crate) fn keep(raw: &[u8]) -> String {
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

    /// Parses one header value given as bytes (as `http::HeaderValue` holds
    /// it): one value, or a comma-separated list of them
    /// ([`RetryAfter::Repeated`]).
    ///
    /// Optional whitespace around each value is not part of it (RFC 9110
    /// §5.5) and is ignored; anything else that is not `1*DIGIT` or an
    /// HTTP-date is [`RetryAfter::Invalid`].
    pub fn parse_bytes(value: &[u8]) -> Self {
        Self::from_values([value])
    }

    /// Parses every `Retry-After` field of a response: none is
    /// [`RetryAfter::Missing`], one value is parsed as such, several (field
    /// lines or list elements) are [`RetryAfter::Repeated`], or
    /// [`InvalidReason::Repeated`] if none of them is valid.
    pub fn from_values<'a, I>(values: I) -> Self
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        // The first element apart: one value (the common case) allocates
        // nothing.
        let mut first: Option<&[u8]> = None;
        let mut more: Vec<&[u8]> = Vec::new();
        for line in values {
            split_list(line, |element| match first {
                None => first = Some(element),
                Some(_) => more.push(element),
            });
        }
        match (first, more.is_empty()) {
            (None, _) => Self::Missing,
            (Some(one), true) => Self::one(one),
            (Some(one), false) => {
                more.insert(0, one);
                let several = more;
                let raw = keep(&several.join(&b", "[..]));
                let values: Vec<Self> = several.iter().map(|v| Self::one(v)).collect();
                if values.iter().any(Self::is_valid) {
                    Self::Repeated(Repeated { values, raw })
                } else {
                    Self::Invalid(InvalidRetryAfter {
                        raw,
                        reason: InvalidReason::Repeated,
                    })
                }
            }
        }
    }

    /// One value (no list).
    fn one(value: &[u8]) -> Self {
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
        match HttpDate::parse(text) {
            Some(date) => Self::Date(date),
            None => invalid(InvalidReason::Malformed),
        }
    }

    /// Whether the value is usable (`Seconds`, `Date`, or `Repeated` with a
    /// valid value).
    pub fn is_valid(&self) -> bool {
        match self {
            Self::Seconds(_) | Self::Date(_) => true,
            Self::Repeated(r) => r.values.iter().any(Self::is_valid),
            Self::Missing | Self::Invalid(_) => false,
        }
    }

    /// Whether measuring this value needs the calendar reading at receipt
    /// (a date, or a repetition holding one): a caller reads its calendar
    /// clock only then.
    ///
    /// ```
    /// use retry_budget::retry_after::RetryAfter;
    ///
    /// assert!(!RetryAfter::parse("3").needs_calendar());
    /// assert!(RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT").needs_calendar());
    /// assert!(RetryAfter::parse("3, Sun, 06 Nov 1994 08:49:37 GMT").needs_calendar());
    /// ```
    pub fn needs_calendar(&self) -> bool {
        match self {
            Self::Date(_) => true,
            Self::Repeated(r) => r.values.iter().any(Self::needs_calendar),
            Self::Missing | Self::Seconds(_) | Self::Invalid(_) => false,
        }
    }

    /// The wait asked, measured at receipt: `calendar` is the trusted
    /// calendar reading then (`None` without one). A date needs it; so does
    /// a repetition holding a date, since the longest wait cannot be told
    /// otherwise.
    pub fn asked(&self, calendar: Option<SystemTime>) -> Asked {
        self.asked_with_value(calendar).0
    }

    /// [`asked`](Self::asked), and the single value that asks it.
    pub(crate) fn asked_with_value(&self, calendar: Option<SystemTime>) -> (Asked, Option<&Self>) {
        match self {
            Self::Missing | Self::Invalid(_) => (Asked::Nothing, None),
            Self::Seconds(delay) => (Asked::Wait(*delay), Some(self)),
            Self::Date(date) => match (date.placed(calendar), calendar) {
                (Some(date), Some(at_receipt)) => (
                    Asked::Wait(date.duration_since(at_receipt).unwrap_or(Duration::ZERO)),
                    Some(self),
                ),
                _ => (Asked::Unmeasurable, None),
            },
            Self::Repeated(repeated) => {
                let mut longest: (Asked, Option<&Self>) = (Asked::Nothing, None);
                for value in &repeated.values {
                    match value.asked_with_value(calendar) {
                        (Asked::Unmeasurable, _) => return (Asked::Unmeasurable, None),
                        (Asked::Wait(wait), value) => {
                            if !matches!(longest.0, Asked::Wait(w) if w >= wait) {
                                longest = (Asked::Wait(wait), value);
                            }
                        }
                        (Asked::Nothing, _) => {}
                    }
                }
                longest
            }
        }
    }

    /// Every date in the value, in order (one for a `Date`, each date of a
    /// repetition).
    pub(crate) fn dates(&self) -> impl Iterator<Item = &HttpDate> {
        let values: &[Self] = match self {
            Self::Repeated(r) => &r.values,
            other => std::slice::from_ref(other),
        };
        values.iter().filter_map(|v| match v {
            Self::Date(date) => Some(date),
            _ => None,
        })
    }
}

/// Splits one field line into its list elements (RFC 9110 §5.6.1): at each
/// comma, except the comma that follows a weekday name inside an HTTP-date.
/// Hand-written: no list parser knows about that comma.
fn split_list<'a>(line: &'a [u8], mut element: impl FnMut(&'a [u8])) {
    let mut start = 0;
    for (i, byte) in line.iter().enumerate() {
        if *byte == b',' && !ends_with_weekday(&line[start..i]) {
            element(&line[start..i]);
            start = i + 1;
        }
    }
    element(&line[start..]);
}

/// Whether `text` ends with a weekday name (`Sun`, `Sunday`, ...) as its
/// last word.
fn ends_with_weekday(text: &[u8]) -> bool {
    let letters = text
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    let (before, word) = text.split_at(text.len() - letters);
    weekday_name(word).is_some() && before.last().is_none_or(|b| *b == b' ' || *b == b'\t')
}

/// `value` without the optional whitespace (RFC 9110 §5.6.3: spaces and
/// tabs only) around it. Hand-written: `<[u8]>::trim_ascii` also trims
/// CR, LF and form feed, which are not OWS. Shared with `reset.rs`.
pub(crate) fn trim_ows(mut value: &[u8]) -> &[u8] {
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
        let in_2026 = httpdate::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").unwrap();
        for raw in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            let RetryAfter::Date(date) = RetryAfter::parse(raw) else {
                panic!("{raw}");
            };
            assert_eq!(date.placed(Some(in_2026)), Some(expected), "{raw}");
        }
    }

    #[test]
    fn dates_at_the_edges() {
        assert!(matches!(
            RetryAfter::parse("Fri, 31 Dec 9999 23:59:59 GMT"),
            RetryAfter::Date(_)
        ));
        // Before 1970: invalid, never read as zero.
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
        let RetryAfter::Repeated(repeated) = RetryAfter::from_values([&b"4"[..], b"5"]) else {
            panic!("not repeated");
        };
        assert_eq!(repeated.raw(), "4, 5");
        assert_eq!(repeated.values(), &[secs(4), secs(5)]);
        match RetryAfter::from_values([&b"soon"[..], b"-1"]) {
            RetryAfter::Invalid(i) => {
                assert_eq!(i.reason(), InvalidReason::Repeated);
                assert_eq!(i.raw(), "soon, -1");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_longest_valid_wait_counts() {
        let s = Duration::from_secs;
        let asked = |lines: &[&str]| {
            RetryAfter::from_values(lines.iter().map(|l| l.as_bytes())).asked(None)
        };
        assert_eq!(asked(&["30", "30"]), Asked::Wait(s(30)));
        assert_eq!(asked(&["1", "30"]), Asked::Wait(s(30)));
        assert_eq!(asked(&["30", "1"]), Asked::Wait(s(30)));
        assert_eq!(asked(&["1, 30"]), Asked::Wait(s(30)));
        assert_eq!(asked(&["1,30", "7"]), Asked::Wait(s(30)));
        assert_eq!(asked(&["x", "12"]), Asked::Wait(s(12)));
        assert_eq!(asked(&["12,"]), Asked::Wait(s(12)));
        assert_eq!(asked(&["x", "y"]), Asked::Nothing);
    }

    #[test]
    fn mixed_seconds_and_dates_compare_as_waits_at_receipt() {
        let s = Duration::from_secs;
        let now = httpdate::parse_http_date("Mon, 03 Jun 2019 11:00:00 GMT").unwrap();
        let ra = RetryAfter::parse("Mon, 03 Jun 2019 11:00:40 GMT, 30");
        assert_eq!(ra.asked(Some(now)), Asked::Wait(s(40)));
        let ra = RetryAfter::parse("Mon, 03 Jun 2019 11:00:20 GMT, 30");
        assert_eq!(ra.asked(Some(now)), Asked::Wait(s(30)));
        // Without a calendar the date cannot be compared: unmeasurable,
        // never read as zero.
        assert_eq!(ra.asked(None), Asked::Unmeasurable);
        // Two dates in one line: each keeps its own comma.
        let RetryAfter::Repeated(two) =
            RetryAfter::parse("Mon, 03 Jun 2019 11:00:20 GMT, Monday, 03-Jun-19 11:00:50 GMT")
        else {
            panic!("not repeated");
        };
        assert_eq!(two.values().len(), 2);
        assert_eq!(
            RetryAfter::Repeated(two).asked(Some(now)),
            Asked::Wait(s(50))
        );
    }

    #[test]
    fn a_weekday_glued_to_other_text_does_not_make_a_date() {
        // ".NET rejects it; here it must not become a date with no weekday."
        match RetryAfter::parse("123 Sun, 06 Nov 1994 08:49:37 GMT") {
            RetryAfter::Invalid(i) => assert_eq!(i.reason(), InvalidReason::Malformed),
            other => panic!("{other:?}"),
        }
    }
}
