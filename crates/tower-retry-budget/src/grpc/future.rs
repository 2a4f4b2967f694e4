//! [`GrpcTrailersFuture`]: the head, then (for a gRPC answer whose status is
//! still to come) its first body frame.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::Response;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;

use super::body::Listeners;
use super::head;
use super::PeekBody;

pin_project! {
    /// The response future of [`GrpcTrailers`](super::GrpcTrailers).
    pub struct GrpcTrailersFuture<F, B> {
        #[pin]
        kind: Kind<F, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B> {
        /// A call the retry layer does not budget: no look at the response.
        Passthrough {
            #[pin]
            future: F,
        },
        /// Waiting for the head.
        Head {
            #[pin]
            future: F,
            listeners: Listeners,
        },
        /// A gRPC head without `grpc-status`: reading the first frame.
        FirstFrame {
            response: Option<Response<B>>,
            listeners: Listeners,
        },
    }
}

impl<F, B> GrpcTrailersFuture<F, B> {
    pub(super) const fn passthrough(future: F) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(super) const fn peeking(future: F, listeners: Listeners) -> Self {
        Self {
            kind: Kind::Head { future, listeners },
        }
    }
}

impl<F, B, E> Future for GrpcTrailersFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Unpin,
{
    type Output = Result<Response<PeekBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        match kind.as_mut().project() {
            KindProj::Passthrough { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(PeekBody::untouched)))
            }
            KindProj::Head { future, listeners } => {
                let mut response = ready!(future.poll(cx))?;
                let ended = response.body().is_end_stream();
                let status = response.status();
                if !head::awaits_status(status, response.headers(), ended) {
                    return Poll::Ready(Ok(response.map(PeekBody::untouched)));
                }
                // The first frame is often at hand already: read it now,
                // without parking the response.
                let listeners = std::mem::take(listeners);
                match Pin::new(response.body_mut()).poll_frame(cx) {
                    Poll::Ready(first) => {
                        Poll::Ready(Ok(with_first_frame(response, first, listeners)))
                    }
                    Poll::Pending => {
                        kind.set(Kind::FirstFrame {
                            response: Some(response),
                            listeners,
                        });
                        Poll::Pending
                    }
                }
            }
            KindProj::FirstFrame {
                response,
                listeners,
            } => {
                let body = response
                    .as_mut()
                    .expect("GrpcTrailersFuture polled after completion")
                    .body_mut();
                let first = ready!(Pin::new(body).poll_frame(cx));
                let response = response
                    .take()
                    .expect("GrpcTrailersFuture polled after completion");
                let listeners = std::mem::take(listeners);
                Poll::Ready(Ok(with_first_frame(response, first, listeners)))
            }
        }
    }
}

/// The response with the frame the peek read put back in front of its body.
/// Trailers and no message: the status is known now, and the head becomes
/// its Trailers-Only form.
fn with_first_frame<B: Body>(
    mut response: Response<B>,
    first: Option<Result<Frame<B::Data>, B::Error>>,
    listeners: Listeners,
) -> Response<PeekBody<B>> {
    if let Some(trailers) = first
        .as_ref()
        .and_then(|frame| frame.as_ref().ok())
        .and_then(Frame::trailers_ref)
    {
        let (mut parts, body) = response.into_parts();
        head::to_trailers_only(&mut parts.headers, &mut parts.extensions, trailers);
        response = Response::from_parts(parts, body);
    }
    PeekBody::peeked(response, first, listeners)
}
