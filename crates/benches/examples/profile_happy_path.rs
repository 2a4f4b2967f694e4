//! One variant of the instruction-count bench, driven as that bench drives
//! it, in a loop for a line-level profile (the bench's own callgrind files
//! mix in its harness):
//!
//! ```text
//! CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release \
//!     -p retry-budget-benches --example profile_happy_path
//! valgrind --tool=callgrind --dump-instr=yes \
//!     target/release/examples/profile_happy_path VARIANT [instant|pending] [N]
//! callgrind_annotate --auto=yes callgrind.out.*
//! ```
//!
//! `VARIANT`: `get` (the default report), `when_retried`, `post`,
//! `tower_retry`, `tower_retry_timeout`, `bare`; and, answered at once with
//! a response that carries an extension, `get_extended` and
//! `tower_retry_extended`; and `tower_retry_reporting` (answered at once
//! with the report already in the response). Two runs with different `N`
//! give the per-call count by difference (the requests are built inside the
//! loop here, the same in every variant).
use std::process::ExitCode;

use http::{Method, Request, Response};
use retry_budget_benches::{drive, ok_after_pending, ok_at_once, request};
use tower::Service;

fn run<S>(mut service: S, method: Method, polls: usize, n: usize)
where
    S: Service<Request<()>, Response = Response<()>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..n {
        std::hint::black_box(drive(&mut service, request(method.clone()), polls));
    }
}

/// Runs `variant` over `inner` (answering after `polls` polls).
macro_rules! variant {
    ($variant:expr, $inner:expr, $polls:expr, $n:expr) => {{
        use retry_budget_benches as f;
        let (polls, n) = ($polls, $n);
        match $variant {
            "get" => run(f::retry_budget($inner), Method::GET, polls, n),
            "when_retried" => run(f::retry_budget_when_retried($inner), Method::GET, polls, n),
            "post" => run(f::retry_budget($inner), Method::POST, polls, n),
            "tower_retry" => run(f::tower_retry($inner), Method::GET, polls, n),
            "tower_retry_timeout" => run(f::tower_retry_timeout($inner), Method::GET, polls, n),
            "bare" => run(tower::service_fn($inner), Method::GET, polls, n),
            other => {
                eprintln!("unknown variant {other:?}");
                return ExitCode::FAILURE;
            }
        }
    }};
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _context = runtime.enter();
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "get".into());
    let pending = match args.next().as_deref() {
        None | Some("instant") => false,
        Some("pending") => true,
        Some(other) => {
            eprintln!("expected instant or pending, not {other:?}");
            return ExitCode::FAILURE;
        }
    };
    let n: usize = match args.next().map(|a| a.parse()) {
        None => 100_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("N: {e}");
            return ExitCode::FAILURE;
        }
    };
    let extended = retry_budget_benches::ok_with_extension;
    match variant.as_str() {
        "get_extended" if !pending => {
            run(
                retry_budget_benches::retry_budget(extended),
                Method::GET,
                1,
                n,
            );
            return ExitCode::SUCCESS;
        }
        "tower_retry_reporting" if !pending => {
            run(
                retry_budget_benches::tower_retry(retry_budget_benches::ok_with_report),
                Method::GET,
                1,
                n,
            );
            return ExitCode::SUCCESS;
        }
        "tower_retry_extended" if !pending => {
            run(
                retry_budget_benches::tower_retry(extended),
                Method::GET,
                1,
                n,
            );
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    if pending {
        variant!(variant.as_str(), ok_after_pending, 2, n);
    } else {
        variant!(variant.as_str(), ok_at_once, 1, n);
    }
    ExitCode::SUCCESS
}
