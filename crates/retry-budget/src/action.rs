//! **The budget rule lives here.** One [`Action`] is one user action with its
//! own budget: a pure state machine that is told what happened and at which
//! elapsed time, and answers what to do next.
//!
//! The machine never reads a clock. Elapsed time (a [`Duration`] since the
//! action's start, taken from a monotonic clock by the caller; the action
//! starts with its first attempt unless a [hold-off](Action::hold_off) delays
//! that attempt) and the
//! calendar reading (`Option<SystemTime>`, `None` when no trusted calendar
//! clock is available) are inputs. That is what makes the same machine drive
//! the arithmetic model (the replay of given data), the tower middleware under
//! tokio's paused clock, and the middleware in production.
//!
//! # The rule
//!
//! When a retried status arrives at elapsed `t` after `k` completed attempts:
//!
//! ```text
//! wait = max(min_wait, server_delay)     if Retry-After is valid
//! wait = fallback_base ^ k               if Retry-After is missing or invalid
//! earliest_next_start = t + wait
//! ```
//!
//! The next attempt may start only if the caller is still there, fewer than
//! `max_attempts` attempts have started, and `earliest_next_start + cap <=
//! budget`. Otherwise the action stops at once, at `t`. When the timer wakes,
//! on time or late, the check runs again from the *current* elapsed time, and
//! once more when the attempt actually starts (a transport that was not ready
//! may have delayed it).
//!
//! Stop reasons are checked in this order: caller gone (`cancelled`), status
//! not retried (`success` for 2xx/3xx, `not_retryable` otherwise), a request
//! that must not be sent twice (`not_retryable`, [`Action::not_repeatable`]), no attempts
//! left (`attempts_exhausted`, without reading the header), an HTTP-date with
//! no trusted clock (`clock_untrusted`), the reservation does not fit
//! (`budget_exhausted`).
//!
//! # Many actions at once
//!
//! Jitter, a refusal by the client's shared retry budget and a hold-off let
//! a caller that runs many actions keep them from turning one limit into a
//! stampede; the last two are inputs of their own (`action/shared.rs`).
//!
//! # Example: Schedule A
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::{Action, Decision, Outcome, Policy, retry_after::RetryAfter};
//!
//! let s = Duration::from_secs;
//! let mut action = Action::new(Policy::default());
//! assert_eq!(action.decision(), Decision::StartNow);
//!
//! action.attempt_started(s(0));
//! let next = action.response(s(2), 429, &RetryAfter::parse("3"), None);
//! assert_eq!(next, Decision::WaitUntil(s(5)));
//! assert_eq!(action.timer_woke(s(5)), Decision::StartNow);
//! action.attempt_started(s(5));
//! assert_eq!(action.response(s(7), 429, &RetryAfter::parse("4"), None), Decision::WaitUntil(s(11)));
//! assert_eq!(action.timer_woke(s(11)), Decision::StartNow);
//! action.attempt_started(s(11));
//! assert_eq!(action.response(s(14), 200, &RetryAfter::Missing, None), Decision::Stop(Outcome::Success));
//!
//! let report = action.report().expect("stopped");
//! assert_eq!(report.starts(), vec![s(0), s(5), s(11)]);
//! assert_eq!((report.request_time, report.wait_time), (s(7), s(7)));
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::answer::More;
use crate::asked_delay::{self, DelaySource, ServerAsked};
use crate::client_effects::Told;
use crate::jitter;
use crate::times::Times;
use crate::trail::{EventKind, Trail, WaitBasis};
use crate::trail_details;
use crate::{retry_after::RetryAfter, Answer, Decision, Jitter, Outcome, Policy};

mod reading;
mod repeat;
mod shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    InFlight { started: Duration },
    Waiting { from: Duration, until: Duration },
    Stopped { outcome: Outcome, at: Duration },
}

/// One action's retry budget: the state machine.
///
/// Inputs that do not fit the current phase (a response while waiting, any
/// input after the stop) change nothing and return the standing
/// [`decision`](Action::decision). Elapsed times that go backwards are read as
/// the latest time already seen, so the trail stays monotonic.
#[derive(Debug, Clone)]
pub struct Action {
    policy: Arc<Policy>,
    phase: Phase,
    attempts_started: u32,
    last_status: Option<u16>,
    events: Trail,
    rng: fastrand::Rng,
    /// The latest time seen, the server's requested wait, the last
    /// jittered fallback and the end of the wait the service asked for.
    times: Times,
    /// The action stopped on a used-up quota said by a retried status:
    /// later first attempts to the service are held (see
    /// [`ClientEffects::quota_hold_until`]).
    quota_stop: bool,
    told: Told,
    /// Whether the request may be sent more than once (see
    /// [`Action::not_repeatable`]).
    repeatable: bool,
}

impl Action {
    /// A new action, ready to start its first attempt. Its budget is counted
    /// from its start (elapsed zero), normally its first attempt's.
    ///
    /// If the policy has [jitter](crate::Jitter), the action's generator is
    /// seeded from `fastrand`'s thread-local generator, so that actions
    /// refused together spread apart; use [`Action::with_seed`] for a
    /// reproducible schedule. Without jitter nothing random is ever read.
    ///
    /// The policy is given by value or shared (`Arc<Policy>`): an action
    /// keeps a reference to it, so that many actions under one policy (a
    /// client's) share one copy.
    #[inline(always)]
    pub fn new(policy: impl Into<Arc<Policy>>) -> Self {
        let policy = policy.into();
        let seed = if policy.jitter() == Jitter::None && policy.spread().is_zero() {
            0
        } else {
            fastrand::u64(..)
        };
        Self::with_seed(policy, seed)
    }

    /// A new action whose jitter is drawn from a generator seeded with
    /// `seed`: the same seed and the same inputs give the same schedule.
    /// Give concurrent actions different seeds, or they retry together.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Jitter, Policy, retry_after::RetryAfter};
    ///
    /// let policy = Policy::builder().jitter(Jitter::Full).build()?;
    /// let wait = |seed| {
    ///     let mut action = Action::with_seed(policy, seed);
    ///     action.attempt_started(Duration::ZERO);
    ///     action.response(Duration::from_secs(1), 429, &RetryAfter::Missing, None)
    /// };
    /// assert_eq!(wait(7), wait(7));
    /// let Decision::WaitUntil(until) = wait(7) else { panic!() };
    /// // Full jitter on the 2 s fallback: between the 1 s floor and 2 s.
    /// assert!(until >= Duration::from_secs(2) && until <= Duration::from_secs(3));
    /// # Ok::<(), retry_budget::PolicyError>(())
    /// ```
    #[inline(always)]
    pub fn with_seed(policy: impl Into<Arc<Policy>>, seed: u64) -> Self {
        Self {
            policy: policy.into(),
            phase: Phase::Ready,
            attempts_started: 0,
            last_status: None,
            // Nothing written until an event must be (see `Trail`).
            events: Trail::new(),
            rng: fastrand::Rng::with_seed(seed),
            times: Times::new(),
            quota_stop: false,
            told: Told::default(),
            repeatable: true,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Attempts started so far.
    pub const fn attempts_started(&self) -> u32 {
        self.attempts_started
    }

    /// The standing decision of the current phase.
    pub fn decision(&self) -> Decision {
        match self.phase {
            Phase::Ready => Decision::StartNow,
            Phase::InFlight { started } => Decision::AwaitResponse {
                attempt: self.attempts_started,
                deadline: started.saturating_add(self.policy.attempt_cap()),
            },
            Phase::Waiting { until, .. } => Decision::WaitUntil(until),
            Phase::Stopped { outcome, .. } => Decision::Stop(outcome),
        }
    }

    /// The deadline of the attempt in flight (its start plus the attempt
    /// cap: the `deadline` of [`Decision::AwaitResponse`]), `None` when no
    /// attempt is in flight.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default().within(s(3)).unwrap());
    /// assert_eq!(action.attempt_deadline(), None);
    /// action.attempt_started(s(0));
    /// assert_eq!(action.attempt_deadline(), Some(s(3)));
    /// ```
    #[inline]
    pub fn attempt_deadline(&self) -> Option<Duration> {
        match self.phase {
            Phase::InFlight { started } => Some(started.saturating_add(self.policy.attempt_cap())),
            _ => None,
        }
    }

    /// The attempt in flight and the time reserved for it: from its start
    /// to its deadline ([`Decision::AwaitResponse`]), which the core only
    /// grants when it ends inside the budget. `None` when no attempt is in
    /// flight. What a transport tells the upstream as the attempt's own
    /// deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy};
    ///
    /// let s = Duration::from_secs;
    /// let policy = Policy::default().within(s(3)).unwrap();
    /// let mut action = Action::new(policy);
    /// assert_eq!(action.reservation(), None);
    /// action.attempt_started(s(0));
    /// assert_eq!(action.reservation(), Some((1, s(3))));
    /// ```
    pub fn reservation(&self) -> Option<(u32, Duration)> {
        match (self.phase, self.decision()) {
            (Phase::InFlight { started }, Decision::AwaitResponse { attempt, deadline }) => {
                Some((attempt, deadline.saturating_sub(started)))
            }
            _ => None,
        }
    }

    /// The latest elapsed time at which an attempt may still start: its full
    /// cap must end inside the budget. A caller that waits for something
    /// before starting (a transport's readiness) need not wait past it.
    pub fn latest_start(&self) -> Duration {
        self.policy.total_budget() - self.policy.attempt_cap()
    }

    /// The caller was told to start ([`Decision::StartNow`]) but its
    /// transport is still not ready at `now`. At or past the
    /// [latest start](Self::latest_start) the attempt could only start
    /// later still, and its cap could no longer be reserved: stop as
    /// [`Outcome::BudgetExhausted`]. Before it, keep waiting
    /// ([`Decision::StartNow`] stands).
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Outcome, Policy, retry_after::RetryAfter};
    ///
    /// let s = Duration::from_secs;
    /// let mut action = Action::new(Policy::default());
    /// action.attempt_started(s(0));
    /// action.response(s(1), 429, &RetryAfter::parse("1"), None);
    /// assert_eq!(action.timer_woke(s(2)), Decision::StartNow);
    /// assert_eq!(action.transport_not_ready(s(10)), Decision::StartNow);
    /// assert_eq!(action.transport_not_ready(s(16)), Decision::Stop(Outcome::BudgetExhausted));
    /// ```
    pub fn transport_not_ready(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        if self.phase != Phase::Ready || now < self.latest_start() {
            return self.decision();
        }
        self.stop(now, Outcome::BudgetExhausted)
    }

    /// The outcome, once stopped.
    pub fn outcome(&self) -> Option<Outcome> {
        match self.phase {
            Phase::Stopped { outcome, .. } => Some(outcome),
            _ => None,
        }
    }

    /// An attempt is being sent at `now`. Checks once more that the caller may
    /// start it (attempts left, full cap fits) and answers
    /// [`Decision::AwaitResponse`] or [`Decision::Stop`].
    pub fn attempt_started(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        if self.phase != Phase::Ready {
            return self.decision();
        }
        if let Err(outcome) = self.may_start(now) {
            return self.stop(now, outcome);
        }
        self.attempts_started += 1;
        self.times.set_asked_until(None);
        self.phase = Phase::InFlight { started: now };
        let reservation_end = now.saturating_add(self.policy.attempt_cap());
        self.events.attempt_started(
            now,
            self.policy.total_budget(),
            self.attempts_started,
            reservation_end,
        );
        self.decision()
    }

    /// A response arrived at `now` with this status and `Retry-After`:
    /// [`respond`](Self::respond) with nothing more to tell
    /// ([`Answer::new`]`(status, retry_after).calendar(calendar)`).
    /// `calendar` is the trusted calendar time at receipt (`None` when there
    /// is none), used only to turn an HTTP-date into a wait, once.
    pub fn response(
        &mut self,
        now: Duration,
        status: u16,
        retry_after: &RetryAfter,
        calendar: Option<SystemTime>,
    ) -> Decision {
        self.respond(now, Answer::new(status, retry_after).calendar(calendar))
    }

    /// A response arrived at `now`, and this is all it tells
    /// ([`Answer`]: the status, `Retry-After`, the calendar reading, reset
    /// headers, a retry forbidden by the server, a translated status,
    /// whether the request can be sent again). The one input for a
    /// response; ignored (the standing decision is returned) unless an
    /// attempt is in flight.
    ///
    /// For a status the policy retries, the server's delay is the longest
    /// of the valid `Retry-After` values (several fields or a list: the
    /// longest counts) and of the reset headers; it is read whatever
    /// happens next, so that the report's
    /// [`server_requested_wait`](crate::Report::server_requested_wait) is always
    /// the last response's. Without one, the local fallback applies. A
    /// [spread](crate::PolicyBuilder::spread) is added on top of a server's
    /// delay.
    ///
    /// Stop reasons, in order: a status not retried, a quota used up, a
    /// retry forbidden by the server (or its `x-should-retry: false`), no
    /// attempts left, a request that cannot be sent again, a
    /// date with no trusted clock, a reservation that does not fit.
    pub fn respond(&mut self, now: Duration, answer: Answer<'_>) -> Decision {
        let Answer {
            status,
            retry_after,
            calendar,
            resets: reset_headers,
            forbidden,
            replayable,
            more,
        } = answer;
        // The rare parts, each read where it is used (none: one check),
        // their box kept (and dropped) only if there is one.
        let mut boxed: Box<More>;
        let mut more = match more {
            Some(rare) => {
                boxed = rare;
                Some(&mut *boxed)
            }
            None => None,
        };
        let now = self.observe(now);
        if !matches!(self.phase, Phase::InFlight { .. }) {
            return self.decision();
        }
        if let Some(from) = more.as_mut().and_then(|m| m.translated_from.take()) {
            self.push(
                now,
                EventKind::Translated {
                    attempt: self.attempts_started,
                    from,
                },
            );
        }
        // A service's own rate limit under another status, with a delay:
        // retried as the 429 it stands for, the trail saying so.
        let retry_after_ms = more.as_ref().and_then(|m| m.retry_after_ms.as_ref());
        let status = match more.as_ref().and_then(|m| m.rate_limited.as_deref()) {
            Some(kind)
                if status != 429
                    && self.policy.retries(429)
                    && (!matches!(retry_after, RetryAfter::Missing)
                        || retry_after_ms.is_some()) =>
            {
                self.push(
                    now,
                    EventKind::Translated {
                        attempt: self.attempts_started,
                        from: format!("{status} {kind}, a rate limit: retried as 429"),
                    },
                );
                429
            }
            _ => status,
        };
        self.last_status = Some(status);
        let retried = self.policy.retries(status);
        self.events.response(
            now,
            self.policy.total_budget(),
            (self.attempts_started, status),
            retry_after,
            calendar,
        );
        if let Some(notes) = more.as_ref().and_then(|m| m.quota_notes.as_deref()) {
            let (at, budget) = (now, self.policy.total_budget());
            trail_details::quota(&mut self.events, at, budget, self.attempts_started, notes);
        }

        // What the server asked, read for a retried status (and a 429, for
        // the shared hold-off) before any stop, so that the trail and the
        // report say it whatever the stop reason.
        let asked = if retried || status == 429 {
            let delay = asked_delay::choose(
                retry_after,
                retry_after_ms,
                reset_headers.as_ref(),
                calendar,
            );
            if retried {
                let response = trail_details::Response {
                    at: now,
                    budget: self.policy.total_budget(),
                    attempt: self.attempts_started,
                    retry_after,
                    retry_after_ms,
                    calendar,
                };
                trail_details::record(&mut self.events, &response, &delay);
            }
            delay.asked
        } else {
            ServerAsked::Nothing
        };
        let requested = asked.requested();
        self.times.set_requested(requested.filter(|_| retried));
        self.times.set_asked_until(
            requested
                .filter(|_| status == 429)
                .map(|delay| now.saturating_add(delay.max(self.policy.min_wait()))),
        );

        let attempt = self.attempts_started;
        let quota = more.as_mut().and_then(|m| m.quota.take());
        if !retried {
            // A used-up quota said on a status not retried (Bedrock's
            // `400 ServiceQuotaExceededException`) still names the category.
            if let Some(code) = quota.filter(|_| status >= 400) {
                self.push(now, EventKind::QuotaExhausted { attempt, code });
            }
            return self.stop(now, Outcome::of_final_status(status));
        }
        if let Some(code) = quota {
            self.push(now, EventKind::QuotaExhausted { attempt, code });
            self.quota_stop = true;
            return self.stop(now, Outcome::NotRetryable);
        }
        let mut forbidden = forbidden;
        if let Some(word) = more.as_mut().and_then(|m| m.should_retry.take()) {
            let (header, raw, says) = word.into_parts();
            forbidden |= says == Some(false);
            self.push(
                now,
                EventKind::ShouldRetry {
                    attempt,
                    header,
                    raw,
                    says,
                },
            );
        }
        if forbidden {
            self.push(
                now,
                EventKind::RetryForbidden {
                    attempt: self.attempts_started,
                },
            );
            return self.stop(now, Outcome::NotRetryable);
        }
        if !self.repeatable {
            self.push(now, EventKind::NotRepeatable { attempt });
            return self.stop(now, Outcome::NotRetryable);
        }
        if self.attempts_started >= self.policy.max_attempts() {
            return self.stop(now, Outcome::AttemptsExhausted);
        }
        if !replayable {
            return self.stop(now, Outcome::NotReplayable);
        }
        let (wait, basis) = match asked {
            ServerAsked::Unmeasurable => return self.stop(now, Outcome::ClockUntrusted),
            ServerAsked::Wait { requested, from } => {
                let basis = match from {
                    DelaySource::RetryAfter => WaitBasis::Server { requested },
                    DelaySource::ResetHeader => WaitBasis::ResetHeader { requested },
                };
                let mut wait = requested.max(self.policy.min_wait());
                let spread = self.policy.spread();
                if !spread.is_zero() {
                    let extra = jitter::uniform(&mut self.rng, Duration::ZERO, spread);
                    wait = wait.saturating_add(extra);
                    self.push(
                        now,
                        EventKind::Spread {
                            attempt: self.attempts_started,
                            extra,
                        },
                    );
                }
                (wait, basis)
            }
            ServerAsked::Nothing => jitter::fallback(
                &self.policy,
                &mut self.rng,
                &mut self.times,
                self.attempts_started,
            ),
        };
        let until = now.saturating_add(wait);
        let Some(reservation_end) = reservation_end(&self.policy, until) else {
            return self.stop(now, Outcome::BudgetExhausted);
        };
        self.phase = Phase::Waiting { from: now, until };
        self.push(
            now,
            EventKind::WaitPlanned {
                wait,
                until,
                reservation_end,
                basis,
            },
        );
        self.decision()
    }

    /// The wait's timer fired at `now` (on time or late). Re-checks from
    /// `now`: [`Decision::StartNow`] if the full cap still fits, otherwise
    /// [`Decision::Stop`]. A wake before the planned time changes nothing.
    pub fn timer_woke(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        let Phase::Waiting { from, until } = self.phase else {
            return self.decision();
        };
        if now < until {
            return self.decision();
        }
        self.push(
            now,
            EventKind::Woke {
                waited_from: from,
                late_by: now - until,
            },
        );
        match self.may_start(now) {
            Ok(()) => {
                self.phase = Phase::Ready;
                Decision::StartNow
            }
            Err(outcome) => self.stop(now, outcome),
        }
    }

    /// The caller left at `now` (dropped the future, fired a cancellation
    /// token, closed the page): nothing further starts.
    pub fn caller_left(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        let waited_from = match self.phase {
            Phase::Stopped { .. } => return self.decision(),
            Phase::Ready | Phase::InFlight { .. } => None,
            Phase::Waiting { from, .. } => Some(from),
        };
        self.push(now, EventKind::CallerLeft { waited_from });
        self.stop(now, Outcome::Cancelled)
    }

    /// The attempt in flight ran past its deadline and was abandoned at `now`.
    /// Never retried.
    pub fn attempt_timed_out(&mut self, now: Duration) -> Decision {
        self.attempt_failed(now, Outcome::AttemptTimeout)
    }

    /// The transport failed at `now` before a response arrived: either the
    /// attempt in flight failed, or the transport could not even take the
    /// next attempt (it failed while the caller waited for it to be ready).
    /// Never retried.
    pub fn transport_failed(&mut self, now: Duration) -> Decision {
        if self.phase == Phase::Ready && self.attempts_started > 0 {
            let now = self.observe(now);
            self.push(
                now,
                EventKind::TransportFailed {
                    attempt: self.attempts_started + 1,
                },
            );
            return self.stop(now, Outcome::TransportError);
        }
        self.attempt_failed(now, Outcome::TransportError)
    }

    /// The transport failed at `now` while the caller made it ready for the
    /// attempt it was told to start ([`Decision::StartNow`]), the first one
    /// included (whether it follows a hold-off or not): the attempt can never
    /// be sent. Recorded as [`EventKind::TransportFailed`] for that attempt,
    /// and the action stops as [`Outcome::TransportError`]. Ignored in any
    /// other phase.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Decision, Outcome, Policy};
    ///
    /// let mut action = Action::new(Policy::default());
    /// let stop = action.readiness_failed(Duration::ZERO);
    /// assert_eq!(stop, Decision::Stop(Outcome::TransportError));
    /// let report = action.report().unwrap();
    /// assert_eq!((report.attempts_started, report.last_status), (0, None));
    /// ```
    pub fn readiness_failed(&mut self, now: Duration) -> Decision {
        let now = self.observe(now);
        if self.phase != Phase::Ready {
            return self.decision();
        }
        self.push(
            now,
            EventKind::TransportFailed {
                attempt: self.attempts_started.saturating_add(1),
            },
        );
        self.stop(now, Outcome::TransportError)
    }

    fn attempt_failed(&mut self, now: Duration, outcome: Outcome) -> Decision {
        let now = self.observe(now);
        if !matches!(self.phase, Phase::InFlight { .. }) {
            return self.decision();
        }
        let attempt = self.attempts_started;
        let kind = if outcome == Outcome::AttemptTimeout {
            EventKind::AttemptTimedOut { attempt }
        } else {
            EventKind::TransportFailed { attempt }
        };
        self.push(now, kind);
        self.stop(now, outcome)
    }

    /// The start condition, checked from `now`: attempts left, then the full
    /// reservation fits.
    fn may_start(&self, now: Duration) -> Result<(), Outcome> {
        Self::may_start_at(&self.policy, self.attempts_started, now).map(|_| ())
    }

    /// The start condition for an attempt after `started` ones, at `now`:
    /// attempts left, then the full reservation fits. Its deadline if so.
    #[inline]
    fn may_start_at(policy: &Policy, started: u32, now: Duration) -> Result<Duration, Outcome> {
        if started >= policy.max_attempts() {
            return Err(Outcome::AttemptsExhausted);
        }
        reservation_end(policy, now).ok_or(Outcome::BudgetExhausted)
    }

    fn stop(&mut self, now: Duration, outcome: Outcome) -> Decision {
        self.phase = Phase::Stopped { outcome, at: now };
        self.events
            .stopped(now, self.policy.total_budget(), outcome);
        Decision::Stop(outcome)
    }

    fn observe(&mut self, now: Duration) -> Duration {
        self.times.advance(now)
    }

    fn push(&mut self, at: Duration, kind: EventKind) {
        self.events.record(at, self.policy.total_budget(), kind);
    }
}

/// Where an attempt starting at `start` under `policy` would end its
/// reservation, if that is inside the budget.
#[inline]
fn reservation_end(policy: &Policy, start: Duration) -> Option<Duration> {
    start
        .checked_add(policy.attempt_cap())
        .filter(|end| *end <= policy.total_budget())
}
