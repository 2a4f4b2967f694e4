//! The layer *below* the retry layer: what each upstream attempt carries.
//!
//! The retry layer sends copies of one request; this layer sees each copy
//! as it goes out and
//!
//! * numbers it: `retry-budget-attempt: N` (1 for the first), the number
//!   the retry layer gives the attempt in its [`AttemptDeadline`] (plus an
//!   [`AttemptOffset`], if the request carries one);
//! * writes the time the core reserved for it (the retry layer's
//!   [`AttemptDeadline`]) into the caller's deadline header (see
//!   [`CallerDeadline`]);
//! * opens the attempt's span with the OpenTelemetry HTTP client attribute
//!   names (`http.request.method`, `url.full`, `http.request.resend_count`,
//!   `http.response.status_code`), so that an OTel subscriber shows every
//!   resend as its own client span under the action's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(test)]
use http::HeaderValue;
use http::{HeaderName, Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tower_retry_budget::AttemptDeadline;
use tracing::Span;

use super::deadline::CallerDeadline;
use crate::common::redact::logged_uri;

/// `retry-budget-attempt`: on every attempt sent upstream.
pub const ATTEMPT: HeaderName = HeaderName::from_static("retry-budget-attempt");

/// Request extension, only on a request forwarded once because it is
/// already a proxy's retry: added to the attempt number written in the
/// header, so that the request keeps the number it came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOffset(pub u32);

/// Adds [`Attempt`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptLayer;

impl<S> Layer<S> for AttemptLayer {
    type Service = Attempt<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Attempt { inner }
    }
}

/// Numbers each attempt, writes its deadline and traces it; see the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct Attempt<S> {
    inner: S,
}

impl<S, B, ResB> Service<Request<B>> for Attempt<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = AttemptFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let extensions = request.extensions();
        let reserved = extensions.get::<AttemptDeadline>().copied();
        let offset = extensions.get::<AttemptOffset>().map_or(0, |o| o.0);
        let caller = extensions.get::<CallerDeadline>().copied();
        let attempt = reserved.map_or(1, |reserved| reserved.attempt);
        if let Some(reserved) = reserved {
            let shown = reserved.attempt.saturating_add(offset);
            request
                .headers_mut()
                .insert(ATTEMPT, super::reply::count(shown));
            if let Some(caller) = caller {
                caller.write(request.headers_mut(), reserved.reservation);
            }
        }
        let span = tracing::info_span!(
            target: "retry_budget::proxy",
            "http.client.attempt",
            otel.name = %request.method(),
            otel.kind = "client",
            http.request.method = %request.method(),
            url.full = %logged_uri(request.uri()),
            http.request.resend_count = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        );
        if attempt > 1 {
            span.record("http.request.resend_count", attempt - 1);
        }
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        AttemptFuture { future, span }
    }
}

pin_project! {
    /// The future of one attempt, polled inside its span.
    pub struct AttemptFuture<F> {
        #[pin]
        future: F,
        span: Span,
    }
}

impl<F, ResB, E> Future for AttemptFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let output = std::task::ready!(this.future.poll(cx));
        if let Ok(response) = &output {
            this.span
                .record("http.response.status_code", response.status().as_u16());
        }
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use tower::ServiceExt;

    /// The retry layer's numbering of attempt `attempt`.
    fn numbered(attempt: u32) -> AttemptDeadline {
        AttemptDeadline {
            attempt,
            reservation: std::time::Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn attempts_are_numbered_as_the_retry_layer_numbers_them_and_the_offset_is_kept() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let upstream = tower::service_fn(move |req: Request<()>| {
            s.lock()
                .unwrap()
                .push(req.headers()[&ATTEMPT].to_str().unwrap().to_owned());
            async { Ok::<_, Infallible>(Response::new(())) }
        });
        let service = AttemptLayer.layer(upstream);
        for attempt in [1, 2] {
            let mut request = Request::new(());
            request.extensions_mut().insert(numbered(attempt));
            service.clone().oneshot(request).await.unwrap();
        }
        let mut again = Request::new(());
        again.extensions_mut().insert(numbered(1));
        again.extensions_mut().insert(AttemptOffset(2));
        service.oneshot(again).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), ["1", "2", "3"]);
    }

    #[tokio::test]
    async fn the_deadline_header_is_the_reservation_the_retry_layer_gave() {
        use super::super::deadline::{Allowed, GRPC_TIMEOUT};
        use std::time::Duration;

        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let upstream = tower::service_fn(move |req: Request<()>| {
            let value = req.headers().get(GRPC_TIMEOUT).cloned();
            s.lock().unwrap().push(value);
            async { Ok::<_, Infallible>(Response::new(())) }
        });
        let service = AttemptLayer.layer(upstream);
        let caller = CallerDeadline {
            allowed: Allowed {
                time: Duration::from_secs(10),
                grpc: true,
                envoy: false,
            },
        };
        let mut request = Request::new(());
        request.extensions_mut().insert(caller);
        request.extensions_mut().insert(AttemptDeadline {
            attempt: 2,
            reservation: Duration::from_secs(3),
        });
        service.clone().oneshot(request).await.unwrap();
        // Without the retry layer's reservation, the caller's header is
        // forwarded as it came.
        let mut request = Request::new(());
        request
            .headers_mut()
            .insert(GRPC_TIMEOUT, HeaderValue::from_static("10S"));
        request.extensions_mut().insert(caller);
        service.oneshot(request).await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [
                Some(HeaderValue::from_static("3000000u")),
                Some(HeaderValue::from_static("10S"))
            ]
        );
    }

    /// The fields of every span, by span id, as a subscriber sees them.
    #[derive(Clone, Default)]
    struct Spans(Arc<Mutex<Vec<Recorded>>>);

    /// A span's id, name and fields.
    type Recorded = (u64, String, Vec<(String, String)>);

    struct Fields<'a>(&'a mut Vec<(String, String)>);

    impl tracing::field::Visit for Fields<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            self.0.push((field.name().to_owned(), value.to_owned()));
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            id: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let mut fields = Vec::new();
            attrs.record(&mut Fields(&mut fields));
            let name = attrs.metadata().name().to_owned();
            self.0.lock().unwrap().push((id.into_u64(), name, fields));
        }

        fn on_record(
            &self,
            id: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let mut spans = self.0.lock().unwrap();
            if let Some((_, _, fields)) = spans.iter_mut().find(|(i, _, _)| *i == id.into_u64()) {
                values.record(&mut Fields(fields));
            }
        }
    }

    #[tokio::test]
    async fn each_attempt_is_a_span_with_the_otel_http_client_names() {
        use tracing_subscriber::layer::SubscriberExt;

        let spans = Spans::default();
        let _guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
        let calls = Arc::new(AtomicU32::new(0));
        let upstream = tower::service_fn(move |_: Request<()>| {
            let status = if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                429
            } else {
                200
            };
            async move {
                let mut response = Response::new(());
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        let service = AttemptLayer.layer(upstream);
        for attempt in [1, 2] {
            let mut request = Request::get("http://u:p@127.0.0.1:9/x?token=t")
                .body(())
                .unwrap();
            request.extensions_mut().insert(numbered(attempt));
            service.clone().oneshot(request).await.unwrap();
        }

        let spans = spans.0.lock().unwrap();
        assert_eq!(spans.len(), 2);
        for (i, (_, name, fields)) in spans.iter().enumerate() {
            assert_eq!(name, "http.client.attempt");
            let field = |key: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
            };
            assert_eq!(field("http.request.method"), Some("GET"));
            assert_eq!(
                field("url.full"),
                Some("http://127.0.0.1:9/x?token=REDACTED")
            );
            assert_eq!(field("otel.kind"), Some("client"));
            assert_eq!(field("http.response.status_code"), Some(["429", "200"][i]));
            // Set on resends only, as OpenTelemetry asks.
            assert_eq!(field("http.request.resend_count"), [None, Some("1")][i]);
        }
    }
}
