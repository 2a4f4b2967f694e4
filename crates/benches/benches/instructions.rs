//! What the layer costs per call, in instructions (callgrind, through
//! gungraun): a count, not a time, so it is the same whatever else the
//! machine is doing, and every ratio comes from one run.
//!
//! Every variant sends [`CALLS`] requests (built beforehand, not counted)
//! through its stack and drops each response; the count is divided by
//! [`CALLS`] in `examples/instruction_ratios.rs`. The stack, a warm-up of
//! [`WARM_UP`] calls and the requests are made in the bench's setup, which
//! callgrind does not count. The inner services:
//!
//! * `instant`: answers 200 at once (the future is ready at its first poll);
//! * `pending`: pending once, then 200 (a real network call in its smallest
//!   form): tower's `Timeout` and `RetryBudget` arm their per-attempt timer;
//! * `extended` (two variants only): 200 at once, the response carrying one
//!   extension, as every response of `hyper_util`'s legacy client over its
//!   `HttpConnector` does (`HttpInfo`): a report then goes into a map that
//!   exists already;
//! * `production` (the `*_production*` variants): what a service runs: a
//!   global `tracing_subscriber::fmt()` at INFO writing to a sink, one
//!   request extension, the response carrying one extension (pending once
//!   for the `_pending` ones; with a no-op observer for `_observed`);
//! * `reporting` (one variant, `tower_retry_reporting`): 200 at once, the
//!   response carrying the report `RetryBudget` delivers by default, built
//!   by the core and put in the extensions as the layer does: under
//!   `tower::retry`, what that delivery costs without the rest of the layer.
//!
//! ```text
//! cargo bench -p retry-budget-benches --bench instructions -- --output-format=json \
//!   | cargo run -q -p retry-budget-benches --example instruction_ratios
//! ```
//!
//! Needs valgrind and `gungraun-runner` of the same version as the `gungraun`
//! library (see BENCHMARKS.md); `cargo test` does not build this bench.

use std::hint::black_box;

use gungraun::{library_benchmark, library_benchmark_group, main};
use http::Request;
use retry_budget_benches::{
    self as fixtures, copy, drive, Instant200, PendingOnce, CALLS, WARM_UP,
};
use tokio::runtime::EnterGuard;
use tower::Service;

type Instant = fn(Request<()>) -> Instant200;
type Pending = fn(Request<()>) -> PendingOnce;
const INSTANT: Instant = fixtures::ok_at_once;
const PENDING: Pending = fixtures::ok_after_pending;
/// Answers at once with a response that carries an extension, as
/// `hyper_util`'s legacy client's responses do.
const EXTENDED: Instant = fixtures::ok_with_extension;
/// Answers at once with the report `RetryBudget` would deliver already in
/// its response: under `tower::retry`, the floor of the report's delivery.
const REPORTING: Instant = fixtures::ok_with_report;
/// Pending once, then a response carrying an extension.
const PENDING_EXTENDED: Pending = fixtures::ok_after_pending_with_extension;
/// The report's floor with the response's extension.
const EXTENDED_REPORTING: Instant = fixtures::ok_with_extension_and_report;
type Make = fn() -> Request<()>;
const GET: Make = fixtures::get;
const POST: Make = fixtures::post;

/// A stack ready to be measured: the service, the requests, and the runtime
/// context its timers need.
struct Bench<S> {
    service: S,
    requests: Vec<Request<()>>,
    /// Polls a call may need: 1 (instant) or 2 (pending once).
    polls: usize,
    /// Whether to make (and keep until the response) one request copy, as
    /// the floor of any retrying layer.
    copy: bool,
    _context: EnterGuard<'static>,
}

/// [`prepare`] in the configuration a service runs: a global
/// `tracing_subscriber::fmt()` at INFO (each benchmark runs in a process of
/// its own), requests carrying one extension.
fn production<S>(service: S, polls: usize) -> Bench<S>
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    tracing::dispatcher::set_global_default(fixtures::production_subscriber())
        .expect("one subscriber per benchmark process");
    prepare(service, fixtures::production_get, polls, false)
}

fn prepare<S>(mut service: S, make: Make, polls: usize, copy: bool) -> Bench<S>
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let runtime = Box::leak(Box::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime"),
    ));
    let context = runtime.enter();
    for _ in 0..WARM_UP {
        black_box(drive(&mut service, make(), polls));
    }
    Bench {
        service,
        requests: (0..CALLS).map(|_| make()).collect(),
        polls,
        copy,
        _context: context,
    }
}

/// The measured loop. The bench is returned so that dropping it is not
/// counted.
#[inline(never)]
fn run<S>(mut bench: Bench<S>) -> Bench<S>
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let polls = bench.polls;
    for req in bench.requests.drain(..) {
        let kept = bench.copy.then(|| copy(&req));
        black_box(drive(&mut bench.service, black_box(req), polls));
        drop(black_box(kept));
    }
    bench
}

fn instant_inner(copy: bool) -> Bench<tower::util::ServiceFn<Instant>> {
    prepare(tower::service_fn(INSTANT), GET, 1, copy)
}

fn pending_inner(copy: bool) -> Bench<tower::util::ServiceFn<Pending>> {
    prepare(tower::service_fn(PENDING), GET, 2, copy)
}

#[library_benchmark]
#[bench::instant(instant_inner(false))]
fn bare(bench: Bench<tower::util::ServiceFn<Instant>>) -> Bench<tower::util::ServiceFn<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(pending_inner(false))]
fn bare_pending(
    bench: Bench<tower::util::ServiceFn<Pending>>,
) -> Bench<tower::util::ServiceFn<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(instant_inner(true))]
fn bare_plus_copy(
    bench: Bench<tower::util::ServiceFn<Instant>>,
) -> Bench<tower::util::ServiceFn<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(pending_inner(true))]
fn bare_plus_copy_pending(
    bench: Bench<tower::util::ServiceFn<Pending>>,
) -> Bench<tower::util::ServiceFn<Pending>> {
    run(bench)
}

type Retry<F> = tower::retry::Retry<retry_budget_benches::Only429, tower::util::ServiceFn<F>>;
type RetryTimeout<F> = tower::retry::Retry<
    retry_budget_benches::Only429,
    tower::timeout::Timeout<tower::util::ServiceFn<F>>,
>;
type Budget<F> = tower_retry_budget::RetryBudget<tower::util::ServiceFn<F>>;

#[library_benchmark]
#[bench::instant(prepare(fixtures::tower_retry(INSTANT), GET, 1, false))]
fn tower_retry(bench: Bench<Retry<Instant>>) -> Bench<Retry<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(prepare(fixtures::tower_retry(PENDING), GET, 2, false))]
fn tower_retry_pending(bench: Bench<Retry<Pending>>) -> Bench<Retry<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::tower_retry_timeout(INSTANT), GET, 1, false))]
fn tower_retry_timeout(bench: Bench<RetryTimeout<Instant>>) -> Bench<RetryTimeout<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(prepare(fixtures::tower_retry_timeout(PENDING), GET, 2, false))]
fn tower_retry_timeout_pending(
    bench: Bench<RetryTimeout<Pending>>,
) -> Bench<RetryTimeout<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::retry_budget(INSTANT), GET, 1, false))]
fn retry_budget_get(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(prepare(fixtures::retry_budget(PENDING), GET, 2, false))]
fn retry_budget_get_pending(bench: Bench<Budget<Pending>>) -> Bench<Budget<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::retry_budget_when_retried(INSTANT), GET, 1, false))]
fn retry_budget_get_when_retried(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(prepare(fixtures::retry_budget_when_retried(PENDING), GET, 2, false))]
fn retry_budget_get_when_retried_pending(bench: Bench<Budget<Pending>>) -> Bench<Budget<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::tower_retry(REPORTING), GET, 1, false))]
fn tower_retry_reporting(bench: Bench<Retry<Instant>>) -> Bench<Retry<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::tower_retry(EXTENDED), GET, 1, false))]
fn tower_retry_extended(bench: Bench<Retry<Instant>>) -> Bench<Retry<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::retry_budget(EXTENDED), GET, 1, false))]
fn retry_budget_get_extended(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(prepare(fixtures::retry_budget(INSTANT), POST, 1, false))]
fn retry_budget_post(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(prepare(fixtures::retry_budget(PENDING), POST, 2, false))]
fn retry_budget_post_pending(bench: Bench<Budget<Pending>>) -> Bench<Budget<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(production(fixtures::tower_retry(EXTENDED), 1))]
fn tower_retry_production(bench: Bench<Retry<Instant>>) -> Bench<Retry<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(production(fixtures::tower_retry_timeout(PENDING_EXTENDED), 2))]
fn tower_retry_timeout_production_pending(
    bench: Bench<RetryTimeout<Pending>>,
) -> Bench<RetryTimeout<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(production(fixtures::tower_retry(EXTENDED_REPORTING), 1))]
fn tower_retry_reporting_production(bench: Bench<Retry<Instant>>) -> Bench<Retry<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(production(fixtures::retry_budget(EXTENDED), 1))]
fn retry_budget_get_production(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

#[library_benchmark]
#[bench::pending(production(fixtures::retry_budget(PENDING_EXTENDED), 2))]
fn retry_budget_get_production_pending(bench: Bench<Budget<Pending>>) -> Bench<Budget<Pending>> {
    run(bench)
}

#[library_benchmark]
#[bench::instant(production(fixtures::retry_budget_observed(EXTENDED), 1))]
fn retry_budget_get_production_observed(bench: Bench<Budget<Instant>>) -> Bench<Budget<Instant>> {
    run(bench)
}

library_benchmark_group!(
    name = per_call,
    benchmarks = [
        bare,
        bare_pending,
        bare_plus_copy,
        bare_plus_copy_pending,
        tower_retry,
        tower_retry_pending,
        tower_retry_timeout,
        tower_retry_timeout_pending,
        retry_budget_get,
        retry_budget_get_pending,
        retry_budget_get_when_retried,
        retry_budget_get_when_retried_pending,
        tower_retry_reporting,
        tower_retry_extended,
        retry_budget_get_extended,
        retry_budget_post,
        retry_budget_post_pending,
        tower_retry_production,
        tower_retry_timeout_production_pending,
        tower_retry_reporting_production,
        retry_budget_get_production,
        retry_budget_get_production_pending,
        retry_budget_get_production_observed
    ]
);

main!(library_benchmark_groups = per_call);
