//! The pacer: the freshest state per limit of one upstream, and the
//! earliest start of a new action's first attempt.

use std::collections::VecDeque;
use std::time::Duration;

use super::admission::{Admission, PaceReason, PaceRule};
use super::limit::HeldLimit;
use super::reader::DEFAULT_MAX_HOLD;
use super::state::{LimitKind, QuotaState};

/// One window of a request limit that a fleet of clients shares: what a
/// first attempt about to start spends, for the caller to take from the
/// fleet's shared count (see [`Pacer::fleet_windows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetWindow {
    /// The limit's name.
    pub limit: String,
    /// The remaining count the server last announced.
    pub announced: u64,
    /// When the window resets (elapsed).
    pub resets_at: Duration,
}

/// The default [spread](PacerConfig::spread) after a reset.
pub const DEFAULT_SPREAD: Duration = Duration::from_millis(100);

/// The most first-attempt starts remembered (the earliest are forgotten).
pub const MAX_STARTS: usize = 4096;

/// How a window's remaining starts are placed before its reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    /// Evenly until the reset: with `L` left and `T` until the reset after
    /// the latest start, the next start waits `T / (L + 1)` after it (the
    /// default). Suits a fixed window and a refilling bucket alike, and
    /// every response in the window narrows its end.
    #[default]
    Even,
    /// At once while any is left, then hold until the reset.
    ///
    /// `tests/pace_simulation.rs` measures both against a fixed window, a
    /// token bucket and a limiter that announces its reset late: burst is
    /// the quicker against an aligned fixed window only, even against the
    /// other two, and neither sends a 429 there.
    Burst,
}

/// The pacer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacerConfig {
    /// No start is placed further than this from the moment it is asked
    /// for (default [`DEFAULT_MAX_HOLD`]).
    pub max_hold: Duration,
    /// After an exhausted window's reset, starts are spread uniformly over
    /// `[0, spread]` (default [`DEFAULT_SPREAD`]).
    pub spread: Duration,
    /// A token limit paces only when its remaining is at or below this
    /// (default 0): a request's token cost is unknown.
    pub token_threshold: u64,
    /// How a window's remaining starts are placed.
    pub placement: Placement,
}

impl Default for PacerConfig {
    fn default() -> Self {
        Self {
            max_hold: DEFAULT_MAX_HOLD,
            spread: DEFAULT_SPREAD,
            token_threshold: 0,
            placement: Placement::Even,
        }
    }
}

/// One upstream's pacer (the caller keeps one per upstream key): feed it
/// every response's [`QuotaState`]s with [`observe`](Self::observe), ask it
/// with [`admit`](Self::admit) before a new action's first attempt.
///
/// Times are the caller's elapsed [`Duration`]s from an origin of its
/// choosing, as for [`Action`](crate::Action); a time that goes backwards
/// is read as the latest one seen.
#[derive(Debug, Clone)]
pub struct Pacer {
    config: PacerConfig,
    limits: Vec<HeldLimit>,
    /// First-attempt starts admitted (some may lie in the future), in
    /// order of time: the starts past the hold are dropped from the front,
    /// and a start not placed later than the others (nearly every one) is
    /// added at the back, each in constant time.
    starts: VecDeque<Duration>,
    /// The starts whose response has been observed (matched by the instant
    /// its request was sent), in order of time.
    answered: VecDeque<Duration>,
    /// The longest round trip seen lately (each response's own, or
    /// seven eighths of the previous one).
    rtt: Duration,
    latest: Duration,
    rng: fastrand::Rng,
}

impl Pacer {
    /// A pacer whose spread is drawn from a generator seeded from
    /// `fastrand`'s thread-local generator (so that pacers spread apart);
    /// use [`Pacer::with_seed`] for reproducible instants. Without a spread
    /// nothing random is ever read.
    pub fn new(config: PacerConfig) -> Self {
        let seed = if config.spread.is_zero() {
            0
        } else {
            fastrand::u64(..)
        };
        Self::with_seed(config, seed)
    }

    /// A pacer whose spread is drawn from a generator seeded with `seed`:
    /// the same seed and inputs give the same instants.
    pub fn with_seed(config: PacerConfig, seed: u64) -> Self {
        Self {
            config,
            limits: Vec::new(),
            starts: VecDeque::new(),
            answered: VecDeque::new(),
            rtt: Duration::ZERO,
            latest: Duration::ZERO,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// Its settings.
    pub const fn config(&self) -> &PacerConfig {
        &self.config
    }

    /// The limits held (not yet expired at the latest time seen).
    pub fn limits(&self) -> impl Iterator<Item = &HeldLimit> + '_ {
        self.limits.iter().filter(|l| l.resets_at > self.latest)
    }

    /// A response to a request sent at `sent_at` arrived at `received_at`
    /// announcing `states` (read by a
    /// [`QuotaReader`](super::QuotaReader)). Its counts cover the first
    /// attempts started up to `sent_at`; those started since are taken from
    /// them, and so are those started less than a round trip before whose
    /// answers are not back yet (see [`HeldLimit::race`]). Any response
    /// counts, retried or not, any status; the start recorded at `sent_at`
    /// (see [`sent`](Self::sent)) is answered.
    pub fn observe(&mut self, sent_at: Duration, received_at: Duration, states: &[QuotaState]) {
        let received_at = self.see(received_at);
        let sent_at = sent_at.min(received_at);
        let decayed = self
            .rtt
            .saturating_sub(self.rtt.checked_div(8).unwrap_or_default());
        self.rtt = decayed.max(received_at.saturating_sub(sent_at));
        if self.starts.binary_search(&sent_at).is_ok() {
            record(&mut self.answered, sent_at);
        }
        for state in states {
            let new = HeldLimit::new(state, sent_at, received_at, self.config.max_hold, self.rtt);
            match self.limits.iter_mut().find(|l| l.same_limit(&new)) {
                Some(held) => held.update(new, received_at, (&self.starts, &self.answered)),
                None => self.limits.push(new),
            }
        }
        self.limits.retain(|l| l.resets_at > received_at);
    }

    /// The earliest instant a new action's first attempt may start,
    /// asked at `now`; the start is recorded at that instant (give it back
    /// with [`release`](Self::release) if the action never starts).
    pub fn admit(&mut self, now: Duration) -> Admission {
        let now = self.see(now);
        if !self.limits.is_empty() {
            self.limits.retain(|l| l.resets_at > now);
        }
        let floor = now.saturating_sub(self.config.max_hold);
        for starts in [&mut self.starts, &mut self.answered] {
            while starts.front().is_some_and(|s| *s < floor) {
                starts.pop_front();
            }
        }
        let mut admission = Admission {
            at: now,
            reason: None,
        };
        for i in 0..self.limits.len() {
            let Some((at, reason)) = self.place(i, now) else {
                continue;
            };
            if at > admission.at {
                admission = Admission {
                    at,
                    reason: Some(reason),
                };
            }
        }
        let cap = now.saturating_add(self.config.max_hold);
        if admission.at > cap {
            admission.at = cap;
            if let Some(reason) = admission.reason.as_mut() {
                reason.clamped = true;
            }
        }
        self.record(admission.at);
        admission
    }

    /// The attempt whose start was recorded for `admission` (by
    /// [`admit`](Self::admit) or [`retry_planned`](Self::retry_planned))
    /// was sent at `at`: its start is moved there.
    ///
    /// A response's counts cover the attempts that reached the server
    /// before its request; the pacer takes those sent after it (see
    /// [`observe`](Self::observe)). Compared by the instant each was
    /// admitted, a burst admitted at once and sent a moment later would be
    /// taken as covered by the answer of whichever was sent first, and
    /// that answer's count spent a second time.
    pub fn sent(&mut self, admission: &Admission, at: Duration) {
        // Kept as given (not raised to the latest time seen, as other
        // inputs are): its answer names this instant as the one it was
        // sent at.
        self.see(at);
        // The latest start, sent no earlier than the one before it (nearly
        // every one): moved in place, where `record` would put it.
        let len = self.starts.len();
        let before = len.checked_sub(2).and_then(|b| self.starts.get(b)).copied();
        if let Some(last) = self.starts.back_mut() {
            if *last == admission.at && before.is_none_or(|b| b <= at) {
                *last = at;
                return;
            }
        }
        let Some(i) = self.starts.iter().rposition(|s| *s == admission.at) else {
            return;
        };
        self.starts.remove(i);
        self.record(at);
    }

    /// A retry of an action is planned to start `wait` after `now` (its
    /// response asked for that wait; pacing never changes it): its start
    /// is recorded there, for it spends the window it lands in like a
    /// first attempt. Without it, a retry landing in a window whose
    /// allowance the pacer has already placed would be one start too many
    /// there, and its own 429 the next window's. Give the admission
    /// returned to [`sent`](Self::sent) when the retry is sent, or to
    /// [`release`](Self::release) if it never is.
    pub fn retry_planned(&mut self, now: Duration, wait: Duration) -> Admission {
        let now = self.see(now);
        let admission = Admission {
            at: now.saturating_add(wait.min(self.config.max_hold)),
            reason: None,
        };
        self.record(admission.at);
        admission
    }

    /// Gives back the start recorded for `admission` (the action stopped
    /// before its first attempt): it no longer counts against any window.
    pub fn release(&mut self, admission: &Admission) {
        if let Some(i) = self.starts.iter().rposition(|s| *s == admission.at) {
            self.starts.remove(i);
        }
    }

    /// Records a start at `at`, in order of time.
    fn record(&mut self, at: Duration) {
        record(&mut self.starts, at);
    }

    /// The windows a first attempt starting at `now` spends, which a fleet
    /// of clients takes from one shared count (each client's pacer sees
    /// only its own starts): every request limit held at `now`. Token
    /// limits are never shared: a request's token cost is unknown.
    pub fn fleet_windows(&self, now: Duration) -> Vec<FleetWindow> {
        let now = now.max(self.latest);
        self.limits
            .iter()
            .filter(|l| l.kind == LimitKind::Requests && l.resets_at > now)
            .map(|l| FleetWindow {
                limit: l.name.clone(),
                announced: l.remaining,
                resets_at: l.resets_at,
            })
            .collect()
    }

    /// The fleet's shared count says the window of request limit `limit`
    /// is spent, for `window_left` from `now`: the limit is held with
    /// nothing left until then (as if a response sent at `now` had said
    /// so; a window ends no later than the maximum hold), the start
    /// recorded for `admission` is given back, and the first attempt is
    /// admitted again.
    pub fn fleet_spent(
        &mut self,
        limit: &str,
        now: Duration,
        window_left: Duration,
        admission: &Admission,
    ) -> Admission {
        let now = self.see(now);
        let held = self
            .limits
            .iter()
            .find(|l| l.kind == LimitKind::Requests && l.name == limit);
        let state = QuotaState {
            name: limit.to_owned(),
            kind: LimitKind::Requests,
            remaining: 0,
            reset: window_left,
            quota: held.and_then(|l| l.quota),
            window: held.and_then(|l| l.window),
        };
        self.release(admission);
        self.observe(now, now, &[state]);
        self.admit(now)
    }

    /// Where limit `i` places a start asked for at `now`, if it paces it.
    fn place(&mut self, i: usize, now: Duration) -> Option<(Duration, PaceReason)> {
        let limit = &self.limits[i];
        let left = match limit.kind {
            LimitKind::Requests => limit.left(&self.starts, &self.answered),
            LimitKind::Tokens if limit.remaining <= self.config.token_threshold => 0,
            // With a cost learned from the server's counts, the first
            // attempts started since the reading are taken from it too;
            // it paces only when nothing is left.
            LimitKind::Tokens => match limit.cost {
                Some(cost @ 1..) if limit.tokens_left(cost, &self.starts) == 0 => 0,
                _ => return None,
            },
        };
        let (at, rule) = if left == 0 {
            (self.after_reset(i), PaceRule::Exhausted)
        } else {
            match self.config.placement {
                Placement::Burst => return None,
                Placement::Even => {
                    let prev = self
                        .starts
                        .iter()
                        .copied()
                        .filter(|s| *s < limit.resets_at)
                        .max()?;
                    let steps = u32::try_from(left.saturating_add(1)).unwrap_or(u32::MAX);
                    let gap = limit
                        .resets_at
                        .saturating_sub(prev)
                        .checked_div(steps)
                        .unwrap_or_default();
                    (prev.saturating_add(gap), PaceRule::Spread)
                }
            }
        };
        let limit = &self.limits[i];
        (at > now).then(|| {
            (
                at,
                PaceReason {
                    limit: limit.name.clone(),
                    kind: limit.kind,
                    announced: limit.remaining,
                    left,
                    resets_at: limit.resets_at,
                    rule,
                    clamped: false,
                },
            )
        })
    }

    /// After limit `i`'s reset: a request limit with a known quota and
    /// window places each further start in the first projected window with
    /// room (starts already placed there counted), then the spread.
    fn after_reset(&mut self, i: usize) -> Duration {
        let limit = &self.limits[i];
        let mut at = limit.resets_at;
        if let (LimitKind::Requests, Some(quota @ 1..), Some(window)) =
            (limit.kind, limit.quota, limit.window)
        {
            let placed = self
                .starts
                .iter()
                .filter(|s| **s >= limit.resets_at)
                .count();
            let windows = u64::try_from(placed)
                .unwrap_or(u64::MAX)
                .checked_div(quota)
                .unwrap_or_default();
            let windows = u32::try_from(windows).unwrap_or(u32::MAX);
            at = at.saturating_add(window.saturating_mul(windows));
        }
        at.saturating_add(self.spread())
    }

    /// A uniform draw in `[0, spread]`.
    fn spread(&mut self) -> Duration {
        let nanos = u64::try_from(self.config.spread.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.u64(0..=nanos))
    }

    /// `now`, never before the latest time seen.
    fn see(&mut self, now: Duration) -> Duration {
        self.latest = self.latest.max(now);
        self.latest
    }
}

/// Adds `at` to `instants` in order of time, forgetting the earliest
/// beyond [`MAX_STARTS`].
fn record(instants: &mut VecDeque<Duration>, at: Duration) {
    if instants.len() >= MAX_STARTS {
        instants.pop_front();
    }
    // Nearly every instant comes after all the others: added at the back.
    if instants.back().is_none_or(|last| *last <= at) {
        instants.push_back(at);
        return;
    }
    let place = instants.partition_point(|s| *s <= at);
    instants.insert(place, at);
}
