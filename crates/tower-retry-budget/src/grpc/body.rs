//! [`PeekBody`]: the caller's body, with the frame the peek read first put
//! back in front, and the report corrected when a stream fails after data.
#![deny(clippy::arithmetic_side_effects)] // time is saturating here too

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http::{Extensions, HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::observer::{self, Observed};
use crate::report_slot::{LateReport, ReportSlot};
use crate::response_signal::{GrpcSignal, RetrySignal};

/// What the peek took out of the inner body.
enum Held<B: Body> {
    /// Nothing: the inner body is read as is.
    Nothing,
    /// The first frame (or error), to be yielded before the inner body.
    Frame(Result<Frame<B::Data>, B::Error>),
    /// The inner body already ended.
    End,
}

/// Who hears of a status that comes after data: the caller's slot and the
/// layer's observer, as the attempt request carried them.
#[derive(Debug, Default)]
pub(super) struct Listeners {
    slot: Option<ReportSlot>,
    observer: Option<Observed>,
}

impl Listeners {
    /// The listeners an attempt request carries.
    pub(super) fn of(extensions: &Extensions) -> Self {
        Self {
            slot: extensions.get::<ReportSlot>().cloned(),
            observer: extensions.get::<Observed>().cloned(),
        }
    }

    /// Starts watching for a late status, if anyone listens. The report to
    /// correct is the one in the caller's slot; with an observer and no
    /// slot, one the retry layer fills when it returns the response (asked
    /// for in the response's `extensions`).
    fn watch(self, extensions: &mut Extensions) -> Option<Watch> {
        let slot = match self.slot {
            Some(slot) => slot,
            None => {
                self.observer.as_ref()?;
                let slot = ReportSlot::new();
                extensions.insert(LateReport(slot.clone()));
                slot
            }
        };
        Some(Watch {
            slot,
            observer: self.observer.map(|Observed(watch)| watch),
        })
    }
}

/// After data, the call's status comes in the trailers: a non-OK one
/// corrects the report in the slot and is told to the observer.
#[derive(Debug)]
struct Watch {
    slot: ReportSlot,
    observer: Option<observer::Watch>,
}

impl Watch {
    fn trailers(self, trailers: &HeaderMap) {
        let signal = GrpcSignal.read(StatusCode::OK, trailers, &http::Extensions::new());
        if signal.status() == StatusCode::OK.as_u16() {
            return;
        }
        // Only a budgeted call that has stopped has a report to correct.
        let Some(mut report) = self.slot.get() else {
            return;
        };
        // On the action's own clock: elapsed since the origin the retry
        // layer gave with the report (without one, its stop is the latest
        // time known).
        let origin = self.slot.origin();
        let at = origin.map_or(report.elapsed, crate::clock::elapsed_since);
        let from = format!(
            "{}, in trailers after data",
            signal.translation().unwrap_or("grpc-status")
        );
        let seen = report.events.len();
        // The core decides what the late status changes.
        if report.status_after_data(at, signal.status(), from) {
            let traced = crate::trace::listening();
            let observer = self.observer.as_ref();
            crate::trace::told(&report.events, seen, traced, |event| {
                if let Some(observer) = observer {
                    observer.event(event);
                }
            });
            if let Some(observer) = &self.observer {
                observer.report(&report);
            }
            self.slot.fill(report, origin);
        }
    }
}

pin_project! {
    /// The response body below [`GrpcTrailersLayer`](super::GrpcTrailersLayer):
    /// the inner body, with the frame the peek read yielded first (a
    /// trailers frame is yielded exactly as received). See
    /// [`GrpcTrailersLayer`](super::GrpcTrailersLayer).
    pub struct PeekBody<B>
    where
        B: Body,
    {
        #[pin]
        inner: B,
        held: Held<B>,
        watch: Option<Watch>,
    }
}

impl<B: Body> PeekBody<B> {
    /// The inner body, not peeked.
    pub(super) const fn untouched(inner: B) -> Self {
        Self {
            inner,
            held: Held::Nothing,
            watch: None,
        }
    }

    /// The response's body after the peek read `first` from it (`None`:
    /// the body ended). A data frame first starts watching for a late
    /// status, if anyone listens.
    pub(super) fn peeked(
        response: http::Response<B>,
        first: Option<Result<Frame<B::Data>, B::Error>>,
        listeners: Listeners,
    ) -> http::Response<Self> {
        let (mut head, inner) = response.into_parts();
        let watch = match &first {
            Some(Ok(frame)) if frame.is_data() => listeners.watch(&mut head.extensions),
            _ => None,
        };
        let body = Self {
            inner,
            held: first.map_or(Held::End, Held::Frame),
            watch,
        };
        http::Response::from_parts(head, body)
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
        match this.held {
            Held::Nothing => {}
            Held::End => return Poll::Ready(None),
            Held::Frame(_) => {
                if let Held::Frame(first) = std::mem::replace(this.held, Held::Nothing) {
                    return Poll::Ready(Some(first));
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
        match self.held {
            Held::Nothing => self.inner.is_end_stream(),
            Held::Frame(_) => false,
            Held::End => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.held {
            Held::Nothing => self.inner.size_hint(),
            Held::End => SizeHint::with_exact(0),
            Held::Frame(first) => {
                let held = first
                    .as_ref()
                    .ok()
                    .and_then(Frame::data_ref)
                    .map_or(0, |data| data.remaining() as u64);
                let inner = self.inner.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(held));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(held));
                }
                hint
            }
        }
    }
}

impl<B: Body> fmt::Debug for PeekBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = match &self.held {
            Held::Nothing => "nothing",
            Held::Frame(Ok(frame)) if frame.is_trailers() => "trailers",
            Held::Frame(Ok(_)) => "data",
            Held::Frame(Err(_)) => "error",
            Held::End => "end",
        };
        f.debug_struct("PeekBody")
            .field("held", &held)
            .field("watching", &self.watch.is_some())
            .finish_non_exhaustive()
    }
}
