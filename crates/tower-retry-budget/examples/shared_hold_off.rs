//! Measurements of the hold-off shared through Redis (BENCHMARKS.md,
//! "Shared hold-off on Redis"). Needs a running Redis.
//!
//! ```text
//! # Propagation: from one map's hold() (what the layer calls on a 429) to
//! # another map (its own connections) having it; N holds, p50/p99/max.
//! cargo run --release -p tower-retry-budget --features redis \
//!     --example shared_hold_off -- propagation redis://127.0.0.1:6379 2000
//!
//! # The first attempt's path, for instruction counts under callgrind
//! # (`local`: in-process map; `redis`: the same with the Redis store):
//! valgrind --tool=callgrind --toggle-collect='*first_attempts*' \
//!     target/release/examples/shared_hold_off hot-path redis redis://127.0.0.1:6379 10000
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::Policy;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service};
use tower_retry_budget::hold_off::RedisStore;
use tower_retry_budget::{hold_off::HoldOff, RetryBudgetLayer};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["propagation", url, n] => runtime.block_on(propagation(url, count(n)?)),
        ["hot-path", store, url, n] => hot_path(&runtime, store, url, count(n)?),
        _ => Err("usage: propagation URL N | hot-path local|redis URL N".into()),
    }
}

/// `N`: a whole number of at least 1 (a percentile of no measurement is
/// meaningless).
fn count(text: &str) -> Result<usize, Error> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("N must be a whole number of at least 1, got {text:?}").into()),
    }
}

async fn shared(url: &str, namespace: &str) -> Result<HoldOff, Error> {
    let store = RedisStore::new(url)?.namespace(namespace)?;
    let hold_off = HoldOff::builder().redis(store).build()?;
    let start = Instant::now();
    while !hold_off.store_health().is_some_and(|h| h.available) {
        if start.elapsed() > Duration::from_secs(10) {
            return Err("the store did not become available".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(hold_off)
}

async fn propagation(url: &str, n: usize) -> Result<(), Error> {
    let namespace = format!("propagation-{}", std::process::id());
    let a = shared(url, &namespace).await?;
    let b = shared(url, &namespace).await?;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let authority = format!("http://host-{i}.test:80");
        let start = Instant::now();
        let until = start + Duration::from_secs(60);
        a.hold(&authority, until);
        while b.until(&authority).is_none() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("hold {i} never arrived").into());
            }
            tokio::task::yield_now().await;
        }
        times.push(start.elapsed());
    }
    times.sort();
    // `n >= 1` (checked at parse time): every index below is in range.
    let at = |q: f64| times[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
    println!(
        "{n} holds: p50 {:?}, p99 {:?}, max {:?}; B received {} (A published {}, dropped {})",
        at(0.50),
        at(0.99),
        at(1.0),
        b.store_health().map_or(0, |h| h.received),
        a.store_health().map_or(0, |h| h.published),
        a.store_health().map_or(0, |h| h.dropped),
    );
    Ok(())
}

fn hot_path(
    runtime: &tokio::runtime::Runtime,
    store: &str,
    url: &str,
    n: usize,
) -> Result<(), Error> {
    let hold_off = match store {
        "local" => HoldOff::default(),
        "redis" => runtime.block_on(shared(url, &format!("hot-path-{}", std::process::id())))?,
        _ => return Err("the store is local or redis".into()),
    };
    let inner = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let mut service = RetryBudgetLayer::new(Policy::default())
        .hold_off(hold_off.clone())
        .layer(inner);
    let _entered = runtime.enter();
    // Warm up (allocations, the map's first lookups), then the measured run.
    first_attempts(&mut service, 1000);
    let ok = first_attempts(&mut service, n);
    println!(
        "{store}: {ok} of {n} first attempts answered on their first poll; store: {:?}",
        hold_off.store_health()
    );
    Ok(())
}

/// `n` first attempts to one (not held) authority, each polled once with a
/// no-op waker: the request's own path, nothing else. Callgrind collects
/// inside this function only (`--toggle-collect='*first_attempts*'`).
#[inline(never)]
fn first_attempts<S>(service: &mut S, n: usize) -> usize
where
    S: Service<Request<()>, Response = Response<()>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut ok = 0;
    for _ in 0..n {
        if service.poll_ready(&mut cx).is_pending() {
            continue;
        }
        let request = Request::get("http://svc.test/x").body(()).unwrap();
        let future = pin!(service.call(request));
        if let Poll::Ready(Ok(_)) = future.poll(&mut cx) {
            ok += 1;
        }
    }
    ok
}
