//! How an action ended.

use std::fmt;

/// The outcome of one action. Written in `snake_case` everywhere:
/// JSON, logs and docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Outcome {
    /// The last response has a status the policy does not retry, and it is
    /// 2xx or 3xx.
    Success,
    /// The last response has a status the policy does not retry, and it is
    /// not 2xx or 3xx.
    NotRetryable,
    /// The next attempt's full reservation does not fit in the budget.
    BudgetExhausted,
    /// Every allowed attempt has been started.
    AttemptsExhausted,
    /// The caller left: no further attempt starts.
    Cancelled,
    /// The server gave an HTTP-date, and no trusted calendar clock can turn it
    /// into a wait.
    ClockUntrusted,
    /// An attempt ran past the per-attempt cap (never retried).
    AttemptTimeout,
    /// The transport failed before a response arrived (never retried).
    TransportError,
    /// A retry was due and fitted the action's own budget, but the client's
    /// shared retry budget (a ratio of first attempts across all actions)
    /// refused it. Not `budget_exhausted`, which is this action's time
    /// budget.
    RetryThrottled,
    /// Another action to the same service was told to wait (429 with a
    /// `Retry-After`), and this action's first attempt could not wait that
    /// long inside its budget: nothing was sent.
    HeldOff,
    /// The quota the service announced (remaining and reset, read from its
    /// earlier responses) left no start for this action's first attempt
    /// before a time after which that attempt would not fit in its budget:
    /// nothing was sent (see [`Action::pace`](crate::Action::pace)).
    Paced,
    /// A retry was due, but the request body went over the replay limit
    /// while it was sent, so a copy could not be sent in full: nothing more
    /// was sent (never a truncated body).
    NotReplayable,
    /// Model only: the given data cannot be replayed (an attempt longer than
    /// the cap, a script that runs out of attempts).
    InvalidData,
}

impl Outcome {
    /// How a response the policy does not retry ends an action: `success`
    /// for 2xx and 3xx (the service answered), `not_retryable` otherwise.
    #[inline]
    pub const fn of_final_status(status: u16) -> Self {
        if status >= 200 && status < 400 {
            Self::Success
        } else {
            Self::NotRetryable
        }
    }

    /// The `snake_case` name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::NotRetryable => "not_retryable",
            Self::BudgetExhausted => "budget_exhausted",
            Self::AttemptsExhausted => "attempts_exhausted",
            Self::Cancelled => "cancelled",
            Self::ClockUntrusted => "clock_untrusted",
            Self::AttemptTimeout => "attempt_timeout",
            Self::TransportError => "transport_error",
            Self::RetryThrottled => "retry_throttled",
            Self::HeldOff => "held_off",
            Self::Paced => "paced",
            Self::NotReplayable => "not_replayable",
            Self::InvalidData => "invalid_data",
        }
    }

    /// Every outcome: those of one action, then those of many actions at
    /// once (`retry_throttled`, `held_off`, `paced`), `not_replayable`, then
    /// the model's `invalid_data`.
    pub const ALL: [Self; 13] = [
        Self::Success,
        Self::NotRetryable,
        Self::BudgetExhausted,
        Self::AttemptsExhausted,
        Self::Cancelled,
        Self::ClockUntrusted,
        Self::AttemptTimeout,
        Self::TransportError,
        Self::RetryThrottled,
        Self::HeldOff,
        Self::Paced,
        Self::NotReplayable,
        Self::InvalidData,
    ];

    /// Parses a `snake_case` name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "serde")]
    fn names_round_trip_and_match_serde() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::from_name(o.as_str()), Some(o));
            assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::Value::from(o.as_str())
            );
        }
    }
}
