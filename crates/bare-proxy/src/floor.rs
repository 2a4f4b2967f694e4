//! `--floor`: the bare proxy doing, on the happy path, the least work the
//! sidecar's defaults require of every request, each part written the
//! plainest way (or taken from the well-kept crate that does it), and
//! nothing else. A benchmark's floor for `retry-budget proxy` with its
//! defaults, as the bare proxy is the floor of forwarding alone
//! (BENCHMARKS.md, "Sidecar proxy").
//!
//! Per request, besides the bare proxy's forwarding:
//!
//! * the rule: a core [`Action`] under the default [`Policy`], told the
//!   attempt and the response, and its [`Report`] taken;
//! * a copy of the request head, kept until the response (what a retry
//!   would be sent from);
//! * the attempt's deadline from the core, one tokio timer
//!   ([`tokio::time::timeout`]);
//! * the caller's drain token watched while the attempt is in flight;
//! * the client budget: a deposit into tower's `TpsBudget`, shared by the
//!   workers;
//! * the hold-off: the upstream's hold read (one read lock) and compared
//!   with the request's start, set from a 429's `Retry-After`;
//! * pacing: the upstream's announced quota read before the attempt (one
//!   read lock), and looked for in every response (a few header fields);
//! * the attempt number on the upstream request, the attempts and the
//!   outcome on the caller's response;
//! * metrics (`prometheus-client`): responses by status, actions by
//!   outcome, the actions in flight, the action's duration; each series
//!   looked up in its family once, then kept (as the sidecar keeps them);
//! * a log line, buffered per worker thread and written when the worker
//!   parks (as the sidecar's), its numbers written with `itoa`, not
//!   `fmt`.
//!
//! Not a proxy to run: a 429 is relayed, not retried, and a hold or a
//! quota is recorded, not waited out. Only what every successful request costs is
//! here.

use std::cell::RefCell;
use std::io::Write as _;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::RETRY_AFTER;
use http::{HeaderName, HeaderValue, Method, Uri};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use retry_budget::retry_after::RetryAfter;
use retry_budget::{Action, Answer, Decision, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::retry::budget::{Budget, TpsBudget};

// The sidecar's field names (its binary crate's `proxy::attempt` and
// `proxy::reply`, which this crate cannot depend on).

/// `retry-budget-attempt`, on the upstream request.
const ATTEMPT: HeaderName = HeaderName::from_static("retry-budget-attempt");
/// `retry-budget-attempts`, on the caller's response.
const ATTEMPTS: HeaderName = HeaderName::from_static("retry-budget-attempts");
/// `retry-budget-outcome`, on the caller's response.
const OUTCOME: HeaderName = HeaderName::from_static("retry-budget-outcome");

/// The quota fields pacing looks for (the IETF draft's, and the usual
/// providers').
const QUOTA_FIELDS: [HeaderName; 4] = [
    HeaderName::from_static("ratelimit"),
    HeaderName::from_static("ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-remaining-requests"),
];

/// A worker's log buffer is written once it holds this many bytes.
const FLUSH_AT: usize = 16 * 1024;

thread_local! {
    static LINES: RefCell<String> = const { RefCell::new(String::new()) };
}

/// What the floor's requests share, over all workers.
#[derive(Debug)]
pub struct Floor {
    policy: Arc<Policy>,
    budget: TpsBudget,
    /// The upstream's hold-off: no first attempt before this time since
    /// `origin`.
    held: RwLock<Option<Duration>>,
    origin: Instant,
    /// The requests the upstream last said are left in its window.
    remaining: RwLock<Option<u64>>,
    metrics: Metrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug)]
struct Metrics {
    responses: Family<StatusLabel, Counter>,
    /// `responses`' series by status, once looked up.
    by_status: Box<[OnceLock<Counter>]>,
    actions: Family<OutcomeLabel, Counter>,
    /// `actions`' series by outcome (in `Outcome::ALL`'s order), once
    /// looked up.
    by_outcome: Box<[OnceLock<Counter>]>,
    in_flight: Gauge,
    duration: Histogram,
    /// Holds them, as a metrics endpoint would read them.
    _registry: Registry,
}

impl Default for Floor {
    fn default() -> Self {
        Self::new()
    }
}

impl Floor {
    /// The default policy, tower's `TpsBudget` with its usual settings
    /// (10 s window, 10 retries per second, 20 % of deposits), no hold.
    pub fn new() -> Self {
        let responses = Family::<StatusLabel, Counter>::default();
        let actions = Family::<OutcomeLabel, Counter>::default();
        let in_flight = Gauge::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let mut registry = Registry::default();
        registry.register("responses", "upstream responses", responses.clone());
        registry.register("actions", "actions by outcome", actions.clone());
        registry.register("in_flight", "actions in flight", in_flight.clone());
        registry.register("duration", "action duration", duration.clone());
        let metrics = Metrics {
            responses,
            by_status: (0..600).map(|_| OnceLock::new()).collect(),
            actions,
            by_outcome: Outcome::ALL.iter().map(|_| OnceLock::new()).collect(),
            in_flight,
            duration,
            _registry: registry,
        };
        Self {
            policy: Arc::new(Policy::default()),
            budget: TpsBudget::new(Duration::from_secs(10), 10, 0.2),
            held: RwLock::new(None),
            origin: Instant::now(),
            remaining: RwLock::new(None),
            metrics,
        }
    }

    /// An action starting at `received`, its first attempt allowed. The
    /// hold and the quota are looked at (kept from the optimiser with
    /// `black_box`), not waited out: see the module docs.
    pub fn start(&self, received: Instant) -> Started<'_> {
        let held = *self.held.read().unwrap_or_else(PoisonError::into_inner);
        let since = received.duration_since(self.origin);
        std::hint::black_box(held.is_some_and(|until| until > since));
        let remaining = *self
            .remaining
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        std::hint::black_box(remaining == Some(0));
        self.budget.deposit();
        self.metrics.in_flight.inc();
        let mut action = Action::new(self.policy.clone());
        let decision = action.attempt_started(Duration::ZERO);
        debug_assert!(matches!(decision, Decision::AwaitResponse { .. }));
        let reserved = action.attempt_deadline().unwrap_or(Duration::ZERO);
        Started {
            floor: self,
            action,
            received,
            reserved,
        }
    }
}

/// One action of the floor, its first attempt started.
pub struct Started<'a> {
    floor: &'a Floor,
    action: Action,
    received: Instant,
    /// How long the attempt may take, from `received` (the core's
    /// attempt deadline).
    pub reserved: Duration,
}

impl Started<'_> {
    /// Marks the upstream request with the attempt's number.
    pub fn mark(&self, headers: &mut http::HeaderMap) {
        headers.insert(ATTEMPT, HeaderValue::from_static("1"));
    }

    /// The action ends with a response of `status` and `headers`: its
    /// report, for [`tell`] and [`log`].
    pub fn respond(mut self, status: u16, headers: &http::HeaderMap) -> Report {
        let retry_after = match headers.get(RETRY_AFTER) {
            Some(value) => RetryAfter::parse_bytes(value.as_bytes()),
            None => RetryAfter::Missing,
        };
        // One pass over the fields (a response has few), no lookups.
        let announced = headers.iter().find(|(name, _)| QUOTA_FIELDS.contains(name));
        if let Some(left) = announced.and_then(|(_, v)| v.to_str().ok()?.parse().ok()) {
            let mut remaining = self
                .floor
                .remaining
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            *remaining = Some(left);
        }
        let now = self.received.elapsed();
        let _ = self.action.respond(now, Answer::new(status, &retry_after));
        if status == 429 {
            if let RetryAfter::Seconds(wait) = retry_after {
                let since = self.received.duration_since(self.floor.origin);
                let until = since.saturating_add(wait);
                *self
                    .floor
                    .held
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Some(until);
            }
        }
        self.end(Some(status))
    }

    /// The action ends without a response (the attempt failed, timed
    /// out, or the drain token fired).
    pub fn fail(mut self, timed_out: bool) -> Report {
        let now = self.received.elapsed();
        let _ = if timed_out {
            self.action.attempt_timed_out(now)
        } else {
            self.action.transport_failed(now)
        };
        self.end(None)
    }

    fn end(mut self, status: Option<u16>) -> Report {
        let report = self.action.take_report().unwrap_or_else(|| {
            // The core stops an action after a final answer; a 429 it
            // would retry is relayed here (see the module docs).
            let now = self.received.elapsed();
            self.action.caller_left(now);
            self.action.take_report().expect("stopped")
        });
        let metrics = &self.floor.metrics;
        if let Some(status) = status {
            let make = || {
                let labels = StatusLabel { status };
                metrics.responses.get_or_create(&labels).clone()
            };
            match metrics.by_status.get(usize::from(status)) {
                Some(series) => series.get_or_init(make).inc(),
                None => make().inc(),
            };
        }
        let make = || {
            let labels = OutcomeLabel {
                outcome: report.outcome.as_str(),
            };
            metrics.actions.get_or_create(&labels).clone()
        };
        let slot = Outcome::ALL.iter().position(|o| *o == report.outcome);
        match slot.and_then(|slot| metrics.by_outcome.get(slot)) {
            Some(series) => series.get_or_init(make).inc(),
            None => make().inc(),
        };
        metrics.in_flight.dec();
        metrics.duration.observe(report.elapsed.as_secs_f64());
        report
    }
}

/// Writes the caller's fields of `report` into `headers`.
pub fn tell(headers: &mut http::HeaderMap, report: &Report) {
    headers.insert(ATTEMPTS, HeaderValue::from(report.attempts_started));
    headers.insert(OUTCOME, HeaderValue::from_static(report.outcome.as_str()));
}

/// The action's log line, into this worker's buffer.
pub fn log(method: &Method, url: &Uri, report: &Report) {
    LINES.with(|lines| {
        let Ok(mut lines) = lines.try_borrow_mut() else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut digits = itoa::Buffer::new();
        lines.push_str("ts=");
        lines.push_str(digits.format(now.as_secs()));
        lines.push('.');
        let millis = now.subsec_millis();
        lines.push_str(["", "0", "00"][usize::from(millis < 100) + usize::from(millis < 10)]);
        lines.push_str(digits.format(millis));
        lines.push_str(" method=");
        lines.push_str(method.as_str());
        lines.push_str(" url=");
        if let (Some(scheme), Some(authority)) = (url.scheme_str(), url.authority()) {
            lines.push_str(scheme);
            lines.push_str("://");
            lines.push_str(authority.as_str());
        }
        lines.push_str(url.path_and_query().map_or("/", |p| p.as_str()));
        lines.push_str(" outcome=");
        lines.push_str(report.outcome.as_str());
        lines.push_str(" attempts=");
        lines.push_str(digits.format(report.attempts_started));
        lines.push_str(" status=");
        lines.push_str(digits.format(report.last_status.unwrap_or(0)));
        lines.push_str(" elapsed_ms=");
        lines.push_str(digits.format(report.elapsed.as_millis()));
        lines.push('\n');
        if lines.len() >= FLUSH_AT {
            write_out(&mut lines);
        }
    });
}

/// Writes this worker's buffered lines (the runtime calls it when the
/// worker parks).
pub fn flush() {
    LINES.with(|lines| {
        if let Ok(mut lines) = lines.try_borrow_mut() {
            write_out(&mut lines);
        }
    });
}

fn write_out(lines: &mut String) {
    if !lines.is_empty() {
        let _ = std::io::stderr().lock().write_all(lines.as_bytes());
        lines.clear();
    }
}
