//! The response future of [`SingleFlight`](super::SingleFlight), and the
//! shared action behind it: the inner call, then its body read into a
//! buffer, so that every caller can get a copy.
//!
//! # The body's deadline
//!
//! The shared body is read under the leader's deadline: the end of the
//! reservation of the attempt that produced the response (its start plus
//! the per-attempt cap, read from the [`Report`] that
//! [`RetryBudget`](crate::RetryBudget) puts in the response), which the
//! core always keeps inside the action's total budget; and, if set, under
//! [`body_timeout`](super::SingleFlightLayer::body_timeout) from the
//! moment the head arrived. Whichever ends first ends the read: every
//! caller of the flight then gets [`Error::BodyTimeout`] (never a partial
//! body), at that instant. A joiner started after the leader, so the
//! leader's deadline is never later than the joiner's own would be; a slow
//! body cannot hold anyone past the leader's budget.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Request, Response, StatusCode, Version};
use http_body::Body as HttpBody;
use pin_project_lite::pin_project;
use retry_budget::Report;
use tokio::time::{Instant, Sleep};
use tower::util::Oneshot;
use tower::{BoxError, Service};

use super::body::Body;
use super::error::Error;
use super::flight::Waiter;

/// Response extension: this response came through single flight, and this
/// many callers (this one included) received it from one upstream action.
///
/// With [`RetryBudget`](crate::RetryBudget) inside, the
/// [`Report`] says so too
/// ([`shared_with`](retry_budget::Report::shared_with), and a line of its
/// visible status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Shared {
    /// Callers that received this one result, this one included (1 when no
    /// identical request was waiting).
    pub callers: usize,
}

/// A finished response, buffered: what every caller of a flight gets a
/// copy of.
#[derive(Clone)]
pub(crate) struct SharedResponse {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    extensions: http::Extensions,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

impl SharedResponse {
    fn to_response<B>(&self, callers: usize) -> Response<Body<B>> {
        let mut response = Response::new(Body::shared(self.body.clone(), self.trailers.clone()));
        *response.status_mut() = self.status;
        *response.version_mut() = self.version;
        *response.headers_mut() = self.headers.clone();
        *response.extensions_mut() = self.extensions.clone();
        let extensions = response.extensions_mut();
        if let Some(report) = extensions.get_mut::<Report>() {
            report.shared_with = u32::try_from(callers.saturating_sub(1)).unwrap_or(u32::MAX);
        }
        extensions.insert(Shared { callers });
        response
    }
}

pin_project! {
    /// The shared action: the inner call, then its body read up to the
    /// limit, before the deadline.
    pub(crate) struct Collect<F, B> {
        #[pin]
        call: Option<F>,
        #[pin]
        body: Option<B>,
        #[pin]
        deadline: Option<Sleep>,
        head: Option<http::response::Parts>,
        chunks: Vec<Bytes>,
        len: usize,
        limit: usize,
        body_timeout: Option<Duration>,
        trailers: Option<HeaderMap>,
    }
}

impl<F, B> Collect<F, B> {
    pub(crate) fn new(call: F, limit: usize, body_timeout: Option<Duration>) -> Self {
        Self {
            call: Some(call),
            body: None,
            deadline: None,
            head: None,
            chunks: Vec::new(),
            len: 0,
            limit,
            body_timeout,
            trailers: None,
        }
    }
}

/// How long the body may take after the head arrived: what is left until
/// the leader's [body deadline](Report::body_deadline) (if a report says),
/// and the layer's own body timeout (if set), whichever is shorter.
/// `None`: no deadline.
fn body_allowance(
    head: &http::response::Parts,
    body_timeout: Option<Duration>,
) -> Option<Duration> {
    let reservation = head
        .extensions
        .get::<Report>()
        .map(|report| report.body_deadline().saturating_sub(report.elapsed));
    match (reservation, body_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<F, B, E> Future for Collect<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    type Output = Result<SharedResponse, Error<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(call) = this.call.as_mut().as_pin_mut() {
            let result = ready!(call.poll(cx));
            this.call.set(None);
            let (head, body) = match result {
                Ok(response) => response.into_parts(),
                Err(error) => return Poll::Ready(Err(Error::Service(Arc::new(error)))),
            };
            let too_large = body.size_hint().lower() > *this.limit as u64;
            if too_large {
                return Poll::Ready(Err(Error::BodyTooLarge {
                    limit: *this.limit,
                    status: head.status,
                }));
            }
            // Past the runtime clock's range: no deadline ("never").
            let deadline = body_allowance(&head, *this.body_timeout)
                .and_then(|allowance| crate::clock::instant_at(Instant::now(), allowance));
            if let Some(deadline) = deadline {
                this.deadline.set(Some(tokio::time::sleep_until(deadline)));
            }
            *this.head = Some(head);
            this.body.set(Some(body));
        }
        let status = this.head.as_ref().map_or(StatusCode::OK, |h| h.status);
        while let Some(body) = this.body.as_mut().as_pin_mut() {
            let frame = match body.poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    let expired = this
                        .deadline
                        .as_mut()
                        .as_pin_mut()
                        .is_some_and(|deadline| deadline.poll(cx).is_ready());
                    if expired {
                        this.body.set(None);
                        return Poll::Ready(Err(Error::BodyTimeout { status }));
                    }
                    return Poll::Pending;
                }
            };
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(mut data) => {
                        let n = data.remaining();
                        *this.len = this.len.saturating_add(n);
                        if *this.len > *this.limit {
                            this.body.set(None);
                            return Poll::Ready(Err(Error::BodyTooLarge {
                                limit: *this.limit,
                                status,
                            }));
                        }
                        this.chunks.push(data.copy_to_bytes(n));
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            match this.trailers.as_mut() {
                                Some(known) => known.extend(trailers),
                                None => *this.trailers = Some(trailers),
                            }
                        }
                    }
                },
                Some(Err(error)) => {
                    this.body.set(None);
                    return Poll::Ready(Err(Error::Body(Arc::new(error.into()))));
                }
                None => this.body.set(None),
            }
        }
        let head = this
            .head
            .take()
            .expect("single-flight action polled after completion");
        let body = match this.chunks.len() {
            0 => Bytes::new(),
            1 => this.chunks.pop().unwrap_or_default(),
            _ => {
                let mut all = BytesMut::with_capacity(*this.len);
                for chunk in this.chunks.drain(..) {
                    all.extend_from_slice(&chunk);
                }
                all.freeze()
            }
        };
        Poll::Ready(Ok(SharedResponse {
            status: head.status,
            version: head.version,
            headers: head.headers,
            extensions: head.extensions,
            body,
            trailers: this.trailers.take(),
        }))
    }
}

/// The shared action of a request to `S`.
pub(crate) type SharedAction<S, ReqB, ResB> = Collect<Oneshot<S, Request<ReqB>>, ResB>;

pin_project! {
    /// The response future of [`SingleFlight`](super::SingleFlight).
    pub struct ResponseFuture<S, ReqB, ResB>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>>,
        ResB: HttpBody,
        ResB::Error: Into<BoxError>,
    {
        #[pin]
        kind: Kind<S, ReqB, ResB>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, ReqB, ResB>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>>,
        ResB: HttpBody,
        ResB::Error: Into<BoxError>,
    {
        /// Not coalesced: the inner call, untouched but for the body type.
        Passthrough {
            #[pin]
            call: Oneshot<S, Request<ReqB>>,
        },
        /// One of the callers of a shared action.
        Flight {
            waiter: Waiter<SharedAction<S, ReqB, ResB>>,
        },
    }
}

impl<S, ReqB, ResB> ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: HttpBody,
    ResB::Error: Into<BoxError>,
{
    pub(crate) fn passthrough(call: Oneshot<S, Request<ReqB>>) -> Self {
        Self {
            kind: Kind::Passthrough { call },
        }
    }

    pub(crate) fn flight(waiter: Waiter<SharedAction<S, ReqB, ResB>>) -> Self {
        Self {
            kind: Kind::Flight { waiter },
        }
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: HttpBody,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<Body<ResB>>, Error<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passthrough { call } => Poll::Ready(match ready!(call.poll(cx)) {
                Ok(response) => Ok(response.map(Body::streaming)),
                Err(error) => Err(Error::Service(Arc::new(error))),
            }),
            KindProj::Flight { waiter } => {
                let (output, callers) = ready!(waiter.poll(cx));
                Poll::Ready(output.map(|shared| shared.to_response(callers)))
            }
        }
    }
}

impl<S, ReqB, ResB> std::fmt::Debug for ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: HttpBody,
    ResB::Error: Into<BoxError>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("single_flight::ResponseFuture")
    }
}
