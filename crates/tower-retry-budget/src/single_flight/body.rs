//! The response body of [`SingleFlight`](super::SingleFlight): the inner
//! body untouched for requests that are not coalesced, or the buffered bytes
//! (and trailers) of a shared response.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response from [`SingleFlight`](super::SingleFlight).
    ///
    /// Its data is [`Bytes`] (the inner body's chunks are turned into
    /// `Bytes` without a copy when they already are `Bytes`).
    pub struct Body<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Streaming {
            #[pin]
            body: B,
        },
        Shared {
            data: Option<Bytes>,
            trailers: Option<HeaderMap>,
        },
    }
}

impl<B> Body<B> {
    pub(crate) fn streaming(body: B) -> Self {
        Self {
            kind: Kind::Streaming { body },
        }
    }

    pub(crate) fn shared(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            kind: Kind::Shared {
                data: (!data.is_empty()).then_some(data),
                trailers,
            },
        }
    }

    /// Whether this body is the buffered copy of a shared response.
    pub fn is_shared(&self) -> bool {
        matches!(self.kind, Kind::Shared { .. })
    }
}

impl<B> std::fmt::Debug for Body<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Streaming { .. } => f.write_str("Body::Streaming(..)"),
            Kind::Shared { data, trailers } => f
                .debug_struct("Body::Shared")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .field("trailers", &trailers.is_some())
                .finish(),
        }
    }
}

impl<B> http_body::Body for Body<B>
where
    B: http_body::Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Streaming { body } => body.poll_frame(cx).map(|frame| {
                frame.map(|frame| frame.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining()))))
            }),
            KindProj::Shared { data, trailers } => {
                if let Some(data) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Streaming { body } => body.is_end_stream(),
            Kind::Shared { data, trailers } => data.is_none() && trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Streaming { body } => body.size_hint(),
            Kind::Shared { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
