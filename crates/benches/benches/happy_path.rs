//! Wall time of the happy path (criterion), for the same variants as the
//! instruction-count bench (`benches/instructions.rs`): `bare`,
//! `bare_plus_copy`, `tower_retry`, `tower_retry_timeout`,
//! `retry_budget_get`, `retry_budget_post`, each with an inner service that
//! answers at once and with one that is pending once (`*_pending`), and the
//! production variants (`*_production*`: a `tracing_subscriber::fmt()` at
//! INFO writing to a sink, set as each call's default since one process
//! holds every variant; one request extension; one response extension).
//!
//! Criterion measures the variants one after the other, seconds apart, so
//! load on the machine can drift between them: its medians give absolute
//! times, not ratios. The ratios come from a second, **interleaved** pass in
//! the same process: the variants take turns batch by batch ([`BATCH`]
//! calls each, order rotated); a round is [`SAMPLES`] batches of each, and
//! gives each variant its median batch and each ratio one value (both sides
//! measured within the same fraction of a second). The median and spread of
//! each ratio over [`ROUNDS`] rounds are printed. Criterion's medians are
//! printed only if every one was written by this run: a filtered or stale
//! run is refused, never mixed in.
//!
//! ```text
//! cargo bench -p retry-budget-benches --bench happy_path
//! ```

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use criterion::{BatchSize, Criterion};
use http::{Request, Response};
use retry_budget_benches::interleave::{per_round_medians, Pass};
use retry_budget_benches::{self as fixtures, copy, drive, RATIOS};
use tower::Service;

/// Interleaved rounds; each gives one value of every ratio.
const ROUNDS: usize = 21;
/// Batches per variant and round, interleaved with the other variants'.
const SAMPLES: usize = 50;
/// Calls per batch: short (tens of microseconds), so that a batch is rarely
/// cut by the scheduler on a loaded machine, and the median batch of a round
/// is not cut at all.
const BATCH: usize = 100;

/// One measured stack, behind a uniform interface.
trait Variant {
    fn call(&mut self, req: Request<()>);
}

/// A service, the polls a call needs, whether to keep one request copy,
/// and the subscriber a production variant runs under.
struct Stack<S> {
    service: S,
    polls: usize,
    copy: bool,
    subscriber: Option<tracing::Dispatch>,
}

impl<S> Variant for Stack<S>
where
    S: Service<Request<()>, Response = Response<()>>,
    S::Error: std::fmt::Debug,
{
    fn call(&mut self, req: Request<()>) {
        let kept = self.copy.then(|| copy(&req));
        let call = || {
            drop(black_box(drive(
                &mut self.service,
                black_box(req),
                self.polls,
            )))
        };
        match &self.subscriber {
            // The subscriber is this call's default (one process holds
            // every variant, bare ones included): setting it costs the
            // same in both sides of a production ratio.
            Some(subscriber) => tracing::dispatcher::with_default(subscriber, call),
            None => call(),
        }
        drop(black_box(kept));
    }
}

fn stack<S>(service: S, polls: usize, copy: bool) -> Box<dyn Variant>
where
    S: Service<Request<()>, Response = Response<()>> + 'static,
    S::Error: std::fmt::Debug,
{
    Box::new(Stack {
        service,
        polls,
        copy,
        subscriber: None,
    })
}

/// A production stack: under [`fixtures::production_subscriber`].
fn production<S>(service: S, polls: usize) -> Box<dyn Variant>
where
    S: Service<Request<()>, Response = Response<()>> + 'static,
    S::Error: std::fmt::Debug,
{
    Box::new(Stack {
        service,
        polls,
        copy: false,
        subscriber: Some(fixtures::production_subscriber()),
    })
}

/// How a variant's requests are made.
type Make = fn() -> Request<()>;

/// Every variant: its name, how its requests are made, and its stack.
fn variants() -> Vec<(&'static str, Make, Box<dyn Variant>)> {
    use fixtures::{
        get, ok_after_pending as pending, ok_after_pending_with_extension as pending_extended,
        ok_at_once as instant, ok_with_extension as extended, post, production_get,
    };
    vec![
        ("bare", get, stack(tower::service_fn(instant), 1, false)),
        (
            "bare_pending",
            get,
            stack(tower::service_fn(pending), 2, false),
        ),
        (
            "bare_plus_copy",
            get,
            stack(tower::service_fn(instant), 1, true),
        ),
        (
            "bare_plus_copy_pending",
            get,
            stack(tower::service_fn(pending), 2, true),
        ),
        (
            "tower_retry",
            get,
            stack(fixtures::tower_retry(instant), 1, false),
        ),
        (
            "tower_retry_pending",
            get,
            stack(fixtures::tower_retry(pending), 2, false),
        ),
        (
            "tower_retry_timeout",
            get,
            stack(fixtures::tower_retry_timeout(instant), 1, false),
        ),
        (
            "tower_retry_timeout_pending",
            get,
            stack(fixtures::tower_retry_timeout(pending), 2, false),
        ),
        (
            "retry_budget_get",
            get,
            stack(fixtures::retry_budget(instant), 1, false),
        ),
        (
            "retry_budget_get_pending",
            get,
            stack(fixtures::retry_budget(pending), 2, false),
        ),
        (
            "retry_budget_get_when_retried",
            get,
            stack(fixtures::retry_budget_when_retried(instant), 1, false),
        ),
        (
            "retry_budget_get_when_retried_pending",
            get,
            stack(fixtures::retry_budget_when_retried(pending), 2, false),
        ),
        (
            "retry_budget_post",
            post,
            stack(fixtures::retry_budget(instant), 1, false),
        ),
        (
            "retry_budget_post_pending",
            post,
            stack(fixtures::retry_budget(pending), 2, false),
        ),
        (
            "tower_retry_reporting",
            get,
            stack(fixtures::tower_retry(fixtures::ok_with_report), 1, false),
        ),
        (
            "tower_retry_extended",
            get,
            stack(fixtures::tower_retry(extended), 1, false),
        ),
        (
            "retry_budget_get_extended",
            get,
            stack(fixtures::retry_budget(extended), 1, false),
        ),
        (
            "tower_retry_production",
            production_get,
            production(fixtures::tower_retry(extended), 1),
        ),
        (
            "tower_retry_timeout_production_pending",
            production_get,
            production(fixtures::tower_retry_timeout(pending_extended), 2),
        ),
        (
            "tower_retry_reporting_production",
            production_get,
            production(
                fixtures::tower_retry(fixtures::ok_with_extension_and_report),
                1,
            ),
        ),
        (
            "retry_budget_get_production",
            production_get,
            production(fixtures::retry_budget(extended), 1),
        ),
        (
            "retry_budget_get_production_pending",
            production_get,
            production(fixtures::retry_budget(pending_extended), 2),
        ),
        (
            "retry_budget_get_production_observed",
            production_get,
            production(fixtures::retry_budget_observed(extended), 1),
        ),
    ]
}

fn criterion_pass(c: &mut Criterion, variants: &mut [(&'static str, Make, Box<dyn Variant>)]) {
    let mut group = c.benchmark_group("happy_path");
    for (name, make, variant) in variants.iter_mut() {
        group.bench_function(*name, |b| {
            b.iter_batched(*make, |req| variant.call(req), BatchSize::SmallInput)
        });
    }
    group.finish();
}

fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("criterion")
}

/// Criterion's median for `name`, if it was written by this run (at or
/// after `since`).
fn fresh_median_ns(name: &str, since: SystemTime) -> Result<f64, String> {
    let path = criterion_dir()
        .join("happy_path")
        .join(name)
        .join("new/estimates.json");
    let written = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map_err(|_| format!("{name}: missing (not measured)"))?;
    if written < since {
        return Err(format!("{name}: stale (written before this run)"));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    value["median"]["point_estimate"]
        .as_f64()
        .ok_or_else(|| format!("{name}: no median in {}", path.display()))
}

fn print_criterion_medians(names: &[&str], since: SystemTime) {
    let medians: Vec<_> = names.iter().map(|n| fresh_median_ns(n, since)).collect();
    let refused: Vec<_> = medians.iter().filter_map(|m| m.as_ref().err()).collect();
    if !refused.is_empty() {
        println!("\ncriterion medians refused (run every variant, without a filter):");
        for reason in refused {
            println!("  {reason}");
        }
        return;
    }
    println!("\ncriterion medians of this run (ns per call; absolute times, not for ratios):");
    for (name, median) in names.iter().zip(medians) {
        println!("  {name:<38} {:>8.1}", median.unwrap_or(f64::NAN));
    }
}

fn interleaved_pass(variants: &mut [(&'static str, Make, Box<dyn Variant>)]) {
    // Per variant and round: the median ns per call over the round's batches.
    let times = per_round_medians(variants.len(), ROUNDS, SAMPLES, |i| {
        let (_, make, variant) = &mut variants[i];
        let requests: Vec<_> = (0..BATCH).map(|_| make()).collect();
        let start = Instant::now();
        for req in requests {
            variant.call(req);
        }
        start.elapsed().as_nanos() as f64 / BATCH as f64
    });
    let names: Vec<&str> = variants.iter().map(|(n, _, _)| *n).collect();
    let pass = Pass {
        names: &names,
        times: &times,
        samples: SAMPLES,
        batch: BATCH,
    };
    pass.print_variants("calls", "ns per call");
    pass.print_ratios_heading();
    for ratio in RATIOS {
        pass.print_ratio(
            ratio.numerator,
            ratio.denominator,
            ratio.goal,
            ratio.meaning,
        );
    }
}

fn main() {
    let started = SystemTime::now();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (a
    // smoke run of each variant by criterion, nothing else).
    let benching = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _context = runtime.enter();
    let mut variants = variants();
    let names: Vec<_> = variants.iter().map(|(n, _, _)| *n).collect();

    let mut criterion = Criterion::default()
        .output_directory(&criterion_dir())
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
        .configure_from_args();
    criterion_pass(&mut criterion, &mut variants);
    criterion.final_summary();
    if benching {
        print_criterion_medians(&names, started);
        interleaved_pass(&mut variants);
    }
}
