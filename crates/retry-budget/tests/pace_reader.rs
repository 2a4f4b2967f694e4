//! The quota reader, one table per format: valid, invalid and hostile
//! values, each with the exact states read and the notes left.

use std::time::{Duration, SystemTime};

use retry_budget::pace::{LimitKind, QuotaIgnored, QuotaReader, QuotaReading, QuotaState};
use retry_budget::reset::ResetFormat;

const REQUESTS: LimitKind = LimitKind::Requests;
const TOKENS: LimitKind = LimitKind::Tokens;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn read_with(
    reader: &QuotaReader,
    headers: &[(&str, &str)],
    calendar: Option<SystemTime>,
) -> QuotaReading {
    reader.read(headers.iter().map(|(n, v)| (*n, v.as_bytes())), calendar)
}

fn read(headers: &[(&str, &str)]) -> QuotaReading {
    read_with(&QuotaReader::new(), headers, None)
}

fn state(name: &str, kind: LimitKind, remaining: u64, reset: Duration) -> QuotaState {
    QuotaState {
        name: name.to_owned(),
        kind,
        remaining,
        reset,
        quota: None,
        window: None,
    }
}

fn with(mut state: QuotaState, quota: Option<u64>, window: Option<Duration>) -> QuotaState {
    state.quota = quota;
    state.window = window;
    state
}

fn whys(reading: &QuotaReading) -> Vec<QuotaIgnored> {
    reading.notes.iter().map(|n| n.why).collect()
}

/// One case: headers, the states expected, the notes expected.
type Case<'a> = (&'a [(&'a str, &'a str)], Vec<QuotaState>, Vec<QuotaIgnored>);

fn table(cases: &[Case<'_>]) {
    for (headers, states, notes) in cases {
        let reading = read(headers);
        assert_eq!(&reading.states, states, "{headers:?}");
        assert_eq!(&whys(&reading), notes, "{headers:?}: {:?}", reading.notes);
    }
}

#[test]
fn ietf_current_draft() {
    use QuotaIgnored::*;
    let policy = ("RateLimit-Policy", r#""default";q=100;w=60"#);
    table(&[
        // Valid.
        (
            &[("RateLimit", r#""default";r=50;t=30"#), policy],
            vec![with(
                state("default", REQUESTS, 50, s(30)),
                Some(100),
                Some(s(60)),
            )],
            vec![],
        ),
        (
            &[("ratelimit", "default;r=3;t=4")],
            vec![state("default", REQUESTS, 3, s(4))],
            vec![],
        ),
        (
            &[
                ("RateLimit", r#""a";r=1;t=5, "b";r=0;t=50"#),
                (
                    "RateLimit-Policy",
                    r#""a";q=10;w=5, "b";q=1000;qu="content-bytes";w=60"#,
                ),
            ],
            vec![
                with(state("a", REQUESTS, 1, s(5)), Some(10), Some(s(5))),
                with(state("b", TOKENS, 0, s(50)), Some(1000), Some(s(60))),
            ],
            vec![],
        ),
        // Two field lines are one list.
        (
            &[
                ("RateLimit", r#""a";r=1;t=5"#),
                ("RateLimit", r#""b";r=2;t=6"#),
            ],
            vec![state("a", REQUESTS, 1, s(5)), state("b", REQUESTS, 2, s(6))],
            vec![],
        ),
        // Invalid.
        (&[("RateLimit", r#""d";r=-1;t=5"#)], vec![], vec![Unknown]),
        (&[("RateLimit", r#""d";r=-5;t=5"#)], vec![], vec![Negative]),
        (&[("RateLimit", r#""d";r=5;t=-5"#)], vec![], vec![Negative]),
        (&[("RateLimit", r#""d";r=1"#)], vec![], vec![Unpaired]),
        (
            &[("RateLimit", r#""d";r=1.5;t=2"#)],
            vec![],
            vec![Malformed],
        ),
        (&[("RateLimit", r#""d";r=1;t=2,"#)], vec![], vec![Malformed]),
        (&[("RateLimit", "(a b);r=1;t=2")], vec![], vec![Malformed]),
        (&[("RateLimit", "1;r=1;t=2")], vec![], vec![Malformed]),
        (
            &[("RateLimit", r#""d";r=1;t=2"#), ("RateLimit-Policy", "{")],
            vec![state("d", REQUESTS, 1, s(2))],
            vec![Malformed],
        ),
        // Hostile: a reset past the maximum hold is clamped to it; an
        // integer over 15 digits is not one.
        (
            &[("RateLimit", r#""d";r=999999999999999;t=999999999999999"#)],
            vec![state("d", REQUESTS, 999_999_999_999_999, s(60))],
            vec![ResetClamped],
        ),
        (
            &[("RateLimit", r#""d";r=1;t=9999999999999999"#)],
            vec![],
            vec![Malformed],
        ),
    ]);
}

#[test]
fn ietf_hostile_sizes_are_bounded() {
    let many: Vec<String> = (0..20).map(|i| format!("\"p{i}\";r=1;t=1")).collect();
    let reading = read(&[("RateLimit", &many.join(", "))]);
    assert_eq!(reading.states.len(), 16);
    assert_eq!(whys(&reading), vec![QuotaIgnored::TooMany; 4]);

    let long = format!("\"{}\";r=1;t=1", "n".repeat(200));
    let reading = read(&[("RateLimit", &long)]);
    assert_eq!(reading.states[0].name, "n".repeat(64));
    assert!(reading.notes.is_empty());
    // Not ASCII: not a structured-field string.
    let reading = read(&[("RateLimit", "\"é\";r=1;t=1")]);
    assert_eq!(whys(&reading), vec![QuotaIgnored::Malformed]);
}

#[test]
fn ietf_older_forms() {
    use QuotaIgnored::*;
    let draft7_policy = ("RateLimit-Policy", "10;w=60");
    table(&[
        // express-rate-limit draft-7: the dictionary.
        (
            &[
                ("RateLimit", "limit=10, remaining=9, reset=52"),
                draft7_policy,
            ],
            vec![with(
                state("ratelimit", REQUESTS, 9, s(52)),
                Some(10),
                Some(s(60)),
            )],
            vec![],
        ),
        (
            &[("RateLimit", "remaining=0, reset=1")],
            vec![state("ratelimit", REQUESTS, 0, s(1))],
            vec![],
        ),
        (
            &[("RateLimit", "limit=10, remaining=9")],
            vec![],
            vec![Unpaired],
        ),
        (
            &[("RateLimit", "remaining=-3, reset=5")],
            vec![],
            vec![Negative],
        ),
        (
            &[("RateLimit", "remaining=a, reset=5")],
            vec![],
            vec![Malformed],
        ),
        (
            &[("RateLimit", "remaining=(1 2), reset=5")],
            vec![],
            vec![Malformed],
        ),
        // express-rate-limit draft-6: separate fields.
        (
            &[
                ("RateLimit-Limit", "10"),
                ("RateLimit-Remaining", "9"),
                ("RateLimit-Reset", "52"),
                draft7_policy,
            ],
            vec![with(
                state("ratelimit", REQUESTS, 9, s(52)),
                Some(10),
                Some(s(60)),
            )],
            vec![],
        ),
        (
            &[
                ("RateLimit-Remaining", " 0 "),
                ("RateLimit-Reset", "1"),
                ("RateLimit-Reset", "9"),
            ],
            vec![state("ratelimit", REQUESTS, 0, s(1))],
            vec![Repeated],
        ),
        (&[("RateLimit-Remaining", "9")], vec![], vec![Unpaired]),
        (&[("RateLimit-Reset", "9")], vec![], vec![Unpaired]),
        (
            &[("RateLimit-Remaining", "9"), ("RateLimit-Reset", "soon")],
            vec![],
            vec![Malformed],
        ),
        (
            &[("RateLimit-Remaining", "9, 8"), ("RateLimit-Reset", "1")],
            vec![],
            vec![Malformed],
        ),
        (
            &[("RateLimit-Remaining", "-"), ("RateLimit-Reset", "1")],
            vec![],
            vec![Malformed],
        ),
        (
            &[
                ("RateLimit-Remaining", "99999999999999999999999"),
                ("RateLimit-Reset", "1"),
            ],
            vec![state("ratelimit", REQUESTS, u64::MAX, s(1))],
            vec![],
        ),
    ]);
}

/// A reader, the reset's value, the calendar, what is expected.
type XCase<'a> = (
    QuotaReader,
    &'a str,
    Option<SystemTime>,
    Vec<QuotaState>,
    Vec<QuotaIgnored>,
);

#[test]
fn x_ratelimit_seconds_or_unix_time() {
    use QuotaIgnored::*;
    let at = SystemTime::UNIX_EPOCH + s(1_700_000_000);
    let pair = |reset| {
        [
            ("X-RateLimit-Remaining", "4999"),
            ("X-RateLimit-Reset", reset),
            ("X-RateLimit-Limit", "5000"),
        ]
    };
    let x = |reset| {
        with(
            state("x-ratelimit", REQUESTS, 4999, reset),
            Some(5000),
            None,
        )
    };
    let cases: [XCase<'_>; 8] = [
        // By default a value from 10^9 on is a Unix time (GitHub,
        // flask-limiter), a smaller one seconds.
        (
            QuotaReader::new(),
            "1700000030",
            Some(at),
            vec![x(s(30))],
            vec![],
        ),
        (QuotaReader::new(), "30", None, vec![x(s(30))], vec![]),
        (
            QuotaReader::new(),
            "1700000030",
            None,
            vec![],
            vec![NoTrustedCalendar],
        ),
        (
            QuotaReader::new(),
            "1699999000",
            Some(at),
            vec![x(s(0))],
            vec![],
        ),
        // As the operator names it.
        (
            QuotaReader::new().x_ratelimit_reset(Some(ResetFormat::Unix)),
            "30",
            Some(at),
            vec![x(s(0))],
            vec![],
        ),
        (
            QuotaReader::new().x_ratelimit_reset(Some(ResetFormat::Seconds)),
            "1700000030",
            Some(at),
            vec![x(s(60))],
            vec![ResetClamped],
        ),
        (QuotaReader::new(), "-30", None, vec![], vec![Negative]),
        (QuotaReader::new(), "1.5", None, vec![], vec![Malformed]),
    ];
    for (reader, reset, calendar, states, notes) in cases {
        let reading = read_with(&reader, &pair(reset), calendar);
        assert_eq!(reading.states, states, "{reset}");
        assert_eq!(whys(&reading), notes, "{reset}");
    }
    // A `Retry-After` on a 2xx (flask-limiter sends one on every response)
    // is no quota state.
    assert!(read(&[("Retry-After", "30")]).states.is_empty());
}

#[test]
fn openai_groq_and_azure() {
    use QuotaIgnored::*;
    table(&[
        (
            &[
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-limit-tokens", "150000"),
                ("x-ratelimit-remaining-tokens", "149984"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
            vec![
                with(state("requests", REQUESTS, 59, s(1)), Some(60), None),
                with(state("tokens", TOKENS, 149_984, s(60)), Some(150_000), None),
            ],
            vec![ResetClamped],
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "120ms"),
            ],
            vec![state("requests", REQUESTS, 0, Duration::from_millis(120))],
            vec![],
        ),
        (
            &[
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "1.5s"),
            ],
            vec![state("tokens", TOKENS, 0, Duration::from_millis(1500))],
            vec![],
        ),
        // Azure OpenAI: `-1` is unknown; a remaining count without reset.
        (
            &[("x-ratelimit-remaining-requests", "-1")],
            vec![],
            vec![Unknown],
        ),
        (
            &[("x-ratelimit-remaining-tokens", "100")],
            vec![],
            vec![Unpaired],
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "-1"),
                ("x-ratelimit-reset-requests", "1s"),
            ],
            vec![],
            vec![Unknown],
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "5"),
                ("x-ratelimit-reset-requests", "-1s"),
            ],
            vec![],
            vec![Negative],
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "5"),
                ("x-ratelimit-reset-requests", "6x"),
            ],
            vec![],
            vec![Malformed],
        ),
        (
            &[
                ("x-ratelimit-remaining-requests", "5"),
                ("x-ratelimit-reset-requests", "99999999999999999h"),
            ],
            vec![state("requests", REQUESTS, 5, s(60))],
            vec![ResetClamped],
        ),
    ]);
}

#[test]
fn anthropic_needs_the_calendar() {
    use QuotaIgnored::*;
    let at = httpdate::parse_http_date("Tue, 01 Dec 2026 18:00:00 GMT").unwrap();
    let headers = [
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("anthropic-ratelimit-requests-reset", "2026-12-01T18:00:30Z"),
        ("anthropic-ratelimit-input-tokens-remaining", "0"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2026-12-01T19:00:05+01:00",
        ),
        ("anthropic-ratelimit-output-tokens-remaining", "10"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2026-12-01T17:00:00Z",
        ),
        ("anthropic-ratelimit-tokens-remaining", "10"),
        ("anthropic-ratelimit-tokens-reset", "2026-13-01T18:00:00Z"),
    ];
    let reading = read_with(&QuotaReader::new(), &headers, Some(at));
    assert_eq!(
        reading.states,
        vec![
            with(
                state("anthropic-requests", REQUESTS, 49, s(30)),
                Some(50),
                None
            ),
            state("anthropic-input-tokens", TOKENS, 0, s(5)),
            // A reset in the past: zero.
            state("anthropic-output-tokens", TOKENS, 10, s(0)),
        ]
    );
    assert_eq!(whys(&reading), vec![Malformed]);
    assert_eq!(reading.notes[0].header, "anthropic-ratelimit-tokens-reset");
    assert_eq!(reading.notes[0].raw, "2026-13-01T18:00:00Z");

    let reading = read_with(&QuotaReader::new(), &headers[..3], None);
    assert!(reading.states.is_empty());
    assert_eq!(whys(&reading), vec![NoTrustedCalendar]);
}

#[test]
fn a_cached_response_is_not_read() {
    let reading = read(&[
        ("RateLimit", r#""d";r=0;t=5"#),
        ("Age", "10"),
        ("RateLimit-Reset", "x"),
    ]);
    assert!(reading.states.is_empty());
    assert_eq!(whys(&reading), vec![QuotaIgnored::Cached]);
}

#[test]
fn operator_named_pairs() {
    let reader = QuotaReader::new().pair(
        "api",
        "x-api-left",
        "x-api-reset-in",
        ResetFormat::Duration,
        TOKENS,
    );
    let reading = read_with(
        &reader,
        &[("X-Api-Left", "7"), ("x-api-reset-in", "2s")],
        None,
    );
    assert_eq!(reading.states, vec![state("api", TOKENS, 7, s(2))]);
}

#[test]
fn formats_together_each_give_their_limits() {
    let reading = read(&[
        ("RateLimit", r#""d";r=1;t=2"#),
        ("X-RateLimit-Remaining", "3"),
        ("X-RateLimit-Reset", "4"),
    ]);
    assert_eq!(
        reading.states,
        vec![
            state("d", REQUESTS, 1, s(2)),
            state("x-ratelimit", REQUESTS, 3, s(4))
        ]
    );
}

#[test]
fn names_in_any_case_among_fields_no_format_reads() {
    let reader = QuotaReader::new().pair(
        "api",
        "x-api-left",
        "x-api-reset-in",
        ResetFormat::Duration,
        TOKENS,
    );
    let reading = read_with(
        &reader,
        &[
            ("Server", "nginx"),
            ("RATELIMIT-POLICY", r#""d";q=10;w=60"#),
            ("Date", "Thu, 03 Dec 2026 08:00:00 GMT"),
            ("RateLimit", r#""d";r=1;t=2"#),
            ("X-RateLimits", "9"),
            ("X-RATELIMIT-REMAINING-TOKENS", "5"),
            ("Content-Type", "text/plain"),
            ("x-RateLimit-Reset-Tokens", "3s"),
            ("X-API-LEFT", "7"),
            ("X-Api-Reset-In", "2s"),
            ("x-api-left", "8"),
        ],
        None,
    );
    assert_eq!(
        reading.states,
        vec![
            with(state("d", REQUESTS, 1, s(2)), Some(10), Some(s(60))),
            state("tokens", TOKENS, 5, s(3)),
            state("api", TOKENS, 7, s(2)),
        ]
    );
    assert_eq!(whys(&reading), vec![QuotaIgnored::Repeated]);

    let unrelated = read_with(
        &reader,
        &[
            ("Server", "nginx"),
            ("Content-Length", "3"),
            ("X-Api-Left-Over", "1"),
            ("Agent", "x"),
        ],
        None,
    );
    assert_eq!(unrelated, QuotaReading::default());
}
