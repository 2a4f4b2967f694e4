//! End to end, in real time: a real hyper server on loopback answers 429 with
//! `Retry-After: 1`, then 200; a hyper-util client wrapped in the layer gets
//! the 200 after one retry, about a second later.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_budget::{Outcome, Policy, Report};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetLayer;

/// Serves `answer(n)` for the n-th request (0-based); returns the address
/// and the request counter.
async fn serve(answer: fn(usize) -> (u16, Option<&'static str>)) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let (status, retry_after) = answer(counter.fetch_add(1, Ordering::SeqCst));
                    let mut res = Response::builder().status(status);
                    if let Some(value) = retry_after {
                        res = res.header("retry-after", value);
                    }
                    async move {
                        Ok::<_, Infallible>(
                            res.body(Full::new(Bytes::from_static(b"palettes")))
                                .unwrap(),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, count)
}

fn small_policy() -> Policy {
    Policy::builder()
        .total_budget(Duration::from_secs(4))
        .attempt_cap(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[tokio::test]
async fn hyper_util_client_retries_a_429_once_then_gets_200() {
    let (addr, count) = serve(|n| {
        if n == 0 {
            (429, Some("1"))
        } else {
            (200, None)
        }
    })
    .await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(small_policy()))
        .service(client);

    let started = Instant::now();
    let request = Request::get(format!("http://{addr}/palettes?collection=coast"))
        .body(Empty::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    let elapsed = started.elapsed();

    assert_eq!(response.status(), 200);
    let report = response.extensions().get::<Report>().unwrap().clone();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert!(
        report.starts()[1] >= Duration::from_secs(1),
        "{:?}",
        report.starts()
    );
    // Never sooner than the server asked. No upper bound on wall time: a
    // loaded machine may wake late (exact instants: tests/layer.rs).
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"palettes");
}

#[tokio::test]
async fn hyper_util_client_stops_at_once_when_the_wait_cannot_fit() {
    let (addr, count) = serve(|_| (429, Some("30"))).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(small_policy()))
        .service(client);
    let request = Request::get(format!("http://{addr}/"))
        .body(Empty::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429);
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::BudgetExhausted);
    // Stopped at the 429 itself: no wait was spent.
    assert!(report.waits().is_empty(), "{report:?}");
    assert_eq!(report.elapsed, report.request_time);
    assert_eq!(count.load(Ordering::SeqCst), 1);
}
