//! The [`RetryBudget`] service: decides, per request, whether it is budgeted
//! at all, and builds the response future.

#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{Action, Decision, Policy};
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::calendar::{Calendar, DateReference, SystemCalendar};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind};
use crate::future::{finished, Budgeted, ResponseFuture};
use crate::hold_off::authority_of;
use crate::layer::ClientState;
use crate::observer::{ActionId, Watch};
use crate::report_slot::ReportSlot;
use crate::request;
use crate::signal::{HttpSignal, RetrySignal};

/// Retries `429 Too Many Requests` inside a hard budget. See the
/// [crate docs](crate).
///
/// # Readiness
///
/// `poll_ready` is the inner service's. The first attempt is sent on the
/// service the caller made ready; the response future keeps a clone of it
/// and waits for *that clone's* `poll_ready` before every retry (as
/// `tower::retry` and linkerd2-proxy do), so back-pressure is respected on
/// retries too. Waiting for readiness spends budget: if the inner service is
/// not ready by the latest time at which the full cap still fits, the action
/// stops as `budget_exhausted`.
///
/// A first attempt delayed by a [hold-off](crate::HoldOff) is sent on a
/// clone too, made ready when the hold-off has passed. The service the
/// caller made ready is dropped at once (and replaced by an unready clone),
/// so nothing below (a concurrency limit's slot, say) is held while the
/// action waits.
#[derive(Debug, Clone)]
pub struct RetryBudget<S, C = SystemCalendar, G = HttpSignal> {
    inner: S,
    policy: Policy,
    calendar: C,
    dates: DateReference,
    client: ClientState,
    signal: G,
}

impl<S> RetryBudget<S> {
    /// Wraps `inner` with `policy`, the system calendar clock and dates
    /// measured against it.
    pub const fn new(inner: S, policy: Policy) -> Self {
        Self {
            inner,
            policy,
            calendar: SystemCalendar,
            dates: DateReference::LocalClock,
            client: ClientState::NONE,
            signal: HttpSignal,
        }
    }
}

impl<S, C, G> RetryBudget<S, C, G> {
    pub(crate) const fn from_parts(
        inner: S,
        policy: Policy,
        calendar: C,
        dates: DateReference,
        client: ClientState,
        signal: G,
    ) -> Self {
        Self {
            inner,
            policy,
            calendar,
            dates,
            client,
            signal,
        }
    }

    /// The policy.
    pub const fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, C: Clone, G: Clone> RetryBudget<S, C, G> {
    /// The state a budgeted request carries, with this service's settings.
    #[allow(clippy::too_many_arguments)] // gone with the state machine rewrite
    fn budgeted<B, R>(
        &self,
        action: Action,
        clock: Clock,
        service: S,
        template: Option<Request<B>>,
        hold_off: Option<(crate::HoldOff, String)>,
        slot: Option<ReportSlot>,
        watch: Option<Watch>,
    ) -> Budgeted<S, B, C, G, R> {
        Budgeted {
            action,
            clock,
            service,
            template,
            calendar: self.calendar.clone(),
            dates: self.dates,
            last_response: None,
            budget: self.client.budget.clone(),
            hold_off,
            signal: self.signal.clone(),
            slot,
            watch,
        }
    }
}

impl<S, C, G, B, ResB> Service<Request<B>> for RetryBudget<S, C, G>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: Clone,
    C: Calendar + Clone,
    G: RetrySignal + Clone,
{
    type Response = Response<ResB>;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S, B, C, G>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::new(crate::error::ErrorKind::Inner(e), None))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !request::may_retry(&request) {
            // Not retryable: no copy, no timer, no report.
            return ResponseFuture::passthrough(self.inner.call(request));
        }
        let cancelled = request
            .extensions()
            .get::<CancellationToken>()
            .cloned()
            .map(CancellationToken::cancelled_owned);
        let slot = request.extensions().get::<ReportSlot>().cloned();
        let watch = self
            .client
            .observer
            .as_ref()
            .map(|observer| observer.watch(request.extensions().get::<ActionId>().copied()));
        let mut action = match &self.client.seeds {
            Some(seeds) => Action::with_seed(self.policy, seeds.next()),
            None => Action::new(self.policy),
        };
        let clock = Clock::start();
        let hold_off = self
            .client
            .hold_off
            .as_ref()
            .and_then(|map| authority_of(&request).map(|key| (map.clone(), key)));
        let held_until = hold_off.as_ref().and_then(|(map, key)| map.until(key));
        if let Some(until) = held_until {
            // The service asked the client to wait: the core decides whether
            // the first attempt waits or is never sent.
            let wait = clock.since(until);
            let decision =
                crate::trace::step(&mut action, Duration::ZERO, watch.as_ref(), |a, now| {
                    a.hold_off(now, wait)
                });
            match decision {
                Decision::WaitUntil(at) => {
                    // Sent later, on a clone made ready then. The service made
                    // ready now is dropped: whatever it reserved (a slot of a
                    // concurrency limit) is released during the wait.
                    let fresh = self.inner.clone();
                    drop(std::mem::replace(&mut self.inner, fresh.clone()));
                    let ctx =
                        self.budgeted(action, clock, fresh, Some(request), hold_off, slot, watch);
                    return ResponseFuture::deferred(at, cancelled, ctx);
                }
                Decision::Stop(_) => {
                    let report = action.into_report();
                    if let Some(report) = &report {
                        finished(report, slot.as_ref(), watch.as_ref());
                    }
                    return ResponseFuture::stopped(Error::new(ErrorKind::NotSent, report));
                }
                Decision::StartNow | Decision::AwaitResponse { .. } => {}
            }
        }
        // A copy only if a retry can ever follow.
        let template = (self.policy.max_attempts() > 1).then(|| request::copy(&request));
        let started = crate::trace::step(
            &mut action,
            Duration::ZERO,
            watch.as_ref(),
            Action::attempt_started,
        );
        let deadline = match started {
            Decision::AwaitResponse { deadline, .. } => deadline,
            // A validated policy always fits its first attempt.
            _ => self.policy.attempt_cap(),
        };
        if let Some(budget) = &self.client.budget {
            budget.0.deposit();
        }
        // Send on the service made ready; keep a clone for the retries.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let future = ready.call(request);
        let ctx = self.budgeted(action, clock, ready, template, hold_off, slot, watch);
        ResponseFuture::budgeted(future, deadline, cancelled, ctx)
    }
}
