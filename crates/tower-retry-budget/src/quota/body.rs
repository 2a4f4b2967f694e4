//! [`QuotaBody`]: the response body, with what the read took out of it put
//! back in front, byte for byte.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The response body below [`QuotaLayer`](super::QuotaLayer): the
    /// frames its read took, exactly as received, then the rest of the
    /// inner body.
    pub struct QuotaBody<B>
    where
        B: Body,
    {
        #[pin]
        inner: B,
        held: VecDeque<Frame<B::Data>>,
        // How the read ended, if the inner body did: `None` inside, an
        // error or the end.
        ended: Option<Option<B::Error>>,
    }
}

impl<B: Body> QuotaBody<B> {
    /// The inner body, not read.
    pub(super) const fn untouched(inner: B) -> Self {
        Self {
            inner,
            held: VecDeque::new(),
            ended: None,
        }
    }

    /// The inner body after the read took `held` from it, and how it
    /// ended if it did (`Some(None)`: the end, `Some(Some(e))`: an error).
    pub(super) fn read(
        inner: B,
        held: VecDeque<Frame<B::Data>>,
        ended: Option<Option<B::Error>>,
    ) -> Self {
        Self { inner, held, ended }
    }

    fn held_bytes(&self) -> u64 {
        self.held
            .iter()
            .filter_map(Frame::data_ref)
            .map(|data| data.remaining() as u64)
            .sum()
    }
}

impl<B: Body> Body for QuotaBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some(frame) = this.held.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match this.ended {
            None => this.inner.poll_frame(cx),
            Some(ended) => Poll::Ready(ended.take().map(Err)),
        }
    }

    fn is_end_stream(&self) -> bool {
        if !self.held.is_empty() {
            return false;
        }
        match &self.ended {
            None => self.inner.is_end_stream(),
            Some(error) => error.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.held_bytes();
        if self.ended.is_some() {
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

impl<B: Body> fmt::Debug for QuotaBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaBody")
            .field("held_frames", &self.held.len())
            .field("ended", &self.ended.as_ref().map(|e| e.is_some()))
            .finish_non_exhaustive()
    }
}
