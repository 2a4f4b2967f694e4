//! What some APIs say besides `Retry-After`: a delay in milliseconds
//! ([`RetryAfterMs`]) and an explicit word on retrying ([`ShouldRetry`]).
//!
//! OpenAI's and Anthropic's APIs send both, and their official SDKs read
//! them before `Retry-After`. The adapter hands the raw values to the core
//! through [`Answer`](crate::Answer); the rule lives in
//! [`Action::respond`](crate::Action::respond).

use std::time::Duration;

use crate::retry_after::{keep, trim_ows};

/// The `retry-after-ms` header's name.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";
/// The `x-should-retry` header's name.
pub const X_SHOULD_RETRY: &str = "x-should-retry";

/// Every `retry-after-ms` value of a response: a server's delay in
/// milliseconds, fractions allowed (`2500`, `2500.5`).
///
/// The core counts it with `Retry-After` by the rule of a repeated field:
/// the longest valid wait among all of them counts, so the client never
/// comes back sooner than any valid value asked. A value that is not
/// `1*DIGIT [ "." 1*DIGIT ]` (optional whitespace around it aside) is
/// invalid: kept, recorded in the trail, and ignored (`-1`, `1e3`, `NaN`,
/// `inf`, `2.5s`, an empty value). A huge value saturates instead of
/// overflowing. Several field lines, or a comma-separated list, give
/// several values.
///
/// ```
/// use std::time::Duration;
/// use retry_budget::api_signals::RetryAfterMs;
///
/// let ms = RetryAfterMs::parse("2500");
/// assert_eq!(ms.longest(), Some(Duration::from_millis(2500)));
/// assert_eq!(RetryAfterMs::parse("0.5").longest(), Some(Duration::from_micros(500)));
/// assert_eq!(RetryAfterMs::parse("soon").longest(), None);
/// let two = RetryAfterMs::from_values([&b"100"[..], b"1500, x"]);
/// assert_eq!(two.values().len(), 3);
/// assert_eq!(two.longest(), Some(Duration::from_millis(1500)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryAfterMs {
    values: Vec<MsValue>,
}

/// One `retry-after-ms` value: its raw text and its wait, if valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsValue {
    raw: String,
    wait: Option<Duration>,
}

impl MsValue {
    /// The value as received (lossy UTF-8, cut to
    /// [`MAX_KEPT_RAW`](crate::retry_after::MAX_KEPT_RAW) characters).
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The wait it asks, or `None` if it is invalid.
    pub const fn wait(&self) -> Option<Duration> {
        self.wait
    }
}

impl RetryAfterMs {
    /// One header value given as text.
    pub fn parse(value: &str) -> Self {
        Self::from_values([value.as_bytes()])
    }

    /// Every field line of the header (none: [`is_empty`](Self::is_empty)).
    pub fn from_values<'a, I>(lines: I) -> Self
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let values = lines
            .into_iter()
            .flat_map(|line| line.split(|b| *b == b','))
            .map(|value| MsValue {
                raw: keep(trim_ows(value)),
                wait: millis(trim_ows(value)),
            })
            .collect();
        Self { values }
    }

    /// Whether the header was absent.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every value, in the order received.
    pub fn values(&self) -> &[MsValue] {
        &self.values
    }

    /// The longest valid wait, if any value is valid.
    pub fn longest(&self) -> Option<Duration> {
        self.values.iter().filter_map(MsValue::wait).max()
    }
}

/// `1*DIGIT [ "." 1*DIGIT ]` milliseconds, saturating; `None` otherwise.
fn millis(raw: &[u8]) -> Option<Duration> {
    let (whole, fraction) = match raw.iter().position(|b| *b == b'.') {
        Some(dot) => (&raw[..dot], Some(&raw[dot + 1..])),
        None => (raw, None),
    };
    let digits = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    let whole = whole.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    // Nanoseconds of the fraction: its first six digits (a millisecond has
    // 10^6 of them); further digits only have to be digits.
    let nanos = fraction
        .unwrap_or_default()
        .iter()
        .chain(std::iter::repeat(&b'0'))
        .take(6)
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(Duration::from_millis(whole).saturating_add(Duration::from_nanos(nanos)))
}

/// The server's explicit word on retrying a response (`x-should-retry:
/// true|false`, sent by OpenAI's and Anthropic's APIs and obeyed by their
/// SDKs), with the header it came in.
///
/// `false` forbids the retry: a status the policy retries ends as
/// [`Outcome::NotRetryable`](crate::Outcome::NotRetryable), and the trail
/// names the header ([`EventKind::ShouldRetry`](crate::trail::EventKind::ShouldRetry),
/// then [`EventKind::RetryForbidden`](crate::trail::EventKind::RetryForbidden)).
/// `true` changes nothing: it never makes a status the policy does not
/// list retryable. Any other value (the SDKs compare exactly with `true`
/// and `false`) is ignored and recorded. Several values (field lines or a
/// list): a `false` among them forbids.
///
/// ```
/// use retry_budget::api_signals::ShouldRetry;
///
/// assert_eq!(ShouldRetry::parse("x-should-retry", b"false").says(), Some(false));
/// assert_eq!(ShouldRetry::parse("x-should-retry", b" true ").says(), Some(true));
/// assert_eq!(ShouldRetry::parse("x-should-retry", b"False").says(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShouldRetry {
    header: Box<str>,
    raw: Box<str>,
    says: Option<bool>,
}

impl ShouldRetry {
    /// One field line of `header`.
    pub fn parse(header: impl Into<Box<str>>, raw: &[u8]) -> Self {
        Self::read(header.into(), &[raw])
    }

    /// Every field line of `header`; `None` if there is none.
    pub fn from_values<'a, I>(header: impl Into<Box<str>>, lines: I) -> Option<Self>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let lines: Vec<&[u8]> = lines.into_iter().collect();
        (!lines.is_empty()).then(|| Self::read(header.into(), &lines))
    }

    fn read(header: Box<str>, lines: &[&[u8]]) -> Self {
        let mut says = None;
        let mut all_true = true;
        for value in lines.iter().flat_map(|l| l.split(|b| *b == b',')) {
            match trim_ows(value) {
                b"false" => says = Some(false),
                b"true" => {}
                _ => all_true = false,
            }
        }
        if says.is_none() && all_true {
            says = Some(true);
        }
        Self {
            header,
            raw: keep(&lines.join(&b", "[..])).into_boxed_str(),
            says,
        }
    }

    /// The header's name.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The value as received (several joined with `, `; shortened if long).
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// `Some(false)`: do not retry; `Some(true)`: retrying is fine (changes
    /// nothing); `None`: neither word.
    pub const fn says(&self) -> Option<bool> {
        self.says
    }

    pub(crate) fn into_parts(self) -> (Box<str>, Box<str>, Option<bool>) {
        (self.header, self.raw, self.says)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_ms_values() {
        let one = |raw: &str| RetryAfterMs::parse(raw).longest();
        let ms = Duration::from_millis;
        assert_eq!(one("0"), Some(ms(0)));
        assert_eq!(one("2500"), Some(ms(2500)));
        assert_eq!(one(" 2500\t"), Some(ms(2500)));
        assert_eq!(one("007"), Some(ms(7)));
        assert_eq!(one("2500.5"), Some(Duration::from_micros(2_500_500)));
        assert_eq!(one("0.000001"), Some(Duration::from_nanos(1)));
        assert_eq!(one("0.0000019"), Some(Duration::from_nanos(1)));
        assert_eq!(one("1.000000000000000000000001"), Some(ms(1)));
        // Huge values saturate.
        assert_eq!(one("99999999999999999999999"), Some(ms(u64::MAX)));
        assert_eq!(
            one("18446744073709551615.999999"),
            Some(ms(u64::MAX) + Duration::from_nanos(999_999))
        );
        for bad in [
            "", " ", "-1", "+5", "1e3", "NaN", "nan", "inf", "2.5s", "1.", ".5", "1..5", "1.5.1",
            "0x10", "1 000", "１", "2500ms",
        ] {
            let parsed = RetryAfterMs::parse(bad);
            assert_eq!(parsed.longest(), None, "{bad:?}");
            assert_eq!(parsed.values().len(), 1, "{bad:?}");
            assert_eq!(parsed.values()[0].raw(), bad.trim(), "{bad:?}");
        }
        assert_eq!(RetryAfterMs::from_values([&b"\xff5"[..]]).longest(), None);
        let long = "9".repeat(1000) + "x";
        let parsed = RetryAfterMs::parse(&long);
        assert_eq!(
            parsed.values()[0].raw().chars().count(),
            crate::retry_after::MAX_KEPT_RAW + 1
        );
    }

    #[test]
    fn several_retry_after_ms_values_the_longest_valid_counts() {
        let empty = RetryAfterMs::from_values(std::iter::empty::<&[u8]>());
        assert!(empty.is_empty());
        assert_eq!(empty.longest(), None);
        let several = RetryAfterMs::from_values([&b"100, soon"[..], b"3000", b"250.5"]);
        assert_eq!(several.values().len(), 4);
        assert_eq!(several.longest(), Some(Duration::from_secs(3)));
        assert_eq!(several.values()[1].wait(), None);
        assert_eq!(RetryAfterMs::parse("x, y").longest(), None);
    }

    #[test]
    fn should_retry_words() {
        let says = |raw: &[u8]| ShouldRetry::parse(X_SHOULD_RETRY, raw).says();
        assert_eq!(says(b"false"), Some(false));
        assert_eq!(says(b"true"), Some(true));
        assert_eq!(says(b"\tfalse "), Some(false));
        for other in [
            &b"False"[..],
            b"TRUE",
            b"0",
            b"1",
            b"no",
            b"",
            b"maybe",
            b"\xff",
        ] {
            assert_eq!(says(other), None, "{other:?}");
        }
        // Several: a false forbids; all true is true; otherwise neither.
        let many = |lines: &[&[u8]]| {
            ShouldRetry::from_values(X_SHOULD_RETRY, lines.iter().copied()).map(|s| s.says())
        };
        assert_eq!(many(&[]), None);
        assert_eq!(many(&[b"true", b"false"]), Some(Some(false)));
        assert_eq!(many(&[b"true, false"]), Some(Some(false)));
        assert_eq!(many(&[b"true", b"true"]), Some(Some(true)));
        assert_eq!(many(&[b"true", b"maybe"]), Some(None));
        let both = ShouldRetry::from_values(X_SHOULD_RETRY, [&b"true"[..], b"false"]).unwrap();
        assert_eq!(both.raw(), "true, false");
        assert_eq!(both.header(), "x-should-retry");
    }
}
