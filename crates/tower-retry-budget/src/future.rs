//! The response future of [`RetryBudget`](crate::RetryBudget): a small state
//! machine whose states carry their data, in the style of tower's
//! `retry::future` and `timeout::future`.
//!
//! | state | data | the timer is |
//! |---|---|---|
//! | `Passthrough` | the inner future of a request that is never retried | not used |
//! | `Attempt` | the attempt's future | its deadline, from the core (armed at its first `Pending`) |
//! | `Between` | the last response, boxed (none before a first attempt held off) | the next start the core allows; then, while the service gets ready, the latest start |
//! | `Done` | for an action that ended in `call` (nothing sent), its error | not used |
//!
//! Every attempt, the first included, is the same `Attempt` state, entered
//! the same way (the core answers [`Decision::AwaitResponse`] to
//! `Action::attempt_started`, and the request is copied, or moved for the
//! last attempt). Every decision comes from the core
//! [`Action`](retry_budget::Action): the future feeds it what happened and
//! when ([`Ctx::step`]) and obeys
//! ([`Budgeted::obey`]). A response is interpreted in one place
//! ([`Ctx::response`]: one [`Answer`](retry_budget::Answer) per response)
//! and the action ends in one place ([`Ctx::finish`]). One [`Sleep`],
//! created the first time it is needed and pointed by [`arm`], serves
//! every state in turn.
//!
//! Everything else an action does (an observer, a hold-off map, the
//! caller's report slot and cancellation token, a replay handle, attempt
//! deadlines) is an extra the layer holds, which [`Ctx`] calls at fixed
//! moments without knowing what it is.
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
use retry_budget::Decision;
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::ctx::{Ctx, Ending, Output};
use crate::error::{Error, ErrorKind};
use crate::held;
use crate::layer::Config;

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
        /// to be ready (`true`). The response is boxed: only an action that
        /// waits for a retry holds one, and every action moves this state's
        /// room with the future.
        Between {
            response: Option<Box<R>>,
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
    /// A budgeted action: its state, its timer, and its runtime ([`Ctx`]).
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

    /// Starts the action of a budgeted `request` on `inner`, which the
    /// caller made ready: its first attempt, or a wait for a hold-off, or a
    /// stop, as the core answers.
    #[inline(always)]
    pub(crate) fn start(inner: &mut S, config: &Arc<Config>, mut request: Request<B>) -> Self
    where
        S: Clone,
        B: Clone,
    {
        let extras = match config.extras.found(request.extensions()) {
            Some(extras) => extras,
            // Taken apart for the extras the layer is configured with,
            // which may mark it.
            None => {
                let (mut parts, body) = request.into_parts();
                let extras = config.extras.start(&mut parts);
                request = Request::from_parts(parts, body);
                extras
            }
        };
        let ctx = Ctx::new(config.clone(), inner.clone(), extras, Some(request));
        // Built in place, then started: the action's state is not moved
        // again once made.
        let mut future = Self {
            kind: Kind::Budgeted {
                budgeted: Budgeted {
                    // `Done` until started: dropped early, nothing to record.
                    state: State::Done { error: None },
                    timer: None,
                    ctx,
                },
            },
        };
        if let Kind::Budgeted { budgeted } = &mut future.kind {
            budgeted.begin(inner);
        }
        future
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
    fn begin(&mut self, inner: &mut S) {
        let ctx = &mut self.ctx;
        self.state = match ctx.open() {
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
            // An extra asks before the first attempt is sent (a fleet's
            // shared allowance): sent once it answers, on the clone, made
            // ready then, no later than the latest start.
            Decision::StartNow => {
                drop(std::mem::replace(inner, ctx.service.clone()));
                let latest = ctx.action.latest_start();
                self.timer = ctx.clock.at(latest).map(tokio::time::sleep_until);
                State::Between {
                    response: None,
                    ready_wait: true,
                }
            }
            // The core refused even the first attempt: obey, send nothing.
            // The action has ended: the caller's token is no longer
            // watched (the first poll returns this error, and only it).
            Decision::Stop(_) => State::Done {
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
        if running && this.ctx.cancelled(cx) {
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
                                response: Some(Box::new(held::compact(response))),
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
                            // Never `None` while an attempt is in flight
                            // (else the timer fires at once and the core
                            // is told).
                            let deadline = this.ctx.action.attempt_deadline();
                            let deadline = deadline.unwrap_or(Duration::ZERO);
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
                } => match this.ctx.poll_first(cx) {
                    // An extra's answer for a first attempt: the core
                    // decides whether it waits or is never sent.
                    Poll::Ready(Some((until, reason))) => this
                        .ctx
                        .step(|action, now| action.pace(now, until, &reason)),
                    Poll::Pending if !fired(this.timer.as_mut(), cx) => return Poll::Pending,
                    // Still no answer at the latest start: the core decides.
                    Poll::Pending => this.ctx.step(|action, now| action.transport_not_ready(now)),
                    Poll::Ready(None) => match this.ctx.service.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {
                            this.ctx.step(|action, now| action.attempt_started(now))
                        }
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
                return Some(response.map(|held| *held).ok_or(ErrorKind::NotSent));
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
