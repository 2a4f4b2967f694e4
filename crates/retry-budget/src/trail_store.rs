//! [`Trail`]: where an action keeps its events.
//!
//! Most actions are short: a first attempt that answers is three events
//! (started, response, stopped), and an action waiting for its first retry
//! is three too (started, response, wait planned). Those are kept inline,
//! in the [`Action`](crate::Action) and then in its [`Report`](crate::Report),
//! so that an action that needed no retry allocates nothing for its trail;
//! a longer trail moves to the heap. The inline buffer is `smallvec`'s; this
//! type only keeps that choice out of the public API (it reads as a slice).
//!
//! The report of a first answer that ended an action with no `Action`
//! ([`FirstAnswer`], a layer's happy path) keeps the
//! facts its three events are made of, and writes the events out the first
//! time the trail is read: most such reports are never read, and building
//! and dropping three events is most of what the report costs.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;
use std::time::Duration;

use smallvec::SmallVec;

use crate::trail::EventKind;
use crate::{Event, FirstAnswer};

/// Events kept inline before the trail moves to the heap.
const INLINE: usize = 3;

/// The events of an action still running, as the [`Action`](crate::Action)
/// keeps them (no room for a first answer's facts: an `Action` never has
/// one).
pub(crate) type Events = SmallVec<[Event; INLINE]>;

/// The trail of an action: its [`Event`]s in order. Reads as a slice
/// (`Deref<Target = [Event]>`); built from a `Vec<Event>` or an iterator.
///
/// ```
/// use retry_budget::{Action, Policy, RetryAfter};
/// use std::time::Duration;
///
/// let mut action = Action::new(Policy::default());
/// action.attempt_started(Duration::ZERO);
/// action.response(Duration::from_millis(40), 200, &RetryAfter::Missing, None);
/// let report = action.into_report().unwrap();
/// assert_eq!(report.events.len(), 3); // started, response, stopped
/// assert_eq!(report.events.first().map(|e| e.at), Some(Duration::ZERO));
/// ```
#[derive(Clone, Default)]
pub struct Trail(Repr);

// The inline events are the point (a short trail allocates nothing); the
// first answer's facts are the small variant, and boxing the other would
// put an allocation back on every retried action.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Repr {
    /// The events, as they were pushed.
    Events(Events),
    /// A first answer's three events, written out when first read.
    First {
        facts: FirstFacts,
        events: OnceLock<Box<[Event]>>,
    },
}

impl Default for Repr {
    fn default() -> Self {
        Self::Events(SmallVec::new())
    }
}

/// What the trail of a first answer that ended its action is made of: the
/// attempt started at zero with the policy's cap, the response, the stop.
#[derive(Debug, Clone)]
pub(crate) struct FirstFacts {
    pub(crate) answer: FirstAnswer,
    /// The policy's total budget (for each event's remaining budget).
    pub(crate) budget: Duration,
    /// The policy's per-attempt cap (the first attempt's reservation).
    pub(crate) cap: Duration,
}

impl FirstFacts {
    /// The three events, as the `Action` would have recorded them.
    fn events(&self) -> [Event; INLINE] {
        let FirstAnswer {
            at,
            status,
            outcome,
            ref retry_after,
        } = self.answer;
        let event = |at: Duration, kind| Event {
            at,
            remaining_budget: self.budget.saturating_sub(at),
            kind,
        };
        [
            event(
                Duration::ZERO,
                EventKind::AttemptStarted {
                    attempt: 1,
                    reservation_end: self.cap,
                },
            ),
            event(
                at,
                EventKind::Response {
                    attempt: 1,
                    status,
                    retry_after: retry_after.clone(),
                },
            ),
            event(at, EventKind::Stopped { outcome }),
        ]
    }
}

impl Trail {
    /// An empty trail (no allocation).
    pub fn new() -> Self {
        Self(Repr::default())
    }

    /// The trail of an action that ran: its events.
    pub(crate) fn from_events(events: Events) -> Self {
        Self(Repr::Events(events))
    }

    /// The trail of a first answer that ended its action, written out when
    /// first read.
    pub(crate) fn first_answer(facts: FirstFacts) -> Self {
        Self(Repr::First {
            facts,
            events: OnceLock::new(),
        })
    }

    /// The events, as a slice.
    pub fn as_slice(&self) -> &[Event] {
        match &self.0 {
            Repr::Events(events) => events,
            Repr::First { facts, events } => events.get_or_init(|| Box::new(facts.events())),
        }
    }

    /// The events, as a `Vec`.
    pub fn into_vec(self) -> Vec<Event> {
        self.into_events().into_vec()
    }

    /// Appends an event.
    pub(crate) fn push(&mut self, event: Event) {
        self.events_mut().push(event);
    }

    /// The events as pushed, a first answer's written out first.
    fn events_mut(&mut self) -> &mut Events {
        if let Repr::First { .. } = self.0 {
            let events = std::mem::take(self).into_events();
            self.0 = Repr::Events(events);
        }
        match &mut self.0 {
            Repr::Events(events) => events,
            Repr::First { .. } => unreachable!("written out above"),
        }
    }

    fn into_events(self) -> Events {
        match self.0 {
            Repr::Events(events) => events,
            Repr::First { facts, events } => match events.into_inner() {
                Some(events) => events.into_vec().into(),
                None => SmallVec::from_buf(facts.events()),
            },
        }
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
        Self(Repr::Events(SmallVec::from_vec(events)))
    }
}

impl FromIterator<Event> for Trail {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        Self(Repr::Events(iter.into_iter().collect()))
    }
}

impl Extend<Event> for Trail {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, iter: I) {
        self.events_mut().extend(iter);
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
    type IntoIter = smallvec::IntoIter<[Event; INLINE]>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_events().into_iter()
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
    use crate::{Action, Policy, RetryAfter};

    /// A first answer's trail (unread) and the same action's trail as an
    /// `Action` records it.
    fn both() -> (Trail, Trail) {
        let policy = Policy::default();
        let at = Duration::from_millis(40);
        let invalid = RetryAfter::parse("soon");
        assert!(matches!(invalid, RetryAfter::Invalid(_)));
        let lazy = policy
            .first_answer(at, 503, &invalid, None)
            .expect("a 503 ends the default policy's action")
            .into_report(&policy)
            .events;
        let mut action = Action::new(policy);
        action.attempt_started(Duration::ZERO);
        action.response(at, 503, &invalid, None);
        let recorded = action.into_report().expect("stopped").events;
        assert!(matches!(lazy.0, Repr::First { .. }));
        assert!(matches!(recorded.0, Repr::Events(_)));
        (lazy, recorded)
    }

    #[test]
    fn a_first_answer_reads_as_the_recorded_trail() {
        let (lazy, recorded) = both();
        // Compared before it is read (equality reads it) and after.
        assert_eq!(lazy, recorded);
        assert_eq!(lazy.len(), 3);
        assert_eq!(lazy.as_slice(), recorded.as_slice());
        assert_eq!(format!("{lazy:?}"), format!("{recorded:?}"));
        // A clone, read or not, is the same trail.
        assert_eq!(lazy.clone(), recorded);
        let (unread, _) = both();
        assert_eq!(unread.clone(), recorded);
    }

    #[test]
    fn a_first_answer_moves_out_and_grows_like_any_trail() {
        // Unread, then read: both ways give the same events.
        for read_first in [false, true] {
            let (lazy, recorded) = both();
            if read_first {
                assert_eq!(lazy.len(), 3);
            }
            assert_eq!(lazy.clone().into_vec(), recorded.clone().into_vec());
            assert_eq!(
                lazy.clone().into_iter().collect::<Vec<_>>(),
                recorded.clone().into_vec()
            );
            let extra = recorded[2].clone();
            let mut grown = lazy;
            grown.extend([extra.clone()]);
            let mut expected = recorded.into_vec();
            expected.push(extra);
            assert_eq!(grown, expected);
            assert!(matches!(grown.0, Repr::Events(_)));
        }
    }
}
