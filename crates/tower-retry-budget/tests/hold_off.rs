//! The shared hold-off through the layer, under tokio's paused clock: bounded
//! in time (the maximum hold) and keyed by the service alone (never by
//! credentials).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{Outcome, Policy, Report};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::{hold_off::HoldOff, RetryBudgetLayer};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

type Calls = Arc<Mutex<Vec<(String, Duration)>>>;

/// An upstream that answers every path after 1 s: `/a` with a 429 and
/// `retry_after`, anything else with 200; it records in `calls` when each
/// path was called, since the test's start.
fn upstream(
    retry_after: &'static str,
    calls: &Calls,
) -> impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future = impl Send>
       + Clone
       + Send {
    let origin = Instant::now();
    let log = calls.clone();
    service_fn(move |request: Request<()>| {
        let path = request.uri().path().to_owned();
        log.lock().unwrap().push((path.clone(), origin.elapsed()));
        async move {
            tokio::time::sleep(s(1)).await;
            let response = if path == "/a" {
                Response::builder()
                    .status(429)
                    .header("retry-after", retry_after)
            } else {
                Response::builder().status(200)
            };
            Ok::<_, Infallible>(response.body(()).unwrap())
        }
    })
}

fn calls_to(calls: &Mutex<Vec<(String, Duration)>>, path: &str) -> Vec<Duration> {
    let calls = calls.lock().unwrap();
    calls
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, at)| *at)
        .collect()
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_holds_the_service_only_up_to_the_maximum_hold() {
    let calls = Calls::default();
    let upstream = upstream("1000000000", &calls);
    let hold_off = HoldOff::builder().max_hold(s(60)).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone()))
        .service(upstream);
    let start = Instant::now();

    // A: 429 asking for ~31 years, at 1 s.
    let a = client
        .clone()
        .oneshot(get("http://svc.test/a"))
        .await
        .unwrap();
    assert_eq!(
        a.extensions().get::<Report>().unwrap().outcome,
        Outcome::BudgetExhausted
    );
    assert_eq!(
        hold_off.until("http://svc.test:80"),
        Some(start + s(61)),
        "cut to the maximum hold, 60 s after the 429"
    );

    // B at 1 s: 60 s of hold do not fit in its 20 s budget.
    let b = client
        .clone()
        .oneshot(get("http://svc.test/b"))
        .await
        .unwrap_err();
    assert_eq!(b.outcome(), Outcome::HeldOff);
    assert!(calls_to(&calls, "/b").is_empty());

    // C at 50 s: the hold ends at 61, C's first attempt waits for it.
    tokio::time::sleep_until(start + s(50)).await;
    let c = client
        .clone()
        .oneshot(get("http://svc.test/c"))
        .await
        .unwrap();
    assert_eq!(c.status(), 200);
    assert_eq!(
        calls_to(&calls, "/c"),
        [s(61)],
        "sent when the maximum hold ended"
    );
    assert_eq!(hold_off.until("http://svc.test:80"), None);
}

#[tokio::test(start_paused = true)]
async fn credentials_are_not_part_of_the_key_the_service_is() {
    let calls = Calls::default();
    let upstream = upstream("5", &calls);
    let hold_off = HoldOff::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone()))
        .service(upstream);
    // Alice's 429 at 1 s (until 6 s) holds Bob's first attempt to the same
    // service, whatever their credentials, and the default port is the
    // same port written out.
    let a = tokio::spawn(
        client
            .clone()
            .oneshot(get("http://alice:s3cret@svc.test/a")),
    );
    tokio::time::sleep(s(2)).await;
    assert_eq!(hold_off.len(), 1, "one service, one key");
    assert!(
        hold_off.until("http://svc.test:80").is_some(),
        "keyed without the userinfo"
    );
    let b = client
        .clone()
        .oneshot(get("http://bob:other@SVC.test:80/b"))
        .await
        .unwrap();
    assert_eq!(b.status(), 200);
    assert_eq!(calls_to(&calls, "/b"), [s(6)]);
    // Another scheme is another service.
    let other = client.oneshot(get("https://svc.test/b")).await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(calls_to(&calls, "/b"), [s(6), s(7)], "https was not held");
    a.await.unwrap().unwrap();
}

/// An action the hold-off stops before anything is sent ends once: its
/// error is `held_off`, not the caller's token that was already cancelled,
/// and the observer is told one report.
#[tokio::test(start_paused = true)]
async fn an_action_held_off_in_call_ends_once_even_with_a_cancelled_token() {
    let calls = Calls::default();
    let reports = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    struct Reports(Arc<Mutex<Vec<Outcome>>>);
    impl tower_retry_budget::observer::Observer for Reports {
        fn on_event(
            &self,
            _: tower_retry_budget::observer::ActionId,
            _: &retry_budget::trail::Event,
        ) {
        }
        fn on_report(&self, _: tower_retry_budget::observer::ActionId, report: &Report) {
            self.0.lock().unwrap().push(report.outcome);
        }
    }
    let hold_off = HoldOff::default();
    // The service asked the client to wait 60 s: past the 20 s budget.
    hold_off.hold("http://svc.test:80", Instant::now() + s(60));
    let client = ServiceBuilder::new()
        .layer(
            RetryBudgetLayer::new(Policy::default())
                .hold_off(hold_off)
                .observer(Reports(reports.clone())),
        )
        .service(upstream("1", &calls));
    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    let mut request = get("http://svc.test/b");
    request.extensions_mut().insert(token);
    let error = client.oneshot(request).await.unwrap_err();
    assert!(error.is_not_sent(), "{error}");
    assert_eq!(error.outcome(), Outcome::HeldOff);
    assert_eq!(*reports.lock().unwrap(), [Outcome::HeldOff], "one report");
    assert!(calls.lock().unwrap().is_empty(), "nothing sent");
}
