//! One variant of `benches/reqwest.rs` (`bare`, `reqwest_retry` or
//! `retry_budget`), a fixed number of happy GETs over loopback, for a
//! profiler: `valgrind --tool=callgrind` counts each variant's
//! instructions (user space only: the kernel's share of loopback is not
//! counted).
//!
//! ```text
//! cargo build --release -p retry-budget-benches --example reqwest_profile
//! valgrind --tool=callgrind target/release/examples/reqwest_profile retry_budget 2000
//! ```

use retry_budget_benches::reqwest_variants;
use tokio::net::TcpListener;

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "retry_budget".to_owned());
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let Some(client) = reqwest_variants::client(&variant) else {
        eprintln!(
            "unknown variant {variant:?}: one of {:?}",
            reqwest_variants::VARIANTS
        );
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(reqwest_variants::serve(listener));
        let url = format!("http://{addr}/palettes");
        for _ in 0..calls {
            let response = client.get(&url).send().await.expect("a response");
            std::hint::black_box(response.bytes().await.expect("the body"));
        }
    });
}
