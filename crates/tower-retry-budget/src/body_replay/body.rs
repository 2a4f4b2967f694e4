//! The [`ReplayBody`] itself.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The default replay limit: 64 KiB.
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// State shared by a body and all its clones.
struct Shared<B> {
    /// The inner body, until it has ended.
    inner: Option<B>,
    /// What was read so far, while it can still be replayed.
    buffered: Vec<Bytes>,
    buffered_len: usize,
    trailers: Option<HeaderMap>,
    /// The inner body has ended (every frame is buffered).
    complete: bool,
    /// More than `limit` bytes were read: no copy can be replayed.
    over_limit: bool,
    limit: usize,
}

/// A request body that can be cloned for a retry. See
/// [`ReplayBodyLayer`](crate::body_replay::ReplayBodyLayer).
///
/// The original and every clone follow one rule, whichever is read first
/// and in whatever order: each has its own position in what was buffered,
/// sends what is buffered past it, and only when it has caught up with the
/// buffer reads on from the inner body itself (adding what it reads to the
/// buffer). So a request kept aside while its copies were sent still sends
/// every byte when it is finally sent.
pub struct ReplayBody<B> {
    kept: Kept<B>,
    /// This copy's position: the next buffered chunk to send.
    next_chunk: usize,
    trailers_sent: bool,
    /// Whether this copy has read from the inner body itself. Past the
    /// replay limit the buffer is dropped: only a copy that was reading
    /// goes on; any other can no longer be sent in full.
    reading: bool,
}

/// What a [`ReplayBody`] keeps of its inner body.
enum Kept<B> {
    /// The state shared by the body and all its copies.
    Shared(Arc<Mutex<Shared<B>>>),
    /// An inner body that had already ended when it was wrapped: let go at
    /// once, as one read to its end is; the body and every copy end at
    /// once, and nothing is shared.
    Ended,
}

/// A handle on a [`ReplayBody`]'s state, put in the request extensions by
/// [`ReplayBodyService`](crate::body_replay::ReplayBodyService) so that the retry layer
/// can tell whether the body can still be replayed.
#[derive(Clone)]
pub struct ReplayHandle {
    check: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl ReplayHandle {
    /// Whether a copy of the body can still be sent in full.
    pub fn is_replayable(&self) -> bool {
        (self.check)()
    }
}

impl fmt::Debug for ReplayHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayHandle")
            .field("replayable", &self.is_replayable())
            .finish()
    }
}

/// The error of a [`ReplayBody`].
#[derive(Debug)]
pub enum ReplayError<E> {
    /// The inner body failed.
    Inner(E),
    /// A copy was polled although the body went over the replay limit (the
    /// retry layer never sends such a copy).
    NotReplayable,
}

impl<E: fmt::Display> fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inner(e) => write!(f, "request body failed: {e}"),
            Self::NotReplayable => f.write_str(
                "the request body is larger than the replay limit and cannot be sent again",
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ReplayError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Inner(e) => Some(e),
            Self::NotReplayable => None,
        }
    }
}

impl<B> ReplayBody<B> {
    /// Wraps `body`, keeping up to `limit` bytes for replay.
    pub fn new(body: B, limit: usize) -> Self {
        Self::keeping(Kept::Shared(Arc::new(Mutex::new(Shared {
            inner: Some(body),
            buffered: Vec::new(),
            buffered_len: 0,
            trailers: None,
            complete: false,
            over_limit: false,
            limit,
        }))))
    }

    /// Wraps `body`, which has already ended (`is_end_stream`): nothing to
    /// keep, and no state to share with the copies. The body is dropped
    /// here, as it would be once read to its end.
    pub(crate) fn ended(body: B) -> Self {
        drop(body);
        Self::keeping(Kept::Ended)
    }

    /// A body at its start keeping `kept`.
    const fn keeping(kept: Kept<B>) -> Self {
        Self {
            kept,
            next_chunk: 0,
            trailers_sent: false,
            reading: false,
        }
    }

    /// The shared state, locked (`None`: an inner body that had ended).
    fn lock(&self) -> Option<MutexGuard<'_, Shared<B>>> {
        match &self.kept {
            Kept::Shared(shared) => Some(lock(shared)),
            Kept::Ended => None,
        }
    }

    /// Whether a copy of this body can still be sent in full.
    pub fn is_replayable(&self) -> bool {
        self.lock().is_none_or(|shared| !shared.over_limit)
    }

    /// A handle that answers [`is_replayable`](Self::is_replayable) later.
    pub fn handle(&self) -> ReplayHandle
    where
        B: Send + 'static,
    {
        let check: Arc<dyn Fn() -> bool + Send + Sync> = match &self.kept {
            Kept::Shared(shared) => {
                let shared = Arc::downgrade(shared);
                Arc::new(move || shared.upgrade().is_some_and(|s| !lock(&s).over_limit))
            }
            Kept::Ended => Arc::new(|| true),
        };
        ReplayHandle { check }
    }
}

/// `shared`, locked. A panic while holding the lock cannot leave the state
/// half updated in a way that matters more than the panic itself.
fn lock<B>(shared: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A frame just read from the inner body, as the copy that read it sends
/// it: its data kept for the copies while under the limit (the reader's
/// position moved past it), its trailers kept as the last frame (`None`:
/// a frame kind this version of http-body does not know).
fn keep<B, D: Buf>(
    shared: &mut Shared<B>,
    frame: Frame<D>,
    next_chunk: &mut usize,
    trailers_sent: &mut bool,
) -> Option<Frame<Bytes>> {
    let frame = match frame.into_data() {
        Ok(mut data) => {
            let bytes = data.copy_to_bytes(data.remaining());
            if !shared.over_limit {
                if shared.buffered_len + bytes.len() > shared.limit {
                    // Too large to replay: keep nothing, let this one
                    // attempt go through.
                    shared.over_limit = true;
                    shared.buffered = Vec::new();
                    shared.buffered_len = 0;
                } else {
                    shared.buffered_len += bytes.len();
                    shared.buffered.push(bytes.clone());
                    *next_chunk = shared.buffered.len();
                }
            }
            Frame::data(bytes)
        }
        Err(frame) => match frame.into_trailers() {
            Ok(trailers) => {
                // Trailers are the last frame.
                shared.trailers = Some(trailers.clone());
                shared.complete = true;
                shared.inner = None;
                *trailers_sent = true;
                Frame::trailers(trailers)
            }
            // A frame kind this version of http-body does not know.
            Err(_) => return None,
        },
    };
    Some(frame)
}

impl<B> Clone for ReplayBody<B> {
    /// A copy that replays from the start.
    fn clone(&self) -> Self {
        Self::keeping(match &self.kept {
            Kept::Shared(shared) => Kept::Shared(shared.clone()),
            Kept::Ended => Kept::Ended,
        })
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(shared) = self.lock() else {
            // Nothing kept: the inner body had ended when wrapped.
            return f.debug_struct("ReplayBody").field("ended", &true).finish();
        };
        f.debug_struct("ReplayBody")
            .field("buffered_len", &shared.buffered_len)
            .field("complete", &shared.complete)
            .field("over_limit", &shared.over_limit)
            .field("limit", &shared.limit)
            .finish()
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body + Unpin,
    B::Data: Buf,
{
    type Data = Bytes;
    type Error = ReplayError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Kept::Shared(shared) = &this.kept else {
            return Poll::Ready(None);
        };
        let mut shared = lock(shared);
        if shared.over_limit {
            if !this.reading {
                return Poll::Ready(Some(Err(ReplayError::NotReplayable)));
            }
        } else {
            // What was buffered past this copy's position comes first.
            if let Some(chunk) = shared.buffered.get(this.next_chunk) {
                this.next_chunk += 1;
                return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
            }
        }
        if shared.complete {
            if !this.trailers_sent {
                this.trailers_sent = true;
                if let Some(trailers) = shared.trailers.clone() {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
            return Poll::Ready(None);
        }
        // Caught up with the buffer: read on from the inner body.
        let Some(inner) = shared.inner.as_mut() else {
            return Poll::Ready(None);
        };
        this.reading = true;
        let frame = match Pin::new(inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                shared.complete = true;
                shared.inner = None;
                this.trailers_sent = true;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(ReplayError::Inner(e)))),
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        let (next_chunk, trailers_sent) = (&mut this.next_chunk, &mut this.trailers_sent);
        Poll::Ready(keep(&mut shared, frame, next_chunk, trailers_sent).map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        let Some(shared) = self.lock() else {
            return true;
        };
        if shared.over_limit {
            // Only a copy that was reading goes on (see `poll_frame`).
            return self.reading && shared.inner.as_ref().is_none_or(|b| b.is_end_stream());
        }
        if self.next_chunk < shared.buffered.len() {
            return false;
        }
        if shared.complete {
            return self.trailers_sent || shared.trailers.is_none();
        }
        shared.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let Some(shared) = self.lock() else {
            return SizeHint::with_exact(0);
        };
        if shared.over_limit {
            return match (&shared.inner, self.reading) {
                (Some(inner), true) => inner.size_hint(),
                _ => SizeHint::default(),
            };
        }
        let buffered: u64 = shared.buffered[self.next_chunk.min(shared.buffered.len())..]
            .iter()
            .map(|b| b.len() as u64)
            .sum();
        match &shared.inner {
            None => SizeHint::with_exact(buffered),
            Some(inner) => {
                let rest = inner.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(buffered));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(buffered));
                }
                hint
            }
        }
    }
}
