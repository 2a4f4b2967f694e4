//! The trail: one [`Event`] for every step of an action, in order, kept in
//! a [`Trail`].
//!
//! Every event carries the elapsed time at which it happened and, where a
//! budget applies, the budget that remained then. The trail serializes to JSON
//! with durations as seconds (`at_s`, `remaining_budget_s`, ...).
//!
//! Most actions end at their first answer, and most reports are never read
//! event by event: a first answer is three events (the attempt started, the
//! response, the stop) that follow from a handful of numbers. A trail is
//! therefore kept in one of two forms, never both: those numbers, from which
//! the first answer's events are built on demand, or the events written out
//! (a `Vec<Event>`), which any other event switches it to. Neither an action
//! nor its report allocates for a trail nobody reads (what that saves is in
//! the layer's benches, `BENCHMARKS.md`). The public API does not show the
//! choice: a trail reads as a slice.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

pub use crate::event::{Event, EventKind, ResetRead, RetryAfterSeen, WaitBasis};
use crate::retry_after::RetryAfter;
use crate::Outcome;

/// The first answer's events, kept as numbers: the first attempt started at
/// `started` with its reservation ending at `reservation_end`, answered
/// `status` with no `Retry-After` at `answered`, and the action stopped
/// there with `outcome`. `budget` is the total budget, from which every
/// event's remaining budget follows. Times in nanoseconds (an elapsed time
/// that does not fit is simply written out as an event).
#[derive(Debug, Clone, Copy, Default)]
struct FirstAnswer {
    /// How many of the three events these numbers stand for (0 to 3).
    count: u8,
    status: u16,
    outcome: Option<Outcome>,
    started: u64,
    reservation_end: u64,
    answered: u64,
    budget: u64,
}

/// A time in whole nanoseconds, if it fits (in `u64` arithmetic: this runs
/// for every event).
fn nanos(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

impl FirstAnswer {
    /// The first attempt started at `at`, if nothing came before.
    fn start(&mut self, at: Duration, budget: Duration, reservation_end: Duration) -> bool {
        let (0, Some(at), Some(budget), Some(end)) =
            (self.count, nanos(at), nanos(budget), nanos(reservation_end))
        else {
            return false;
        };
        *self = Self {
            count: 1,
            started: at,
            reservation_end: end,
            budget,
            ..*self
        };
        true
    }

    /// Its response, `status` with no `Retry-After`, at `at`, if it
    /// follows the start directly.
    fn answer(&mut self, at: Duration, budget: Duration, status: u16) -> bool {
        let (1, Some(at), Some(budget)) = (self.count, nanos(at), nanos(budget)) else {
            return false;
        };
        if budget != self.budget {
            return false;
        }
        self.status = status;
        self.answered = at;
        self.count = 2;
        true
    }

    /// The stop at `at` with `outcome`, if it follows that response at
    /// the same time.
    fn stop(&mut self, at: Duration, budget: Duration, outcome: Outcome) -> bool {
        let (2, Some(at), Some(budget)) = (self.count, nanos(at), nanos(budget)) else {
            return false;
        };
        if at != self.answered || budget != self.budget {
            return false;
        }
        self.outcome = Some(outcome);
        self.count = 3;
        true
    }

    /// The event at `index` of those these numbers stand for.
    fn event(&self, index: usize) -> Option<Event> {
        if index >= usize::from(self.count) {
            return None;
        }
        let (at, kind) = match (index, self.outcome) {
            (0, _) => (
                self.started,
                EventKind::AttemptStarted {
                    attempt: 1,
                    reservation_end: Duration::from_nanos(self.reservation_end),
                },
            ),
            (1, _) => (
                self.answered,
                EventKind::Response {
                    attempt: 1,
                    status: self.status,
                    retry_after: RetryAfterSeen::Missing,
                },
            ),
            (_, Some(outcome)) => (self.answered, EventKind::Stopped { outcome }),
            (_, None) => return None,
        };
        // The remaining budget in nanoseconds too: one conversion fewer.
        Some(Event {
            at: Duration::from_nanos(at),
            remaining_budget: Duration::from_nanos(self.budget.saturating_sub(at)),
            kind,
        })
    }

    /// The events these numbers stand for.
    fn write(&self) -> Vec<Event> {
        let mut events = Vec::with_capacity(3);
        events.extend((0..usize::from(self.count)).map_while(|i| self.event(i)));
        events
    }

    /// The events these numbers stand for (at least one), as a slice's
    /// storage: its places past `count` repeat the first event.
    fn built(&self) -> [Event; 3] {
        let first = self.event(0);
        std::array::from_fn(|i| {
            let event = self.event(i).or_else(|| first.clone());
            event.expect("a trail built as a slice has an event")
        })
    }

    /// The time the first attempt was in flight, if it was answered.
    fn request_time(&self) -> Duration {
        if self.count >= 2 {
            Duration::from_nanos(self.answered.saturating_sub(self.started))
        } else {
            Duration::ZERO
        }
    }
}

/// The trail of an action: its [`Event`]s in order. Reads as a slice
/// (`Deref<Target = [Event]>`); built from a `Vec<Event>` or an iterator.
///
/// ```
/// use retry_budget::{Action, Policy, retry_after::RetryAfter};
/// use std::time::Duration;
///
/// let mut action = Action::new(Policy::default());
/// action.attempt_started(Duration::ZERO);
/// action.response(Duration::from_millis(40), 200, &RetryAfter::Missing, None);
/// let report = action.into_report().unwrap();
/// assert_eq!(report.events.len(), 3); // started, response, stopped
/// assert_eq!(report.events.first().map(|e| e.at), Some(Duration::ZERO));
/// ```
#[derive(Clone)]
pub struct Trail {
    store: Store,
}

/// The one form a trail is kept in.
#[derive(Clone)]
enum Store {
    /// Nothing but (part of) a first answer has happened: its events as
    /// numbers. `built` holds them built once a reader borrowed them as a
    /// slice: derived from `numbers` and never written to (the next event
    /// switches the trail to [`Store::Written`]). Its first `count` events
    /// are the trail (a thin box: the action holding the trail is smaller).
    First {
        numbers: FirstAnswer,
        built: OnceLock<Box<[Event; 3]>>,
    },
    /// Every event, in order.
    Written(Vec<Event>),
}

impl Default for Trail {
    fn default() -> Self {
        Self {
            store: Store::First {
                numbers: FirstAnswer::default(),
                built: OnceLock::new(),
            },
        }
    }
}

impl Trail {
    /// An empty trail (no allocation).
    pub fn new() -> Self {
        Self::default()
    }

    /// The events, as a slice (a first answer's built at the first read).
    pub fn as_slice(&self) -> &[Event] {
        match &self.store {
            Store::Written(events) => events,
            Store::First { numbers, .. } if numbers.count == 0 => &[],
            Store::First { numbers, built } => {
                let count = usize::from(numbers.count);
                &built.get_or_init(|| Box::new(numbers.built()))[..count]
            }
        }
    }

    /// How many events the trail holds (builds nothing).
    pub fn len(&self) -> usize {
        match &self.store {
            Store::Written(events) => events.len(),
            Store::First { numbers, .. } => usize::from(numbers.count),
        }
    }

    /// Whether the trail holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The event at `index`, without building the whole trail: borrowed if
    /// it is written (or already built for a reader), built for the caller
    /// if not. For a reader that looks at a few events once (a listener
    /// handed each new event) and would otherwise make the trail build
    /// itself.
    ///
    /// ```
    /// use retry_budget::{Action, Policy, retry_after::RetryAfter, trail::EventKind};
    /// use std::time::Duration;
    ///
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(Duration::ZERO);
    /// action.response(Duration::from_millis(40), 200, &RetryAfter::Missing, None);
    /// let trail = action.trail();
    /// assert_eq!(trail.len(), 3);
    /// let last = trail.get(2).unwrap();
    /// assert!(matches!(last.kind, EventKind::Stopped { .. }));
    /// assert!(trail.get(3).is_none());
    /// ```
    pub fn get(&self, index: usize) -> Option<Cow<'_, Event>> {
        match &self.store {
            Store::Written(events) => events.get(index).map(Cow::Borrowed),
            Store::First { numbers, built } => match built.get() {
                Some(events) if index < usize::from(numbers.count) => {
                    events.get(index).map(Cow::Borrowed)
                }
                Some(_) => None,
                None => numbers.event(index).map(Cow::Owned),
            },
        }
    }

    /// Hands each event from `from` on to `hear`, in order, without
    /// building the whole trail: borrowed if written (or already built for
    /// a reader), each built for the call if not. The form is looked at
    /// once, not per event as [`get`](Self::get) does.
    pub fn each_from(&self, from: usize, mut hear: impl FnMut(&Event)) {
        let events = match &self.store {
            Store::Written(events) => events.get(from..).unwrap_or_default(),
            Store::First { numbers, built } => match built.get() {
                Some(events) => events
                    .get(from..usize::from(numbers.count))
                    .unwrap_or_default(),
                None => {
                    (from..usize::from(numbers.count))
                        .map_while(|i| numbers.event(i))
                        .for_each(|event| hear(&event));
                    return;
                }
            },
        };
        events.iter().for_each(hear);
    }

    /// The time spent with an attempt in flight and the time spent
    /// waiting, in total, read off the events: an attempt runs from its
    /// start to its response, time-out, failure or the caller's leaving; a
    /// wait from its `waited_from` to the wake or the leaving. (Reads a
    /// first answer from its numbers, building nothing.)
    pub(crate) fn times(&self) -> (Duration, Duration) {
        let events = match &self.store {
            Store::Written(events) => events,
            Store::First { numbers, .. } => return (numbers.request_time(), Duration::ZERO),
        };
        let (mut request, mut wait) = (Duration::ZERO, Duration::ZERO);
        let mut in_flight = None;
        for event in events {
            match event.kind {
                EventKind::AttemptStarted { .. } => in_flight = Some(event.at),
                EventKind::Response { .. }
                | EventKind::AttemptTimedOut { .. }
                | EventKind::TransportFailed { .. }
                | EventKind::CallerLeft { waited_from: None } => {
                    if let Some(started) = in_flight.take() {
                        request = request.saturating_add(event.at.saturating_sub(started));
                    }
                }
                EventKind::Woke { waited_from, .. }
                | EventKind::CallerLeft {
                    waited_from: Some(waited_from),
                } => wait = wait.saturating_add(event.at.saturating_sub(waited_from)),
                _ => {}
            }
        }
        (request, wait)
    }

    /// The events, as a `Vec`.
    pub fn into_vec(self) -> Vec<Event> {
        match self.store {
            Store::Written(events) => events,
            // Built or not, the events follow from the numbers.
            Store::First { numbers, .. } => numbers.write(),
        }
    }

    /// The events written out, to be added to: switches a first answer's
    /// numbers to their events.
    fn written_mut(&mut self) -> &mut Vec<Event> {
        if let Store::First { .. } = self.store {
            let first = std::mem::replace(&mut self.store, Store::Written(Vec::new()));
            self.store = Store::Written(Trail { store: first }.into_vec());
        }
        match &mut self.store {
            Store::Written(events) => events,
            Store::First { .. } => unreachable!("written out just above"),
        }
    }

    /// The first answer's numbers, if the trail is still kept as numbers
    /// and nobody has read them as a slice.
    fn numbers_mut(&mut self) -> Option<&mut FirstAnswer> {
        match &mut self.store {
            Store::First { numbers, built } if built.get().is_none() => Some(numbers),
            _ => None,
        }
    }

    /// Appends the event `kind` at `at` under a total budget of `budget`,
    /// written out (the three events a first answer may keep as numbers
    /// come through [`attempt_started`](Self::attempt_started),
    /// [`response`](Self::response) and [`stopped`](Self::stopped)).
    pub(crate) fn record(&mut self, at: Duration, budget: Duration, kind: EventKind) {
        self.push(Event {
            at,
            remaining_budget: budget.saturating_sub(at),
            kind,
        });
    }

    /// Appends the start of attempt `attempt` at `at`, its reservation
    /// ending at `reservation_end`: kept as numbers if it starts a first
    /// answer, written otherwise.
    pub(crate) fn attempt_started(
        &mut self,
        at: Duration,
        budget: Duration,
        attempt: u32,
        reservation_end: Duration,
    ) {
        if attempt == 1
            && self
                .numbers_mut()
                .is_some_and(|first| first.start(at, budget, reservation_end))
        {
            return;
        }
        self.record(
            at,
            budget,
            EventKind::AttemptStarted {
                attempt,
                reservation_end,
            },
        );
    }

    /// Appends the response of attempt `attempt` at `at` (`Retry-After` as
    /// seen at receipt, given the calendar reading): likewise.
    pub(crate) fn response(
        &mut self,
        at: Duration,
        budget: Duration,
        (attempt, status): (u32, u16),
        retry_after: &RetryAfter,
        calendar: Option<SystemTime>,
    ) {
        if attempt == 1
            && matches!(retry_after, RetryAfter::Missing)
            && self
                .numbers_mut()
                .is_some_and(|first| first.answer(at, budget, status))
        {
            return;
        }
        self.record(
            at,
            budget,
            EventKind::Response {
                attempt,
                status,
                retry_after: RetryAfterSeen::at_receipt(retry_after, calendar),
            },
        );
    }

    /// Appends the stop at `at` with `outcome`: likewise.
    pub(crate) fn stopped(&mut self, at: Duration, budget: Duration, outcome: Outcome) {
        if self
            .numbers_mut()
            .is_some_and(|first| first.stop(at, budget, outcome))
        {
            return;
        }
        self.record(at, budget, EventKind::Stopped { outcome });
    }

    /// Appends an event (written out).
    pub(crate) fn push(&mut self, event: Event) {
        self.written_mut().push(event);
    }
}

impl Deref for Trail {
    type Target = [Event];

    fn deref(&self) -> &[Event] {
        self.as_slice()
    }
}

impl PartialEq for Trail {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Trail {}

impl fmt::Debug for Trail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl From<Vec<Event>> for Trail {
    fn from(events: Vec<Event>) -> Self {
        Self {
            store: Store::Written(events),
        }
    }
}

impl FromIterator<Event> for Trail {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl Extend<Event> for Trail {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, iter: I) {
        for event in iter {
            self.push(event);
        }
    }
}

impl<'a> IntoIterator for &'a Trail {
    type Item = &'a Event;
    type IntoIter = std::slice::Iter<'a, Event>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl IntoIterator for Trail {
    type Item = Event;
    type IntoIter = std::vec::IntoIter<Event>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl PartialEq<Vec<Event>> for Trail {
    fn eq(&self, other: &Vec<Event>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<Trail> for Vec<Event> {
    fn eq(&self, other: &Trail) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[Event]> for Trail {
    fn eq(&self, other: &[Event]) -> bool {
        self.as_slice() == other
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Trail {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Trail {
        /// Whether the events exist as events (written out, or built for
        /// a reader), not only as a first answer's numbers.
        fn written(&self) -> bool {
            match &self.store {
                Store::Written(_) => true,
                Store::First { built, .. } => built.get().is_some(),
            }
        }

        /// The first answer's numbers, while the trail is kept as them.
        fn numbers(&self) -> Option<&FirstAnswer> {
            match &self.store {
                Store::First { numbers, .. } => Some(numbers),
                Store::Written(_) => None,
            }
        }
    }

    const BUDGET: Duration = Duration::from_secs(20);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn started(at: Duration) -> (Duration, EventKind) {
        let kind = EventKind::AttemptStarted {
            attempt: 1,
            reservation_end: at.saturating_add(Duration::from_secs(4)),
        };
        (at, kind)
    }

    fn answered(at: Duration, status: u16) -> (Duration, EventKind) {
        let kind = EventKind::Response {
            attempt: 1,
            status,
            retry_after: RetryAfterSeen::Missing,
        };
        (at, kind)
    }

    fn stopped(at: Duration) -> (Duration, EventKind) {
        let kind = EventKind::Stopped {
            outcome: Outcome::Success,
        };
        (at, kind)
    }

    /// Records `kind` at `at` the way the `Action` does: the three events
    /// of a first answer through their own methods, any other with
    /// `record`.
    fn tell(trail: &mut Trail, at: Duration, kind: EventKind) {
        match kind {
            EventKind::AttemptStarted {
                attempt,
                reservation_end,
            } => trail.attempt_started(at, BUDGET, attempt, reservation_end),
            EventKind::Response {
                attempt,
                status,
                retry_after,
            } => {
                let header = match retry_after {
                    RetryAfterSeen::Missing => RetryAfter::Missing,
                    RetryAfterSeen::Seconds { value } => RetryAfter::Seconds(value),
                    other => panic!("not used by these tests: {other:?}"),
                };
                trail.response(at, BUDGET, (attempt, status), &header, None);
            }
            EventKind::Stopped { outcome } => trail.stopped(at, BUDGET, outcome),
            kind => trail.record(at, BUDGET, kind),
        }
    }

    /// The trail recorded event by event, and the events it must read as.
    fn both(steps: &[(Duration, EventKind)]) -> (Trail, Vec<Event>) {
        let mut trail = Trail::new();
        let mut expected = Vec::new();
        for (at, kind) in steps.iter().cloned() {
            tell(&mut trail, at, kind.clone());
            expected.push(Event {
                at,
                remaining_budget: BUDGET.saturating_sub(at),
                kind,
            });
        }
        (trail, expected)
    }

    #[test]
    fn nanos_fit_or_not() {
        assert_eq!(nanos(Duration::ZERO), Some(0));
        assert_eq!(nanos(Duration::new(3, 7)), Some(3_000_000_007));
        assert_eq!(nanos(Duration::from_nanos(u64::MAX)), Some(u64::MAX));
        assert_eq!(
            nanos(Duration::from_nanos(u64::MAX) + Duration::from_nanos(1)),
            None
        );
        assert_eq!(nanos(Duration::MAX), None);
    }

    #[test]
    fn a_first_answer_is_written_only_when_read() {
        let (trail, expected) = both(&[started(ms(0)), answered(ms(40), 200), stopped(ms(40))]);
        assert!(!trail.written(), "nothing written yet");
        assert_eq!(trail.numbers().map(|first| first.count), Some(3));
        assert_eq!(trail.as_slice(), expected.as_slice());
        assert!(trail.written());
        assert_eq!(trail.clone().into_vec(), expected);
    }

    #[test]
    fn get_builds_an_event_without_writing_the_trail() {
        let (trail, expected) = both(&[started(ms(0)), answered(ms(40), 200), stopped(ms(40))]);
        for (i, event) in expected.iter().enumerate() {
            assert_eq!(trail.get(i).as_deref(), Some(event));
        }
        assert_eq!(trail.get(3), None);
        assert_eq!(trail.len(), 3);
        assert!(!trail.written(), "nothing written by get or len");
        let _ = trail.as_slice();
        assert_eq!(trail.get(1).as_deref(), Some(&expected[1]));
        assert!(matches!(trail.get(1), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn each_from_hands_the_events_from_an_index_in_every_form() {
        let heard = |trail: &Trail, from: usize| {
            let mut heard = Vec::new();
            trail.each_from(from, |event| heard.push(event.clone()));
            heard
        };
        let (trail, expected) = both(&[started(ms(0)), answered(ms(40), 200), stopped(ms(40))]);
        for from in 0..=4 {
            let tail = expected.get(from..).unwrap_or_default();
            assert_eq!(heard(&trail, from), tail, "from {from}, as numbers");
        }
        assert!(!trail.written(), "nothing written by each_from");
        let _ = trail.as_slice();
        for from in 0..=4 {
            let tail = expected.get(from..).unwrap_or_default();
            assert_eq!(heard(&trail, from), tail, "from {from}, built");
        }
        let mut written = trail.clone();
        let (at, kind) = started(ms(50));
        written.record(at, BUDGET, kind.clone());
        assert_eq!(heard(&written, 2).len(), 2, "written out");
        assert_eq!(heard(&written, 3)[0].kind, kind);
        assert!(heard(&written, 9).is_empty());
    }

    #[test]
    fn every_prefix_reads_as_its_events() {
        let steps = [started(ms(5)), answered(ms(45), 404), stopped(ms(45))];
        for n in 0..=steps.len() {
            let (trail, expected) = both(&steps[..n]);
            assert_eq!(trail.len(), n);
            assert_eq!(trail, expected);
            assert_eq!(format!("{trail:?}"), format!("{expected:?}"));
        }
    }

    #[test]
    fn events_after_a_read_are_kept_in_order() {
        let mut trail = Trail::new();
        let (at, kind) = started(ms(0));
        tell(&mut trail, at, kind);
        assert_eq!(trail.len(), 1); // read: written out
        let (at, kind) = answered(ms(10), 200);
        tell(&mut trail, at, kind);
        let (at, kind) = stopped(ms(10));
        tell(&mut trail, at, kind);
        let (_, expected) = both(&[started(ms(0)), answered(ms(10), 200), stopped(ms(10))]);
        assert_eq!(trail, expected);
    }

    #[test]
    fn any_other_event_writes_the_first_ones_out() {
        let wait = EventKind::WaitPlanned {
            wait: ms(1000),
            until: ms(1010),
            reservation_end: ms(5010),
            basis: WaitBasis::Fallback { completed: 1 },
        };
        let (trail, expected) = both(&[started(ms(0)), answered(ms(10), 429), (ms(10), wait)]);
        assert!(trail.written());
        assert_eq!(trail, expected);

        // A Retry-After seen, a second attempt, a stop at another time, a
        // time too large for nanoseconds: written as they come.
        let seen = EventKind::Response {
            attempt: 1,
            status: 200,
            retry_after: RetryAfterSeen::Seconds { value: ms(1000) },
        };
        for steps in [
            vec![started(ms(0)), (ms(3), seen)],
            vec![started(ms(0)), answered(ms(3), 200), stopped(ms(4))],
            vec![started(Duration::MAX)],
            vec![(
                ms(0),
                EventKind::AttemptStarted {
                    attempt: 2,
                    reservation_end: ms(4000),
                },
            )],
        ] {
            let (trail, expected) = both(&steps);
            assert!(trail.written(), "{steps:?}");
            assert_eq!(trail, expected);
        }
    }

    #[test]
    fn pushed_and_extended_events_follow_the_first_ones() {
        let (mut trail, mut expected) = both(&[started(ms(0)), answered(ms(10), 200)]);
        let extra = Event {
            at: ms(20),
            remaining_budget: ms(19_980),
            kind: EventKind::Stopped {
                outcome: Outcome::Cancelled,
            },
        };
        trail.extend([extra.clone()]);
        expected.push(extra);
        assert_eq!(trail, expected);
        assert_eq!(trail.into_iter().collect::<Vec<_>>(), expected);
    }
}
