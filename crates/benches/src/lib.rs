//! Benchmarks and measurement programs for the retry budget; see
//! `BENCHMARKS.md` at the top of the repository.
//!
//! This library holds what the benches share, so that the instruction-count
//! bench (`benches/instructions.rs`, gungraun) and the wall-time bench
//! (`benches/happy_path.rs`, criterion) measure exactly the same variants:
//! the same request, the same inner services, the same minimal `tower::retry`
//! policy, the same way of driving a future (polled with a no-op waker inside
//! a tokio runtime context, so no executor cost is counted).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod interleave;
pub mod reqwest_variants;

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::LazyLock;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Method, Request, Response};
use std::sync::Arc;

use retry_budget::{retry_after::RetryAfter, Action, Decision, Policy, Report};
use tower::retry::Retry;
use tower::timeout::Timeout;
use tower::util::ServiceFn;
use tower::{service_fn, Layer, Service};
use tower_retry_budget::{ReportMode, RetryBudget, RetryBudgetLayer};

/// Requests sent by every variant of the instruction-count bench in its
/// measured part; its counts are divided by this to give a per-call figure.
pub const CALLS: usize = 1_000;

/// Calls made in the instruction-count bench's setup before the measured
/// ones (not in its instruction counts, but in callgrind's call counts).
pub const WARM_UP: usize = 64;

/// A GET with three headers, as a client sends.
pub fn get() -> Request<()> {
    request(Method::GET)
}

/// A POST with three headers.
pub fn post() -> Request<()> {
    request(Method::POST)
}

/// What a service's client puts in its requests' extensions (a request
/// id, a tracing context, tonic's and axum's own types): one value.
#[derive(Debug, Clone, Copy)]
pub struct RequestId(pub u64);

/// A GET with three headers and one request extension ([`RequestId`]):
/// the request of the production variants.
pub fn production_get() -> Request<()> {
    let mut request = get();
    request.extensions_mut().insert(RequestId(7));
    request
}

/// The subscriber of the production variants: `tracing_subscriber::fmt()`
/// at INFO writing to a sink, as a service logs (a service's own INFO
/// lines would be written; the layer's events are at DEBUG).
pub fn production_subscriber() -> tracing::Dispatch {
    tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish(),
    )
}

/// A GET or POST with three headers, as a client sends.
pub fn request(method: Method) -> Request<()> {
    Request::builder()
        .method(method)
        .uri("http://upstream.test/palettes?collection=coast")
        .header("accept", "application/json")
        .header("user-agent", "bench/1.0")
        .header("authorization", "Bearer 0123456789abcdef")
        .body(())
        .expect("a valid request")
}

/// One request copy, as a retrying layer makes it: `http`'s own `Clone`
/// (method, URI, version, headers, extensions, body), the copy
/// `RetryBudget` makes too.
pub fn copy(req: &Request<()>) -> Request<()> {
    req.clone()
}

/// The inner service's future when it answers at once.
pub type Instant200 = Ready<Result<Response<()>, Infallible>>;

/// An inner service answering 200 at once.
pub fn ok_at_once(_req: Request<()>) -> Instant200 {
    ready(Ok(Response::new(())))
}

/// What a connector tells about the connection a response came on: the
/// shape of `hyper_util`'s `HttpInfo` (two socket addresses), which its
/// legacy client puts in the extensions of every response over its
/// `HttpConnector`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionInfo {
    /// The peer's address.
    pub remote: SocketAddr,
    /// The local address.
    pub local: SocketAddr,
}

/// An inner service answering 200 at once, its response carrying a
/// [`ConnectionInfo`] as `hyper_util`'s legacy client's responses carry
/// `HttpInfo`: the extension map a report goes into already exists.
pub fn ok_with_extension(_req: Request<()>) -> Instant200 {
    let mut response = Response::new(());
    response.extensions_mut().insert(connection_info());
    ready(Ok(response))
}

/// The policy of [`ok_with_report`]'s report: the default, as the
/// `retry_budget` variants use, shared as the layer shares it.
static REPORT_POLICY: LazyLock<Arc<Policy>> = LazyLock::new(|| Arc::new(Policy::default()));

/// The report `RetryBudget` delivers by default for an action its first
/// answer (200, at elapsed zero) ended, built by the core as the layer
/// builds it: an [`Action`], its start, its response, its report.
fn first_answer_report() -> Report {
    let mut action = Action::new(REPORT_POLICY.clone());
    action.attempt_started(Duration::ZERO);
    let stop = action.response(Duration::ZERO, 200, &RetryAfter::Missing, None);
    assert_eq!(stop, Decision::Stop(retry_budget::Outcome::Success));
    action.take_report().expect("stopped")
}

/// Answers 200 at once, its response carrying the [`Report`] that
/// `RetryBudget` delivers by default for an action its first answer ended,
/// built by the core and put in the response's extensions exactly as the
/// layer does, with no clock or header read. Under `tower::retry`
/// (`tower_retry_reporting`), it is the floor of "the caller always learns
/// what happened": what that costs without the rest of the layer.
pub fn ok_with_report(_req: Request<()>) -> Instant200 {
    let mut response = Response::new(());
    response.extensions_mut().insert(first_answer_report());
    ready(Ok(response))
}

/// [`ok_with_report`] whose response also carries the extension of
/// [`ok_with_extension`]: the floor in the production configuration.
pub fn ok_with_extension_and_report(_req: Request<()>) -> Instant200 {
    let mut response = Response::new(());
    response.extensions_mut().insert(connection_info());
    response.extensions_mut().insert(first_answer_report());
    ready(Ok(response))
}

fn connection_info() -> ConnectionInfo {
    ConnectionInfo {
        remote: SocketAddr::from(([127, 0, 0, 1], 8080)),
        local: SocketAddr::from(([127, 0, 0, 1], 50_000)),
    }
}

/// A future that is pending once (it wakes its waker at once, as an I/O
/// source that became ready would), then answers 200: a real network call
/// in its smallest form. It makes every layer take its slow path: tower's
/// `Timeout` and `RetryBudget` create their per-attempt timer.
#[derive(Debug, Default)]
pub struct PendingOnce {
    polled: bool,
    /// Whether the response carries a [`ConnectionInfo`].
    extended: bool,
}

impl Future for PendingOnce {
    type Output = Result<Response<()>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polled {
            let mut response = Response::new(());
            if self.extended {
                response.extensions_mut().insert(connection_info());
            }
            Poll::Ready(Ok(response))
        } else {
            self.polled = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// An inner service answering 200 after being pending once.
pub fn ok_after_pending(_req: Request<()>) -> PendingOnce {
    PendingOnce::default()
}

/// [`ok_after_pending`] whose response carries a [`ConnectionInfo`].
pub fn ok_after_pending_with_extension(_req: Request<()>) -> PendingOnce {
    PendingOnce {
        polled: false,
        extended: true,
    }
}

/// A minimal 429-only policy for `tower::retry::Retry`: what a user writes
/// for "retry on 429" (one request copy per call).
#[derive(Debug, Clone, Copy)]
pub struct Only429;

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

/// The per-attempt cap given to `tower::timeout::Timeout` (the default
/// policy's cap, so both layers arm the same timer).
pub const ATTEMPT_CAP: Duration = Duration::from_secs(4);

/// `tower::retry` over `inner`.
pub fn tower_retry<F, Fut>(inner: F) -> Retry<Only429, ServiceFn<F>>
where
    F: FnMut(Request<()>) -> Fut + Clone,
{
    Retry::new(Only429, service_fn(inner))
}

/// `tower::retry` over `tower::timeout` (one timeout per attempt) over
/// `inner`: the tower composition closest to what `RetryBudget` does.
pub fn tower_retry_timeout<F, Fut>(inner: F) -> Retry<Only429, Timeout<ServiceFn<F>>>
where
    F: FnMut(Request<()>) -> Fut + Clone,
{
    Retry::new(Only429, Timeout::new(service_fn(inner), ATTEMPT_CAP))
}

/// `RetryBudget` with the default policy over `inner`.
pub fn retry_budget<F, Fut>(inner: F) -> RetryBudget<ServiceFn<F>>
where
    F: FnMut(Request<()>) -> Fut,
{
    RetryBudget::new(service_fn(inner), Policy::default())
}

/// `RetryBudget` with the default policy over `inner`, built by the layer
/// with [`ReportMode::WhenRetried`]: no report on a response that needed no
/// retry.
pub fn retry_budget_when_retried<F, Fut>(inner: F) -> RetryBudget<ServiceFn<F>>
where
    F: FnMut(Request<()>) -> Fut,
{
    RetryBudgetLayer::new(Policy::default())
        .report_mode(ReportMode::WhenRetried)
        .layer(service_fn(inner))
}

/// A no-op [`Observer`](tower_retry_budget::observer::Observer): what the CLI and
/// the proxy set (theirs feed metrics), at its smallest.
#[derive(Debug, Clone, Copy)]
pub struct NoopObserver;

impl tower_retry_budget::observer::Observer for NoopObserver {
    fn on_event(&self, _: tower_retry_budget::observer::ActionId, _: &retry_budget::trail::Event) {}
}

/// `RetryBudget` with the default policy and a [`NoopObserver`] over
/// `inner`.
pub fn retry_budget_observed<F, Fut>(inner: F) -> RetryBudget<ServiceFn<F>>
where
    F: FnMut(Request<()>) -> Fut,
{
    RetryBudgetLayer::new(Policy::default())
        .observer(NoopObserver)
        .layer(service_fn(inner))
}

/// Drives one call to completion as a caller would: `poll_ready`, `call`,
/// then polls until ready (at most `polls` times) with a no-op waker; the
/// response is returned (dropping it is the caller's business).
///
/// # Panics
///
/// If the service is not ready, fails, or is not done after `polls` polls:
/// every variant here answers 200 at once or after one pending poll.
pub fn drive<S>(service: &mut S, req: Request<()>, polls: usize) -> S::Response
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        service.poll_ready(&mut cx).is_ready(),
        "the service is ready"
    );
    let mut future = pin!(service.call(req));
    for _ in 0..polls {
        if let Poll::Ready(result) = future.as_mut().poll(&mut cx) {
            return result.expect("the inner service answers 200");
        }
    }
    panic!("not done after {polls} polls");
}

/// A ratio of two variants' costs with a goal.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    /// The variant measured.
    pub numerator: &'static str,
    /// What it is compared with.
    pub denominator: &'static str,
    /// The goal (at most this), if there is one.
    pub goal: Option<f64>,
    /// What the ratio says.
    pub meaning: &'static str,
}

/// The ratios both benches print, by variant name. The production ones
/// come first: a subscriber at INFO, a request extension, a response
/// extension (see [`production_get`], [`production_subscriber`]).
pub const RATIOS: [Ratio; 15] = [
    Ratio {
        numerator: "retry_budget_get_production",
        denominator: "tower_retry_production",
        goal: Some(1.25),
        meaning: "production: instant GET, report delivered",
    },
    Ratio {
        numerator: "retry_budget_get_production_pending",
        denominator: "tower_retry_timeout_production_pending",
        goal: Some(1.25),
        meaning: "production: pending-once GET vs retry + timeout",
    },
    Ratio {
        numerator: "retry_budget_get_production_observed",
        denominator: "tower_retry_production",
        goal: Some(1.40),
        meaning: "production: instant GET with a no-op observer",
    },
    Ratio {
        numerator: "tower_retry_reporting_production",
        denominator: "tower_retry_production",
        goal: None,
        meaning: "production: tower::retry, its response carrying the report: the floor of the first goal",
    },
    Ratio {
        numerator: "retry_budget_get",
        denominator: "tower_retry",
        goal: Some(1.30),
        meaning: "instant GET, report delivered",
    },
    Ratio {
        numerator: "retry_budget_get_when_retried",
        denominator: "tower_retry",
        goal: Some(1.05),
        meaning: "instant GET, ReportMode::WhenRetried",
    },
    Ratio {
        numerator: "retry_budget_get_pending",
        denominator: "tower_retry_timeout_pending",
        goal: Some(1.10),
        meaning: "pending-once GET vs retry + timeout",
    },
    Ratio {
        numerator: "retry_budget_get_when_retried_pending",
        denominator: "tower_retry_timeout_pending",
        goal: Some(1.10),
        meaning: "pending-once GET, ReportMode::WhenRetried",
    },
    Ratio {
        numerator: "retry_budget_post",
        denominator: "bare",
        goal: Some(1.05),
        meaning: "POST passed through, instant",
    },
    Ratio {
        numerator: "retry_budget_post_pending",
        denominator: "bare_pending",
        goal: Some(1.05),
        meaning: "POST passed through, pending once",
    },
    Ratio {
        numerator: "retry_budget_get",
        denominator: "bare_plus_copy",
        goal: None,
        meaning: "instant GET vs the copy floor",
    },
    Ratio {
        numerator: "tower_retry_timeout_pending",
        denominator: "tower_retry_pending",
        goal: None,
        meaning: "what tower's own timeout costs",
    },
    Ratio {
        numerator: "tower_retry_reporting",
        denominator: "tower_retry",
        goal: None,
        meaning: "tower::retry, its response carrying the core's report as RetryBudget delivers it: the floor of the first goal",
    },
    Ratio {
        numerator: "retry_budget_get",
        denominator: "tower_retry_reporting",
        goal: None,
        meaning: "instant GET with its report vs that floor: the rest of the layer, a clock and a header read",
    },
    Ratio {
        numerator: "retry_budget_get_extended",
        denominator: "tower_retry_extended",
        goal: None,
        meaning: "instant GET, report delivered, the response already carrying an extension as hyper-util's do",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use retry_budget::{trail::EventKind, Report};

    fn report_of(response: &Response<()>) -> Report {
        response
            .extensions()
            .get::<Report>()
            .cloned()
            .expect("a report in the response")
    }

    /// The floor variant's response carries the report the layer delivers
    /// for the same answer: same outcome, counts, cap and trail, told apart
    /// only by the time the layer's clock saw pass.
    #[test]
    fn the_reporting_floor_delivers_the_layers_report() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let _context = runtime.enter();
        let by_layer = report_of(&drive(
            &mut retry_budget(ok_at_once),
            request(Method::GET),
            1,
        ));
        let mut floor = report_of(&drive(
            &mut tower_retry(ok_with_report),
            request(Method::GET),
            1,
        ));
        let kinds = |report: &Report| -> Vec<EventKind> {
            report
                .events
                .iter()
                .map(|event| event.kind.clone())
                .collect()
        };
        assert_eq!(kinds(&floor), kinds(&by_layer));
        assert_eq!(kinds(&floor).len(), 3);
        // The floor reads no clock: its answer came at zero.
        assert_eq!(floor.elapsed, Duration::ZERO);
        floor.elapsed = by_layer.elapsed;
        floor.request_time = by_layer.request_time;
        floor.events = by_layer.events.clone();
        assert_eq!(floor, by_layer);
    }
}
