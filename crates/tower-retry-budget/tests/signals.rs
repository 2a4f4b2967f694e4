//! Every signal a rate-limited server sends, through the layer
//! under tokio's paused clock, with exact instants: repeated `Retry-After`
//! fields, the leap second, RFC 850 two-digit years, each reset-header form,
//! their rules against `Retry-After`, the composition with gRPC, and the
//! spread. The calendar is a fixed reading, so dates give exact waits.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderName, Request, Response};
use retry_budget::{
    reset::{ResetFormat, ResetIgnored},
    trail::{EventKind, ResetRead, RetryAfterSeen, WaitBasis},
    Outcome, Policy, Report,
};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    calendar::{FnCalendar, UntrustedCalendar},
    response_signal::{GrpcSignal, HttpSignal, ResetSignal, RetrySignal},
    RetryBudgetLayer,
};

const S: fn(u64) -> Duration = Duration::from_secs;

/// The calendar reading used throughout: Mon, 30 Nov 2026 12:00:00 GMT.
fn now() -> SystemTime {
    httpdate::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").unwrap()
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// The first response is `status` with these headers, every later one 200.
/// Returns the report, how long the action took and the number of calls.
async fn run_with<G>(
    policy: Policy,
    signal: G,
    calendar: Option<SystemTime>,
    status: u16,
    headers: &[(&str, &str)],
) -> (Report, Duration, usize)
where
    G: RetrySignal + Clone + Send + Sync + 'static,
{
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut res = Response::builder().status(if n == 0 { status } else { 200 });
        if n == 0 {
            for (name, value) in &headers {
                res = res.header(name.as_str(), value.as_str());
            }
        }
        let res = res.body(()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let layer = RetryBudgetLayer::new(policy)
        .calendar(FnCalendar(move || calendar))
        .signal(signal);
    let client = ServiceBuilder::new().layer(layer).service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    (report, started.elapsed(), calls.load(Ordering::SeqCst))
}

async fn run(headers: &[(&str, &str)]) -> (Report, Duration, usize) {
    run_with(Policy::default(), HttpSignal, Some(now()), 429, headers).await
}

fn reset_signal() -> ResetSignal {
    ResetSignal::new().ratelimit_fields().header(
        HeaderName::from_static("x-ratelimit-reset"),
        ResetFormat::Unix,
    )
}

fn planned(report: &Report) -> Vec<(Duration, WaitBasis)> {
    report
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WaitPlanned { wait, basis, .. } => Some((wait, basis)),
            _ => None,
        })
        .collect()
}

fn seen(report: &Report) -> RetryAfterSeen {
    report
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Response { retry_after, .. } => Some(retry_after.clone()),
            _ => None,
        })
        .unwrap()
}

fn resets(report: &Report) -> Vec<(String, String, ResetRead)> {
    report
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ResetHeader {
                header,
                raw,
                reading,
                ..
            } => Some((header.to_string(), raw.to_string(), *reading)),
            _ => None,
        })
        .collect()
}

fn used(wait: u64) -> ResetRead {
    ResetRead::Wait {
        wait: S(wait),
        used: true,
    }
}

// ------------------------------------------------------ repeated fields

#[tokio::test(start_paused = true)]
async fn retry_after_30_twice_against_a_20_s_budget_stops_at_once() {
    let (report, took, calls) = run(&[("retry-after", "30"), ("retry-after", "30")]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, Duration::ZERO, 1)
    );
    assert_eq!(report.server_requested_wait, Some(S(30)));
    assert!(
        report
            .to_string()
            .contains("The service asked to wait 30 s; no retry was sent."),
        "{report}"
    );
    assert!(report.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::RetryAfterRepeated { values: 2, raw, .. } if raw == "30, 30"
    )));
    assert_eq!(report.to_json()["server_requested_wait_s"], 30.0);
}

#[tokio::test(start_paused = true)]
async fn repeated_fields_and_lists_wait_the_longest() {
    for headers in [
        &[("retry-after", "1"), ("retry-after", "3")][..],
        &[("retry-after", "3"), ("retry-after", "1")][..],
        &[("retry-after", "1, 3")][..],
        &[("retry-after", "soon"), ("retry-after", "3")][..],
    ] {
        let (report, took, calls) = run(headers).await;
        assert_eq!(
            (report.outcome, took, calls),
            (Outcome::Success, S(3), 2),
            "{headers:?}"
        );
        assert_eq!(
            planned(&report),
            vec![(S(3), WaitBasis::Server { requested: S(3) })]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_repeated_field_mixing_seconds_and_a_date_compares_waits_at_receipt() {
    let (report, took, _) = run(&[("retry-after", "2, Mon, 30 Nov 2026 12:00:05 GMT")]).await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(5)));
    let (report, took, _) = run(&[
        ("retry-after", "Mon, 30 Nov 2026 12:00:02 GMT"),
        ("retry-after", "4"),
    ])
    .await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(4)));
}

// --------------------------------------------------------------- dates

#[tokio::test(start_paused = true)]
async fn a_leap_second_is_a_valid_date_one_request_not_three() {
    // Three seconds before the leap second: 23:59:60 is 3 s later.
    let before = httpdate::parse_http_date("Sat, 31 Dec 2016 23:59:57 GMT").unwrap();
    let (report, took, calls) = run_with(
        Policy::default(),
        HttpSignal,
        Some(before),
        429,
        &[("retry-after", "Sat, 31 Dec 2016 23:59:60 GMT")],
    )
    .await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(3), 2));
    assert_eq!(
        planned(&report),
        vec![(S(3), WaitBasis::Server { requested: S(3) })]
    );
}

#[tokio::test(start_paused = true)]
async fn a_two_digit_year_is_placed_by_the_fifty_year_rule() {
    // 2075 is 49 years after 2026: a wait of about 49 years, far beyond
    // the budget. Thursday was 1975's weekday, not 2075's: tolerated.
    let (report, took, calls) = run(&[("retry-after", "Thursday, 06-Nov-75 08:49:37 GMT")]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, Duration::ZERO, 1)
    );
    let in_2075 = httpdate::parse_http_date("Wed, 06 Nov 2075 08:49:37 GMT").unwrap();
    assert_eq!(seen(&report), RetryAfterSeen::Date { date: in_2075 });
    assert_eq!(
        report.server_requested_wait,
        Some(in_2075.duration_since(now()).unwrap())
    );
    assert!(report.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::LenientDate { raw, tolerated, .. }
            if raw == "Thursday, 06-Nov-75 08:49:37 GMT" && tolerated == "wrong weekday"
    )));

    // A two-digit year in the past is waited as the floor; 26 is this year.
    let (report, took, _) = run(&[("retry-after", "Monday, 30-Nov-26 12:00:03 GMT")]).await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(3)));
    // The required RFC 850 form is no near-miss: nothing marked lenient.
    assert!(!report
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::LenientDate { .. })));
    let (report, took, _) = run(&[("retry-after", "Sunday, 06-Nov-94 08:49:37 GMT")]).await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(1)));
}

#[tokio::test(start_paused = true)]
async fn a_two_digit_year_without_a_trusted_calendar_stops_as_clock_untrusted() {
    let (report, took, calls) = run_with(
        Policy::default(),
        HttpSignal,
        None,
        429,
        &[("retry-after", "Monday, 30-Nov-26 12:00:03 GMT")],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::ClockUntrusted, Duration::ZERO, 1)
    );
    assert!(matches!(seen(&report), RetryAfterSeen::Unmeasured { .. }));
}

#[tokio::test(start_paused = true)]
async fn near_miss_dates_wait_what_they_say_and_are_marked() {
    for raw in [
        "Mon, 30 Nov 2026 12:00:05 UTC",
        "Fri, 30 Nov 2026 12:00:05 GMT",
        "30 Nov 2026 12:00:05 GMT",
        "Mon, 30 Nov 2026 13:00:05 +0100",
    ] {
        let (report, took, _) = run(&[("retry-after", raw)]).await;
        assert_eq!((report.outcome, took), (Outcome::Success, S(5)), "{raw}");
        assert!(
            report
                .events
                .iter()
                .any(|e| matches!(&e.kind, EventKind::LenientDate { raw: r, .. } if r == raw)),
            "{raw}"
        );
    }
    // A lower-case month stays invalid: the 2 s fallback.
    let (report, took, _) = run(&[("retry-after", "Mon, 30 nov 2026 12:00:05 GMT")]).await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(2)));
}

// ------------------------------------------------------- reset headers

#[tokio::test(start_paused = true)]
async fn x_ratelimit_reset_as_unix_time_replaces_the_fallback() {
    let reset = (unix(now()) + 3).to_string();
    let (report, took, calls) = run_with(
        Policy::default(),
        reset_signal(),
        Some(now()),
        429,
        &[("x-ratelimit-reset", &reset)],
    )
    .await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(3), 2));
    assert_eq!(
        resets(&report),
        vec![("x-ratelimit-reset".into(), reset, used(3))]
    );
    assert_eq!(
        planned(&report),
        vec![(S(3), WaitBasis::ResetHeader { requested: S(3) })]
    );
}

#[tokio::test(start_paused = true)]
async fn each_ietf_form_gives_its_wait() {
    for (name, value) in [
        ("ratelimit", r#""p";r=0;t=3"#),
        ("ratelimit", r#""clears";r=0;t=3"#),
        ("ratelimit", "limit=1, remaining=0, reset=3"),
        ("ratelimit-reset", "3"),
    ] {
        let (report, took, calls) = run_with(
            Policy::default(),
            reset_signal(),
            Some(now()),
            429,
            &[(name, value)],
        )
        .await;
        assert_eq!(
            (report.outcome, took, calls),
            (Outcome::Success, S(3), 2),
            "{name}: {value}"
        );
        assert_eq!(
            resets(&report),
            vec![(name.to_owned(), value.to_owned(), used(3))]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reset_header_never_shortens_retry_after_and_the_longer_wait_wins() {
    let signal = reset_signal();
    let (report, took, _) = run_with(
        Policy::default(),
        signal.clone(),
        Some(now()),
        429,
        &[("retry-after", "5"), ("ratelimit-reset", "3")],
    )
    .await;
    assert_eq!(took, S(5));
    assert_eq!(
        resets(&report)[0].2,
        ResetRead::Wait {
            wait: S(3),
            used: false
        }
    );
    let (report, took, _) = run_with(
        Policy::default(),
        signal,
        Some(now()),
        429,
        &[("retry-after", "2"), ("ratelimit-reset", "4")],
    )
    .await;
    assert_eq!(took, S(4));
    assert_eq!(resets(&report)[0].2, used(4));
}

#[tokio::test(start_paused = true)]
async fn malformed_untrusted_and_too_long_resets_are_ignored_and_recorded() {
    let ignored = |why| ResetRead::Ignored { why };
    // Malformed: the fallback.
    let (report, took, _) = run_with(
        Policy::default(),
        reset_signal(),
        Some(now()),
        429,
        &[("ratelimit-reset", "2.5")],
    )
    .await;
    assert_eq!(took, S(2));
    assert_eq!(resets(&report)[0].2, ignored(ResetIgnored::Malformed));
    // A Unix time with no trusted calendar.
    let layer_signal = reset_signal();
    let (report, took, _) = run_with(
        Policy::default(),
        layer_signal,
        None,
        429,
        &[("x-ratelimit-reset", "1764504003")],
    )
    .await;
    assert_eq!(took, S(2));
    assert_eq!(
        resets(&report)[0].2,
        ignored(ResetIgnored::NoTrustedCalendar)
    );
    // Longer than the maximum interval.
    let (report, took, _) = run_with(
        Policy::default(),
        reset_signal().max_interval(S(10)),
        Some(now()),
        429,
        &[("ratelimit-reset", "11")],
    )
    .await;
    assert_eq!(took, S(2));
    assert_eq!(resets(&report)[0].2, ignored(ResetIgnored::OverMaxInterval));
}

#[tokio::test(start_paused = true)]
async fn the_visible_status_names_the_header_that_gave_the_wait() {
    let (report, took, calls) = run_with(
        Policy::default(),
        reset_signal(),
        Some(now()),
        429,
        &[("x-ratelimit-reset", &(unix(now()) + 30).to_string())],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, Duration::ZERO, 1)
    );
    assert_eq!(report.server_requested_wait, Some(S(30)));
    assert!(
        report.to_string().contains(
            "The service asked to wait 30 s (its x-ratelimit-reset header); no retry was sent."
        ),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn reset_headers_are_read_on_a_retried_status_only() {
    // A 200 carrying reset headers (express-rate-limit sends them on every
    // response): nothing is read, nothing recorded.
    let (report, _, calls) = run_with(
        Policy::default(),
        reset_signal(),
        Some(now()),
        200,
        &[("ratelimit-reset", "3")],
    )
    .await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 1));
    assert!(resets(&report).is_empty());
    // A 503 the policy does not retry: not read either.
    let (report, _, _) = run_with(
        Policy::default(),
        reset_signal(),
        Some(now()),
        503,
        &[("ratelimit-reset", "3")],
    )
    .await;
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert!(resets(&report).is_empty());
}

#[tokio::test(start_paused = true)]
async fn reset_headers_compose_with_the_grpc_signal() {
    let (report, took, calls) = run_with(
        Policy::default(),
        ResetSignal::wrapping(GrpcSignal).ratelimit_fields(),
        Some(now()),
        200,
        &[("grpc-status", "8"), ("ratelimit-reset", "3")],
    )
    .await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(3), 2));
    assert_eq!(resets(&report)[0].2, used(3));
}

// -------------------------------------------------------------- spread

#[tokio::test(start_paused = true)]
async fn the_spread_adds_at_most_its_width_on_top_of_the_servers_delay() {
    let policy = Policy::builder().spread(S(1)).build().unwrap();
    for _ in 0..8 {
        let (report, took, _) = run_with(
            policy,
            HttpSignal,
            Some(now()),
            429,
            &[("retry-after", "2")],
        )
        .await;
        let extras: Vec<Duration> = report
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Spread { extra, .. } => Some(extra),
                _ => None,
            })
            .collect();
        let [extra] = extras[..] else {
            panic!("{:?}", report.events);
        };
        assert!(extra <= S(1), "{extra:?}");
        assert_eq!(
            planned(&report),
            vec![(S(2) + extra, WaitBasis::Server { requested: S(2) })]
        );
        assert_eq!(
            took,
            S(2) + extra,
            "the action waited exactly the planned wait"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_calendar_still_reads_delay_seconds_resets() {
    // Seconds need no calendar, even when the layer has none.
    let inner = service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(
            Response::builder()
                .status(429)
                .header("ratelimit-reset", "3")
                .body(())
                .unwrap(),
        )
    });
    let client = ServiceBuilder::new()
        .layer(
            RetryBudgetLayer::new(Policy::builder().max_attempts(2).build().unwrap())
                .calendar(UntrustedCalendar)
                .signal(reset_signal()),
        )
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(started.elapsed(), S(3));
}

// ------------------------------------------------- grpc-go's vectors

/// grpc-go's `grpc-retry-pushback-ms` vectors (`test/retry_test.go`,
/// `TestRetryStreaming` and `TestRetryStats`), with grpc-go's own status
/// UNAVAILABLE (14) in a Trailers-Only response, under a policy that
/// retries its HTTP equivalent 503. Each row: the values sent, this
/// project's outcome and time taken, and why.
#[tokio::test(start_paused = true)]
async fn grpc_go_pushback_vectors() {
    let policy = Policy::builder()
        .retry_statuses([429, 503])
        .build()
        .unwrap();
    for (source, pushbacks, expected, why) in [
        (
            "TestRetryStreaming: Negative server pushback - no retry",
            &["-1"][..],
            (Outcome::NotRetryable, Duration::ZERO, 1),
            "same: a negative pushback forbids the retry (gRFC A6)",
        ),
        (
            "TestRetryStreaming: Non-numeric server pushback - no retry",
            &["xxx"][..],
            (Outcome::NotRetryable, Duration::ZERO, 1),
            "same",
        ),
        (
            "TestRetryStreaming: Multiple server pushback values - no retry",
            &["100", "10"][..],
            (Outcome::NotRetryable, Duration::ZERO, 1),
            "same: unlike Retry-After, a repeated pushback is not read as its longest value, as grpc-go",
        ),
        (
            "TestRetryStreaming: 1s server pushback - delayed retry",
            &["1000"][..],
            (Outcome::Success, S(1), 2),
            "same: retried after exactly the pushback",
        ),
        (
            "TestRetryStats: grpc-retry-pushback-ms 10",
            &["10"][..],
            (Outcome::Success, S(1), 2),
            "DIFFERS: grpc-go retries after 10 ms; here the 1 s local floor applies to a server's delay",
        ),
    ] {
        let mut headers = vec![("grpc-status", "14")];
        headers.extend(pushbacks.iter().map(|p| ("grpc-retry-pushback-ms", *p)));
        let (report, took, calls) =
            run_with(policy, GrpcSignal, Some(now()), 200, &headers).await;
        assert_eq!((report.outcome, took, calls), expected, "grpc-go {source}: {why}");
    }
}
