//! The `Retry-After` and reset-header test vectors of other retry
//! implementations, each with the result this project gives and why.
//!
//! Every row names its source: the peer's test file and test. Inputs are
//! the peers' own, at the peers' own clock readings; where a peer computes
//! its input from "now" (a date `now + 60 s`), the same formula is applied
//! to its fixed clock. A row records *this* project's reading (the
//! server's requested delay at receipt, before the 1 s floor), and `why`
//! says where and why it differs from the peer.
//!
//! Sources (as stored in their repositories):
//! * urllib3: `test/test_retry.py` (`test_parse_retry_after_invalid`,
//!   `test_parse_retry_after`, `test_respect_retry_after_header_sleep`,
//!   clock 2019-06-03 11:00:00 UTC);
//! * go-retryablehttp: `client_test.go` (`TestParseRetryAfterHeader`,
//!   clock `Fri, 31 Dec 1999 23:59:57 GMT`);
//! * httpx-retries: `tests/test_retry.py` (`test_parse_retry_after_*`,
//!   `test_calculate_sleep_with_retry_after_over_max`);
//! * .NET: `src/libraries/System.Net.Http/tests/UnitTests/Headers/RetryConditionHeaderValueTest.cs`;
//! * Envoy: `test/common/router/reset_header_parser_test.cc` (clock Unix
//!   1000000000);
//! * AWS JS SDK (smithy-typescript, used by aws-sdk-js-v3):
//!   `packages/middleware-retry/src/parseRetryAfterHeader.spec.ts` (clock
//!   1773769074339 ms).
//!
//! grpc-go's `grpc-retry-pushback-ms` vectors are read by the tower
//! adapter's `GrpcSignal` and tabled in `tower-retry-budget/tests/signals.rs`.

use std::time::{Duration, SystemTime};

use retry_budget::{
    reset::{ResetFormat, ResetHeaders, ResetIgnored, ResetReading},
    retry_after::{Asked, InvalidReason, RetryAfter},
    Action, Decision, Policy,
};

/// What this project reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reads {
    /// The server asks this delay (before the 1 s floor).
    Wait(Duration),
    /// Invalid: the local fallback applies, the raw value is kept.
    Invalid,
    /// No header: the local fallback applies.
    Missing,
}

struct Row {
    source: &'static str,
    lines: Vec<Vec<u8>>,
    now: SystemTime,
    reads: Reads,
    why: &'static str,
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn date(text: &str) -> SystemTime {
    httpdate::parse_http_date(text).unwrap()
}

fn s(secs: u64) -> Reads {
    Reads::Wait(Duration::from_secs(secs))
}

fn row(
    source: &'static str,
    lines: &[&str],
    now: SystemTime,
    reads: Reads,
    why: &'static str,
) -> Row {
    Row {
        source,
        lines: lines.iter().map(|l| l.as_bytes().to_vec()).collect(),
        now,
        reads,
        why,
    }
}

fn retry_after_rows() -> Vec<Row> {
    let urllib3 = date("Mon, 03 Jun 2019 11:00:00 GMT");
    let go = date("Fri, 31 Dec 1999 23:59:57 GMT");
    let httpx = date("Mon, 30 Nov 2026 12:00:00 GMT");
    let dotnet = date("Mon, 30 Nov 2026 12:00:00 GMT");
    // AWS: NOW = 1773769074339 ms; its dates are `new Date(NOW + x).toUTCString()`.
    let aws = SystemTime::UNIX_EPOCH + Duration::from_millis(1_773_769_074_339);
    let aws_date = |plus_ms: u64| httpdate::fmt_http_date(aws + Duration::from_millis(plus_ms));
    let aws_60 = aws_date(60_000);
    let aws_30_then_45 = format!("{}, 45", aws_date(30_000));
    // `Math.floor`ed to the second by the date: 60 s minus NOW's 339 ms.
    let aws_wait_60 = Reads::Wait(Duration::from_millis(59_661));
    let aws_iso = "2026-03-17T17:38:24.339Z";

    vec![
        // ------------------------------------------------------ urllib3
        // test_parse_retry_after_invalid
        row("urllib3 test_parse_retry_after_invalid", &["-1"], urllib3, Reads::Invalid, "not 1*DIGIT; same as urllib3"),
        row("urllib3 test_parse_retry_after_invalid", &["+1"], urllib3, Reads::Invalid, "not 1*DIGIT; same"),
        row("urllib3 test_parse_retry_after_invalid", &["1.0"], urllib3, Reads::Invalid, "not 1*DIGIT; same"),
        row("urllib3 test_parse_retry_after_invalid", &["\u{b2}"], urllib3, Reads::Invalid, "a superscript two is not an ASCII digit; same"),
        // test_parse_retry_after
        row("urllib3 test_parse_retry_after", &["0"], urllib3, s(0), "zero delay (then the 1 s floor); urllib3 returns 0"),
        row("urllib3 test_parse_retry_after", &["1000"], urllib3, s(1000), "same"),
        row("urllib3 test_parse_retry_after", &["\t42 "], urllib3, s(42), "OWS around the value is not part of it; same"),
        // test_respect_retry_after_header_sleep (clock 2019-06-03 11:00:00 UTC)
        row("urllib3 test_respect_retry_after_header_sleep", &["3600"], urllib3, s(3600), "same"),
        row("urllib3 test_respect_retry_after_header_sleep", &["Mon, 3 Jun 2019 12:00:00 UTC"], urllib3, s(3600),
            "a near-miss (one-digit day, zone UTC) accepted leniently and marked; same wait"),
        row("urllib3 test_respect_retry_after_header_sleep", &["Mon, 3 Jun 2019 11:00:00 UTC"], urllib3, s(0),
            "the date is now: zero (then the 1 s floor); urllib3 does not sleep"),
        row("urllib3 test_respect_retry_after_header_sleep", &["Mon, 03 Jun 2019 11:30:12 GMT"], urllib3, s(1812), "IMF-fixdate; same"),
        row("urllib3 test_respect_retry_after_header_sleep", &["Monday, 03-Jun-19 11:30:12 GMT"], urllib3, s(1812),
            "RFC 850: 19 placed by the 50-year rule against the calendar at receipt (2019); same"),
        row("urllib3 test_respect_retry_after_header_sleep", &["Mon Jun  3 11:30:12 2019"], urllib3, s(1812), "asctime, UTC; same"),
        // ---------------------------------------------- go-retryablehttp
        // TestParseRetryAfterHeader (clock Fri, 31 Dec 1999 23:59:57 GMT)
        row("go-retryablehttp TestParseRetryAfterHeader seconds", &["2"], go, s(2), "same"),
        row("go-retryablehttp TestParseRetryAfterHeader date", &["Fri, 31 Dec 1999 23:59:59 GMT"], go, s(2), "same"),
        row("go-retryablehttp TestParseRetryAfterHeader past-date", &["Fri, 31 Dec 1999 23:59:00 GMT"], go, s(0),
            "a past date is zero (then the 1 s floor); same"),
        row("go-retryablehttp TestParseRetryAfterHeader nil", &[], go, Reads::Missing, "no header: the fallback; same (ok=false)"),
        row("go-retryablehttp TestParseRetryAfterHeader two-headers", &["2", "3"], go, s(3),
            "DIFFERS: go-retryablehttp takes the first (2 s); the longest valid wait counts here, never sooner than any field asked"),
        row("go-retryablehttp TestParseRetryAfterHeader empty", &[""], go, Reads::Invalid, "same"),
        row("go-retryablehttp TestParseRetryAfterHeader negative", &["-2"], go, Reads::Invalid, "same"),
        row("go-retryablehttp TestParseRetryAfterHeader bad-date", &["Fri, 32 Dec 1999 23:59:59 GMT"], go, Reads::Invalid,
            "no 32nd day; same"),
        row("go-retryablehttp TestParseRetryAfterHeader bad-date-format", &["badbadbad"], go, Reads::Invalid, "same"),
        // ------------------------------------------------- httpx-retries
        row("httpx-retries test_parse_retry_after_seconds", &["5"], httpx, s(5), "same"),
        row("httpx-retries test_parse_retry_after_http_date (now + 5 s)", &["Mon, 30 Nov 2026 12:00:05 GMT"], httpx, s(5), "same"),
        row("httpx-retries test_parse_retry_after_http_date_past (now - 5 s)", &["Mon, 30 Nov 2026 11:59:55 GMT"], httpx, s(0),
            "zero (then the 1 s floor); same"),
        row("httpx-retries test_parse_retry_after_http_date_no_tz (now + 5 s)", &["Mon, 30 Nov 2026 12:00:05"], httpx, Reads::Invalid,
            "DIFFERS: httpx assumes UTC; a missing zone is not on the documented list of near-misses, so invalid (fallback, raw kept)"),
        row("httpx-retries test_parse_retry_after_invalid", &["invalid"], httpx, Reads::Invalid, "same"),
        row("httpx-retries test_parse_retry_after_rejects_non_ascii_digits", &["\u{665}"], httpx, Reads::Invalid, "Arabic-Indic five; same"),
        row("httpx-retries test_parse_retry_after_rejects_non_ascii_digits", &["\u{b2}"], httpx, Reads::Invalid, "same"),
        row("httpx-retries test_calculate_sleep_with_retry_after_over_max", &["10"], httpx, s(10),
            "DIFFERS: httpx caps it at max_backoff_wait (5 s); a server's delay is never shortened here, the budget decides"),
        // ------------------------------------------------------------ .NET
        row(".NET Parse_SetOfValidValueStrings_ParsedCorrectly", &["  123456789 "], dotnet, s(123_456_789), "same"),
        row(".NET Parse_SetOfValidValueStrings_ParsedCorrectly", &["  Sun, 06 Nov 1994 08:49:37 GMT "], dotnet, s(0),
            "a valid date, in the past: zero (then the 1 s floor)"),
        row(".NET GetRetryConditionLength_DifferentValidScenarios", &["1"], dotnet, s(1), "same"),
        row(".NET GetRetryConditionLength_DifferentValidScenarios", &["001"], dotnet, s(1), "leading zeros are digits; same"),
        row(".NET GetRetryConditionLength_DifferentValidScenarios", &["Wed, 09 Nov 1994 08:49:37 GMT"], dotnet, s(0), "a past date"),
        row(".NET Parse_SetOfInvalidValueStrings_Throws", &["123 ,"], dotnet, s(123),
            "DIFFERS: a comma makes a list (RFC 9110 §5.6.1); its valid element counts, the empty one is invalid, and the trail says it was repeated"),
        row(".NET Parse_SetOfInvalidValueStrings_Throws", &["Sun, 06 Nov 1994 08:49:37 GMT ,"], dotnet, s(0),
            "DIFFERS: as above; the date's own comma after the weekday is not a separator"),
        row(".NET Parse_SetOfInvalidValueStrings_Throws", &["123 Sun, 06 Nov 1994 08:49:37 GMT"], dotnet, Reads::Invalid,
            "a weekday glued to other text keeps its comma: one invalid value, not a date; same"),
        row(".NET Parse_SetOfInvalidValueStrings_Throws", &["Sun, 06 Nov 1994 08:49:37 GMT \"x\""], dotnet, Reads::Invalid, "same"),
        row(".NET Parse_SetOfInvalidValueStrings_Throws", &[""], dotnet, Reads::Invalid, "same"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["-5"], dotnet, Reads::Invalid, "same"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["1.5"], dotnet, Reads::Invalid, "same"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["5123,"], dotnet, s(5123), "DIFFERS: a list, as above"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["123456789012345678901234567890"], dotnet, s(u64::MAX),
            "DIFFERS: .NET rejects more than Int32; here a huge valid value saturates, a very long wait (budget_exhausted), never a fallback"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["9999999999"], dotnet, s(9_999_999_999), "DIFFERS: as above"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["Wed, 09 Nov"], dotnet, Reads::Invalid, "same"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &["W/Wed 09 Nov 1994 08:49:37 GMT"], dotnet, Reads::Invalid, "same"),
        row(".NET GetRetryConditionLength_DifferentInvalidScenarios", &[" Wed 09 Nov 1994 08:49:37 GMT"], dotnet, Reads::Invalid,
            "no comma after the weekday: not on the list of near-misses; same"),
        // ----------------------------------------------- AWS JS SDK
        row("AWS JS SDK parseRetryAfterHeader: plain numeric seconds", &["120"], aws, s(120), "same"),
        row_owned("AWS JS SDK parseRetryAfterHeader: RFC 7231 date ending in GMT (NOW + 60 s)", vec![aws_60], aws, aws_wait_60,
            "same: the date is whole seconds, so the wait is 60 s less NOW's 339 ms"),
        row_owned("AWS JS SDK parseRetryAfterHeader: 'GMT, <seconds>' suffix", vec![aws_30_then_45], aws, s(45),
            "same result, another reason: a list of a date (29.661 s) and 45; the longest counts"),
        row("AWS JS SDK parseRetryAfterHeader: non-numeric, non-date", &["not-a-number"], aws, Reads::Invalid, "same"),
        row("AWS JS SDK parseRetryAfterHeader: RFC 7231 parsing fails", &["Invalid Date GMT"], aws, Reads::Invalid, "same"),
        row("AWS JS SDK parseRetryAfterHeader: ISO format (NOW + 30 s)", &[aws_iso], aws, Reads::Invalid,
            "DIFFERS: AWS parses ISO 8601 for backwards compatibility; it is not an HTTP-date, so invalid here (fallback, raw kept)"),
        row("AWS JS SDK parseRetryAfterHeader: prefers retry-after over x-amz-retry-after", &["10"], aws, s(10),
            "same: x-amz-retry-after (milliseconds) is not read, not even with reset headers (formats are seconds and unix)"),
    ]
}

fn row_owned(
    source: &'static str,
    lines: Vec<String>,
    now: SystemTime,
    reads: Reads,
    why: &'static str,
) -> Row {
    Row {
        source,
        lines: lines.into_iter().map(String::into_bytes).collect(),
        now,
        reads,
        why,
    }
}

#[test]
fn peers_retry_after_vectors() {
    let mut failures = Vec::new();
    for row in retry_after_rows() {
        let parsed = RetryAfter::from_values(row.lines.iter().map(Vec::as_slice));
        let got = match (&parsed, parsed.asked(Some(row.now))) {
            (RetryAfter::Missing, _) => Reads::Missing,
            (_, Asked::Wait(wait)) => Reads::Wait(wait),
            (RetryAfter::Invalid(_), Asked::Nothing) => Reads::Invalid,
            (other, asked) => panic!("{}: {other:?} asked {asked:?}", row.source),
        };
        if got != row.reads {
            failures.push(format!(
                "{} {:?}: expected {:?} ({}), got {got:?}",
                row.source,
                row.lines
                    .iter()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .collect::<Vec<_>>(),
                row.reads,
                row.why
            ));
        }
        // And the wait the action plans from it, under a budget wide
        // enough for every finite row: the floor, or the fallback.
        let policy = Policy::builder()
            .total_budget(Duration::from_secs(20_000_000_000))
            .build()
            .unwrap();
        let mut action = Action::new(policy);
        action.attempt_started(Duration::ZERO);
        let decision = action.response(Duration::ZERO, 429, &parsed, Some(row.now));
        let expected = match row.reads {
            Reads::Wait(wait) if wait > Duration::from_secs(10_000_000_000) => continue,
            Reads::Wait(wait) => Decision::WaitUntil(wait.max(Duration::from_secs(1))),
            Reads::Invalid | Reads::Missing => Decision::WaitUntil(Duration::from_secs(2)),
        };
        if decision != expected {
            failures.push(format!(
                "{}: the action planned {decision:?}, not {expected:?}",
                row.source
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_invalid_rows_keep_the_raw_value() {
    let RetryAfter::Invalid(invalid) = RetryAfter::parse("badbadbad") else {
        panic!()
    };
    assert_eq!(
        (invalid.raw(), invalid.reason()),
        ("badbadbad", InvalidReason::Malformed)
    );
    let RetryAfter::Invalid(invalid) = RetryAfter::parse("\u{665}") else {
        panic!()
    };
    assert_eq!(invalid.reason(), InvalidReason::NotAscii);
}

/// Envoy's reset-header parser vectors (`reset_header_parser_test.cc`,
/// clock Unix 1000000000), read as reset headers of this project.
#[test]
fn envoy_reset_header_vectors() {
    let now = at(1_000_000_000);
    let wait = |s| ResetReading::Wait(Duration::from_secs(s));
    let malformed = ResetReading::Ignored(ResetIgnored::Malformed);
    for (test, format, raw, expected, why) in [
        ("HeaderMatchesButUnsupportedFormatDate", ResetFormat::Seconds, "Fri, 17 Jul 2020 11:59:51 GMT", malformed, "same: a date is not seconds"),
        ("HeaderMatchesButUnsupportedFormatFloat", ResetFormat::Seconds, "2.5", malformed, "same"),
        ("HeaderMatchesSupportedFormatSeconds", ResetFormat::Seconds, "5", wait(5), "same"),
        ("HeaderMatchesButUnsupportedFormatTimestampFloat", ResetFormat::Unix, "1595320702.1234", malformed, "same"),
        ("HeaderMatchesSupportedFormatTimestampButInThePast", ResetFormat::Unix, "999999999", wait(0),
            "DIFFERS: Envoy ignores a past time; here it is a zero wait (then the 1 s floor), as a past Retry-After date"),
        ("HeaderMatchesSupportedFormatTimestampEmptyInterval", ResetFormat::Unix, "1000000000", wait(0), "same"),
        ("HeaderMatchesSupportedFormatTimestampNonEmptyInterval", ResetFormat::Unix, "1000000007", wait(7), "same"),
    ] {
        let mut headers = ResetHeaders::new(None);
        headers.push("retry-after", format, raw.as_bytes());
        let (_, reading) = headers.read(Some(now)).next().unwrap();
        assert_eq!(reading, expected, "Envoy {test} {raw:?}: {why}");
    }
    // Envoy's NoHeaderMatches: nothing found is nothing pushed.
    assert!(ResetHeaders::new(None).is_empty());
}
