//! Pacing before the 429: the quota a server announces is respected before
//! it is spent.
//!
//! Rate-limited APIs say on every response (any status) how much of the
//! current window is left and when it resets. A client that ignores it
//! spends the window at once, collects a wall of 429s, and only then
//! waits. This module reads those fields and decides, for each new action,
//! the earliest instant its first attempt may start. Pure, like the rest of
//! the core: instants are the caller's elapsed
//! [`Duration`](std::time::Duration)s; the calendar reading and the random
//! seed are inputs.
//!
//! * [`QuotaReader`] turns one response's headers into [`QuotaState`]s,
//!   one per named limit, noting every value it set aside ([`QuotaNote`]).
//! * [`Pacer`] (one per upstream) holds the freshest state per limit and
//!   answers [`Pacer::admit`] with an [`Admission`]: when, and which limit
//!   ([`PaceReason`]) made it wait.
//!
//! # Fields read
//!
//! | fields | limit name | reset read as |
//! |---|---|---|
//! | `RateLimit: "name";r=R;t=T` with `RateLimit-Policy: "name";q=Q;w=W` (several per field) | the policy's name | delta seconds |
//! | `RateLimit: limit=L, remaining=R, reset=T` (older dictionary) with `RateLimit-Policy: L;w=W` | `ratelimit` | delta seconds |
//! | `RateLimit-Remaining` + `RateLimit-Reset` (+ `RateLimit-Limit`) | `ratelimit` | seconds or Unix time (see [`QuotaReader::x_ratelimit_reset`]) |
//! | `X-RateLimit-Remaining` + `X-RateLimit-Reset` (+ `X-RateLimit-Limit`) | `x-ratelimit` | seconds or Unix time, as configured |
//! | `x-ratelimit-remaining-{requests,tokens}` + `x-ratelimit-reset-…` (OpenAI, Groq; Azure's `-1` is unknown) | `requests`, `tokens` | Go duration (`6m0s`) |
//! | `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}` | `anthropic-…` | RFC 3339 |
//! | operator-named pairs ([`QuotaReader::pair`]) | as named | as named |
//!
//! Resets are read by the core's own reset parsers
//! ([`reset`](crate::reset)). A response with `Age` (from a cache) is not
//! read; a malformed, negative or unknown value is set aside and a reset
//! beyond the maximum hold is clamped to it, each with a [`QuotaNote`].
//! Token limits ([`LimitKind::Tokens`], and an IETF policy whose `qu` is not
//! `requests`) pace only when exhausted: a request's token cost is not
//! announced. Once two responses of one window show it (the drop of
//! `remaining` per first attempt started between their requests, the
//! largest seen: [`HeldLimit::cost`]), the first attempts started since a
//! reading are taken from it as for a request limit, so that a burst does
//! not overrun what is left; it still paces only when nothing is left.
//!
//! # The rules
//!
//! * Nothing left: not before the reset, plus a uniform spread in
//!   `[0, spread]` (seeded, so reproducible) so that the waiting actions do
//!   not return in one instant; with the window's quota and length known,
//!   each projected window after the reset takes at most its quota.
//! * `R` left: at most `R` first attempts start before the reset, placed
//!   evenly ([`Placement::Even`], the default) or at once
//!   ([`Placement::Burst`]).
//! * A state covers the first attempts started before its request was
//!   sent; those started since (in flight, or placed in the future) are
//!   taken from it, and so are those started less than a round trip
//!   before it whose answers are not back ([`HeldLimit::race`]: on other
//!   connections they may reach the server after it). A start counts from
//!   the instant it was sent ([`Pacer::sent`]); a retry's from when it is
//!   planned ([`Pacer::retry_planned`]): it spends its window too.
//! * Out of order: a response sent earlier never raises what a later-sent
//!   one lowered in the same window, nor does one that raced it (sent
//!   less than a round trip apart); the earliest reset announced within
//!   one window is its end; a state expires at its reset, so an upstream
//!   that stops sending the fields is no longer paced.
//! * A fleet of clients shares one count: before a first attempt is
//!   sent, the caller takes one from the fleet's count of each window
//!   [`Pacer::fleet_windows`] names (a shared store, outside the core);
//!   a window the fleet has spent is told back with
//!   [`Pacer::fleet_spent`], which admits the attempt again.
//! * No start is placed further than the maximum hold from the moment it
//!   was asked for.
//!
//! The wait counts in the action's budget like the shared hold-off's: the
//! caller feeds [`Admission::at`] to the action before its first attempt
//! (see [`Action::hold_off`](crate::Action::hold_off)).
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::pace::{Pacer, PacerConfig, PaceRule, QuotaReader};
//!
//! let ms = Duration::from_millis;
//! let reader = QuotaReader::new();
//! let mut pacer = Pacer::with_seed(PacerConfig::default(), 7);
//!
//! // The first request starts at once: nothing is known yet.
//! assert_eq!(pacer.admit(ms(0)).at, ms(0));
//! // Its response, 50 ms later: 1 left of 10 in a window ending in 2 s.
//! let reading = reader.read(
//!     [
//!         ("RateLimit", &br#""default";r=1;t=2"#[..]),
//!         ("RateLimit-Policy", &br#""default";q=10;w=2"#[..]),
//!     ],
//!     None,
//! );
//! assert_eq!(reading.states[0].remaining, 1);
//! pacer.observe(ms(0), ms(50), &reading.states);
//!
//! // One more may start before the reset at 2050 ms: placed halfway.
//! assert_eq!(pacer.admit(ms(50)).at, ms(1025));
//! // Then none is left: after the reset, within the spread.
//! let paced = pacer.admit(ms(60));
//! let why = paced.reason.expect("paced");
//! assert_eq!((why.rule, why.left, why.resets_at), (PaceRule::Exhausted, 0, ms(2050)));
//! assert!(paced.at >= ms(2050) && paced.at <= ms(2150));
//! ```
#![deny(clippy::arithmetic_side_effects)] // time is saturating here

mod admission;
mod fields;
mod ietf;
mod limit;
mod pacer;
mod reader;
mod state;
mod values;
mod vendor;

pub use admission::{Admission, PaceReason, PaceRule};
pub use limit::{HeldLimit, SAME_WINDOW};
pub use pacer::{FleetWindow, Pacer, PacerConfig, Placement, DEFAULT_SPREAD, MAX_STARTS};
pub use reader::{QuotaReader, DEFAULT_MAX_HOLD};
pub use state::{
    LimitKind, QuotaIgnored, QuotaNote, QuotaReading, QuotaState, MAX_LIMITS, MAX_NAME_LEN,
    MAX_QUOTA_NOTES,
};
pub use values::UNIX_TIME_FROM;
