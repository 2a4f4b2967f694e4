//! One limit as the pacer holds it, and how a new reading updates it.

use std::collections::VecDeque;
use std::time::Duration;

use super::state::{LimitKind, QuotaState};

/// Two resets closer than this are the same window's end: servers round
/// `t` up to whole seconds, so responses within one window announce resets
/// up to a second apart.
pub const SAME_WINDOW: Duration = Duration::from_secs(1);

/// One limit's freshest state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLimit {
    /// The limit's name.
    pub name: String,
    /// What it counts.
    pub kind: LimitKind,
    /// The remaining count announced.
    pub remaining: u64,
    /// When the request whose response announced it was sent (elapsed):
    /// first attempts started after this are not counted in `remaining`.
    pub basis: Duration,
    /// Requests sent less than this apart may reach the server in either
    /// order (sent on different connections): the longest round trip the
    /// pacer has seen lately, this response's included.
    pub race: Duration,
    /// When the window resets (elapsed); the state expires then.
    pub resets_at: Duration,
    /// The window's quota, if announced.
    pub quota: Option<u64>,
    /// The window's length, if announced.
    pub window: Option<Duration>,
    /// A token limit's cost of one first attempt, as the server's own
    /// counts show it: the largest drop of `remaining` between two
    /// responses of one window, per first attempt started between their
    /// requests (kept across windows). `None` until seen; never for a
    /// request limit.
    pub cost: Option<u64>,
}

impl HeldLimit {
    pub(crate) fn new(
        state: &QuotaState,
        sent_at: Duration,
        received_at: Duration,
        max_hold: Duration,
        race: Duration,
    ) -> Self {
        Self {
            name: state.name.clone(),
            kind: state.kind,
            remaining: state.remaining,
            basis: sent_at,
            race: race.max(received_at.saturating_sub(sent_at)),
            resets_at: received_at.saturating_add(state.reset.min(max_hold)),
            quota: state.quota,
            window: state.window,
            cost: None,
        }
    }

    /// Whether `self` and `other` name the same limit.
    pub(crate) fn same_limit(&self, other: &Self) -> bool {
        self.kind == other.kind && self.name == other.name
    }

    /// Whether the two resets end the same window.
    fn same_window(&self, other: &Self) -> bool {
        self.resets_at.abs_diff(other.resets_at) <= SAME_WINDOW
    }

    /// What is left of `remaining` after the first attempts in `starts`
    /// that began after the basis and before the reset, and after those
    /// that began less than [`race`](Self::race) before the basis and are
    /// not `answered` yet: sent on other connections, they may have
    /// reached the server after its request and not be in its count. (The
    /// answer of one of them is read by [`update`](Self::update) in turn.)
    pub(crate) fn left(&self, starts: &VecDeque<Duration>, answered: &VecDeque<Duration>) -> u64 {
        let raced_from = self.basis.saturating_sub(self.race);
        let mut used = 0_u64;
        for s in starts {
            let raced = *s > raced_from && *s < self.basis && answered.binary_search(s).is_err();
            if raced || (*s > self.basis && *s < self.resets_at) {
                used = used.saturating_add(1);
            }
        }
        self.remaining.saturating_sub(used)
    }

    /// A token limit's drop from `self` to `later` (same window, sent
    /// later), per first attempt started between their requests (the
    /// later one's own included): the largest seen is the cost.
    fn learn_cost(&mut self, later: &Self, starts: &VecDeque<Duration>) {
        let between = starts
            .iter()
            .filter(|s| **s > self.basis && **s <= later.basis)
            .count();
        let Ok(between @ 1..) = u64::try_from(between) else {
            return;
        };
        let drop = self.remaining.saturating_sub(later.remaining);
        let per = drop.div_ceil(between);
        if per > 0 {
            self.cost = Some(self.cost.map_or(per, |cost| cost.max(per)));
        }
    }

    /// What is left of a token limit's `remaining` after the first
    /// attempts in `starts` that began after the basis and before the
    /// reset, each costing `cost`, counted in first attempts: the
    /// threshold is not counted here.
    pub(crate) fn tokens_left(&self, cost: u64, starts: &VecDeque<Duration>) -> u64 {
        self.remaining
            .checked_div(cost)
            .unwrap_or_default()
            .saturating_sub(self.left_used(starts))
    }

    /// The first attempts in `starts` after the basis, before the reset.
    fn left_used(&self, starts: &VecDeque<Duration>) -> u64 {
        let used = starts
            .iter()
            .filter(|s| **s > self.basis && **s < self.resets_at)
            .count();
        u64::try_from(used).unwrap_or(u64::MAX)
    }

    /// Takes in `new`, read at `received_at`:
    ///
    /// * an expired state is replaced, and so is a state whose window a
    ///   response sent no earlier says has ended (a reset further apart than
    ///   [`SAME_WINDOW`], or a response sent at least [`race`](Self::race)
    ///   later finding more left);
    /// * within one window, a response sent no earlier replaces the count
    ///   (the server's latest word), unless the two raced (sent less than
    ///   `race` apart: either may have reached the server first) and it
    ///   leaves more; the window ends at the earlier of the two resets;
    /// * a response sent earlier (arriving out of order) is used only
    ///   within the same window and only if it leaves less: it never raises
    ///   what a later-sent request lowered.
    pub(crate) fn update(
        &mut self,
        mut new: Self,
        received_at: Duration,
        (starts, answered): (&VecDeque<Duration>, &VecDeque<Duration>),
    ) {
        new.cost = self.cost;
        if self.resets_at <= received_at {
            *self = new;
            return;
        }
        // Within one window a server's count only goes down: a later-sent
        // request that finds more left is in a new window, whatever its
        // reset says (resets rounded up to whole seconds can make an old
        // window's end and a new one's fall within `SAME_WINDOW`). Unless
        // the two raced: sent less than a round trip apart, the later-sent
        // may have reached the server first, and its count is then the
        // older one.
        let raced = new.basis.saturating_sub(self.basis) < self.race.max(new.race);
        let raised = new.basis > self.basis && new.remaining > self.remaining;
        let same_window = (raced || !raised) && self.same_window(&new);
        if same_window && new.basis > self.basis && self.kind == LimitKind::Tokens {
            self.learn_cost(&new, starts);
            new.cost = self.cost;
        }
        if !same_window {
            if new.basis >= self.basis {
                *self = new;
            }
            return;
        }
        // One window, ending at the earlier reset: both counts are read
        // up to it.
        let resets_at = self.resets_at.min(new.resets_at);
        self.resets_at = resets_at;
        new.resets_at = resets_at;
        let (left, new_left) = (self.left(starts, answered), new.left(starts, answered));
        if new.basis >= self.basis && !(raced && new_left > left) {
            *self = new;
        } else if new.basis < self.basis && new_left < left {
            // Sent earlier, arriving out of order: taken only if it leaves
            // less.
            self.remaining = new.remaining;
            self.basis = new.basis;
            self.race = new.race;
        }
    }
}
