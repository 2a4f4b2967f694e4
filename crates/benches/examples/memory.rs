//! Memory per waiting action: 100,000 budgeted GETs, each answered 429 with
//! `Retry-After: 10` and left waiting between attempts, held at once. Prints
//! the resident memory growth per waiting action (Linux `/proc/self/statm`).
//!
//! ```text
//! cargo run --release -p retry-budget-benches --example memory [N]
//! ```
//!
//! It also prints the sizes of the parts an action holds. Where every heap
//! byte comes from (per allocation site, at the peak) is what valgrind's
//! DHAT shows:
//!
//! ```text
//! valgrind --tool=dhat --dhat-out-file=dhat.json target/release/examples/memory 10000
//! ```

use std::convert::Infallible;
use std::future::{ready, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use retry_budget::Policy;
use tower::{service_fn, Service};
use tower_retry_budget::RetryBudget;

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let mut service = RetryBudget::new(
        service_fn(|_req: Request<()>| {
            let res = Response::builder()
                .status(429)
                .header("retry-after", "10")
                .body(())
                .unwrap();
            ready(Ok::<_, Infallible>(res))
        }),
        Policy::default(),
    );
    let mut cx = Context::from_waker(Waker::noop());
    let request = || {
        Request::get("http://upstream.test/palettes?collection=coast")
            .body(())
            .unwrap()
    };

    // Warm the allocator and the timer wheel with one action.
    let mut warm = Box::pin(service.call(request()));
    let _ = warm.as_mut().poll(&mut cx);
    drop(warm);

    // The Vecs of boxes themselves: one pointer each.
    let vec_bytes = n * size_of::<usize>();

    // The request itself, measured first and kept (so that the actions
    // below reuse none of its memory): the copy an action keeps for its
    // retry, made as the layer makes it from a request then sent and
    // dropped, kept inline (as in the action's state): its own size plus
    // what it holds on the heap.
    let before = resident_bytes();
    let mut copies: Vec<Request<()>> = Vec::with_capacity(n);
    for _ in 0..n {
        let sent = request();
        copies.push(retry_budget_benches::copy(&sent));
        drop(sent);
    }
    let per_request = (resident_bytes() - before) as f64 / n as f64;

    let before = resident_bytes();
    let mut waiting: Vec<Pin<Box<_>>> = Vec::with_capacity(n);
    for _ in 0..n {
        let _ = service.poll_ready(&mut cx);
        let mut future = Box::pin(service.call(request()));
        assert!(matches!(future.as_mut().poll(&mut cx), Poll::Pending));
        waiting.push(future);
    }
    let after = resident_bytes();
    let per_action = (after - before).saturating_sub(vec_bytes) as f64 / n as f64;
    println!("waiting actions: {n}");
    println!(
        "resident memory: {:.1} MiB before, {:.1} MiB after",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    println!(
        "per waiting action (request copy, held 429, timer, trail included): {per_action:.0} bytes"
    );
    println!("per request copy alone (inline size and heap): {per_request:.0} bytes");
    println!(
        "per waiting action besides the request: {:.0} bytes (goal: under 1024)",
        per_action - per_request
    );
    drop(waiting);
    drop(copies);
    print_sizes();
}

/// The sizes of the parts a waiting action holds (inline, before their own
/// heap parts such as a header map's table or the trail's buffer).
fn print_sizes() {
    type Inner = tower::util::ServiceFn<
        fn(Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>>,
    >;
    println!("sizes (bytes):");
    for (name, size) in [
        (
            "ResponseFuture (this example's inner service)",
            size_of::<tower_retry_budget::ResponseFuture<Inner, ()>>(),
        ),
        (
            "ResponseFuture (hyper-util client, Full<Bytes> body)",
            size_of::<
                tower_retry_budget::ResponseFuture<
                    hyper_util::client::legacy::Client<
                        hyper_util::client::legacy::connect::HttpConnector,
                        http_body_util::Full<bytes::Bytes>,
                    >,
                    http_body_util::Full<bytes::Bytes>,
                >,
            >(),
        ),
        (
            "Request<()> (the copy kept for the retry)",
            size_of::<Request<()>>(),
        ),
        ("Response<()> (the held 429)", size_of::<Response<()>>()),
        (
            "tokio::time::Sleep (the timer)",
            size_of::<tokio::time::Sleep>(),
        ),
        ("retry_budget::Action", size_of::<retry_budget::Action>()),
        ("retry_budget::Policy", size_of::<Policy>()),
        (
            "retry_budget::trail::Event (one trail entry)",
            size_of::<retry_budget::trail::Event>(),
        ),
        ("retry_budget::Report", size_of::<retry_budget::Report>()),
    ] {
        println!("  {name:<54} {size:>5}");
    }
}
