//! What OpenAI's and Anthropic's APIs send, through the layer under tokio's
//! paused clock with exact instants: `retry-after-ms`, `x-should-retry`,
//! their reset headers (Go durations, RFC 3339), the presets, and a quota
//! used up in a 429's JSON body ([`PeekLayer`]), whose body the caller
//! still receives byte for byte.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use retry_budget::trail::{EventKind, ResetRead, WaitBasis};
use retry_budget::{Category, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::calendar::FnCalendar;
use tower_retry_budget::peek::{BodySignals, PeekLayer};
use tower_retry_budget::response_signal::{HttpSignal, ResetSignal, RetrySignal};
use tower_retry_budget::RetryBudgetLayer;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
const RATE: &str = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;

/// The calendar reading used throughout: 2026-12-01T17:59:55Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + S(1_796_148_000 - 5)
}

/// The first response is `429` with these headers, every later one 200.
async fn run<G>(signal: G, headers: &[(&str, &str)]) -> (Report, Duration, usize)
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
        let mut res = Response::builder().status(if n == 0 { 429 } else { 200 });
        if n == 0 {
            for (name, value) in &headers {
                res = res.header(name.as_str(), value.as_str());
            }
        }
        let res = res.body(()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let layer = RetryBudgetLayer::new(Policy::default())
        .calendar(FnCalendar(|| Some(now())))
        .signal(signal);
    let client = ServiceBuilder::new().layer(layer).service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    (report, started.elapsed(), calls.load(Ordering::SeqCst))
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

#[tokio::test(start_paused = true)]
async fn retry_after_ms_is_ignored_unless_asked_for() {
    let (report, took, calls) = run(HttpSignal, &[("retry-after-ms", "2500")]).await;
    // The 2 s fallback: what the layer did before.
    assert_eq!((took, calls), (S(2), 2));
    assert!(matches!(planned(&report)[0].1, WaitBasis::Fallback { .. }));
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_is_waited_in_full() {
    let signal = ResetSignal::new().retry_after_ms();
    let (report, took, calls) = run(signal.clone(), &[("retry-after-ms", "2500")]).await;
    assert_eq!((took, calls), (MS(2500), 2));
    assert_eq!(
        planned(&report),
        vec![(
            MS(2500),
            WaitBasis::Server {
                requested: MS(2500)
            }
        )]
    );
    // Beside a shorter Retry-After: never sooner than either asked.
    let headers = [("retry-after", "2"), ("retry-after-ms", "2750.5")];
    let (report, took, _) = run(signal.clone(), &headers).await;
    let asked = MS(2750) + Duration::from_micros(500);
    assert_eq!(planned(&report)[0].0, asked);
    // tokio's timer has whole milliseconds: the next one, never sooner.
    assert_eq!(took, MS(2751));
    // Beside a longer one: the longer.
    let headers = [("retry-after", "3"), ("retry-after-ms", "100")];
    let (_, took, _) = run(signal.clone(), &headers).await;
    assert_eq!(took, S(3));
    // Invalid: recorded, the fallback applies.
    let (report, took, _) = run(signal, &[("retry-after-ms", "2.5s")]).await;
    assert_eq!(took, S(2));
    assert!(report.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::RetryAfterMs { raw, reading: ResetRead::Ignored { .. }, .. } if &**raw == "2.5s"
    )));
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_false_ends_not_retryable_at_once() {
    let signal = ResetSignal::new().should_retry();
    let (report, took, calls) = run(
        signal.clone(),
        &[("x-should-retry", "false"), ("retry-after", "1")],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::NotRetryable, S(0), 1)
    );
    assert!(report.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::ShouldRetry { header, says: Some(false), .. } if &**header == "x-should-retry"
    )));
    // `true` changes nothing on a 429.
    let (report, took, _) = run(signal, &[("x-should-retry", "true"), ("retry-after", "1")]).await;
    assert_eq!((report.outcome, took), (Outcome::Success, S(1)));
    // Not asked for: ignored.
    let (report, _, calls) = run(HttpSignal, &[("x-should-retry", "false")]).await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 2));
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_true_never_makes_a_500_retryable() {
    let inner = service_fn(|_: Request<()>| async {
        let res = Response::builder()
            .status(500)
            .header("x-should-retry", "true")
            .body(())
            .unwrap();
        Ok::<_, Infallible>(res)
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(ResetSignal::openai()))
        .service(inner);
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(
        (report.outcome, report.attempts_started),
        (Outcome::NotRetryable, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_openai_preset_reads_its_reset_durations() {
    let headers = [
        ("x-ratelimit-reset-requests", "1.5s"),
        ("x-ratelimit-reset-tokens", "3s"),
    ];
    let (report, took, calls) = run(ResetSignal::openai(), &headers).await;
    assert_eq!((took, calls), (S(3), 2));
    assert_eq!(
        planned(&report),
        vec![(S(3), WaitBasis::ResetHeader { requested: S(3) })]
    );
    // A reset beyond the budget: stopped at once, nothing more sent.
    let (report, took, calls) = run(
        ResetSignal::openai(),
        &[("x-ratelimit-reset-tokens", "6m0s")],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, S(0), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_anthropic_preset_reads_its_rfc3339_resets() {
    let headers = [
        ("anthropic-ratelimit-requests-reset", "2026-12-01T18:00:00Z"),
        ("anthropic-ratelimit-tokens-reset", "2026-12-01T17:59:58Z"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2026-12-01T19:00:01+01:00",
        ),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2026-12-01T17:59:57.5Z",
        ),
    ];
    let (report, took, calls) = run(ResetSignal::anthropic(), &headers).await;
    // The calendar reads 17:59:55: the longest, 6 s, counts.
    assert_eq!((took, calls), (S(6), 2));
    assert_eq!(
        report
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::ResetHeader { .. }))
            .count(),
        4
    );
    assert_eq!(
        planned(&report),
        vec![(S(6), WaitBasis::ResetHeader { requested: S(6) })]
    );
}

/// An upstream whose first response is a 429 with a JSON `body` (every
/// later one 200), counting calls.
fn upstream(
    body: &'static str,
    content_type: &'static str,
) -> (
    impl tower::Service<
            Request<()>,
            Response = Response<Full<Bytes>>,
            Error = Infallible,
            Future = impl Send,
        > + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let service = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let res = Response::builder()
            .status(if n == 0 { 429 } else { 200 })
            .header("content-type", content_type)
            .header("retry-after", "1")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    (service, calls)
}

#[tokio::test(start_paused = true)]
async fn a_quota_429_is_not_retried_and_its_body_arrives_whole() {
    let (inner, calls) = upstream(QUOTA, "application/json; charset=utf-8");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).attempt_deadlines())
        .layer(PeekLayer::openai())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(started.elapsed(), S(0));
    assert_eq!(response.status(), 429);
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(
        (
            report.outcome,
            report.attempts_started,
            calls.load(Ordering::SeqCst)
        ),
        (Outcome::NotRetryable, 1, 1)
    );
    assert_eq!(report.category(), Some(Category::Quota));
    assert!(report.to_string().contains(Category::Quota.hint()));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, QUOTA.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_429_with_a_json_body_is_retried_as_usual() {
    let (inner, calls) = upstream(RATE, "application/json");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .layer(PeekLayer::openai())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!((started.elapsed(), response.status().as_u16()), (S(1), 200));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_quota_body_that_is_not_json_typed_is_not_read() {
    let (inner, calls) = upstream(QUOTA, "text/plain");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .layer(PeekLayer::openai())
        .service(inner);
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn non_json_and_too_large_bodies_pass_untouched() {
    // Declared JSON, but not JSON.
    let (inner, calls) = upstream("insufficient_quota", "application/json");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .layer(PeekLayer::openai())
        .service(inner);
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Over the bound: the 429 is retried as usual; the caller still gets
    // the whole body when it is the answer.
    let (inner, calls) = upstream(QUOTA, "application/json");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(
            Policy::builder().max_attempts(1).build().unwrap(),
        ))
        .layer(PeekLayer::openai().max_body(64))
        .service(inner);
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, QUOTA.as_bytes());
}

type Chunk = Result<http_body::Frame<Bytes>, Infallible>;
type Chunks = StreamBody<std::pin::Pin<Box<dyn futures_util::Stream<Item = Chunk> + Send>>>;

/// A 429 whose JSON body comes in two pieces, the second `delay` after the
/// head; then 200s.
fn slow_upstream(
    delay: Duration,
) -> (
    impl tower::Service<
            Request<()>,
            Response = Response<Chunks>,
            Error = Infallible,
            Future = impl Send,
        > + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let service = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let (first, second) = QUOTA.split_at(40);
        let stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = Chunk> + Send>> =
            Box::pin(async_stream(first, second, delay));
        let res = Response::builder()
            .status(if n == 0 { 429 } else { 200 })
            .header("content-type", "application/json")
            .header("retry-after", "1")
            .body(StreamBody::new(stream))
            .unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    (service, calls)
}

/// Two data frames, the second after `delay`.
fn async_stream(
    first: &'static str,
    second: &'static str,
    delay: Duration,
) -> impl futures_util::Stream<Item = Chunk> + Send {
    futures_util::stream::unfold(0u8, move |step| async move {
        match step {
            0 => Some((
                Ok(http_body::Frame::data(Bytes::from_static(first.as_bytes()))),
                1,
            )),
            1 => {
                tokio::time::sleep(delay).await;
                Some((
                    Ok(http_body::Frame::data(Bytes::from_static(
                        second.as_bytes(),
                    ))),
                    2,
                ))
            }
            _ => None,
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_body_within_the_read_timeout_is_read() {
    let (inner, calls) = slow_upstream(MS(900));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).attempt_deadlines())
        .layer(PeekLayer::openai())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(started.elapsed(), MS(900));
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.category(), Some(Category::Quota));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, QUOTA.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_slow_body_is_passed_on_at_the_read_timeout_and_the_429_retried() {
    let (inner, calls) = slow_upstream(S(3));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).attempt_deadlines())
        .layer(PeekLayer::openai())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    // 1 s read timeout, then Retry-After 1 s from there, then the 200 (its
    // own read: no 429, not read).
    assert_eq!(started.elapsed(), S(2));
    assert_eq!(response.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.starts(), vec![S(0), S(2)]);
}

#[tokio::test(start_paused = true)]
async fn the_read_stops_at_the_attempts_deadline_and_the_response_is_kept() {
    // A 2 s cap, a 10 s read timeout: the read stops at the attempt's
    // deadline, and the layer gets the 429 (not an attempt timeout).
    let (inner, calls) = slow_upstream(S(5));
    let policy = Policy::builder()
        .attempt_cap(S(2))
        .max_attempts(1)
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy).attempt_deadlines())
        .layer(PeekLayer::openai().read_timeout(S(10)))
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(started.elapsed(), S(2));
    assert_eq!(response.status(), 429);
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The caller still reads the whole body, byte for byte.
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, QUOTA.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_write_not_budgeted_is_not_read() {
    let (inner, calls) = upstream(QUOTA, "application/json");
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .layer(PeekLayer::openai())
        .service(inner);
    let request = Request::post("http://api/v1/chat/completions")
        .body(())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.extensions().get::<Report>().is_none());
    assert!(response.extensions().get::<BodySignals>().is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn trailers_and_frames_are_given_back_as_received() {
    let inner = service_fn(|_: Request<()>| async {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-t", "1".parse().unwrap());
        let body = Full::new(Bytes::from_static(RATE.as_bytes()))
            .with_trailers(async { Some(Ok(trailers)) })
            .boxed_unsync();
        let res = Response::builder()
            .status(429)
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        Ok::<_, Infallible>(res)
    });
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy))
        .layer(PeekLayer::openai())
        .service(inner);
    let response = client.oneshot(Request::new(())).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-t"], "1");
    assert_eq!(collected.to_bytes(), RATE.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_body_of_endless_empty_frames_is_not_waited_for() {
    let inner = service_fn(|_: Request<()>| async {
        let frames: std::pin::Pin<Box<dyn futures_util::Stream<Item = Chunk> + Send>> =
            Box::pin(futures_util::stream::repeat_with(|| {
                Ok(http_body::Frame::data(Bytes::new()))
            }));
        let res = Response::builder()
            .status(429)
            .header("content-type", "application/json")
            .body(StreamBody::new(frames))
            .unwrap();
        Ok::<_, Infallible>(res)
    });
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy))
        .layer(PeekLayer::openai())
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(started.elapsed(), S(0));
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
}

#[tokio::test(start_paused = true)]
async fn a_quota_429_holds_the_next_first_attempts_to_its_service_for_the_quota_hold() {
    use tower_retry_budget::hold_off::HoldOff;
    use tower_retry_budget::{Error, ErrorKind};

    let (inner, calls) = upstream(QUOTA, "application/json");
    let hold_off = HoldOff::new(8).unwrap();
    let client = ServiceBuilder::new()
        .layer(
            RetryBudgetLayer::new(Policy::default())
                .attempt_deadlines()
                .hold_off(hold_off.clone()),
        )
        .layer(PeekLayer::openai())
        .service(inner);
    let request = || Request::get("http://api.test/v1/models").body(()).unwrap();
    let response = client.clone().oneshot(request()).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.category(), Some(Category::Quota));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A client's immediate repeat (an SDK retrying every 429): not sent,
    // held_off, category quota, no wait told (waiting would not help).
    tokio::time::advance(S(2)).await;
    let started = Instant::now();
    let error: Error<Infallible> = client.clone().oneshot(request()).await.unwrap_err();
    assert_eq!(started.elapsed(), S(0));
    assert!(matches!(error.kind(), ErrorKind::NotSent));
    let report = error.report().unwrap();
    assert_eq!(
        (report.outcome, report.attempts_started),
        (Outcome::HeldOff, 0)
    );
    assert_eq!(report.category(), Some(Category::Quota));
    assert_eq!(report.held_off_left(), None);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Another service is not held; this one again once the hold is over
    // (10 s after the quota answer).
    let other = Request::get("http://other.test/v1/models")
        .body(())
        .unwrap();
    let _ = client.clone().oneshot(other).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(MS(7_999)).await;
    assert!(client.clone().oneshot(request()).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(MS(1)).await;
    let response = client.clone().oneshot(request()).await.unwrap();
    assert_eq!(
        response
            .extensions()
            .get::<Report>()
            .unwrap()
            .attempts_started,
        1
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
