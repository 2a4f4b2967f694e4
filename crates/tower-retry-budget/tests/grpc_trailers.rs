//! `PeekLayer::grpc`: a gRPC status that comes in trailers.
//!
//! Two halves:
//!
//! * **paused time, in process**: the retry layer with `GrpcSignal`, the
//!   peek layer below it, and a `service_fn` answering hand-built gRPC
//!   responses whose body frames come after scripted delays. Exact instants:
//!   the retry after the pushback, the attempt deadline bounding the peek,
//!   the late status's place in the trail.
//! * **real time, tonic on loopback**: a tonic `Channel` through the
//!   README's stack plus the peek layer, against a tonic server whose
//!   handler answers each shape (Trailers-Only, initial metadata then
//!   trailers with no message, a message then error trailers, OK). Only
//!   lower bounds on wall time.
//!
//! And, if Python's `grpcio` is installed, the issue's own reproduction (a
//! grpcio handler that sends its initial metadata, then aborts with
//! RESOURCE_EXHAUSTED and a pushback of 1000 ms); skipped with a printed
//! reason otherwise.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use retry_budget::{
    trail::{EventKind, WaitBasis},
    Outcome, Policy, Report,
};
use tokio::time::{Instant, Sleep};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    observer::{ActionId, Event, Observer},
    peek::PeekLayer,
    response_signal::GrpcSignal,
    Idempotent, ReportSlot, RetryBudgetLayer,
};

// ---- a body whose frames come after scripted delays -----------------------

/// Yields its frames in order, each after its delay (from the previous
/// frame). No size hint: like a real HTTP/2 body.
struct Script {
    frames: VecDeque<(Duration, Frame<Bytes>)>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Script {
    fn new(frames: impl IntoIterator<Item = (Duration, Frame<Bytes>)>) -> Self {
        Self {
            frames: frames.into_iter().collect(),
            sleep: None,
        }
    }
}

impl Body for Script {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let Some((delay, _)) = this.frames.front_mut() else {
            return Poll::Ready(None);
        };
        if !delay.is_zero() {
            let at = Instant::now() + *delay;
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            ready!(sleep.as_mut().poll(cx));
            this.sleep = None;
            *delay = Duration::ZERO;
        }
        Poll::Ready(this.frames.pop_front().map(|(_, frame)| Ok(frame)))
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    map
}

/// One gRPC message (length-prefixed, uncompressed).
fn message(payload: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + payload.len());
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(payload);
    framed.into()
}

fn trailers_frame(pairs: &[(&str, &str)]) -> Frame<Bytes> {
    Frame::trailers(headers(pairs))
}

/// A gRPC head (`200`, `application/grpc`, one initial metadata field) over
/// `body`.
fn grpc_response<B>(body: B) -> Response<B> {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("x", "y")
        .body(body)
        .unwrap()
}

// ---- paused time, in process ----------------------------------------------

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// An in-process gRPC server: the n-th call (0-based) answers `script(n)`;
/// records when each call came.
#[derive(Clone)]
struct Server {
    script: Arc<dyn Fn(usize) -> Response<Script> + Send + Sync>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Server {
    fn new(script: impl Fn(usize) -> Response<Script> + Send + Sync + 'static) -> Self {
        Self {
            script: Arc::new(script),
            calls: Arc::default(),
        }
    }

    fn service(
        &self,
    ) -> impl Service<Request<()>, Response = Response<Script>, Error = Infallible> + Clone {
        let this = self.clone();
        service_fn(move |_req: Request<()>| {
            let mut calls = this.calls.lock().unwrap();
            let n = calls.len();
            calls.push(Instant::now());
            std::future::ready(Ok::<_, Infallible>((this.script)(n)))
        })
    }

    /// When each call came, since `origin`.
    fn calls_since(&self, origin: Instant) -> Vec<Duration> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|at| *at - origin)
            .collect()
    }
}

fn ok_answer() -> Response<Script> {
    grpc_response(Script::new([
        (Duration::ZERO, Frame::data(message(b"item-7"))),
        (Duration::ZERO, trailers_frame(&[("grpc-status", "0")])),
    ]))
}

/// Initial metadata, then (after `delay`) trailers with no message.
fn trailers_after_headers(delay: Duration, trailers: &[(&str, &str)]) -> Response<Script> {
    grpc_response(Script::new([(delay, trailers_frame(trailers))]))
}

fn budgeted_post(slot: &ReportSlot) -> Request<()> {
    let mut request = Request::post("http://catalog.test/test.Catalog/Get")
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    request.extensions_mut().insert(Idempotent);
    request.extensions_mut().insert(slot.clone());
    request
}

/// The server delays the planned waits were based on.
fn server_waits(report: &Report) -> Vec<Duration> {
    report
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WaitPlanned {
                basis: WaitBasis::Server { requested },
                ..
            } => Some(requested),
            _ => None,
        })
        .collect()
}

fn translations(report: &Report) -> Vec<&str> {
    report
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Translated { from, .. } => Some(from.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn trailers_after_initial_metadata_are_retried_after_the_pushback() {
    let server = Server::new(|n| match n {
        0 => trailers_after_headers(
            Duration::ZERO,
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1500")],
        ),
        _ => ok_answer(),
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let origin = Instant::now();
    let slot = ReportSlot::new();
    let response = client.oneshot(budgeted_post(&slot)).await.unwrap();

    // Exactly one retry, exactly at the pushback (above the 1 s floor).
    assert_eq!(server.calls_since(origin), [S(0), MS(1500)]);
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("grpc-status").is_none(),
        "the OK head is untouched"
    );
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(collected.to_bytes(), message(b"item-7"));

    let report = slot.take().unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert_eq!(report.starts(), [S(0), MS(1500)]);
    assert_eq!(
        server_waits(&report),
        [MS(1500)],
        "the pushback was the server's delay"
    );
    assert_eq!(
        report.server_requested_wait, None,
        "the last response (OK) asked for no delay"
    );
    assert_eq!(
        translations(&report),
        ["grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1500, in trailers after initial metadata"]
    );
    assert!(report.events.iter().any(|e| matches!(
        e.kind,
        EventKind::Response {
            attempt: 1,
            status: 429,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn with_max_attempts_1_the_report_stops_on_resource_exhausted_and_the_body_keeps_the_trailers(
) {
    let sent = [
        ("grpc-status", "8"),
        ("grpc-message", "slow down"),
        ("grpc-retry-pushback-ms", "1000"),
        ("x-trailer", "kept"),
    ];
    let server = Server::new(move |_| trailers_after_headers(MS(300), &sent));
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let origin = Instant::now();
    let slot = ReportSlot::new();
    let response = client.oneshot(budgeted_post(&slot)).await.unwrap();
    assert_eq!(
        Instant::now() - origin,
        MS(300),
        "the head waits for the first frame"
    );

    // The head is the Trailers-Only head the server could have sent.
    let head = response.headers();
    assert_eq!(head["grpc-status"], "8");
    assert_eq!(head["grpc-message"], "slow down");
    assert_eq!(head["grpc-retry-pushback-ms"], "1000");
    assert_eq!(head["x"], "y");
    assert!(no_header_of_ours(head), "{head:?}");
    // The body yields those exact trailers, and nothing else.
    let report = response.extensions().get::<Report>().unwrap().clone();
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers(), Some(&headers(&sent)));
    assert!(collected.to_bytes().is_empty());

    assert_eq!(server.calls_since(origin).len(), 1);
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_ne!(report.outcome, Outcome::Success);
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.elapsed, MS(300));
    assert!(
        report.to_string().starts_with(
            "Stopped: the one attempt allowed was used (retries are off).\nLast response: 429."
        ),
        "{report}"
    );
    assert_eq!(slot.take(), Some(report));
}

#[tokio::test(start_paused = true)]
async fn a_negative_pushback_in_trailers_forbids_the_retry() {
    let server = Server::new(|_| {
        trailers_after_headers(
            Duration::ZERO,
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "-1")],
        )
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let origin = Instant::now();
    let response = client.oneshot(budgeted_post(&slot)).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "8");
    assert_eq!(server.calls_since(origin), [S(0)]);
    let report = slot.take().unwrap();
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.last_status, Some(429));
    assert!(report
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::RetryForbidden { attempt: 1 })));
}

#[tokio::test(start_paused = true)]
async fn a_first_frame_that_does_not_come_in_time_ends_the_attempt_at_its_deadline() {
    // The default cap is 4 s; the trailers would come at 10 s.
    let server = Server::new(|_| {
        trailers_after_headers(
            S(10),
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "0")],
        )
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let origin = Instant::now();
    let error = client.oneshot(budgeted_post(&slot)).await.unwrap_err();
    assert_eq!(
        Instant::now() - origin,
        S(4),
        "stopped exactly at the deadline"
    );
    assert!(error.is_timeout(), "{error}");
    let report = slot.take().unwrap();
    assert_eq!(report.outcome, Outcome::AttemptTimeout);
    assert_eq!(report.elapsed, S(4));
    assert_eq!(report.last_status, None, "no status was read");
    assert_eq!(server.calls_since(origin), [S(0)]);
}

#[tokio::test(start_paused = true)]
async fn a_first_frame_inside_the_deadline_is_read_and_retried() {
    let server = Server::new(|n| match n {
        0 => trailers_after_headers(
            S(3),
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1000")],
        ),
        _ => ok_answer(),
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let origin = Instant::now();
    client.oneshot(budgeted_post(&slot)).await.unwrap();
    // Status at 3 s, pushback 1 s: the retry at 4 s.
    assert_eq!(server.calls_since(origin), [S(0), S(4)]);
    assert_eq!(slot.take().unwrap().outcome, Outcome::Success);
}

#[tokio::test(start_paused = true)]
async fn data_then_error_trailers_pass_on_and_the_slot_report_is_corrected() {
    // A message at once, then RESOURCE_EXHAUSTED 2 s later: not retried
    // (an answer has begun), but the report must not keep saying success.
    let server = Server::new(|_| {
        grpc_response(Script::new([
            (Duration::ZERO, Frame::data(message(b"part-1"))),
            (
                S(2),
                trailers_frame(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1000")]),
            ),
        ]))
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let origin = Instant::now();
    let response = client.oneshot(budgeted_post(&slot)).await.unwrap();
    assert_eq!(Instant::now(), origin, "returned with the first message");
    assert!(
        response.headers().get("grpc-status").is_none(),
        "head untouched"
    );
    assert_eq!(
        response.extensions().get::<Report>().unwrap().outcome,
        Outcome::Success,
        "as known when the response was returned"
    );
    assert_eq!(slot.get().unwrap().outcome, Outcome::Success);

    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(Instant::now() - origin, S(2));
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "8");
    assert_eq!(collected.to_bytes(), message(b"part-1"));

    assert_eq!(
        server.calls_since(origin),
        [S(0)],
        "never retried after data"
    );
    let report = slot.take().unwrap();
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.attempts_started, 1);
    let last = report.events.last().unwrap();
    assert_eq!(last.at, S(2));
    assert_eq!(last.remaining_budget, S(18));
    assert_eq!(
        last.kind,
        EventKind::StatusAfterData {
            attempt: 1,
            status: 429,
            from: "grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000, in trailers after data".into(),
        }
    );
    assert!(
        report
            .to_string()
            .starts_with("Failed after the answer began"),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn data_then_ok_trailers_leave_the_success() {
    let server = Server::new(|_| ok_answer());
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let response = client.oneshot(budgeted_post(&slot)).await.unwrap();
    let returned = response.extensions().get::<Report>().unwrap().clone();
    response.into_body().collect().await.unwrap();
    assert_eq!(slot.take(), Some(returned.clone()));
    assert_eq!(returned.outcome, Outcome::Success);
}

/// What an observer was told: each event (with its action's id), each
/// report.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<(ActionId, Event)>>>,
    reports: Arc<Mutex<Vec<(ActionId, Report)>>>,
}

impl Observer for Recorder {
    fn on_event(&self, id: ActionId, event: &Event) {
        self.events.lock().unwrap().push((id, event.clone()));
    }

    fn on_report(&self, id: ActionId, report: &Report) {
        self.reports.lock().unwrap().push((id, report.clone()));
    }
}

impl Recorder {
    fn reports(&self) -> Vec<(ActionId, Report)> {
        self.reports.lock().unwrap().clone()
    }

    fn last_event(&self) -> (ActionId, Event) {
        self.events.lock().unwrap().last().cloned().unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn data_then_error_trailers_are_told_to_the_observer_with_or_without_a_slot() {
    for with_slot in [true, false] {
        let server = Server::new(|_| {
            grpc_response(Script::new([
                (Duration::ZERO, Frame::data(message(b"part-1"))),
                (S(2), trailers_frame(&[("grpc-status", "8")])),
            ]))
        });
        let recorder = Recorder::default();
        let layer = RetryBudgetLayer::new(Policy::default())
            .signal(GrpcSignal)
            .observer(recorder.clone());
        let client = ServiceBuilder::new()
            .layer(layer)
            .layer(PeekLayer::grpc())
            .service(server.service());
        let slot = ReportSlot::new();
        let mut request = budgeted_post(&slot);
        if !with_slot {
            request.extensions_mut().remove::<ReportSlot>();
        }
        request.extensions_mut().insert(ActionId(7));
        let origin = Instant::now();
        let response = client.oneshot(request).await.unwrap();
        let reports = recorder.reports();
        assert_eq!(reports.len(), 1, "told once at the return");
        assert_eq!(reports[0].1.outcome, Outcome::Success);

        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(Instant::now() - origin, S(2));
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "8");

        let reports = recorder.reports();
        assert_eq!(reports.len(), 2, "told again when the late status came");
        let (id, corrected) = &reports[1];
        assert_eq!(*id, ActionId(7));
        assert_eq!(corrected.outcome, Outcome::NotRetryable);
        assert_eq!(corrected.last_status, Some(429));
        let (id, event) = recorder.last_event();
        assert_eq!(id, ActionId(7));
        assert_eq!(event.at, S(2));
        assert_eq!(
            event.kind,
            EventKind::StatusAfterData {
                attempt: 1,
                status: 429,
                from: "grpc-status 8 (RESOURCE_EXHAUSTED), no grpc-retry-pushback-ms, in trailers after data"
                    .into(),
            }
        );
        assert_eq!(corrected.events.last(), Some(&event));
        let in_slot = slot.take();
        if with_slot {
            assert_eq!(in_slot.as_ref(), Some(corrected), "the caller's slot too");
        } else {
            assert_eq!(in_slot, None);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn data_then_ok_trailers_tell_the_observer_nothing_more() {
    let server = Server::new(|_| ok_answer());
    let recorder = Recorder::default();
    let layer = RetryBudgetLayer::new(Policy::default())
        .signal(GrpcSignal)
        .observer(recorder.clone());
    let client = ServiceBuilder::new()
        .layer(layer)
        .layer(PeekLayer::grpc())
        .service(server.service());
    let mut request = budgeted_post(&ReportSlot::new());
    request.extensions_mut().remove::<ReportSlot>();
    let response = client.oneshot(request).await.unwrap();
    let events = recorder.events.lock().unwrap().len();
    response.into_body().collect().await.unwrap();
    let reports = recorder.reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].1.outcome, Outcome::Success);
    assert_eq!(recorder.events.lock().unwrap().len(), events);
}

/// Polls the call once: a response not peeked is ready at once although its
/// body's first frame is 10 s away.
async fn ready_at_once<S>(
    client: S,
    request: Request<()>,
) -> Response<tower_retry_budget::peek::PeekBody<Script>>
where
    S: Service<Request<()>, Response = Response<tower_retry_budget::peek::PeekBody<Script>>>,
    S::Error: std::fmt::Debug,
{
    let mut call = tokio_test::task::spawn(client.oneshot(request));
    match call.poll() {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => panic!("the response waited for its body"),
    }
}

#[tokio::test(start_paused = true)]
async fn http_responses_trailers_only_heads_and_unbudgeted_calls_are_not_peeked() {
    let late = || Script::new([(S(10), trailers_frame(&[("grpc-status", "8")]))]);
    let answers: Vec<(&str, Response<Script>)> = vec![
        (
            "plain HTTP",
            Response::builder()
                .header("content-type", "text/plain")
                .body(late())
                .unwrap(),
        ),
        (
            "gRPC-Web",
            Response::builder()
                .header("content-type", "application/grpc-web+proto")
                .body(late())
                .unwrap(),
        ),
        (
            "Trailers-Only",
            Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "0")
                .body(late())
                .unwrap(),
        ),
        (
            "an intermediary's 429",
            Response::builder()
                .status(429)
                .header("content-type", "application/grpc")
                .header("retry-after", "1")
                .body(late())
                .unwrap(),
        ),
    ];
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    for (what, answer) in answers {
        let expected_head = answer.headers().clone();
        let answer = Arc::new(Mutex::new(Some(answer)));
        let server = service_fn(move |_req: Request<()>| {
            std::future::ready(Ok::<_, Infallible>(answer.lock().unwrap().take().unwrap()))
        });
        let client = ServiceBuilder::new()
            .layer(RetryBudgetLayer::new(policy).signal(GrpcSignal))
            .layer(PeekLayer::grpc())
            .service(server);
        let response = ready_at_once(client, budgeted_post(&ReportSlot::new())).await;
        assert_eq!(response.headers(), &expected_head, "{what}: head untouched");
    }

    // A call the retry layer does not budget (a POST not marked
    // idempotent): its gRPC answer is passed on without a look.
    let server = Server::new(move |_| trailers_after_headers(S(10), &[("grpc-status", "8")]));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .layer(PeekLayer::grpc())
        .service(server.service());
    let slot = ReportSlot::new();
    let mut request = budgeted_post(&slot);
    request.extensions_mut().remove::<Idempotent>();
    let response = ready_at_once(client, request).await;
    assert!(response.headers().get("grpc-status").is_none());
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "8");
    assert_eq!(slot.take(), None, "passed through: no report");
}

#[tokio::test(start_paused = true)]
async fn without_the_peek_layer_the_status_in_trailers_is_not_seen() {
    // Why the layer exists (and that it is opt-in): the same answer, read
    // from the head alone, is a plain 200.
    let server = Server::new(|_| {
        trailers_after_headers(
            Duration::ZERO,
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1000")],
        )
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .service(server.service());
    let slot = ReportSlot::new();
    let origin = Instant::now();
    client.oneshot(budgeted_post(&slot)).await.unwrap();
    assert_eq!(server.calls_since(origin), [S(0)]);
    assert_eq!(slot.take().unwrap().outcome, Outcome::Success);
}

// ---- real time, tonic on loopback ------------------------------------------

#[path = "support/raw_codec.rs"]
mod raw_codec;

mod loopback {
    use std::time::Instant as WallClock;

    use http::uri::PathAndQuery;
    use tonic::body::Body as TonicBody;
    use tonic::metadata::MetadataMap;
    use tonic::server::NamedService;
    use tonic::transport::server::TcpIncoming;
    use tonic::transport::{Channel, Endpoint};
    use tonic::{Code, Status};
    use tower_retry_budget::body_replay::{ReplayBody, ReplayBodyLayer};

    use super::*;

    pub(super) use super::raw_codec::RawCodec;

    /// How the server answers the n-th call (0-based).
    #[derive(Debug, Clone, Copy)]
    pub(super) enum Answer {
        /// OK, echoing the message (tonic's unary handler).
        Ok,
        /// A status with a pushback, Trailers-Only (tonic's unary handler
        /// returning an error).
        TrailersOnly(Code, &'static str),
        /// Initial metadata (`x: y`), then trailers with the status, the
        /// pushback and `grpc-message: slow down`, and no message: what a
        /// handler that sends its metadata before failing produces.
        AfterHeaders(Code, &'static str),
        /// One message, then (100 ms later) trailers with the status.
        DataThenError(Code),
    }

    #[derive(Clone)]
    pub(super) struct Catalog {
        script: Arc<dyn Fn(usize) -> Answer + Send + Sync>,
        calls: Arc<Mutex<Vec<WallClock>>>,
    }

    impl NamedService for Catalog {
        const NAME: &'static str = "test.Catalog";
    }

    fn status_trailers(code: Code, pushback: Option<&str>) -> Frame<Bytes> {
        let code = (code as i32).to_string();
        let mut pairs = vec![
            ("grpc-status", code.as_str()),
            ("grpc-message", "slow%20down"),
        ];
        if let Some(ms) = pushback {
            pairs.push(("grpc-retry-pushback-ms", ms));
        }
        trailers_frame(&pairs)
    }

    impl Service<Request<TonicBody>> for Catalog {
        type Response = Response<TonicBody>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<TonicBody>) -> Self::Future {
            let n = {
                let mut calls = self.calls.lock().unwrap();
                calls.push(WallClock::now());
                calls.len() - 1
            };
            let answer = (self.script)(n);
            let handler = service_fn(move |request: tonic::Request<Bytes>| async move {
                match answer {
                    Answer::TrailersOnly(code, ms) => {
                        let mut metadata = MetadataMap::new();
                        metadata.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
                        Err(Status::with_metadata(code, "slow down", metadata))
                    }
                    _ => Ok(tonic::Response::new(request.into_inner())),
                }
            });
            Box::pin(async move {
                let body = match answer {
                    Answer::Ok | Answer::TrailersOnly(..) => {
                        let mut grpc = tonic::server::Grpc::new(RawCodec);
                        return Ok(grpc.unary(handler, req).await);
                    }
                    Answer::AfterHeaders(code, ms) => {
                        Script::new([(Duration::ZERO, status_trailers(code, Some(ms)))])
                    }
                    Answer::DataThenError(code) => Script::new([
                        (Duration::ZERO, Frame::data(message(b"part-1"))),
                        (MS(100), status_trailers(code, None)),
                    ]),
                };
                // Read the request before answering, as a handler would.
                let _ = req.into_body().collect().await;
                Ok(grpc_response(TonicBody::new(body)))
            })
        }
    }

    pub(super) async fn serve(
        script: impl Fn(usize) -> Answer + Send + Sync + 'static,
    ) -> (SocketAddr, Arc<Mutex<Vec<WallClock>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let catalog = Catalog {
            script: Arc::new(script),
            calls: calls.clone(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .serve_with_incoming(catalog, TcpIncoming::from(listener)),
        );
        (addr, calls)
    }

    pub(super) async fn channel(addr: SocketAddr) -> Channel {
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    fn to_tonic_body(req: Request<ReplayBody<TonicBody>>) -> Request<TonicBody> {
        req.map(TonicBody::new)
    }

    /// The README's stack, with the peek layer below the retry layer.
    pub(super) fn client(
        channel: Channel,
        policy: Policy,
    ) -> tonic::client::Grpc<
        impl tonic::client::GrpcService<
                TonicBody,
                ResponseBody = tower_retry_budget::peek::PeekBody<TonicBody>,
            > + Clone,
    > {
        tonic::client::Grpc::new(
            ServiceBuilder::new()
                .layer(ReplayBodyLayer::new())
                .layer(RetryBudgetLayer::new(policy).signal(GrpcSignal))
                .layer(PeekLayer::grpc())
                .map_request(to_tonic_body as fn(_) -> _)
                .service(channel),
        )
    }

    pub(super) fn request(mark: bool, slot: &ReportSlot) -> tonic::Request<Bytes> {
        let mut request = tonic::Request::new(Bytes::from_static(b"item-7"));
        if mark {
            request.extensions_mut().insert(Idempotent);
        }
        request.extensions_mut().insert(slot.clone());
        request
    }

    pub(super) const GET: &str = "/test.Catalog/Get";

    /// One unary call: the result, the report in the slot, the wall time.
    pub(super) async fn unary<T>(
        grpc: &mut tonic::client::Grpc<T>,
        mark: bool,
    ) -> (
        Result<tonic::Response<Bytes>, Status>,
        Option<Report>,
        Duration,
    )
    where
        T: tonic::client::GrpcService<TonicBody>,
        T::ResponseBody: Body<Data = Bytes> + Send + 'static,
        <T::ResponseBody as Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let slot = ReportSlot::new();
        grpc.ready().await.map_err(Into::into).expect("ready");
        let started = WallClock::now();
        let result = grpc
            .unary(
                request(mark, &slot),
                PathAndQuery::from_static(GET),
                RawCodec,
            )
            .await;
        (result, slot.take(), started.elapsed())
    }
}

use loopback::{Answer, RawCodec};
use tonic::Code;

#[tokio::test]
async fn tonic_trailers_only_is_retried_as_before() {
    let (addr, calls) = loopback::serve(|n| match n {
        0 => Answer::TrailersOnly(Code::ResourceExhausted, "1000"),
        _ => Answer::Ok,
    })
    .await;
    let mut grpc = loopback::client(loopback::channel(addr).await, Policy::default());
    let (result, report, elapsed) = loopback::unary(&mut grpc, true).await;
    assert_eq!(result.unwrap().into_inner(), Bytes::from_static(b"item-7"));
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert!(calls[1] - calls[0] >= MS(1000), "{:?}", calls[1] - calls[0]);
    assert!(elapsed >= MS(1000));
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(
        translations(&report),
        ["grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000"],
        "a Trailers-Only head: no suffix"
    );
}

#[tokio::test]
async fn tonic_initial_metadata_then_resource_exhausted_is_retried_once_after_the_pushback() {
    let (addr, calls) = loopback::serve(|n| match n {
        0 => Answer::AfterHeaders(Code::ResourceExhausted, "1000"),
        _ => Answer::Ok,
    })
    .await;
    let mut grpc = loopback::client(loopback::channel(addr).await, Policy::default());
    let (result, report, elapsed) = loopback::unary(&mut grpc, true).await;

    let response = result.expect("OK after one retry");
    assert_eq!(response.get_ref(), &Bytes::from_static(b"item-7"));
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "exactly one retry");
    let gap = calls[1] - calls[0];
    eprintln!(
        "initial metadata, then RESOURCE_EXHAUSTED (pushback 1000 ms) -> retried after {gap:?}"
    );
    assert!(gap >= MS(1000), "{gap:?}");
    assert!(elapsed >= MS(1000), "{elapsed:?}");
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert_eq!(report.last_status, Some(200));
    assert_eq!(
        server_waits(&report),
        [MS(1000)],
        "the pushback was the server's delay"
    );
    assert_eq!(
        report.server_requested_wait, None,
        "the last response (OK) asked for no delay"
    );
    assert_eq!(response.extensions().get::<Report>(), Some(&report));
    assert_eq!(
        translations(&report),
        ["grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000, in trailers after initial metadata"]
    );
}

#[tokio::test]
async fn tonic_unmarked_call_passes_through_once() {
    let (addr, calls) =
        loopback::serve(|_| Answer::AfterHeaders(Code::ResourceExhausted, "1000")).await;
    let mut grpc = loopback::client(loopback::channel(addr).await, Policy::default());
    let (result, report, _) = loopback::unary(&mut grpc, false).await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "slow down");
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
    assert!(
        no_header_of_ours(&status.metadata().clone().into_headers()),
        "not peeked"
    );
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(report, None);
}

#[tokio::test]
async fn tonic_with_max_attempts_1_the_report_says_attempts_exhausted_on_429_never_success() {
    let (addr, calls) =
        loopback::serve(|_| Answer::AfterHeaders(Code::ResourceExhausted, "1000")).await;
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut grpc = loopback::client(loopback::channel(addr).await, policy);
    let (result, report, _) = loopback::unary(&mut grpc, true).await;

    // The caller sees the server's status, message and metadata.
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "slow down");
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
    assert_eq!(status.metadata().get("x").unwrap(), "y");
    assert_eq!(calls.lock().unwrap().len(), 1);
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_ne!(report.outcome, Outcome::Success);
    assert_eq!(report.last_status, Some(429));
    assert!(
        report.to_string().contains("Last response: 429."),
        "{report}"
    );
}

#[tokio::test]
async fn tonic_a_stream_that_fails_after_a_message_corrects_the_report() {
    let (addr, calls) = loopback::serve(|_| Answer::DataThenError(Code::Internal)).await;
    let mut grpc = loopback::client(loopback::channel(addr).await, Policy::default());

    // Server streaming: a message, then INTERNAL.
    let slot = ReportSlot::new();
    assert!(grpc.ready().await.is_ok(), "ready");
    let mut stream = grpc
        .server_streaming(
            loopback::request(true, &slot),
            http::uri::PathAndQuery::from_static(loopback::GET),
            RawCodec,
        )
        .await
        .expect("the answer began")
        .into_inner();
    assert_eq!(slot.get().unwrap().outcome, Outcome::Success, "so far");
    assert_eq!(
        stream.message().await.unwrap(),
        Some(Bytes::from_static(b"part-1"))
    );
    assert_eq!(stream.message().await.unwrap_err().code(), Code::Internal);
    let report = slot.take().unwrap();
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.last_status, Some(500));
    assert!(matches!(
        report.events.last().unwrap().kind,
        EventKind::StatusAfterData {
            attempt: 1,
            status: 500,
            ..
        }
    ));

    // Unary: the same answer, and the report is corrected by the time tonic
    // returns the error.
    let (result, report, _) = loopback::unary(&mut grpc, true).await;
    assert_eq!(result.unwrap_err().code(), Code::Internal);
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.last_status, Some(500));
    assert_eq!(calls.lock().unwrap().len(), 2, "never retried after data");
}

#[tokio::test]
async fn tonic_an_ok_unary_call_is_unchanged() {
    let (addr, calls) = loopback::serve(|_| Answer::Ok).await;
    let mut grpc = loopback::client(loopback::channel(addr).await, Policy::default());
    let (result, report, _) = loopback::unary(&mut grpc, true).await;
    let response = result.unwrap();
    assert_eq!(response.get_ref(), &Bytes::from_static(b"item-7"));
    // tonic merges the trailers into the metadata: OK, and no marker.
    assert_eq!(response.metadata().get("grpc-status").unwrap(), "0");
    assert!(no_header_of_ours(
        &response.metadata().clone().into_headers()
    ));
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 1);
    assert_eq!(response.extensions().get::<Report>(), Some(&report));
    assert_eq!(calls.lock().unwrap().len(), 1);
}

// ---- the issue's reproduction, against Python grpcio (optional) -----------

mod grpcio {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};

    /// A grpcio server: `test.Catalog/Get` sends its initial metadata, then
    /// aborts with RESOURCE_EXHAUSTED and `grpc-retry-pushback-ms: 1000`
    /// (the issue's handler), on the first call only (`once`) or on every
    /// call (`always`), and echoes otherwise; `test.Catalog/Count` answers
    /// how many `Get` calls it received.
    const SERVER: &str = r#"
import sys, threading
from concurrent import futures
import grpc

mode = sys.argv[1]
lock = threading.Lock()
calls = 0

def get(request, context):
    global calls
    with lock:
        calls += 1
        n = calls
    if mode == "always" or n == 1:
        context.send_initial_metadata((("x", "y"),))
        context.set_trailing_metadata((("grpc-retry-pushback-ms", "1000"),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "x")
    return request

def count(request, context):
    with lock:
        return str(calls).encode()

handler = grpc.method_handlers_generic_handler("test.Catalog", {
    "Get": grpc.unary_unary_rpc_method_handler(get),
    "Count": grpc.unary_unary_rpc_method_handler(count),
})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((handler,))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()  # until the test ends
server.stop(0)
"#;

    /// The server process; killed when dropped.
    pub(super) struct Server {
        child: Child,
        pub(super) port: u16,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Starts the server, or says why it cannot (no python3, no grpcio): the
    /// only reasons to skip.
    pub(super) fn start(mode: &str) -> Result<Server, String> {
        let probe = Command::new("python3")
            .args(["-c", "import grpc"])
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("python3 not found ({e})"))?;
        if !probe.success() {
            return Err("Python's grpcio is not installed (pip install grpcio)".into());
        }
        // grpcio is there: from here on, a failure is a failure, not a skip.
        let mut child = Command::new("python3")
            .args(["-c", SERVER, mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the server prints its port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the grpcio server did not start: {line:?}"));
        Ok(Server { child, port })
    }
}

/// Starts the grpcio server, or prints why the test is skipped.
macro_rules! grpcio_or_skip {
    ($mode:expr) => {
        match grpcio::start($mode) {
            Ok(server) => server,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        }
    };
}

async fn grpcio_calls(channel: tonic::transport::Channel) -> u32 {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let count = grpc
        .unary(
            tonic::Request::new(Bytes::new()),
            http::uri::PathAndQuery::from_static("/test.Catalog/Count"),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    std::str::from_utf8(&count).unwrap().parse().unwrap()
}

#[tokio::test]
async fn grpcio_reproduction_marked_idempotent_is_retried_once_and_ends_ok_with_success() {
    let server = grpcio_or_skip!("once");
    let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
    let channel = loopback::channel(addr).await;
    let mut grpc = loopback::client(channel.clone(), Policy::default());
    let (result, report, elapsed) = loopback::unary(&mut grpc, true).await;

    assert_eq!(
        result.expect("OK after one retry").into_inner(),
        Bytes::from_static(b"item-7")
    );
    assert_eq!(grpcio_calls(channel).await, 2, "retried once");
    let report = report.unwrap();
    eprintln!(
        "grpcio: retried after {:?}, call took {elapsed:?}",
        report.starts()[1]
    );
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert!(report.starts()[1] >= MS(1000), "{:?}", report.starts());
    assert!(elapsed >= MS(1000), "{elapsed:?}");
    assert_eq!(
        translations(&report),
        ["grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000, in trailers after initial metadata"]
    );
}

#[tokio::test]
async fn grpcio_reproduction_unmarked_passes_through_once() {
    let server = grpcio_or_skip!("always");
    let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
    let channel = loopback::channel(addr).await;
    let mut grpc = loopback::client(channel.clone(), Policy::default());
    let (result, report, _) = loopback::unary(&mut grpc, false).await;
    assert_eq!(result.unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(grpcio_calls(channel).await, 1);
    assert_eq!(report, None);
}

#[tokio::test]
async fn grpcio_reproduction_with_max_attempts_1_stops_on_resource_exhausted() {
    let server = grpcio_or_skip!("always");
    let addr = SocketAddr::from(([127, 0, 0, 1], server.port));
    let channel = loopback::channel(addr).await;
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut grpc = loopback::client(channel.clone(), policy);
    let (result, report, _) = loopback::unary(&mut grpc, true).await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "x");
    assert_eq!(grpcio_calls(channel).await, 1);
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(report.last_status, Some(429));
}

/// The peek marks a head it rewrote with an extension: no header of this
/// project's own reaches the caller.
fn no_header_of_ours(headers: &http::HeaderMap) -> bool {
    headers
        .keys()
        .all(|name| !name.as_str().starts_with("retry-budget"))
}
