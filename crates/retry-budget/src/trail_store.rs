//! [`Trail`]: where an action keeps its events.
//!
//! The events live on the heap, in one `Vec` whose first push reserves
//! room for three (a first attempt that answers is three events: started,
//! response, stopped; a first 429 too: started, response, wait planned). Kept inline, three events made the
//! [`Action`](crate::Action) and its [`Report`](crate::Report) several
//! hundred bytes larger, and the copies of those moves cost more than the
//! one allocation (`BENCHMARKS.md` has the measurement). This type keeps
//! that choice out of the public API: it reads as a slice.

use std::fmt;
use std::ops::Deref;

use crate::trail::Event;

/// The events of an action, as the [`Action`](crate::Action) keeps them.
pub(crate) type Events = Vec<Event>;

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
#[derive(Clone, Default)]
pub struct Trail(Events);

impl Trail {
    /// An empty trail (no allocation).
    pub fn new() -> Self {
        Self(Events::new())
    }

    /// The trail of an action that ran: its events.
    pub(crate) fn from_events(events: Events) -> Self {
        Self(events)
    }

    /// The events, as a slice.
    pub fn as_slice(&self) -> &[Event] {
        &self.0
    }

    /// The events, as a `Vec`.
    pub fn into_vec(self) -> Vec<Event> {
        self.0
    }

    /// Appends an event.
    pub(crate) fn push(&mut self, event: Event) {
        self.0.push(event);
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
        Self(events)
    }
}

impl FromIterator<Event> for Trail {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<Event> for Trail {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, iter: I) {
        self.0.extend(iter);
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
        self.0.into_iter()
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
