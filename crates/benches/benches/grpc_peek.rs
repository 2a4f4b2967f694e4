//! The cost of `PeekLayer::grpc` on an OK unary gRPC call.
//!
//! The inner service answers at once what a unary call's OK answer is: a
//! gRPC head (`200`, `application/grpc`, no `grpc-status`), one message,
//! trailers with `grpc-status: 0`. Each iteration makes the call (polled
//! once with a no-op waker inside a tokio runtime context) and reads the
//! body to its trailers, as tonic would. Three variants:
//!
//! 1. `bare`: the inner service alone;
//! 2. `retry_budget_grpc`: `RetryBudgetLayer` with `GrpcSignal`, on a call
//!    marked `Idempotent` (budgeted);
//! 3. `retry_budget_grpc_peek`: the same with `PeekLayer::grpc` below the
//!    retry layer, which reads the first frame before the response is
//!    returned.
//!
//! The peek's cost is (3) − (2); the medians are read back from criterion's
//! estimates and printed after the run.
//!
//! Wall time on a shared machine is noisy, so the bench also runs without
//! criterion for an instruction count: `GRPC_PEEK_RUN=<variant>:<calls>`
//! makes that many calls of one variant and exits, to be run under
//! `valgrind --tool=callgrind` twice (two call counts): the difference of the
//! totals divided by the difference of the counts is the per-call figure,
//! set-up excluded.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::path::PathBuf;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use criterion::Criterion;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full};
use retry_budget::Policy;
use tower::{service_fn, Service, ServiceBuilder};
use tower_retry_budget::{
    peek::PeekLayer, response_signal::GrpcSignal, Idempotent, RetryBudgetLayer,
};

type Answer = WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>;

const MESSAGE: &[u8] = b"\0\0\0\0\x0ecoast palettes";

fn request() -> Request<()> {
    let mut request = Request::post("http://catalog.test/test.Catalog/Get")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "bench/1.0")
        .body(())
        .unwrap();
    request.extensions_mut().insert(Idempotent);
    request
}

fn ok(_req: Request<()>) -> Ready<Result<Response<Answer>, Infallible>> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from_static(MESSAGE)).with_trailers(ready(Some(Ok(trailers))));
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    ready(Ok(response))
}

/// Makes the call, polled once (it must be ready), and reads the body to
/// its end; returns the trailers.
fn call_and_read<S, B>(service: &mut S, req: Request<()>) -> Option<HeaderMap>
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_ready());
    let future = pin!(service.call(req));
    let Poll::Ready(response) = future.poll(&mut cx) else {
        panic!("the inner service answers at once");
    };
    let mut body = response.unwrap().into_body();
    let mut trailers = None;
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(frame)) => {
                if let Ok(t) = frame.unwrap().into_trailers() {
                    trailers = Some(t);
                }
            }
            Poll::Ready(None) => return trailers,
            Poll::Pending => panic!("the body is all there"),
        }
    }
}

const NAMES: [&str; 3] = ["bare", "retry_budget_grpc", "retry_budget_grpc_peek"];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let req = request();
    let copy = || {
        let mut copy = Request::new(());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        copy
    };

    let mut group = c.benchmark_group("grpc_peek");
    let mut bare = service_fn(ok);
    assert!(call_and_read(&mut bare, copy()).is_some());
    group.bench_function(NAMES[0], |b| {
        b.iter(|| black_box(call_and_read(&mut bare, copy())))
    });
    let mut budget = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .service(service_fn(ok));
    assert!(call_and_read(&mut budget, copy()).is_some());
    group.bench_function(NAMES[1], |b| {
        b.iter(|| black_box(call_and_read(&mut budget, copy())))
    });
    let mut peek = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(service_fn(ok));
    assert!(call_and_read(&mut peek, copy()).is_some());
    group.bench_function(NAMES[2], |b| {
        b.iter(|| black_box(call_and_read(&mut peek, copy())))
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
        .join("grpc_peek")
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

fn print_figures() {
    let medians: Vec<_> = NAMES.iter().map(|n| median_ns(n)).collect();
    let [Some(bare), Some(budget), Some(peek)] = medians[..] else {
        println!("figures: not every benchmark ran (use no filter to get them)");
        return;
    };
    println!("\nOK unary gRPC call + body read, medians (ns): bare {bare:.1}, RetryBudget+GrpcSignal {budget:.1}, + PeekLayer::grpc {peek:.1}");
    println!(
        "peek cost = {:.1} ns per call ({:.3}x the retry layer alone)",
        peek - budget,
        peek / budget
    );
}

/// `GRPC_PEEK_RUN=<variant>:<calls>`: only that, no criterion.
fn run_plain(spec: &str) {
    let (name, calls) = spec.split_once(':').expect("<variant>:<calls>");
    let calls: u32 = calls.parse().expect("a number of calls");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let mut budget = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .service(service_fn(ok));
    let mut peek = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(service_fn(ok));
    let mut bare = service_fn(ok);
    for _ in 0..calls {
        let trailers = match name {
            "bare" => call_and_read(&mut bare, request()),
            "retry_budget_grpc" => call_and_read(&mut budget, request()),
            "retry_budget_grpc_peek" => call_and_read(&mut peek, request()),
            other => panic!("no variant {other}: one of {NAMES:?}"),
        };
        black_box(trailers);
    }
}

fn main() {
    if let Ok(spec) = std::env::var("GRPC_PEEK_RUN") {
        run_plain(&spec);
        return;
    }
    let mut criterion = Criterion::default()
        .output_directory(&criterion_dir())
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    print_figures();
}
