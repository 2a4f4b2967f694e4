//! What an action run among many is told of, and tells, the state the
//! client's actions share: a hold-off asked by another action's `429`, a
//! refusal by the client-wide retry budget, a shared store that is down,
//! and the effects to publish ([`ClientEffects`]). Inputs of the same state
//! machine as [`Action`]'s others, in a file of their own.
//!
//! Three things let a caller that runs many actions keep them from turning
//! one limit into a stampede, each still decided by the action:
//!
//! * **jitter** on the local fallback wait ([`Jitter`](crate::Jitter) in the
//!   policy, drawn from this action's own seeded generator, see
//!   [`Action::with_seed`]); a server's delay is never shortened (an
//!   opt-in [spread](crate::PolicyBuilder::spread) only lengthens it);
//! * [`Action::retry_refused`]: a retry that fits this action's budget was
//!   refused by a budget shared by all actions of the client (see
//!   [`RatioBudget`](crate::ratio::RatioBudget)): stop as `retry_throttled`;
//! * [`Action::hold_off`]: before the first attempt, the service has asked
//!   the client as a whole to wait (another action's 429 with a
//!   `Retry-After`, see [`Action::server_asked_until`]): wait if the first
//!   attempt still fits after that, otherwise stop as `held_off` without
//!   sending anything.

use std::time::Duration;

use super::{reservation_end, Action, Phase};
use crate::pace::PaceReason;
use crate::trail::{EventKind, WaitBasis};
use crate::{ClientEffects, Decision, Outcome};

impl Action {
    /// The client's shared hold-off store (across processes, e.g. Redis) is
    /// unavailable at `now`: the action goes on with the process's own
    /// hold-off map alone. Recorded once per action, before its first
    /// attempt, as [`EventKind::SharedStoreUnavailable`], so that the report
    /// says other processes' holds may have been missed; it changes no
    /// decision. Ignored once an attempt has started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Policy, trail::EventKind};
    ///
    /// let mut action = Action::new(Policy::default());
    /// assert_eq!(action.shared_store_unavailable(Duration::ZERO), Decision::StartNow);
    /// action.shared_store_unavailable(Duration::ZERO); // once
    /// assert_eq!(action.events().len(), 1);
    /// assert_eq!(action.events()[0].kind, EventKind::SharedStoreUnavailable);
    /// ```
    pub fn shared_store_unavailable(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        let noted = self
            .events
            .iter()
            .any(|e| e.kind == EventKind::SharedStoreUnavailable);
        if self.phase == Phase::Ready && self.attempts_started == 0 && !noted {
            self.push(now, EventKind::SharedStoreUnavailable);
        }
        self.decision()
    }

    /// The client's shared retry budget refused the retry that
    /// [`response`](Action::response) has just planned (it answered
    /// [`Decision::WaitUntil`]): stop at `now` as
    /// [`Outcome::RetryThrottled`] instead of waiting for nothing. Call it
    /// right after that response: no wait is counted. The last response stays
    /// the last response. Ignored in any other phase, and during a
    /// [hold-off](Action::hold_off) wait (which is no retry).
    pub fn retry_refused(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        if !matches!(self.phase, Phase::Waiting { .. }) || self.attempts_started == 0 {
            return self.decision();
        }
        self.push(
            now,
            EventKind::RetryRefused {
                attempt: self.attempts_started + 1,
            },
        );
        self.stop(now, Outcome::RetryThrottled)
    }

    /// Before the first attempt: the service has asked the client to wait
    /// until elapsed `until` (another action to the same service got a 429
    /// with a `Retry-After`; see
    /// [`server_asked_until`](Self::server_asked_until)).
    ///
    /// * `until <= now`: nothing to honour, [`Decision::StartNow`] stands.
    /// * the first attempt's full cap still fits after `until`:
    ///   [`Decision::WaitUntil`]`(until)`, then
    ///   [`timer_woke`](Self::timer_woke) as for any wait;
    /// * otherwise stop at once as [`Outcome::HeldOff`]: nothing is sent.
    ///
    /// The wait counts in this action's budget (its elapsed zero is its
    /// start, not its first attempt's). Ignored once an attempt has started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Outcome, Policy};
    ///
    /// let s = Duration::from_secs;
    /// let mut waits = Action::new(Policy::default());
    /// assert_eq!(waits.hold_off(s(0), s(10)), Decision::WaitUntil(s(10)));
    /// assert_eq!(waits.timer_woke(s(10)), Decision::StartNow);
    ///
    /// // 17 + 4 > 20: the first attempt could not finish inside the budget.
    /// let mut stops = Action::new(Policy::default());
    /// assert_eq!(stops.hold_off(s(0), s(17)), Decision::Stop(Outcome::HeldOff));
    /// assert_eq!(stops.attempts_started(), 0);
    /// ```
    pub fn hold_off(&mut self, now: Duration, until: Duration) -> Decision {
        let now = self.observe(now);
        if self.phase != Phase::Ready || self.attempts_started > 0 || until <= now {
            return self.decision();
        }
        match reservation_end(&self.policy, until) {
            Some(reservation_end) => {
                self.phase = Phase::Waiting { from: now, until };
                self.push(
                    now,
                    EventKind::WaitPlanned {
                        wait: until - now,
                        until,
                        reservation_end,
                        basis: WaitBasis::HoldOff,
                    },
                );
                self.decision()
            }
            None => {
                self.push(now, EventKind::HeldOff { until });
                self.stop(now, Outcome::HeldOff)
            }
        }
    }

    /// Before the first attempt: another action was told by the service
    /// that its quota is used up (code `code`), and the hold that answer
    /// put on the service ([`ClientEffects::quota_hold_until`]) lasts until
    /// elapsed `until`. Retrying never helps a used-up quota, so there is
    /// nothing to wait for: the action stops at once as
    /// [`Outcome::HeldOff`], nothing sent, category `quota` (an
    /// [`EventKind::QuotaExhausted`] of attempt 0 says so). `until <= now`,
    /// or an attempt already started: nothing to honour, the standing
    /// decision stands.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Category, Decision, Outcome, Policy};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default());
    /// assert_eq!(action.quota_held(s(0), s(10), "insufficient_quota"), Decision::Stop(Outcome::HeldOff));
    /// let report = action.report().unwrap();
    /// assert_eq!((report.attempts_started, report.category()), (0, Some(Category::Quota)));
    /// assert_eq!(report.held_off_left(), None, "no wait to tell: it would not help");
    ///
    /// let mut past = Action::new(Policy::default());
    /// assert_eq!(past.quota_held(s(10), s(10), "insufficient_quota"), Decision::StartNow);
    /// ```
    pub fn quota_held(&mut self, now: Duration, until: Duration, code: &str) -> Decision {
        let now = self.observe(now);
        if self.phase != Phase::Ready || self.attempts_started > 0 || until <= now {
            return self.decision();
        }
        self.push(
            now,
            EventKind::QuotaExhausted {
                attempt: 0,
                code: code.into(),
            },
        );
        self.stop(now, Outcome::HeldOff)
    }

    /// Before the first attempt: the quota the service announced (read by
    /// a [`QuotaReader`](crate::pace::QuotaReader), admitted by a
    /// [`Pacer`](crate::pace::Pacer)) allows no start before elapsed
    /// `until`, because of the limit `reason` names.
    ///
    /// * `until <= now`: nothing to honour, the standing decision stands;
    /// * the first attempt's full cap still fits after `until`: an
    ///   [`EventKind::Paced`] naming the limit, a wait with basis
    ///   [`WaitBasis::Pace`], [`Decision::WaitUntil`]`(until)`;
    /// * otherwise the [`EventKind::Paced`] and a stop at once as
    ///   [`Outcome::Paced`]: nothing is sent.
    ///
    /// Accepted while waiting for a [hold-off](Self::hold_off) (the later
    /// instant is kept: a pace that ends before the hold-off changes
    /// nothing). Ignored once an attempt has started: retries are never
    /// paced, they wait what their response asked.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Outcome, Policy};
    /// use retry_budget::pace::{LimitKind, PaceReason, PaceRule};
    ///
    /// let s = Duration::from_secs;
    /// let reason = PaceReason {
    ///     limit: "default".into(),
    ///     kind: LimitKind::Requests,
    ///     announced: 0,
    ///     left: 0,
    ///     resets_at: s(2),
    ///     rule: PaceRule::Exhausted,
    ///     clamped: false,
    /// };
    /// let mut waits = Action::new(Policy::default());
    /// assert_eq!(waits.pace(s(0), s(2), &reason), Decision::WaitUntil(s(2)));
    /// assert_eq!(waits.timer_woke(s(2)), Decision::StartNow);
    ///
    /// // 17 + 4 > 20: the first attempt could not finish inside the budget.
    /// let mut stops = Action::new(Policy::default());
    /// assert_eq!(stops.pace(s(0), s(17), &reason), Decision::Stop(Outcome::Paced));
    /// assert_eq!(stops.attempts_started(), 0);
    /// ```
    pub fn pace(&mut self, now: Duration, until: Duration, reason: &PaceReason) -> Decision {
        let now = self.observe(now);
        let from = match self.phase {
            _ if self.attempts_started > 0 || until <= now => return self.decision(),
            Phase::Ready => now,
            // A hold-off wait: only a later instant changes it.
            Phase::Waiting { from, until: held } if until > held => from,
            _ => return self.decision(),
        };
        self.push(
            now,
            EventKind::Paced {
                until,
                reason: reason.clone(),
            },
        );
        match reservation_end(&self.policy, until) {
            Some(reservation_end) => {
                self.phase = Phase::Waiting { from, until };
                self.push(
                    now,
                    EventKind::WaitPlanned {
                        wait: until.saturating_sub(now),
                        until,
                        reservation_end,
                        basis: WaitBasis::Pace {
                            left: reason.left,
                            resets_at: reason.resets_at,
                        },
                    },
                );
                self.decision()
            }
            None => self.stop(now, Outcome::Paced),
        }
    }

    /// After a `429` with a usable `Retry-After` (delay-seconds, or an
    /// HTTP-date with a trusted calendar reading) or
    /// [reset header](crate::Answer::resets): the elapsed time until
    /// which the service asked the client to wait, `receipt + max(min_wait,
    /// delay)`, whatever this action decided (it may have stopped because
    /// the wait does not fit). `None` otherwise, and again once the next
    /// attempt starts. A caller running many actions shares it with later
    /// first attempts to the same service ([`hold_off`](Self::hold_off)).
    pub const fn server_asked_until(&self) -> Option<Duration> {
        self.times.asked_until()
    }

    /// What the inputs so far ask the caller to tell the state it shares with
    /// the client's other actions, each effect answered once: a deposit in a
    /// client-wide retry budget when the first attempt has started, a
    /// withdrawal when a retry has been planned (not for a hold-off wait),
    /// and the hold-off to publish after a `429` with a usable delay. Call it
    /// after every input.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy, retry_after::RetryAfter};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(s(0));
    /// let first = action.client_effects();
    /// assert!(first.deposit && !first.withdraw && first.hold_until.is_none());
    /// assert!(action.client_effects().is_empty(), "answered once");
    ///
    /// action.response(s(1), 429, &RetryAfter::parse("3"), None);
    /// let planned = action.client_effects();
    /// assert!(!planned.deposit && planned.withdraw);
    /// assert_eq!(planned.hold_until, Some(s(4)));
    /// assert!(action.client_effects().is_empty());
    /// ```
    pub fn client_effects(&mut self) -> ClientEffects {
        let waiting = matches!(self.phase, Phase::Waiting { .. });
        let quota_hold_until = self.quota_stop.then(|| {
            self.times
                .latest()
                .saturating_add(crate::client_effects::QUOTA_HOLD)
        });
        self.told.tell(
            self.attempts_started,
            waiting,
            self.times.asked_until(),
            quota_hold_until,
        )
    }
}
