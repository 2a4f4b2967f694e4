//! HTTP-dates (RFC 9110 §5.6.7) as a `Retry-After` carries them: see [`HttpDate`].

use std::fmt;
use std::time::{Duration, SystemTime};

/// An HTTP-date (RFC 9110 §5.6.7) as a `Retry-After` carries it.
///
/// A recipient must accept three forms: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37
/// GMT`) and asctime (`Sun Nov  6 08:49:37 1994`), a second of 60 (a leap
/// second) included. [`httpdate`] reads the two forms with a four-digit year
/// and is used for them. It cannot express two rules, so they are
/// hand-written here:
///
/// * an RFC 850 **two-digit year** is placed by the 50-year rule: the latest
///   year with those two digits that is not more than 50 years after the
///   calendar reading at receipt. That needs the calendar, so such a date
///   keeps its fields until [`HttpDate::placed`] is given the reading
///   (`httpdate` reads every two-digit year as 19xx);
/// * a **leap second** `23:59:60` (RFC 9110 allows it; `httpdate` rejects
///   it) is the second after `23:59:59`, the next minute's `:00` on the
///   POSIX time scale, so its wait is never shorter than the server meant.
///
/// RFC 9110 also encourages recipients to be robust. Exactly these
/// near-misses are accepted, each marked [`Tolerated`] so that the trail can
/// show the raw text:
///
/// | near-miss | example |
/// |---|---|
/// | no weekday | `03 Jun 2019 12:00:00 GMT` |
/// | a wrong weekday (the date decides) | `Thursday, 06-Nov-75 08:49:37 GMT` placed in 2075, a Wednesday |
/// | a weekday spelt in the other form's style | `Monday, 03 Jun 2019 12:00:00 GMT` |
/// | a one-digit day | `Mon, 3 Jun 2019 12:00:00 GMT`, `Mon Jun 3 11:30:12 2019` |
/// | the zone `UT`, `UTC` or `Z` instead of `GMT` | `Mon, 03 Jun 2019 12:00:00 UTC` |
/// | a numeric offset, converted exactly | `Mon, 03 Jun 2019 14:00:00 +0200` is 12:00 GMT |
///
/// Everything else is invalid: lower- or upper-case month or weekday names,
/// a missing zone, other zone names (`PST`), ISO 8601, extra or missing
/// spaces, an impossible day, years before 1970 or after 9999.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use retry_budget::http_date::HttpDate;
///
/// let at = |s: &str| SystemTime::UNIX_EPOCH + Duration::from_secs(s.parse().unwrap());
/// let strict = HttpDate::parse("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
/// assert_eq!(strict.placed(None), Some(at("784111777")));
/// assert!(strict.tolerated(None).is_empty());
///
/// // An RFC 850 two-digit year needs the calendar reading at receipt.
/// let rfc850 = HttpDate::parse("Sunday, 06-Nov-94 08:49:37 GMT").unwrap();
/// assert_eq!(rfc850.placed(None), None);
/// let in_2026 = at("1780000000");
/// assert_eq!(rfc850.placed(Some(in_2026)), Some(at("784111777")));
///
/// // A near-miss is accepted and marked.
/// let lenient = HttpDate::parse("Mon, 3 Jun 2019 12:00:00 UTC").unwrap();
/// assert_eq!(lenient.tolerated(None).to_string(), "one-digit day, zone UTC");
/// assert!(HttpDate::parse("mon, 03 jun 2019 12:00:00 GMT").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpDate {
    when: When,
    tolerated: Tolerated,
    /// The text as received, kept when the date is not plain (a near-miss,
    /// or a two-digit year).
    raw: Option<Box<str>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    /// Placed at parse time (a four-digit year).
    At(SystemTime),
    /// An RFC 850 two-digit year, placed against the calendar at receipt.
    TwoDigitYear {
        yy: u8,
        fields: Fields,
        /// The weekday given (0 = Sunday), checked once the year is known.
        weekday: Option<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    /// East of UTC, in seconds.
    offset: i32,
}

/// The near-misses a date was accepted with (empty for a date in one of the
/// three forms RFC 9110 requires). Its `Display` lists them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tolerated(u8);

impl Tolerated {
    const NO_WEEKDAY: u8 = 1;
    const WRONG_WEEKDAY: u8 = 1 << 1;
    const WEEKDAY_SPELLING: u8 = 1 << 2;
    const ONE_DIGIT_DAY: u8 = 1 << 3;
    const ZONE_UT: u8 = 1 << 4;
    const ZONE_UTC: u8 = 1 << 5;
    const ZONE_Z: u8 = 1 << 6;
    const NUMERIC_OFFSET: u8 = 1 << 7;

    const NAMES: [(u8, &'static str); 8] = [
        (Self::NO_WEEKDAY, "no weekday"),
        (Self::WRONG_WEEKDAY, "wrong weekday"),
        (Self::WEEKDAY_SPELLING, "weekday spelt in another form"),
        (Self::ONE_DIGIT_DAY, "one-digit day"),
        (Self::ZONE_UT, "zone UT"),
        (Self::ZONE_UTC, "zone UTC"),
        (Self::ZONE_Z, "zone Z"),
        (Self::NUMERIC_OFFSET, "numeric offset"),
    ];

    /// Whether the date was in a required form, nothing tolerated.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    const fn with(self, flag: u8) -> Self {
        Self(self.0 | flag)
    }
}

impl fmt::Display for Tolerated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.0 & flag != 0 {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl From<SystemTime> for HttpDate {
    fn from(at: SystemTime) -> Self {
        Self {
            when: When::At(at),
            tolerated: Tolerated::default(),
            raw: None,
        }
    }
}

impl HttpDate {
    /// Reads an HTTP-date, strict forms and the documented near-misses
    /// (see [`HttpDate`]); `None` for anything else. Optional
    /// whitespace around it must already be trimmed.
    pub fn parse(text: &str) -> Option<Self> {
        if !text.is_ascii() {
            return None;
        }
        // The two forms with a four-digit year, strictly, by httpdate. An
        // RFC 850 date (the only form with `-`, besides a negative offset)
        // never goes there: httpdate reads its two-digit year as 19xx.
        if !text.contains('-') {
            if let Ok(at) = httpdate::parse_http_date(text) {
                return Some(at.into());
            }
        }
        let parsed = by_hand(text.as_bytes())?;
        let raw = match parsed.when {
            When::TwoDigitYear { .. } => true,
            When::At(_) => !parsed.tolerated.is_empty(),
        };
        Some(Self {
            raw: raw.then(|| text.into()),
            ..parsed
        })
    }

    /// The date on the calendar. A four-digit year needs nothing; an RFC 850
    /// two-digit year needs the calendar reading at receipt (`None`
    /// without one).
    pub fn placed(&self, calendar: Option<SystemTime>) -> Option<SystemTime> {
        match self.when {
            When::At(at) => Some(at),
            When::TwoDigitYear { yy, fields, .. } => {
                let (_, secs) = place(yy, fields, calendar?);
                Some(from_unix(secs))
            }
        }
    }

    /// What was tolerated to read it. A wrong weekday on a two-digit year
    /// shows only once the year is placed (`calendar` given).
    pub fn tolerated(&self, calendar: Option<SystemTime>) -> Tolerated {
        match (self.when, calendar) {
            (
                When::TwoDigitYear {
                    yy,
                    fields,
                    weekday: Some(given),
                },
                Some(now),
            ) => {
                // The weekday of the date as written (a leap second or an
                // offset does not move it to another day).
                let (year, _) = place(yy, fields, now);
                if weekday_of(days_from_civil(year, fields.month, fields.day)) != given {
                    return self.tolerated.with(Tolerated::WRONG_WEEKDAY);
                }
                self.tolerated
            }
            _ => self.tolerated,
        }
    }

    /// The text as received, kept for a date that is not plain (a
    /// near-miss, or a two-digit year).
    pub fn raw(&self) -> Option<&str> {
        self.raw.as_deref()
    }

    /// Whether the date can be placed without a calendar reading.
    pub const fn is_placed(&self) -> bool {
        matches!(self.when, When::At(_))
    }
}

const SHORT_DAYS: [&[u8]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
const LONG_DAYS: [&[u8]; 7] = [
    b"Sunday",
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// A weekday name: its number (0 = Sunday) and whether it is the long form.
pub(crate) fn weekday_name(word: &[u8]) -> Option<(u8, bool)> {
    let short = SHORT_DAYS.iter().position(|d| *d == word);
    let long = LONG_DAYS.iter().position(|d| *d == word);
    match (short, long) {
        (Some(n), _) => Some((n as u8, false)),
        (None, Some(n)) => Some((n as u8, true)),
        (None, None) => None,
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn letters(&mut self) -> &'a [u8] {
        let start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_alphabetic) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// A run of digits; its value and length.
    fn digits(&mut self) -> Option<(u32, usize)> {
        let start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_digit) && self.i - start < 4 {
            self.i += 1;
        }
        let run = &self.s[start..self.i];
        if run.is_empty() || self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let value = run
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
        Some((value, run.len()))
    }

    fn exactly(&mut self, len: usize) -> Option<u32> {
        match self.digits()? {
            (value, n) if n == len => Some(value),
            _ => None,
        }
    }

    fn month(&mut self) -> Option<u8> {
        let word = self.letters();
        MONTHS.iter().position(|m| *m == word).map(|m| m as u8 + 1)
    }

    fn done(&self) -> bool {
        self.i == self.s.len()
    }
}

/// The hand-written reading of [`HttpDate`]'s grammar: the three forms,
/// two-digit years and the near-misses. See [`HttpDate`] for why this is
/// not `httpdate`.
fn by_hand(s: &[u8]) -> Option<HttpDate> {
    let mut c = Cursor { s, i: 0 };
    let mut tolerated = Tolerated::default();
    let word = c.letters();
    let weekday = weekday_name(word);
    if word.is_empty() || weekday.is_none() {
        // No weekday: a day (IMF-fixdate or RFC 850) or a month (asctime).
        tolerated = tolerated.with(Tolerated::NO_WEEKDAY);
        c.i = 0;
        if word.is_empty() {
            return day_first(c, None, tolerated);
        }
        return asctime(c, None, tolerated);
    }
    if c.eat(b", ") {
        day_first(c, weekday, tolerated)
    } else if c.eat(b" ") {
        asctime(c, weekday, tolerated)
    } else {
        None
    }
}

/// IMF-fixdate or RFC 850, after the weekday and its comma.
fn day_first(
    mut c: Cursor<'_>,
    weekday: Option<(u8, bool)>,
    mut tolerated: Tolerated,
) -> Option<HttpDate> {
    let (day, len) = c.digits()?;
    match len {
        2 => {}
        1 => tolerated = tolerated.with(Tolerated::ONE_DIGIT_DAY),
        _ => return None,
    }
    if c.eat(b" ") {
        // IMF-fixdate: short weekday, four-digit year.
        if weekday.is_some_and(|(_, long)| long) {
            tolerated = tolerated.with(Tolerated::WEEKDAY_SPELLING);
        }
        let month = c.month()?;
        let year = (c.eat(b" ").then_some(())).and_then(|()| c.exactly(4))?;
        let (h, m, sec) = time(&mut c)?;
        let offset = zone(&mut c, &mut tolerated)?;
        let fields = fields(month, day, h, m, sec, offset)?;
        four_digit(year, fields, weekday, tolerated)
    } else if c.eat(b"-") {
        // RFC 850: long weekday, two-digit year.
        if weekday.is_some_and(|(_, long)| !long) {
            tolerated = tolerated.with(Tolerated::WEEKDAY_SPELLING);
        }
        let month = c.month()?;
        let yy = (c.eat(b"-").then_some(())).and_then(|()| c.exactly(2))?;
        let (h, m, sec) = time(&mut c)?;
        let offset = zone(&mut c, &mut tolerated)?;
        let fields = fields(month, day, h, m, sec, offset)?;
        Some(HttpDate {
            when: When::TwoDigitYear {
                yy: yy as u8,
                fields,
                weekday: weekday.map(|(n, _)| n),
            },
            tolerated,
            raw: None,
        })
    } else {
        None
    }
}

/// asctime, after the weekday and its space: `Nov  6 08:49:37 1994`.
fn asctime(
    mut c: Cursor<'_>,
    weekday: Option<(u8, bool)>,
    mut tolerated: Tolerated,
) -> Option<HttpDate> {
    if weekday.is_some_and(|(_, long)| long) {
        tolerated = tolerated.with(Tolerated::WEEKDAY_SPELLING);
    }
    let month = c.month()?;
    if !c.eat(b" ") {
        return None;
    }
    let padded = c.eat(b" ");
    let (day, len) = c.digits()?;
    match (padded, len) {
        (true, 1) | (false, 2) => {}
        (false, 1) => tolerated = tolerated.with(Tolerated::ONE_DIGIT_DAY),
        _ => return None,
    }
    let (h, m, sec) = time(&mut c)?;
    let year = (c.eat(b" ").then_some(())).and_then(|()| c.exactly(4))?;
    if !c.done() {
        return None;
    }
    let fields = fields(month, day, h, m, sec, 0)?;
    four_digit(year, fields, weekday, tolerated)
}

/// ` HH:MM:SS`, second 60 allowed.
fn time(c: &mut Cursor<'_>) -> Option<(u32, u32, u32)> {
    if !c.eat(b" ") {
        return None;
    }
    let h = c.exactly(2)?;
    let m = c.eat(b":").then_some(()).and_then(|()| c.exactly(2))?;
    let s = c.eat(b":").then_some(()).and_then(|()| c.exactly(2))?;
    (h <= 23 && m <= 59 && s <= 60).then_some((h, m, s))
}

/// ` GMT` (strict) or a tolerated zone, then the end: the offset east of
/// UTC in seconds.
fn zone(c: &mut Cursor<'_>, tolerated: &mut Tolerated) -> Option<i32> {
    if !c.eat(b" ") {
        return None;
    }
    let rest = &c.s[c.i..];
    let offset = match rest {
        b"GMT" => 0,
        b"UT" => {
            *tolerated = tolerated.with(Tolerated::ZONE_UT);
            0
        }
        b"UTC" => {
            *tolerated = tolerated.with(Tolerated::ZONE_UTC);
            0
        }
        b"Z" => {
            *tolerated = tolerated.with(Tolerated::ZONE_Z);
            0
        }
        [sign @ (b'+' | b'-'), digits @ ..]
            if digits.len() == 4 && digits.iter().all(u8::is_ascii_digit) =>
        {
            let n = |i: usize| i32::from(digits[i] - b'0');
            let (hh, mm) = (n(0) * 10 + n(1), n(2) * 10 + n(3));
            if hh > 23 || mm > 59 {
                return None;
            }
            *tolerated = tolerated.with(Tolerated::NUMERIC_OFFSET);
            let east = hh * 3600 + mm * 60;
            if *sign == b'-' {
                -east
            } else {
                east
            }
        }
        _ => return None,
    };
    c.i = c.s.len();
    Some(offset)
}

fn fields(month: u8, day: u32, hour: u32, minute: u32, second: u32, offset: i32) -> Option<Fields> {
    // The day is checked against the month here, and against February of
    // the actual year once the year is known.
    let longest = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][usize::from(month - 1)];
    if day == 0 || day > longest {
        return None;
    }
    Some(Fields {
        month,
        day: day as u8,
        hour: hour as u8,
        minute: minute as u8,
        second: second as u8,
        offset,
    })
}

fn four_digit(
    year: u32,
    fields: Fields,
    weekday: Option<(u8, bool)>,
    mut tolerated: Tolerated,
) -> Option<HttpDate> {
    if !(1970..=9999).contains(&year) || !day_exists(i64::from(year), fields.month, fields.day) {
        return None;
    }
    let secs = unix_seconds(i64::from(year), fields);
    if secs < 0 {
        return None;
    }
    if let Some((given, _)) = weekday {
        // The weekday of the date as written (a leap second or an offset
        // does not move it to another day).
        if weekday_of(days_from_civil(i64::from(year), fields.month, fields.day)) != given {
            tolerated = tolerated.with(Tolerated::WRONG_WEEKDAY);
        }
    }
    Some(HttpDate {
        when: When::At(from_unix(secs)),
        tolerated,
        raw: None,
    })
}

fn day_exists(year: i64, month: u8, day: u8) -> bool {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    month != 2 || day <= 28 || (day == 29 && leap)
}

/// Seconds since the epoch (UTC) of these fields in `year`.
fn unix_seconds(year: i64, f: Fields) -> i64 {
    days_from_civil(year, f.month, f.day) * 86_400
        + i64::from(f.hour) * 3600
        + i64::from(f.minute) * 60
        + i64::from(f.second)
        - i64::from(f.offset)
}

/// The 50-year rule (RFC 9110 §5.6.7): the latest year ending in `yy` whose
/// date is not more than 50 years after `now`. Returns the year and the
/// date's seconds since the epoch (never before the epoch).
fn place(yy: u8, f: Fields, now: SystemTime) -> (i64, i64) {
    // The calendar reading is an input (an injected calendar, a host clock
    // set wildly wrong): clamped to the last second of year 9999, so that the
    // year arithmetic below cannot overflow.
    const LAST_SECOND_OF_9999: i64 = 253_402_300_799;
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .min(LAST_SECOND_OF_9999);
    let (ny, nm, nd) = civil_from_days(now.div_euclid(86_400));
    let limit = days_from_civil(ny + 50, nm, nd) * 86_400 + now.rem_euclid(86_400);
    let mut year = (ny.div_euclid(100) + 1) * 100 + i64::from(yy);
    let mut secs = unix_seconds(year, f);
    while secs > limit && year >= 100 {
        year -= 100;
        secs = unix_seconds(year, f);
    }
    (year, secs.max(0))
}

fn from_unix(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// 0 = Sunday; day 0 (1970-01-01) was a Thursday.
fn weekday_of(days: i64) -> u8 {
    (days + 4).rem_euclid(7) as u8
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u8, day: u8) -> i64 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(date: &str) -> i64 {
        let at = httpdate::parse_http_date(date).unwrap();
        at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
    }

    fn at(secs: i64) -> SystemTime {
        from_unix(secs)
    }

    #[test]
    fn a_two_digit_year_against_a_calendar_at_the_end_of_time_does_not_panic() {
        let date = HttpDate::parse("Thursday, 06-Nov-75 08:49:37 GMT").unwrap();
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
        let placed = date.placed(Some(far)).expect("placed");
        // Read against the clamped calendar (year 9999): the latest '75 not
        // more than 50 years after it.
        assert!(placed > at(unix("Sun, 06 Nov 1994 08:49:37 GMT")));
    }

    #[test]
    fn civil_round_trips() {
        for days in [-719_468, -1, 0, 1, 10_957, 19_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{days}");
        }
        assert_eq!(weekday_of(0), 4);
    }

    #[test]
    fn strict_forms_agree_with_httpdate() {
        let expected = at(unix("Sun, 06 Nov 1994 08:49:37 GMT"));
        for raw in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            let date = HttpDate::parse(raw).unwrap();
            assert_eq!(date.placed(None), Some(expected), "{raw}");
            assert!(date.tolerated(None).is_empty(), "{raw}");
            assert_eq!(date.raw(), None);
        }
        // By hand, the same answer as httpdate for a strict form.
        let by_hand = by_hand(b"Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(by_hand.placed(None), Some(expected));
        assert!(by_hand.tolerated(None).is_empty());
    }

    #[test]
    fn leap_second_is_the_next_minute() {
        let date = HttpDate::parse("Sat, 31 Dec 2016 23:59:60 GMT").unwrap();
        assert_eq!(
            date.placed(None),
            Some(at(unix("Sun, 01 Jan 2017 00:00:00 GMT")))
        );
        assert!(date.tolerated(None).is_empty());
    }

    #[test]
    fn two_digit_years_follow_the_fifty_year_rule() {
        let now = at(unix("Mon, 30 Nov 2026 12:00:00 GMT"));
        let placed = |raw: &str| HttpDate::parse(raw).unwrap().placed(Some(now)).unwrap();
        // 2075 is 49 years ahead: kept.
        assert_eq!(
            placed("Wednesday, 06-Nov-75 08:49:37 GMT"),
            at(unix("Wed, 06 Nov 2075 08:49:37 GMT"))
        );
        // 2094 is more than 50 years ahead: 1994.
        assert_eq!(
            placed("Sunday, 06-Nov-94 08:49:37 GMT"),
            at(unix("Sun, 06 Nov 1994 08:49:37 GMT"))
        );
        assert_eq!(
            placed("Tuesday, 30-Nov-76 12:00:00 GMT"),
            at(unix("Mon, 30 Nov 2076 12:00:00 GMT"))
        );
        // Exactly 50 years ahead is not *more* than 50 years: kept.
        assert_eq!(
            placed("Monday, 30-Nov-76 12:00:00 GMT"),
            at(unix("Mon, 30 Nov 2076 12:00:00 GMT"))
        );
        assert_eq!(
            placed("Monday, 30-Nov-76 12:00:01 GMT"),
            at(unix("Tue, 30 Nov 1976 12:00:01 GMT"))
        );
        assert_eq!(
            placed("Saturday, 01-Jan-00 00:00:00 GMT"),
            at(unix("Sat, 01 Jan 2000 00:00:00 GMT"))
        );
    }

    #[test]
    fn the_weekday_of_a_two_digit_year_is_checked_once_placed() {
        let now = at(unix("Mon, 30 Nov 2026 12:00:00 GMT"));
        // Thursday was right for 1975, not for 2075 (a Wednesday).
        let thursday = HttpDate::parse("Thursday, 06-Nov-75 08:49:37 GMT").unwrap();
        assert!(thursday.tolerated(None).is_empty());
        assert_eq!(thursday.tolerated(Some(now)).to_string(), "wrong weekday");
        assert_eq!(thursday.raw(), Some("Thursday, 06-Nov-75 08:49:37 GMT"));
        let wednesday = HttpDate::parse("Wednesday, 06-Nov-75 08:49:37 GMT").unwrap();
        assert!(wednesday.tolerated(Some(now)).is_empty());
    }

    #[test]
    fn near_misses_are_accepted_and_marked() {
        let noon = at(unix("Mon, 03 Jun 2019 12:00:00 GMT"));
        for (raw, tolerated) in [
            ("Mon, 3 Jun 2019 12:00:00 UTC", "one-digit day, zone UTC"),
            ("03 Jun 2019 12:00:00 GMT", "no weekday"),
            ("Fri, 03 Jun 2019 12:00:00 GMT", "wrong weekday"),
            (
                "Monday, 03 Jun 2019 12:00:00 GMT",
                "weekday spelt in another form",
            ),
            ("Mon, 03 Jun 2019 12:00:00 UT", "zone UT"),
            ("Mon, 03 Jun 2019 12:00:00 Z", "zone Z"),
            ("Mon, 03 Jun 2019 14:30:00 +0230", "numeric offset"),
            ("Mon, 03 Jun 2019 09:00:00 -0300", "numeric offset"),
            ("Mon, 03 Jun 2019 12:00:00 +0000", "numeric offset"),
            ("Mon Jun 3 12:00:00 2019", "one-digit day"),
            ("Jun  3 12:00:00 2019", "no weekday"),
        ] {
            let date = HttpDate::parse(raw).unwrap_or_else(|| panic!("{raw}"));
            assert_eq!(date.placed(None), Some(noon), "{raw}");
            assert_eq!(date.tolerated(None).to_string(), tolerated, "{raw}");
            assert_eq!(date.raw(), Some(raw));
        }
    }

    #[test]
    fn everything_else_is_invalid() {
        for raw in [
            "mon, 03 jun 2019 12:00:00 GMT",
            "Mon, 03 jun 2019 12:00:00 GMT",
            "Mon, 03 JUN 2019 12:00:00 GMT",
            "Mon, 03 Jun 2019 12:00:00",
            "Mon, 03 Jun 2019 12:00:00 PST",
            "Mon, 03 Jun 2019 12:00:00 gmt",
            "2019-06-03T12:00:00Z",
            "Mon,  03 Jun 2019 12:00:00 GMT",
            "Mon, 03 Jun 2019  12:00:00 GMT",
            "Mon, 03 Jun 19 12:00:00 GMT",
            "Monday, 03-Jun-2019 12:00:00 GMT",
            "Fri, 32 Dec 1999 23:59:59 GMT",
            "Thu, 29 Feb 2019 12:00:00 GMT",
            "Mon, 03 Jun 2019 24:00:00 GMT",
            "Mon, 03 Jun 2019 12:60:00 GMT",
            "Mon, 03 Jun 2019 12:00:61 GMT",
            "Mon, 03 Jun 2019 12:00:00 +2400",
            "Mon, 03 Jun 2019 12:00:00 +02:00",
            "Thu, 01 Jan 1960 00:00:00 GMT",
            "Wed, 09 Nov",
            "Wed 09 Nov 1994 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sun Nov   6 08:49:37 1994",
            "Sun Nov 006 08:49:37 1994",
            "",
        ] {
            assert!(HttpDate::parse(raw).is_none(), "{raw:?} was accepted");
        }
    }

    #[test]
    fn a_far_future_calendar_never_panics() {
        let date = HttpDate::parse("Sunday, 06-Nov-94 08:49:37 GMT").unwrap();
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799);
        assert!(date.placed(Some(far)).is_some());
        assert!(date.placed(Some(SystemTime::UNIX_EPOCH)).is_some());
    }
}
