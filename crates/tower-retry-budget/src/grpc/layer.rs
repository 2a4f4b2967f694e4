//! [`GrpcTrailersLayer`]: the configuration-free layer.

use tower::Layer;

use super::GrpcTrailers;

/// Applies [`GrpcTrailers`]: place it **below**
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer) (closer to the channel),
/// with [`GrpcSignal`](crate::response_signal::GrpcSignal).
///
/// [`GrpcTrailersLayer`]: a gRPC status that comes in trailers, seen by the
/// retry layer and never contradicted by its report.
///
/// # Why
///
/// The retry layer decides on a response's head, and [`GrpcSignal`](crate::response_signal::GrpcSignal) reads
/// `grpc-status` there: that is where a *Trailers-Only* answer puts it. But a
/// server that sends its initial metadata before failing (any handler that
/// sets response headers, or a streaming-capable path) answers with a head
/// (`200`, no `grpc-status`), then a trailers frame with the status, and no
/// message in between. Read from the head alone, that call is a plain `200`:
/// a RESOURCE_EXHAUSTED is not retried, and the report says `success` while
/// tonic returns `Err(ResourceExhausted)`.
///
/// Like linkerd2-proxy's `PeekTrailersBody`, this layer reads the **first
/// body frame** of such an answer before handing the response up:
///
/// | the answer | what the layer does |
/// |---|---|
/// | not gRPC (`content-type` not `application/grpc`, `+...` or `;...`), not `200`, or a head with `grpc-status` (Trailers-Only) | nothing: the response is passed on untouched, no frame is read |
/// | a call the retry layer does not budget (a `POST` not marked [`Idempotent`](crate::Idempotent)) | nothing |
/// | head, then trailers with a non-OK `grpc-status` and no message | the head becomes the Trailers-Only head the server could have sent: every trailer field is appended to it (and an extension of the layer's own marks it, so that no server can claim it), so [`GrpcSignal`](crate::response_signal::GrpcSignal) reads it as usual (RESOURCE_EXHAUSTED → `429` with the pushback, a negative pushback → not retryable) and the trail says `..., in trailers after initial metadata`. The body still yields those exact trailers. |
/// | head, then trailers with `grpc-status: 0` (or none), no message | the head is unchanged; the body yields the trailers |
/// | head, then a message | peeking stops: the response is passed on (nothing is retried once data has been seen); the message is yielded first |
///
/// Placed **below** [`RetryBudgetLayer`](crate::RetryBudgetLayer), the peek is
/// part of the attempt: the attempt's deadline bounds it, and a first frame
/// that does not come in time ends the attempt as `attempt_timeout`, like a
/// head that does not come.
///
/// # What `success` means for gRPC
///
/// The report is made when the head (or, with this layer, the first frame)
/// arrives. `success` then means: the service **began an answer** with no
/// error status, so nothing was left to retry. For a unary call, whose
/// message and status come together, that is the call's result. For a
/// streaming answer, the final `grpc-status` comes after the messages, when
/// the response has long been returned: when it is not OK, the body corrects
/// the report in the request's [`ReportSlot`](crate::ReportSlot) as the core
/// rules ([`Report::status_after_data`](retry_budget::Report::status_after_data)):
/// outcome `not_retryable`, last status the HTTP equivalent, and a
/// [`StatusAfterData`](retry_budget::trail::EventKind::StatusAfterData) event in the
/// trail. So a `ReportSlot` read after the stream ended never says `success`
/// for a call that failed. The layer's [`Observer`](crate::observer::Observer), if
/// any, is told too: the `StatusAfterData` event, then the corrected report
/// (a second `on_report` for the same [`ActionId`](crate::observer::ActionId)), with or
/// without a slot. (The copy in the response's extensions was taken when the
/// response was returned and is not updated.)
///
/// # Cost
///
/// On a budgeted gRPC answer, one more poll of the body before the response
/// is returned, and the frame held in [`PeekBody`](crate::grpc::PeekBody); no allocation on the OK
/// path (the report is cloned only to correct it), except with an observer
/// and no caller's slot: then an answer whose first frame is a message gets
/// a slot of its own and a copy of the report, so that a late status can be
/// told. HTTP responses pay a `content-type` check.
///
/// # Example
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// use bytes::Bytes;
/// use http::HeaderMap;
/// use http_body_util::{BodyExt, Empty, Full};
/// use retry_budget::{Outcome, Policy};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::{response_signal::GrpcSignal, grpc::GrpcTrailersLayer, Idempotent, ReportSlot, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A server that sends its initial metadata, then fails with
/// // RESOURCE_EXHAUSTED in the trailers (pushback 1 s) the first time.
/// let calls = Arc::new(AtomicU32::new(0));
/// let server = service_fn(move |_req: http::Request<()>| {
///     let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
///     let mut trailers = HeaderMap::new();
///     let body = if first {
///         trailers.insert("grpc-status", "8".parse().unwrap());
///         trailers.insert("grpc-retry-pushback-ms", "1000".parse().unwrap());
///         Empty::new().with_trailers(async { Some(Ok(trailers)) }).boxed_unsync()
///     } else {
///         trailers.insert("grpc-status", "0".parse().unwrap());
///         Full::new(Bytes::from_static(b"\0\0\0\0\x01*"))
///             .with_trailers(async { Some(Ok(trailers)) })
///             .boxed_unsync()
///     };
///     let response = http::Response::builder()
///         .header("content-type", "application/grpc")
///         .body(body)
///         .unwrap();
///     async move { Ok::<_, Infallible>(response) }
/// });
///
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
///     .layer(GrpcTrailersLayer::new()) // below the retry layer
///     .service(server);
///
/// let slot = ReportSlot::new();
/// let mut request = http::Request::post("http://svc/pkg.Svc/Get").body(()).unwrap();
/// request.extensions_mut().insert(Idempotent);
/// request.extensions_mut().insert(slot.clone());
/// let response = client.oneshot(request).await.unwrap();
/// let trailers = response.into_body().collect().await.unwrap().trailers().cloned().unwrap();
/// assert_eq!(trailers["grpc-status"], "0");
///
/// let report = slot.take().unwrap();
/// assert_eq!(report.outcome, Outcome::Success);
/// assert_eq!(report.attempts_started, 2);
/// assert_eq!(report.starts()[1].as_secs(), 1); // after the pushback
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcTrailersLayer;

impl GrpcTrailersLayer {
    /// The layer.
    pub const fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for GrpcTrailersLayer {
    type Service = GrpcTrailers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcTrailers::new(inner)
    }
}
