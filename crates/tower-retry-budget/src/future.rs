//! **The timer lives here.** The response future of
//! [`RetryBudget`](crate::RetryBudget): a small state machine whose states
//! carry their data, in the style of tower's `retry::future`.
//!
//! | state | data | the timer is |
//! |---|---|---|
//! | `InFlight` | the attempt's future | the deadline the core gave it (armed at its first `Pending`) |
//! | `Waiting` | the last response (none before a first attempt held off) | the earliest next start |
//! | `Readying` | the last response | the latest start |
//! | `Done` | nothing | unused |
//!
//! One [`Sleep`], created the first time it is needed, serves the three in
//! turn. Every decision comes from the core [`Action`]: this file tells it
//! what happened and when ([`Ctx::step`], which also hands the client's
//! shared state what the core says is due), obeys, and ends in one place
//! ([`Ctx::finish`]: the report, the caller's slot, the observer).
//!
//! The `Action` is boxed and created when first needed ([`Ctx::action`]).
//! A first attempt is started on the policy's word when nobody listens and
//! nothing is shared; an answer the core says ends the action then never
//! creates one (its report, if asked for, is built by the core from the
//! answer, [`FirstAnswer`]). Anything else creates it, replaying the first
//! start at elapsed zero, so that the trail is the one it would have had
//! (`tests/deferred_action.rs` runs the same scripts both ways).
//!
//! A plain request (nothing in its extensions, no `tracing` subscriber, a
//! layer with nothing shared or heard: `Config::settle`) goes further: its
//! first attempt is a variant of its own, `Kind::First`, holding the
//! attempt's future, its timer and the few parts a context is made from,
//! and nothing else to set up, poll or drop. Its answer usually ends the
//! action (`first_ending`, shared with [`Ctx::response`]); a retry to wait
//! for, a failure or a timeout hands the parts over to a [`Ctx`] under the
//! budget (`FirstParts::hand_over`), which goes on as above.
//!
//! No task is spawned. Dropping the future is the caller leaving: the attempt
//! in flight is dropped with it, the core is told, and nothing continues in
//! the background.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use retry_budget::{Action, Decision, FirstAnswer, Report, ResetHeaders};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower::Service;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind};
use crate::hold_off::{authority_of, HoldOff};
use crate::layer::{Config, ReportMode};
use crate::observer::{ActionId, Observed, Watch};
use crate::replay::BodyReplay;
use crate::report_slot::{LateReport, ReportSlot};
use crate::request;

/// What a few requests carry besides the budget, in one optional box so
/// that a plain request pays one pointer for them.
pub(crate) struct Extras {
    /// The caller's cancellation token (moved into the future's pinned
    /// cancellation wait when the action needs a future).
    cancel: Option<CancellationToken>,
    /// The client's hold-off map and this request's key in it.
    hold_off: Option<(HoldOff, String)>,
    /// The caller's slot for the report.
    slot: Option<ReportSlot>,
    /// The layer's observer and this action's id.
    watch: Option<Watch>,
}

impl Extras {
    /// The extras of `request`, if it has any. With an observer, the
    /// request (and so every attempt's copy of it) carries the action's
    /// [`Observed`] for the layers below.
    pub(crate) fn of<B>(
        request: &mut Request<B>,
        config: &Config,
        hold_off: Option<(HoldOff, String)>,
    ) -> Option<Box<Self>> {
        let extensions = request.extensions_mut();
        if hold_off.is_none() && config.observer.is_none() && extensions.is_empty() {
            // The common case: nothing to look for.
            return None;
        }
        let watch = config
            .observer
            .as_ref()
            .map(|observer| observer.watch(extensions.get::<ActionId>().copied()));
        if let Some(watch) = &watch {
            extensions.insert(Observed(watch.clone()));
        }
        let extras = Self {
            cancel: extensions.get::<CancellationToken>().cloned(),
            hold_off,
            slot: extensions.get::<ReportSlot>().cloned(),
            watch,
        };
        let any = extras.cancel.is_some()
            || extras.hold_off.is_some()
            || extras.slot.is_some()
            || extras.watch.is_some();
        any.then(|| Box::new(extras))
    }
}

impl Extras {
    /// The extras of an action with no request (the caller's `poll_ready`
    /// failed): only the observer's watch.
    pub(crate) fn without_request(config: &Config) -> Option<Box<Self>> {
        let watch = config.observer.as_ref()?.watch(None);
        Some(Box::new(Self {
            cancel: None,
            hold_off: None,
            slot: None,
            watch: Some(watch),
        }))
    }
}

/// One action's runtime state besides its pinned parts.
pub(crate) struct Ctx<S, B> {
    /// The core's state machine: boxed, and created when first needed (see
    /// [`Ctx::action`]); an action whose first answer ends it unobserved
    /// never needs one.
    action: Option<Box<Action>>,
    /// The first attempt was started on the policy's word
    /// ([`Policy::first_attempt`](retry_budget::Policy::first_attempt)),
    /// with no `Action` yet: the one created later replays that start.
    started_lazily: bool,
    clock: Clock,
    /// The clone of the inner service that sends the retries.
    pub(crate) service: S,
    /// The request to copy (or move, for the last attempt) for the next
    /// attempt; `None` once no attempt can follow.
    pub(crate) template: Option<Request<B>>,
    config: Arc<Config>,
    extras: Option<Box<Extras>>,
    /// Whether anyone hears the trail as it grows (a `tracing` subscriber
    /// or the layer's observer), read once per action: if not, a step does
    /// not look at the events it added.
    listening: bool,
    /// Whether the client shares state with this action (a client budget
    /// or a hold-off map): if not, a step does not ask the core for the
    /// effects on it.
    shared: bool,
}

/// How an action ended, besides its report.
type Ending<R, E> = Result<R, ErrorKind<E>>;

impl<S, B> Ctx<S, B> {
    #[inline(always)]
    pub(crate) fn new(config: Arc<Config>, service: S, extras: Option<Box<Extras>>) -> Self {
        let (listening, shared) = Self::hearing(&config, extras.as_deref());
        Self {
            action: None,
            started_lazily: false,
            clock: Clock::unread(),
            service,
            template: None,
            config,
            extras,
            listening,
            shared,
        }
    }

    /// Whether anyone hears an action's trail as it grows (a `tracing`
    /// subscriber, the layer's observer), and whether the client shares
    /// state with it (a client budget, a hold-off map).
    fn hearing(config: &Config, extras: Option<&Extras>) -> (bool, bool) {
        let listening = crate::trace::listening() || extras.is_some_and(|e| e.watch.is_some());
        let shared = config.budget.is_some() || extras.is_some_and(|e| e.hold_off.is_some());
        (listening, shared)
    }

    /// The action, created now if it was not yet: a first attempt started
    /// without one is replayed into it, at elapsed zero as it was started,
    /// so that its trail is the one it would have had.
    pub(crate) fn action(&mut self) -> &mut Action {
        materialize(&mut self.action, &self.config, self.started_lazily)
    }

    /// The deadline (elapsed) the core gave the attempt in flight: the
    /// `Action`'s, or the policy's for a first attempt started on its word.
    /// Past any other decision (never the case while an attempt is in
    /// flight) the timer fires at once and the core is told.
    fn attempt_deadline(&self) -> Duration {
        match &self.action {
            Some(action) => deadline_of(action.decision()),
            None => deadline_of(self.config.policy.first_attempt()),
        }
    }

    /// Whether nobody asked for a report of an action that needed no retry
    /// (see [`ReportMode::WhenRetried`]).
    fn report_unasked(&self) -> bool {
        self.config.report_mode == ReportMode::WhenRetried
            && self
                .extras
                .as_ref()
                .is_none_or(|e| e.slot.is_none() && e.watch.is_none())
    }

    /// Feeds one input to the action at this poll's time, traces and
    /// observes the events it added, and tells the client's shared state
    /// what the core says is due (a deposit, a withdrawal, whose refusal is
    /// told back, a hold-off to publish). The only way the adapter talks to
    /// the core.
    pub(crate) fn step(
        &mut self,
        input: impl FnOnce(&mut Action, Duration) -> Decision,
    ) -> Decision {
        let now = self.clock.now();
        let action = materialize(&mut self.action, &self.config, self.started_lazily);
        if !self.listening && !self.shared {
            // Nobody hears the trail and nothing is shared: the core alone.
            return input(action, now);
        }
        let watch = self.extras.as_ref().and_then(|e| e.watch.as_ref());
        let mut decision = crate::trace::step(action, now, watch, input);
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
                decision = crate::trace::step(action, now, watch, Action::retry_refused);
            }
        }
        if let (Some(until), Some((map, key))) = (
            effects.hold_until,
            self.extras.as_ref().and_then(|e| e.hold_off.as_ref()),
        ) {
            map.hold(key, self.clock.at_or_far(until));
        }
        decision
    }

    /// How long the client's hold-off map holds this request's first
    /// attempt, as elapsed time, if at all.
    pub(crate) fn held_until(&mut self) -> Option<Duration> {
        let (map, key) = self.extras.as_ref()?.hold_off.as_ref()?;
        let until = map.until(key)?;
        Some(self.clock.since(until))
    }

    /// **The one place an action ends** (the core has stopped it): builds
    /// the report, gives a copy to the caller's slot and the observer, and
    /// attaches it to the response or the error. (A first answer that ends
    /// an action with no `Action` goes straight to
    /// [`finish_response`](Self::finish_response).)
    #[inline(always)]
    fn finish<ResB, E>(
        &mut self,
        ending: Result<Response<ResB>, ErrorKind<E>>,
    ) -> Result<Response<ResB>, Error<E>> {
        match ending {
            Ok(mut response) => {
                self.finish_response(&mut response, None);
                Ok(response)
            }
            Err(kind) => Err(self.finish_error(kind)),
        }
    }

    /// [`finish`](Self::finish) with a response: the report, if asked for,
    /// goes in its extensions.
    #[inline(always)]
    fn finish_response<ResB>(
        &mut self,
        response: &mut Response<ResB>,
        answer: Option<FirstAnswer>,
    ) {
        // Asked for by nobody: no report is built at all.
        let attempts = self
            .action
            .as_ref()
            .map_or(u32::from(self.started_lazily), |a| a.attempts_started());
        if attempts <= 1 && self.report_unasked() {
            return;
        }
        if let Some(report) = self.conclude(answer) {
            deliver(response, report, &self.clock);
        }
    }

    /// [`finish`](Self::finish) with an error.
    pub(crate) fn finish_error<E>(&mut self, kind: ErrorKind<E>) -> Error<E> {
        Error::new(kind, self.conclude(None))
    }

    /// The stopped action's report, moving its trail out (or built from
    /// the first `answer` that ended it with no `Action`); the caller's slot
    /// and the observer get it too.
    fn conclude(&mut self, answer: Option<FirstAnswer>) -> Option<Report> {
        let report = match answer {
            Some(answer) if self.action.is_none() => Some(answer.into_report(&self.config.policy)),
            _ => self.action().take_report(),
        };
        debug_assert!(
            report.is_some(),
            "an action ends only once the core stopped it"
        );
        if let (Some(report), Some(extras)) = (&report, &self.extras) {
            if let Some(slot) = &extras.slot {
                slot.fill(report.clone(), self.clock.origin_if_read());
            }
            if let Some(watch) = &extras.watch {
                watch.report(report);
            }
        }
        report
    }

    /// Reads a response for the core: the signal, the calendar (only when
    /// the response carries a date), whether the request can still be sent
    /// again in full. Answers the core's decision; `answer` is given the
    /// answer to build the report from if no `Action` was needed.
    fn response<ResB>(
        &mut self,
        response: &Response<ResB>,
        answer: &mut Option<FirstAnswer>,
    ) -> Decision {
        if self.action.is_none() {
            let unasked = self.report_unasked();
            if let Some((outcome, first)) =
                first_ending(&self.config, &mut self.clock, unasked, response)
            {
                *answer = first;
                return Decision::Stop(outcome);
            }
        }
        let (status, retry_after, forbidden, translated, resets) = self
            .config
            .read(response.status(), response.headers())
            .into_parts();
        // The calendar clock is read only when the core needs it: a date,
        // or a reset header given as a Unix time.
        let needs_calendar = retry_after.needs_calendar()
            || resets.as_ref().is_some_and(ResetHeaders::needs_calendar);
        let calendar = if needs_calendar {
            self.config.calendar_reading(response.headers())
        } else {
            None
        };
        // A body that went over its replay limit cannot be sent again in
        // full: the core decides what that means for this response.
        let replayable = self.template.as_ref().is_none_or(|t| {
            t.extensions()
                .get::<BodyReplay>()
                .is_none_or(BodyReplay::is_replayable)
        });
        if !replayable {
            self.action().request_not_replayable();
        }
        self.step(|action, now| {
            if let Some(from) = translated {
                action.response_translated(now, from);
            }
            if forbidden {
                action.retry_forbidden();
            }
            if let Some(resets) = resets {
                action.reset_headers(resets);
            }
            action.response(now, status, &retry_after, calendar)
        })
    }
}

/// [`Ctx::action`], on the fields it needs (so that the caller may borrow
/// the others).
fn materialize<'a>(
    action: &'a mut Option<Box<Action>>,
    config: &Config,
    started_lazily: bool,
) -> &'a mut Action {
    action.get_or_insert_with(|| {
        let mut action = Box::new(config.action());
        if started_lazily {
            action.attempt_started(Duration::ZERO);
        }
        action
    })
}

/// The deadline (elapsed) a decision gives the attempt in flight. Past any
/// other decision (never the case while an attempt is in flight) the timer
/// fires at once and the core is told.
fn deadline_of(decision: Decision) -> Duration {
    match decision {
        Decision::AwaitResponse { deadline, .. } => deadline,
        Decision::StartNow | Decision::WaitUntil(_) | Decision::Stop(_) => Duration::ZERO,
    }
}

/// Whether the answer to a first attempt started on the policy's word, with
/// no `Action`, ends the action, as the core says: `Some` with the outcome
/// and, if someone asked for the report, the answer to build it from;
/// `None` if the action must see the answer (an `Action` is then created).
///
/// A status the core says ends the action whatever else it carries needs
/// nothing else read when nobody asked for the report (under a signal that
/// takes the status as it is, not even the rest of the head; not the
/// clock); otherwise the core builds the report from the answer.
#[inline(always)]
fn first_ending<ResB>(
    config: &Config,
    clock: &mut Clock,
    unasked: bool,
    response: &Response<ResB>,
) -> Option<(retry_budget::Outcome, Option<FirstAnswer>)> {
    if unasked {
        if let Some(outcome) = config
            .status_as_is(response.status())
            .and_then(|status| config.policy.ends_first_attempt(status))
        {
            return Some((outcome, None));
        }
    }
    let (status, retry_after, _, translated, _) = config
        .read(response.status(), response.headers())
        .into_parts();
    let outcome = config.policy.ends_first_attempt(status)?;
    if unasked {
        return Some((outcome, None));
    }
    if translated.is_some() {
        // What the signal translated is told to an `Action`.
        return None;
    }
    let calendar = if retry_after.needs_calendar() {
        config.calendar_reading(response.headers())
    } else {
        None
    };
    let answer = config
        .policy
        .first_answer(clock.now(), status, &retry_after, calendar)?;
    Some((answer.outcome(), Some(answer)))
}

/// What a first attempt sent on the policy's word keeps besides its future
/// and its timer ([`Kind::First`]).
struct FirstParts<S, B> {
    clock: Clock,
    /// The clone of the inner service that would send a retry.
    service: S,
    /// The request to copy for a retry; `None` if none can follow.
    template: Option<Request<B>>,
    config: Arc<Config>,
    /// Whether the timer was armed (at the attempt's first `Pending`).
    armed: bool,
    /// The answer was given to the caller.
    done: bool,
}

impl<S: Clone, B> FirstParts<S, B> {
    /// The context of the same action, for everything but the happy path:
    /// an `Action` is created in it when first needed, replaying the start.
    fn hand_over(&mut self) -> Ctx<S, B> {
        Ctx {
            action: None,
            started_lazily: true,
            clock: self.clock,
            service: self.service.clone(),
            template: self.template.take(),
            config: self.config.clone(),
            extras: None,
            listening: false,
            shared: false,
        }
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
        /// Not retryable: the inner future, untouched.
        Passthrough {
            #[pin]
            future: S::Future,
        },
        /// A plain request's first attempt, sent on the policy's word: no
        /// `Action`, nobody listening, nothing shared, no cancellation
        /// token. Its answer usually ends the action; anything else (a
        /// retry to wait for, a timeout, a failure) goes on under the
        /// budget with a context made from these parts.
        First {
            #[pin]
            future: S::Future,
            // Created only if the attempt is pending when first polled.
            #[pin]
            timer: Option<Sleep>,
            parts: FirstParts<S, B>,
        },
        /// Under the budget. Kept inline, as `tower::retry` keeps its
        /// state: an allocation per action costs more than the whole happy
        /// path may (and past glibc's 1 KiB thread cache, much more).
        Budgeted {
            #[pin]
            attempts: Attempts<S, B>,
        },
        /// Ended in `call` (a hold-off or a policy that leaves no room for
        /// the first attempt): nothing was sent.
        Ended {
            error: Option<Error<S::Error>>,
        },
    }
}

pin_project! {
    /// What a budgeted action is doing, with the data it needs for it.
    #[project = StateProj]
    enum State<F, R> {
        /// An attempt is in flight; it must answer by the deadline the core
        /// gave it ([`Ctx::attempt_deadline`]), armed at its first `Pending`.
        InFlight {
            #[pin]
            future: F,
            armed: bool,
        },
        /// Waiting until the next attempt may start, holding the last
        /// response (to return if the action stops after the wait).
        Waiting {
            response: Option<R>,
        },
        /// Waiting for the inner service to be ready for the next attempt.
        Readying {
            response: Option<R>,
        },
        /// Finished.
        Done,
    }
}

pin_project! {
    /// A budgeted action: its state, its timer, the caller's cancellation,
    /// and the rest.
    struct Attempts<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future, S::Response>,
        // Created only when first needed: an attempt that answers at once
        // never touches the timer wheel.
        #[pin]
        timer: Option<Sleep>,
        // Boxed: only a request that carries a token pays for it.
        cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
        ctx: Ctx<S, B>,
    }

    impl<S, B> PinnedDrop for Attempts<S, B>
    where
        S: Service<Request<B>>,
    {
        fn drop(this: Pin<&mut Self>) {
            // The caller left before the end: the core records it, so the
            // trail never just stops. Nothing else runs after this.
            let this = this.project();
            if !matches!(this.state.project(), StateProj::Done) {
                this.ctx.caller_left();
            }
        }
    }
}

impl<S, B> Ctx<S, B> {
    /// The caller dropped the response future before the end: the core
    /// records it, and the report goes where it was asked for. Kept out of
    /// line: every future's drop checks for it, few need it.
    #[inline(never)]
    fn caller_left(&mut self) {
        self.clock.new_poll();
        self.step(|action, now| action.caller_left(now));
        self.conclude(None);
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
    ///
    /// The future is built first and the action started inside it: its
    /// state is large (the action, a request to copy, a timer), and every
    /// move of it would be a copy on the hot path.
    #[inline(always)]
    pub(crate) fn start(inner: &mut S, config: &Arc<Config>, request: Request<B>) -> Self
    where
        S: Clone,
        B: Clone,
    {
        // The common case, looked at first (see `Config::settle`).
        if config.plain_first && request.extensions().is_empty() && !crate::trace::listening() {
            return Self::first(inner, config, request);
        }
        Self::start_with_extras(inner, config, request)
    }

    /// [`start`](Self::start) for a request that carries something, or
    /// under a layer that shares or reports its steps.
    #[inline(never)]
    fn start_with_extras(inner: &mut S, config: &Arc<Config>, mut request: Request<B>) -> Self
    where
        S: Clone,
        B: Clone,
    {
        let hold_off = config
            .hold_off
            .as_ref()
            .and_then(|map| authority_of(&request).map(|key| (map.clone(), key)));
        // A shared store (Redis) that is down: the core records that this
        // action's hold-offs come from the local map alone.
        let store_down = hold_off
            .as_ref()
            .and_then(|(map, _)| map.store_health())
            .is_some_and(|health| !health.available);
        let mut extras = Extras::of(&mut request, config, hold_off);
        let (listening, shared) = Ctx::<S, B>::hearing(config, extras.as_deref());
        // Nobody hears the trail and nothing is shared (see
        // `Config::settle`): the first attempt starts on the policy's word,
        // and the `Action` is created only if something needs it.
        if config.defers_first && !listening && !shared && !store_down {
            let cancelled = extras
                .as_mut()
                .and_then(|e| e.cancel.take())
                .map(|token| Box::pin(token.cancelled_owned()));
            return Self::on_policy_word(inner, config, request, extras, cancelled);
        }
        let mut this = Self {
            kind: Kind::Budgeted {
                attempts: Attempts {
                    // `Done` until started: dropped early, nothing to record.
                    state: State::Done,
                    timer: None,
                    cancelled: None,
                    ctx: Ctx::new(config.clone(), inner.clone(), extras),
                },
            },
        };
        if let Kind::Budgeted { attempts } = &mut this.kind {
            if let Err(error) = attempts.begin(inner, config, request, store_down) {
                // Nothing was sent; the state is still `Done`.
                this.kind = Kind::Ended { error: Some(error) };
            }
        }
        this
    }

    /// Sends a plain request's first attempt on the policy's word
    /// ([`Kind::First`]). Built at once in its final state: every move or
    /// rewrite of this state costs more than the rest of the path.
    #[inline(always)]
    fn first(inner: &mut S, config: &Arc<Config>, request: Request<B>) -> Self
    where
        S: Clone,
        B: Clone,
    {
        // A copy only if a retry can ever follow.
        let template = config
            .policy
            .retry_may_follow_first()
            .then(|| request::copy(&request));
        // The clone serves the retries; the service made ready sends the
        // first attempt.
        let service = inner.clone();
        let config = config.clone();
        Self {
            kind: Kind::First {
                future: inner.call(request),
                timer: None,
                parts: FirstParts {
                    clock: Clock::unread(),
                    service,
                    template,
                    config,
                    armed: false,
                    done: false,
                },
            },
        }
    }

    /// Sends the first attempt on the policy's word, with no `Action` yet
    /// (see [`Ctx::action`]), for a request that carries something (a
    /// cancellation token, a slot for the report) while nobody hears the
    /// trail and nothing is shared: the plain start ([`first`](Self::first)),
    /// put under the budget before it is first polled (nothing in it is
    /// pinned yet).
    fn on_policy_word(
        inner: &mut S,
        config: &Arc<Config>,
        request: Request<B>,
        extras: Option<Box<Extras>>,
        cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    ) -> Self
    where
        S: Clone,
        B: Clone,
    {
        let Kind::First { future, parts, .. } = Self::first(inner, config, request).kind else {
            unreachable!("`first` starts a `Kind::First`")
        };
        Self {
            kind: Kind::Budgeted {
                attempts: Attempts {
                    state: State::InFlight {
                        future,
                        armed: false,
                    },
                    timer: None,
                    cancelled,
                    ctx: Ctx {
                        action: None,
                        started_lazily: true,
                        clock: parts.clock,
                        service: parts.service,
                        template: parts.template,
                        config: parts.config,
                        extras,
                        listening: false,
                        shared: false,
                    },
                },
            },
        }
    }
}

impl<S, B> Attempts<S, B>
where
    S: Service<Request<B>> + Clone,
    B: Clone,
{
    /// Starts the action in place, before the future is first polled: its
    /// first attempt, or a wait for a hold-off; an error (with its report)
    /// if nothing is to be sent.
    #[inline(always)]
    fn begin(
        &mut self,
        inner: &mut S,
        config: &Config,
        mut request: Request<B>,
        store_down: bool,
    ) -> Result<(), Error<S::Error>> {
        let ctx = &mut self.ctx;
        self.cancelled = ctx
            .extras
            .as_mut()
            .and_then(|e| e.cancel.take())
            .map(|token| Box::pin(token.cancelled_owned()));
        if store_down {
            ctx.step(|action, now| action.shared_store_unavailable(now));
        }
        if let Some(until) = ctx.held_until() {
            // The service asked the client to wait: the core decides whether
            // the first attempt waits or is never sent.
            match ctx.step(|action, now| action.hold_off(now, until)) {
                Decision::WaitUntil(at) => {
                    // Sent later, on a clone made ready then. The service made
                    // ready now is dropped: whatever it reserved (a slot of a
                    // concurrency limit) is released during the wait.
                    drop(std::mem::replace(inner, ctx.service.clone()));
                    ctx.template = Some(request);
                    self.timer = ctx.clock.at(at).map(tokio::time::sleep_until);
                    self.state = State::Waiting { response: None };
                    return Ok(());
                }
                Decision::Stop(_) => return Err(ctx.finish_error(ErrorKind::NotSent)),
                Decision::StartNow | Decision::AwaitResponse { .. } => {}
            }
        }
        let Decision::AwaitResponse { .. } = ctx.step(|action, now| action.attempt_started(now))
        else {
            // The core refused even the first attempt: obey, send nothing.
            return Err(ctx.finish_error(ErrorKind::NotSent));
        };
        let retry_may_follow = ctx.action().retry_may_follow();
        // A copy only if a retry can ever follow.
        if retry_may_follow {
            ctx.template = Some(request::copy(&request));
        }
        // Send on the service made ready; the clone in `ctx` serves the
        // retries.
        if config.attempt_deadlines {
            crate::attempt_info::add_deadline(&mut request, ctx.action());
        }
        self.state = State::InFlight {
            future: inner.call(request),
            armed: false,
        };
        Ok(())
    }
}

type Output<ResB, E> = Result<Response<ResB>, Error<E>>;

impl<S, B, ResB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: Clone,
{
    type Output = Output<ResB, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.as_mut().project().kind.project() {
            KindProj::Passthrough { future } => future
                .poll(cx)
                .map_err(|e| Error::new(ErrorKind::Inner(e), None)),
            KindProj::First {
                future,
                mut timer,
                parts,
            } => {
                assert!(!parts.done, "ResponseFuture polled after completion");
                parts.clock.new_poll();
                let mut response = match future.poll(cx) {
                    Poll::Ready(Ok(response)) => response,
                    Poll::Ready(Err(error)) => {
                        return Poll::Ready(Err(self.first_failed(ErrorKind::Inner(error))))
                    }
                    Poll::Pending => {
                        if !parts.armed {
                            parts.armed = true;
                            let deadline = deadline_of(parts.config.policy.first_attempt());
                            arm(timer.as_mut(), parts.clock.at(deadline));
                        }
                        if !fired(timer.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        // Past the deadline: the attempt is abandoned.
                        return Poll::Ready(Err(self.first_failed(ErrorKind::AttemptTimeout)));
                    }
                };
                // Nobody asked for the report of a plain request's action
                // that needed no retry: `ReportMode::WhenRetried`.
                let unasked = parts.config.report_mode == ReportMode::WhenRetried;
                match first_ending(&parts.config, &mut parts.clock, unasked, &response) {
                    // The common ending: the answered attempt stays (dropped
                    // with the future), the parts are marked done.
                    Some((_, answer)) => {
                        parts.done = true;
                        if let Some(answer) = answer {
                            parts.report(&mut response, answer);
                        }
                        Poll::Ready(Ok(response))
                    }
                    None => self.first_goes_on(response, cx),
                }
            }
            KindProj::Budgeted { attempts } => attempts.poll(cx),
            KindProj::Ended { error } => Poll::Ready(Err(error
                .take()
                .expect("ResponseFuture polled after completion"))),
        }
    }
}

impl<S, B, ResB> ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: Clone,
{
    /// A first attempt sent on the policy's word failed or timed out: the
    /// core is told (an `Action` is created for it), and the future ends.
    #[inline(never)]
    fn first_failed(mut self: Pin<&mut Self>, kind: ErrorKind<S::Error>) -> Error<S::Error> {
        let KindProj::First { parts, .. } = self.as_mut().project().kind.project() else {
            unreachable!("called in the First state")
        };
        let mut ctx = parts.hand_over();
        match kind {
            ErrorKind::AttemptTimeout => ctx.step(|action, now| action.attempt_timed_out(now)),
            _ => ctx.step(|action, now| action.transport_failed(now)),
        };
        let error = ctx.finish_error(kind);
        self.project().kind.set(Kind::Ended { error: None });
        error
    }

    /// A first attempt sent on the policy's word was answered with what the
    /// action must see (a status the policy retries, a 429): it goes on
    /// under the budget, or ends as the core says.
    #[inline(never)]
    fn first_goes_on(
        mut self: Pin<&mut Self>,
        mut response: Response<ResB>,
        cx: &mut Context<'_>,
    ) -> Poll<Output<ResB, S::Error>> {
        let KindProj::First { parts, .. } = self.as_mut().project().kind.project() else {
            unreachable!("called in the First state")
        };
        let mut ctx = parts.hand_over();
        let mut answer = None;
        let decision = ctx.response(&response, &mut answer);
        if let Decision::WaitUntil(until) = decision {
            let timer = ctx.clock.at(until).map(tokio::time::sleep_until);
            self.as_mut().project().kind.set(Kind::Budgeted {
                attempts: Attempts {
                    state: State::Waiting {
                        response: Some(crate::held::compact(response)),
                    },
                    timer,
                    cancelled: None,
                    ctx,
                },
            });
            let KindProj::Budgeted { attempts } = self.project().kind.project() else {
                unreachable!("just set")
            };
            return attempts.poll(cx);
        }
        ctx.finish_response(&mut response, answer);
        self.project().kind.set(Kind::Ended { error: None });
        Poll::Ready(Ok(response))
    }
}

impl<S: Clone, B> FirstParts<S, B> {
    /// Puts the report of a first answer that ended the action in its
    /// response (built by the core from the answer).
    #[inline(always)]
    fn report<ResB>(&self, response: &mut Response<ResB>, answer: FirstAnswer) {
        deliver(
            response,
            answer.into_report(&self.config.policy),
            &self.clock,
        );
    }
}

impl<S, B, ResB> Future for Attempts<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: Clone,
{
    type Output = Output<ResB, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.as_mut().project().ctx.clock.new_poll();
        loop {
            let this = self.as_mut().project();
            if let Some(cancelled) = this.cancelled {
                if cancelled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(self.cancelled());
                }
            }
            let mut this = self.as_mut().project();
            let flow = match this.state.as_mut().project() {
                // An attempt in flight: its answer, its failure, or its
                // deadline. Here rather than in a function of its own: the
                // common ending (a response) is then built once, straight
                // in the caller's output.
                StateProj::InFlight { future, armed } => match future.poll(cx) {
                    Poll::Ready(Ok(mut response)) => {
                        let mut answer = None;
                        let decision = this.ctx.response(&response, &mut answer);
                        if let Decision::WaitUntil(until) = decision {
                            arm(this.timer.as_mut(), this.ctx.clock.at(until));
                            this.state.set(State::Waiting {
                                response: Some(crate::held::compact(response)),
                            });
                            continue;
                        }
                        // The common ending, built straight in the
                        // caller's output.
                        this.state.set(State::Done);
                        if this.cancelled.is_some() {
                            *this.cancelled = None;
                        }
                        this.ctx.finish_response(&mut response, answer);
                        return Poll::Ready(Ok(response));
                    }
                    Poll::Ready(Err(error)) => {
                        this.ctx.step(|action, now| action.transport_failed(now));
                        Some(Err(ErrorKind::Inner(error)))
                    }
                    Poll::Pending => {
                        if !*armed {
                            *armed = true;
                            let deadline = this.ctx.attempt_deadline();
                            arm(this.timer.as_mut(), this.ctx.clock.at(deadline));
                        }
                        if !fired(this.timer.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        // Past the deadline: the attempt is abandoned
                        // (dropped with this state).
                        this.ctx.step(|action, now| action.attempt_timed_out(now));
                        Some(Err(ErrorKind::AttemptTimeout))
                    }
                },
                StateProj::Waiting { .. } | StateProj::Readying { .. } | StateProj::Done => {
                    ready!(self.as_mut().poll_between(cx))
                }
            };
            if let Some(ending) = flow {
                return Poll::Ready(self.end(ending));
            }
        }
    }
}

/// What a state's poll leads to: `None`, another state (loop again); or the
/// ending.
type Turn<ResB, E> = Option<Ending<Response<ResB>, E>>;

impl<S, B, ResB> Attempts<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: Clone,
{
    /// The action ended: the state is done, the caller's token no longer
    /// watched, and [`Ctx::finish`] gives the output.
    #[inline(always)]
    fn end(
        self: Pin<&mut Self>,
        ending: Ending<Response<ResB>, S::Error>,
    ) -> Output<ResB, S::Error> {
        let mut this = self.project();
        this.state.set(State::Done);
        if this.cancelled.is_some() {
            *this.cancelled = None;
        }
        this.ctx.finish(ending)
    }

    /// The caller's token fired: the core records the caller leaving.
    #[inline(never)]
    fn cancelled(self: Pin<&mut Self>) -> Output<ResB, S::Error> {
        let mut this = self.project();
        this.state.set(State::Done);
        *this.cancelled = None;
        this.ctx.step(|action, now| action.caller_left(now));
        Err(this.ctx.finish_error(ErrorKind::Cancelled))
    }

    /// Any state but an attempt in flight (kept out of the hot path).
    #[inline(never)]
    fn poll_between(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn<ResB, S::Error>> {
        match self.as_mut().project().state.project() {
            StateProj::Waiting { .. } => self.poll_waiting(cx),
            StateProj::Readying { .. } => self.poll_readying(cx),
            StateProj::InFlight { .. } => unreachable!("an attempt in flight is polled in `poll`"),
            StateProj::Done => panic!("ResponseFuture polled after completion"),
        }
    }

    /// Between attempts (or before a first attempt held off): the timer is
    /// the earliest next start.
    #[inline(never)]
    fn poll_waiting(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn<ResB, S::Error>> {
        let mut this = self.project();
        if !fired(this.timer.as_mut(), cx) {
            return Poll::Pending;
        }
        let StateProj::Waiting { response } = this.state.as_mut().project() else {
            unreachable!("called in the Waiting state")
        };
        match this.ctx.step(|action, now| action.timer_woke(now)) {
            Decision::StartNow => {
                // Wait for readiness no longer than the latest start.
                let response = response.take();
                let latest = this.ctx.action().latest_start();
                arm(this.timer.as_mut(), this.ctx.clock.at(latest));
                this.state.set(State::Readying { response });
                Poll::Ready(None)
            }
            Decision::WaitUntil(until) => {
                arm(this.timer.as_mut(), this.ctx.clock.at(until));
                Poll::Ready(None)
            }
            Decision::AwaitResponse { .. } | Decision::Stop(_) => {
                Poll::Ready(Some(held(response.take())))
            }
        }
    }

    /// The next attempt may start once the inner service is ready, no later
    /// than the latest start (the timer).
    #[inline(never)]
    fn poll_readying(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn<ResB, S::Error>> {
        let mut this = self.project();
        let StateProj::Readying { response } = this.state.as_mut().project() else {
            unreachable!("called in the Readying state")
        };
        match this.ctx.service.poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(error)) => {
                this.ctx.step(|action, now| action.readiness_failed(now));
                return Poll::Ready(Some(Err(ErrorKind::Inner(error))));
            }
            Poll::Pending => {
                if !fired(this.timer.as_mut(), cx) {
                    return Poll::Pending;
                }
                // Still not ready at the latest start: the core decides (a
                // stop, since the timer never fires early).
                return match this.ctx.step(|action, now| action.transport_not_ready(now)) {
                    Decision::Stop(_) => Poll::Ready(Some(held(response.take()))),
                    _ => {
                        let latest = this.ctx.action().latest_start();
                        arm(this.timer.as_mut(), this.ctx.clock.at(latest));
                        Poll::Ready(None)
                    }
                };
            }
        }
        let Decision::AwaitResponse { .. } =
            this.ctx.step(|action, now| action.attempt_started(now))
        else {
            return Poll::Ready(Some(held(response.take())));
        };
        // Moved for the last possible attempt, copied otherwise.
        let ctx = &mut *this.ctx;
        let request = if ctx.action().retry_may_follow() {
            ctx.template.as_ref().map(request::copy)
        } else {
            ctx.template.take()
        };
        let mut request = request.expect("a copy is kept while another attempt may follow");
        if ctx.config.attempt_deadlines {
            crate::attempt_info::add_deadline(&mut request, ctx.action());
        }
        let future = ctx.service.call(request);
        this.state.set(State::InFlight {
            future,
            armed: false,
        });
        Poll::Ready(None)
    }
}

/// Puts an action's report in its response. A layer below that watches the
/// body for a late status, and has no slot of the caller's to correct, gets
/// a copy first.
#[inline(always)]
fn deliver<ResB>(response: &mut Response<ResB>, report: Report, clock: &Clock) {
    if !response.extensions().is_empty() {
        if let Some(late) = response.extensions_mut().remove::<LateReport>() {
            late.0.fill(report.clone(), clock.origin_if_read());
        }
    }
    response.extensions_mut().insert(report);
}

/// The action stopped between attempts: the last response held during the
/// wait, or nothing sent at all (a first attempt held off).
fn held<R, E>(response: Option<R>) -> Ending<R, E> {
    match response {
        Some(response) => Ok(response),
        None => Err(ErrorKind::NotSent),
    }
}
