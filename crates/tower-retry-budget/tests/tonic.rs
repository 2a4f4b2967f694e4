//! tonic end to end, in real time, on loopback: a tonic `Channel` wrapped in
//! `ReplayBodyLayer` → `RetryBudgetLayer::signal(GrpcSignal)` → a map back
//! to `tonic::body::Body`, under `tonic::client::Grpc`, calling a real tonic
//! server. No `protoc`: the codec (raw bytes) and the server service (what
//! tonic's codegen would write: a `Service<http::Request<Body>>` +
//! `NamedService` over `tonic::server::Grpc::unary`) are written by hand.
//!
//! Where the report is: on an OK call, in `tonic::Response::extensions()`;
//! on a call that ends with a non-OK `grpc-status`, tonic hands back a
//! `tonic::Status`, which keeps no extensions, so the tests read it from a
//! `ReportSlot` put in the request's extensions (it works for both).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use retry_budget::{
    trail::{EventKind, WaitBasis},
    Outcome, Policy, Report,
};
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower::{Service, ServiceBuilder};
use tower_retry_budget::{
    body_replay::{ReplayBody, ReplayBodyLayer},
    idempotent_paths::IdempotentPathsLayer,
    response_signal::GrpcSignal,
    Idempotent, ReportSlot, RetryBudgetLayer,
};

#[path = "support/raw_codec.rs"]
mod raw_codec;
use raw_codec::RawCodec;

// ---- the server: what codegen would produce, by hand ----------------------

/// How the server answers the n-th call (0-based) of a method.
#[derive(Debug, Clone)]
enum Answer {
    /// OK, echoing the message.
    Ok,
    /// A status (Trailers-Only), with `grpc-retry-pushback-ms` if given.
    Status(Code, Option<&'static str>),
    /// A bare HTTP status with `Retry-After`, as an intermediary would send.
    Http(u16, &'static str),
}

/// One call the server received.
#[derive(Debug, Clone)]
struct Call {
    path: String,
    at: Instant,
    message_len: usize,
}

#[derive(Clone)]
struct Catalog {
    script: Arc<dyn Fn(usize) -> Answer + Send + Sync>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl NamedService for Catalog {
    const NAME: &'static str = "test.Catalog";
}

impl Service<http::Request<Body>> for Catalog {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let path = req.uri().path().to_owned();
        if !path.starts_with("/test.Catalog/") {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let n = self
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.path == path)
            .count();
        let answer = (self.script)(n);
        let calls = self.calls.clone();
        if let Answer::Http(status, retry_after) = answer {
            calls.lock().unwrap().push(Call {
                path,
                at: Instant::now(),
                message_len: 0,
            });
            let res = http::Response::builder()
                .status(status)
                .header("retry-after", retry_after)
                .body(Body::empty())
                .unwrap();
            return Box::pin(async move { Ok(res) });
        }
        // The unary handler, as codegen wraps the user's trait method.
        let handler = tower::service_fn(move |request: tonic::Request<Bytes>| {
            let message = request.into_inner();
            calls.lock().unwrap().push(Call {
                path: path.clone(),
                at: Instant::now(),
                message_len: message.len(),
            });
            let answer = answer.clone();
            async move {
                match answer {
                    Answer::Ok => Ok(tonic::Response::new(message)),
                    Answer::Status(code, pushback) => {
                        let mut metadata = MetadataMap::new();
                        if let Some(ms) = pushback {
                            metadata.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
                        }
                        Err(Status::with_metadata(code, "slow down", metadata))
                    }
                    Answer::Http(..) => unreachable!(),
                }
            }
        });
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            Ok(grpc.unary(handler, req).await)
        })
    }
}

/// Serves the catalog on loopback; returns its address and its call log.
async fn serve(
    script: impl Fn(usize) -> Answer + Send + Sync + 'static,
) -> (SocketAddr, Arc<Mutex<Vec<Call>>>) {
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

// ---- the client: the composition under test -------------------------------

fn to_tonic_body(req: http::Request<ReplayBody<Body>>) -> http::Request<Body> {
    req.map(Body::new)
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Calls `path` once through the stack; `mark` marks the call as safe to
/// repeat. Returns the result, the report (from the slot) and the elapsed
/// time.
async fn call<T>(
    grpc: &mut tonic::client::Grpc<T>,
    path: &'static str,
    message: Bytes,
    mark: bool,
) -> (
    Result<tonic::Response<Bytes>, Status>,
    Option<Report>,
    Duration,
)
where
    T: tonic::client::GrpcService<Body, ResponseBody = Body>,
{
    let slot = ReportSlot::new();
    let mut request = tonic::Request::new(message);
    if mark {
        request.extensions_mut().insert(Idempotent);
    }
    request.extensions_mut().insert(slot.clone());
    if let Err(error) = grpc.ready().await {
        let error: Box<dyn std::error::Error + Send + Sync> = error.into();
        panic!("not ready: {error}");
    }
    let started = Instant::now();
    let result = grpc
        .unary(request, PathAndQuery::from_static(path), RawCodec)
        .await;
    (result, slot.take(), started.elapsed())
}

fn calls_to(calls: &Mutex<Vec<Call>>, path: &str) -> Vec<Call> {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.path == path)
        .cloned()
        .collect()
}

const GET: &str = "/test.Catalog/Get";
const BUY: &str = "/test.Catalog/Buy";

macro_rules! stack {
    ($channel:expr) => {
        stack!($channel, ReplayBodyLayer::new())
    };
    ($channel:expr, $replay:expr) => {
        tonic::client::Grpc::new(
            ServiceBuilder::new()
                .layer($replay)
                .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
                .map_request(to_tonic_body as fn(_) -> _)
                .service($channel),
        )
    };
}

#[tokio::test]
async fn resource_exhausted_with_pushback_1000_ms_is_retried_once_after_at_least_a_second() {
    let (addr, calls) = serve(|n| match n {
        0 => Answer::Status(Code::ResourceExhausted, Some("1000")),
        _ => Answer::Ok,
    })
    .await;
    let mut grpc = stack!(channel(addr).await);
    let (result, slot, elapsed) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), true).await;

    let response = result.expect("OK after one retry");
    assert_eq!(response.get_ref(), &Bytes::from_static(b"item-7"));
    let got = calls_to(&calls, GET);
    assert_eq!(got.len(), 2, "exactly one retry");
    let gap = got[1].at - got[0].at;
    eprintln!(
        "RESOURCE_EXHAUSTED (pushback 1000 ms) -> retried after {gap:?}, call took {elapsed:?}"
    );
    // Never sooner than the server asked (no upper bound on wall time: a
    // loaded machine may wake late; the exact instants are paused-time
    // tests' business).
    assert!(gap >= Duration::from_millis(1000), "retried after {gap:?}");
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");

    // The report is in the tonic response's extensions on an OK call...
    let report = response
        .extensions()
        .get::<Report>()
        .expect("report")
        .clone();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert_eq!(report.last_status, Some(200));
    // The pushback was the server's delay; the last response (OK) asked
    // for none, so the report's server_requested_wait is None.
    assert!(report.events.iter().any(|e| matches!(
        e.kind,
        EventKind::WaitPlanned { basis: WaitBasis::Server { requested }, .. }
            if requested == Duration::from_millis(1000)
    )));
    assert_eq!(report.server_requested_wait, None);
    // ...and in the slot, the same.
    assert_eq!(slot.as_ref(), Some(&report));
    // The trail says where the 429 and its delay came from.
    let translated: Vec<_> = report
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Translated { from, .. } => Some(from.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        translated,
        ["grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000"]
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

#[tokio::test]
async fn a_method_not_marked_safe_is_called_once() {
    let (addr, calls) = serve(|_| Answer::Status(Code::ResourceExhausted, Some("1000"))).await;
    let mut grpc = stack!(channel(addr).await);
    let (result, report, _) = call(&mut grpc, BUY, Bytes::from_static(b"order-1"), false).await;

    let status = result.expect_err("RESOURCE_EXHAUSTED reaches the caller");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1000"
    );
    assert_eq!(
        calls_to(&calls, BUY).len(),
        1,
        "a POST not marked safe is never retried"
    );
    // Passed through untouched: no budget, so no report.
    assert_eq!(report, None);
}

#[tokio::test]
async fn a_method_on_the_allow_list_is_retried_without_marking_each_call() {
    let (addr, calls) = serve(|n| match n {
        0 => Answer::Status(Code::ResourceExhausted, Some("0")),
        _ => Answer::Ok,
    })
    .await;
    let mut grpc = tonic::client::Grpc::new(
        ServiceBuilder::new()
            .layer(IdempotentPathsLayer::new([GET]))
            .layer(ReplayBodyLayer::new())
            .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
            .map_request(to_tonic_body as fn(_) -> _)
            .service(channel(addr).await),
    );
    let (get, report, _) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), false).await;
    assert!(get.is_ok());
    assert_eq!(calls_to(&calls, GET).len(), 2);
    // Pushback 0 ms: the core's 1 s floor still applies.
    let report = report.unwrap();
    assert_eq!(report.waits().len(), 1);
    let (from, to) = report.waits()[0];
    assert!(to - from >= Duration::from_secs(1), "{:?}", to - from);

    let (buy, report, _) = call(&mut grpc, BUY, Bytes::from_static(b"order-1"), false).await;
    assert_eq!(buy.unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(calls_to(&calls, BUY).len(), 1);
    assert_eq!(report, None);
}

#[tokio::test]
async fn a_request_body_over_the_replay_limit_is_called_once_and_the_report_says_why() {
    let (addr, calls) = serve(|_| Answer::Status(Code::ResourceExhausted, Some("1000"))).await;
    let mut grpc = stack!(channel(addr).await, ReplayBodyLayer::new().limit(256));
    let message = Bytes::from(vec![7u8; 4096]);
    let (result, report, _) = call(&mut grpc, GET, message, true).await;

    assert_eq!(result.unwrap_err().code(), Code::ResourceExhausted);
    let got = calls_to(&calls, GET);
    assert_eq!(got.len(), 1, "never sent twice");
    assert_eq!(got[0].message_len, 4096, "never truncated");
    let report = report.expect("a budgeted call has a report");
    assert_eq!(report.outcome, Outcome::NotReplayable);
    assert_eq!(report.attempts_started, 1);
    assert_eq!(report.last_status, Some(429));
    assert!(
        report.to_string().starts_with(
            "Stopped: the request body is larger than the replay limit, so it cannot be sent again."
        ),
        "{report}"
    );
    assert!(report.waits().is_empty(), "no wait");
}

#[tokio::test]
async fn a_negative_or_malformed_pushback_is_not_retried() {
    for pushback in ["-1", "soon", "1.5"] {
        let (addr, calls) =
            serve(move |_| Answer::Status(Code::ResourceExhausted, Some(pushback))).await;
        let mut grpc = stack!(channel(addr).await);
        let (result, report, _) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), true).await;

        assert_eq!(
            result.unwrap_err().code(),
            Code::ResourceExhausted,
            "{pushback}"
        );
        assert_eq!(calls_to(&calls, GET).len(), 1, "{pushback}");
        let report = report.unwrap();
        assert_eq!(report.outcome, Outcome::NotRetryable, "{pushback}");
        assert_eq!(report.last_status, Some(429));
        assert!(report
            .events
            .iter()
            .any(|e| matches!(e.kind, EventKind::RetryForbidden { attempt: 1 })));
        assert!(
            report
                .to_string()
                .starts_with("Stopped: the service asked not to retry this request."),
            "{report}"
        );
        assert!(report.waits().is_empty(), "no wait");
    }
}

#[tokio::test]
async fn other_grpc_statuses_are_not_retried() {
    let (addr, calls) = serve(|_| Answer::Status(Code::Unavailable, Some("0"))).await;
    let mut grpc = stack!(channel(addr).await);
    let (result, report, _) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), true).await;
    assert_eq!(result.unwrap_err().code(), Code::Unavailable);
    assert_eq!(calls_to(&calls, GET).len(), 1);
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::NotRetryable);
    // UNAVAILABLE's HTTP equivalent.
    assert_eq!(report.last_status, Some(503));
}

#[tokio::test]
async fn an_intermediarys_http_429_is_retried_as_usual() {
    let (addr, calls) = serve(|n| match n {
        0 => Answer::Http(429, "1"),
        _ => Answer::Ok,
    })
    .await;
    let mut grpc = stack!(channel(addr).await);
    let (result, report, elapsed) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), true).await;
    assert!(result.is_ok());
    assert_eq!(calls_to(&calls, GET).len(), 2);
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert!(!report
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Translated { .. })));
}

#[tokio::test]
async fn a_transport_failure_keeps_the_layer_error_and_its_report_as_the_status_source() {
    // A port nobody listens on.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut grpc = stack!(channel);
    let (result, slot, _) = call(&mut grpc, GET, Bytes::from_static(b"item-7"), true).await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let error = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<tower_retry_budget::Error<tonic::transport::Error>>())
        .expect("the layer's error is the status's source");
    assert_eq!(error.outcome(), Outcome::TransportError);
    let report = error.report().expect("with its report");
    assert_eq!(report.attempts_started, 1);
    assert_eq!(slot.as_ref(), Some(report));
}

/// tonic needs the stack's error to be `Into<BoxError>`: the layer's error
/// is `std::error::Error + Send + Sync + 'static` when the inner one is.
#[test]
fn the_layer_error_is_a_boxable_error() {
    fn boxable<E: std::error::Error + Send + Sync + 'static>() {}
    boxable::<tower_retry_budget::Error<tonic::transport::Error>>();
}
