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
    /// When that response arrived (elapsed): a request sent less than
    /// this round trip after `basis` may have reached the server first.
    pub answered: Duration,
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
    ) -> Self {
        Self {
            name: state.name.clone(),
            kind: state.kind,
            remaining: state.remaining,
            basis: sent_at,
            answered: received_at,
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
    /// that began after the basis and before the reset.
    pub(crate) fn left(&self, starts: &VecDeque<Duration>) -> u64 {
        let used = starts
            .iter()
            .filter(|s| **s > self.basis && **s < self.resets_at)
            .count();
        self.remaining
            .saturating_sub(u64::try_from(used).unwrap_or(u64::MAX))
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
    ///   [`SAME_WINDOW`], or a later-sent response finding more left);
    /// * within one window, a response sent no earlier replaces the count
    ///   (the server's latest word), and the window ends at the earlier of
    ///   the two resets;
    /// * a response sent earlier (arriving out of order) is used only
    ///   within the same window and only if it leaves less: it never raises
    ///   what a later-sent request lowered.
    pub(crate) fn update(
        &mut self,
        mut new: Self,
        received_at: Duration,
        starts: &VecDeque<Duration>,
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
        // the two raced: sent less than the earlier one's round trip
        // apart, the later-sent may have reached the server first, and
        // its count is then the older one.
        let raced = new.basis.saturating_sub(self.basis) < self.answered.saturating_sub(self.basis);
        let raised = new.basis > self.basis && new.remaining > self.remaining;
        let same_window = self.same_window(&new) && !(raised && !raced);
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
        let (left, new_left) = (self.left(starts), new.left(starts));
        if new.basis >= self.basis && !(raced && new_left > left) {
            *self = new;
        } else if new.basis < self.basis && new_left < left {
            // Sent earlier, arriving out of order: taken only if it leaves
            // less.
            self.remaining = new.remaining;
            self.basis = new.basis;
            self.answered = new.answered;
        }
    }
}
