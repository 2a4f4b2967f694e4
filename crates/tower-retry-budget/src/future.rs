//! The response future of [`RetryBudget`](crate::RetryBudget): a small state
//! machine whose states carry their data, in the style of tower's
//! `retry::future` and `timeout::future`.
//!
//! | state | data | the timer is |
//! |---|---|---|
//! | `Passthrough` | the inner future of a request that is never retried | not used |
//! | `Attempt` | the attempt's future | its deadline, from the core (armed at its first `Pending`) |
//! | `Between` | the last response (none before a first attempt held off) | the next start the core allows; then, while the service gets ready, the latest start |
//! | `Done` | for an action that ended in `call` (nothing sent), its error | not used |
//!
//! Every attempt, the first included, is the same `Attempt` state, entered
//! the same way (the core answers [`Decision::AwaitResponse`] to
//! [`Action::attempt_started`], and the request is copied, or moved for the
//! last attempt). Every decision comes from the core [`Action`]: the future
//! feeds it what happened and when ([`Ctx::step`]) and obeys
//! ([`Budgeted::obey`]). A response is interpreted in one place
//! ([`Ctx::response`]: one [`Answer`](retry_budget::Answer) per response)
//! and the action ends in one place ([`Ctx::finish`]). One [`Sleep`],
//! created the first time it is needed and pointed by [`arm`], serves
//! every state in turn.
//!
//! Everything else an action does (an observer, a hold-off map, the
//! caller's report slot and cancellation token, a replay handle, attempt
//! deadlines) is an extra the layer holds: the future calls the action's
//! [`Extras`] at fixed moments, without knowing what they are.
//!
//! No task is spawned. Dropping the future is the caller leaving: the attempt
//! in flight is dropped with it, the core is told, and nothing continues in
//! the background.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use retry_budget::{Action, Decision, Report};
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind};
use crate::extra::Extras;
use crate::layer::{Config, ReportMode};
use crate::{held, request};

/// One action's runtime state besides its pinned parts.
pub(crate) struct Ctx<S, B> {
    /// The core's state machine, in place (a trail it must write out goes
    /// on the heap).
    action: Action,
    clock: Clock,
    /// The clone of the inner service that sends the attempts after the
    /// first (and a first attempt held off).
    service: S,
    /// The request each attempt is copied from (or, for the last possible
    /// attempt, moved out of); `None` once no attempt can follow.
    template: Option<Request<B>>,
    config: Arc<Config>,
    /// What the action tells besides the core, through one interface.
    extras: Extras,
    /// Whether the client shares state with this action (a client budget
    /// or an extra's, a hold-off map): if not, a step does not ask the
    /// core for the effects on it.
    shared: bool,
}

/// How an action ended, besides its report.
type Ending<R, E> = Result<R, ErrorKind<E>>;

/// What the future gives the caller.
type Output<ResB, E> = Result<Response<ResB>, Error<E>>;

impl<S, B> Ctx<S, B> {
    pub(crate) fn new(config: Arc<Config>, service: S, extras: Extras) -> Self {
        let shared = config.budget.is_some() || extras.shares();
        Self {
            action: config.action(),
            clock: Clock::unread(),
            service,
            template: None,
            config,
            extras,
            shared,
        }
    }

    /// Feeds one input to the action at this poll's time, has its events
    /// traced and heard, and tells the client's shared state what the core
    /// says is due (a deposit, a withdrawal, whose refusal is told back,
    /// what the extras share). The only way the adapter talks to the core.
    pub(crate) fn step(
        &mut self,
        input: impl FnOnce(&mut Action, Duration) -> Decision,
    ) -> Decision {
        let now = self.clock.now();
        let action = &mut self.action;
        if !self.extras.listening() && !self.shared {
            // Nobody hears the trail and nothing is shared: the core alone.
            return input(action, now);
        }
        let mut decision = self.extras.step(action, now, input);
        if !self.shared {
            return decision;
        }
        let effects = action.client_effects();
        if effects.is_empty() {
            return decision;
        }
        if let Some(budget) = &self.config.budget {
            if effects.deposit {
                budget.0.deposit();
            }
            if effects.withdraw && !budget.0.withdraw() {
                decision = self.extras.step(action, now, Action::retry_refused);
            }
        }
        self.extras.effects(&effects, &mut self.clock);
        decision
    }

    /// The request for the attempt the core has just started: a copy of
    /// the template while another attempt may follow, the template itself
    /// for the last one (never a copy that cannot be sent again), marked
    /// by the extras.
    fn next_request(&mut self) -> Request<B>
    where
        B: Clone,
    {
        let request = if self.action.retry_may_follow() {
            self.template.as_ref().map(request::copy)
        } else {
            self.template.take()
        };
        let mut request = request.expect("the request is kept while an attempt may start");
        self.extras.attempt(request.extensions_mut(), &self.action);
        request
    }

    /// **The one place a response is told to the core**: the layer's
    /// signal reads it, becomes one [`Answer`](retry_budget::Answer) (the
    /// calendar read only if a date needs it), and the extras add what they
    /// know (a body that can no longer be replayed). Returns the core's
    /// decision.
    fn response<ResB>(&mut self, response: &Response<ResB>) -> Decision {
        let (headers, extensions) = (response.headers(), response.extensions());
        let mut signal = self.config.read(response.status(), headers, extensions);
        let config = &self.config;
        let answer = signal.answer(|| config.calendar_reading(headers), extensions);
        let answer = self.extras.answer(answer);
        self.step(|action, now| action.respond(now, answer))
    }

    /// **The one place an action ends** (the core has stopped it): the
    /// report goes to the extras, and in the response's extensions or the
    /// error.
    fn finish<ResB, E>(&mut self, ending: Ending<Response<ResB>, E>) -> Output<ResB, E> {
        match ending {
            Ok(mut response) => {
                // Asked for by nobody (`ReportMode::WhenRetried`, one
                // attempt, no extra that wants it): no report is built.
                if self.action.attempts_started() > 1 || !self.report_unasked() {
                    if let Some(report) = self.conclude() {
                        let extensions = response.extensions_mut();
                        self.extras.deliver(extensions, &report, &mut self.clock);
                        extensions.insert(report);
                    }
                }
                Ok(response)
            }
            Err(kind) => Err(self.finish_error(kind)),
        }
    }

    /// [`finish`](Self::finish) with an error.
    pub(crate) fn finish_error<E>(&mut self, kind: ErrorKind<E>) -> Error<E> {
        Error::new(kind, self.conclude())
    }

    /// Whether nobody asked for a report of an action that needed no retry
    /// (see [`ReportMode::WhenRetried`]).
    fn report_unasked(&self) -> bool {
        self.config.report_mode == ReportMode::WhenRetried && !self.extras.want_report()
    }

    /// The stopped action's report, moving its trail out; the extras get
    /// it too.
    fn conclude(&mut self) -> Option<Report> {
        let report = self.action.take_report();
        debug_assert!(
            report.is_some(),
            "an action ends only once the core stopped it"
        );
        if let Some(report) = &report {
            self.extras.report(report, &mut self.clock);
        }
        report
    }

    /// The caller dropped the response future before the end: the core
    /// records it, and the report goes where it was asked for.
    #[inline(never)]
    fn caller_left(&mut self) {
        self.clock.new_poll();
        self.step(|action, now| action.caller_left(now));
        self.conclude();
    }
}

pin_project! {
    /// The response future of [`RetryBudget`](crate::RetryBudget).
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        kind: Kind<S, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, B>
    where
        S: Service<Request<B>>,
    {
        /// Never retried: the inner future, untouched.
        Passthrough {
            #[pin]
            future: S::Future,
        },
        /// Under the budget.
        Budgeted {
            #[pin]
            budgeted: Budgeted<S, B>,
        },
    }
}

pin_project! {
    /// What a budgeted action is doing, with the data it needs for it.
    #[project = StateProj]
    enum State<F, R, E> {
        /// An attempt is in flight; it must answer by the deadline the core
        /// gave it, armed at its first `Pending`.
        Attempt {
            #[pin]
            future: F,
            armed: bool,
        },
        /// Between attempts (or before a first attempt held off), holding
        /// the last response to return if the action stops there: waiting
        /// for the next start (`ready_wait: false`), then for the service
        /// to be ready (`true`).
        Between {
            response: Option<R>,
            ready_wait: bool,
        },
        /// Over. An action that ended in `call`, nothing sent, keeps its
        /// error here for the first poll.
        Done {
            error: Option<Error<E>>,
        },
    }
}

pin_project! {
    /// A budgeted action: its state, its timer, the caller's cancellation,
    /// and the rest.
    struct Budgeted<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future, S::Response, S::Error>,
        // Created only when first needed: an attempt that answers at once
        // never touches the timer wheel.
        #[pin]
        timer: Option<Sleep>,
        ctx: Ctx<S, B>,
    }

    impl<S, B> PinnedDrop for Budgeted<S, B>
    where
        S: Service<Request<B>>,
    {
        fn drop(this: Pin<&mut Self>) {
            // The caller left before the end: the core records it, so the
            // trail never just stops.
            let this = this.project();
            if !matches!(this.state.project(), StateProj::Done { .. }) {
                this.ctx.caller_left();
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

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(crate) fn passthrough(future: S::Future) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    /// Starts the action of a retryable `request` on `inner`, which the
    /// caller made ready: its first attempt, or a wait for a hold-off, or a
    /// stop, as the core answers.
    pub(crate) fn start(inner: &mut S, config: &Arc<Config>, request: Request<B>) -> Self
    where
        S: Clone,
        B: Clone,
    {
        let (request, extras) = config.extras.start(request);
        let mut budgeted = Budgeted {
            // `Done` until started: dropped early, nothing to record.
            state: State::Done { error: None },
            timer: None,
            ctx: Ctx::new(config.clone(), inner.clone(), extras),
        };
        budgeted.begin(inner, request);
        Self {
            kind: Kind::Budgeted { budgeted },
        }
    }
}

impl<S, B> Budgeted<S, B>
where
    S: Service<Request<B>> + Clone,
    B: Clone,
{
    /// Starts the action before the future is first polled: its first
    /// attempt on the service the caller made ready, or a wait for a
    /// hold-off, or an error (with its report) if nothing is to be sent.
    fn begin(&mut self, inner: &mut S, request: Request<B>) {
        let ctx = &mut self.ctx;
        ctx.template = Some(request);
        let before = ctx.extras.before_first(&mut ctx.clock);
        if before.store_down {
            ctx.step(|action, now| action.shared_store_unavailable(now));
        }
        let mut decision = Decision::StartNow;
        if let Some(until) = before.held_until {
            // The service asked the client to wait: the core decides
            // whether the first attempt waits or is never sent.
            decision = ctx.step(|action, now| action.hold_off(now, until));
        }
        if decision == Decision::StartNow {
            decision = ctx.step(|action, now| action.attempt_started(now));
        }
        self.state = match decision {
            Decision::AwaitResponse { .. } => State::Attempt {
                future: inner.call(ctx.next_request()),
                armed: false,
            },
            Decision::WaitUntil(at) => {
                // Sent later, on the clone, made ready then. The service
                // made ready now is dropped: whatever it reserved (a slot
                // of a concurrency limit) is released during the wait.
                drop(std::mem::replace(inner, ctx.service.clone()));
                self.timer = ctx.clock.at(at).map(tokio::time::sleep_until);
                State::Between {
                    response: None,
                    ready_wait: false,
                }
            }
            // The core refused even the first attempt: obey, send nothing.
            // The action has ended: the caller's token is no longer
            // watched (the first poll returns this error, and only it).
            Decision::Stop(_) | Decision::StartNow => State::Done {
                error: Some(ctx.finish_error(ErrorKind::NotSent)),
            },
        };
    }
}

impl<S, B, ResB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: Clone,
{
    type Output = Output<ResB, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passthrough { future } => future
                .poll(cx)
                .map_err(|e| Error::new(ErrorKind::Inner(e), None)),
            KindProj::Budgeted { budgeted } => budgeted.poll(cx),
        }
    }
}

impl<S, B, ResB> Future for Budgeted<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: Clone,
{
    type Output = Output<ResB, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.as_mut().project();
        this.ctx.clock.new_poll();
        // The caller's cancellation, watched while the action runs.
        let running = !matches!(this.state.project(), StateProj::Done { .. });
        if running && this.ctx.extras.cancelled(cx) {
            this.ctx.step(|action, now| action.caller_left(now));
            return Poll::Ready(self.end(Err(ErrorKind::Cancelled)));
        }
        loop {
            let mut this = self.as_mut().project();
            // What happened in this state, told to the core.
            let decision = match this.state.as_mut().project() {
                StateProj::Attempt { future, armed } => match future.poll(cx) {
                    Poll::Ready(Ok(response)) => match this.ctx.response(&response) {
                        Decision::WaitUntil(until) => {
                            this.state.set(State::Between {
                                response: Some(held::compact(response)),
                                ready_wait: false,
                            });
                            Decision::WaitUntil(until)
                        }
                        // Stopped: this response is the answer.
                        _ => return Poll::Ready(self.end(Ok(response))),
                    },
                    Poll::Ready(Err(error)) => {
                        this.ctx.step(|action, now| action.transport_failed(now));
                        return Poll::Ready(self.end(Err(ErrorKind::Inner(error))));
                    }
                    Poll::Pending => {
                        if !*armed {
                            *armed = true;
                            let deadline = match this.ctx.action.decision() {
                                Decision::AwaitResponse { deadline, .. } => deadline,
                                // Never the case while an attempt is in
                                // flight: the timer fires at once and the
                                // core is told.
                                _ => Duration::ZERO,
                            };
                            arm(this.timer.as_mut(), this.ctx.clock.at(deadline));
                        }
                        if !fired(this.timer.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        // Past the deadline: the attempt is abandoned
                        // (dropped with this state).
                        this.ctx.step(|action, now| action.attempt_timed_out(now));
                        return Poll::Ready(self.end(Err(ErrorKind::AttemptTimeout)));
                    }
                },
                StateProj::Between {
                    ready_wait: false, ..
                } => {
                    if !fired(this.timer.as_mut(), cx) {
                        return Poll::Pending;
                    }
                    this.ctx.step(|action, now| action.timer_woke(now))
                }
                StateProj::Between {
                    ready_wait: true, ..
                } => match this.ctx.service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => this.ctx.step(|action, now| action.attempt_started(now)),
                    Poll::Ready(Err(error)) => {
                        this.ctx.step(|action, now| action.readiness_failed(now));
                        return Poll::Ready(self.end(Err(ErrorKind::Inner(error))));
                    }
                    Poll::Pending => {
                        if !fired(this.timer.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        // Still not ready at the latest start: the core
                        // decides.
                        this.ctx.step(|action, now| action.transport_not_ready(now))
                    }
                },
                StateProj::Done { error } => {
                    return Poll::Ready(Err(error
                        .take()
                        .expect("ResponseFuture polled after completion")))
                }
            };
            if let Some(ending) = self.as_mut().obey(decision) {
                return Poll::Ready(self.end(ending));
            }
        }
    }
}

impl<S, B, ResB> Budgeted<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: Clone,
{
    /// Does what the core decided, from any state but an attempt in flight:
    /// send the attempt it started, wait for a start or for readiness, or
    /// stop (the last response held, if any, is the answer).
    fn obey(self: Pin<&mut Self>, decision: Decision) -> Option<Ending<Response<ResB>, S::Error>> {
        let mut this = self.project();
        let at = match decision {
            Decision::AwaitResponse { .. } => {
                let request = this.ctx.next_request();
                let future = this.ctx.service.call(request);
                this.state.set(State::Attempt {
                    future,
                    armed: false,
                });
                return None;
            }
            Decision::Stop(_) => {
                // The last response held during the wait, or nothing sent
                // at all (a first attempt held off).
                let response = match this.state.project() {
                    StateProj::Between { response, .. } => response.take(),
                    _ => None,
                };
                return Some(response.ok_or(ErrorKind::NotSent));
            }
            // Wait for the inner service, no later than the latest start.
            Decision::StartNow => this.ctx.action.latest_start(),
            Decision::WaitUntil(until) => until,
        };
        if let StateProj::Between { ready_wait, .. } = this.state.project() {
            *ready_wait = decision == Decision::StartNow;
        }
        arm(this.timer.as_mut(), this.ctx.clock.at(at));
        None
    }

    /// The action ended: the state is done (the caller's token no longer
    /// watched), and [`Ctx::finish`] gives the output.
    fn end(
        self: Pin<&mut Self>,
        ending: Ending<Response<ResB>, S::Error>,
    ) -> Output<ResB, S::Error> {
        let mut this = self.project();
        this.state.set(State::Done { error: None });
        this.ctx.finish(ending)
    }
}
