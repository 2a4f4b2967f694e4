//! One route: which requests it takes ([`Match`]) and everything an
//! action of one of them is sent with (upstream, policy, signals, hold-off,
//! pacing, client budget, TLS, HTTP/2), checked once, whether it comes
//! from the flags (the one-route shorthand) or from a `[[route]]` of the
//! config file (`file.rs`). [`RouteSpec`] is what both give;
//! [`RouteSpec::build`] checks it into a [`RouteConfig`], its errors
//! naming the flag (the file names its own key for it, see
//! [`file_key`]).

use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;
use retry_budget::pace::{LimitKind, PacerConfig, QuotaReader};
use retry_budget::reset::ResetFormat;
use retry_budget::{ratio::Ratio, Policy, Secs};
use tower_retry_budget::hold_off::{HoldOff, RedisStore};
use tower_retry_budget::idempotent_paths::IdempotentPathsLayer;
use tower_retry_budget::pace::Pacing;
use tower_retry_budget::peek::PeekLayer;
use tower_retry_budget::response_signal::{HttpSignal, Provider};
use tower_retry_budget::{budget::ClientBudget, response_signal::ResetSignal};

use super::upstream::Upstream;
use crate::common::budget_args::BudgetArgs;

/// The window of the client-wide retry budget (tower's `TpsBudget` default).
const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// Which requests a route takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Every request (the flags' one route).
    Any,
    /// A path prefix, without its trailing `/`, matched at a segment
    /// boundary and stripped before the path is mapped under the upstream.
    Prefix(String),
    /// A `Host` (or an absolute-form target's host), lower-case, with a
    /// port only if one must match too.
    Host(String),
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Any => f.write_str("every request"),
            Self::Prefix(prefix) => write!(f, "prefix {prefix}/"),
            Self::Host(host) => write!(f, "host {host}"),
        }
    }
}

/// What a route is made of, before it is checked: see the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// The route's name (the `route` label, the log line).
    pub name: String,
    /// Which requests it takes.
    pub matcher: Match,
    /// Where they go.
    pub upstream: Upstream,
    /// Whether they go as HTTP/2.
    pub http2: bool,
    /// The policy, the signals, the CA.
    pub budget: BudgetArgs,
    /// The statuses retried, if not the policy's default.
    pub retry_on: Option<Vec<u16>>,
    /// The client-wide budget (percent of first attempts, reserve per
    /// second), if on.
    pub client_budget: Option<(u32, u32)>,
    /// Whether the shared hold-off is on.
    pub hold_off: bool,
    /// Where it is shared with other proxies, if anywhere.
    pub hold_off_redis: Option<String>,
    /// Its namespace there.
    pub hold_off_namespace: Option<String>,
    /// Whether pacing is on.
    pub pace: bool,
    /// The operator's pacing pairs.
    pub pace_headers: Vec<PaceHeader>,
    /// Whether retries of a proxy or SDK below are budgeted too.
    pub retry_retries: bool,
    /// The writes declared safe to repeat.
    pub idempotent_paths: Vec<String>,
    /// The hold-off's and the pacers' longest hold.
    pub max_hold: Duration,
}

/// A route, checked; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Its name.
    pub name: String,
    /// Which requests it takes.
    pub matcher: Match,
    /// The upstream.
    pub upstream: Upstream,
    /// The policy of an action the caller puts no deadline on.
    pub policy: Policy,
    /// Whether the calendar clock is trusted.
    pub trusted_clock: bool,
    /// The reset headers to read besides Retry-After, if any was asked for.
    pub reset: Option<ResetSignal>,
    /// What reads a retried status's JSON body for a quota used up
    /// (a preset whose API sends one; otherwise nothing is read).
    pub quota: PeekLayer,
    /// The API preset in force, if any (`auto` resolved).
    pub preset: Option<&'static Provider>,
    /// The client-wide retry budget, if on.
    pub client_budget: Option<ClientBudget>,
    /// Whether the shared hold-off is on.
    pub hold_off: bool,
    /// Where the hold-off is shared with other proxies, if anywhere.
    pub hold_off_redis: Option<RedisStore>,
    /// How first attempts are paced by the quota the upstream announces.
    pub pacing: Option<Pacing>,
    /// Whether retries of a proxy below (or of an SDK) are budgeted too.
    pub retry_retries: bool,
    /// The writes declared safe to repeat.
    pub idempotent_paths: IdempotentPathsLayer,
    /// CA certificates for an https:// upstream.
    pub cacert: Option<PathBuf>,
    /// The hold-off's longest hold.
    pub max_hold: Duration,
    /// What its stateful parts are made from (see [`Shares`]).
    pub shares: Shares,
}

/// What a route's stateful parts (hold-off, pacers, client budget) are
/// made from, as keys: routes whose hold-off (or pacing) keys are equal
/// share one (each is keyed by upstream inside, so a `Retry-After` from an
/// upstream holds every route to it), and a reload keeps the running ones
/// whose keys it finds again, with what they learned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shares {
    /// The hold-off's settings, if on.
    pub hold_off: Option<String>,
    /// The pacing's settings, if on.
    pub pacing: Option<String>,
    /// The route's name and its client budget's settings, if on.
    pub client_budget: Option<String>,
}

impl RouteConfig {
    /// The route in a line: its name, what it takes, and
    /// [`Self::describe`].
    pub fn line(&self) -> String {
        format!(
            "route {}: {} -> {}",
            self.name,
            self.matcher,
            self.describe()
        )
    }

    /// The route's upstream and policy in a line.
    pub fn describe(&self) -> String {
        format!(
            "upstream {}{}; preset {}; budget {}, at most {} attempts, {} per attempt",
            self.upstream,
            if self.upstream.http2 { " (HTTP/2)" } else { "" },
            self.preset.map_or("none", |p| p.name),
            Secs(self.policy.total_budget()),
            self.policy.max_attempts(),
            Secs(self.policy.attempt_cap()),
        )
    }
}

impl RouteSpec {
    /// Checks the route; the error is one line naming the flag at fault.
    pub fn build(mut self) -> Result<RouteConfig, String> {
        let mut policy = self.budget.policy()?;
        if let Some(statuses) = &self.retry_on {
            policy = policy
                .to_builder()
                .retry_statuses(statuses.iter().copied())
                .build()
                .map_err(|e| format!("--retry-on: {e}"))?;
        }
        // `auto` (the default) chooses the preset from the upstream's host.
        let signals = std::mem::take(&mut self.budget.signals);
        self.budget.signals = signals.for_host(self.upstream.authority.host(), true);
        let asked = &self.budget.signals;
        let reset = asked.reads_any().then(|| asked.signal(HttpSignal));
        // The hold-off checks its own bound; built here without a store
        // only to check it before anything listens.
        HoldOff::builder()
            .max_hold(self.max_hold)
            .build()
            .map_err(|e| format!("--max-hold: {e}"))?;
        let shares = Shares {
            hold_off: self.hold_off.then(|| {
                let store = (&self.hold_off_redis, &self.hold_off_namespace);
                format!("{store:?} {:?}", self.max_hold)
            }),
            // With a Redis store, the fleet shares the allowance there too.
            pacing: self.pace.then(|| {
                let store = (&self.hold_off_redis, &self.hold_off_namespace);
                format!("{:?} {:?} {store:?}", self.pace_headers, self.max_hold)
            }),
            client_budget: self
                .client_budget
                .map(|budget| format!("{} {budget:?}", self.name)),
        };
        Ok(RouteConfig {
            shares,
            client_budget: self.client_budget()?,
            hold_off_redis: self.hold_off_redis()?,
            pacing: self.pacing(),
            name: self.name,
            matcher: self.matcher,
            upstream: self.upstream.http2(self.http2),
            policy,
            trusted_clock: !self.budget.untrusted_clock,
            reset,
            quota: self.budget.signals.quota(),
            preset: self.budget.signals.provider(),
            hold_off: self.hold_off,
            retry_retries: self.retry_retries,
            idempotent_paths: IdempotentPathsLayer::new(self.idempotent_paths),
            cacert: self.budget.cacert,
            max_hold: self.max_hold,
        })
    }

    /// The client-wide retry budget, if on.
    fn client_budget(&self) -> Result<Option<ClientBudget>, String> {
        let Some((percent, reserve)) = self.client_budget else {
            return Ok(None);
        };
        let ratio = Ratio::percent(percent).map_err(|e| format!("--retry-ratio: {e}"))?;
        ClientBudget::new(ratio, reserve, RETRY_WINDOW)
            .map(Some)
            .map_err(|e| format!("--retry-ratio: {e}"))
    }

    /// The pacing, if on: every field the core reads, the operator's
    /// pairs, resets held at most `max_hold` (shared with a fleet on the
    /// Redis store, if any, once a runtime runs: [`super::stack::pacing`]).
    fn pacing(&self) -> Option<Pacing> {
        if !self.pace {
            return None;
        }
        let reader = self.pace_headers.iter().fold(
            QuotaReader::new().max_hold(self.max_hold),
            |reader, pair| {
                reader.pair(
                    pair.remaining.as_str(),
                    pair.remaining.as_str(),
                    pair.reset.as_str(),
                    pair.format,
                    LimitKind::Requests,
                )
            },
        );
        let config = PacerConfig {
            max_hold: self.max_hold,
            ..PacerConfig::default()
        };
        Some(Pacing::new().reader(reader).config(config))
    }

    /// The shared hold-off's store, if one is named.
    fn hold_off_redis(&self) -> Result<Option<RedisStore>, String> {
        let Some(url) = &self.hold_off_redis else {
            return Ok(None);
        };
        let store = RedisStore::new(url).map_err(|e| format!("--hold-off-redis: {e}"))?;
        Ok(Some(match &self.hold_off_namespace {
            Some(name) => store
                .namespace(name)
                .map_err(|e| format!("--hold-off-namespace: {e}"))?,
            None => store,
        }))
    }
}

/// The config file's key for a flag a [`RouteSpec::build`] error names
/// (the words of Envoy and Linkerd where they have one).
pub fn file_key(flag: &str) -> &str {
    match flag {
        "--max-attempts" => "attempts",
        "--attempt-timeout" => "per_try_timeout",
        "--reset-max-interval" => "max_interval",
        "--retry-on" => "retry_on",
        other => other.trim_start_matches("--"),
    }
}

/// A `--pace-header`: the remaining and reset headers of one limit, and
/// how the reset is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaceHeader {
    pub(super) remaining: HeaderName,
    pub(super) reset: HeaderName,
    pub(super) format: ResetFormat,
}

/// `REMAINING,RESET=FORMAT`.
pub fn parse_pace_header(text: &str) -> Result<PaceHeader, String> {
    let expected = || {
        format!(
            "expected REMAINING,RESET=FORMAT (e.g. x-remaining,x-reset=unix; FORMAT one of \
             seconds, unix, duration, rfc3339), not {text:?}"
        )
    };
    let (names, format) = text.split_once('=').ok_or_else(expected)?;
    let (remaining, reset) = names.split_once(',').ok_or_else(expected)?;
    let name = |name: &str| {
        HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("{:?} is not a valid header name", name.trim()))
    };
    let format = match format.trim() {
        "seconds" => ResetFormat::Seconds,
        "unix" => ResetFormat::Unix,
        "duration" => ResetFormat::Duration,
        "rfc3339" => ResetFormat::Rfc3339,
        _ => return Err(expected()),
    };
    Ok(PaceHeader {
        remaining: name(remaining)?,
        reset: name(reset)?,
        format,
    })
}

/// An `--idempotent-path`: an absolute path, no query.
pub fn parse_idempotent_path(text: &str) -> Result<String, String> {
    if !text.starts_with('/') || text.contains(['?', '#']) || text.contains(char::is_whitespace) {
        return Err(format!(
            "expected an absolute path such as /v1/embeddings (no query), not {text:?}"
        ));
    }
    Ok(text.to_owned())
}
