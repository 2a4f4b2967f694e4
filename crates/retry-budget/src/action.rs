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
//! not retried (`success` for 2xx/3xx, `not_retryable` otherwise), no attempts
//! left (`attempts_exhausted`, without reading the header), an HTTP-date with
//! no trusted clock (`clock_untrusted`), the reservation does not fit
//! (`budget_exhausted`).
//!
//! # Many actions at once
//!
//! Three further inputs let a caller that runs many actions keep them from
//! turning one limit into a stampede, each still decided here:
//!
//! * **jitter** on the local fallback wait ([`Jitter`] in the
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

use crate::asked_delay::{self, AskedDelay, DelaySource, ServerAsked};
use crate::trail::{Event, EventKind, Trail, WaitBasis};
use crate::trail_details;
use crate::{retry_after::RetryAfter, Answer, Jitter, Outcome, Policy, Report};

/// What the caller must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start the next attempt now, then report it with
    /// [`Action::attempt_started`].
    StartNow,
    /// An attempt is in flight; it must answer by `deadline` (elapsed), after
    /// which it is abandoned with [`Action::attempt_timed_out`].
    AwaitResponse {
        /// 1-based attempt number.
        attempt: u32,
        /// `start + cap`.
        deadline: Duration,
    },
    /// Sleep until this elapsed time, then call [`Action::timer_woke`].
    WaitUntil(Duration),
    /// The action is over.
    Stop(Outcome),
}

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
    latest: Duration,
    attempts_started: u32,
    last_status: Option<u16>,
    server_requested_wait: Option<Duration>,
    events: Trail,
    rng: fastrand::Rng,
    previous_fallback: Option<Duration>,
    server_asked_until: Option<Duration>,
    told: Told,
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
            latest: Duration::ZERO,
            attempts_started: 0,
            last_status: None,
            server_requested_wait: None,
            // Nothing written until an event must be (see `Trail`).
            events: Trail::new(),
            rng: fastrand::Rng::with_seed(seed),
            previous_fallback: None,
            server_asked_until: None,
            told: Told::default(),
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
        self.server_asked_until = None;
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
    /// [`server_requested_wait`](Report::server_requested_wait) is always
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
            translated_from,
            replayable,
            retry_after_ms,
            should_retry,
            quota,
        } = answer;
        let now = self.observe(now);
        if !matches!(self.phase, Phase::InFlight { .. }) {
            return self.decision();
        }
        if let Some(from) = translated_from {
            self.push(
                now,
                EventKind::Translated {
                    attempt: self.attempts_started,
                    from,
                },
            );
        }
        self.last_status = Some(status);
        let retried = self.policy.retries(status);
        self.events.response(
            now,
            self.policy.total_budget(),
            (self.attempts_started, status),
            retry_after,
            calendar,
        );

        // What the server asked, read for a retried status (and a 429, for
        // the shared hold-off) before any stop, so that the trail and the
        // report say it whatever the stop reason.
        let delay = if retried || status == 429 {
            asked_delay::choose(
                retry_after,
                retry_after_ms.as_ref(),
                reset_headers.as_ref(),
                calendar,
            )
        } else {
            AskedDelay::nothing()
        };
        if retried {
            let response = trail_details::Response {
                at: now,
                budget: self.policy.total_budget(),
                attempt: self.attempts_started,
                retry_after,
                retry_after_ms: retry_after_ms.as_ref(),
                calendar,
            };
            trail_details::record(&mut self.events, &response, &delay);
        }
        let asked = delay.asked;
        let requested = asked.requested();
        self.server_requested_wait = requested.filter(|_| retried);
        self.server_asked_until = requested
            .filter(|_| status == 429)
            .map(|delay| now.saturating_add(delay.max(self.policy.min_wait())));

        if !retried {
            return self.stop(now, Outcome::of_final_status(status));
        }
        let attempt = self.attempts_started;
        if let Some(code) = quota {
            self.push(now, EventKind::QuotaExhausted { attempt, code });
            return self.stop(now, Outcome::NotRetryable);
        }
        let mut forbidden = forbidden;
        if let Some(word) = should_retry {
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
                    let extra = self.uniform(Duration::ZERO, spread);
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
            ServerAsked::Nothing => self.fallback(self.attempts_started),
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

    /// After a `429` with a usable `Retry-After` (delay-seconds, or an
    /// HTTP-date with a trusted calendar reading) or
    /// [reset header](Answer::resets): the elapsed time until
    /// which the service asked the client to wait, `receipt + max(min_wait,
    /// delay)`, whatever this action decided (it may have stopped because
    /// the wait does not fit). `None` otherwise, and again once the next
    /// attempt starts. A caller running many actions shares it with later
    /// first attempts to the same service ([`hold_off`](Self::hold_off)).
    pub const fn server_asked_until(&self) -> Option<Duration> {
        self.server_asked_until
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
            server_requested_wait: self.server_requested_wait,
            attempt_cap: self.policy.attempt_cap(),
            events: std::mem::take(&mut self.events),
            shared_with: 0,
        })
    }

    /// The local fallback wait after `completed` attempts, spread by the
    /// policy's jitter (see [`Jitter`]).
    fn fallback(&mut self, completed: u32) -> (Duration, WaitBasis) {
        let unjittered = self.policy.fallback_wait(completed);
        let floor = self.policy.min_wait().min(unjittered);
        let wait = match self.policy.jitter() {
            Jitter::None => return (unjittered, WaitBasis::Fallback { completed }),
            Jitter::Full => self.uniform(floor, unjittered),
            Jitter::Equal => self.uniform((unjittered / 2).max(floor), unjittered),
            Jitter::Decorrelated => {
                let first = self.policy.fallback_wait(1);
                let previous = self.previous_fallback.unwrap_or(first);
                let mut high = previous.saturating_mul(3).max(first);
                if let Some(cap) = self.policy.fallback_cap() {
                    high = high.min(cap);
                }
                self.uniform(first.min(high), high).max(floor)
            }
            Jitter::Additive(extra) => {
                unjittered.saturating_add(self.uniform(Duration::ZERO, extra))
            }
        };
        self.previous_fallback = Some(wait);
        (
            wait,
            WaitBasis::FallbackJittered {
                completed,
                unjittered,
            },
        )
    }

    /// A uniform draw in whole milliseconds within `[low, high]` (`low` if
    /// no whole millisecond lies strictly above it).
    fn uniform(&mut self, low: Duration, high: Duration) -> Duration {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let sub_milli = u64::from(!low.subsec_nanos().is_multiple_of(1_000_000));
        let lo = millis(low).saturating_add(sub_milli);
        let hi = millis(high);
        if lo >= hi {
            return low;
        }
        Duration::from_millis(self.rng.u64(lo..=hi))
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
        self.latest = self.latest.max(now);
        self.latest
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

/// What an action asks its caller to tell the state it shares with the
/// client's other actions, after an input: see
/// [`Action::client_effects`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientEffects {
    /// The first attempt has started: count it in a client-wide retry
    /// budget (tower's `Budget::deposit`).
    pub deposit: bool,
    /// A retry has been planned: withdraw it from the client-wide retry
    /// budget, and if that refuses, tell the action
    /// [`retry_refused`](Action::retry_refused).
    pub withdraw: bool,
    /// The service asked the client to wait until this elapsed time (see
    /// [`Action::server_asked_until`]): publish it to a shared hold-off map.
    pub hold_until: Option<Duration>,
}

impl ClientEffects {
    /// Whether there is nothing to tell.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What [`Action::client_effects`] has already answered, so that each
/// effect is answered once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Told {
    deposited: bool,
    // Attempt numbers (at most `MAX_ATTEMPTS_LIMIT`): two bytes each keep
    // the action under a 16-byte step of the allocator.
    withdrawn_after: u16,
    held_after: u16,
}

/// Decisions a caller running the action needs besides the next step:
/// readiness failures, whether the request may be moved instead of copied,
/// and what to tell the client's shared state.
impl Action {
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

    /// Whether another attempt may still follow the one in flight (or, before
    /// it starts, the next one): when `false`, that attempt is the last, and
    /// the caller may send the request itself instead of keeping a copy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_budget::{Action, Policy};
    ///
    /// let policy = Policy::builder().max_attempts(2).build()?;
    /// let mut action = Action::new(policy);
    /// assert!(action.retry_may_follow()); // the first of two
    /// action.attempt_started(Duration::ZERO);
    /// assert!(action.retry_may_follow());
    /// # use retry_budget::retry_after::RetryAfter;
    /// action.response(Duration::from_secs(1), 429, &RetryAfter::parse("1"), None);
    /// action.timer_woke(Duration::from_secs(2));
    /// assert!(!action.retry_may_follow()); // the next one is the last
    /// # Ok::<(), retry_budget::PolicyError>(())
    /// ```
    pub fn retry_may_follow(&self) -> bool {
        let last = match self.phase {
            Phase::Stopped { .. } => return false,
            Phase::InFlight { .. } => self.attempts_started,
            Phase::Ready | Phase::Waiting { .. } => self.attempts_started.saturating_add(1),
        };
        last < self.policy.max_attempts()
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
        let started = u16::try_from(self.attempts_started).unwrap_or(u16::MAX);
        let deposit = started > 0 && !self.told.deposited;
        let withdraw = matches!(self.phase, Phase::Waiting { .. })
            && started > 0
            && self.told.withdrawn_after < started;
        let hold_until = self
            .server_asked_until
            .filter(|_| self.told.held_after < started);
        self.told.deposited |= deposit;
        if withdraw {
            self.told.withdrawn_after = started;
        }
        if hold_until.is_some() {
            self.told.held_after = started;
        }
        ClientEffects {
            deposit,
            withdraw,
            hold_until,
        }
    }
}
