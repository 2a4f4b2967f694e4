//! The pacing's figures, read from [`Pacing`] at each scrape: the last
//! remaining each upstream announced (per limit, a bounded number of
//! series), and the health of the fleet's shared allowance.
//!
//! | metric | type | from |
//! |---|---|---|
//! | `retry_budget_pace_remaining{upstream,limit,kind}` | gauge | the last remaining announced, per limit not yet reset (at most [`MAX_REMAINING_SERIES`]) |
//! | `retry_budget_pace_store_available{store="redis"}` | gauge | 1 while the fleet's shared allowance works, 0 while this proxy paces alone (only with `--hold-off-redis`) |
//! | `retry_budget_pace_store_failures_total{store}` | counter | takes from the shared allowance that failed or ran out of time |

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tower_retry_budget::pace::Pacing;

/// The most `pace_remaining` series written at one scrape (the first by
/// upstream and limit name): names come from the upstream's responses.
pub const MAX_REMAINING_SERIES: usize = 32;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RemainingLabels {
    upstream: String,
    limit: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

/// The pacing's metrics.
#[derive(Debug, Default)]
pub struct PaceMetrics {
    pacing: OnceLock<Pacing>,
    remaining: Family<RemainingLabels, Gauge>,
    store_available: Family<StoreLabels, Gauge>,
    store_failures: Family<StoreLabels, Counter>,
}

impl PaceMetrics {
    /// Registers its metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "pace_remaining",
            "The remaining count the upstream last announced, per limit not yet reset",
            self.remaining.clone(),
        );
        registry.register(
            "pace_store_available",
            "1 while the fleet's shared pacing allowance works, 0 while this proxy paces alone",
            self.store_available.clone(),
        );
        registry.register(
            "pace_store_failures",
            "Takes from the fleet's shared pacing allowance that failed or ran out of time",
            self.store_failures.clone(),
        );
    }

    /// Reads `pacing` at each scrape. Only the first call counts.
    pub fn watch(&self, pacing: Pacing) {
        let _ = self.pacing.set(pacing);
    }

    /// Whether the pacing is shared and its store does not work now.
    pub fn store_down(&self) -> bool {
        self.pacing
            .get()
            .and_then(Pacing::store_health)
            .is_some_and(|health| !health.available && health.failures > 0)
    }

    /// Copies the pacing's state into the metrics.
    pub fn read(&self) {
        let Some(pacing) = self.pacing.get() else {
            return;
        };
        let mut known = pacing.known();
        known.sort_by(|(a, x), (b, y)| (a, &x.name).cmp(&(b, &y.name)));
        // Limits that have reset (or were never announced again) go.
        self.remaining.clear();
        for (upstream, limit) in known.into_iter().take(MAX_REMAINING_SERIES) {
            let labels = RemainingLabels {
                upstream,
                limit: limit.name,
                kind: limit.kind.as_str(),
            };
            self.remaining
                .get_or_create(&labels)
                .set(i64::try_from(limit.remaining).unwrap_or(i64::MAX));
        }
        let Some(health) = pacing.store_health() else {
            return;
        };
        let store = StoreLabels { store: "redis" };
        self.store_available
            .get_or_create(&store)
            .set(i64::from(health.available));
        let failures = self.store_failures.get_or_create(&store);
        failures.inc_by(health.failures.saturating_sub(failures.get()));
    }
}
