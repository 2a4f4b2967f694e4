//! `retry-budget get URL`: one request through [`RetryBudgetLayer`] over
//! hyper-util's client, with every step shown on stderr as it happens.
//!
//! The client stack, outermost first, is the one a user would build:
//!
//! ```text
//! SetSensitiveRequestHeadersLayer (Authorization, Cookie, Proxy-Authorization, --sensitive)
//!   → classify::trace_layer()     (tower-http's TraceLayer, shown with --verbose)
//!   → DecompressionLayer          (gzip)
//!   → RetryBudgetLayer            (the budget)
//!   → PeekLayer                   (--preset openai: a 429's JSON body read
//!                                  for insufficient_quota; otherwise untouched)
//!   → hyper_util::client::legacy::Client (HTTP, or HTTPS through rustls)
//! ```
//!
//! Nothing here applies a budget rule: the steps come from the layer's
//! `tracing` events ([`crate::get::progress`]), the ending from the
//! [`Report`] it returns (in the final response's extensions, or in its
//! error). Ctrl-C, SIGTERM and SIGHUP ([`crate::common::leave`]) fire a
//! [`CancellationToken`] put in the request's extensions: the layer sends
//! nothing more and returns at once with the report.
//!
//! The action includes the final response's body: it is read under the
//! deadline of the attempt that produced it ([`crate::get::final_body`]). What the
//! user typed is checked before anything is sent ([`crate::common::url`],
//! [`crate::common::headers`]) and no secret of it is ever shown
//! ([`crate::common::redact`]).
//!
//! Exit status: see [`crate::common::exit`] (0 `success`, 1 any other outcome, 2
//! usage error with nothing sent, 18/23/28 for the body, 129/130/143 for
//! SIGHUP/SIGINT/SIGTERM).
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the flags, what to send and how |
//! | `fetch.rs` | one request: sent, shown, its body read, its end told |
//! | `final_body.rs` | the final response's body, read inside the budget |
//! | `finish.rs` | how a `get` ended, as its exit status |
//! | `progress.rs` | the live steps on stderr (also `demo`'s) |
//! | `quota.rs` | the quota the final response announced, in words |

use std::path::PathBuf;
use std::process::ExitCode;

use http::Method;
use http::Uri;
use retry_budget::Policy;
use tokio_util::sync::CancellationToken;

use self::progress::Console;
use crate::common::budget_args::BudgetArgs;
use crate::common::connector::ConnectTo;
use crate::common::headers::{self, Header, Sensitive};
use crate::common::run::{runtime, usage_error};
use crate::common::signal_args::SignalArgs;
use crate::common::url;

mod fetch;
pub mod final_body;
pub mod finish;
pub mod progress;
mod quota;

pub use fetch::{fetch, fetch_to, Output};

/// The arguments of `retry-budget get`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to fetch (http:// or https://). Userinfo
    /// (`http://user:password@host/`) is sent as Basic authorization and
    /// shown as `user:***`.
    #[arg(value_name = "URL")]
    url: String,
    /// The request method. Only safe methods (GET, HEAD, OPTIONS, TRACE) are
    /// ever retried; any other is sent once.
    #[arg(short = 'X', long, value_name = "M", default_value = "GET", value_parser = parse_method)]
    method: Method,
    /// A request header, `Name: value` (repeatable). Content-Length,
    /// Transfer-Encoding and Host must agree with what is sent.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Treat this header's value as a secret (repeatable): never shown in
    /// any output or error. Authorization, Cookie and Proxy-Authorization
    /// always are.
    #[arg(long, value_name = "NAME")]
    sensitive: Vec<String>,
    /// Print the report as one JSON object on stdout (instead of the body).
    #[arg(long)]
    json: bool,
    /// Write the body to this file instead of stdout (with --json too:
    /// the report then says how the body ended).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Connect to ADDR:PORT2 instead of HOST:PORT (curl's flag and
    /// syntax; repeatable): the request keeps its host name (Host, TLS
    /// server name, `--preset auto`). Empty fields match any / keep the
    /// original.
    #[arg(long = "connect-to", value_name = "HOST:PORT:ADDR:PORT2", value_parser = ConnectTo::parse)]
    pub connect_to: Vec<ConnectTo>,
    /// Also show tower-http's trace events.
    #[arg(short, long)]
    verbose: bool,
    #[command(flatten)]
    budget: BudgetArgs,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct Target {
    /// The method.
    pub method: Method,
    /// The URL (http:// or https://), userinfo included if given.
    pub uri: Uri,
    /// Extra request headers (sensitive ones marked so).
    pub headers: Vec<Header>,
    /// A PEM file of CA certificates to trust instead of the platform's.
    pub cacert: Option<std::path::PathBuf>,
}

/// How to send it and what to print.
#[derive(Debug, Clone)]
pub struct Options {
    /// The budget.
    pub policy: Policy,
    /// Whether the system calendar clock is trusted for Retry-After dates.
    pub trusted_clock: bool,
    /// JSON report on stdout instead of the body.
    pub json: bool,
    /// Show tower-http's trace events too.
    pub verbose: bool,
    /// Reset headers to read (the spread is in the policy).
    pub signals: SignalArgs,
    /// Where connections go instead (`--connect-to`).
    pub connect_to: Vec<ConnectTo>,
}

/// Runs the command and returns the process's exit status.
pub fn run(args: Args) -> ExitCode {
    let checked = target(&args).and_then(|target| {
        let policy = args.budget.policy()?;
        Ok((target, policy))
    });
    let (target, policy) = match checked {
        Ok(checked) => checked,
        Err(message) => return usage_error(&message),
    };
    let options = Options {
        policy,
        trusted_clock: !args.budget.untrusted_clock,
        json: args.json,
        verbose: args.verbose,
        // `--preset auto` chooses from the URL's host.
        signals: args
            .budget
            .signals
            .for_host(target.uri.host().unwrap_or(""), false),
        connect_to: args.connect_to,
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-budget: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let console = Console::stderr();
    let output = args.output.map_or(Output::Stdout, Output::File);
    let status = runtime.block_on(fetch_to(
        target,
        options,
        &output,
        &console,
        CancellationToken::new(),
    ));
    // A write to a stuck stdout may still be pending on a blocking thread
    // after the deadline: the process ends without waiting for it.
    runtime.shutdown_background();
    status
}

/// What the flags ask to send; the error never contains a secret.
fn target(args: &Args) -> Result<Target, String> {
    let sensitive = Sensitive::with(args.sensitive.iter().map(String::as_str))?;
    let uri = url::parse(&args.url)?;
    let headers = args
        .headers
        .iter()
        .map(|text| headers::parse(text, &sensitive))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Target {
        method: args.method.clone(),
        uri,
        headers,
        cacert: args.budget.cacert.clone(),
    })
}

fn parse_method(text: &str) -> Result<Method, String> {
    Method::from_bytes(text.to_ascii_uppercase().as_bytes())
        .map_err(|_| "not an HTTP method token".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use http::header::AUTHORIZATION;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(list: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("get").chain(list.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn defaults_are_the_policy_defaults() {
        let args = args(&["http://127.0.0.1:1/"]).unwrap();
        assert_eq!(args.budget.policy(), Ok(Policy::default()));
        assert_eq!(args.method, Method::GET);
        assert!(!args.json && !args.budget.untrusted_clock);
    }

    #[test]
    fn flags() {
        let args = args(&[
            "http://127.0.0.1:1/x",
            "--method",
            "post",
            "-H",
            "Authorization: Bearer t",
            "--header",
            "x-a:b",
            "--budget",
            "1m 30s",
            "--max-attempts",
            "5",
            "--attempt-timeout",
            "500ms",
            "--min-wait",
            "2s",
            "--untrusted-clock",
            "--json",
        ])
        .unwrap();
        let policy = args.budget.policy().unwrap();
        assert_eq!(policy.total_budget(), std::time::Duration::from_secs(90));
        assert_eq!(policy.max_attempts(), 5);
        assert_eq!(policy.attempt_cap(), std::time::Duration::from_millis(500));
        assert_eq!(policy.min_wait(), std::time::Duration::from_secs(2));
        assert_eq!(args.method, Method::POST);
        let target = target(&args).unwrap();
        assert_eq!(target.headers.len(), 2);
        assert_eq!(target.headers[0].name, AUTHORIZATION);
        assert_eq!(target.headers[0].value, "Bearer t");
        assert!(target.headers[0].value.is_sensitive());
        assert_eq!(target.headers[1].value, "b");
        assert!(!target.headers[1].value.is_sensitive());
    }

    #[test]
    fn bad_values() {
        let bad = |list: &[&str]| target(&args(list).unwrap()).unwrap_err();
        assert!(bad(&["not a url"]).starts_with("not a URL"));
        assert!(bad(&["http://h:99999/"]).contains("1 to 65535"));
        assert!(bad(&["http://h/", "-H", "NoColon"]).contains("Name: value"));
        assert!(bad(&["http://h/", "-H", "Bad Name: v"]).contains("header name"));
        assert!(bad(&["http://h/", "-H", "X: a\u{7f}b"]).contains("position 2"));
        assert!(bad(&["http://h/", "--sensitive", "a b"]).starts_with("--sensitive"));
        let many = args(&["http://a/", "--max-attempts", "101"]).unwrap();
        assert_eq!(
            many.budget.policy().unwrap_err(),
            "--max-attempts: max attempts must be at most 100 (got 101)"
        );
        let zero = args(&["http://a/", "--max-attempts", "0"]).unwrap();
        assert!(zero
            .budget
            .policy()
            .unwrap_err()
            .starts_with("--max-attempts: "));
        let big = args(&["http://a/", "--budget", "1s"]).unwrap();
        assert!(big
            .budget
            .policy()
            .unwrap_err()
            .starts_with("--attempt-timeout: "));
    }
}
