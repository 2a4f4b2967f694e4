//! A bounded retry budget for rate-limited (429) requests: the pure policy.
//!
//! "Retry when rate limited" leaves open how long a user waits, how many
//! requests are sent and what the screen says when the budget runs out. This
//! crate answers all three with a finite schedule:
//!
//! * only `429 Too Many Requests` is retried (configurable), inside a **total
//!   budget** counted from the first attempt's start and a **maximum number of
//!   attempts**;
//! * the **full per-attempt cap is reserved** before every attempt: an attempt
//!   that could not finish inside the budget never starts;
//! * the server's `Retry-After` is **never shortened** (and is raised to a
//!   local floor); without a usable one, a local fallback of `base^k` seconds
//!   applies;
//! * the caller leaving stops everything; every step is recorded in a trail,
//!   and the [`Report`] keeps the last response apart from the outcome.
//!
//! There is no async runtime and no I/O here: [`Action`] is a state machine
//! that takes elapsed time and the calendar reading as inputs. The tower
//! adapter (`tower-retry-budget`) feeds it tokio's monotonic clock; the
//! `schedule` module (feature `schedule`) feeds it scripted data.
//!
//! The root holds what every user needs (the [`Action`], its [`Policy`],
//! what a response tells it as an [`Answer`], its [`Decision`]s and the
//! final [`Report`]); each reading has a module of its own: [`retry_after`],
//! [`http_date`], [`reset`], what AI APIs send besides them
//! ([`api_signals`]), the [`trail`] of events, the client-wide
//! [`ratio`] budget, the policy's [`defaults`].
//!
//! The map of the crate, a file per job:
//!
//! | file | job |
//! |---|---|
//! | `policy.rs` | configuration and its validation |
//! | `status.rs` | the set of retried statuses |
//! | `retry_after.rs` | parsing `Retry-After` |
//! | `http_date.rs` | HTTP-dates: the strict forms, two-digit years, near-misses |
//! | `reset.rs` | rate-limit reset headers, read as waits |
//! | `api_signals.rs` | `retry-after-ms` and `x-should-retry` (OpenAI, Anthropic) |
//! | `answer.rs` | what one response tells the action, in one value |
//! | `asked_delay.rs` | which delay a response asks for (a pure function) |
//! | `jitter.rs` | the local fallback wait and its jitter |
//! | `action.rs` | the budget rule (the state machine) |
//! | `action/reading.rs` | what it tells of its trail and, once stopped, its report |
//! | `action/repeat.rs` | whether its request may be sent again (a write that must not be) |
//! | `action/shared.rs` | its inputs from the state a client's actions share (hold-off, pacing, shared refusal, shared store) |
//! | `times.rs` | its four kept times, packed (a smaller action) |
//! | `decision.rs` | what the action tells its caller to do next |
//! | `client_effects.rs` | what the caller tells the client's shared state, each effect once |
//! | `event.rs` | the events of the trail (public as [`trail`]) |
//! | `trail.rs` | the trail: where an action keeps its events (a first answer as numbers) |
//! | `trail_details.rs` | what a response's delays add to the trail |
//! | `trail_text.rs` | the words of trail events, shared by every renderer (public) |
//! | `outcome.rs` | how an action ended |
//! | `category.rs` | error categories and their human hints |
//! | `report.rs` | the final report and the visible status |
//! | `after_data.rs` | a status that arrives after the answer began (gRPC trailers) |
//! | `ratio.rs` | the retry budget shared by all actions of a client |
//! | `pace/` | pacing: the quota a response announces, read, and the earliest start it allows (a pacer per upstream) |
//! | `secs.rs` | durations as JSON seconds (feature `serde`) |
//! | `schedule.rs` | the arithmetic model over given schedules (feature `schedule`) |
//!
//! ```
//! use std::time::Duration;
//! use retry_budget::retry_after::RetryAfter;
//! use retry_budget::{Action, Decision, Outcome, Policy};
//!
//! // At t=2 a 429 asks for 30 s: the next start (32) cannot be reserved.
//! let mut action = Action::new(Policy::default());
//! action.attempt_started(Duration::ZERO);
//! let decision = action.response(Duration::from_secs(2), 429, &RetryAfter::parse("30"), None);
//! assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
//! let report = action.report().unwrap();
//! assert_eq!(
//!     report.to_string(),
//!     "Stopped: the retry budget cannot fit the next request.\n\
//!      Last response: 429. Attempts: 1 / 3. Elapsed: 2 s.\n\
//!      The service asked to wait 30 s; no retry was sent.\n\
//!      Category: rate_limit. The service is limiting requests; trying later may work."
//! );
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod action;
mod after_data;
mod answer;
pub mod api_signals;
mod asked_delay;
mod category;
mod client_effects;
mod decision;
mod event;
pub mod http_date;
mod jitter;
mod outcome;
pub mod pace;
mod policy;
pub mod ratio;
mod report;
pub mod reset;
pub mod retry_after;
#[cfg(feature = "serde")]
mod secs;
mod status;
mod times;
pub mod trail;
mod trail_details;
pub mod trail_text;

#[cfg(feature = "schedule")]
#[cfg_attr(docsrs, doc(cfg(feature = "schedule")))]
pub mod schedule;

pub use action::Action;
pub use answer::Answer;
pub use category::Category;
pub use client_effects::ClientEffects;
pub use decision::Decision;
pub use outcome::Outcome;
pub use policy::{Jitter, Policy, PolicyBuilder, PolicyError, Secs};
pub use report::Report;
pub use status::StatusSet;

/// The policy's defaults (what [`Policy::default`] holds) and its limits.
pub mod defaults {
    pub use crate::client_effects::QUOTA_HOLD;
    pub use crate::policy::{
        DEFAULT_ATTEMPT_CAP, DEFAULT_FALLBACK_BASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_MIN_WAIT,
        DEFAULT_TOTAL_BUDGET, MAX_ATTEMPTS_LIMIT,
    };
}
