//! `ReportSlot`: the report reaches a slot in the request's extensions
//! whatever the ending, the caller dropping the future included.

use std::convert::Infallible;
use std::time::Duration;

use retry_budget::{Outcome, Policy};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::{ReportSlot, RetryBudgetLayer};

fn always_429() -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<()>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(|_req: http::Request<()>| async {
        let res = http::Response::builder()
            .status(429)
            .header("retry-after", "5")
            .body(())
            .unwrap();
        Ok::<_, Infallible>(res)
    })
}

fn with_slot(method: http::Method) -> (http::Request<()>, ReportSlot) {
    let slot = ReportSlot::new();
    let mut request = http::Request::builder()
        .method(method)
        .uri("http://upstream.test/")
        .body(())
        .unwrap();
    request.extensions_mut().insert(slot.clone());
    (request, slot)
}

#[tokio::test(start_paused = true)]
async fn the_slot_gets_the_same_report_as_the_response() {
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(always_429());
    let (request, slot) = with_slot(http::Method::GET);
    let response = client.oneshot(request).await.unwrap();
    let report = slot.get().expect("filled");
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(response.extensions().get(), Some(&report));
    assert_eq!(slot.take(), Some(report));
    assert_eq!(slot.take(), None);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_drops_the_future_finds_cancelled_in_the_slot() {
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(always_429());
    let (request, slot) = with_slot(http::Method::GET);
    let dropped = tokio::time::timeout(Duration::from_secs(2), client.oneshot(request)).await;
    assert!(dropped.is_err(), "still waiting for the retry at 2 s");
    let report = slot.take().expect("filled on drop");
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.attempts_started, 1);
    assert_eq!(report.elapsed, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_request_passed_through_leaves_the_slot_empty() {
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(always_429());
    let (request, slot) = with_slot(http::Method::POST);
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(slot.take(), None);
}
