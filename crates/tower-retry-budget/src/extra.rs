//! The one interface between the response future and the layer's extras
//! (an observer, a hold-off map, pacing, attempt deadlines; what a request
//! carries: the caller's report slot or cancellation token, a replay
//! handle): what an extra needs from an action reaches it here, and
//! nowhere else.
//!
//! The layer holds its extras in an [`ExtraList`], built once with it; when
//! an action starts, each makes its part of that action (an
//! [`ActionExtra`]), or nothing if the request gives it nothing to do. The
//! future calls the action's parts at fixed moments (before the first
//! attempt, after every step, for every attempt sent and every response,
//! when it ends) through [`Extras`], without knowing what they are.
//!
//! The set is fixed: one field per extra in the list, one per part in the
//! action's parts, all made in one allocation and called directly (a part
//! that does nothing at a moment costs nothing there, and a moment no
//! part's type acts on, [`ActionExtra::MOMENTS`], is skipped with one
//! check). A new extra is one more field in each, and one more line in
//! `each!`. A request with no extras and no extensions makes none: its
//! action's [`Extras`] is empty, allocates nothing, and every moment costs
//! one check.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Extensions, HeaderMap};
use retry_budget::pace::PaceReason;
use retry_budget::retry_after::RetryAfter;
use retry_budget::trail::Event;
use retry_budget::{Action, Answer, ClientEffects, Decision, Report};

use crate::attempt_info::AttemptDeadlines;
use crate::caller::{self, CarriedPart};
use crate::clock::Clock;
use crate::hold_off::HoldOff;
use crate::observer::SharedObserver;
use crate::pace::Pacing;

/// An extra of the layer, shared by every action through it: it makes the
/// part of each action it has something to do for.
pub(crate) trait Extra: Send + Sync + 'static {
    /// Its part of one action.
    type Part: ActionExtra;

    /// Its part of the action of `request` (`None`: an action that never
    /// got a request, the caller's `poll_ready` having failed), if any. It
    /// may mark the request (every attempt is a copy of it).
    fn start(&self, request: Option<&mut Parts>) -> Option<Self::Part>;
}

/// An extra's part of one action, told what happens at fixed moments.
/// Every method does nothing by default.
pub(crate) trait ActionExtra: Send + Sync {
    /// The moments its type acts on (every one, unless it names fewer): an
    /// action none of whose parts acts on a moment skips it (one check).
    /// The trail's events are asked apart, by [`listens`](Self::listens).
    const MOMENTS: Moments = Moments::ALL;

    /// Before the first attempt: what the core must be told first.
    fn before_first(&mut self, _clock: &mut Clock) -> BeforeFirst {
        BeforeFirst::default()
    }

    /// Just before the first attempt is sent (after any wait), if
    /// [`before_first`](Self::before_first) or a wait said it asks:
    /// `Ready(None)`, it may go; `Ready(Some(paced))`, not before that
    /// instant, because of that limit (the core decides); `Pending`, still
    /// asking (a shared store), and `cx` is woken with the answer.
    fn poll_first(&mut self, _cx: &mut Context<'_>, _clock: &mut Clock) -> Poll<Paced> {
        Poll::Ready(None)
    }

    /// Whether it hears the trail's events ([`event`](Self::event)); read
    /// once, when the action starts.
    fn listens(&self) -> bool {
        false
    }

    /// One event the core added to the trail.
    fn event(&mut self, _event: &Event) {}

    /// Whether it shares state with the client's other actions
    /// ([`effects`](Self::effects)); read once, when the action starts.
    fn shares(&self) -> bool {
        false
    }

    /// What the core says is due to the state the client shares, told
    /// when it holds a hold-off (a deposit or withdrawal alone is the
    /// layer's client budget's).
    fn effects(&mut self, _effects: &ClientEffects, _clock: &mut Clock) {}

    /// An attempt is about to be sent with these extensions.
    fn attempt(&mut self, _extensions: &mut Extensions, _action: &Action, _clock: &mut Clock) {}

    /// The head of every response of an attempt (any status), before the
    /// core hears it; `calendar` reads the trusted calendar clock.
    fn head(&mut self, _headers: &HeaderMap, _calendar: &mut dyn FnMut() -> Option<SystemTime>) {}

    /// What it adds to the answer a response gives the core.
    fn answer(&mut self, _answer: &mut Answer<'_>) {}

    /// Whether the caller has gone (polled on every poll of the action).
    fn cancelled(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }

    /// Whether it wants the action's report even when nothing was
    /// retried; read once, when the action starts.
    fn wants_report(&self) -> bool {
        false
    }

    /// The action ended with this report.
    fn report(&mut self, _report: &Report, _clock: &mut Clock) {}

    /// The action ended with a response carrying `report`; `extensions` are
    /// the response's.
    fn deliver(&mut self, _extensions: &mut Extensions, _report: &Report, _clock: &mut Clock) {}
}

/// Changes `answer` in place with one of its setters (which take it by
/// value): a stand-in holds its place meanwhile. For an extra's
/// [`answer`](ActionExtra::answer), when it has something to add.
pub(crate) fn amend<'a>(answer: &mut Answer<'a>, set: impl FnOnce(Answer<'a>) -> Answer<'a>) {
    static STAND_IN: RetryAfter = RetryAfter::Missing;
    let taken = std::mem::replace(answer, Answer::new(0, &STAND_IN));
    *answer = set(taken);
}

/// A pace: not before this elapsed time, because of this limit.
pub(crate) type Paced = Option<(Duration, PaceReason)>;

/// A set of the moments a part acts on ([`ActionExtra::MOMENTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moments(u8);

impl Moments {
    /// None.
    pub(crate) const NONE: Self = Self(0);
    /// [`ActionExtra::before_first`] and [`ActionExtra::poll_first`].
    pub(crate) const BEFORE_FIRST: Self = Self(1);
    /// [`ActionExtra::effects`].
    pub(crate) const EFFECTS: Self = Self(1 << 1);
    /// [`ActionExtra::attempt`].
    pub(crate) const ATTEMPT: Self = Self(1 << 2);
    /// [`ActionExtra::head`].
    pub(crate) const HEAD: Self = Self(1 << 3);
    /// [`ActionExtra::answer`].
    pub(crate) const ANSWER: Self = Self(1 << 4);
    /// [`ActionExtra::cancelled`].
    pub(crate) const CANCELLED: Self = Self(1 << 5);
    /// [`ActionExtra::report`].
    pub(crate) const REPORT: Self = Self(1 << 6);
    /// [`ActionExtra::deliver`].
    pub(crate) const DELIVER: Self = Self(1 << 7);
    /// Every moment.
    pub(crate) const ALL: Self = Self(u8::MAX);

    /// Both sets.
    pub(crate) const fn and(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether `moment` is in the set.
    const fn has(self, moment: Self) -> bool {
        self.0 & moment.0 != 0
    }
}

/// The moments `part`'s type acts on.
const fn moments_of<P: ActionExtra>(_part: &P) -> Moments {
    P::MOMENTS
}

/// What the extras tell the core before the first attempt.
#[derive(Debug, Default, Clone)]
pub(crate) struct BeforeFirst {
    /// A shared store the action's state depends on is down.
    pub(crate) store_down: bool,
    /// The first attempt waits until this elapsed time.
    pub(crate) held_until: Option<Duration>,
    /// Another request was told the service's quota is used up: no first
    /// attempt before this elapsed time (the code the trail gives it).
    pub(crate) quota_held: Option<(Duration, &'static str)>,
    /// The announced quota allows no first attempt before this elapsed
    /// time, because of this limit.
    pub(crate) paced: Paced,
    /// The first attempt is sent only once
    /// [`poll_first`](ActionExtra::poll_first) says so (a fleet's shared
    /// allowance is asked).
    pub(crate) asks: bool,
}

impl BeforeFirst {
    /// Adds what another part said: any store down, the latest hold, the
    /// latest pace (the first given on a tie). Inlined: what a part that
    /// says nothing adds (the default) folds away.
    #[inline(always)]
    fn add(&mut self, said: Self) {
        self.store_down |= said.store_down;
        self.held_until = self.held_until.max(said.held_until);
        self.asks |= said.asks;
        self.quota_held = self.quota_held.max(said.quota_held);
        self.paced = later(self.paced.take(), said.paced);
    }
}

/// The later of two paces (the first on a tie).
#[inline(always)]
fn later(first: Paced, second: Paced) -> Paced {
    match (first, second) {
        (Some(held), Some(until)) if until.0 > held.0 => Some(until),
        (None, second) => second,
        (first, _) => first,
    }
}

/// The extras the layer is configured with, each at most once (configured
/// again, an extra replaces itself); what a request carries (the caller's
/// slot and token, a replay handle) is looked for in every request.
#[derive(Clone, Default)]
pub(crate) struct ExtraList {
    pub(crate) observer: Option<SharedObserver>,
    pub(crate) hold_off: Option<HoldOff>,
    pub(crate) pacing: Option<Pacing>,
    pub(crate) deadlines: Option<AttemptDeadlines>,
}

impl ExtraList {
    /// Whether the layer is configured with no extra.
    fn is_empty(&self) -> bool {
        self.observer.is_none()
            && self.hold_off.is_none()
            && self.pacing.is_none()
            && self.deadlines.is_none()
    }

    /// The parts of the action of a request with these extensions, if the
    /// layer has no configured extra (`None` if it has: see
    /// [`start`](Self::start)): only the request's extensions to look in
    /// (no part made when none of them is there), the request neither
    /// taken apart nor moved.
    #[inline]
    pub(crate) fn found(&self, extensions: &Extensions) -> Option<Extras> {
        if !self.is_empty() {
            return None;
        }
        let mut made = None;
        // Nothing found (the usual request): no part made.
        put(&mut made, caller::carried(extensions), |made| {
            &mut made.carried
        });
        Some(Extras::of(made))
    }

    /// The parts of the action of the request taken apart into `parts`,
    /// which each extra may mark.
    pub(crate) fn start(&self, parts: &mut Parts) -> Extras {
        // The request's own first (the caller's slot is filled before the
        // observer hears the report), then the layer's.
        let carried = caller::carried(&parts.extensions);
        let made = self.configured(carried, Some(parts));
        Extras::of(made)
    }

    /// The parts of an action that never got a request.
    pub(crate) fn without_request(&self) -> Extras {
        Extras::of(self.configured(None, None))
    }

    /// The configured extras' parts, beside `carried`: each put in place
    /// in the one allocation, made when the first part is.
    fn configured(
        &self,
        carried: Option<CarriedPart>,
        mut request: Option<&mut Parts>,
    ) -> Option<Box<Made>> {
        fn part<E: Extra>(extra: Option<&E>, request: &mut Option<&mut Parts>) -> Option<E::Part> {
            extra?.start(request.as_deref_mut())
        }
        let mut made = None;
        put(&mut made, carried, |made| &mut made.carried);
        let watching = part(self.observer.as_ref(), &mut request);
        put(&mut made, watching, |made| &mut made.watching);
        let keyed = part(self.hold_off.as_ref(), &mut request);
        put(&mut made, keyed, |made| &mut made.keyed);
        let paced = part(self.pacing.as_ref(), &mut request);
        put(&mut made, paced, |made| &mut made.paced);
        let deadlines = part(self.deadlines.as_ref(), &mut request);
        put(&mut made, deadlines, |made| &mut made.deadlines);
        made
    }
}

impl std::fmt::Debug for ExtraList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraList")
            .field("observer", &self.observer.is_some())
            .field("hold_off", &self.hold_off.is_some())
            .field("pacing", &self.pacing.is_some())
            .field("deadlines", &self.deadlines.is_some())
            .finish()
    }
}

/// One action's parts, one field per extra, in the order they hear each
/// moment.
#[derive(Default)]
struct Made {
    carried: Option<CarriedPart>,
    watching: Option<<SharedObserver as Extra>::Part>,
    keyed: Option<<HoldOff as Extra>::Part>,
    paced: Option<<Pacing as Extra>::Part>,
    deadlines: Option<<AttemptDeadlines as Extra>::Part>,
}

/// Runs `$body` on each part `$made` has, in order, as `$part` (each call
/// is to the part's own type: a moment it does nothing at costs nothing).
macro_rules! each {
    ($made:expr, $part:ident => $body:expr) => {{
        let made: &mut Made = $made;
        if let Some($part) = &mut made.carried {
            $body;
        }
        if let Some($part) = &mut made.watching {
            $body;
        }
        if let Some($part) = &mut made.keyed {
            $body;
        }
        if let Some($part) = &mut made.paced {
            $body;
        }
        if let Some($part) = &mut made.deadlines {
            $body;
        }
    }};
}

/// Puts `part`, if made, in its `field` of `made`, allocated for the first
/// part (the parts moved once, into place).
#[inline(always)]
fn put<P>(made: &mut Option<Box<Made>>, part: Option<P>, field: fn(&mut Made) -> &mut Option<P>) {
    if part.is_some() {
        *field(made.get_or_insert_with(Box::default)) = part;
    }
}

/// The moments [`Extras`] tells an action's parts of out of line (the
/// check for no parts at all is inlined where the action is).
impl Made {
    #[inline(never)]
    fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        let mut before = BeforeFirst::default();
        each!(self, part => before.add(part.before_first(clock)));
        before
    }

    #[inline(never)]
    fn attempt(&mut self, extensions: &mut Extensions, action: &Action, clock: &mut Clock) {
        each!(self, part => part.attempt(extensions, action, clock));
    }

    #[inline(never)]
    fn report(&mut self, report: &Report, clock: &mut Clock) {
        each!(self, part => part.report(report, clock));
    }
}

/// One action's extras, and whether a `tracing` subscriber hears its
/// trail. Its parts are made in one allocation, none if no extra made one.
pub(crate) struct Extras {
    made: Option<Box<Made>>,
    /// The moments some part acts on (none without parts).
    moments: Moments,
    /// Whether a `tracing` subscriber wants the layer's DEBUG events, read
    /// once, when the action starts.
    traced: bool,
    /// Whether an extra hears the trail.
    hearing: bool,
    shares: bool,
    wants_report: bool,
}

impl Extras {
    /// None; the subscriber asked once.
    #[inline(always)]
    fn traced() -> Self {
        Self {
            made: None,
            moments: Moments::NONE,
            traced: crate::trace::listening(),
            hearing: false,
            shares: false,
            wants_report: false,
        }
    }

    /// The parts made for one action, if any; what each asks for is read
    /// once.
    #[inline(always)]
    fn of(made: Option<Box<Made>>) -> Self {
        match made {
            Some(made) => Self::with(made),
            None => Self::traced(),
        }
    }

    /// [`of`](Self::of) some parts.
    fn with(mut made: Box<Made>) -> Self {
        let mut extras = Self::traced();
        let (mut hearing, mut shares, mut wants_report) = (false, false, false);
        let mut moments = Moments::NONE;
        each!(&mut made, part => {
            moments = moments.and(moments_of(part));
            hearing |= part.listens();
            shares |= part.shares();
            wants_report |= part.wants_report();
        });
        extras.moments = moments;
        extras.hearing = hearing;
        extras.shares = shares;
        extras.wants_report = wants_report;
        extras.made = Some(made);
        extras
    }

    /// Whether anyone hears the trail as it grows (the subscriber, or an
    /// extra): if not, a step need not look at the events it added.
    pub(crate) const fn listening(&self) -> bool {
        self.traced || self.hearing
    }

    /// Whether the client shares state with this action (a client budget,
    /// or an extra's: a hold-off map): if not, a step does not ask the core
    /// for the effects on it.
    pub(crate) const fn shares(&self) -> bool {
        self.shares
    }

    /// The client shares state of its own with this action (its budget).
    pub(crate) fn share(&mut self) {
        self.shares = true;
    }

    /// Whether any extra wants the report of an action that retried nothing.
    pub(crate) const fn want_report(&self) -> bool {
        self.wants_report
    }

    /// Feeds `input` to `action` at elapsed `now`; the events it added are
    /// traced if a subscriber wants them, and heard by the extras that
    /// listen.
    pub(crate) fn step(
        &mut self,
        action: &mut Action,
        now: Duration,
        input: impl FnOnce(&mut Action, Duration) -> Decision,
    ) -> Decision {
        let traced = self.traced;
        match self.made.as_deref_mut().filter(|_| self.hearing) {
            Some(made) => {
                let heard = |event: &Event| each!(&mut *made, part => part.event(event));
                crate::trace::step(action, now, traced, heard, input)
            }
            None => crate::trace::step(action, now, traced, |_| {}, input),
        }
    }

    /// See [`ActionExtra::before_first`]: any store down, the latest hold,
    /// the latest pace.
    #[inline(always)]
    pub(crate) fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        match self.acting(Moments::BEFORE_FIRST) {
            Some(made) => made.before_first(clock),
            None => BeforeFirst::default(),
        }
    }

    /// See [`ActionExtra::poll_first`]: every part asked (each registers
    /// its waker); the latest pace.
    pub(crate) fn poll_first(&mut self, cx: &mut Context<'_>, clock: &mut Clock) -> Poll<Paced> {
        let Some(made) = self.acting(Moments::BEFORE_FIRST) else {
            return Poll::Ready(None);
        };
        let (mut pending, mut paced): (bool, Paced) = (false, None);
        each!(made, part => match part.poll_first(cx, clock) {
            Poll::Pending => pending = true,
            Poll::Ready(said) => paced = later(paced, said),
        });
        match paced {
            Some(paced) => Poll::Ready(Some(paced)),
            None if pending => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    /// See [`ActionExtra::effects`].
    pub(crate) fn effects(&mut self, effects: &ClientEffects, clock: &mut Clock) {
        if let Some(made) = self.acting(Moments::EFFECTS) {
            each!(made, part => part.effects(effects, clock));
        }
    }

    /// See [`ActionExtra::attempt`].
    #[inline]
    pub(crate) fn attempt(
        &mut self,
        extensions: &mut Extensions,
        action: &Action,
        clock: &mut Clock,
    ) {
        if let Some(made) = self.acting(Moments::ATTEMPT) {
            made.attempt(extensions, action, clock);
        }
    }

    /// See [`ActionExtra::head`].
    #[inline]
    pub(crate) fn head(
        &mut self,
        headers: &HeaderMap,
        calendar: &mut dyn FnMut() -> Option<SystemTime>,
    ) {
        if let Some(made) = self.acting(Moments::HEAD) {
            each!(made, part => part.head(headers, calendar));
        }
    }

    /// See [`ActionExtra::answer`].
    #[inline]
    pub(crate) fn answer(&mut self, answer: &mut Answer<'_>) {
        if let Some(made) = self.acting(Moments::ANSWER) {
            each!(made, part => part.answer(answer));
        }
    }

    /// See [`ActionExtra::cancelled`]: whether any part says so (each asked
    /// until one does).
    #[inline]
    pub(crate) fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        let mut cancelled = false;
        if let Some(made) = self.acting(Moments::CANCELLED) {
            each!(made, part => cancelled = cancelled || part.cancelled(cx));
        }
        cancelled
    }

    /// The parts, if any acts on `moment`.
    #[inline(always)]
    fn acting(&mut self, moment: Moments) -> Option<&mut Made> {
        if !self.moments.has(moment) {
            return None;
        }
        self.made.as_deref_mut()
    }

    /// See [`ActionExtra::report`].
    #[inline]
    pub(crate) fn report(&mut self, report: &Report, clock: &mut Clock) {
        if let Some(made) = self.acting(Moments::REPORT) {
            made.report(report, clock);
        }
    }

    /// See [`ActionExtra::deliver`].
    pub(crate) fn deliver(
        &mut self,
        extensions: &mut Extensions,
        report: &Report,
        clock: &mut Clock,
    ) {
        if let Some(made) = self.acting(Moments::DELIVER) {
            each!(made, part => part.deliver(extensions, report, clock));
        }
    }
}
