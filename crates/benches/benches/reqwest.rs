//! Wall time of the happy GET through `reqwest_middleware::ClientWithMiddleware`
//! over a loopback hyper server (HTTP/1, kept alive), in three variants:
//! no middleware (`bare`), `reqwest-retry`'s `RetryTransientMiddleware`
//! (its default `ExponentialBackoff`, 3 retries: `reqwest_retry`) and
//! `RetryBudgetMiddleware` with `Policy::default()` (`retry_budget`). Each
//! call sends the GET and reads the whole body.
//!
//! A criterion pass gives absolute times (the variants one after the
//! other). The ratio `retry_budget / reqwest_retry` comes from a second,
//! **interleaved** pass: the variants take turns batch by batch ([`BATCH`]
//! calls each, order rotated); a round is [`SAMPLES`] batches of each and
//! gives every variant its median batch and the ratio one value; the
//! median and spread over [`ROUNDS`] rounds are printed. The goal is
//! `retry_budget / reqwest_retry <= 1.05`; the figures of record are in
//! `BENCHMARKS.md`.
//!
//! ```text
//! cargo bench -p retry-budget-benches --bench reqwest
//! ```

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use criterion::Criterion;
use reqwest_middleware::ClientWithMiddleware;
use retry_budget_benches::interleave::{per_round_medians, Pass};
use retry_budget_benches::reqwest_variants;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

/// Interleaved rounds; each gives one value of the ratio.
const ROUNDS: usize = 31;
/// Batches per variant and round, interleaved with the other variants'.
const SAMPLES: usize = 30;
/// Calls per batch (each a loopback round trip of tens of microseconds).
const BATCH: usize = 20;

/// A loopback server on a runtime of its own (one worker thread), answering
/// every request `200` with a short body.
fn server() -> (SocketAddr, Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("the server's runtime");
    let listener = runtime
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    runtime.spawn(reqwest_variants::serve(listener));
    (addr, runtime)
}

fn variants() -> Vec<(&'static str, ClientWithMiddleware)> {
    reqwest_variants::VARIANTS
        .into_iter()
        .map(|name| {
            (
                name,
                reqwest_variants::client(name).expect("a known variant"),
            )
        })
        .collect()
}

/// One happy GET, its body read whole.
async fn get(client: &ClientWithMiddleware, url: &str) {
    let response = client.get(url).send().await.expect("a response");
    assert_eq!(response.status(), 200);
    black_box(response.bytes().await.expect("the body"));
}

fn interleaved_pass(
    runtime: &Runtime,
    variants: &[(&'static str, ClientWithMiddleware)],
    url: &str,
) {
    let times = per_round_medians(variants.len(), ROUNDS, SAMPLES, |i| {
        let client = &variants[i].1;
        let start = Instant::now();
        runtime.block_on(async {
            for _ in 0..BATCH {
                get(client, url).await;
            }
        });
        start.elapsed().as_nanos() as f64 / BATCH as f64 / 1000.0
    });
    let names: Vec<&str> = variants.iter().map(|(n, _)| *n).collect();
    let pass = Pass {
        names: &names,
        times: &times,
        samples: SAMPLES,
        batch: BATCH,
    };
    pass.print_variants("GETs", "us/GET");
    pass.print_ratios_heading();
    pass.print_ratio(
        "retry_budget",
        "reqwest_retry",
        Some(1.05),
        "the layer against reqwest-retry",
    );
    pass.print_ratio("reqwest_retry", "bare", None, "reqwest-retry's own cost");
    pass.print_ratio("retry_budget", "bare", None, "the layer's own cost");
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (a
    // smoke run of each variant by criterion, nothing else).
    let benching = std::env::args().any(|a| a == "--bench");
    let (addr, _server) = server();
    let url = format!("http://{addr}/palettes");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the client's runtime");
    let variants = variants();
    // Every client's connection is open before anything is measured.
    for (_, client) in &variants {
        runtime.block_on(get(client, &url));
    }

    let mut criterion = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
        .configure_from_args();
    let mut group = criterion.benchmark_group("reqwest");
    for (name, client) in &variants {
        group.bench_function(*name, |b| b.iter(|| runtime.block_on(get(client, &url))));
    }
    group.finish();
    criterion.final_summary();
    if benching {
        interleaved_pass(&runtime, &variants, &url);
    }
}
