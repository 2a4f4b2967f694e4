//! A loop of happy-path GETs through `RetryBudget` with
//! `ReportMode::WhenRetried`, for a profiler (`valgrind --tool=callgrind`).
use std::convert::Infallible;
use std::future::{ready, Future};
use std::pin::pin;
use std::task::{Context, Waker};

use http::{Request, Response};
use retry_budget::Policy;
use tower::{service_fn, Layer, Service};
use tower_retry_budget::{ReportMode, RetryBudgetLayer};

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let mut service = RetryBudgetLayer::new(Policy::default())
        .report_mode(ReportMode::WhenRetried)
        .layer(service_fn(|_req: Request<()>| {
            ready(Ok::<_, Infallible>(Response::new(())))
        }));
    let mut cx = Context::from_waker(Waker::noop());
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    for _ in 0..n {
        let req = Request::get("http://upstream.test/palettes")
            .header("accept", "application/json")
            .body(())
            .unwrap();
        let _ = service.poll_ready(&mut cx);
        let fut = pin!(service.call(req));
        let _ = std::hint::black_box(fut.poll(&mut cx));
    }
}
