//! The error of a budgeted request: the inner service's error, kept typed,
//! or an ending with no response, always with the report.

use std::fmt;

use retry_budget::{Outcome, Report};

/// Why a request ended without a response.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind<E> {
    /// The inner service failed, while an attempt was in flight or while it
    /// was being made ready for one (`transport_error`); never retried.
    Inner(E),
    /// An attempt ran past the per-attempt cap (`attempt_timeout`); never
    /// retried.
    AttemptTimeout,
    /// The caller's cancellation token fired (`cancelled`).
    Cancelled,
    /// The action stopped before its first attempt was sent, so there is no
    /// response to return: the service had asked the client to wait longer
    /// than the action's budget allows (`held_off`, see
    /// [`HoldOff`](crate::hold_off::HoldOff)), or the quota it announced
    /// leaves no start in time (`paced`, see
    /// [`Pacing`](crate::pace::Pacing)), or the budget ran out while the first
    /// attempt waited for that hold-off or for the inner service
    /// (`budget_exhausted`), or the policy leaves no room for a first
    /// attempt. The report says which.
    NotSent,
}

/// The error of [`RetryBudget`](crate::RetryBudget).
///
/// It keeps the inner error's type (no boxing) and carries the
/// [`Report`] of the action: outcome, attempts, elapsed time and the trail,
/// whatever ended it (a readiness error included). Only requests that pass
/// through untouched (unsafe methods) carry no report.
pub struct Error<E> {
    kind: ErrorKind<E>,
    report: Option<Box<Report>>,
}

impl<E> Error<E> {
    pub(crate) fn new(kind: ErrorKind<E>, report: Option<Report>) -> Self {
        Self {
            kind,
            report: report.map(Box::new),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind<E> {
        &self.kind
    }

    /// The report of the action (absent for requests passed through).
    pub fn report(&self) -> Option<&Report> {
        self.report.as_deref()
    }

    /// The outcome, as the report says (`transport_error`,
    /// `attempt_timeout`, `cancelled`, `held_off`, `budget_exhausted`,
    /// ...). Only an inner error of a request passed through has no report:
    /// its outcome is `transport_error`.
    pub fn outcome(&self) -> Outcome {
        self.report
            .as_ref()
            .map_or(Outcome::TransportError, |report| report.outcome)
    }

    /// The inner service's error, if that is what ended the request.
    pub fn inner(&self) -> Option<&E> {
        match &self.kind {
            ErrorKind::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// Takes the inner service's error, if that is what ended the request.
    pub fn into_inner(self) -> Option<E> {
        match self.kind {
            ErrorKind::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// Whether an attempt ran past its cap.
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, ErrorKind::AttemptTimeout)
    }

    /// Whether the caller cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.kind, ErrorKind::Cancelled)
    }

    /// Whether the action stopped before sending anything.
    pub fn is_not_sent(&self) -> bool {
        matches!(self.kind, ErrorKind::NotSent)
    }
}

impl<E: fmt::Debug> fmt::Debug for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("outcome", &self.outcome())
            .field("report", &self.report)
            .finish()
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Inner(e) => write!(f, "request failed: {e}")?,
            ErrorKind::AttemptTimeout => f.write_str("attempt timed out")?,
            ErrorKind::Cancelled => f.write_str("cancelled by the caller")?,
            ErrorKind::NotSent => f.write_str("not sent: stopped before the first attempt")?,
        }
        if let Some(report) = &self.report {
            write!(
                f,
                " ({}, attempts {} / {})",
                report.outcome, report.attempts_started, report.max_attempts
            )?;
        }
        Ok(())
    }
}

impl<E> std::error::Error for Error<E>
where
    E: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().map(|e| e as _)
    }
}
