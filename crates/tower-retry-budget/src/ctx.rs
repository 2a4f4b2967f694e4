//! One action's runtime besides its pinned parts ([`Ctx`]): the core's
//! [`Action`], its clock, the request each attempt is copied from, and the
//! action's extras. The only way the response future talks to the core
//! ([`Ctx::step`]), reads a response ([`Ctx::response`]) and ends an action
//! ([`Ctx::finish`]).
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{Action, Decision, Report};

use crate::clock::Clock;
use crate::error::{Error, ErrorKind};
use crate::extra::{Extras, Paced};
use crate::layer::{Config, ReportMode};
use crate::request;

/// One action's runtime state besides its pinned parts.
pub(crate) struct Ctx<S, B> {
    /// The core's state machine, in place (a trail it must write out goes
    /// on the heap).
    pub(crate) action: Action,
    pub(crate) clock: Clock,
    /// The clone of the inner service that sends the attempts after the
    /// first (and a first attempt held off).
    pub(crate) service: S,
    /// The request each attempt is copied from (or, for the last possible
    /// attempt, moved out of); `None` once no attempt can follow.
    template: Option<Request<B>>,
    config: Arc<Config>,
    /// What the action tells besides the core, through one interface.
    extras: Extras,
}

/// What an action's end presumes.
const STOPPED: &str = "an action ends only once the core stopped it";

/// How an action ended, besides its report.
pub(crate) type Ending<R, E> = Result<R, ErrorKind<E>>;

/// What the future gives the caller.
pub(crate) type Output<ResB, E> = Result<Response<ResB>, Error<E>>;

impl<S, B> Ctx<S, B> {
    /// The runtime of an action on `request` (`None`: an action that never
    /// got one), not yet opened.
    #[inline(always)]
    pub(crate) fn new(
        config: Arc<Config>,
        service: S,
        mut extras: Extras,
        request: Option<Request<B>>,
    ) -> Self {
        if config.budget.is_some() {
            extras.share();
        }
        Self {
            action: config.action(),
            clock: Clock::unread(),
            service,
            template: request,
            config,
            extras,
        }
    }

    /// Opens the action on its request, before its first attempt: what the
    /// extras say first (a shared store down, a hold on the service, a pace), then
    /// the first attempt's start, unless an extra asks first
    /// ([`Decision::StartNow`]: the future asks it, see
    /// [`poll_first`](Self::poll_first)). Returns the core's decision.
    pub(crate) fn open(&mut self) -> Decision {
        if !self.template.as_ref().is_some_and(request::may_retry) {
            // Budgeted ([`BudgetThis`](crate::BudgetThis)) but never to be
            // sent twice: the core ends it `not_retryable` where it would
            // retry, and keeps no copy.
            self.action.not_repeatable();
        }
        let before = self.extras.before_first(&mut self.clock);
        if before.store_down {
            self.step(|action, now| action.shared_store_unavailable(now));
        }
        let mut decision = Decision::StartNow;
        if let Some((until, code)) = before.quota_held {
            // Another request was told the quota is used up: the core
            // decides whether this one is sent.
            decision = self.step(|action, now| action.quota_held(now, until, code));
        }
        if let Some(until) = before.held_until {
            // The service asked the client to wait: the core decides
            // whether the first attempt waits or is never sent.
            decision = self.step(|action, now| action.hold_off(now, until));
        }
        if let Some((until, reason)) = before.paced {
            // The quota the service announced leaves no start before
            // `until`: the core decides whether the first attempt waits or
            // is never sent (a hold-off that ends later stands).
            if !matches!(decision, Decision::Stop(_)) {
                decision = self.step(|action, now| action.pace(now, until, &reason));
            }
        }
        if decision == Decision::StartNow && !before.asks {
            decision = self.step(|action, now| action.attempt_started(now));
        }
        decision
    }

    /// Whether the first attempt, about to be sent, may go (a later
    /// attempt always may): see [`ActionExtra::poll_first`](crate::extra::ActionExtra::poll_first).
    pub(crate) fn poll_first(&mut self, cx: &mut Context<'_>) -> Poll<Paced> {
        if self.action.attempts_started() > 0 {
            return Poll::Ready(None);
        }
        self.extras.poll_first(cx, &mut self.clock)
    }

    /// Whether the caller has gone (an extra watching its token says so).
    #[inline]
    pub(crate) fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.extras.cancelled(cx)
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
        let shared = self.extras.shares();
        if !self.extras.listening() && !shared {
            // Nobody hears the trail and nothing is shared: the core alone.
            return input(action, now);
        }
        let mut decision = self.extras.step(action, now, input);
        if !shared {
            return decision;
        }
        let effects = action.client_effects();
        if effects.is_empty() {
            return decision;
        }
        if let Some(budget) = &self.config.budget {
            if effects.deposit {
                budget.deposit(&mut self.clock);
            }
            if effects.withdraw && !budget.withdraw(&mut self.clock) {
                decision = self.extras.step(action, now, Action::retry_refused);
            }
        }
        // A deposit or a withdrawal alone is the budget's: the extras hear
        // the holds.
        if effects.holds() {
            self.extras.effects(&effects, &mut self.clock);
        }
        decision
    }

    /// The request for the attempt the core has just started, marked by
    /// the extras: while another attempt may follow, the template is sent
    /// and a copy of it kept in its place (the caller's own request goes
    /// first, with whatever room its header map has for the headers the
    /// layers below add; a copy's has none); the template itself for the
    /// last one (never a copy that cannot be sent again).
    pub(crate) fn next_request(&mut self) -> Request<B>
    where
        B: Clone,
    {
        const KEPT: &str = "the request is kept while an attempt may start";
        let mut request = if self.action.retry_may_follow() {
            let template = self.template.as_mut().expect(KEPT);
            let copy = request::copy(template);
            std::mem::replace(template, copy)
        } else {
            self.template.take().expect(KEPT)
        };
        self.extras
            .attempt(request.extensions_mut(), &self.action, &mut self.clock);
        request
    }

    /// **The one place a response is told to the core**: the layer's
    /// signal reads it, becomes one [`Answer`](retry_budget::Answer) (the
    /// calendar read only if a date needs it), and the extras add what they
    /// know (a body that can no longer be replayed). Returns the core's
    /// decision.
    pub(crate) fn response<ResB>(&mut self, response: &Response<ResB>) -> Decision {
        let (headers, extensions) = (response.headers(), response.extensions());
        let signal = self.config.read(response.status(), headers, extensions);
        let config = &self.config;
        self.extras
            .head(headers, &mut || config.calendar_reading(headers));
        let mut retry_after = None;
        let calendar = || config.calendar_reading(headers);
        let mut answer = signal.answer(&mut retry_after, calendar, Some(extensions));
        self.extras.answer(&mut answer);
        self.step(|action, now| action.respond(now, answer))
    }

    /// **The one place an action ends** (the core has stopped it): the
    /// report goes to the extras, and in the response's extensions or the
    /// error.
    pub(crate) fn finish<ResB, E>(&mut self, ending: Ending<Response<ResB>, E>) -> Output<ResB, E> {
        match ending {
            Ok(mut response) => {
                // Asked for by nobody (`ReportMode::WhenRetried`, one
                // attempt, no extra that wants it): no report is built.
                if self.action.attempts_started() > 1 || !self.report_unasked() {
                    // The report built once, where it goes: the extras
                    // hear it, then the response carries it.
                    let report = self.action.take_report();
                    debug_assert!(report.is_some(), "{STOPPED}");
                    // Read in place, then moved once, into the extensions.
                    if let Some(heard) = &report {
                        self.extras.report(heard, &mut self.clock);
                        let extensions = response.extensions_mut();
                        self.extras.deliver(extensions, heard, &mut self.clock);
                    }
                    if let Some(report) = report {
                        response.extensions_mut().insert(report);
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
        debug_assert!(report.is_some(), "{STOPPED}");
        if let Some(report) = &report {
            self.extras.report(report, &mut self.clock);
        }
        report
    }

    /// The caller dropped the response future before the end: the core
    /// records it, and the report goes where it was asked for.
    #[inline(never)]
    pub(crate) fn caller_left(&mut self) {
        self.clock.new_poll();
        self.step(|action, now| action.caller_left(now));
        self.conclude();
    }
}
