//! **The timer lives here.** The response future of
//! [`RetryBudget`](crate::RetryBudget): a state machine driven by one
//! `loop { match state { .. } }`, as tower's retry future is.
//!
//! One [`Sleep`] serves three purposes in turn: the per-attempt deadline while
//! an attempt is in flight, the wait between attempts, and the latest start
//! while the inner service is not ready. Every decision comes from the core
//! [`Action`]; this file only tells it what happened and when (tokio's
//! monotonic clock, so paused-time tests see exact instants).
//!
//! No task is spawned. Dropping the future is the caller leaving: the attempt
//! in flight is dropped with it, and nothing continues in the background.
//!
//! What the actions of a client share is fed here too: a 429's
//! `Retry-After` goes into the [hold-off](crate::HoldOff) map, a planned
//! retry is withdrawn from the [client budget](crate::ClientBudget) (and a
//! refusal ends the action as `retry_throttled`), and a first attempt delayed
//! by a hold-off starts in the `Waiting` state.

#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use retry_budget::{Action, Decision, Report};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower::Service;

use crate::budget::SharedBudget;
use crate::calendar::{Calendar, DateReference};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind};
use crate::hold_off::HoldOff;
use crate::observer::Watch;
use crate::replay::BodyReplay;
use crate::report_slot::ReportSlot;
use crate::request;
use crate::signal::{HttpSignal, RetrySignal};

/// What the future is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// An attempt is in flight; the timer is its deadline.
    InFlight,
    /// Waiting between attempts; the timer is the earliest next start.
    Waiting,
    /// Waiting for the inner service to be ready; the timer is the latest
    /// start.
    Readying,
    /// Finished.
    Done,
}

/// Everything a budgeted request carries besides its pinned parts.
pub(crate) struct Budgeted<S, B, C, G, R> {
    pub(crate) action: Action,
    pub(crate) clock: Clock,
    pub(crate) service: S,
    /// The request to copy for the next retry; `None` once no retry can
    /// follow.
    pub(crate) template: Option<Request<B>>,
    pub(crate) calendar: C,
    pub(crate) dates: DateReference,
    /// The last retried response, held while waiting so that it can still be
    /// returned if the action stops after the wait.
    pub(crate) last_response: Option<R>,
    /// The client's shared retry budget, if any.
    pub(crate) budget: Option<SharedBudget>,
    /// The client's hold-off map and this request's key in it, if any.
    pub(crate) hold_off: Option<(HoldOff, String)>,
    /// How a response head is read.
    pub(crate) signal: G,
    /// The caller's slot for the report, if it put one in the request.
    pub(crate) slot: Option<ReportSlot>,
    /// The layer's observer and this action's id, if any.
    pub(crate) watch: Option<Watch>,
}

impl<S, B, C, G, R> Budgeted<S, B, C, G, R> {
    /// Feeds one input to the action and traces the events it added.
    fn step(&mut self, input: impl FnOnce(&mut Action, Duration) -> Decision) -> Decision {
        let now = self.clock.elapsed();
        crate::trace::step(&mut self.action, now, self.watch.as_ref(), input)
    }

    /// The report of the stopped action, moving its trail out (a copy goes
    /// into the caller's [`ReportSlot`], if any).
    fn report(&mut self) -> Option<Report> {
        let fresh = Action::with_seed(*self.action.policy(), 0);
        let report = std::mem::replace(&mut self.action, fresh).into_report();
        if let Some(report) = &report {
            finished(report, self.slot.as_ref(), self.watch.as_ref());
        }
        report
    }
}

pin_project! {
    /// The response future of [`RetryBudget`](crate::RetryBudget).
    pub struct ResponseFuture<S, B, C, G = HttpSignal>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        kind: Kind<S, B, C, G>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, B, C, G>
    where
        S: Service<Request<B>>,
    {
        /// Not retryable: the inner future, untouched.
        Passthrough {
            #[pin]
            future: S::Future,
        },
        /// Under the budget. Boxed: the state is large (a timer, a request
        /// to copy, a service clone), and a pass-through future should not
        /// pay for moving it.
        Budgeted {
            attempts: Pin<Box<Attempts<S, B, C, G>>>,
        },
        /// Stopped before anything was sent (a hold-off that does not fit).
        Stopped {
            error: Option<Error<S::Error>>,
        },
    }
}

pin_project! {
    /// The state of a budgeted request.
    #[project = AttemptsProj]
    struct Attempts<S, B, C, G>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        future: Option<S::Future>,
        // Created only when first needed: an attempt that answers at once
        // never touches the timer wheel.
        #[pin]
        timer: Option<Sleep>,
        #[pin]
        cancelled: Option<WaitForCancellationFutureOwned>,
        // The deadline of the attempt in flight (`None`: never).
        deadline: Option<Instant>,
        state: State,
        ctx: Budgeted<S, B, C, G, S::Response>,
    }

    impl<S, B, C, G> PinnedDrop for Attempts<S, B, C, G>
    where
        S: Service<Request<B>>,
    {
        fn drop(this: Pin<&mut Self>) {
            // The caller left before the end: record it (and trace it), so the
            // trail never just stops. Nothing else runs after this.
            let this = this.project();
            if *this.state != State::Done {
                this.ctx.step(|action, now| action.caller_left(now));
                if this.ctx.slot.is_some() || this.ctx.watch.is_some() {
                    this.ctx.report();
                }
            }
        }
    }
}

/// Points the timer at `at`, creating it on first use; "never" (`None`)
/// disarms it.
fn arm(mut timer: Pin<&mut Option<Sleep>>, at: Option<Instant>) {
    match (timer.as_mut().as_pin_mut(), at) {
        (Some(sleep), Some(at)) => sleep.reset(at),
        (None, Some(at)) => timer.set(Some(tokio::time::sleep_until(at))),
        (_, None) => timer.set(None),
    }
}

/// Polls the timer; an unarmed timer never fires.
fn fired(timer: Pin<&mut Option<Sleep>>, cx: &mut Context<'_>) -> bool {
    timer
        .as_pin_mut()
        .is_some_and(|sleep| sleep.poll(cx).is_ready())
}

impl<S, B, C, G> ResponseFuture<S, B, C, G>
where
    S: Service<Request<B>>,
{
    pub(crate) fn passthrough(future: S::Future) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(crate) fn budgeted(
        future: S::Future,
        deadline: Duration,
        cancelled: Option<WaitForCancellationFutureOwned>,
        ctx: Budgeted<S, B, C, G, S::Response>,
    ) -> Self {
        Self {
            kind: Kind::Budgeted {
                attempts: Box::pin(Attempts {
                    future: Some(future),
                    timer: None,
                    cancelled,
                    deadline: ctx.clock.at(deadline),
                    state: State::InFlight,
                    ctx,
                }),
            },
        }
    }

    /// The first attempt waits for a hold-off until `until` (elapsed).
    pub(crate) fn deferred(
        until: Duration,
        cancelled: Option<WaitForCancellationFutureOwned>,
        ctx: Budgeted<S, B, C, G, S::Response>,
    ) -> Self {
        Self {
            kind: Kind::Budgeted {
                attempts: Box::pin(Attempts {
                    future: None,
                    timer: ctx.clock.at(until).map(tokio::time::sleep_until),
                    cancelled,
                    deadline: None,
                    state: State::Waiting,
                    ctx,
                }),
            },
        }
    }

    /// Ends at once with `error`.
    pub(crate) fn stopped(error: Error<S::Error>) -> Self {
        Self {
            kind: Kind::Stopped { error: Some(error) },
        }
    }
}

impl<S, B, C, G, ResB> Future for ResponseFuture<S, B, C, G>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: Clone,
    C: Calendar,
    G: RetrySignal,
{
    type Output = Result<Response<ResB>, Error<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let attempts = match self.project().kind.project() {
            KindProj::Passthrough { future } => {
                return future
                    .poll(cx)
                    .map_err(|e| Error::new(ErrorKind::Inner(e), None));
            }
            KindProj::Budgeted { attempts } => attempts.as_mut().project(),
            KindProj::Stopped { error } => {
                let error = error
                    .take()
                    .expect("ResponseFuture polled after completion");
                return Poll::Ready(Err(error));
            }
        };
        let AttemptsProj {
            mut future,
            mut timer,
            mut cancelled,
            deadline,
            state,
            ctx,
        } = attempts;

        loop {
            if *state == State::Done {
                panic!("ResponseFuture polled after completion");
            }
            if let Some(token) = cancelled.as_mut().as_pin_mut() {
                if token.poll(cx).is_ready() {
                    cancelled.set(None);
                    future.set(None);
                    *state = State::Done;
                    ctx.last_response = None;
                    ctx.step(|action, now| action.caller_left(now));
                    return Poll::Ready(Err(Error::new(ErrorKind::Cancelled, ctx.report())));
                }
            }
            match *state {
                State::InFlight => {
                    let Some(attempt) = future.as_mut().as_pin_mut() else {
                        *state = State::Done;
                        continue;
                    };
                    match attempt.poll(cx) {
                        Poll::Ready(Ok(response)) => {
                            future.set(None);
                            let (status, retry_after, forbidden, translated) = ctx
                                .signal
                                .read(response.status(), response.headers())
                                .into_parts();
                            let calendar = ctx.dates.reading(&ctx.calendar, response.headers());
                            // A body that went over its replay limit cannot
                            // be sent again in full: tell the core, which
                            // decides what that means for this response.
                            let replayable = ctx.template.as_ref().is_none_or(|t| {
                                t.extensions()
                                    .get::<BodyReplay>()
                                    .is_none_or(BodyReplay::is_replayable)
                            });
                            if !replayable {
                                ctx.action.request_not_replayable();
                            }
                            let mut decision = ctx.step(|action, now| {
                                // What the signal read besides the status and
                                // the delay (nothing, for plain HTTP).
                                if let Some(from) = translated {
                                    action.response_translated(now, from);
                                }
                                if forbidden {
                                    action.retry_forbidden();
                                }
                                action.response(now, status, &retry_after, calendar)
                            });
                            if let (Some((map, key)), Some(until)) =
                                (&ctx.hold_off, ctx.action.server_asked_until())
                            {
                                map.hold(key, ctx.clock.at_or_far(until));
                            }
                            if let (Decision::WaitUntil(_), Some(budget)) = (decision, &ctx.budget)
                            {
                                if !budget.0.withdraw() {
                                    decision = ctx.step(|action, now| action.retry_refused(now));
                                }
                            }
                            if let Decision::WaitUntil(until) = decision {
                                arm(timer.as_mut(), ctx.clock.at(until));
                                ctx.last_response = Some(response);
                                *state = State::Waiting;
                                continue;
                            }
                            *state = State::Done;
                            return Poll::Ready(Ok(with_report(response, ctx.report())));
                        }
                        Poll::Ready(Err(error)) => {
                            future.set(None);
                            *state = State::Done;
                            ctx.step(|action, now| action.transport_failed(now));
                            return Poll::Ready(Err(Error::new(
                                ErrorKind::Inner(error),
                                ctx.report(),
                            )));
                        }
                        Poll::Pending => {
                            if timer.is_none() {
                                arm(timer.as_mut(), *deadline);
                            }
                            if !fired(timer.as_mut(), cx) {
                                return Poll::Pending;
                            }
                            // Past the deadline: abandon the attempt.
                            future.set(None);
                            *state = State::Done;
                            ctx.step(|action, now| action.attempt_timed_out(now));
                            return Poll::Ready(Err(Error::new(
                                ErrorKind::AttemptTimeout,
                                ctx.report(),
                            )));
                        }
                    }
                }
                State::Waiting => {
                    if !fired(timer.as_mut(), cx) {
                        return Poll::Pending;
                    }
                    match ctx.step(|action, now| action.timer_woke(now)) {
                        Decision::StartNow => {
                            // Wait for readiness no longer than the latest start.
                            let latest = ctx.action.latest_start();
                            arm(timer.as_mut(), ctx.clock.at(latest));
                            *state = State::Readying;
                        }
                        Decision::WaitUntil(until) => arm(timer.as_mut(), ctx.clock.at(until)),
                        Decision::AwaitResponse { .. } | Decision::Stop(_) => {
                            *state = State::Done;
                            return Poll::Ready(finish_without_attempt(ctx));
                        }
                    }
                }
                State::Readying => match ctx.service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        match ctx.step(|action, now| action.attempt_started(now)) {
                            Decision::AwaitResponse {
                                deadline: deadline_at,
                                attempt,
                            } => {
                                let more = attempt < ctx.action.policy().max_attempts();
                                let request = if more {
                                    ctx.template.as_ref().map(request::copy)
                                } else {
                                    ctx.template.take()
                                };
                                let Some(request) = request else {
                                    *state = State::Done;
                                    return Poll::Ready(finish_without_attempt(ctx));
                                };
                                if attempt == 1 {
                                    // A first attempt delayed by a hold-off.
                                    if let Some(budget) = &ctx.budget {
                                        budget.0.deposit();
                                    }
                                }
                                ctx.last_response = None;
                                future.set(Some(ctx.service.call(request)));
                                *deadline = ctx.clock.at(deadline_at);
                                arm(timer.as_mut(), *deadline);
                                *state = State::InFlight;
                            }
                            _ => {
                                *state = State::Done;
                                return Poll::Ready(finish_without_attempt(ctx));
                            }
                        }
                    }
                    Poll::Ready(Err(error)) => {
                        *state = State::Done;
                        ctx.last_response = None;
                        ctx.step(|action, now| action.transport_failed(now));
                        return Poll::Ready(Err(Error::new(ErrorKind::Inner(error), ctx.report())));
                    }
                    Poll::Pending => {
                        if !fired(timer.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        // Still not ready at the latest start: the core
                        // decides (a stop, since the timer never fires early).
                        match ctx.step(|action, now| action.transport_not_ready(now)) {
                            Decision::Stop(_) => {
                                *state = State::Done;
                                return Poll::Ready(finish_without_attempt(ctx));
                            }
                            _ => {
                                let latest = ctx.action.latest_start();
                                arm(timer.as_mut(), ctx.clock.at(latest));
                            }
                        }
                    }
                },
                State::Done => unreachable!("checked at the top of the loop"),
            }
        }
    }
}

/// The action stopped between attempts: return the last response held
/// during the wait, with the report.
fn finish_without_attempt<S, B, C, G, ResB, E>(
    ctx: &mut Budgeted<S, B, C, G, Response<ResB>>,
) -> Result<Response<ResB>, Error<E>> {
    let report = ctx.report();
    match ctx.last_response.take() {
        Some(response) => Ok(with_report(response, report)),
        // Stopped before the first attempt was sent (after a hold-off).
        None => Err(Error::new(ErrorKind::NotSent, report)),
    }
}

fn with_report<ResB>(mut response: Response<ResB>, report: Option<Report>) -> Response<ResB> {
    if let Some(report) = report {
        response.extensions_mut().insert(report);
    }
    response
}

/// Hands a finished action's report to whoever asked for it: the caller's
/// slot and the observer.
pub(crate) fn finished(report: &Report, slot: Option<&ReportSlot>, watch: Option<&Watch>) {
    if let Some(slot) = slot {
        slot.fill(report.clone());
    }
    if let Some(watch) = watch {
        watch.report(report);
    }
}
