//! A [`tower::retry::Policy`] over the same core, for users who compose
//! [`tower::retry::Retry`] themselves.
//!
//! Prefer [`RetryBudgetLayer`](crate::RetryBudgetLayer): `tower::retry`
//! gives a policy less control than the rule needs, and this adapter says
//! exactly where:
//!
//! * **No per-attempt deadline.** `Retry` has no timer around an attempt. Put
//!   `tower::timeout::TimeoutLayer` (with the same cap) *inside* `Retry`; its
//!   error then ends the action as `transport_error`, not `attempt_timeout`.
//! * **No stop after the wait.** Once the wait future returned by
//!   [`retry`](tower::retry::Policy::retry) completes, `Retry` sends the copy
//!   unconditionally. A timer that fires late is still re-checked and
//!   recorded (the report then says `budget_exhausted` at the wake), but the
//!   copy is sent all the same.
//! * **One extra copy.** `Retry` asks the policy about a result only when it
//!   holds a copy of the request, so even the last attempt is copied (the
//!   layer copies only for retries that can follow).
//! * **No cancellation token, no report on errors.** Dropping the future
//!   still stops everything; the [`Report`](retry_budget::Report) is put in
//!   the final response's extensions only.
//! * **No client-wide state.** The client budget, the hold-off map and
//!   jitter seeds are the layer's
//!   ([`RetryBudgetLayer::client_budget`](crate::RetryBudgetLayer::client_budget),
//!   [`hold_off`](crate::RetryBudgetLayer::hold_off),
//!   [`jitter_seed`](crate::RetryBudgetLayer::jitter_seed)); here jitter
//!   from the policy still applies, seeded at random per request.
//!
//! ```
//! use tower::ServiceBuilder;
//! use tower_retry_budget::{tower_policy::BudgetPolicy, Policy};
//!
//! # let client = tower::service_fn(|_: http::Request<String>| async {
//! #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//! # });
//! let client = ServiceBuilder::new()
//!     .retry(BudgetPolicy::new(Policy::default()))
//!     .service(client);
//! # let _ = client;
//! ```

#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{Action, Decision, Policy};
use tokio::time::Sleep;

use crate::calendar::{Calendar, DateReference, SystemCalendar};
use crate::clock::Clock;
use crate::request;
use crate::response_signal::{HttpSignal, RetrySignal};

/// The retry-budget rule as a [`tower::retry::Policy`].
#[derive(Clone)]
pub struct BudgetPolicy {
    /// Shared with every action it starts.
    policy: Arc<Policy>,
    /// The calendar clock for HTTP-dates; `None`: the system's.
    calendar: Option<Arc<dyn Calendar + Send + Sync>>,
    dates: DateReference,
    run: Option<Run>,
}

impl fmt::Debug for BudgetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetPolicy")
            .field("policy", &self.policy)
            .field(
                "calendar",
                &self.calendar.as_ref().map_or("system", |_| "custom"),
            )
            .field("dates", &self.dates)
            .field("run", &self.run)
            .finish()
    }
}

/// The state of one request's action (in the policy copy `Retry` keeps per
/// request).
#[derive(Debug, Clone)]
struct Run {
    action: Action,
    clock: Clock,
    waiting: bool,
    /// Whether a subscriber wants the trail's events (read once, at the
    /// start).
    traced: bool,
}

impl Run {
    fn step(&mut self, input: impl FnOnce(&mut Action, Duration) -> Decision) -> Decision {
        let now = self.clock.elapsed();
        crate::trace::step(&mut self.action, now, self.traced, |_| {}, input)
    }
}

impl BudgetPolicy {
    /// A policy with the system calendar clock.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy: Arc::new(policy),
            calendar: None,
            dates: DateReference::LocalClock,
            run: None,
        }
    }

    /// Uses another calendar clock for HTTP-date `Retry-After` values (read
    /// only when a response carries a date).
    pub fn calendar(mut self, calendar: impl Calendar + Send + Sync + 'static) -> Self {
        self.calendar = Some(Arc::new(calendar));
        self
    }

    /// Chooses what an HTTP-date is measured against.
    pub const fn dates(mut self, dates: DateReference) -> Self {
        self.dates = dates;
        self
    }
}

impl<B, ResB, E> tower::retry::Policy<Request<B>, Response<ResB>, E> for BudgetPolicy
where
    B: Clone,
{
    type Future = Sleep;

    fn retry(
        &mut self,
        _request: &mut Request<B>,
        result: &mut Result<Response<ResB>, E>,
    ) -> Option<Self::Future> {
        let run = self.run.as_mut()?;
        let decision = match result {
            Ok(response) => {
                // Read as the layer reads a response with its default
                // signal (the status and `Retry-After`); the calendar is
                // read only when the core needs it (a date, alone or among
                // repeated values).
                let headers = response.headers();
                let signal = HttpSignal.read(response.status(), headers, response.extensions());
                let (calendar, dates) = (&self.calendar, &self.dates);
                let mut retry_after = None;
                let answer = signal.answer(
                    &mut retry_after,
                    || match calendar {
                        None => dates.reading(&SystemCalendar, headers),
                        Some(calendar) => dates.reading(calendar.as_ref(), headers),
                    },
                    None,
                );
                run.step(|action, now| action.respond(now, answer))
            }
            Err(_) => run.step(|action, now| action.transport_failed(now)),
        };
        if let Decision::WaitUntil(until) = decision {
            run.waiting = true;
            return Some(tokio::time::sleep_until(run.clock.at_or_far(until)));
        }
        if let (Ok(response), Some(report)) = (result, run.action.report()) {
            response.extensions_mut().insert(report);
        }
        None
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        // A policy of one attempt never retries: nothing to copy.
        if !request::may_retry(request) || self.policy.max_attempts() < 2 {
            return None;
        }
        match &mut self.run {
            Some(run) if run.waiting => {
                // `Retry` waited and polled readiness: the retry is sent now.
                run.waiting = false;
                run.step(|action, now| action.timer_woke(now));
                run.step(|action, now| action.attempt_started(now));
                // `Retry` calls the policy on a result only if it holds a
                // copy, so the last attempt is copied too: without it, its
                // response would carry no report.
                Some(request::copy(request))
            }
            _ => {
                // A new request: a new action, and a new budget.
                let mut run = Run {
                    action: Action::new(self.policy.clone()),
                    clock: Clock::start(),
                    waiting: false,
                    traced: crate::trace::listening(),
                };
                run.step(|action, now| action.attempt_started(now));
                self.run = Some(run);
                Some(request::copy(request))
            }
        }
    }
}
