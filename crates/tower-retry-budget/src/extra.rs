//! The one interface between the response future and the layer's extras
//! (an observer, a hold-off map, the caller's report slot or cancellation
//! token, a replay handle, attempt deadlines): what an extra needs from an
//! action reaches it here, and nowhere else.
//!
//! The layer holds a list of [`Extra`]s, built once with it; when an action
//! starts, each makes its part of that action (an [`ActionExtra`]), or
//! nothing if the request gives it nothing to do. The future calls the
//! action's parts at fixed moments (before the first attempt, after every
//! step, for every attempt sent and every response, when it ends) without
//! knowing what they are, so a new extra plugs in as one more entry in the
//! layer's list. A request with no extras and no extensions makes none:
//! its action's [`Extras`] is empty, allocates nothing, and every moment
//! costs one check.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::any::TypeId;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Extensions, HeaderMap};
use retry_budget::pace::PaceReason;
use retry_budget::retry_after::RetryAfter;
use retry_budget::trail::Event;
use retry_budget::{Action, Answer, ClientEffects, Decision, Report};

use crate::clock::Clock;

mod many;

/// An extra of the layer, shared by every action through it: it makes the
/// part of each action it has something to do for.
pub(crate) trait Extra: Send + Sync + 'static {
    /// Its part of the action of `request` (`None`: an action that never
    /// got a request, the caller's `poll_ready` having failed), if any. It
    /// may mark the request (every attempt is a copy of it).
    fn start(&self, request: Option<&mut Parts>) -> Option<Box<dyn ActionExtra>>;
}

/// An extra made by what a request's extensions carry alone (the caller's
/// token or report slot, a replay handle): looked for in the extensions,
/// without taking the request apart. Every one is an [`Extra`] too.
pub(crate) trait RequestExtra: Send + Sync + 'static {
    /// Its part of the action of a request with these extensions, if any.
    fn find(&self, extensions: &Extensions) -> Option<Box<dyn ActionExtra>>;
}

impl<E: RequestExtra> Extra for E {
    fn start(&self, request: Option<&mut Parts>) -> Option<Box<dyn ActionExtra>> {
        self.find(&request?.extensions)
    }
}

/// An extra's part of one action, told what happens at fixed moments.
/// Every method does nothing by default.
pub(crate) trait ActionExtra: Send + Sync {
    /// The moments it acts on: it is not called at the others (every one,
    /// unless it names fewer). Read once, when the action starts.
    fn moments(&self) -> Moments {
        Moments::ALL
    }

    /// What it asks for, read once, when the action starts: its
    /// [`moments`](Self::moments), whether it [`listens`](Self::listens),
    /// [`shares`](Self::shares) and [`wants_report`](Self::wants_report)
    /// (one call for the four).
    fn asks(&self) -> Asks {
        Asks {
            moments: self.moments(),
            listens: self.listens(),
            shares: self.shares(),
            wants_report: self.wants_report(),
        }
    }

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

    /// Whether it hears the trail's events ([`event`](Self::event)).
    fn listens(&self) -> bool {
        false
    }

    /// One event the core added to the trail.
    fn event(&mut self, _event: &Event) {}

    /// Whether it shares state with the client's other actions
    /// ([`effects`](Self::effects)).
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

    /// Whether it wants the action's report even when nothing was retried.
    fn wants_report(&self) -> bool {
        false
    }

    /// The action ended with this report.
    fn report(&mut self, _report: &Report, _clock: &mut Clock) {}

    /// The action ended with a response carrying `report`; `extensions` are
    /// the response's.
    fn deliver(&mut self, _extensions: &mut Extensions, _report: &Report, _clock: &mut Clock) {}
}

/// What an [`ActionExtra`] asks for (see [`ActionExtra::asks`]).
pub(crate) struct Asks {
    moments: Moments,
    listens: bool,
    shares: bool,
    wants_report: bool,
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

/// A set of the moments an [`ActionExtra`] acts on (the trail's events
/// are asked separately, by [`ActionExtra::listens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moments(u16);

impl Moments {
    /// None.
    pub(crate) const NONE: Self = Self(0);
    /// [`ActionExtra::before_first`].
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
    /// [`ActionExtra::event`] (set from [`ActionExtra::listens`]).
    const EVENT: Self = Self(1 << 8);
    /// Every moment.
    pub(crate) const ALL: Self = Self(u16::MAX);

    /// Both sets.
    pub(crate) const fn and(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// This set but for `other`'s moments.
    const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether `moment` is in the set.
    const fn has(self, moment: Self) -> bool {
        self.0 & moment.0 != 0
    }
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

/// The layer's list of extras, in the order they hear each moment, and
/// those made by a request's own extensions (looked for only in a request
/// that has some).
#[derive(Clone, Default)]
pub(crate) struct ExtraList {
    /// Each with its type: configured again, an extra replaces itself.
    configured: Vec<(TypeId, Arc<dyn Extra>)>,
    by_request: Vec<Arc<dyn RequestExtra>>,
}

impl ExtraList {
    /// Extras made only by what a request carries.
    pub(crate) fn by_request(extras: Vec<Arc<dyn RequestExtra>>) -> Self {
        Self {
            configured: Vec::new(),
            by_request: extras,
        }
    }

    /// Adds an extra the layer is configured with, in place of one of its
    /// type given before.
    pub(crate) fn set<E: Extra>(&mut self, extra: E) {
        let extra: (TypeId, Arc<dyn Extra>) = (TypeId::of::<E>(), Arc::new(extra));
        match self.configured.iter_mut().find(|(id, _)| *id == extra.0) {
            Some(given) => *given = extra,
            None => self.configured.push(extra),
        }
    }

    /// Whether the layer is configured with an extra of type `E`.
    #[cfg(test)]
    pub(crate) fn has<E: Extra>(&self) -> bool {
        self.configured
            .iter()
            .any(|(id, _)| *id == TypeId::of::<E>())
    }

    /// The parts of the action of a request with these extensions, if the
    /// layer has no configured extra (`None` if it has: see
    /// [`start`](Self::start)): only the request's extensions to look in
    /// (no part made when none of them is there), the request neither
    /// taken apart nor moved.
    #[inline]
    pub(crate) fn found(&self, extensions: &Extensions) -> Option<Extras> {
        if !self.configured.is_empty() {
            return None;
        }
        let mut made = self
            .by_request
            .iter()
            .filter_map(|extra| extra.find(extensions));
        // Nothing found (the usual request): no part to make.
        let Some(first) = made.next() else {
            return Some(Extras::traced());
        };
        Some(Extras::of(std::iter::once(first).chain(made)))
    }

    /// The parts of the action of the request taken apart into `parts`,
    /// which each extra may mark.
    pub(crate) fn start(&self, parts: &mut Parts) -> Extras {
        // The request's own first (the caller's slot is filled before the
        // observer hears the report), then the layer's.
        let found = self.by_request.iter().map(|extra| Maker::Found(&**extra));
        let configured = self.configured.iter();
        let made = found
            .chain(configured.map(|(_, extra)| Maker::Configured(&**extra)))
            .filter_map(|maker| match maker {
                Maker::Found(extra) => extra.find(&parts.extensions),
                Maker::Configured(extra) => extra.start(Some(&mut *parts)),
            });
        Extras::of(made)
    }

    /// The parts of an action that never got a request.
    pub(crate) fn without_request(&self) -> Extras {
        Extras::of(
            self.configured
                .iter()
                .filter_map(|(_, extra)| extra.start(None)),
        )
    }
}

/// One maker of an action's part, in the order they are asked.
enum Maker<'a> {
    Found(&'a dyn RequestExtra),
    Configured(&'a dyn Extra),
}

impl std::fmt::Debug for ExtraList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraList")
            .field("configured", &self.configured.len())
            .field("by_request", &self.by_request.len())
            .finish()
    }
}

/// One action's extras, and whether a `tracing` subscriber hears its
/// trail. One extra is kept as it is (an action with an observer, say,
/// allocates only the observer's part); several, as one [`Many`](many::Many), which
/// holds them in one allocation.
pub(crate) struct Extras {
    part: Option<Box<dyn ActionExtra>>,
    /// The moments its part acts on (none without a part): a moment no
    /// extra acts on costs one check.
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
            part: None,
            moments: Moments::NONE,
            traced: crate::trace::listening(),
            hearing: false,
            shares: false,
            wants_report: false,
        }
    }

    /// The parts made for one action, in order; what each asks for is read
    /// once.
    fn of(mut made: impl Iterator<Item = Box<dyn ActionExtra>>) -> Self {
        let mut extras = Self::traced();
        let Some(first) = made.next() else {
            return extras;
        };
        let Some(second) = made.next() else {
            extras.hear(&*first);
            extras.part = Some(first);
            return extras;
        };
        // At most one part per extra still asked: room for all of them in
        // the one allocation of a `Many` of that size.
        let room = made.size_hint().1.unwrap_or(usize::MAX).saturating_add(2);
        let all = [first, second].into_iter().chain(made);
        let many = many::of(room, all, |part| extras.hear(part));
        extras.part = Some(many);
        extras
    }

    /// Adds what `part` acts on and asks for; returns its moments (the
    /// trail's events included).
    fn hear(&mut self, part: &dyn ActionExtra) -> Moments {
        let asks = part.asks();
        let event = if asks.listens {
            Moments::EVENT
        } else {
            Moments::NONE
        };
        let moments = asks.moments.without(Moments::EVENT).and(event);
        self.moments = self.moments.and(moments);
        self.hearing |= asks.listens;
        self.shares |= asks.shares;
        self.wants_report |= asks.wants_report;
        moments
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
        match self.acting(Moments::EVENT) {
            Some(part) => crate::trace::step(action, now, traced, |event| part.event(event), input),
            None => crate::trace::step(action, now, traced, |_| {}, input),
        }
    }

    /// See [`ActionExtra::before_first`].
    #[inline]
    pub(crate) fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        match self.acting(Moments::BEFORE_FIRST) {
            Some(part) => part.before_first(clock),
            None => BeforeFirst::default(),
        }
    }

    /// See [`ActionExtra::poll_first`].
    pub(crate) fn poll_first(&mut self, cx: &mut Context<'_>, clock: &mut Clock) -> Poll<Paced> {
        // Asked only of a part whose `before_first` said it asks.
        match self.acting(Moments::BEFORE_FIRST) {
            Some(part) => part.poll_first(cx, clock),
            None => Poll::Ready(None),
        }
    }

    /// See [`ActionExtra::effects`].
    pub(crate) fn effects(&mut self, effects: &ClientEffects, clock: &mut Clock) {
        if let Some(part) = self.acting(Moments::EFFECTS) {
            part.effects(effects, clock);
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
        if let Some(part) = self.acting(Moments::ATTEMPT) {
            part.attempt(extensions, action, clock);
        }
    }

    /// See [`ActionExtra::head`].
    #[inline]
    pub(crate) fn head(
        &mut self,
        headers: &HeaderMap,
        calendar: &mut dyn FnMut() -> Option<SystemTime>,
    ) {
        if let Some(part) = self.acting(Moments::HEAD) {
            part.head(headers, calendar);
        }
    }

    /// See [`ActionExtra::answer`].
    #[inline]
    pub(crate) fn answer(&mut self, answer: &mut Answer<'_>) {
        if let Some(part) = self.acting(Moments::ANSWER) {
            part.answer(answer);
        }
    }

    /// See [`ActionExtra::cancelled`].
    #[inline]
    pub(crate) fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.acting(Moments::CANCELLED)
            .is_some_and(|part| part.cancelled(cx))
    }

    /// The part, if it acts on `moment`.
    #[inline]
    fn acting(&mut self, moment: Moments) -> Option<&mut Box<dyn ActionExtra>> {
        if !self.moments.has(moment) {
            return None;
        }
        self.part.as_mut()
    }

    /// See [`ActionExtra::report`].
    pub(crate) fn report(&mut self, report: &Report, clock: &mut Clock) {
        if let Some(part) = self.acting(Moments::REPORT) {
            part.report(report, clock);
        }
    }

    /// See [`ActionExtra::deliver`].
    pub(crate) fn deliver(
        &mut self,
        extensions: &mut Extensions,
        report: &Report,
        clock: &mut Clock,
    ) {
        if let Some(part) = self.acting(Moments::DELIVER) {
            part.deliver(extensions, report, clock);
        }
    }
}
