//! Which [`Policy`] one request gets: the configured one, shrunk to the
//! caller's deadline if it sent one (`Policy::within`, the core's rule),
//! and one attempt for a request that must go once:
//!
//! * a write (not a safe method, and no `Idempotency-Key` with a value once
//!   the hop-by-hop fields are gone, so that the key decided on is the key
//!   sent), unless its path is listed with `--idempotent-path`;
//! * a request that is already a retry of a proxy below
//!   (`retry-budget-attempt` > 1, or not a number, unless
//!   `--retry-retries`), or of an SDK (`x-stainless-retry-count` > 0, as
//!   OpenAI's and Anthropic's SDKs send it), so that retries do not
//!   multiply across proxies and clients.

use std::time::Duration;

use http::request::Parts;
use http::HeaderValue;
use retry_budget::{Policy, PolicyError};

use super::attempt::AttemptOffset;
use super::fields::Fields;
use super::route::RouteConfig;
use crate::common::idempotency::has_idempotency_key;

/// Why a request is sent once, without retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Once {
    /// Already a retry of a proxy below.
    AlreadyARetry,
    /// Already a retry of an SDK (`x-stainless-retry-count` > 0).
    ClientRetry,
    /// A write without an idempotency key.
    Write,
}

impl Once {
    /// The name the log line gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AlreadyARetry => "already_a_retry",
            Self::ClientRetry => "client_retry",
            Self::Write => "not_idempotent",
        }
    }
}

/// What the request's head says about retrying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// Why it goes once, if it does.
    pub once: Option<Once>,
    /// The attempt number a proxy below gave it, if one did.
    pub incoming_attempt: Option<u32>,
}

impl Class {
    /// The class of a request whose hop-by-hop fields are gone (its
    /// `fields` found in them), going to the upstream path `path`.
    pub fn of(parts: &Parts, fields: &Fields<'_>, path: &str, config: &RouteConfig) -> Self {
        let headers = &parts.headers;
        let sdk_retry = fields
            .sdk_retry_count
            .is_some_and(|v| incoming_attempt(v) > 0);
        let incoming = fields.attempt.map(incoming_attempt);
        let once = if incoming.is_some_and(|n| n > 1) && !config.retry_retries {
            Some(Once::AlreadyARetry)
        } else if sdk_retry && !config.retry_retries {
            Some(Once::ClientRetry)
        } else if !parts.method.is_safe()
            && !has_idempotency_key(headers)
            && !config.idempotent_paths.lists(path)
        {
            Some(Once::Write)
        } else {
            None
        };
        Self {
            once,
            incoming_attempt: incoming,
        }
    }

    /// What is added to the attempt number written upstream: a proxy's
    /// retry forwarded once keeps its number (none for any other request).
    pub fn offset(self) -> Option<AttemptOffset> {
        match self.once {
            Some(Once::AlreadyARetry) => self
                .incoming_attempt
                .map(|first| first.saturating_sub(1))
                .filter(|offset| *offset > 0)
                .map(AttemptOffset),
            _ => None,
        }
    }
}

/// The attempt number a caller's `retry-budget-attempt` says: a number too
/// large for 32 bits is the largest, and a value that is not a number is
/// taken as a retry (2) rather than as a first attempt, so that it cannot
/// open a way around "a proxy's retry is forwarded once".
fn incoming_attempt(value: &HeaderValue) -> u32 {
    let text = value.to_str().unwrap_or("").trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Only digits: it overflows or it is a number.
        text.parse::<u32>().unwrap_or(u32::MAX)
    } else {
        2
    }
}

/// The one-attempt policy of a request that must go once (the core's
/// builder checks it).
pub fn once_policy(policy: Policy) -> Result<Policy, PolicyError> {
    policy.to_builder().max_attempts(1).build()
}

/// Why a request has no policy.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// The core's answer to a caller's deadline that allows no time at all
    /// ([`PolicyError::ZeroBudget`] from `Policy::within`): the caller's
    /// budget is spent before anything is sent.
    DeadlineSpent(PolicyError),
    /// Any other refusal: the proxy's own error, not the caller's.
    Invalid(PolicyError),
}

/// The policy of one request; see the [module docs](self).
pub fn policy_of(
    base: Policy,
    allowed: Option<Duration>,
    once: Option<Once>,
) -> Result<Policy, Refused> {
    let policy = match allowed.map(|allowed| base.within(allowed)) {
        Some(Ok(policy)) => policy,
        Some(Err(zero @ PolicyError::ZeroBudget)) => return Err(Refused::DeadlineSpent(zero)),
        Some(Err(other)) => return Err(Refused::Invalid(other)),
        None => base,
    };
    if once.is_some() {
        return once_policy(policy).map_err(Refused::Invalid);
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_must_go_once_gets_one_attempt_within_the_deadline() {
        let base = Policy::default();
        assert_eq!(policy_of(base, None, None), Ok(base));
        let once = policy_of(base, None, Some(Once::Write)).unwrap();
        assert_eq!(once.max_attempts(), 1);
        assert_eq!(once.total_budget(), base.total_budget());
        let both = policy_of(
            base,
            Some(Duration::from_secs(2)),
            Some(Once::AlreadyARetry),
        )
        .unwrap();
        assert_eq!(both.max_attempts(), 1);
        assert_eq!(both.total_budget(), Duration::from_secs(2));
        assert_eq!(both.attempt_cap(), Duration::from_secs(2));
        assert_eq!(
            policy_of(base, Some(Duration::ZERO), None),
            Err(Refused::DeadlineSpent(PolicyError::ZeroBudget)),
            "the core's answer to a spent deadline"
        );
    }

    #[test]
    fn an_attempt_number_that_is_not_a_number_is_a_retry() {
        for (given, read) in [
            ("1", 1),
            (" 3 ", 3),
            ("0", 0),
            ("4294967295", u32::MAX),
            ("4294967296", u32::MAX),
            ("99999999999999999999999", u32::MAX),
            ("abc", 2),
            ("", 2),
            ("-1", 2),
            ("+1", 2),
            ("1.0", 2),
        ] {
            assert_eq!(
                incoming_attempt(&HeaderValue::from_static(given)),
                read,
                "{given:?}"
            );
        }
    }
}
