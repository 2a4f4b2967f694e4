//! Over a real loopback hyper server, in real time: the middleware with
//! `Policy::default()` and the tower route over `reqwest::Client`. Bounds
//! on time are lower bounds only (a loaded machine is only ever slower).

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest_retry_budget::{
    Error, Idempotent, Outcome, Policy, Report, ReportSlot, ReqwestService, RetryBudgetMiddleware,
};
use support::{response, Server};
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetLayer;

fn client() -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryBudgetMiddleware::new(Policy::default()))
        .build()
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_it_and_the_200_carries_the_report() {
    let server = Server::start(|n| response(if n == 0 { 429 } else { 200 }, Some("1"))).await;
    let started = Instant::now();
    let response = client().get(server.url("/palettes")).send().await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(response.status(), 200);
    assert_eq!(server.count(), 2);
    assert!(server.gaps()[0] >= 1.0, "{:?}", server.gaps());
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert_eq!(response.url().path(), "/palettes");
    assert_eq!(response.text().await.unwrap(), "palettes");
}

#[tokio::test]
async fn a_retry_after_date_is_honoured_over_the_network() {
    let server = Server::start(|n| {
        if n > 0 {
            return response(200, None);
        }
        let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
        http::Response::builder()
            .status(429)
            .header("retry-after", date)
            .body("")
            .unwrap()
    })
    .await;
    let response = client().get(server.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // The date has whole seconds: it asked for more than one second.
    assert!(server.gaps()[0] >= 1.0, "{:?}", server.gaps());
}

#[tokio::test]
async fn an_idempotent_put_is_replayed_whole_and_a_stream_is_sent_once() {
    let server = Server::start(|n| response(if n % 2 == 0 { 429 } else { 200 }, Some("1"))).await;
    let response = client()
        .put(server.url("/jobs/7"))
        .body("job 7")
        .with_extension(Idempotent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        server.bodies(),
        [Bytes::from("job 7"), Bytes::from("job 7")]
    );

    let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(http_body::Frame::data(
        Bytes::from_static(b"a stream"),
    ))]);
    let response = client()
        .put(server.url("/jobs/8"))
        .body(reqwest::Body::wrap(http_body_util::StreamBody::new(chunks)))
        .with_extension(Idempotent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(server.count(), 3);
    assert_eq!(server.bodies()[2], Bytes::from("a stream"));
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::NotReplayable);
}

#[tokio::test]
async fn a_refused_connection_is_reqwests_error_under_the_budgets() {
    // A port nobody listens on: bound, then closed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let slot = ReportSlot::new();
    let error = client()
        .get(format!("http://{addr}/"))
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap_err();
    let ours = Error::of(&error).expect("the budget's error");
    assert_eq!(ours.outcome(), Outcome::TransportError);
    let source = std::error::Error::source(ours).unwrap();
    let reqwest_error = source
        .downcast_ref::<reqwest::Error>()
        .expect("reqwest's error");
    assert!(reqwest_error.is_connect(), "{reqwest_error:?}");
    assert_eq!(slot.take().unwrap().outcome, Outcome::TransportError);
}

#[tokio::test]
async fn the_tower_route_runs_the_layer_over_reqwest_client() {
    let server = Server::start(|n| response(if n == 0 { 429 } else { 200 }, Some("1"))).await;
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(ReqwestService::new(reqwest::Client::new()));
    let request = http::Request::get(server.url("/palettes"))
        .body(String::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(server.gaps()[0] >= 1.0);
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.attempts_started, 2);
}

#[tokio::test]
async fn the_tower_route_takes_the_layers_extras_single_flight_and_a_gate() {
    let server = Server::start(|n| response(if n == 0 { 429 } else { 200 }, Some("1"))).await;
    let client = ServiceBuilder::new()
        .layer(tower_retry_budget::single_flight::SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .concurrency_limit(1)
        .service(ReqwestService::new(reqwest::Client::new()));
    let get = || {
        let request = http::Request::get(server.url("/palettes"))
            .body(String::new())
            .unwrap();
        client.clone().oneshot(request)
    };
    let (a, b) = tokio::join!(get(), get());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    // One action for both callers: one 429, one retry.
    assert_eq!(server.count(), 2);
}

#[tokio::test]
async fn the_tower_routes_error_is_reqwests_with_the_report() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(ReqwestService::new(reqwest::Client::new()));
    let request = http::Request::get(format!("http://{addr}/"))
        .body(String::new())
        .unwrap();
    let error = client.oneshot(request).await.unwrap_err();
    assert_eq!(error.outcome(), Outcome::TransportError);
    assert!(error.inner().unwrap().is_connect());
    assert_eq!(error.report().unwrap().attempts_started, 1);
}
