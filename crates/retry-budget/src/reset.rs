//! Rate-limit reset headers, read as waits: see [`ResetHeaders`].

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::retry_after::{keep, trim_ows};

/// How a reset header's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum ResetFormat {
    /// Delta seconds, `1*DIGIT` (`RateLimit-Reset`, many `X-RateLimit-Reset`).
    Seconds,
    /// A Unix time in whole seconds, `1*DIGIT` (flask-limiter's, GitHub's
    /// `X-RateLimit-Reset`): needs the trusted calendar reading at receipt.
    Unix,
    /// The IETF draft `RateLimit` field: a list whose items carry `t=`
    /// (delta seconds until the quota resets; draft 08 and later, e.g.
    /// `"default";r=0;t=5`) or whose `reset=` member gives them (the older
    /// dictionary `limit=1, remaining=0, reset=5`). When several quota
    /// policies are listed, those with `r=0` (or `remaining=0`) are the ones
    /// exhausted and the longest of their waits counts; without a `0`, the
    /// longest listed wait counts.
    RateLimit,
}

impl ResetFormat {
    /// The `snake_case` name: `seconds`, `unix`, `rate_limit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Unix => "unix",
            Self::RateLimit => "rate_limit",
        }
    }
}

impl fmt::Display for ResetFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reset headers of one response, raw, as the adapter found them, and
/// the operator's maximum interval: when a server's limit resets, read as a
/// wait by the core.
///
/// Many rate limiters say when to come back without a `Retry-After`:
/// the IETF draft fields (`RateLimit: "default";r=0;t=5`, the older
/// `RateLimit: limit=1, remaining=0, reset=5`, `RateLimit-Reset: 5`) and
/// vendor headers such as `X-RateLimit-Reset`, as delta seconds or as a Unix
/// time (service meshes let operators name them with their format, e.g.
/// Envoy's `reset_headers`). The adapter hands their raw values to the
/// core as [`ResetHeaders`]; the rule lives in
/// [`Action::response`](crate::Action::response):
///
/// * they are read on a status the policy retries only;
/// * they are used when `Retry-After` is missing or invalid, and when both
///   are present the **longer** wait wins: a reset header never shortens a
///   valid `Retry-After`;
/// * a [`ResetFormat::Unix`] value needs the trusted calendar reading at
///   receipt, and is ignored without one; a time in the past is a zero
///   wait (then the local floor), as for a past `Retry-After` date;
/// * a malformed value, or one longer than the optional maximum interval
///   (as Envoy's `max_interval`), is ignored;
/// * every value read is recorded in the trail
///   ([`EventKind::ResetHeader`](crate::trail::EventKind::ResetHeader)), with the
///   header's name, its raw text, and whether its wait was used.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use retry_budget::reset::{ResetFormat, ResetHeaders, ResetReading};
///
/// let mut headers = ResetHeaders::new(None);
/// headers.push("ratelimit", ResetFormat::RateLimit, br#""clears";r=0;t=5"#);
/// headers.push("x-ratelimit-reset", ResetFormat::Unix, b"1700000003");
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let readings: Vec<_> = headers.read(Some(now)).collect();
/// assert_eq!(readings[0].1, ResetReading::Wait(Duration::from_secs(5)));
/// assert_eq!(readings[1].1, ResetReading::Wait(Duration::from_secs(3)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetHeaders {
    values: Vec<ResetValue>,
    max_interval: Option<Duration>,
}

/// One reset header value, raw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetValue {
    header: String,
    format: ResetFormat,
    raw: Vec<u8>,
}

impl ResetValue {
    /// The header's name, as configured.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// How it is read.
    pub const fn format(&self) -> ResetFormat {
        self.format
    }

    /// The value as received, for the trail (lossy UTF-8, cut to
    /// [`MAX_KEPT_RAW`](crate::retry_after::MAX_KEPT_RAW) characters).
    pub fn raw(&self) -> String {
        keep(&self.raw)
    }
}

/// What one reset value says, measured at receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReading {
    /// Wait this long from receipt (before the local floor).
    Wait(Duration),
    /// Not used, and why.
    Ignored(ResetIgnored),
}

/// Why a reset value was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum ResetIgnored {
    /// Not in its format.
    Malformed,
    /// A Unix time, and no trusted calendar reading to measure it.
    NoTrustedCalendar,
    /// Longer than the configured maximum interval.
    OverMaxInterval,
}

impl fmt::Display for ResetIgnored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed",
            Self::NoTrustedCalendar => "a Unix time needs a trusted calendar clock",
            Self::OverMaxInterval => "longer than the maximum interval",
        })
    }
}

impl ResetHeaders {
    /// No values yet; a value longer than `max_interval` (if any) will be
    /// ignored.
    pub fn new(max_interval: Option<Duration>) -> Self {
        Self {
            values: Vec::new(),
            max_interval,
        }
    }

    /// Adds the raw value of one field line of `header`, read as `format`.
    pub fn push(&mut self, header: impl Into<String>, format: ResetFormat, raw: &[u8]) {
        self.values.push(ResetValue {
            header: header.into(),
            format,
            raw: raw.to_vec(),
        });
    }

    /// Whether no value was found.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether reading these values needs the calendar reading at receipt
    /// (a [`ResetFormat::Unix`] value): a caller reads its calendar clock
    /// only then.
    pub fn needs_calendar(&self) -> bool {
        self.values.iter().any(|v| v.format == ResetFormat::Unix)
    }

    /// The maximum interval, if any.
    pub const fn max_interval(&self) -> Option<Duration> {
        self.max_interval
    }

    /// Every value with its reading at receipt; `calendar` is the trusted
    /// calendar reading (needed by [`ResetFormat::Unix`]).
    pub fn read(
        &self,
        calendar: Option<SystemTime>,
    ) -> impl Iterator<Item = (&ResetValue, ResetReading)> + '_ {
        self.values.iter().map(move |value| {
            let reading = match read_value(value, calendar) {
                Ok(wait) if self.max_interval.is_some_and(|max| wait > max) => {
                    ResetReading::Ignored(ResetIgnored::OverMaxInterval)
                }
                Ok(wait) => ResetReading::Wait(wait),
                Err(why) => ResetReading::Ignored(why),
            };
            (value, reading)
        })
    }
}

fn read_value(value: &ResetValue, calendar: Option<SystemTime>) -> Result<Duration, ResetIgnored> {
    let raw = trim_ows(&value.raw);
    match value.format {
        ResetFormat::Seconds => digits(raw).map(Duration::from_secs),
        ResetFormat::Unix => {
            let at = digits(raw)?;
            let now = calendar.ok_or(ResetIgnored::NoTrustedCalendar)?;
            let now = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO);
            Ok(Duration::from_secs(at).saturating_sub(now))
        }
        ResetFormat::RateLimit => rate_limit(raw).map(Duration::from_secs),
    }
}

/// `1*DIGIT`, saturating.
fn digits(raw: &[u8]) -> Result<u64, ResetIgnored> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return Err(ResetIgnored::Malformed);
    }
    Ok(raw.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The IETF draft `RateLimit` field (see [`ResetFormat::RateLimit`]).
/// Hand-written: a structured-field parser would read the draft-08 form,
/// but not the older dictionary with bare members, and only `t`/`r`/`reset`
/// and `remaining` matter here.
fn rate_limit(raw: &[u8]) -> Result<u64, ResetIgnored> {
    // (wait, exhausted) per quota policy.
    let mut waits: Vec<(u64, Option<bool>)> = Vec::new();
    let mut dictionary_reset = None;
    let mut dictionary_remaining = None;
    for member in split_outside_quotes(raw, b',') {
        let mut parts = split_outside_quotes(member, b';').into_iter();
        let item = trim_ows(parts.next().unwrap_or_default());
        // The older dictionary: `limit=1, remaining=0, reset=5`.
        if let Some(value) = item.strip_prefix(b"reset=") {
            dictionary_reset = Some(digits(trim_ows(value))?);
            continue;
        }
        if let Some(value) = item.strip_prefix(b"remaining=") {
            dictionary_remaining = Some(digits(trim_ows(value))? == 0);
            continue;
        }
        // Draft 08: an item with parameters `r` and `t`.
        let (mut t, mut r) = (None, None);
        for param in parts {
            let param = trim_ows(param);
            if let Some(value) = param.strip_prefix(b"t=") {
                t = Some(digits(value)?);
            } else if let Some(value) = param.strip_prefix(b"r=") {
                r = Some(digits(value)? == 0);
            }
        }
        if let Some(t) = t {
            waits.push((t, r));
        }
    }
    if let Some(reset) = dictionary_reset {
        waits.push((reset, dictionary_remaining));
    }
    let exhausted = waits
        .iter()
        .filter(|(_, r)| *r == Some(true))
        .map(|(t, _)| *t)
        .max();
    exhausted
        .or_else(|| waits.iter().map(|(t, _)| *t).max())
        .ok_or(ResetIgnored::Malformed)
}

fn split_outside_quotes(raw: &[u8], separator: u8) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, byte) in raw.iter().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b if *b == separator && !quoted => {
                parts.push(&raw[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&raw[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(format: ResetFormat, raw: &str, calendar: Option<u64>) -> ResetReading {
        let mut headers = ResetHeaders::new(Some(Duration::from_secs(3600)));
        headers.push("h", format, raw.as_bytes());
        let calendar = calendar.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let (_, reading) = headers.read(calendar).next().unwrap();
        reading
    }

    fn wait(secs: u64) -> ResetReading {
        ResetReading::Wait(Duration::from_secs(secs))
    }

    const MALFORMED: ResetReading = ResetReading::Ignored(ResetIgnored::Malformed);

    #[test]
    fn seconds() {
        assert_eq!(read(ResetFormat::Seconds, "5", None), wait(5));
        assert_eq!(read(ResetFormat::Seconds, " 0 ", None), wait(0));
        for bad in ["2.5", "-1", "", "5s", "Fri, 17 Jul 2020 11:59:51 GMT"] {
            assert_eq!(read(ResetFormat::Seconds, bad, None), MALFORMED, "{bad}");
        }
        assert_eq!(
            read(ResetFormat::Seconds, "3601", None),
            ResetReading::Ignored(ResetIgnored::OverMaxInterval)
        );
    }

    #[test]
    fn unix_needs_the_calendar() {
        let now = Some(1_000_000_000);
        assert_eq!(read(ResetFormat::Unix, "1000000007", now), wait(7));
        assert_eq!(read(ResetFormat::Unix, "1000000000", now), wait(0));
        assert_eq!(read(ResetFormat::Unix, "999999999", now), wait(0));
        assert_eq!(read(ResetFormat::Unix, "1595320702.1234", now), MALFORMED);
        assert_eq!(
            read(ResetFormat::Unix, "1000000007", None),
            ResetReading::Ignored(ResetIgnored::NoTrustedCalendar)
        );
        assert_eq!(
            read(ResetFormat::Unix, "99999999999999999999999", now),
            ResetReading::Ignored(ResetIgnored::OverMaxInterval)
        );
    }

    #[test]
    fn the_ietf_field_in_its_drafts() {
        let rl = |raw| read(ResetFormat::RateLimit, raw, None);
        assert_eq!(rl(r#""clears";r=0;t=5"#), wait(5));
        assert_eq!(rl(r#""p";r=0;t=3"#), wait(3));
        assert_eq!(rl("limit=1, remaining=0, reset=5"), wait(5));
        assert_eq!(rl("limit=100, remaining=50, reset=50"), wait(50));
        // Two policies: the exhausted one counts, even if shorter.
        assert_eq!(rl(r#""day";r=500;t=80000, "minute";r=0;t=12"#), wait(12));
        assert_eq!(rl(r#""a";r=2;t=10, "b";r=1;t=20"#), wait(20));
        // A quoted name may hold the separators.
        assert_eq!(rl(r#""a,b;c";r=0;t=9"#), wait(9));
        for bad in [
            r#""p";r=0"#,
            r#""p";r=0;t=1.5"#,
            r#""p";t=-1"#,
            "limit=1, reset=soon",
            "",
        ] {
            assert_eq!(rl(bad), MALFORMED, "{bad}");
        }
    }
}
