//! The routes made into each worker's [`Table`], at start-up and again
//! on SIGHUP (nginx's and HAProxy's convention): the config file is read
//! and checked again, every route prepared again (its upstream, its shared
//! parts, a client stack per worker), and each worker's table swapped
//! whole ([`ArcSwap`]). A request takes the table in force when it
//! arrives and keeps it until its action ends, so actions in flight finish
//! on the old routes while new ones take the new; client connections are
//! not touched. A file that no longer reads or checks is refused: the
//! running routes are kept, and a WARN line and
//! `retry_budget_config_reloads_total{result="invalid"}` say so.
//!
//! A route's hold-off, pacers and client budget are kept across a reload
//! where their settings are unchanged (see [`Shares`]): what they learned
//! (a `Retry-After` holding an upstream, a quota announced, the retries
//! already spent) still holds on the new routes. Routes with the same
//! hold-off (or pacing) settings share one, keyed by upstream inside.
//!
//! What a reload cannot change (the listeners, workers, connection limits,
//! `concurrency`, drain and log format) stays as started, and the reload's
//! line says so when the file changed it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tower_retry_budget::budget::ClientBudget;
use tower_retry_budget::hold_off::HoldOff;
use tower_retry_budget::pace::Pacing;

use super::args::ProxyConfig;
use super::classify;
use super::file;
use super::metrics::Metrics;
use super::route::RouteConfig;
#[cfg(doc)]
use super::route::Shares;
use super::stack::{hold_off, pacing, Shared, Stack};
use super::table::{Route, Table};

/// Every worker's table, and what making new ones takes.
#[derive(Debug)]
pub struct Routes {
    /// One per worker.
    tables: Vec<Arc<ArcSwap<Table>>>,
    /// The stateful parts of the routes in force.
    kept: Mutex<Kept>,
    /// `concurrency`: one limit over all workers and routes, kept across
    /// reloads.
    concurrency: Option<Arc<Semaphore>>,
    metrics: Metrics,
    /// The configuration the process started with.
    started: Arc<ProxyConfig>,
}

impl Routes {
    /// Each worker's table of `config`'s routes (the hold-off's store
    /// tasks, if any, start on the current runtime).
    ///
    /// # Errors
    ///
    /// A route's shared parts could not be made (TLS roots, the
    /// hold-off's store), in one line naming the route.
    pub fn new(config: Arc<ProxyConfig>, metrics: &Metrics) -> Result<Self, String> {
        let concurrency = config
            .concurrency
            .map(|n| Arc::new(Semaphore::new(n.get())));
        let workers = config.workers.get();
        let (tables, kept) = tables(
            &config,
            workers,
            concurrency.as_ref(),
            metrics,
            &Kept::default(),
        )?;
        let tables = tables
            .into_iter()
            .map(|table| Arc::new(ArcSwap::from_pointee(table)))
            .collect();
        current_routes(&config, metrics);
        Ok(Self {
            tables,
            kept: Mutex::new(kept),
            concurrency,
            metrics: metrics.clone(),
            started: config,
        })
    }

    /// Worker `index`'s table.
    pub fn worker(&self, index: usize) -> Arc<ArcSwap<Table>> {
        self.tables[index].clone()
    }

    /// Reads the config file again and swaps every worker's table, or
    /// keeps them if it is invalid; see the [module docs](self).
    pub fn reload(&self) {
        let Some(path) = &self.started.file else {
            eprintln!(
                "retry-budget proxy: SIGHUP: no --config file to read again: the routes of the flags stay"
            );
            return;
        };
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let made = file::load(path).and_then(|config| {
            let workers = self.tables.len();
            let made = tables(
                &config,
                workers,
                self.concurrency.as_ref(),
                &self.metrics,
                &kept,
            )?;
            Ok((config, made))
        });
        let (config, (tables, made)) = match made {
            Ok(made) => made,
            Err(error) => {
                self.metrics.config_reloaded(false);
                eprintln!(
                    "retry-budget proxy: WARN SIGHUP: {} refused, the running routes kept: {error}",
                    path.display()
                );
                return;
            }
        };
        for (slot, table) in self.tables.iter().zip(tables) {
            slot.store(Arc::new(table));
        }
        *kept = made;
        drop(kept);
        self.metrics.config_reloaded(true);
        current_routes(&config, &self.metrics);
        let names: Vec<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
        eprintln!(
            "retry-budget proxy: SIGHUP: {} reloaded: {} route(s): {}",
            path.display(),
            names.len(),
            names.join(", ")
        );
        if !config.same_process(&self.started) {
            eprintln!(
                "retry-budget proxy: SIGHUP: listen, admin, workers, limits, concurrency, drain and \
                 log_format changed in {}: they take effect at the next start",
                path.display()
            );
        }
    }
}

/// Tells the metrics which routes of a file are in force (for `/ready`).
fn current_routes(config: &ProxyConfig, metrics: &Metrics) {
    if config.file.is_some() {
        let names = config.routes.iter().map(|r| r.name.as_str());
        metrics.route_families().set_current(names);
    }
}

/// The stateful parts of the routes in force, by their [`Shares`] keys:
/// what a reload keeps.
#[derive(Default)]
struct Kept {
    hold_offs: HashMap<String, HoldOff>,
    pacings: HashMap<String, Pacing>,
    budgets: HashMap<String, ClientBudget>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("hold_offs", &self.hold_offs.len())
            .field("pacings", &self.pacings.len())
            .field("budgets", &self.budgets.len())
            .finish()
    }
}

/// The value of `key` in `made` (this configuration's), else in `kept`
/// (the running one's), else what `make` builds (only then: a hold-off or
/// a fleet's pacing starts a task); recorded in `made`.
fn share<T: Clone>(
    key: Option<&String>,
    (made, kept): (&mut HashMap<String, T>, &HashMap<String, T>),
    make: impl FnOnce() -> Result<Option<T>, String>,
) -> Result<Option<T>, String> {
    let Some(key) = key else {
        return make();
    };
    let found = made.get(key).or_else(|| kept.get(key)).cloned();
    let Some(value) = found.map_or_else(make, |value| Ok(Some(value)))? else {
        return Ok(None);
    };
    made.insert(key.clone(), value.clone());
    Ok(Some(value))
}

/// A route's shared parts, its stateful ones taken from `made` or `kept`
/// where their keys match (see [`Shares`]).
fn prepare(
    route: &RouteConfig,
    (concurrency, named): (Option<&Arc<Semaphore>>, bool),
    metrics: &Metrics,
    (made, kept): (&mut Kept, &Kept),
) -> Result<(RouteConfig, Shared), String> {
    let mut route = route.clone();
    let keys = route.shares.clone();
    let map = share(
        keys.hold_off.as_ref(),
        (&mut made.hold_offs, &kept.hold_offs),
        || hold_off(&route),
    )?;
    route.pacing = share(
        keys.pacing.as_ref(),
        (&mut made.pacings, &kept.pacings),
        || pacing(&route),
    )?;
    let budget = route.client_budget.take();
    route.client_budget = share(
        keys.client_budget.as_ref(),
        (&mut made.budgets, &kept.budgets),
        || Ok(budget),
    )?;
    let shared = Shared::new(&route, (concurrency.cloned(), named), metrics.clone(), map)?;
    Ok((route, shared))
}

/// `workers` tables of `config`'s routes: each route's shared parts made
/// once (its stateful ones kept from `kept` where they match), a client
/// stack per worker; the routes of a file are named in the log line and
/// spans, the flags' one is not. Also returns what the next reload keeps.
fn tables(
    config: &ProxyConfig,
    workers: usize,
    concurrency: Option<&Arc<Semaphore>>,
    metrics: &Metrics,
    kept: &Kept,
) -> Result<(Vec<Table>, Kept), String> {
    let (routes, named) = (&config.routes, config.file.is_some());
    let mut made = Kept::default();
    let mut prepared = Vec::with_capacity(routes.len());
    for route in routes {
        let (route, shared) = prepare(route, (concurrency, named), metrics, (&mut made, kept))
            .map_err(|e| format!("route {:?}: {e}", route.name))?;
        // The policies nearly every request of the route has: its own, and
        // the one-attempt policy of a request that must go once.
        let policies: Vec<_> = [route.policy]
            .into_iter()
            .chain(classify::once_policy(route.policy).ok())
            .collect();
        prepared.push((Arc::new(route), shared, policies));
    }
    let tables = (0..workers)
        .map(|_| {
            Table::new(
                prepared
                    .iter()
                    .map(|(config, shared, policies)| Route {
                        stack: Stack::new(config, shared, policies),
                        name: named.then(|| Arc::from(config.name.as_str())),
                        config: config.clone(),
                    })
                    .collect(),
            )
        })
        .collect();
    Ok((tables, made))
}
