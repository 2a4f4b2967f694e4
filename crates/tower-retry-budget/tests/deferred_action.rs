//! An action's report does not depend on who hears it: the same scripts run
//! under tokio's paused clock without an observer (nobody listening,
//! nothing shared: the core alone) and with one (every step told as it
//! happens), and must give the same report. (The file's name is from the
//! adapter's earlier deferred first attempt, which these tests held to the
//! same rule.)

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use support::{report_of, secs, Scripted, Step};
use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service, ServiceExt};
use tower_retry_budget::{
    observer::{ActionId, Event, Observer},
    Error, Outcome, Policy, Report, ReportMode, ReportSlot, RetryBudgetLayer,
};

/// Keeps the reports it is told.
#[derive(Default, Clone)]
struct Reports(Arc<Mutex<Vec<Report>>>);

impl Observer for Reports {
    fn on_event(&self, _: ActionId, _: &Event) {}

    fn on_report(&self, _: ActionId, report: &Report) {
        self.0.lock().unwrap().push(report.clone());
    }
}

fn get() -> Request<()> {
    Request::get("http://upstream.test/items").body(()).unwrap()
}

/// Runs `script` to its end through `layer`, in steps of 100 ms: the
/// action's ending.
async fn end(
    layer: RetryBudgetLayer,
    script: Vec<Step>,
    request: Request<()>,
) -> Result<Response<()>, Error<Infallible>> {
    let mut client = layer.layer(Scripted::new(script));
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut future = task::spawn(client.call(request));
    for _ in 0..1_000 {
        if let std::task::Poll::Ready(result) = future.poll() {
            return result;
        }
        advance(Duration::from_millis(100)).await;
    }
    panic!("the script did not end");
}

/// [`end`], which must be a response.
async fn run(layer: RetryBudgetLayer, script: Vec<Step>, request: Request<()>) -> Response<()> {
    end(layer, script, request).await.unwrap()
}

fn scripts() -> Vec<Vec<Step>> {
    vec![
        vec![Step::new(0.3, 200, None)],
        vec![Step::new(0.0, 200, Some("5"))],
        vec![Step::new(0.5, 404, None)],
        vec![Step::new(1.0, 429, Some("2")), Step::new(0.2, 200, None)],
        vec![
            Step::new(0.1, 429, None),
            Step::new(0.1, 429, Some("1")),
            Step::new(0.1, 503, None),
        ],
        vec![
            Step::new(0.5, 429, Some("1")),
            Step::new(0.5, 429, Some("1")),
            Step::new(0.5, 429, Some("1")),
        ],
        // The first attempt runs past its 4 s cap.
        vec![Step::new(10.0, 200, None)],
    ]
}

/// The report `layer` gives for `script`, on the response or the error.
async fn report_for(layer: RetryBudgetLayer, script: Vec<Step>) -> Report {
    match end(layer, script, get()).await {
        Ok(response) => report_of(&response).clone(),
        Err(error) => error.report().cloned().expect("an error's report"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_deferred_action_reports_as_an_action_started_with_its_core_state() {
    for script in scripts() {
        let deferred = report_for(RetryBudgetLayer::new(Policy::default()), script.clone()).await;
        let told = Reports::default();
        let layer = RetryBudgetLayer::new(Policy::default()).observer(told.clone());
        let eager = report_for(layer, script.clone()).await;
        assert_eq!(deferred, eager, "script {script:?}");
        assert_eq!(told.0.lock().unwrap().as_slice(), [eager]);
    }
}

#[tokio::test(start_paused = true)]
async fn when_retried_a_first_answer_carries_no_report_and_a_retried_one_does() {
    let layer = || RetryBudgetLayer::new(Policy::default()).report_mode(ReportMode::WhenRetried);
    let response = run(layer(), vec![Step::new(0.2, 200, None)], get()).await;
    assert_eq!(response.status(), 200);
    assert!(response.extensions().get::<Report>().is_none());
    let response = run(layer(), vec![Step::new(0.2, 404, None)], get()).await;
    assert_eq!(response.status(), 404);
    assert!(response.extensions().get::<Report>().is_none());

    let response = run(
        layer(),
        vec![Step::new(0.2, 429, Some("1")), Step::new(0.3, 200, None)],
        get(),
    )
    .await;
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    // The first start, replayed at zero when the action was created.
    assert_eq!(report.starts(), [secs(0), Duration::from_millis(1_200)]);

    // A 429 on the one attempt allowed is seen by the action (its delay may
    // be shared), but no retry followed: no report either.
    let one = Policy::builder().max_attempts(1).build().unwrap();
    let layer = RetryBudgetLayer::new(one).report_mode(ReportMode::WhenRetried);
    let response = run(layer, vec![Step::new(0.2, 429, Some("1"))], get()).await;
    assert!(response.extensions().get::<Report>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_caller_leaving_a_deferred_action_fills_its_slot() {
    let layer = RetryBudgetLayer::new(Policy::default()).report_mode(ReportMode::WhenRetried);
    let mut client = layer.layer(Scripted::new(vec![Step::new(3.0, 200, None)]));
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let slot = ReportSlot::new();
    let mut request = get();
    request.extensions_mut().insert(slot.clone());
    let mut future = task::spawn(client.call(request));
    assert_pending!(future.poll());
    advance(secs(1)).await;
    assert_pending!(future.poll());
    drop(future);
    let report = slot.take().expect("the caller's slot is filled");
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.elapsed, secs(1));
    assert_eq!(report.starts(), [secs(0)]);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_first_attempt_that_times_out_is_reported_with_its_deadline() {
    let policy = Policy::builder()
        .attempt_cap(secs(2))
        .total_budget(secs(3))
        .build()
        .unwrap();
    let layer = RetryBudgetLayer::new(policy).report_mode(ReportMode::WhenRetried);
    let mut client = layer.layer(Scripted::new(vec![Step::new(10.0, 200, None)]));
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut future = task::spawn(client.call(get()));
    assert_pending!(future.poll());
    advance(Duration::from_millis(1_999)).await;
    assert_pending!(future.poll());
    advance(Duration::from_millis(1)).await;
    let error = assert_ready!(future.poll()).unwrap_err();
    assert!(error.is_timeout());
    let report = error.report().expect("an error's report");
    assert_eq!(report.outcome, Outcome::AttemptTimeout);
    assert_eq!(report.elapsed, secs(2));
}

/// The connection failed: what the inner service's error is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused;

/// What a connector puts in its responses (as hyper-util's `HttpInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Connection(u16);

/// Sends one GET through `layer` to a service that gives `answer()` after
/// `after`: the ending, polled at that instant.
async fn answered_after<E: std::fmt::Debug + Send + 'static>(
    layer: RetryBudgetLayer,
    after: Duration,
    answer: fn() -> Result<Response<()>, E>,
) -> Result<Response<()>, Error<E>> {
    let mut client = layer.layer(tower::service_fn(move |_: Request<()>| async move {
        tokio::time::sleep(after).await;
        answer()
    }));
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut future = task::spawn(client.call(get()));
    assert_pending!(future.poll());
    advance(after).await;
    assert_ready!(future.poll())
}

/// A deferred first attempt that fails in transport is reported as an
/// action started with its `Action`, and keeps the inner error.
#[tokio::test(start_paused = true)]
async fn a_deferred_first_attempt_that_fails_reports_as_an_action_would() {
    let after = Duration::from_millis(700);
    let fail = || Err(Refused);
    let deferred = answered_after(RetryBudgetLayer::new(Policy::default()), after, fail)
        .await
        .unwrap_err();
    let told = Reports::default();
    let layer = RetryBudgetLayer::new(Policy::default()).observer(told.clone());
    let eager = answered_after(layer, after, fail).await.unwrap_err();
    assert_eq!(deferred.inner(), Some(&Refused));
    assert_eq!(deferred.outcome(), Outcome::TransportError);
    assert_eq!(deferred.report(), eager.report());
    assert_eq!(deferred.report().map(|r| r.elapsed), Some(after));
    assert_eq!(told.0.lock().unwrap().len(), 1);
}

/// A first answer whose response already carries extensions gets its report
/// beside them, the same as an action started with its `Action` gives.
#[tokio::test(start_paused = true)]
async fn a_first_answer_with_extensions_keeps_them_beside_its_report() {
    let after = Duration::from_millis(300);
    let answer = || {
        let mut response = Response::new(());
        response.extensions_mut().insert(Connection(8080));
        Ok::<_, Infallible>(response)
    };
    let deferred = answered_after(RetryBudgetLayer::new(Policy::default()), after, answer)
        .await
        .unwrap();
    let layer = RetryBudgetLayer::new(Policy::default()).observer(Reports::default());
    let eager = answered_after(layer, after, answer).await.unwrap();
    assert_eq!(
        deferred.extensions().get::<Connection>(),
        Some(&Connection(8080))
    );
    assert_eq!(report_of(&deferred), report_of(&eager));
    assert_eq!(report_of(&deferred).elapsed, after);
}

/// A future that gave its answer panics if polled again, as tower's
/// futures may: it does not poll the inner service's future again.
#[tokio::test(start_paused = true)]
#[should_panic(expected = "polled after completion")]
async fn a_first_answer_polled_again_panics() {
    let mut client = RetryBudgetLayer::new(Policy::default())
        .layer(Scripted::new(vec![Step::new(0.0, 200, None)]));
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut future = task::spawn(client.call(get()));
    assert_ready!(future.poll()).unwrap();
    let _ = future.poll();
}
