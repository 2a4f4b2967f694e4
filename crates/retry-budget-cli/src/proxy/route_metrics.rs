//! The per-route series of a config file's routes, and their health for
//! `/ready`:
//!
//! | metric | type | from |
//! |---|---|---|
//! | `retry_budget_route_actions_total{route,outcome}` | counter | each report of the route's actions |
//! | `retry_budget_route_upstream_responses_total{route,status}` | counter | each `response` of the route's attempts |
//! | `retry_budget_route_failing{route}` | gauge | 1 while the route's last action ended with the upstream failing (`transport_error`, `attempt_timeout`, or a final 5xx) |
//!
//! The `route` label is bounded: its values are the names of the config
//! file's routes (a reload that renames a route keeps the old series). A
//! route's observer (`stack.rs`) feeds the proxy-wide metrics as before
//! and, for a route of a file, these series ([`RouteSeries`]), each counter
//! looked up once and then incremented through its handle. The flags' one
//! route has no series of its own (its figures are the proxy-wide ones).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use retry_budget::{Outcome, Report};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOutcomeLabels {
    route: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatusLabels {
    route: String,
    status: u16,
}

/// The per-route families, registered once with the proxy's metrics;
/// clones share them.
#[derive(Debug, Clone, Default)]
pub struct RouteFamilies {
    actions: Family<RouteOutcomeLabels, Counter>,
    responses: Family<RouteStatusLabels, Counter>,
    failing: Family<RouteLabels, Gauge>,
    /// The routes in force, by name (for `/ready`).
    current: Arc<Mutex<BTreeMap<String, Gauge>>>,
}

impl RouteFamilies {
    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "route_actions",
            "Actions by route (a config file's) and outcome",
            self.actions.clone(),
        );
        registry.register(
            "route_upstream_responses",
            "Responses received from upstream, by route and status",
            self.responses.clone(),
        );
        registry.register(
            "route_failing",
            "1 while the route's last action ended with its upstream failing",
            self.failing.clone(),
        );
    }

    /// The routes in force now are `names` (after a start or a reload).
    pub fn set_current<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.clear();
        for name in names {
            let gauge = self.failing.get_or_create(&RouteLabels {
                route: name.to_owned(),
            });
            current.insert(name.to_owned(), gauge.clone());
        }
    }

    /// The routes in force whose upstream is failing, by name.
    pub fn failing(&self) -> Vec<String> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current
            .iter()
            .filter(|(_, gauge)| gauge.get() > 0)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The series of the route `name`.
    pub fn series(&self, name: &str) -> RouteSeries {
        RouteSeries {
            name: name.to_owned(),
            families: self.clone(),
            outcomes: Default::default(),
            statuses: (0..STATUSES).map(|_| OnceLock::new()).collect(),
            failing: self
                .failing
                .get_or_create(&RouteLabels {
                    route: name.to_owned(),
                })
                .clone(),
        }
    }
}

/// The statuses with a cached series (100-599; others are looked up).
const STATUSES: usize = 600;

/// One route's series handles.
#[derive(Debug)]
pub struct RouteSeries {
    name: String,
    families: RouteFamilies,
    outcomes: [OnceLock<Counter>; Outcome::ALL.len()],
    statuses: Box<[OnceLock<Counter>]>,
    failing: Gauge,
}

impl RouteSeries {
    /// A response of one of the route's attempts.
    pub fn response(&self, status: u16) {
        let make = || {
            self.families
                .responses
                .get_or_create(&RouteStatusLabels {
                    route: self.name.clone(),
                    status,
                })
                .clone()
        };
        match self.statuses.get(usize::from(status)) {
            Some(slot) => slot.get_or_init(make).inc(),
            None => make().inc(),
        };
    }

    /// The report of one of the route's actions.
    pub fn report(&self, report: &Report) {
        let outcome = report.outcome;
        let make = || {
            self.families
                .actions
                .get_or_create(&RouteOutcomeLabels {
                    route: self.name.clone(),
                    outcome: outcome.as_str(),
                })
                .clone()
        };
        match Outcome::ALL.iter().position(|o| *o == outcome) {
            Some(index) => self.outcomes[index].get_or_init(make).inc(),
            None => make().inc(),
        };
        let failing = matches!(outcome, Outcome::TransportError | Outcome::AttemptTimeout)
            || report.last_status.is_some_and(|s| s >= 500);
        self.failing.set(i64::from(failing));
    }
}
