//! A fallible `poll_ready` in every phase: the caller's own, before a first
//! attempt held off, before a retry; and a readiness that never comes. Each
//! ends in a defined outcome told to the core, with a report in the error
//! (or on the last response), a filled `ReportSlot`, and the observer told.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    hold_off::HoldOff,
    observer::{ActionId, Event, EventKind, Observer},
    ErrorKind, Outcome, Policy, Report, ReportSlot, RetryBudget, RetryBudgetLayer,
};

/// The inner service's error.
#[derive(Debug)]
struct Broken;

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("broken")
    }
}

impl std::error::Error for Broken {}

/// What one `poll_ready` answers.
#[derive(Debug, Clone, Copy)]
enum Ready {
    Yes,
    Fails,
    Never,
}

/// Clones share the script: each `poll_ready` takes the next readiness
/// (then `Yes`), each call answers at once with the next status (429 with
/// `Retry-After: 1`, then 200).
#[derive(Clone)]
struct Flaky {
    readiness: Arc<Mutex<VecDeque<Ready>>>,
    statuses: Arc<Mutex<VecDeque<u16>>>,
    calls: Arc<Mutex<usize>>,
}

impl Flaky {
    fn new(readiness: &[Ready], statuses: &[u16]) -> Self {
        Self {
            readiness: Arc::new(Mutex::new(readiness.iter().copied().collect())),
            statuses: Arc::new(Mutex::new(statuses.iter().copied().collect())),
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        *self.calls.lock().unwrap()
    }
}

impl Service<Request<()>> for Flaky {
    type Response = Response<()>;
    type Error = Broken;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, Broken>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Broken>> {
        let mut readiness = self.readiness.lock().unwrap();
        match readiness.front().copied().unwrap_or(Ready::Yes) {
            Ready::Yes => {
                readiness.pop_front();
                Poll::Ready(Ok(()))
            }
            Ready::Fails => {
                readiness.pop_front();
                Poll::Ready(Err(Broken))
            }
            // Stays at the front: never ready again (a test that needs a
            // wake-up would deadlock, and none does: the layer's timer
            // decides).
            Ready::Never => Poll::Pending,
        }
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        *self.calls.lock().unwrap() += 1;
        let status = self.statuses.lock().unwrap().pop_front().unwrap_or(200);
        let response = Response::builder()
            .status(status)
            .header("retry-after", "1")
            .body(())
            .unwrap();
        Box::pin(async move { Ok(response) })
    }
}

/// Records the reports the observer is given.
#[derive(Clone, Default)]
struct Reports(Arc<Mutex<Vec<(ActionId, Outcome)>>>);

impl Observer for Reports {
    fn on_event(&self, _: ActionId, _: &Event) {}

    fn on_report(&self, id: ActionId, report: &Report) {
        self.0.lock().unwrap().push((id, report.outcome));
    }
}

impl Reports {
    fn outcomes(&self) -> Vec<Outcome> {
        self.0.lock().unwrap().iter().map(|r| r.1).collect()
    }
}

fn get_with(slot: &ReportSlot) -> Request<()> {
    let mut request = Request::get("http://upstream.test/items").body(()).unwrap();
    request.extensions_mut().insert(slot.clone());
    request
}

fn layer(reports: &Reports) -> RetryBudgetLayer {
    RetryBudgetLayer::new(Policy::default()).observer(reports.clone())
}

fn client(layer: RetryBudgetLayer, inner: Flaky) -> RetryBudget<Flaky> {
    tower::Layer::layer(&layer, inner)
}

/// A hold-off map in which the upstream asked the client to wait `secs`
/// from now (an action of its own got that 429).
async fn held_off_for(secs: &'static str) -> HoldOff {
    let map = HoldOff::default();
    let once = Policy::builder().max_attempts(1).build().unwrap();
    let primer = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(once).hold_off(map.clone()))
        .service(service_fn(move |_: Request<()>| async move {
            let response = Response::builder()
                .status(429)
                .header("retry-after", secs)
                .body(())
                .unwrap();
            Ok::<_, Infallible>(response)
        }));
    let request = Request::get("http://upstream.test/items").body(()).unwrap();
    primer.oneshot(request).await.unwrap();
    map
}

/// The last two trail events, by kind.
fn ending(report: &Report) -> (EventKind, EventKind) {
    let n = report.events.len();
    (
        report.events[n - 2].kind.clone(),
        report.events[n - 1].kind.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn the_caller_s_own_poll_ready_failing_carries_a_report() {
    let reports = Reports::default();
    let inner = Flaky::new(&[Ready::Fails], &[]);
    let mut client = client(layer(&reports), inner.clone());
    let error = poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx))
        .await
        .unwrap_err();
    assert!(matches!(error.kind(), ErrorKind::Inner(Broken)));
    assert_eq!(error.outcome(), Outcome::TransportError);
    let report = error.report().expect("a report");
    assert_eq!(
        (report.outcome, report.attempts_started, report.elapsed),
        (Outcome::TransportError, 0, Duration::ZERO)
    );
    assert_eq!(
        ending(report),
        (
            EventKind::TransportFailed { attempt: 1 },
            EventKind::Stopped {
                outcome: Outcome::TransportError
            }
        )
    );
    assert_eq!(reports.outcomes(), [Outcome::TransportError]);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn readiness_failing_after_a_hold_off_ends_with_a_report_and_a_filled_slot() {
    let reports = Reports::default();
    let hold_off = held_off_for("3").await;
    // The caller's poll_ready succeeds; the clone's, after the hold-off,
    // fails.
    let inner = Flaky::new(&[Ready::Yes, Ready::Fails], &[]);
    let mut client = client(layer(&reports).hold_off(hold_off), inner.clone());
    poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx))
        .await
        .unwrap();
    let slot = ReportSlot::new();
    let mut fut = task::spawn(client.call(get_with(&slot)));
    assert_pending!(fut.poll());
    advance(Duration::from_secs(3)).await;
    let error = assert_ready!(fut.poll()).unwrap_err();

    assert!(matches!(error.kind(), ErrorKind::Inner(Broken)));
    assert_eq!(error.outcome(), Outcome::TransportError);
    let report = error.report().expect("a report");
    assert_eq!(
        (report.attempts_started, report.elapsed, report.wait_time),
        (0, Duration::from_secs(3), Duration::from_secs(3))
    );
    assert_eq!(ending(report).0, EventKind::TransportFailed { attempt: 1 });
    assert_eq!(slot.take().expect("the slot is filled"), *report);
    assert_eq!(reports.outcomes(), [Outcome::TransportError]);
    assert_eq!(inner.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn readiness_failing_after_a_wait_ends_with_a_report_and_a_filled_slot() {
    let reports = Reports::default();
    let inner = Flaky::new(&[Ready::Yes, Ready::Fails], &[429]);
    let mut client = client(layer(&reports), inner.clone());
    poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx))
        .await
        .unwrap();
    let slot = ReportSlot::new();
    let mut fut = task::spawn(client.call(get_with(&slot)));
    assert_pending!(fut.poll()); // the 429 arrived at once: waiting 1 s
    advance(Duration::from_secs(1)).await;
    let error = assert_ready!(fut.poll()).unwrap_err();

    assert!(matches!(error.kind(), ErrorKind::Inner(Broken)));
    let report = error.report().expect("a report");
    assert_eq!(
        (report.outcome, report.attempts_started, report.last_status),
        (Outcome::TransportError, 1, Some(429))
    );
    assert_eq!(ending(report).0, EventKind::TransportFailed { attempt: 2 });
    assert_eq!(report.elapsed, Duration::from_secs(1));
    assert_eq!(slot.take().expect("the slot is filled"), *report);
    assert_eq!(reports.outcomes(), [Outcome::TransportError]);
    assert_eq!(inner.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn readiness_that_never_comes_stops_at_the_latest_start_with_the_last_response() {
    let reports = Reports::default();
    let inner = Flaky::new(&[Ready::Yes, Ready::Never], &[429]);
    let mut client = client(layer(&reports), inner.clone());
    poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx))
        .await
        .unwrap();
    let slot = ReportSlot::new();
    let mut fut = task::spawn(client.call(get_with(&slot)));
    assert_pending!(fut.poll());
    advance(Duration::from_secs(1)).await;
    assert_pending!(fut.poll()); // not ready
                                 // The latest start: 20 s budget - 4 s cap.
    advance(Duration::from_millis(14_999)).await;
    assert_pending!(fut.poll());
    advance(Duration::from_millis(1)).await;
    let response = assert_ready!(fut.poll()).unwrap();

    assert_eq!(response.status(), 429);
    let report = response.extensions().get::<Report>().expect("a report");
    assert_eq!(
        (report.outcome, report.elapsed),
        (Outcome::BudgetExhausted, Duration::from_secs(16))
    );
    assert_eq!(slot.take().expect("the slot is filled"), *report);
    assert_eq!(reports.outcomes(), [Outcome::BudgetExhausted]);
    assert_eq!(inner.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hold_off_then_readiness_that_never_comes_is_not_sent() {
    let hold_off = held_off_for("2").await;
    let inner = Flaky::new(&[Ready::Yes, Ready::Never], &[]);
    let mut client = client(
        RetryBudgetLayer::new(Policy::default()).hold_off(hold_off),
        inner.clone(),
    );
    poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx))
        .await
        .unwrap();
    let slot = ReportSlot::new();
    let mut fut = task::spawn(client.call(get_with(&slot)));
    assert_pending!(fut.poll());
    advance(Duration::from_secs(2)).await;
    assert_pending!(fut.poll());
    advance(Duration::from_secs(14)).await;
    let error = assert_ready!(fut.poll()).unwrap_err();
    assert!(error.is_not_sent());
    assert_eq!(error.outcome(), Outcome::BudgetExhausted);
    assert_eq!(slot.take().unwrap().elapsed, Duration::from_secs(16));
    assert_eq!(inner.calls(), 0);
}
