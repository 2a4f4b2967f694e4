//! Hostile `Retry-After` values through the layer, one scenario per test.
//! The rule for each is documented in `retry_budget::retry_after::RetryAfter`: anything
//! that is not exactly `1*DIGIT` or an HTTP-date is invalid (the local
//! fallback applies, and the raw value, shortened, is kept in the trail);
//! of several fields, the longest valid wait counts.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use retry_budget::{
    retry_after::MAX_KEPT_RAW,
    trail::{EventKind, RetryAfterSeen},
    Outcome, Policy, Report,
};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetServiceBuilderExt;

/// Answers 429 with these Retry-After values first, then 200; returns the
/// report, how long the action took and the number of calls.
async fn run(values: Vec<HeaderValue>) -> (Report, Duration, usize) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut res = Response::builder().status(if n == 0 { 429 } else { 200 });
        if n == 0 {
            for value in &values {
                res = res.header("retry-after", value.clone());
            }
        }
        let res = res.body(()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    (report, started.elapsed(), calls.load(Ordering::SeqCst))
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

#[tokio::test(start_paused = true)]
async fn non_utf8_bytes_are_invalid_and_use_the_fallback() {
    let value = HeaderValue::from_bytes(b"\xff\xfe 5").unwrap();
    let (report, took, calls) = run(vec![value]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::Success, Duration::from_secs(2), 2)
    );
    assert!(matches!(seen(&report), RetryAfterSeen::Invalid { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_10_kb_value_is_invalid_and_kept_short() {
    let value = HeaderValue::from_str(&"9".repeat(5_000).replacen('9', "x", 1)).unwrap();
    let (report, took, _) = run(vec![value]).await;
    assert_eq!(took, Duration::from_secs(2));
    let RetryAfterSeen::Invalid { raw } = seen(&report) else {
        panic!("not invalid")
    };
    assert!(
        raw.chars().count() <= MAX_KEPT_RAW + 4,
        "{} chars kept",
        raw.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_10_kb_run_of_digits_is_a_saturated_wait_not_a_panic() {
    let value = HeaderValue::from_str(&"9".repeat(10_000)).unwrap();
    let (report, took, calls) = run(vec![value]).await;
    assert_eq!(report.outcome, Outcome::BudgetExhausted);
    assert_eq!((took, calls), (Duration::ZERO, 1));
    assert_eq!(
        report.server_requested_wait,
        Some(Duration::from_secs(u64::MAX))
    );
}

#[tokio::test(start_paused = true)]
async fn several_fields_count_by_the_longest_wait() {
    // Issue 13: `1` and `30` must not shorten the wait to the 2 s fallback;
    // 30 s does not fit the 20 s budget, so the action stops at once.
    let values = vec![
        HeaderValue::from_static("1"),
        HeaderValue::from_static("30"),
    ];
    let (report, took, calls) = run(values).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, Duration::ZERO, 1)
    );
    assert_eq!(
        seen(&report),
        RetryAfterSeen::Seconds {
            value: Duration::from_secs(30)
        }
    );
    assert_eq!(report.server_requested_wait, Some(Duration::from_secs(30)));
}

#[tokio::test(start_paused = true)]
async fn the_year_9999_is_a_valid_date_far_beyond_the_budget() {
    let value = HeaderValue::from_static("Fri, 31 Dec 9999 23:59:59 GMT");
    let (report, took, calls) = run(vec![value]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, Duration::ZERO, 1)
    );
    assert!(matches!(seen(&report), RetryAfterSeen::Date { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_date_before_1970_is_invalid_not_zero() {
    let value = HeaderValue::from_static("Thu, 01 Jan 1960 00:00:00 GMT");
    let (report, took, _) = run(vec![value]).await;
    assert_eq!(
        took,
        Duration::from_secs(2),
        "the fallback, not an immediate retry"
    );
    assert!(matches!(seen(&report), RetryAfterSeen::Invalid { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_date_in_the_past_waits_the_floor() {
    let value = HeaderValue::from_static("Mon, 01 Jan 2024 12:00:00 GMT");
    let (report, took, calls) = run(vec![value]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::Success, Duration::from_secs(1), 2)
    );
}
