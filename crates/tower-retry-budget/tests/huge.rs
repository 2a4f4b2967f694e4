//! Huge values through the layer: a `Retry-After` at or beyond what the
//! clock can represent, and a budget or cap up to `Duration::MAX`, with and
//! without a hold-off map and a client budget. None may panic; each ends in
//! a defined outcome with a report ("no input panics").

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    budget::ClientBudget, hold_off::HoldOff, observer::EventKind, Outcome, Policy, Report,
    ReportSlot, RetryBudgetLayer,
};

const HUGE: [&str; 3] = [
    "99999999999999999999",
    "9223372036854775807",
    "9300000000000000000",
];

fn get() -> Request<()> {
    Request::get("http://upstream.test/items").body(()).unwrap()
}

/// Answers 429 with `retry_after` to the first call, 200 afterwards.
fn upstream(
    retry_after: &'static str,
) -> (
    impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send> + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let service = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let status = if n == 0 { 429 } else { 200 };
        let response = Response::builder()
            .status(status)
            .header("retry-after", retry_after)
            .body(())
            .unwrap();
        async move { Ok::<_, Infallible>(response) }
    });
    (service, calls)
}

/// The layer alone, with a hold-off map, with a client budget, with both.
fn layers(policy: Policy) -> Vec<(&'static str, RetryBudgetLayer)> {
    vec![
        ("plain", RetryBudgetLayer::new(policy)),
        (
            "hold_off",
            RetryBudgetLayer::new(policy).hold_off(HoldOff::default()),
        ),
        (
            "client_budget",
            RetryBudgetLayer::new(policy).client_budget(ClientBudget::default()),
        ),
        (
            "both",
            RetryBudgetLayer::new(policy)
                .hold_off(HoldOff::default())
                .client_budget(ClientBudget::default()),
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_ends_the_action_and_any_hold_off_without_panic() {
    for value in HUGE {
        for (name, layer) in layers(Policy::default()) {
            let (inner, calls) = upstream(value);
            let client = ServiceBuilder::new().layer(layer).service(inner);
            let response = client.clone().oneshot(get()).await.unwrap();
            let report = response.extensions().get::<Report>().unwrap();
            assert_eq!(
                (response.status().as_u16(), report.outcome),
                (429, Outcome::BudgetExhausted),
                "{value} through {name}"
            );
            // A later action to the same service: held off by the map (it
            // never sends), or sent at once without one.
            let slot = ReportSlot::new();
            let mut request = get();
            request.extensions_mut().insert(slot.clone());
            let later = client.oneshot(request).await;
            let outcome = slot.take().expect("the slot is filled").outcome;
            if name == "hold_off" || name == "both" {
                let error = later.unwrap_err();
                assert_eq!(
                    (error.outcome(), outcome, calls.load(Ordering::SeqCst)),
                    (Outcome::HeldOff, Outcome::HeldOff, 1),
                    "{value} through {name}"
                );
            } else {
                assert_eq!(later.unwrap().status(), 200, "{value} through {name}");
                assert_eq!(outcome, Outcome::Success);
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_clock_s_range_never_ends_and_the_caller_may_leave() {
    // A budget of Duration::MAX fits any wait with a short cap.
    let policy = Policy::builder()
        .total_budget(Duration::MAX)
        .attempt_cap(Duration::from_millis(500))
        .build()
        .unwrap();
    for value in HUGE {
        for (name, layer) in layers(policy) {
            let (inner, calls) = upstream(value);
            let mut client = ServiceBuilder::new().layer(layer).service(inner);
            ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
            let slot = ReportSlot::new();
            let mut request = get();
            request.extensions_mut().insert(slot.clone());
            let mut fut = task::spawn(client.call(request));
            // The 429 plans a wait the clock cannot represent: no timer is
            // armed, nothing panics, and a year later nothing was sent again.
            assert_pending!(fut.poll());
            advance(Duration::from_secs(86_400 * 365)).await;
            assert_pending!(fut.poll());
            assert_eq!(calls.load(Ordering::SeqCst), 1, "{value} through {name}");
            drop(fut);
            let report = slot.take().expect("the slot is filled");
            assert_eq!(report.outcome, Outcome::Cancelled, "{value} through {name}");
            assert!(report
                .events
                .iter()
                .any(|e| matches!(e.kind, EventKind::WaitPlanned { .. })));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_cap_of_duration_max_is_no_timeout_and_leaves_no_room_for_a_retry() {
    let policy = Policy::builder()
        .total_budget(Duration::MAX)
        .attempt_cap(Duration::MAX)
        .build()
        .unwrap();
    for (name, layer) in layers(policy) {
        // The upstream answers after a year: no deadline cuts it short.
        let inner = service_fn(|_: Request<()>| async {
            tokio::time::sleep(Duration::from_secs(86_400 * 365)).await;
            let response = Response::builder()
                .status(429)
                .header("retry-after", "1")
                .body(())
                .unwrap();
            Ok::<_, Infallible>(response)
        });
        let mut client = ServiceBuilder::new().layer(layer).service(inner);
        ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
        let mut fut = task::spawn(client.call(get()));
        assert_pending!(fut.poll());
        advance(Duration::from_secs(86_400 * 365)).await;
        let response = assert_ready!(fut.poll()).unwrap();
        let report = response.extensions().get::<Report>().unwrap();
        assert_eq!(
            (response.status().as_u16(), report.outcome),
            (429, Outcome::BudgetExhausted),
            "{name}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_duration_max_still_retries_on_time() {
    let policy = Policy::builder()
        .total_budget(Duration::MAX)
        .build()
        .unwrap();
    for (name, layer) in layers(policy) {
        let (inner, calls) = upstream("1000");
        let mut client = ServiceBuilder::new().layer(layer).service(inner);
        ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
        let mut fut = task::spawn(client.call(get()));
        assert_pending!(fut.poll());
        advance(Duration::from_millis(999_999)).await;
        assert_pending!(fut.poll());
        advance(Duration::from_millis(1)).await;
        let response = assert_ready!(fut.poll()).unwrap();
        assert_eq!(response.status(), 200, "{name}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let report = response.extensions().get::<Report>().unwrap();
        assert_eq!(report.starts(), [Duration::ZERO, Duration::from_secs(1000)]);
    }
}
