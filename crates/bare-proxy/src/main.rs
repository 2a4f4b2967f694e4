//! `bare-proxy`: see the library's docs (`src/lib.rs`).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use bare_proxy::Upstream;
use clap::Parser;

// As `retry-budget proxy`'s binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A bare reverse proxy of `retry-budget proxy`'s shape (a benchmark's
/// floor): forwards every request to the upstream and relays its answer.
#[derive(Debug, Parser)]
#[command(name = "bare-proxy")]
struct Args {
    /// The upstream, `http://host[:port]`.
    #[arg(long)]
    upstream: Upstream,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Worker threads, each a current-thread runtime with a socket of its
    /// own.
    #[arg(long, default_value_t = NonZeroUsize::MIN)]
    workers: NonZeroUsize,
    /// Do, on the happy path, the least the sidecar's defaults do for
    /// every request (the library's `floor` module): a benchmark's floor,
    /// not a proxy to run.
    #[arg(long)]
    floor: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match bare_proxy::run(args.listen, &args.upstream, args.workers.get(), args.floor) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}
