//! What an action asks its caller to tell the state it shares with the
//! client's other actions ([`ClientEffects`]), each effect told once.

use std::time::Duration;

/// What an action asks its caller to tell the state it shares with the
/// client's other actions, after an input: see
/// [`Action::client_effects`](crate::Action::client_effects).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientEffects {
    /// The first attempt has started: count it in a client-wide retry
    /// budget (tower's `Budget::deposit`).
    pub deposit: bool,
    /// A retry has been planned: withdraw it from the client-wide retry
    /// budget, and if that refuses, tell the action
    /// [`retry_refused`](crate::Action::retry_refused).
    pub withdraw: bool,
    /// The service asked the client to wait until this elapsed time (see
    /// [`Action::server_asked_until`](crate::Action::server_asked_until)): publish it to a shared hold-off map.
    pub hold_until: Option<Duration>,
    /// The action stopped on a used-up quota said by a status it retries
    /// (OpenAI's `insufficient_quota` 429): until this elapsed time, later
    /// first attempts to the same service are not sent
    /// ([`Action::quota_held`](crate::Action::quota_held)), so that a
    /// client's own immediate retries of that answer (an SDK that retries
    /// every 429) do not reach it again. [`QUOTA_HOLD`] after the stop.
    pub quota_hold_until: Option<Duration>,
}

/// How long a used-up quota holds later first attempts to its service
/// ([`ClientEffects::quota_hold_until`]): long enough for a client's
/// immediate retries of the answer (an SDK's backoff of a few seconds),
/// short enough that a quota restored, or another model's, is soon tried
/// again.
pub const QUOTA_HOLD: Duration = Duration::from_secs(10);

impl ClientEffects {
    /// Whether there is nothing to tell.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether it asks to hold later first attempts to the service (a
    /// [`hold_until`](Self::hold_until) or a
    /// [`quota_hold_until`](Self::quota_hold_until)), which a shared
    /// hold-off map publishes; a deposit or a withdrawal alone is the
    /// client-wide retry budget's.
    pub fn holds(&self) -> bool {
        self.hold_until.is_some() || self.quota_hold_until.is_some()
    }
}

/// What [`Action::client_effects`](crate::Action::client_effects) has already answered, so that each
/// effect is answered once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Told {
    deposited: bool,
    // Attempt numbers (at most `MAX_ATTEMPTS_LIMIT`): two bytes each keep
    // the action under a 16-byte step of the allocator.
    withdrawn_after: u16,
    held_after: u16,
    quota_held: bool,
}

impl Told {
    /// The effects not told yet, now that `attempts_started` attempts have
    /// started, the action `waiting` for a retry or not, and the service
    /// having asked the client to wait `hold_until` (if it did): a deposit
    /// once the first attempt has started, a withdrawal once per planned
    /// retry, a hold-off once per attempt that asked for one.
    pub(crate) fn tell(
        &mut self,
        attempts_started: u32,
        waiting: bool,
        hold_until: Option<Duration>,
        quota_hold_until: Option<Duration>,
    ) -> ClientEffects {
        let quota_hold_until = quota_hold_until.filter(|_| !self.quota_held);
        self.quota_held |= quota_hold_until.is_some();
        let started = u16::try_from(attempts_started).unwrap_or(u16::MAX);
        let deposit = started > 0 && !self.deposited;
        let withdraw = waiting && started > 0 && self.withdrawn_after < started;
        let hold_until = hold_until.filter(|_| self.held_after < started);
        self.deposited |= deposit;
        if withdraw {
            self.withdrawn_after = started;
        }
        if hold_until.is_some() {
            self.held_after = started;
        }
        ClientEffects {
            deposit,
            withdraw,
            hold_until,
            quota_hold_until,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_hold_or_a_quota_hold_holds() {
        let budget_only = ClientEffects {
            deposit: true,
            withdraw: true,
            ..ClientEffects::default()
        };
        assert!(!budget_only.holds());
        let held = ClientEffects {
            hold_until: Some(Duration::from_secs(3)),
            ..ClientEffects::default()
        };
        assert!(held.holds());
        let quota = ClientEffects {
            quota_hold_until: Some(QUOTA_HOLD),
            ..ClientEffects::default()
        };
        assert!(quota.holds());
    }
}
