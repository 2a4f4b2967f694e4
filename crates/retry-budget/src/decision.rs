//! [`Decision`]: what an [`Action`](crate::Action) tells its caller to do
//! next.

use std::time::Duration;

use crate::Outcome;

/// What the caller must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start the next attempt now, then report it with
    /// [`Action::attempt_started`](crate::Action::attempt_started).
    StartNow,
    /// An attempt is in flight; it must answer by `deadline` (elapsed), after
    /// which it is abandoned with [`Action::attempt_timed_out`](crate::Action::attempt_timed_out).
    AwaitResponse {
        /// 1-based attempt number.
        attempt: u32,
        /// `start + cap`.
        deadline: Duration,
    },
    /// Sleep until this elapsed time, then call [`Action::timer_woke`](crate::Action::timer_woke).
    WaitUntil(Duration),
    /// The action is over.
    Stop(Outcome),
}
