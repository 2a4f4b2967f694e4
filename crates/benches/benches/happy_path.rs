//! The happy path: what the layer costs when the upstream answers 200 at
//! once. Five variants over the same inner service and the same GET:
//!
//! 1. `bare`: the inner service alone;
//! 2. `bare_plus_clone`: plus one request copy, the floor any retrying layer
//!    must pay to be able to retry;
//! 3. `tower_retry`: `tower::retry::Retry` with a minimal 429-only policy;
//! 4. `retry_budget_get`: `RetryBudget` with the default policy;
//! 5. `retry_budget_post`: `RetryBudget` on a POST (passed through).
//!
//! Futures are polled once with a no-op waker inside a tokio runtime context
//! (the layer's timer needs one), so no executor cost is measured. After the
//! run the medians are read back from criterion's estimates and the ratios
//! printed.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::Criterion;
use http::{Method, Request, Response};
use retry_budget::Policy;
use tower::retry::Retry;
use tower::{service_fn, Service};
use tower_retry_budget::RetryBudget;

fn request(method: Method) -> Request<()> {
    Request::builder()
        .method(method)
        .uri("http://upstream.test/palettes?collection=coast")
        .header("accept", "application/json")
        .header("user-agent", "bench/1.0")
        .header("authorization", "Bearer 0123456789abcdef")
        .body(())
        .unwrap()
}

fn copy(req: &Request<()>) -> Request<()> {
    let mut copy = Request::new(());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    copy
}

fn ok(_req: Request<()>) -> Ready<Result<Response<()>, Infallible>> {
    ready(Ok(Response::new(())))
}

/// A minimal 429-only policy for `tower::retry::Retry`.
#[derive(Clone)]
struct Only429;

impl<E> tower::retry::Policy<Request<()>, Response<()>, E> for Only429 {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<()>,
        result: &mut Result<Response<()>, E>,
    ) -> Option<Ready<()>> {
        match result {
            Ok(res) if res.status() == 429 => Some(ready(())),
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<()>) -> Option<Request<()>> {
        Some(copy(req))
    }
}

/// Calls the service and polls the future once; it must be ready.
fn call_once<S>(service: &mut S, req: Request<()>) -> S::Response
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_ready());
    let future = pin!(service.call(req));
    match future.poll(&mut cx) {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => panic!("the inner service answers at once"),
    }
}

const NAMES: [&str; 5] = [
    "bare",
    "bare_plus_clone",
    "tower_retry",
    "retry_budget_get",
    "retry_budget_post",
];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let get = request(Method::GET);
    let post = request(Method::POST);

    let mut group = c.benchmark_group("happy_path");
    let mut bare = service_fn(ok);
    group.bench_function(NAMES[0], |b| {
        b.iter(|| black_box(call_once(&mut bare, copy(&get))))
    });
    group.bench_function(NAMES[1], |b| {
        b.iter(|| {
            let req = copy(&get);
            black_box(copy(&req));
            black_box(call_once(&mut bare, req))
        })
    });
    let mut retry = Retry::new(Only429, service_fn(ok));
    group.bench_function(NAMES[2], |b| {
        b.iter(|| black_box(call_once(&mut retry, copy(&get))))
    });
    let mut budget = RetryBudget::new(service_fn(ok), Policy::default());
    group.bench_function(NAMES[3], |b| {
        b.iter(|| black_box(call_once(&mut budget, copy(&get))))
    });
    group.bench_function(NAMES[4], |b| {
        b.iter(|| black_box(call_once(&mut budget, copy(&post))))
    });
    group.finish();
}

fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("criterion")
}

fn median_ns(name: &str) -> Option<f64> {
    let path = criterion_dir()
        .join("happy_path")
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

fn print_ratios() {
    let medians: Vec<_> = NAMES.iter().map(|n| median_ns(n)).collect();
    let [Some(bare), Some(clone), Some(retry), Some(get), Some(post)] = medians[..] else {
        println!("ratios: not every benchmark ran (use no filter to get them)");
        return;
    };
    println!("\nhappy path medians (ns): bare {bare:.1}, bare+clone {clone:.1}, tower retry {retry:.1}, RetryBudget GET {get:.1}, RetryBudget POST {post:.1}");
    println!(
        "RetryBudget GET / tower retry  = {:.3} (goal <= 1.10)",
        get / retry
    );
    println!(
        "RetryBudget GET / bare+clone   = {:.3} (as close to 1 as possible)",
        get / clone
    );
    println!(
        "RetryBudget POST / bare        = {:.3} (goal <= 1.10)",
        post / bare
    );
    println!(
        "size_of ResponseFuture (hyper-util client, Full<Bytes> body) = {} bytes",
        size_of::<
            tower_retry_budget::ResponseFuture<
                hyper_util::client::legacy::Client<
                    hyper_util::client::legacy::connect::HttpConnector,
                    http_body_util::Full<bytes::Bytes>,
                >,
                http_body_util::Full<bytes::Bytes>,
            >,
        >()
    );
}

fn main() {
    let mut criterion = Criterion::default()
        .output_directory(&criterion_dir())
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
