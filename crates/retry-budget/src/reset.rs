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
    /// A Go-style duration until the reset (OpenAI's
    /// `x-ratelimit-reset-requests: 1s`, `x-ratelimit-reset-tokens: 6m0s`):
    /// one or more decimal numbers, each with an optional fraction and a
    /// unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), as `12ms`, `1.5s`,
    /// `1h2m3s`; a bare `0` is zero. No sign: a negative wait is malformed.
    /// A value too long for a [`Duration`] saturates.
    Duration,
    /// An RFC 3339 date-time when the limit resets (Anthropic's
    /// `anthropic-ratelimit-requests-reset: 2026-12-01T18:00:00Z`), with
    /// `Z` or a numeric offset, an optional fraction of a second, and a
    /// leap second (`:60`, read as the next minute's start): needs the
    /// trusted calendar reading at receipt, as [`ResetFormat::Unix`].
    Rfc3339,
}

impl ResetFormat {
    /// The `snake_case` name: `seconds`, `unix`, `rate_limit`,
    /// `duration`, `rfc3339`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Unix => "unix",
            Self::RateLimit => "rate_limit",
            Self::Duration => "duration",
            Self::Rfc3339 => "rfc3339",
        }
    }

    /// Whether a value in this format is a calendar time, which needs the
    /// trusted calendar reading at receipt ([`ResetFormat::Unix`],
    /// [`ResetFormat::Rfc3339`]).
    pub const fn is_calendar_time(self) -> bool {
        matches!(self, Self::Unix | Self::Rfc3339)
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
/// * a calendar time ([`ResetFormat::Unix`], [`ResetFormat::Rfc3339`])
///   needs the trusted calendar reading at receipt, and is ignored without
///   one; a time in the past is a zero wait (then the local floor), as for
///   a past `Retry-After` date;
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
    remaining: Option<Vec<u8>>,
    /// One limit's reset, pushed with [`ResetHeaders::push_limit`].
    limit: bool,
    /// The error body names this value's limit as the one hit.
    named: bool,
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

    /// The raw `remaining` value of the same limit, if one was sent
    /// (see [`ResetHeaders::push_limit`]).
    pub fn remaining(&self) -> Option<String> {
        self.remaining.as_deref().map(keep)
    }

    /// Whether the limit still has room: its `remaining` is a whole number
    /// above 0. Absent, `-1` (unknown, as Azure sends) or malformed is
    /// not known to have room.
    fn has_room(&self) -> bool {
        self.remaining
            .as_deref()
            .is_some_and(|raw| digits(trim_ows(raw)).is_ok_and(|n| n > 0))
    }

    /// Whether the error body named this value's limit as the one hit
    /// (see [`ResetHeaders::limit_named`]).
    pub const fn named(&self) -> bool {
        self.named
    }

    /// Why this value does not count, whatever it says, if it does not:
    /// its limit has room and the body did not name it.
    fn not_counted(&self) -> Option<ResetIgnored> {
        (!self.named && self.has_room()).then_some(ResetIgnored::LimitHasRoom)
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
    /// A calendar time (Unix or RFC 3339), and no trusted calendar reading
    /// to measure it.
    NoTrustedCalendar,
    /// Longer than the configured maximum interval.
    OverMaxInterval,
    /// Its limit is not spent: the same limit's `remaining` is above 0,
    /// so its reset is not what the server is waiting for.
    LimitHasRoom,
}

impl fmt::Display for ResetIgnored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed",
            Self::NoTrustedCalendar => "a calendar time needs a trusted calendar clock",
            Self::OverMaxInterval => "longer than the maximum interval",
            Self::LimitHasRoom => "its limit is not spent (remaining above 0)",
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
            remaining: None,
            limit: false,
            named: false,
        });
    }

    /// Adds the raw reset value of one limit with the raw value of that
    /// limit's `remaining` header, if the response sent one (OpenAI's
    /// `x-ratelimit-remaining-tokens` for `x-ratelimit-reset-tokens`). A
    /// reset counts only for a limit that is spent: when `remaining` is a
    /// whole number above 0 the reset is ignored
    /// ([`ResetIgnored::LimitHasRoom`]); `0`, `-1` (unknown), a malformed
    /// value or none leave it read as [`push`](Self::push) does.
    pub fn push_limit(
        &mut self,
        header: impl Into<String>,
        format: ResetFormat,
        raw: &[u8],
        remaining: Option<&[u8]>,
    ) {
        self.values.push(ResetValue {
            header: header.into(),
            format,
            raw: raw.to_vec(),
            remaining: remaining.map(<[u8]>::to_vec),
            limit: true,
            named: false,
        });
    }

    /// The response's error body names the limit whose reset is `header`
    /// (case-insensitive) as the one hit (OpenAI's and Groq's `Rate limit
    /// reached ... on tokens per min`): a reset counts only for a limit
    /// that is spent, which this one is whatever its `remaining` says (a
    /// request larger than what remains is refused with room left).
    /// The other limits keep the rule of [`push_limit`](Self::push_limit).
    /// A name that matches no limit's value changes nothing.
    pub fn limit_named(&mut self, header: &str) {
        for value in &mut self.values {
            if value.limit && value.header.eq_ignore_ascii_case(header) {
                value.named = true;
            }
        }
    }

    /// Whether no value was found.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether reading these values needs the calendar reading at receipt
    /// (a [`ResetFormat::Unix`] or [`ResetFormat::Rfc3339`] value): a
    /// caller reads its calendar clock only then.
    pub fn needs_calendar(&self) -> bool {
        self.values.iter().any(|v| v.format.is_calendar_time())
    }

    /// The maximum interval, if any.
    pub const fn max_interval(&self) -> Option<Duration> {
        self.max_interval
    }

    /// Every value with its reading at receipt; `calendar` is the trusted
    /// calendar reading (needed by [`ResetFormat::Unix`] and
    /// [`ResetFormat::Rfc3339`]).
    pub fn read(
        &self,
        calendar: Option<SystemTime>,
    ) -> impl Iterator<Item = (&ResetValue, ResetReading)> + '_ {
        self.values.iter().map(move |value| {
            if let Some(why) = value.not_counted() {
                return (value, ResetReading::Ignored(why));
            }
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
        ResetFormat::Duration => go_duration(raw),
        ResetFormat::Rfc3339 => {
            let at = rfc3339(raw)?;
            let now = calendar.ok_or(ResetIgnored::NoTrustedCalendar)?;
            Ok(at.duration_since(now).unwrap_or(Duration::ZERO))
        }
    }
}

/// A Go-style duration (see [`ResetFormat::Duration`]), saturating.
/// Hand-written: humantime reads neither fractions (`1.5s`) nor `µs`, and
/// accepts spaces and units (`min`, `sec`, days) Go never writes.
fn go_duration(raw: &[u8]) -> Result<Duration, ResetIgnored> {
    if raw == b"0" {
        return Ok(Duration::ZERO);
    }
    if raw.is_empty() {
        return Err(ResetIgnored::Malformed);
    }
    let mut rest = raw;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix(b".") {
            Some(after) => {
                let len = after.iter().take_while(|b| b.is_ascii_digit()).count();
                after.split_at(len)
            }
            None => (&[][..], after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(ResetIgnored::Malformed);
        }
        let unit_len = after
            .iter()
            .take_while(|b| !b.is_ascii_digit() && **b != b'.')
            .count();
        let (unit, after) = after.split_at(unit_len);
        let nanos_per: u128 = match unit {
            b"ns" => 1,
            // `µs` with U+00B5 MICRO SIGN or U+03BC GREEK SMALL LETTER MU.
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err(ResetIgnored::Malformed),
        };
        let whole = whole.iter().fold(0u128, |acc, d| {
            acc.saturating_mul(10).saturating_add(u128::from(d - b'0'))
        });
        // The fraction's first 20 digits are far below a nanosecond's
        // precision for every unit; the rest only has to be digits.
        let (mut numerator, mut denominator) = (0u128, 1u128);
        for d in fraction.iter().take(20) {
            numerator = numerator * 10 + u128::from(d - b'0');
            denominator *= 10;
        }
        let part = whole
            .saturating_mul(nanos_per)
            .saturating_add(numerator.saturating_mul(nanos_per) / denominator);
        total = total.saturating_add(part);
        rest = after;
    }
    Ok(nanos_to_duration(total))
}

/// Nanoseconds as a [`Duration`], saturating at [`Duration::MAX`].
fn nanos_to_duration(nanos: u128) -> Duration {
    let secs = nanos / 1_000_000_000;
    match u64::try_from(secs) {
        // The remainder is below 10^9: it fits.
        Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
        Err(_) => Duration::MAX,
    }
}

/// An RFC 3339 `date-time` (section 5.6): `YYYY-MM-DDTHH:MM:SS[.frac]`
/// then `Z` or `+HH:MM` / `-HH:MM`; `T` and `Z` in either case; second
/// `60` (a leap second) is the next minute's start. A time before the Unix
/// epoch is malformed, as an HTTP-date before it is. Hand-written: the
/// date-time crates that read it (chrono, time, jiff) would each be a
/// dependency for one function, and humantime reads only `Z`.
fn rfc3339(raw: &[u8]) -> Result<SystemTime, ResetIgnored> {
    const MALFORMED: ResetIgnored = ResetIgnored::Malformed;
    let number = |bytes: &[u8]| -> Result<u32, ResetIgnored> {
        if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
            return Err(MALFORMED);
        }
        Ok(bytes
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0')))
    };
    if raw.len() < 20 || !raw.is_ascii() {
        return Err(MALFORMED);
    }
    let (date, rest) = raw.split_at(10);
    let (time, zone) = rest.split_at(9);
    if date[4] != b'-' || date[7] != b'-' || !matches!(time[0], b'T' | b't') {
        return Err(MALFORMED);
    }
    if time[3] != b':' || time[6] != b':' {
        return Err(MALFORMED);
    }
    let (year, month, day) = (
        number(&date[..4])?,
        number(&date[5..7])?,
        number(&date[8..10])?,
    );
    let (hour, minute, second) = (
        number(&time[1..3])?,
        number(&time[4..6])?,
        number(&time[7..9])?,
    );
    let (nanos, zone) = match zone.strip_prefix(b".") {
        Some(after) => {
            let len = after.iter().take_while(|b| b.is_ascii_digit()).count();
            if len == 0 {
                return Err(MALFORMED);
            }
            let (digits, zone) = after.split_at(len);
            let nanos = digits
                .iter()
                .chain(std::iter::repeat(&b'0'))
                .take(9)
                .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
            (nanos, zone)
        }
        None => (0, zone),
    };
    let offset: i64 = match zone {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (number(&[*h1, *h2])?, number(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return Err(MALFORMED);
            }
            let seconds = i64::from(h * 3600 + m * 60);
            if *sign == b'+' {
                seconds
            } else {
                -seconds
            }
        }
        _ => return Err(MALFORMED),
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return Err(MALFORMED),
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return Err(MALFORMED);
    }
    let local = days_from_civil(i64::from(year), month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second);
    let utc = u64::try_from(local - offset).map_err(|_| MALFORMED)?;
    Ok(SystemTime::UNIX_EPOCH + Duration::new(utc, nanos))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
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
    fn a_reset_counts_only_for_a_limit_that_is_spent() {
        let limit = |remaining: Option<&str>| {
            let mut headers = ResetHeaders::new(None);
            headers.push_limit(
                "x-ratelimit-reset-requests",
                ResetFormat::Duration,
                b"2m59.56s",
                remaining.map(str::as_bytes),
            );
            let reading = headers.read(None).next().unwrap().1;
            reading
        };
        let full = ResetReading::Wait(Duration::from_millis(179_560));
        let room = ResetReading::Ignored(ResetIgnored::LimitHasRoom);
        assert_eq!(limit(Some("14370")), room);
        assert_eq!(limit(Some(" 1 ")), room);
        // Spent, unknown (`-1`), malformed or not sent: the reset counts.
        for remaining in [Some("0"), Some("-1"), Some("lots"), Some(""), None] {
            assert_eq!(limit(remaining), full, "{remaining:?}");
        }
        let mut headers = ResetHeaders::new(None);
        headers.push_limit("r", ResetFormat::Seconds, b"x", Some(b"5"));
        let (value, reading) = headers.read(None).next().unwrap();
        assert_eq!(reading, room, "room wins over malformed");
        assert_eq!(value.remaining().as_deref(), Some("5"));
    }

    #[test]
    fn a_limit_the_body_names_counts_with_room_left() {
        let headers = |requests_left: Option<&str>, tokens_left: Option<&str>| {
            let mut headers = ResetHeaders::new(None);
            headers.push_limit(
                "x-ratelimit-reset-requests",
                ResetFormat::Duration,
                b"2m59.56s",
                requests_left.map(str::as_bytes),
            );
            headers.push_limit(
                "x-ratelimit-reset-tokens",
                ResetFormat::Duration,
                b"7.5s",
                tokens_left.map(str::as_bytes),
            );
            headers.push("retryDelay (body)", ResetFormat::Duration, b"1s");
            headers
        };
        let readings = |headers: &ResetHeaders| -> Vec<ResetReading> {
            headers.read(None).map(|(_, reading)| reading).collect()
        };
        let requests = ResetReading::Wait(Duration::from_millis(179_560));
        let tokens = ResetReading::Wait(Duration::from_millis(7_500));
        let room = ResetReading::Ignored(ResetIgnored::LimitHasRoom);

        // Groq's tokens-per-minute 429: a request larger than the 966
        // tokens left; thousands of requests left.
        let mut groq = headers(Some("14370"), Some("966"));
        assert_eq!(readings(&groq), [room, room, wait(1)]);
        groq.limit_named("X-RateLimit-Reset-Tokens");
        assert_eq!(readings(&groq), [room, tokens, wait(1)]);
        assert!(groq.read(None).nth(1).unwrap().0.named());

        // Another limit keeps its own rule: spent or unknown, it counts.
        let mut unknown = headers(None, None);
        unknown.limit_named("x-ratelimit-reset-tokens");
        assert_eq!(readings(&unknown), [requests, tokens, wait(1)]);
        let mut both = headers(Some("0"), Some("12"));
        both.limit_named("x-ratelimit-reset-tokens");
        assert_eq!(readings(&both), [requests, tokens, wait(1)]);

        // A name that matches no limit (or a value that is no limit's)
        // changes nothing.
        let mut none = headers(None, Some("5"));
        none.limit_named("x-ratelimit-reset-other");
        none.limit_named("retryDelay (body)");
        assert_eq!(readings(&none), [requests, room, wait(1)]);
    }

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

    fn ms(millis: u64) -> ResetReading {
        ResetReading::Wait(Duration::from_millis(millis))
    }

    #[test]
    fn go_durations_with_every_unit() {
        let d = |raw| {
            let mut headers = ResetHeaders::new(None);
            headers.push("h", ResetFormat::Duration, raw);
            let (_, reading) = headers.read(None).next().unwrap();
            reading
        };
        let nanos = |n| ResetReading::Wait(Duration::from_nanos(n));
        assert_eq!(d(b"0"), wait(0));
        assert_eq!(d(b"0s"), wait(0));
        assert_eq!(d(b"250ns"), nanos(250));
        assert_eq!(d(b"7us"), nanos(7_000));
        assert_eq!(d("7µs".as_bytes()), nanos(7_000));
        assert_eq!(d("7μs".as_bytes()), nanos(7_000));
        assert_eq!(d(b"12ms"), ms(12));
        assert_eq!(d(b"1s"), wait(1));
        assert_eq!(d(b"6m0s"), wait(360));
        assert_eq!(d(b"2h"), wait(7200));
        assert_eq!(d(b"1h2m3s"), wait(3723));
        assert_eq!(d(b"1h2m3s4ms5us6ns"), nanos(3_723_004_005_006));
        assert_eq!(d(b" 20ms\t"), ms(20));
        // Fractions, with or without a whole part.
        assert_eq!(d(b"1.5s"), ms(1500));
        assert_eq!(d(b".5s"), ms(500));
        assert_eq!(d(b"1.s"), wait(1));
        assert_eq!(d(b"0.25m"), wait(15));
        assert_eq!(d(b"1.5h30m"), wait(7200));
        assert_eq!(d(b"2.0000000001s"), wait(2));
        assert_eq!(d(b"1.000000000000000000000000000009s"), wait(1));
        assert_eq!(d(b"0.0000015ms"), nanos(1));
        // Overflow saturates (then a maximum interval may ignore it).
        assert_eq!(
            d(b"99999999999999999999999999999999999999999h"),
            ResetReading::Wait(Duration::MAX)
        );
        assert_eq!(
            d(b"9999999999999999999h9999999999999999999h"),
            ResetReading::Wait(Duration::MAX)
        );
        assert_eq!(
            read(ResetFormat::Duration, "2h", None),
            ResetReading::Ignored(ResetIgnored::OverMaxInterval)
        );
        for bad in [
            "", "5", "1.5", "s", ".s", "..5s", "1..5s", "-1s", "+1s", "1S", "1 s", "1h 2m", "1sec",
            "1d", "1min", "5s.", "1s2", "0x10s", "NaN", "inf", "１s", "1e3ms", "1,5s",
        ] {
            assert_eq!(d(bad.as_bytes()), MALFORMED, "{bad:?}");
        }
        assert_eq!(d(b"\xff1s"), MALFORMED);
    }

    #[test]
    fn rfc3339_times_need_the_calendar() {
        // 2026-12-01T18:00:00Z is 1796148000.
        let at = 1_796_148_000;
        let r = |raw: &str, now| read(ResetFormat::Rfc3339, raw, Some(now));
        assert_eq!(r("2026-12-01T18:00:00Z", at - 7), wait(7));
        assert_eq!(r("2026-12-01t18:00:00z", at - 7), wait(7));
        assert_eq!(r(" 2026-12-01T18:00:00Z ", at - 7), wait(7));
        // In the past, or now: no wait.
        assert_eq!(r("2026-12-01T18:00:00Z", at), wait(0));
        assert_eq!(r("2026-12-01T18:00:00Z", at + 100), wait(0));
        // Offsets: the same instant.
        assert_eq!(r("2026-12-01T19:30:00+01:30", at - 7), wait(7));
        assert_eq!(r("2026-12-01T13:00:00-05:00", at - 7), wait(7));
        assert_eq!(r("2026-12-02T17:59:00+23:59", at - 7), wait(7));
        // Fractions of a second.
        assert_eq!(r("2026-12-01T18:00:00.5Z", at - 1), ms(1500));
        assert_eq!(r("2026-12-01T18:00:00.250000Z", at - 1), ms(1250));
        assert_eq!(
            r("2026-12-01T18:00:00.1234567891234Z", at),
            ResetReading::Wait(Duration::from_nanos(123_456_789))
        );
        // A leap second is the next minute's start.
        assert_eq!(r("2016-12-31T23:59:60Z", 1_483_228_800 - 3), wait(3));
        // Leap years.
        assert_eq!(r("2024-02-29T00:00:00Z", 1_709_164_800 - 1), wait(1));
        assert_eq!(r("2000-02-29T00:00:00Z", 951_782_400 - 1), wait(1));
        // Without a trusted calendar: ignored, never read as zero.
        assert_eq!(
            read(ResetFormat::Rfc3339, "2026-12-01T18:00:00Z", None),
            ResetReading::Ignored(ResetIgnored::NoTrustedCalendar)
        );
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T18:00:00",
            "2026-12-01 18:00:00Z",
            "2026-12-01T18:00Z",
            "2026-12-01T18:00:00.Z",
            "2026-12-01T18:00:00+0100",
            "2026-12-01T18:00:00+01",
            "2026-12-01T18:00:00 Z",
            "2026-12-01T18:00:00ZZ",
            "2026-13-01T18:00:00Z",
            "2026-00-01T18:00:00Z",
            "2026-11-31T18:00:00Z",
            "2025-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-12-00T18:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T18:60:00Z",
            "2026-12-01T18:00:61Z",
            "2026-12-01T18:00:00+24:00",
            "2026-12-01T18:00:00+01:60",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:30:00+01:00",
            "+2026-12-01T18:00:00Z",
            "26-12-01T18:00:00Z",
            "2026/12/01T18:00:00Z",
            "2026-1a-01T18:00:00Z",
            "2026-12-01T18:00:00.5xZ",
            "２026-12-01T18:00:00Z",
            "Tue, 01 Dec 2026 18:00:00 GMT",
            "1796148000",
        ] {
            assert_eq!(r(bad, at), MALFORMED, "{bad:?}");
        }
        // The epoch itself and the far future are fine.
        assert_eq!(r("1970-01-01T00:00:00Z", 0), wait(0));
        assert_eq!(
            read(ResetFormat::Rfc3339, "9999-12-31T23:59:59Z", Some(0)),
            ResetReading::Ignored(ResetIgnored::OverMaxInterval)
        );
    }

    #[test]
    fn calendar_formats() {
        assert!(ResetFormat::Unix.is_calendar_time());
        assert!(ResetFormat::Rfc3339.is_calendar_time());
        assert!(!ResetFormat::Duration.is_calendar_time());
        let mut headers = ResetHeaders::new(None);
        headers.push("x-ratelimit-reset-tokens", ResetFormat::Duration, b"6m0s");
        assert!(!headers.needs_calendar());
        headers.push(
            "anthropic-ratelimit-requests-reset",
            ResetFormat::Rfc3339,
            b"x",
        );
        assert!(headers.needs_calendar());
        assert_eq!(ResetFormat::Duration.to_string(), "duration");
        assert_eq!(ResetFormat::Rfc3339.as_str(), "rfc3339");
    }
}
