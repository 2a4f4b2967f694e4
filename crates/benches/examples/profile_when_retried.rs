//! Happy-path GETs through `RetryBudget` with `ReportMode::WhenRetried`,
//! driven as the instruction-count bench drives them, for a line-level
//! profile:
//!
//! ```text
//! CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release \
//!     -p retry-budget-benches --example profile_when_retried
//! valgrind --tool=callgrind --dump-instr=yes \
//!     target/release/examples/profile_when_retried [instant|pending] [N]
//! callgrind_annotate --auto=yes callgrind.out.*
//! ```
use http::Method;
use retry_budget_benches::{drive, ok_after_pending, ok_at_once, request};

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _context = runtime.enter();
    let mut args = std::env::args().skip(1);
    let pending = args.next().as_deref() == Some("pending");
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    if pending {
        let mut service = retry_budget_benches::retry_budget_when_retried(ok_after_pending);
        for _ in 0..n {
            std::hint::black_box(drive(&mut service, request(Method::GET), 2));
        }
    } else {
        let mut service = retry_budget_benches::retry_budget_when_retried(ok_at_once);
        for _ in 0..n {
            std::hint::black_box(drive(&mut service, request(Method::GET), 1));
        }
    }
}
