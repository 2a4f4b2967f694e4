//! Timer accuracy on a real multi-thread runtime: N concurrent actions, each
//! answered 429 with `Retry-After: 1`, then 200. For each, measures
//! (actual next start − earliest allowed start) from its own report: the
//! planned `until` of the wait against the start of attempt 2. Prints
//! p50/p99/max; a negative value would be a bug (a retry before the server
//! allowed it).
//!
//! ```text
//! cargo run --release -p retry-budget-benches --example timer_accuracy [N]
//! ```

use std::convert::Infallible;
use std::future::ready;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{trail::EventKind, Policy, Report};
use tower::{service_fn, ServiceExt};
use tower_retry_budget::RetryBudget;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
        .unwrap();
    let lateness = runtime.block_on(async move {
        let mut tasks = Vec::with_capacity(n);
        for _ in 0..n {
            let first = Arc::new(AtomicBool::new(true));
            let inner = service_fn(move |_req: Request<()>| {
                let status = if first.swap(false, Ordering::SeqCst) {
                    429
                } else {
                    200
                };
                let res = Response::builder()
                    .status(status)
                    .header("retry-after", "1")
                    .body(())
                    .unwrap();
                ready(Ok::<_, Infallible>(res))
            });
            let service = RetryBudget::new(inner, Policy::default());
            tasks.push(tokio::spawn(async move {
                let response = service
                    .oneshot(Request::get("http://upstream.test/").body(()).unwrap())
                    .await
                    .unwrap();
                response.extensions().get::<Report>().cloned().unwrap()
            }));
        }
        let mut lateness = Vec::with_capacity(n);
        for task in tasks {
            let report = task.await.unwrap();
            let until = report.events.iter().find_map(|e| match e.kind {
                EventKind::WaitPlanned { until, .. } => Some(until),
                _ => None,
            });
            let (Some(until), Some(start)) = (until, report.starts().get(1).copied()) else {
                panic!("every action retries once: {report}");
            };
            lateness.push(start.as_secs_f64() - until.as_secs_f64());
        }
        lateness
    });
    let mut sorted = lateness.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let ms = |s: f64| s * 1000.0;
    println!("actions: {n}, each told to wait 1 s");
    println!(
        "next start - earliest allowed start: min {:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(sorted[0]),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(sorted[sorted.len() - 1])
    );
    let negative = lateness.iter().filter(|l| **l < 0.0).count();
    println!("negative (a retry before the allowed time): {negative}");
    assert_eq!(negative, 0);
    let _ = Duration::ZERO;
}
