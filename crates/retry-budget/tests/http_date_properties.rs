//! Properties of the hand-written HTTP-date reading, against `httpdate` as
//! the oracle: every date is written by `httpdate::fmt_http_date` (an
//! IMF-fixdate) and rewritten, by string surgery only, into the other forms
//! and near-misses; each must read back as the same instant.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use retry_budget::http_date::HttpDate;

/// 1970-01-01 to 9999-12-31 23:59:59.
const LAST: u64 = 253_402_300_799;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` → its parts.
fn parts(imf: &str) -> (&str, &str, &str, &str, &str) {
    let weekday = &imf[..3];
    let day = &imf[5..7];
    let month = &imf[8..11];
    let year = &imf[12..16];
    let time = &imf[17..25];
    (weekday, day, month, year, time)
}

fn long_weekday(short: &str) -> &'static str {
    match short {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    }
}

proptest! {
    #[test]
    fn an_rfc850_date_within_fifty_years_of_the_calendar_reads_back(
        secs in 0u64..=LAST,
        // The calendar at receipt: up to 49 years after the date, or up to
        // 49 years before it (the date then in the future).
        shift in -(49i64 * 365 * 86_400)..=(49i64 * 365 * 86_400),
    ) {
        let imf = httpdate::fmt_http_date(at(secs));
        let (weekday, day, month, year, time) = parts(&imf);
        let rfc850 = format!("{}, {day}-{month}-{} {time} GMT", long_weekday(weekday), &year[2..]);
        let now = secs.saturating_add_signed(shift);
        let date = HttpDate::parse(&rfc850).unwrap();
        prop_assert_eq!(date.placed(Some(at(now))), Some(at(secs)), "{} at {}", rfc850, now);
        prop_assert!(date.tolerated(Some(at(now))).is_empty(), "{}", rfc850);
    }

    #[test]
    fn asctime_and_the_near_misses_read_back(secs in 0u64..=LAST) {
        let date = at(secs);
        let imf = httpdate::fmt_http_date(date);
        let (weekday, day, month, year, time) = parts(&imf);
        let day_num: u32 = day.parse().unwrap();
        for (text, strict) in [
            (format!("{weekday} {month} {day_num:>2} {time} {year}"), true),
            (format!("{day} {month} {year} {time} GMT"), false),
            (format!("{weekday}, {day_num} {month} {year} {time} UTC"), false),
            (format!("{weekday}, {day} {month} {year} {time} UT"), false),
            (format!("{weekday}, {day} {month} {year} {time} Z"), false),
            (format!("{}, {day} {month} {year} {time} GMT", long_weekday(weekday)), false),
        ] {
            let read = HttpDate::parse(&text).unwrap_or_else(|| panic!("{text}"));
            prop_assert_eq!(read.placed(None), Some(date), "{}", text);
            prop_assert_eq!(read.tolerated(None).is_empty(), strict, "{}", text);
        }
    }

    #[test]
    fn a_numeric_offset_is_converted_exactly(
        secs in (2 * 86_400u64)..=(LAST - 2 * 86_400),
        east in -(23i64 * 60)..=(23 * 60 + 59),
    ) {
        // The same instant written as local time at `east` minutes.
        let local = secs.saturating_add_signed(east * 60);
        let imf = httpdate::fmt_http_date(at(local));
        let (sign, magnitude) = if east < 0 { ('-', -east) } else { ('+', east) };
        let text = format!("{} {sign}{:02}{:02}", &imf[..25], magnitude / 60, magnitude % 60);
        let read = HttpDate::parse(&text).unwrap_or_else(|| panic!("{text}"));
        prop_assert_eq!(read.placed(None), Some(at(secs)), "{}", text);
        prop_assert_eq!(read.tolerated(None).to_string(), "numeric offset", "{}", text);
    }

    #[test]
    fn a_leap_second_is_the_next_midnight(days in 0u64..(LAST / 86_400)) {
        let midnight = at((days + 1) * 86_400);
        let day_before = httpdate::fmt_http_date(at(days * 86_400 + 86_399));
        let leap = day_before.replace(":59:59 GMT", ":59:60 GMT");
        let read = HttpDate::parse(&leap).unwrap_or_else(|| panic!("{leap}"));
        prop_assert_eq!(read.placed(None), Some(midnight), "{}", leap);
        prop_assert!(read.tolerated(None).is_empty(), "{}", leap);
    }

    #[test]
    fn any_text_never_panics(text in any::<String>(), now in 0u64..=LAST) {
        if let Some(date) = HttpDate::parse(&text) {
            let _ = date.placed(Some(at(now)));
            let _ = date.tolerated(Some(at(now)));
        }
    }
}
