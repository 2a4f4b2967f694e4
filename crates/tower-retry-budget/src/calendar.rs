//! The calendar clock, used for one thing only: turning a `Retry-After`
//! HTTP-date into a wait, once, at receipt.
//!
//! Budgets never use it: they run on tokio's monotonic clock. The calendar is
//! injectable so that a host without a trustworthy wall clock (no NTP, a
//! freshly booted device) can say so, and an action then stops with
//! `clock_untrusted` instead of guessing.

use std::fmt;
use std::time::SystemTime;

use http::header::DATE;
use http::HeaderMap;

/// A calendar clock: `None` means "no trusted calendar time".
pub trait Calendar {
    /// The calendar time now, if it can be trusted.
    fn now(&self) -> Option<SystemTime>;
}

/// The system clock, trusted (the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemCalendar;

impl Calendar for SystemCalendar {
    fn now(&self) -> Option<SystemTime> {
        Some(SystemTime::now())
    }
}

/// No trusted calendar clock: an HTTP-date `Retry-After` stops the action
/// with `clock_untrusted`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UntrustedCalendar;

impl Calendar for UntrustedCalendar {
    fn now(&self) -> Option<SystemTime> {
        None
    }
}

/// A calendar from a function, e.g. a fixed time in tests.
#[derive(Clone, Copy)]
pub struct FnCalendar<F>(pub F);

impl<F: Fn() -> Option<SystemTime>> Calendar for FnCalendar<F> {
    fn now(&self) -> Option<SystemTime> {
        (self.0)()
    }
}

impl<F> fmt::Debug for FnCalendar<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnCalendar(..)")
    }
}

/// What an HTTP-date `Retry-After` is measured against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DateReference {
    /// The local calendar clock at receipt (the default).
    #[default]
    LocalClock,
    /// The response's own `Date` header: the server's clock, the same clock
    /// that wrote the `Retry-After` date, so local clock skew cancels out.
    /// Use it when the local clock may be wrong (containers, devices without
    /// NTP) and the upstream is a single origin whose `Date` you trust. It
    /// errs long, never short: the delay is counted from receipt, after the
    /// response spent some time on the wire. A response without a valid
    /// `Date` falls back to the local calendar clock.
    ResponseDate,
}

impl DateReference {
    pub(crate) fn reading(
        self,
        calendar: &(impl Calendar + ?Sized),
        headers: &HeaderMap,
    ) -> Option<SystemTime> {
        if self == Self::ResponseDate {
            let server = headers
                .get(DATE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| httpdate::parse_http_date(v).ok());
            if server.is_some() {
                return server;
            }
        }
        calendar.now()
    }
}
