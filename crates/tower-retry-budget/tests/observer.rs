//! The typed observer: every trail event, in order, with the action's id,
//! and the report once, under tokio's paused clock.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use support::{secs, Scripted, Step};
use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    hold_off::HoldOff,
    observer::{ActionId, Event, EventKind, Observer},
    Outcome, Policy, Report, RetryBudgetLayer,
};

/// One event as told: the action, when, and what (by name).
type Told = (ActionId, Duration, &'static str);

/// Records what it is told.
#[derive(Default, Clone)]
struct Recorder {
    events: Arc<Mutex<Vec<Told>>>,
    reports: Arc<Mutex<Vec<(ActionId, Outcome, usize)>>>,
}

fn name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::AttemptStarted { .. } => "attempt_started",
        EventKind::Response { .. } => "response",
        EventKind::WaitPlanned { .. } => "wait_planned",
        EventKind::Woke { .. } => "woke",
        EventKind::CallerLeft { .. } => "caller_left",
        EventKind::AttemptTimedOut { .. } => "attempt_timed_out",
        EventKind::TransportFailed { .. } => "transport_failed",
        EventKind::Stopped { .. } => "stopped",
        EventKind::HeldOff { .. } => "held_off",
        _ => "other",
    }
}

impl Observer for Recorder {
    fn on_event(&self, id: ActionId, event: &Event) {
        self.events
            .lock()
            .unwrap()
            .push((id, event.at, name(&event.kind)));
    }

    fn on_report(&self, id: ActionId, report: &Report) {
        self.reports
            .lock()
            .unwrap()
            .push((id, report.outcome, report.events.len()));
    }
}

impl Recorder {
    fn events(&self) -> Vec<Told> {
        self.events.lock().unwrap().clone()
    }

    fn reports(&self) -> Vec<(ActionId, Outcome, usize)> {
        self.reports.lock().unwrap().clone()
    }
}

fn get() -> Request<()> {
    Request::get("http://upstream.test/items").body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_event_in_order_as_it_is_recorded_then_the_report_once() {
    let recorder = Recorder::default();
    let inner = Scripted::new(vec![
        Step::new(2.0, 429, Some("3")),
        Step::new(1.0, 200, None),
    ]);
    let mut client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).observer(recorder.clone()))
        .service(inner);
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut request = get();
    request.extensions_mut().insert(ActionId(42));
    let mut fut = task::spawn(client.call(request));

    assert_pending!(fut.poll());
    // Told as it happens, not at the end.
    assert_eq!(
        recorder.events(),
        [(ActionId(42), secs(0), "attempt_started")]
    );
    advance(secs(2)).await;
    assert_pending!(fut.poll());
    assert_eq!(recorder.events().len(), 3, "response and wait at 2 s");
    assert!(recorder.reports().is_empty());
    advance(secs(3)).await;
    assert_pending!(fut.poll());
    advance(secs(1)).await;
    let response = assert_ready!(fut.poll()).unwrap();
    assert_eq!(response.status(), 200);

    let id = ActionId(42);
    assert_eq!(
        recorder.events(),
        [
            (id, secs(0), "attempt_started"),
            (id, secs(2), "response"),
            (id, secs(2), "wait_planned"),
            (id, secs(5), "woke"),
            (id, secs(5), "attempt_started"),
            (id, secs(6), "response"),
            (id, secs(6), "stopped"),
        ]
    );
    // The events told are exactly the report's trail, and the report comes
    // once, at the end.
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(
        recorder.reports(),
        [(id, Outcome::Success, report.events.len())]
    );
    assert_eq!(report.events.len(), 7);
}

#[tokio::test(start_paused = true)]
async fn the_layer_numbers_actions_when_the_caller_does_not() {
    let recorder = Recorder::default();
    let inner = Scripted::new(vec![Step::new(0.0, 200, None), Step::new(0.0, 404, None)]);
    let layer = RetryBudgetLayer::new(Policy::default()).observer(recorder.clone());
    // Two services from clones of one layer share the counter.
    let first = ServiceBuilder::new()
        .layer(layer.clone())
        .service(inner.clone());
    let second = ServiceBuilder::new().layer(layer).service(inner);
    first.oneshot(get()).await.unwrap();
    second.oneshot(get()).await.unwrap();

    let ids: Vec<_> = recorder.reports().iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        ids,
        [
            (ActionId(0), Outcome::Success),
            (ActionId(1), Outcome::NotRetryable)
        ]
    );
    let events = recorder.events();
    assert_eq!(events.len(), 6);
    assert!(events[..3].iter().all(|e| e.0 == ActionId(0)));
    assert!(events[3..].iter().all(|e| e.0 == ActionId(1)));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_future_is_told_as_the_caller_leaving() {
    let recorder = Recorder::default();
    let inner = Scripted::new(vec![Step::new(1.0, 429, Some("5"))]);
    let mut client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).observer(recorder.clone()))
        .service(inner);
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = task::spawn(client.call(get()));
    assert_pending!(fut.poll());
    advance(secs(1)).await;
    assert_pending!(fut.poll());
    advance(secs(2)).await;
    drop(fut);

    let kinds: Vec<_> = recorder.events().iter().map(|e| (e.1, e.2)).collect();
    assert_eq!(
        kinds,
        [
            (secs(0), "attempt_started"),
            (secs(1), "response"),
            (secs(1), "wait_planned"),
            (secs(3), "caller_left"),
            (secs(3), "stopped"),
        ]
    );
    assert_eq!(recorder.reports(), [(ActionId(0), Outcome::Cancelled, 5)]);
}

#[tokio::test(start_paused = true)]
async fn a_hold_off_that_stops_before_sending_is_told_too() {
    let recorder = Recorder::default();
    let hold_off = HoldOff::default();
    let inner = Scripted::new(vec![Step::new(0.0, 429, Some("60"))]);
    let client = ServiceBuilder::new()
        .layer(
            RetryBudgetLayer::new(Policy::default())
                .hold_off(hold_off)
                .observer(recorder.clone()),
        )
        .service(inner.clone());
    // The first action learns the server's 60 s; the second may not send.
    let first = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(first.status(), 429);
    let error = client.oneshot(get()).await.unwrap_err();
    assert!(error.is_not_sent());
    assert_eq!(inner.call_count(), 1);

    let second: Vec<_> = recorder
        .events()
        .into_iter()
        .filter(|e| e.0 == ActionId(1))
        .map(|e| e.2)
        .collect();
    assert_eq!(second, ["held_off", "stopped"]);
    assert_eq!(
        recorder.reports(),
        [
            (ActionId(0), Outcome::BudgetExhausted, 3),
            (ActionId(1), Outcome::HeldOff, 2)
        ]
    );
}
