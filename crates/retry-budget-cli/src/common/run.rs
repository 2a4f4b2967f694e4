//! Helpers every subcommand uses: the usage error and its exit status, an
//! error with its sources on one line, and the runtime of a one-shot
//! command.

use std::error::Error as StdError;
use std::io;
use std::process::ExitCode;

use super::escape::escape;
use crate::common::exit::Exit;

/// Prints a usage error (one line, control characters escaped) and
/// returns exit status 2.
pub fn usage_error(message: &str) -> ExitCode {
    eprintln!("retry-budget: {}", escape(message));
    Exit::Usage.into()
}

/// The tokio runtime of a command.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// An error and its sources, on one line.
pub fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}
