//! [`Error`]: how a budgeted request ended without a response, with its
//! report, and reqwest's error as its source.

use std::fmt;

use retry_budget::{Outcome, Report};
use tower_retry_budget::ErrorKind;

/// The error of a request [`RetryBudgetMiddleware`](crate::RetryBudgetMiddleware)
/// budgeted, inside `reqwest_middleware::Error::Middleware`: the layer's
/// [`Error`](tower_retry_budget::Error), whose [`source`] is reqwest's
/// error (or the error of a middleware after this one).
///
/// [`Error::of`] finds it in a `reqwest_middleware::Error`:
///
/// ```
/// use reqwest_retry_budget::Error;
///
/// fn outcome(error: &reqwest_middleware::Error) -> Option<String> {
///     Error::of(error).map(|e| e.outcome().to_string())
/// }
/// # let _ = outcome;
/// ```
///
/// A request the layer does not budget (a write not marked
/// [`Idempotent`](tower_retry_budget::Idempotent)) fails with the chain's
/// own error, untouched.
///
/// [`source`]: std::error::Error::source
pub struct Error(tower_retry_budget::Error<reqwest_middleware::Error>);

impl Error {
    pub(crate) fn new(error: tower_retry_budget::Error<reqwest_middleware::Error>) -> Self {
        Self(error)
    }

    /// The budget's error inside `error`, if the middleware ended it.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&Self> {
        match error {
            reqwest_middleware::Error::Middleware(error) => error.downcast_ref(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }

    /// What went wrong: the chain's error (a transport error:
    /// `transport_error`), an attempt past its cap, the caller's token, or
    /// nothing sent.
    pub fn kind(&self) -> &ErrorKind<reqwest_middleware::Error> {
        self.0.kind()
    }

    /// The report of the action.
    pub fn report(&self) -> Option<&Report> {
        self.0.report()
    }

    /// The outcome, as the report says.
    pub fn outcome(&self) -> Outcome {
        self.0.outcome()
    }

    /// The chain's error (reqwest's, or a later middleware's), if that is
    /// what ended the request.
    pub fn inner(&self) -> Option<&reqwest_middleware::Error> {
        self.0.inner()
    }

    /// Takes the chain's error, if that is what ended the request.
    pub fn into_inner(self) -> Option<reqwest_middleware::Error> {
        self.0.into_inner()
    }

    /// Whether an attempt ran past its cap (`attempt_timeout`).
    pub fn is_timeout(&self) -> bool {
        self.0.is_timeout()
    }

    /// Whether the caller's cancellation token fired (`cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Whether the action stopped before sending anything (`held_off`,
    /// `paced`, `budget_exhausted` before a first attempt).
    pub fn is_not_sent(&self) -> bool {
        self.0.is_not_sent()
    }

    /// The layer's error, with its report.
    pub fn into_layer_error(self) -> tower_retry_budget::Error<reqwest_middleware::Error> {
        self.0
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Error {
    /// reqwest's own error for a transport failure (not the
    /// `reqwest_middleware::Error` around it, which would hand on only its
    /// source), a later middleware's error as it gave it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.0.inner()? {
            reqwest_middleware::Error::Reqwest(error) => Some(error),
            reqwest_middleware::Error::Middleware(error) => Some(error.as_ref()),
        }
    }
}
