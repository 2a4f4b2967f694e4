//! The final response's body, read inside the action's budget.
//!
//! The action includes its body: a `200` that dribbles a byte a second, or
//! a chunked body that never ends, must not keep the command running after
//! the budget. The body is read under the deadline of the attempt that
//! produced it: that attempt's reservation end, never past the total
//! budget, as the core's report answers it
//! ([`retry_budget::Report::body_deadline`]), and mapped to the tokio clock
//! once by the layer's own saturating mapping
//! ([`tower_retry_budget::instant_at`]: beyond the clock's range is
//! "never").
//!
//! The copy itself is tokio's [`tokio::io::copy`] from the body (as a
//! [`StreamReader`] over http-body-util's `BodyDataStream`) to the output,
//! inside [`tokio::time::timeout_at`]. tower-http's `TimeoutBody` is not
//! used: it bounds the idle time between two frames, so a body dribbling
//! one byte a second would never trip it; the rule here is one total
//! deadline. A write error (stdout closed by `| head`) stops the copy at
//! once, so nothing more is fetched.
//!
//! Every ending has a name ([`BodyEnd`]) that the JSON report carries under
//! `body`, and an exit status ([`BodyEnd::exit`]).

use std::error::Error as StdError;
use std::fmt;
use std::io;

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyDataStream, BodyExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::io::{InspectWriter, StreamReader};
use tokio_util::sync::CancellationToken;

use crate::common::exit::Exit;

/// How the reading of the final response's body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Read to its end.
    Complete,
    /// Cut short by the server or the connection (e.g. fewer bytes than
    /// its `Content-Length`, or a broken chunked encoding).
    Truncated,
    /// Not read to the end within the deadline.
    TimedOut,
    /// Not read at all (`--json` without `--output`, or no response).
    NotRead,
    /// The output failed (stdout closed): reading stopped at once.
    WriteFailed,
    /// The user left while it was being read.
    Cancelled,
}

impl BodyEnd {
    /// The `snake_case` name used in the JSON report.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Truncated => "truncated",
            Self::TimedOut => "timed_out",
            Self::NotRead => "not_read",
            Self::WriteFailed => "write_failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// The exit status this ending forces, if any (see [`crate::common::exit`]).
    pub const fn exit(self) -> Option<Exit> {
        match self {
            Self::Truncated => Some(Exit::BodyCutShort),
            Self::TimedOut => Some(Exit::BodyTimedOut),
            Self::WriteFailed => Some(Exit::WriteFailed),
            Self::Complete | Self::NotRead | Self::Cancelled => None,
        }
    }
}

impl fmt::Display for BodyEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What reading the body did.
#[derive(Debug)]
pub struct BodyRead {
    /// How it ended.
    pub end: BodyEnd,
    /// Bytes handed to the output.
    pub bytes: u64,
    /// The read or write error, on one line, if one ended it.
    pub error: Option<String>,
}

impl BodyRead {
    /// A body that was not read.
    pub const fn not_read() -> Self {
        Self {
            end: BodyEnd::NotRead,
            bytes: 0,
            error: None,
        }
    }

    /// The line for a person, if the body did not simply end.
    pub fn describe(&self) -> Option<String> {
        let bytes = self.bytes;
        let why = self
            .error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        match self.end {
            BodyEnd::Complete | BodyEnd::NotRead => None,
            BodyEnd::TimedOut => Some(format!(
                "The body was not read to the end within the budget: stopped after {bytes} bytes."
            )),
            BodyEnd::Truncated => Some(format!(
                "The body was cut short by the server after {bytes} bytes{why}."
            )),
            BodyEnd::WriteFailed => Some(format!(
                "The output could not be written after {bytes} bytes{why}: the body was not read further."
            )),
            BodyEnd::Cancelled => {
                Some("Interrupted while the response body was being read.".to_owned())
            }
        }
    }
}

/// A body read error, told apart from the output's errors after the copy.
#[derive(Debug)]
struct ReadError(Box<dyn StdError + Send + Sync>);

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for ReadError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// How long the bytes read before the body was cut short may take to reach
/// the output.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Copies `body` to `out` until it ends, `deadline` passes (`None`:
/// never), `cancel` fires, or `out` fails.
pub async fn copy<B, W>(
    body: B,
    out: &mut W,
    deadline: Option<Instant>,
    cancel: &CancellationToken,
) -> BodyRead
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    W: AsyncWrite + Unpin,
{
    let body = body.map_err(|e| io::Error::other(ReadError(e.into())));
    let mut reader = StreamReader::new(BodyDataStream::new(body));
    let mut bytes = 0u64;
    let ended = {
        let mut writer = InspectWriter::new(&mut *out, |written: &[u8]| {
            bytes += written.len() as u64;
        });
        let copy = tokio::io::copy(&mut reader, &mut writer);
        tokio::select! {
            copied = within(deadline, copy) => Some(copied),
            () = cancel.cancelled() => None,
        }
    };
    let (end, error) = match ended {
        None => (BodyEnd::Cancelled, None),
        Some(Err(_elapsed)) => (BodyEnd::TimedOut, None),
        Some(Ok(Ok(_))) => (BodyEnd::Complete, None),
        Some(Ok(Err(e))) => match e.get_ref().and_then(|e| e.downcast_ref::<ReadError>()) {
            Some(read) => (BodyEnd::Truncated, Some(crate::common::run::chain(read))),
            None => (BodyEnd::WriteFailed, Some(e.to_string())),
        },
    };
    // The bytes already handed over (and counted) reach the output (tokio's
    // copy flushed them already if the body ended). The deadline bounds
    // reading the body, not writing what was read: the flush gets a short
    // grace of its own from now, so that an output that never drains (a
    // pipe nobody reads) cannot hold the command, and a file written
    // through tokio's blocking pool is not cut one write short.
    if matches!(
        end,
        BodyEnd::Truncated | BodyEnd::TimedOut | BodyEnd::Cancelled
    ) {
        let _ = tokio::time::timeout(FLUSH_GRACE, out.flush()).await;
    }
    BodyRead { end, bytes, error }
}

/// `future`, unless `deadline` passes first.
async fn within<F: std::future::Future>(
    deadline: Option<Instant>,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, future).await,
        None => Ok(future.await),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use http_body::Frame;
    use http_body_util::Full;
    use tower_retry_budget::instant_at;

    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A body that never ends: one byte every 500 ms.
    struct Dribble(tokio::time::Interval);

    impl Body for Dribble {
        type Data = Bytes;
        type Error = io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
            self.0
                .poll_tick(cx)
                .map(|_| Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_endless_body_stops_at_the_deadline() {
        let start = Instant::now();
        let mut interval = tokio::time::interval_at(
            start + Duration::from_millis(500),
            Duration::from_millis(500),
        );
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut out = Vec::new();
        let deadline = instant_at(start, Duration::from_millis(1750));
        let read = copy(
            Dribble(interval),
            &mut out,
            deadline,
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(read.end, BodyEnd::TimedOut);
        assert_eq!(Instant::now(), start + Duration::from_millis(1750));
        // Frames at 0.5, 1.0 and 1.5 s.
        assert_eq!(read.bytes, 3);
        assert_eq!(out, b"xxx");
        assert_eq!(
            read.describe().as_deref(),
            Some("The body was not read to the end within the budget: stopped after 3 bytes.")
        );
        assert_eq!(read.end.exit(), Some(Exit::BodyTimedOut));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_stops_the_copy() {
        let cancel = CancellationToken::new();
        let fire = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(secs(1)).await;
            fire.cancel();
        });
        let start = Instant::now();
        let dribble = Dribble(tokio::time::interval_at(start + secs(5), secs(5)));
        let read = copy(dribble, &mut Vec::new(), None, &cancel).await;
        assert_eq!(read.end, BodyEnd::Cancelled);
        assert_eq!(Instant::now(), start + secs(1));
        assert_eq!(read.end.exit(), None);
    }

    #[tokio::test]
    async fn a_complete_body_is_copied() {
        let mut out = Vec::new();
        let body = Full::new(Bytes::from_static(b"hello"));
        let read = copy(body, &mut out, None, &CancellationToken::new()).await;
        assert_eq!(read.end, BodyEnd::Complete);
        assert_eq!((read.bytes, out.as_slice()), (5, &b"hello"[..]));
        assert_eq!(read.describe(), None);
    }

    #[tokio::test]
    async fn a_read_error_is_a_truncated_body_and_a_write_error_is_not() {
        let read = copy(
            FailAfterOne(false),
            &mut Vec::new(),
            None,
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(read.end, BodyEnd::Truncated);
        assert_eq!(read.bytes, 1);
        assert_eq!(read.error.as_deref(), Some("connection reset"));
        assert_eq!(read.end.exit(), Some(Exit::BodyCutShort));

        let body = Full::new(Bytes::from_static(b"hello"));
        let read = copy(body, &mut Closed, None, &CancellationToken::new()).await;
        assert_eq!(read.end, BodyEnd::WriteFailed);
        assert_eq!(read.bytes, 0);
        assert_eq!(read.end.exit(), Some(Exit::WriteFailed));
    }

    /// One byte, then a read error.
    struct FailAfterOne(bool);

    impl Body for FailAfterOne {
        type Data = Bytes;
        type Error = io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "connection reset",
                ))))
            } else {
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
            }
        }
    }

    /// An output that is closed.
    struct Closed;

    impl AsyncWrite for Closed {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
}
