//! The upstream's response body as relayed to the caller: a bound on the
//! time between its frames (`--body-idle-timeout`), and one report of how
//! it ended, which the log line and the metrics carry.
//!
//! Hand-written: hyper's client has no read timeout on a response body
//! (only on the connection's I/O as a whole), and no crate reports how a
//! relayed body ended. A timed-out or broken body ends in an error, so
//! hyper cuts the caller's response off (HTTP/1: the connection is closed
//! before the body's end; HTTP/2: the stream is reset) instead of letting
//! it look complete.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower_retry_budget::peek::PeekBody;

use super::metrics::Metrics;

/// How a relayed body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every byte, to the upstream's end of the body.
    Complete,
    /// The upstream's body broke off (its connection closed or failed
    /// before the end).
    Truncated,
    /// The upstream sent nothing for `--body-idle-timeout`.
    TimedOut,
    /// The caller went away (or the drain ended) before the end.
    CallerGone,
}

impl Ending {
    /// The `snake_case` name (log field and metric label).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Truncated => "truncated",
            Self::TimedOut => "timed_out",
            Self::CallerGone => "caller_gone",
        }
    }
}

/// The error that cuts off a body the upstream left idle.
#[derive(Debug, Clone, Copy)]
pub struct IdleTimeout(pub Duration);

impl std::fmt::Display for IdleTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the upstream sent no part of the response body for {:?}",
            self.0
        )
    }
}

impl std::error::Error for IdleTimeout {}

/// What is told, once, how the body ended: boxed by its maker (so that
/// a box it already has can be handed over as is).
pub trait OnEnd: Send {
    /// Told how the body ended.
    fn end(self: Box<Self>, ending: Ending);
}

/// Tells its [`OnEnd`] once: with the ending given, or with
/// [`Ending::CallerGone`] if dropped first.
struct EndOnce(Option<Box<dyn OnEnd>>);

impl EndOnce {
    fn end(&mut self, ending: Ending) {
        if let Some(on_end) = self.0.take() {
            on_end.end(ending);
        }
    }
}

impl Drop for EndOnce {
    fn drop(&mut self) {
        self.end(Ending::CallerGone);
    }
}

pin_project! {
    /// An upstream response body with an idle timeout; see the
    /// [module docs](self).
    pub struct RelayBody {
        #[pin]
        inner: PeekBody<Incoming>,
        idle: Duration,
        // Armed when the upstream has nothing to give, disarmed by each
        // frame; made the first time it is needed (a body that is always
        // ready never needs one).
        timer: Option<Pin<Box<Sleep>>>,
        armed: bool,
        end: EndOnce,
    }
}

impl RelayBody {
    /// Relays `inner`; `on_end` is told how it ended.
    pub fn new(inner: PeekBody<Incoming>, idle: Duration, on_end: Box<dyn OnEnd>) -> Self {
        let mut end = EndOnce(Some(on_end));
        if inner.is_end_stream() {
            // No body at all (HEAD, 204, 304, an empty one): hyper may not
            // poll it.
            end.end(Ending::Complete);
        }
        Self {
            inner,
            idle,
            timer: None,
            armed: false,
            end,
        }
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                *this.armed = false;
                if this.inner.is_end_stream() {
                    this.end.end(Ending::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                tracing::debug!(
                    target: "retry_budget::proxy",
                    "the upstream's response body broke off: {error}"
                );
                this.end.end(Ending::Truncated);
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(None) => {
                this.end.end(Ending::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => {
                if idle_over(this.timer, this.armed, *this.idle, cx) {
                    tracing::debug!(
                        target: "retry_budget::proxy",
                        "the upstream's response body was idle for {:?}: cut off",
                        this.idle
                    );
                    this.end.end(Ending::TimedOut);
                    return Poll::Ready(Some(Err(Box::new(IdleTimeout(*this.idle)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether the upstream, which has nothing to give, has now left the body
/// idle for `idle`: the timer is armed at the first of these calls after a
/// frame (counted from the moment the upstream has nothing to give, not
/// from the last frame: time the caller took to read is not the
/// upstream's), then polled.
fn idle_over(
    timer: &mut Option<Pin<Box<Sleep>>>,
    armed: &mut bool,
    idle: Duration,
    cx: &mut Context<'_>,
) -> bool {
    if !*armed {
        *armed = true;
        // Through the saturating mapping: a bound past tokio's clock (a
        // huge `--body-idle-timeout`) is never reached, and arms no timer.
        match (
            timer.as_mut(),
            tower_retry_budget::instant_at(Instant::now(), idle),
        ) {
            (Some(timer), Some(deadline)) => timer.as_mut().reset(deadline),
            (None, Some(deadline)) => {
                *timer = Some(Box::pin(tokio::time::sleep_until(deadline)));
            }
            (_, None) => *timer = None,
        }
    }
    timer
        .as_mut()
        .is_some_and(|timer| timer.as_mut().poll(cx).is_ready())
}

/// The caller's request body broke (malformed chunked framing, a stream
/// reset, a connection closed before the end).
#[derive(Debug, Clone)]
pub struct BrokenBody(String);

impl std::fmt::Display for BrokenBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the caller's request body broke off: {}", self.0)
    }
}

impl std::error::Error for BrokenBody {}

/// Set once the caller's body broke, with what a break does; shared by
/// the handler and the body (one allocation for both).
pub type BrokeFlag = Arc<Broke>;

/// Why the caller's body broke, once it has; and what its break does
/// once: the action, by its id, counted as the caller's fault in the
/// metrics, and cancelled (a retry cannot mend the caller's body).
#[derive(Debug)]
pub struct Broke {
    broken: OnceLock<BrokenBody>,
    metrics: Metrics,
    id: u64,
    cancel: CancellationToken,
}

impl Broke {
    /// Not broken (yet): the action `id`'s, cancelled by `cancel`.
    pub fn new(metrics: Metrics, id: u64, cancel: CancellationToken) -> Self {
        Self {
            broken: OnceLock::new(),
            metrics,
            id,
            cancel,
        }
    }

    /// Why the body broke, if it did.
    pub fn get(&self) -> Option<&BrokenBody> {
        self.broken.get()
    }

    /// The body broke: the first time, counted and cancelled.
    fn set(&self, broken: BrokenBody) {
        if self.broken.set(broken).is_ok() {
            self.metrics.caller_body_broke(self.id);
            self.cancel.cancel();
        }
    }
}

/// The caller's request body on its way upstream. Once it fails it keeps
/// failing (so no copy sent later can end early and look complete), and
/// its [`Broke`] says why and acts once. A body already at its end when
/// the action starts (a GET's) has nothing left to read and cannot break:
/// it is let go at once and needs no [`Broke`].
pub enum CallerBody {
    /// Still to be read.
    Reading {
        /// The caller's body.
        inner: Incoming,
        /// Set if it breaks.
        broke: BrokeFlag,
    },
    /// At its end.
    Ended,
}

impl std::fmt::Debug for CallerBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Reading { broke, .. } => f
                .debug_struct("CallerBody")
                .field("broke", &broke.get())
                .finish_non_exhaustive(),
            Self::Ended => f.write_str("CallerBody::Ended"),
        }
    }
}

impl CallerBody {
    /// Wraps the caller's body, whose break `broke` is told.
    pub fn new(inner: Incoming, broke: BrokeFlag) -> Self {
        Self::Reading { inner, broke }
    }
}

impl Body for CallerBody {
    type Data = Bytes;
    type Error = BrokenBody;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Self::Reading { inner, broke } = &mut *self else {
            return Poll::Ready(None);
        };
        if let Some(broken) = broke.get() {
            return Poll::Ready(Some(Err(broken.clone())));
        }
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => {
                tracing::debug!(
                    target: "retry_budget::proxy",
                    "the caller's request body broke off: {error}"
                );
                let broken = BrokenBody(error.to_string());
                broke.set(broken.clone());
                Poll::Ready(Some(Err(broken)))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Reading { inner, broke } => broke.get().is_none() && inner.is_end_stream(),
            Self::Ended => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Reading { inner, .. } => inner.size_hint(),
            Self::Ended => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A caller body at its end is one: nothing to read, no size, and
    /// read to its end, no frame and no error.
    #[tokio::test]
    async fn an_ended_caller_body_reads_as_empty() {
        let body = CallerBody::Ended;
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        let collected = body.collect().await.unwrap();
        assert!(collected.to_bytes().is_empty());
    }
}
