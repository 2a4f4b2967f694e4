//! `retry-budget`: the command line of the bounded retry budget.
//!
//! Every subcommand is one variant of [`Command`] and lives in its own
//! module; the budget rule itself stays in the `retry-budget` crate.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod replay;
mod table;

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
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Replay(args) => replay::run(&args),
    }
}
