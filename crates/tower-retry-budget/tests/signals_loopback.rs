//! The signals of `tests/signals.rs` over a real socket: a hyper server on loopback
//! sends them on a 429, a hyper-util client wrapped in the layer reads them
//! off the wire. Real time, so each case waits about a second and only
//! lower bounds are asserted (the exact instants are in `signals.rs`, under
//! the paused clock). The calendar is a fixed reading, so that a date means
//! a known wait.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::{Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_budget::{
    reset::ResetFormat,
    trail::{EventKind, ResetRead},
    Outcome, Policy, Report,
};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::{calendar::FnCalendar, response_signal::ResetSignal, RetryBudgetLayer};

/// Serves 429 with `headers` to the first request, 200 to the others.
async fn serve(headers: Vec<(&'static str, String)>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let headers = Arc::new(headers);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (counter, headers) = (counter.clone(), headers.clone());
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
                    let mut res = Response::builder().status(if first { 429 } else { 200 });
                    if first {
                        for (name, value) in headers.iter() {
                            res = res.header(*name, value.as_str());
                        }
                    }
                    async move { Ok::<_, Infallible>(res.body(Full::new(Bytes::new())).unwrap()) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, count)
}

/// The calendar reading of these tests: Mon, 30 Nov 2026 12:00:00 GMT.
fn now() -> SystemTime {
    httpdate::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").unwrap()
}

/// One GET through the layer (fixed calendar, reset headers read); the
/// report, the time taken and the requests the server saw.
async fn fetch(
    headers: Vec<(&'static str, String)>,
    calendar: SystemTime,
) -> (Report, Duration, usize) {
    let (addr, count) = serve(headers).await;
    let signal = ResetSignal::new().ratelimit_fields().header(
        HeaderName::from_static("x-ratelimit-reset"),
        ResetFormat::Unix,
    );
    let layer = RetryBudgetLayer::new(Policy::default())
        .calendar(FnCalendar(move || Some(calendar)))
        .signal(signal);
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new().layer(layer).service(client);
    let request = Request::get(format!("http://{addr}/"))
        .body(Empty::new())
        .unwrap();
    let started = Instant::now();
    let response = client.oneshot(request).await.unwrap();
    let took = started.elapsed();
    let report = response.extensions().get::<Report>().unwrap().clone();
    (report, took, count.load(Ordering::SeqCst))
}

fn h(name: &'static str, value: &str) -> (&'static str, String) {
    (name, value.to_owned())
}

#[tokio::test]
async fn repeated_fields_over_the_wire_wait_the_longest() {
    let (report, took, calls) =
        fetch(vec![h("retry-after", "0"), h("retry-after", "1")], now()).await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 2));
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(report
        .events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::RetryAfterRepeated { raw, .. } if raw == "0, 1")));
}

#[tokio::test]
async fn the_leap_second_over_the_wire() {
    let before = httpdate::parse_http_date("Sat, 31 Dec 2016 23:59:59 GMT").unwrap();
    let (report, took, calls) = fetch(
        vec![h("retry-after", "Sat, 31 Dec 2016 23:59:60 GMT")],
        before,
    )
    .await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 2));
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert_eq!(
        report.attempts_started, 2,
        "one retry, not the fallback's three requests"
    );
}

#[tokio::test]
async fn a_two_digit_year_over_the_wire() {
    let (report, took, calls) = fetch(
        vec![h("retry-after", "Monday, 30-Nov-26 12:00:01 GMT")],
        now(),
    )
    .await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 2));
    assert!(took >= Duration::from_secs(1), "{took:?}");
}

#[tokio::test]
async fn each_reset_header_form_over_the_wire() {
    let unix = (now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1)
    .to_string();
    for (name, value) in [
        ("x-ratelimit-reset", unix.as_str()),
        ("ratelimit", r#""p";r=0;t=1"#),
        ("ratelimit", "limit=1, remaining=0, reset=1"),
        ("ratelimit-reset", "1"),
    ] {
        let (report, took, calls) = fetch(vec![h(name, value)], now()).await;
        assert_eq!(
            (report.outcome, calls),
            (Outcome::Success, 2),
            "{name}: {value}"
        );
        assert!(took >= Duration::from_secs(1), "{name}: {took:?}");
        assert!(
            report.events.iter().any(|e| matches!(
                &e.kind,
                EventKind::ResetHeader { header, reading: ResetRead::Wait { used: true, .. }, .. }
                    if &**header == name
            )),
            "{name}: {:?}",
            report.events
        );
    }
}
