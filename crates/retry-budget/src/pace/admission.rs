//! The pacer's answer for one new action, and why.

use std::time::Duration;

use super::state::LimitKind;

/// When a new action's first attempt may start, and why not earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The earliest instant (the caller's elapsed time) the first attempt
    /// may start: `now` when nothing paces it.
    pub at: Duration,
    /// The limit that set `at` when it is later than `now`; `None`
    /// otherwise.
    pub reason: Option<PaceReason>,
}

impl Admission {
    /// How long to wait from `now` (zero when not paced).
    pub fn wait(&self, now: Duration) -> Duration {
        self.at.saturating_sub(now)
    }
}

/// Which rule placed a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PaceRule {
    /// Nothing left in the window: not before the reset (plus a spread).
    Exhausted,
    /// Some left: the window's remaining starts are placed evenly until
    /// the reset ([`Placement::Even`](super::Placement::Even)).
    Spread,
}

impl PaceRule {
    /// `exhausted` or `spread`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "exhausted",
            Self::Spread => "spread",
        }
    }
}

/// The limit that paced an action: what the report says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PaceReason {
    /// The limit's name.
    pub limit: String,
    /// What it counts.
    pub kind: LimitKind,
    /// The remaining count the server last announced.
    pub announced: u64,
    /// What the pacer counted as left for this window when it decided:
    /// the announced count less the first attempts started since the
    /// announcing request was sent.
    pub left: u64,
    /// When the window resets (elapsed).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "resets_at_s", serialize_with = "crate::secs::ser")
    )]
    pub resets_at: Duration,
    /// The rule applied.
    pub rule: PaceRule,
    /// The instant was later than the maximum hold and was clamped to it.
    pub clamped: bool,
}
