//! The error of [`SingleFlight`](super::SingleFlight): shared by every
//! caller of a flight, so cheap to clone.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use tower::BoxError;

/// Why a request through [`SingleFlight`](super::SingleFlight) got no
/// response.
///
/// Every caller of one flight gets the same error: the inner service's
/// error is shared behind an [`Arc`] (read it with
/// [`service_error`](Error::service_error); with
/// [`RetryBudget`](crate::RetryBudget) inside, its report is there).
#[non_exhaustive]
pub enum Error<E> {
    /// The inner service failed.
    Service(Arc<E>),
    /// The response body is larger than the single-flight buffer: it was
    /// not shared, and no caller gets a truncated body.
    BodyTooLarge {
        /// The buffer's limit, in bytes.
        limit: usize,
        /// The status of the response that was too large.
        status: StatusCode,
    },
    /// Reading the response body failed.
    Body(Arc<BoxError>),
    /// The shared response body was not complete by the leader's deadline
    /// (the end of its attempt's reservation, or the layer's
    /// [`body_timeout`](super::SingleFlightLayer::body_timeout)): every
    /// caller of the flight gets this, at that instant, never a partial
    /// body.
    BodyTimeout {
        /// The status of the response whose body was too slow.
        status: StatusCode,
    },
}

impl<E> Error<E> {
    /// The inner service's error, if that is what ended the request.
    pub fn service_error(&self) -> Option<&E> {
        match self {
            Self::Service(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the response body exceeded the buffer.
    pub fn is_body_too_large(&self) -> bool {
        matches!(self, Self::BodyTooLarge { .. })
    }

    /// Whether the response body was not complete by the leader's deadline.
    pub fn is_body_timeout(&self) -> bool {
        matches!(self, Self::BodyTimeout { .. })
    }
}

impl<E> Clone for Error<E> {
    fn clone(&self) -> Self {
        match self {
            Self::Service(e) => Self::Service(e.clone()),
            Self::BodyTooLarge { limit, status } => Self::BodyTooLarge {
                limit: *limit,
                status: *status,
            },
            Self::Body(e) => Self::Body(e.clone()),
            Self::BodyTimeout { status } => Self::BodyTimeout { status: *status },
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Service(e) => f.debug_tuple("Service").field(e).finish(),
            Self::BodyTooLarge { limit, status } => f
                .debug_struct("BodyTooLarge")
                .field("limit", limit)
                .field("status", status)
                .finish(),
            Self::Body(e) => f.debug_tuple("Body").field(e).finish(),
            Self::BodyTimeout { status } => f
                .debug_struct("BodyTimeout")
                .field("status", status)
                .finish(),
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Service(e) => write!(f, "{e}"),
            Self::BodyTooLarge { limit, status } => write!(
                f,
                "the response ({status}) has a body larger than the single-flight limit of \
                 {limit} bytes; it was not shared (never truncated)"
            ),
            Self::Body(e) => write!(f, "reading the shared response body failed: {e}"),
            Self::BodyTimeout { status } => write!(
                f,
                "the shared response ({status}) did not finish its body by the leader's deadline"
            ),
        }
    }
}

impl<E> std::error::Error for Error<E>
where
    E: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Service(e) => Some(&**e),
            Self::BodyTooLarge { .. } | Self::BodyTimeout { .. } => None,
            Self::Body(e) => Some(&***e),
        }
    }
}
