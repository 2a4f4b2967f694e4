//! What an action tells its caller of its trail and, once stopped, its
//! report (reading only: no input changes the action here).

use super::{Action, Phase};
use crate::trail::{Event, Trail};
use crate::Report;

impl Action {
    /// The trail so far.
    pub fn events(&self) -> &[Event] {
        self.events.as_slice()
    }

    /// The trail so far, as the [`Trail`] the report will carry: its
    /// [`len`](Trail::len) and [`get`](Trail::get) read it without writing
    /// a first answer's events out (see [`Trail`]).
    pub fn trail(&self) -> &Trail {
        &self.events
    }

    /// The report, once the action has stopped.
    pub fn report(&self) -> Option<Report> {
        self.clone().into_report()
    }

    /// The report, once the action has stopped, moving the trail instead of
    /// copying it. Returns `None` (and drops the action) if it has not.
    pub fn into_report(mut self) -> Option<Report> {
        self.take_report()
    }

    /// The report, once the action has stopped, moving the trail out of
    /// the action (which keeps its state, with an empty trail). `None`, and
    /// nothing moved, if it has not stopped. For a caller that owns the
    /// action in place (a future's state) and ends it once.
    pub fn take_report(&mut self) -> Option<Report> {
        let Phase::Stopped { outcome, at } = self.phase else {
            return None;
        };
        // Both totals follow from the trail (each attempt ends, and each
        // wait is left, with an event that says when).
        let (request_time, wait_time) = self.events.times();
        Some(Report {
            outcome,
            last_status: self.last_status,
            attempts_started: self.attempts_started,
            max_attempts: self.policy.max_attempts(),
            elapsed: at,
            request_time,
            wait_time,
            server_requested_wait: self.times.requested(),
            attempt_cap: self.policy.attempt_cap(),
            events: std::mem::take(&mut self.events),
            shared_with: 0,
        })
    }
}
