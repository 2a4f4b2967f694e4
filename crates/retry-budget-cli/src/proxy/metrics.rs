//! The proxy's metrics, in the Prometheus text format through the official
//! `prometheus-client` crate, fed by the layer's typed observer: every
//! trail event and every report of every action, as the layer records
//! them (never by reading logs back).
//!
//! | metric | type | from |
//! |---|---|---|
//! | `retry_budget_actions_total{outcome,category}` | counter | each report (`outcome="bad_request_body",category="caller"` when the caller's request body broke) |
//! | `retry_budget_action_duration_seconds` | histogram | each report's elapsed time |
//! | `retry_budget_upstream_attempts_total{attempt="first"\|"retry"}` | counter | `attempt_started` |
//! | `retry_budget_upstream_responses_total{status}` | counter | `response` |
//! | `retry_budget_wait_seconds{basis}` | histogram | `wait_planned` (server, reset_header, fallback, hold_off, pace) |
//! | `retry_budget_hold_offs_total{result="waited"\|"stopped"}` | counter | a hold-off wait planned, or `held_off` |
//! | `retry_budget_paces_total{result="waited"\|"stopped"}` | counter | a first attempt paced by the announced quota: waited, or `paced` (stopped unsent) |
//! | `retry_budget_retries_throttled_total` | counter | `retry_refused` (the client-wide budget) |
//! | `retry_budget_actions_in_flight` | gauge | first event to `stopped` |
//! | `retry_budget_actions_waiting` | gauge | `wait_planned` to `woke` (or the end) |
//! | `retry_budget_hold_off_store_available{store="redis"}` | gauge | 1 while the shared hold-off store works, 0 while each proxy goes on alone (only with `--hold-off-redis`) |
//! | `retry_budget_hold_off_store_failures_total{store}` | counter | store operations that failed or ran out of time |
//! | `retry_budget_hold_off_store_holds_total{store,direction="published"\|"received"\|"dropped"}` | counter | holds shared with the other proxies |
//! | `retry_budget_client_connections_refused_total{port="proxy"\|"admin"}` | counter | connections closed at once: the port's connection limit was reached |
//! | `retry_budget_client_connections_closed_total{port,reason="header_timeout"\|"idle"}` | counter | connections closed by their time bounds |
//! | `retry_budget_response_bodies_total{ending}` | counter | relayed upstream bodies by how they ended (`complete`, `truncated`, `timed_out`, `caller_gone`) |
//! | `retry_budget_config_reloads_total{result="ok"\|"invalid"}` | counter | config file reloads (SIGHUP): applied, or refused and the running routes kept |
//!
//! A config file's routes have series of their own, labelled `route`
//! (`route_metrics.rs`).
//!
//! The store's figures are read from [`HoldOff::store_health`] at each
//! scrape, and so are the pacing's ([`PaceMetrics`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::pace_metrics::PaceMetrics;
use super::route_metrics::RouteFamilies;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use retry_budget::{
    trail::{Event, EventKind, WaitBasis},
    trail_text::basis_name,
    Category, Outcome, Report,
};
use tower_retry_budget::{
    hold_off::HoldOff,
    observer::{ActionId, Observer},
    pace::Pacing,
};

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreHoldLabels {
    store: &'static str,
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabels {
    port: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClosedLabels {
    port: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndingLabels {
    ending: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Waits: 0.1 s to about 51 s.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 10))
}

/// Increments the counter at `index` of `cache`, made by `make` the first
/// time (a counter made for an index outside the cache is not kept).
fn inc_series(cache: &[OnceLock<Counter>], index: usize, make: impl FnOnce() -> Counter) {
    match cache.get(index) {
        Some(slot) => slot.get_or_init(make).inc(),
        None => make().inc(),
    };
}

/// The categories an action's series is cached for, `None` first.
const CATEGORIES: [Option<Category>; 9] = [
    None,
    Some(Category::RateLimit),
    Some(Category::Quota),
    Some(Category::NotConfigured),
    Some(Category::ClientError),
    Some(Category::ServerError),
    Some(Category::Timeout),
    Some(Category::Transport),
    Some(Category::Cancelled),
];

/// The cached `actions` series: one per outcome and category.
const ACTION_SERIES: usize = Outcome::ALL.len() * CATEGORIES.len();

/// The index of the `actions` series of `outcome` and `category` in the
/// cache (`usize::MAX`, outside it, for one the cache does not know).
fn action_index(outcome: Outcome, category: Option<Category>) -> usize {
    let outcome = Outcome::ALL.iter().position(|o| *o == outcome);
    let category = CATEGORIES.iter().position(|c| *c == category);
    match (outcome, category) {
        (Some(o), Some(c)) => o * CATEGORIES.len() + c,
        _ => usize::MAX,
    }
}

/// The hasher of the maps keyed by action id: `FxHash` (the ids are the
/// process's own counters, never a client's input).
type IdHash = rustc_hash::FxBuildHasher;

/// The shards of the running actions' map.
const SHARDS: usize = 16;

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
    paces: Family<HoldOffLabels, Counter>,
    throttled: Counter,
    in_flight: Gauge,
    waiting: Gauge,
    /// By action id, in [`SHARDS`] maps: an action's id picks its shard,
    /// so the workers (whose ids differ modulo their number) seldom take
    /// the same lock.
    running: [Mutex<HashMap<u64, Running, IdHash>>; SHARDS],
    /// The shared hold-off, whose store's health each scrape reads.
    hold_off: OnceLock<HoldOff>,
    store_available: Family<StoreLabels, Gauge>,
    store_failures: Family<StoreLabels, Counter>,
    store_holds: Family<StoreHoldLabels, Counter>,
    /// The pacing's figures.
    pace: PaceMetrics,
    connections_refused: Family<PortLabels, Counter>,
    connections_closed: Family<ClosedLabels, Counter>,
    bodies: Family<EndingLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    routes: RouteFamilies,
    /// The per-request series, each looked up in its family once and then
    /// incremented through this handle (a family lookup hashes its labels
    /// and takes a lock): `attempts` by first/retry, `responses` by status
    /// (100-999), `bodies` by ending, `actions` by outcome and category
    /// ([`action_index`]).
    attempt_series: [OnceLock<Counter>; 2],
    status_series: Box<[OnceLock<Counter>]>,
    body_series: [OnceLock<Counter>; 4],
    action_series: Box<[OnceLock<Counter>]>,
    /// Actions whose caller's request body broke: counted as the caller's
    /// fault, not the upstream's.
    caller_faults: Mutex<std::collections::HashSet<u64, IdHash>>,
    /// Whether `caller_faults` may hold any id.
    any_caller_faults: std::sync::atomic::AtomicBool,
}

impl Inner {
    /// Registers the metrics of actions and attempts (the registry writes
    /// them in this order).
    fn register_actions(&mut self) {
        self.registry.register(
            "actions",
            "Actions (budgeted requests) by outcome and category",
            self.actions.clone(),
        );
        self.registry.register_with_unit(
            "action_duration",
            "Time from an action's first attempt to its end, waits included",
            Unit::Seconds,
            self.duration.clone(),
        );
        self.registry.register(
            "upstream_attempts",
            "Attempts sent upstream, first attempts and retries",
            self.attempts.clone(),
        );
        self.registry.register(
            "upstream_responses",
            "Responses received from upstream, by status",
            self.responses.clone(),
        );
        self.registry.register_with_unit(
            "wait",
            "Waits planned before a retry (or before a first attempt held off), by basis",
            Unit::Seconds,
            self.waits.clone(),
        );
        self.registry.register(
            "hold_offs",
            "First attempts held back by the shared hold-off: waited, or stopped unsent",
            self.hold_offs.clone(),
        );
        self.registry.register(
            "paces",
            "First attempts paced by the quota the upstream announced: waited, or stopped unsent",
            self.paces.clone(),
        );
        self.registry.register(
            "retries_throttled",
            "Retries refused by the client-wide retry budget",
            self.throttled.clone(),
        );
        self.registry.register(
            "actions_in_flight",
            "Actions started and not yet ended",
            self.in_flight.clone(),
        );
        self.registry.register(
            "actions_waiting",
            "Actions waiting between attempts (or for a hold-off)",
            self.waiting.clone(),
        );
    }

    /// Registers the metrics of the hold-off store, the client connections
    /// and the relayed bodies, after [`Self::register_actions`]'s.
    fn register_store_and_connections(&mut self) {
        self.registry.register(
            "hold_off_store_available",
            "1 while the shared hold-off store works, 0 while this proxy holds off alone",
            self.store_available.clone(),
        );
        self.registry.register(
            "hold_off_store_failures",
            "Operations on the shared hold-off store that failed or ran out of time",
            self.store_failures.clone(),
        );
        self.registry.register(
            "hold_off_store_holds",
            "Holds published to, received from, or dropped before the shared hold-off store",
            self.store_holds.clone(),
        );
        self.registry.register(
            "client_connections_refused",
            "Client connections closed at once because the port's connection limit was reached",
            self.connections_refused.clone(),
        );
        self.registry.register(
            "client_connections_closed",
            "Client connections closed by their time bounds (header timeout, idle timeout)",
            self.connections_closed.clone(),
        );
        self.registry.register(
            "response_bodies",
            "Relayed upstream response bodies, by how they ended",
            self.bodies.clone(),
        );
        self.registry.register(
            "config_reloads",
            "Config file reloads (SIGHUP): ok (applied) or invalid (refused, the running routes kept)",
            self.reloads.clone(),
        );
        self.routes.register(&mut self.registry);
    }
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
        let mut inner = Inner {
            registry: Registry::with_prefix("retry_budget"),
            actions: Family::default(),
            // 1 ms to about 33 s.
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            attempts: Family::default(),
            responses: Family::default(),
            waits: Family::new_with_constructor(wait_histogram),
            hold_offs: Family::default(),
            paces: Family::default(),
            throttled: Counter::default(),
            in_flight: Gauge::default(),
            waiting: Gauge::default(),
            running: std::array::from_fn(|_| Mutex::default()),
            hold_off: OnceLock::new(),
            store_available: Family::default(),
            store_failures: Family::default(),
            store_holds: Family::default(),
            pace: PaceMetrics::default(),
            connections_refused: Family::default(),
            connections_closed: Family::default(),
            bodies: Family::default(),
            reloads: Family::default(),
            routes: RouteFamilies::default(),
            attempt_series: Default::default(),
            status_series: (0..1000).map(|_| OnceLock::new()).collect(),
            body_series: Default::default(),
            action_series: (0..ACTION_SERIES).map(|_| OnceLock::new()).collect(),
            caller_faults: Mutex::default(),
            any_caller_faults: std::sync::atomic::AtomicBool::new(false),
        };
        inner.register_actions();
        inner.register_store_and_connections();
        inner.pace.register(&mut inner.registry);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Exports the health of `hold_off`'s shared store (if it has one) at
    /// each scrape. Only the first call counts.
    pub fn watch_hold_off(&self, hold_off: HoldOff) {
        let _ = self.inner.hold_off.set(hold_off);
    }

    /// Exports the state of `pacing` (and of its shared store, if any) at
    /// each scrape. Only the first call counts.
    pub fn watch_pacing(&self, pacing: Pacing) {
        self.inner.pace.watch(pacing);
    }

    /// Whether a store shared with the other proxies (the hold-off's, the
    /// pacing's allowance) does not work now: this proxy goes on alone.
    pub fn shared_store_down(&self) -> bool {
        let hold_off_down = self
            .inner
            .hold_off
            .get()
            .and_then(HoldOff::store_health)
            .is_some_and(|health| !health.available && health.failures > 0);
        hold_off_down || self.inner.pace.store_down()
    }

    /// Copies the store's health into its metrics.
    fn read_store(&self) {
        let m = &*self.inner;
        let Some(health) = m.hold_off.get().and_then(HoldOff::store_health) else {
            return;
        };
        let store = StoreLabels { store: "redis" };
        m.store_available
            .get_or_create(&store)
            .set(i64::from(health.available));
        let up_to = |counter: &Counter, total: u64| {
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        up_to(&m.store_failures.get_or_create(&store), health.failures);
        for (direction, total) in [
            ("published", health.published),
            ("received", health.received),
            ("dropped", health.dropped),
        ] {
            let labels = StoreHoldLabels {
                store: "redis",
                direction,
            };
            up_to(&m.store_holds.get_or_create(&labels), total);
        }
    }

    /// One trail event of action `id`, as the layer records it.
    pub fn event(&self, id: u64, event: &Event) {
        let m = &*self.inner;
        match &event.kind {
            // Told after the action's `stopped`: not a step of a running
            // action (its corrected report is counted by `report_of`), so
            // it must not enter the running map nor the in-flight gauge.
            EventKind::StatusAfterData { .. } => return,
            // A response arrives only while an attempt is in flight, and
            // these notes just after it: an `attempt_started` of the same
            // action came first and entered it in the running map, and
            // none of them changes its state, so the map is not looked at.
            EventKind::Response { status, .. } => {
                inc_series(&m.status_series, usize::from(*status), || {
                    m.responses
                        .get_or_create(&StatusLabels { status: *status })
                        .clone()
                });
                return;
            }
            EventKind::RetryAfterRepeated { .. }
            | EventKind::LenientDate { .. }
            | EventKind::RetryAfterMs { .. }
            | EventKind::QuotaField { .. } => return,
            _ => {}
        }
        let shard = usize::try_from(id % SHARDS as u64).unwrap_or(0);
        let mut running = m.running[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let EventKind::Stopped { outcome } = event.kind {
            // The last event: the entry is taken out in one lookup.
            stopped(m, running.remove(&id), outcome);
            return;
        }
        let state = running.entry(id).or_insert_with(|| {
            m.in_flight.inc();
            Running::default()
        });
        step(m, state, &event.kind);
    }

    /// The caller's request body of action `id` broke: its report is
    /// counted as `outcome="bad_request_body",category="caller"`.
    pub fn caller_body_broke(&self, id: u64) {
        let mut faults = self
            .inner
            .caller_faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        faults.insert(id);
        self.inner
            .any_caller_faults
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The report of action `id`, which ended.
    pub fn report_of(&self, id: u64, report: &Report) {
        // The lock only while some action's body broke (seldom): set under
        // the lock, cleared under it when the set empties.
        let caller_fault = self
            .inner
            .any_caller_faults
            .load(std::sync::atomic::Ordering::Relaxed)
            && {
                let mut faults = self
                    .inner
                    .caller_faults
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let removed = faults.remove(&id);
                if faults.is_empty() {
                    self.inner
                        .any_caller_faults
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                }
                removed
            };
        if caller_fault {
            self.count(report, "bad_request_body", "caller");
        } else {
            self.report(report);
        }
    }

    /// The report of an action that ended.
    pub fn report(&self, report: &Report) {
        let category = report.category();
        let index = action_index(report.outcome, category);
        let category = category.map_or("none", Category::as_str);
        self.count_at(report, index, report.outcome.as_str(), category);
    }

    fn count(&self, report: &Report, outcome: &'static str, category: &'static str) {
        self.count_at(report, usize::MAX, outcome, category);
    }

    /// [`count`](Self::count) through the series cached at `index`
    /// (none outside the cache).
    fn count_at(
        &self,
        report: &Report,
        index: usize,
        outcome: &'static str,
        category: &'static str,
    ) {
        let m = &*self.inner;
        inc_series(&m.action_series, index, || {
            m.actions
                .get_or_create(&ActionLabels { outcome, category })
                .clone()
        });
        m.duration.observe(report.elapsed.as_secs_f64());
    }

    /// A client connection on `port` closed at once: the limit is reached.
    pub fn connection_refused(&self, port: &'static str) {
        self.inner
            .connections_refused
            .get_or_create(&PortLabels { port })
            .inc();
    }

    /// A client connection on `port` closed by a time bound.
    pub fn connection_closed(&self, port: &'static str, reason: &'static str) {
        self.inner
            .connections_closed
            .get_or_create(&ClosedLabels { port, reason })
            .inc();
    }

    /// A relayed response body ended (`complete`, `truncated`, ...).
    pub fn body_ended(&self, ending: &'static str) {
        let m = &*self.inner;
        let index = ["complete", "truncated", "timed_out", "caller_gone"]
            .iter()
            .position(|known| *known == ending)
            .unwrap_or(usize::MAX);
        inc_series(&m.body_series, index, || {
            m.bodies.get_or_create(&EndingLabels { ending }).clone()
        });
    }

    /// The per-route families.
    pub fn route_families(&self) -> &RouteFamilies {
        &self.inner.routes
    }

    /// A config file reload: applied (`ok`) or refused.
    pub fn config_reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "invalid" };
        self.inner
            .reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    /// The text exposition (OpenMetrics, which Prometheus reads).
    pub fn encode(&self) -> String {
        self.read_store();
        self.inner.pace.read();
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

    fn on_report(&self, id: ActionId, report: &Report) {
        self.report_of(id.0, report);
    }
}

/// One step of a running action (`state`, its entry), other than its
/// responses and its stop.
fn step(m: &Inner, state: &mut Running, kind: &EventKind) {
    match kind {
        EventKind::AttemptStarted { attempt, .. } => {
            let (kind, index) = if *attempt <= 1 {
                ("first", 0)
            } else {
                ("retry", 1)
            };
            inc_series(&m.attempt_series, index, || {
                m.attempts
                    .get_or_create(&AttemptLabels { attempt: kind })
                    .clone()
            });
        }
        EventKind::WaitPlanned { wait, basis, .. } => wait_planned(m, state, *wait, basis),
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
        _ => {}
    }
}

/// One action stopped: a paced stop counted, the action no longer waiting
/// nor in flight (`state`, its entry: none if this is its only event, and
/// then it was never counted in).
fn stopped(m: &Inner, state: Option<Running>, outcome: Outcome) {
    if outcome == Outcome::Paced {
        m.paces
            .get_or_create(&HoldOffLabels { result: "stopped" })
            .inc();
    }
    if let Some(state) = state {
        if state.waiting {
            m.waiting.dec();
        }
        m.in_flight.dec();
    }
}

/// A planned wait of one action: its basis counted (a hold-off's or a
/// pace's wait among them), its length observed, the action counted as
/// waiting.
fn wait_planned(m: &Inner, state: &mut Running, wait: std::time::Duration, basis: &WaitBasis) {
    if *basis == WaitBasis::HoldOff {
        m.hold_offs
            .get_or_create(&HoldOffLabels { result: "waited" })
            .inc();
    }
    if matches!(basis, WaitBasis::Pace { .. }) {
        m.paces
            .get_or_create(&HoldOffLabels { result: "waited" })
            .inc();
    }
    // The core's name, a jittered fallback counted as a fallback.
    let basis = match basis {
        WaitBasis::FallbackJittered { .. } => "fallback",
        other => basis_name(other),
    };
    m.waits
        .get_or_create(&WaitLabels { basis })
        .observe(wait.as_secs_f64());
    if !state.waiting {
        state.waiting = true;
        m.waiting.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_budget::{retry_after::RetryAfter, Action, Decision, Policy};
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

    /// A late status told after the action stopped (a gRPC status in the
    /// trailers after data) leaves no action counted as in flight.
    #[test]
    fn a_status_after_data_leaves_nothing_in_flight() {
        let metrics = Metrics::new();
        let mut action = Action::new(Policy::default());
        action.attempt_started(Duration::ZERO);
        action.response(Duration::from_millis(10), 200, &RetryAfter::Missing, None);
        for event in action.events() {
            metrics.event(9, event);
        }
        let mut report = action.into_report().unwrap();
        assert!(report.status_after_data(Duration::from_millis(20), 429, "grpc-status 8"));
        let late = report.events.last().unwrap().clone();
        assert!(matches!(late.kind, EventKind::StatusAfterData { .. }));
        metrics.event(9, &late);
        metrics.report(&report);
        let text = metrics.encode();
        assert!(
            text.contains("retry_budget_actions_in_flight 0\n"),
            "{text}"
        );
    }

    /// The cached series of `actions`: each outcome and category its own,
    /// counted as the family counts it.
    #[test]
    fn each_outcome_and_category_has_its_own_cached_series() {
        let mut seen = std::collections::HashSet::new();
        for outcome in Outcome::ALL {
            for category in CATEGORIES {
                let index = action_index(outcome, category);
                assert!(index < ACTION_SERIES, "{outcome:?} {category:?}");
                assert!(seen.insert(index), "{outcome:?} {category:?}");
            }
        }
        let metrics = Metrics::new();
        let ended = |status: u16| {
            let mut action = Action::new(Policy::default());
            action.attempt_started(Duration::ZERO);
            action.response(Duration::from_millis(5), status, &RetryAfter::Missing, None);
            action.into_report().unwrap()
        };
        for status in [200, 200, 503, 403, 200] {
            metrics.report(&ended(status));
        }
        let text = metrics.encode();
        for line in [
            "retry_budget_actions_total{outcome=\"success\",category=\"none\"} 3\n",
            "retry_budget_actions_total{outcome=\"not_retryable\",category=\"server_error\"} 1\n",
            "retry_budget_actions_total{outcome=\"not_retryable\",category=\"not_configured\"} 1\n",
            "retry_budget_action_duration_seconds_count 5\n",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    /// One action paced 2 s then sent, one stopped as `paced`.
    #[test]
    fn paced_actions_are_counted_by_basis_and_outcome() {
        use retry_budget::pace::{LimitKind, PaceReason, PaceRule};
        let s = Duration::from_secs;
        let reason = PaceReason {
            limit: "default".into(),
            kind: LimitKind::Requests,
            announced: 0,
            left: 0,
            resets_at: s(2),
            rule: PaceRule::Exhausted,
            clamped: false,
        };
        let metrics = Metrics::new();
        let mut waited = Action::new(Policy::default());
        waited.pace(s(0), s(2), &reason);
        waited.timer_woke(s(2));
        waited.attempt_started(s(2));
        waited.response(s(3), 200, &RetryAfter::Missing, None);
        let mut stopped = Action::new(Policy::default());
        stopped.pace(s(0), s(30), &reason);
        for (id, action) in [(1, waited), (2, stopped)] {
            for event in action.events() {
                metrics.event(id, event);
            }
            metrics.report(&action.into_report().unwrap());
        }
        let text = metrics.encode();
        for line in [
            "retry_budget_wait_seconds_count{basis=\"pace\"} 1",
            "retry_budget_wait_seconds_sum{basis=\"pace\"} 2.0",
            "retry_budget_paces_total{result=\"waited\"} 1",
            "retry_budget_paces_total{result=\"stopped\"} 1",
            "retry_budget_actions_total{outcome=\"paced\",category=\"rate_limit\"} 1",
            "retry_budget_actions_in_flight 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
