//! `retry-budget`: the command line of the bounded retry budget.
//!
//! Every subcommand is one variant of [`Command`] and lives in a folder of
//! its own (`get/`, `demo/`, `replay/`, `proxy/`) over `common/`, which
//! imports nothing above it; the budget rule itself stays in the
//! `retry-budget` crate, and `get` and `demo` only show what the tower
//! layer reports.
//!
//! A usage error (a bad flag or value) is one line on stderr and exit
//! status 2.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

mod common;
mod demo;
mod get;
mod proxy;
mod replay;

/// mimalloc: measured to cost the proxy fewer instructions per request
/// than the system allocator (`BENCHMARKS.md`, "Sidecar proxy"). Its 2.x
/// series (the crate's `v2` feature): 3.x's aligned allocation, which
/// Rust's `GlobalAlloc` always asks for, takes a slower path for most size
/// classes whenever a class has no free block at hand (`BENCHMARKS.md`,
/// issue 37's seventh round).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Retry 429 Too Many Requests inside a hard time and attempt budget.
#[derive(Debug, Parser)]
#[command(name = "retry-budget", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a fixture of scripted schedules through the budget and print
    /// one result per case (JSON Lines by default).
    Replay(replay::Args),
    /// Send one request through the retry budget, showing every step on
    /// stderr and the body (or, with --json, the report) on stdout.
    Get(Box<get::Args>),
    /// Play a case of the given schedules on a local server in real time,
    /// and run `get` against it.
    Demo(demo::Args),
    /// Serve as a reverse proxy (sidecar) that sends every request to the
    /// upstream through the retry budget, with metrics on an admin address.
    Proxy(Box<proxy::Args>),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => match err.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
            _ => {
                // clap may quote any argument: hide the secrets among them.
                let args: Vec<String> = std::env::args_os()
                    .map(|arg| arg.to_string_lossy().into_owned())
                    .collect();
                return crate::common::run::usage_error(&common::redact::scrub(
                    &one_line(&err),
                    &args,
                ));
            }
        },
    };
    match cli.command {
        Command::Replay(args) => replay::run(&args),
        Command::Get(args) => get::run(*args),
        Command::Demo(args) => demo::run(&args),
        Command::Proxy(args) => proxy::run(*args),
    }
}

/// A clap error on one line: its text up to the usage, without the
/// `error: ` prefix.
fn one_line(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let parts: Vec<&str> = text
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let mut joined = String::new();
    for part in parts {
        if !joined.is_empty() {
            joined.push_str(if joined.ends_with(':') { " " } else { "; " });
        }
        joined.push_str(part);
    }
    let message = joined.strip_prefix("error: ").unwrap_or(&joined);
    format!("{message} (see --help)")
}
