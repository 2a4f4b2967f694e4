//! Focused scenarios for the layer, one per test, under tokio's paused clock.

mod support;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response};
use retry_budget::{
    trail::{EventKind, WaitBasis},
    Outcome, Policy, Report,
};
use support::{report_of, secs, Scripted, Step};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready, task};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    calendar::{DateReference, FnCalendar, UntrustedCalendar},
    tower_policy::BudgetPolicy,
    BudgetThis, ErrorKind, Idempotent, RetryBudgetLayer, RetryBudgetServiceBuilderExt,
};

fn get() -> Request<()> {
    Request::get("http://upstream.test/items").body(()).unwrap()
}

/// Advances the paused clock to `at` (elapsed since `origin`).
async fn advance_to(origin: Instant, at: Duration) {
    let now = Instant::now() - origin;
    assert!(at >= now, "cannot go back from {now:?} to {at:?}");
    advance(at - now).await;
}

#[tokio::test(start_paused = true)]
async fn schedule_a_exact_instants() {
    let origin = Instant::now();
    let inner = Scripted::new(vec![
        Step::new(2.0, 429, Some("3")),
        Step::new(2.0, 429, Some("4")),
        Step::new(3.0, 200, None),
    ]);
    let mut client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner.clone());
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(get()));

    assert_pending!(fut.poll());
    advance_to(origin, secs(2)).await;
    assert_pending!(fut.poll()); // 429 received, waiting until 5
    advance_to(origin, Duration::from_millis(4999)).await;
    assert_pending!(fut.poll());
    assert_eq!(inner.call_count(), 1, "never earlier than the server asked");
    advance_to(origin, secs(5)).await;
    assert_pending!(fut.poll());
    assert_eq!(inner.calls(), [secs(0), secs(5)]);
    advance_to(origin, secs(7)).await;
    assert_pending!(fut.poll()); // 429 received, waiting until 11
    advance_to(origin, secs(11)).await;
    assert_pending!(fut.poll());
    advance_to(origin, secs(14)).await;
    let response = assert_ready!(fut.poll()).unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(inner.calls(), [secs(0), secs(5), secs(11)]);
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.elapsed, secs(14));
    assert_eq!((report.request_time, report.wait_time), (secs(7), secs(7)));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_during_a_wait_stops_everything() {
    let inner = Scripted::new(vec![
        Step::new(1.0, 429, Some("5")),
        Step::new(1.0, 200, None),
    ]);
    let mut client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(inner.clone());
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(get()));
    assert_pending!(fut.poll());
    advance(secs(2)).await;
    assert_pending!(fut.poll());
    drop(fut);
    advance(secs(3600)).await;
    tokio::task::yield_now().await;
    assert_eq!(inner.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn token_fired_during_an_attempt_cancels_with_a_report() {
    let inner = Scripted::new(vec![Step::new(3.0, 200, None)]);
    let mut client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner.clone());
    let token = CancellationToken::new();
    let mut request = get();
    request.extensions_mut().insert(token.clone());
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(request));
    assert_pending!(fut.poll());
    advance(secs(1)).await;
    assert_pending!(fut.poll());
    token.cancel();
    assert!(fut.is_woken());
    let error = assert_ready!(fut.poll()).unwrap_err();
    assert!(error.is_cancelled());
    let report = error.report().unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.elapsed, secs(1));
    assert_eq!(report.request_time, secs(1));
    assert_eq!(report.last_status, None);
    advance(secs(60)).await;
    assert_eq!(inner.call_count(), 1);
}

/// A body that counts its clones.
#[derive(Debug)]
struct CountingBody(Arc<AtomicUsize>);

impl Clone for CountingBody {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Self(self.0.clone())
    }
}

fn counting(method: Method, clones: &Arc<AtomicUsize>) -> Request<CountingBody> {
    Request::builder()
        .method(method)
        .uri("http://upstream.test/items")
        .body(CountingBody(clones.clone()))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn post_getting_429_is_returned_at_once_never_copied() {
    let inner = Scripted::new(vec![Step::new(1.0, 429, Some("1"))]);
    let clones = Arc::new(AtomicUsize::new(0));
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner.clone());
    let started = Instant::now();
    let response = client
        .oneshot(counting(Method::POST, &clones))
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(started.elapsed(), secs(1));
    assert!(
        response.extensions().get::<Report>().is_none(),
        "passed through"
    );
    assert_eq!(inner.call_count(), 1);
    assert_eq!(clones.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_budgeted_post_is_sent_once_and_ends_not_retryable_with_its_reason() {
    let inner = Scripted::new(vec![Step::new(1.0, 429, Some("1"))]);
    let clones = Arc::new(AtomicUsize::new(0));
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner.clone());
    let started = Instant::now();
    let mut request = counting(Method::POST, &clones);
    request.extensions_mut().insert(BudgetThis);
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(started.elapsed(), secs(1), "returned at once, no wait");
    assert_eq!(inner.call_count(), 1);
    assert_eq!(clones.load(Ordering::SeqCst), 0, "never copied");
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.max_attempts, 3, "retries were on");
    assert!(report
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::NotRepeatable { attempt: 1 })));
    assert!(
        report
            .message()
            .contains("its method is not safe to repeat"),
        "{}",
        report.message()
    );
}

#[tokio::test(start_paused = true)]
async fn idempotent_post_is_retried_with_the_same_key() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let inner = service_fn(move |req: Request<()>| {
        let key = req.headers()["idempotency-key"].clone();
        let mut seen = record.lock().unwrap();
        seen.push(key);
        let status = if seen.len() == 1 { 429 } else { 201 };
        async move { Ok::<_, Infallible>(Response::builder().status(status).body(()).unwrap()) }
    });
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner);
    let mut request = Request::post("http://upstream.test/jobs")
        .header("idempotency-key", "job-7f3a")
        .body(())
        .unwrap();
    request.extensions_mut().insert(Idempotent);
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(report_of(&response).attempts_started, 2);
    assert_eq!(*seen.lock().unwrap(), ["job-7f3a", "job-7f3a"]);
}

#[tokio::test(start_paused = true)]
async fn a_get_is_copied_only_for_retries_that_can_follow() {
    let clones = Arc::new(AtomicUsize::new(0));
    let three_429 = || {
        Scripted::new(vec![
            Step::new(0.0, 429, Some("1")),
            Step::new(0.0, 429, Some("1")),
            Step::new(0.0, 429, Some("1")),
        ])
    };
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(three_429());
    let response = client
        .oneshot(counting(Method::GET, &clones))
        .await
        .unwrap();
    assert_eq!(report_of(&response).outcome, Outcome::AttemptsExhausted);
    // One template, one copy for attempt 2; attempt 3 takes the template.
    assert_eq!(clones.load(Ordering::SeqCst), 2);

    clones.store(0, Ordering::SeqCst);
    let one_attempt = Policy::builder().max_attempts(1).build().unwrap();
    let client = ServiceBuilder::new()
        .retry_budget(one_attempt)
        .service(three_429());
    let response = client
        .oneshot(counting(Method::GET, &clones))
        .await
        .unwrap();
    assert_eq!(report_of(&response).outcome, Outcome::AttemptsExhausted);
    assert_eq!(
        clones.load(Ordering::SeqCst),
        0,
        "retries disabled: no copy"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_the_cap_times_out_and_is_not_retried() {
    let origin = Instant::now();
    let inner = Scripted::new(vec![Step::new(10.0, 200, None), Step::new(1.0, 200, None)]);
    let mut client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner.clone());
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(get()));
    assert_pending!(fut.poll());
    advance_to(origin, Duration::from_millis(3999)).await;
    assert_pending!(fut.poll());
    advance_to(origin, secs(4)).await;
    let error = assert_ready!(fut.poll()).unwrap_err();
    assert!(error.is_timeout());
    let report = error.report().unwrap();
    assert_eq!(report.outcome, Outcome::AttemptTimeout);
    assert_eq!(report.elapsed, secs(4));
    advance(secs(60)).await;
    assert_eq!(inner.call_count(), 1);
}

#[derive(Debug, PartialEq, Eq)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection refused")
    }
}
impl std::error::Error for Refused {}

#[tokio::test(start_paused = true)]
async fn an_inner_error_is_kept_typed_and_not_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Err::<Response<()>, _>(Refused) }
    });
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner);
    let error = client.oneshot(get()).await.unwrap_err();
    assert!(matches!(error.kind(), ErrorKind::Inner(Refused)));
    assert_eq!(error.report().unwrap().outcome, Outcome::TransportError);
    let source = std::error::Error::source(&error).unwrap();
    assert_eq!(source.to_string(), "connection refused");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Ready only from `ready_at` on (elapsed since `origin`).
#[derive(Clone)]
struct ReadyFrom {
    inner: Scripted,
    origin: Instant,
    ready_at: Duration,
    sleep: Arc<Mutex<Option<Pin<Box<tokio::time::Sleep>>>>>,
}

impl Service<Request<()>> for ReadyFrom {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = <Scripted as Service<Request<()>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        let mut sleep = self.sleep.lock().unwrap();
        let sleep = sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(self.origin + self.ready_at)));
        sleep.as_mut().poll(cx).map(Ok)
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        self.inner.call(req)
    }
}

#[tokio::test(start_paused = true)]
async fn retries_wait_for_readiness_and_the_budget_still_holds() {
    let origin = Instant::now();
    let scripted = Scripted::new(vec![
        Step::new(1.0, 429, Some("1")),
        Step::new(1.0, 200, None),
    ]);
    // Ready at once for the first attempt, then again only at 10 s.
    let mut service = ReadyFrom {
        inner: scripted.clone(),
        origin,
        ready_at: secs(10),
        sleep: Arc::default(),
    };
    let mut client = RetryBudgetLayer::new(Policy::default()).layer_on(service.clone());
    // The first attempt goes out without waiting for readiness only because
    // the caller skipped `ready()`; tower's contract is respected for retries.
    let mut fut = task::spawn(client.call(get()));
    assert_pending!(fut.poll());
    advance_to(origin, secs(2)).await; // 429 at 1, wait to 2
    assert_pending!(fut.poll());
    advance_to(origin, secs(9)).await;
    assert_pending!(fut.poll());
    assert_eq!(scripted.call_count(), 1, "not sent while not ready");
    advance_to(origin, secs(10)).await;
    assert_pending!(fut.poll());
    advance_to(origin, secs(11)).await;
    let response = assert_ready!(fut.poll()).unwrap();
    assert_eq!(scripted.calls(), [secs(0), secs(10)]);
    assert_eq!(report_of(&response).outcome, Outcome::Success);

    // Never ready again within the budget: stop at the latest start (20 − 4).
    let origin = Instant::now();
    let scripted = Scripted::new(vec![
        Step::new(1.0, 429, Some("1")),
        Step::new(1.0, 200, None),
    ]);
    service = ReadyFrom {
        inner: scripted.clone(),
        origin,
        ready_at: secs(100),
        sleep: Arc::default(),
    };
    let mut client = RetryBudgetLayer::new(Policy::default()).layer_on(service);
    let response = client.call(get()).await.unwrap();
    let report = report_of(&response);
    assert_eq!(response.status(), 429, "the last response is returned");
    assert_eq!(report.outcome, Outcome::BudgetExhausted);
    let stopped = Instant::now() - origin;
    // Exactly at the latest start (20 − 4), not a tick later.
    assert_eq!(stopped, secs(16));
    assert_eq!(report.elapsed, secs(16));
    assert_eq!(scripted.call_count(), 1);
}

trait LayerOn {
    fn layer_on<S>(self, service: S) -> tower_retry_budget::RetryBudget<S>;
}
impl LayerOn for RetryBudgetLayer {
    fn layer_on<S>(self, service: S) -> tower_retry_budget::RetryBudget<S> {
        tower::Layer::layer(&self, service)
    }
}

fn date_response(status: u16, retry_after: &str, date: Option<&str>) -> Response<()> {
    let mut res = Response::builder()
        .status(status)
        .header("retry-after", retry_after);
    if let Some(date) = date {
        res = res.header("date", date);
    }
    res.body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_clock_stops_on_a_date() {
    let inner = service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(date_response(429, "Mon, 01 Jan 2024 12:00:06 GMT", None))
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).calendar(UntrustedCalendar))
        .service(inner);
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(report_of(&response).outcome, Outcome::ClockUntrusted);
}

#[tokio::test(start_paused = true)]
async fn the_response_date_makes_a_skewed_local_clock_harmless() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            Ok::<_, Infallible>(if n == 0 {
                date_response(
                    429,
                    "Mon, 01 Jan 2024 12:00:03 GMT",
                    Some("Mon, 01 Jan 2024 12:00:00 GMT"),
                )
            } else {
                Response::new(())
            })
        }
    });
    // The local clock is a year behind: against it the date would be far away.
    let skewed = FnCalendar(|| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_672_531_200)));
    let layer = RetryBudgetLayer::new(Policy::default())
        .calendar(skewed)
        .dates(DateReference::ResponseDate);
    let started = Instant::now();
    let response = ServiceBuilder::new()
        .layer(layer)
        .service(inner)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(started.elapsed(), secs(3));
    let report = report_of(&response);
    assert!(report.events.iter().any(|e| matches!(
        e.kind,
        EventKind::WaitPlanned { basis: WaitBasis::Server { requested }, .. } if requested == secs(3)
    )));
    // The last response (200) asked for nothing.
    assert_eq!(report.server_requested_wait, None);
}

#[tokio::test(start_paused = true)]
async fn several_retry_after_fields_wait_the_longest() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let res = if n == 0 {
                Response::builder()
                    .status(429)
                    .header("retry-after", "1")
                    .header("retry-after", "9")
                    .body(())
                    .unwrap()
            } else {
                Response::new(())
            };
            Ok::<_, Infallible>(res)
        }
    });
    let started = Instant::now();
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner);
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(
        started.elapsed(),
        secs(9),
        "the longest valid wait, never the 2 s fallback"
    );
    assert_eq!(report_of(&response).attempts_started, 2);
}

#[tokio::test(start_paused = true)]
async fn tower_retry_with_the_budget_policy_follows_schedule_a() {
    let inner = Scripted::new(vec![
        Step::new(2.0, 429, Some("3")),
        Step::new(2.0, 429, Some("4")),
        Step::new(3.0, 200, None),
    ]);
    let client = ServiceBuilder::new()
        .retry(BudgetPolicy::new(Policy::default()))
        .service(inner.clone());
    let started = Instant::now();
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(started.elapsed(), secs(14));
    assert_eq!(inner.calls(), [secs(0), secs(5), secs(11)]);
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.starts(), [secs(0), secs(5), secs(11)]);
}

#[tokio::test(start_paused = true)]
async fn tower_retry_with_the_budget_policy_stops_when_the_wait_does_not_fit() {
    let inner = Scripted::new(vec![
        Step::new(2.0, 429, Some("30")),
        Step::new(1.0, 200, None),
    ]);
    let client = ServiceBuilder::new()
        .retry(BudgetPolicy::new(Policy::default()))
        .service(inner.clone());
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(report_of(&response).outcome, Outcome::BudgetExhausted);
    assert_eq!(inner.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn report_mode_when_retried_leaves_out_only_the_unretried_unasked_report() {
    use tower_retry_budget::{ReportMode, ReportSlot};
    let layer = RetryBudgetLayer::new(Policy::default()).report_mode(ReportMode::WhenRetried);
    let inner = Scripted::new(vec![
        Step::new(0.0, 200, None),
        Step::new(0.0, 429, Some("1")),
        Step::new(0.0, 200, None),
        Step::new(0.0, 404, None),
        Step::new(0.0, 200, None),
    ]);
    let client = ServiceBuilder::new().layer(layer).service(inner);

    // Answered at once: no report built.
    let plain = client.clone().oneshot(get()).await.unwrap();
    assert!(plain.extensions().get::<Report>().is_none());
    // Retried: the report is there.
    let retried = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(report_of(&retried).attempts_started, 2);
    // Not retryable, at once: none either (it needed no retry).
    let not_found = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(not_found.status(), 404);
    assert!(not_found.extensions().get::<Report>().is_none());
    // Asked for with a slot: in the slot and on the response.
    let slot = ReportSlot::new();
    let mut request = get();
    request.extensions_mut().insert(slot.clone());
    let asked = client.oneshot(request).await.unwrap();
    assert_eq!(report_of(&asked).outcome, Outcome::Success);
    assert_eq!(slot.take().unwrap().outcome, Outcome::Success);
}

#[test]
fn the_default_layer_has_the_default_policy() {
    assert_eq!(RetryBudgetLayer::default().policy(), &Policy::default());
}

#[tokio::test(start_paused = true)]
async fn every_attempt_carries_the_deadline_the_core_reserved_for_it() {
    use tower_retry_budget::AttemptDeadline;

    let origin = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let inner = service_fn(move |request: Request<()>| {
        let deadline = request.extensions().get::<AttemptDeadline>().copied();
        record
            .lock()
            .unwrap()
            .push((Instant::now() - origin, deadline));
        async {
            let mut response = Response::new(());
            *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, "2".parse().unwrap());
            Ok::<_, Infallible>(response)
        }
    });
    // A caller's deadline of 6 s shrinks the budget, as in a proxy.
    let policy = Policy::default().within(secs(6)).unwrap();
    let mut client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy).attempt_deadlines())
        .service(inner);
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(get()));
    assert_pending!(fut.poll());
    advance_to(origin, secs(2)).await;
    // The second 429 answers at once; a third attempt could not fit.
    let response = assert_ready!(fut.poll()).unwrap();
    assert_eq!(response.status(), 429);
    let at = |attempt, reservation| AttemptDeadline {
        attempt,
        reservation,
    };
    // 1 at 0 s (cap 4 s); 2 at 2 s (ends at 6 s); no third: 4 + 4 > 6.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (secs(0), Some(at(1, secs(4)))),
            (secs(2), Some(at(2, secs(4))))
        ]
    );
}
