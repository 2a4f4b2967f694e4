//! The proxy's metrics, in the Prometheus text format through the official
//! `prometheus-client` crate, fed by the layer's typed observer: every
//! trail event and every report of every action, as the layer records
//! them (never by reading logs back).
//!
//! | metric | type | from |
//! |---|---|---|
//! | `retry_budget_actions_total{outcome,category}` | counter | each report |
//! | `retry_budget_action_duration_seconds` | histogram | each report's elapsed time |
//! | `retry_budget_upstream_attempts_total{attempt="first"\|"retry"}` | counter | `attempt_started` |
//! | `retry_budget_upstream_responses_total{status}` | counter | `response` |
//! | `retry_budget_wait_seconds{basis}` | histogram | `wait_planned` (server, reset_header, fallback, hold_off) |
//! | `retry_budget_hold_offs_total{result="waited"\|"stopped"}` | counter | a hold-off wait planned, or `held_off` |
//! | `retry_budget_retries_throttled_total` | counter | `retry_refused` (the client-wide budget) |
//! | `retry_budget_actions_in_flight` | gauge | first event to `stopped` |
//! | `retry_budget_actions_waiting` | gauge | `wait_planned` to `woke` (or the end) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use retry_budget::{Event, EventKind, Report, WaitBasis};
use tower_retry_budget::{ActionId, Observer};

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    outcome: &'static str,
    category: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    attempt: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    basis: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HoldOffLabels {
    result: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Waits: 0.1 s to about 51 s.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 10))
}

/// What the observer knows of an action still running.
#[derive(Debug, Default)]
struct Running {
    waiting: bool,
}

/// The registry and its metrics; clones share them. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    actions: Family<ActionLabels, Counter>,
    duration: Histogram,
    attempts: Family<AttemptLabels, Counter>,
    responses: Family<StatusLabels, Counter>,
    waits: HistogramFamily<WaitLabels>,
    hold_offs: Family<HoldOffLabels, Counter>,
    throttled: Counter,
    in_flight: Gauge,
    waiting: Gauge,
    running: Mutex<HashMap<u64, Running>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("in_flight", &self.inner.in_flight.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered, all at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("retry_budget");
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "actions",
            "Actions (budgeted requests) by outcome and category",
            actions.clone(),
        );
        // 1 ms to about 33 s.
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register_with_unit(
            "action_duration",
            "Time from an action's first attempt to its end, waits included",
            Unit::Seconds,
            duration.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "upstream_attempts",
            "Attempts sent upstream, first attempts and retries",
            attempts.clone(),
        );
        let responses = Family::<StatusLabels, Counter>::default();
        registry.register(
            "upstream_responses",
            "Responses received from upstream, by status",
            responses.clone(),
        );
        let waits: HistogramFamily<WaitLabels> = Family::new_with_constructor(wait_histogram);
        registry.register_with_unit(
            "wait",
            "Waits planned before a retry (or before a first attempt held off), by basis",
            Unit::Seconds,
            waits.clone(),
        );
        let hold_offs = Family::<HoldOffLabels, Counter>::default();
        registry.register(
            "hold_offs",
            "First attempts held back by the shared hold-off: waited, or stopped unsent",
            hold_offs.clone(),
        );
        let throttled = Counter::default();
        registry.register(
            "retries_throttled",
            "Retries refused by the client-wide retry budget",
            throttled.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "actions_in_flight",
            "Actions started and not yet ended",
            in_flight.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "actions_waiting",
            "Actions waiting between attempts (or for a hold-off)",
            waiting.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                actions,
                duration,
                attempts,
                responses,
                waits,
                hold_offs,
                throttled,
                in_flight,
                waiting,
                running: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// One trail event of action `id`, as the layer records it.
    pub fn event(&self, id: u64, event: &Event) {
        let m = &*self.inner;
        let mut running = m.running.lock().unwrap_or_else(PoisonError::into_inner);
        let state = running.entry(id).or_insert_with(|| {
            m.in_flight.inc();
            Running::default()
        });
        match &event.kind {
            EventKind::AttemptStarted { attempt, .. } => {
                let kind = if *attempt <= 1 { "first" } else { "retry" };
                m.attempts
                    .get_or_create(&AttemptLabels { attempt: kind })
                    .inc();
            }
            EventKind::Response { status, .. } => {
                m.responses
                    .get_or_create(&StatusLabels { status: *status })
                    .inc();
            }
            EventKind::WaitPlanned { wait, basis, .. } => {
                let basis = match basis {
                    WaitBasis::Server { .. } => "server",
                    WaitBasis::ResetHeader { .. } => "reset_header",
                    WaitBasis::Fallback { .. } | WaitBasis::FallbackJittered { .. } => "fallback",
                    WaitBasis::HoldOff => {
                        m.hold_offs
                            .get_or_create(&HoldOffLabels { result: "waited" })
                            .inc();
                        "hold_off"
                    }
                    _ => "other",
                };
                m.waits
                    .get_or_create(&WaitLabels { basis })
                    .observe(wait.as_secs_f64());
                if !state.waiting {
                    state.waiting = true;
                    m.waiting.inc();
                }
            }
            EventKind::Woke { .. } | EventKind::CallerLeft { .. } if state.waiting => {
                state.waiting = false;
                m.waiting.dec();
            }
            EventKind::HeldOff { .. } => {
                m.hold_offs
                    .get_or_create(&HoldOffLabels { result: "stopped" })
                    .inc();
            }
            EventKind::RetryRefused { .. } => {
                m.throttled.inc();
            }
            EventKind::Stopped { .. } => {
                if state.waiting {
                    m.waiting.dec();
                }
                running.remove(&id);
                m.in_flight.dec();
            }
            _ => {}
        }
    }

    /// The report of an action that ended.
    pub fn report(&self, report: &Report) {
        let category = report.category().map_or("none", |c| c.as_str());
        self.inner
            .actions
            .get_or_create(&ActionLabels {
                outcome: report.outcome.as_str(),
                category,
            })
            .inc();
        self.inner.duration.observe(report.elapsed.as_secs_f64());
    }

    /// The text exposition (OpenMetrics, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry);
        text
    }
}

/// The layer's typed observer feeds the metrics: every event as recorded
/// (so the gauges move while actions run), every report once.
impl Observer for Metrics {
    fn on_event(&self, id: ActionId, event: &Event) {
        self.event(id.0, event);
    }

    fn on_report(&self, _id: ActionId, report: &Report) {
        self.report(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_budget::{Action, Decision, Policy, RetryAfter};
    use std::time::Duration;

    /// Runs a 429-then-200 action through the core and feeds its trail.
    #[test]
    fn a_retried_action_is_counted_from_its_trail_and_report() {
        let metrics = Metrics::new();
        let mut action = Action::new(Policy::default());
        let mut fed = 0;
        let mut feed = |action: &Action, metrics: &Metrics| {
            for event in &action.events()[fed..] {
                metrics.event(7, event);
            }
            fed = action.events().len();
        };
        action.attempt_started(Duration::ZERO);
        let wait = action.response(
            Duration::from_millis(10),
            429,
            &RetryAfter::Seconds(Duration::from_secs(1)),
            None,
        );
        assert!(matches!(wait, Decision::WaitUntil(_)));
        feed(&action, &metrics);
        let text = metrics.encode();
        assert!(
            text.contains("retry_budget_actions_in_flight 1\n"),
            "{text}"
        );
        assert!(text.contains("retry_budget_actions_waiting 1\n"), "{text}");
        action.timer_woke(Duration::from_millis(1010));
        action.attempt_started(Duration::from_millis(1010));
        action.response(Duration::from_millis(1020), 200, &RetryAfter::Missing, None);
        feed(&action, &metrics);
        let report = action.into_report().unwrap();
        metrics.report(&report);
        let text = metrics.encode();
        for line in [
            "retry_budget_actions_total{outcome=\"success\",category=\"none\"} 1",
            "retry_budget_upstream_attempts_total{attempt=\"first\"} 1",
            "retry_budget_upstream_attempts_total{attempt=\"retry\"} 1",
            "retry_budget_upstream_responses_total{status=\"429\"} 1",
            "retry_budget_upstream_responses_total{status=\"200\"} 1",
            "retry_budget_wait_seconds_count{basis=\"server\"} 1",
            "retry_budget_wait_seconds_sum{basis=\"server\"} 1.0",
            "retry_budget_action_duration_seconds_count 1",
            "retry_budget_actions_in_flight 0",
            "retry_budget_actions_waiting 0",
            "retry_budget_retries_throttled_total 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
