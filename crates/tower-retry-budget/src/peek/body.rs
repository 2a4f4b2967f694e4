//! [`PeekBody`]: the caller's body, with what the peek took out of it put
//! back in front, byte for byte, and the report corrected when a gRPC
//! stream fails after data.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::late::Watch;

/// The frames the peek took, in order: a first data frame on its own, so
/// that a peek of one data frame (gRPC, or a JSON body in one piece)
/// allocates nothing; the rest, and a first frame of trailers, boxed, so
/// that the body moved through the call stays small (a trailers frame is
/// a whole header table).
pub(super) struct Held<D> {
    first: Option<D>,
    // Boxed for its inline size (8 bytes, not 32), which every gRPC
    // call moves; only a JSON body of several frames, or trailers, fills it.
    #[allow(clippy::box_collection)]
    rest: Option<Box<VecDeque<Frame<D>>>>,
}

impl<D: Buf> Held<D> {
    pub(super) const fn new() -> Self {
        Self {
            first: None,
            rest: None,
        }
    }

    pub(super) fn push(&mut self, frame: Frame<D>) {
        let frame = if self.first.is_none() && self.rest.is_none() {
            match frame.into_data() {
                Ok(data) => {
                    self.first = Some(data);
                    return;
                }
                Err(frame) => frame,
            }
        } else {
            frame
        };
        self.rest.get_or_insert_with(Box::default).push_back(frame);
    }

    #[inline]
    fn pop(&mut self) -> Option<Frame<D>> {
        match self.first.take() {
            Some(data) => Some(Frame::data(data)),
            None => self.rest.as_mut()?.pop_front(),
        }
    }

    pub(super) fn len(&self) -> usize {
        let rest = self.rest.as_ref().map_or(0, |rest| rest.len());
        usize::from(self.first.is_some()).saturating_add(rest)
    }

    fn bytes(&self) -> u64 {
        let rest = self.rest.iter().flat_map(|rest| rest.iter());
        self.first
            .iter()
            .chain(rest.filter_map(Frame::data_ref))
            .map(|data| data.remaining() as u64)
            .fold(0, u64::saturating_add)
    }
}

/// How the peek left the inner body.
pub(super) enum Ended<E> {
    /// Not ended: read on after the held frames.
    No,
    /// Failed with this error, yielded after the held frames; then the
    /// inner body is read on, as it would be without the peek.
    Failed(E),
    /// Over: nothing after the held frames.
    Yes,
}

pin_project! {
    /// The response body below [`PeekLayer`](super::PeekLayer): the
    /// frames its peek took, exactly as received (a trailers frame, an
    /// error included), then the rest of the inner body. See
    /// [`PeekLayer`](super::PeekLayer).
    pub struct PeekBody<B>
    where
        B: Body,
    {
        #[pin]
        inner: B,
        held: Held<B::Data>,
        ended: Ended<B::Error>,
        watch: Option<Watch>,
    }
}

impl<B: Body> PeekBody<B> {
    /// The inner body, not peeked.
    pub(super) const fn untouched(inner: B) -> Self {
        Self {
            inner,
            held: Held::new(),
            ended: Ended::No,
            watch: None,
        }
    }

    /// The inner body after the peek took `held` from it, and how it left
    /// it; `watch`: a gRPC status is still to come after data.
    pub(super) const fn peeked(
        inner: B,
        held: Held<B::Data>,
        ended: Ended<B::Error>,
        watch: Option<Watch>,
    ) -> Self {
        Self {
            inner,
            held,
            ended,
            watch,
        }
    }
}

impl<B: Body> Body for PeekBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some(frame) = this.held.pop() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match this.ended {
            Ended::No => {}
            Ended::Yes => return Poll::Ready(None),
            Ended::Failed(_) => {
                if let Ended::Failed(error) = std::mem::replace(this.ended, Ended::No) {
                    return Poll::Ready(Some(Err(error)));
                }
            }
        }
        let frame = ready!(this.inner.poll_frame(cx));
        if this.watch.is_some() {
            match &frame {
                Some(Ok(frame)) => {
                    if let Some(trailers) = frame.trailers_ref() {
                        if let Some(watch) = this.watch.take() {
                            watch.trailers(trailers);
                        }
                    }
                }
                // Ended without trailers, or failed: no status to read.
                _ => *this.watch = None,
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        if self.held.len() > 0 {
            return false;
        }
        match self.ended {
            Ended::No => self.inner.is_end_stream(),
            Ended::Failed(_) => false,
            Ended::Yes => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.held.bytes();
        if matches!(self.ended, Ended::Yes) {
            return SizeHint::with_exact(held);
        }
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

impl<B: Body> fmt::Debug for PeekBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ended = match self.ended {
            Ended::No => "no",
            Ended::Failed(_) => "failed",
            Ended::Yes => "yes",
        };
        f.debug_struct("PeekBody")
            .field("held_frames", &self.held.len())
            .field("ended", &ended)
            .field("watching", &self.watch.is_some())
            .finish_non_exhaustive()
    }
}
