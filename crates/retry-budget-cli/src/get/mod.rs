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
//!   → QuotaLayer                  (--preset openai: a 429's JSON body read
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

use std::io::{self, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderName, Method, Request, Response, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_budget::{Outcome, Policy, Report};
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::decompression::DecompressionLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_retry_budget::{
    calendar::UntrustedCalendar, classify, quota::QuotaLayer, Error, ErrorKind, Idempotent,
    RetryBudgetLayer,
};
use tracing_subscriber::layer::SubscriberExt;

use crate::common::budget_args::BudgetArgs;
use crate::common::connector;
use crate::common::headers::{self, Header, Sensitive};
use crate::common::leave;
use crate::common::run::{chain, runtime, usage_error};
use crate::common::signal_args::SignalArgs;
use crate::common::{redact, url};

use self::final_body::BodyRead;
use self::finish::Finish;
use self::progress::{Console, Progress, ProgressLayer, INDENT};

pub mod final_body;
pub mod finish;
pub mod progress;

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
        signals: args.budget.signals,
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

/// Sends `target` under `options`, shows every step on `console`, prints the
/// visible status (and the body or the JSON report), and returns the exit
/// status. `cancel` ends the action when fired (so do SIGINT, SIGTERM and
/// SIGHUP).
pub async fn fetch(
    target: Target,
    options: Options,
    console: &Console,
    cancel: CancellationToken,
) -> ExitCode {
    fetch_to(target, options, &Output::Stdout, console, cancel).await
}

/// Where the final response's body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Stdout (not read at all with `--json`).
    Stdout,
    /// A file, created (or truncated) before anything is sent.
    File(PathBuf),
}

/// [`fetch`], with the body written to `output`.
pub async fn fetch_to(
    target: Target,
    options: Options,
    output: &Output,
    console: &Console,
    cancel: CancellationToken,
) -> ExitCode {
    let mut request = match build_request(&target) {
        Ok(request) => request,
        Err(message) => return usage_error(&message),
    };
    let https = target.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let tls = match crate::common::tls::client_config(target.cacert.as_deref(), https) {
        Ok(tls) => tls,
        Err(message) => return usage_error(&message),
    };
    let mut out: Option<Pin<Box<dyn AsyncWrite + Send>>> = match output {
        Output::Stdout if options.json => None,
        Output::Stdout => Some(Box::pin(tokio::io::stdout())),
        Output::File(path) => match tokio::fs::File::create(path).await {
            Ok(file) => Some(Box::pin(file)),
            Err(e) => {
                return usage_error(&format!(
                    "--output {}: cannot create the file: {e}",
                    crate::common::escape::escape(&path.display().to_string())
                ))
            }
        },
    };
    request.extensions_mut().insert(cancel.clone());
    let mut policy = options.policy;
    if !tower_retry_budget::may_retry(&request) {
        // A write is never retried. Rather than let it pass through the
        // layer with no deadline, no cancellation and no report, it is sent
        // under a one-attempt policy (the core's own advice for "no
        // retries"): the layer then times it, cancels it and reports it, and
        // with a single attempt no copy of it is ever made or sent. The
        // `Idempotent` mark only admits it to that one-attempt budget.
        if let Ok(once) = policy.to_builder().max_attempts(1).build() {
            policy = once;
            request.extensions_mut().insert(Idempotent);
        }
    }

    let layer = ProgressLayer::new(console.clone(), &policy).verbose(options.verbose);
    // Only the first call in a process installs it (one action per process).
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));

    let watcher = match leave::watch(cancel.clone()) {
        Ok(watcher) => watcher,
        Err(e) => {
            eprintln!("retry-budget: cannot listen for Ctrl-C, SIGTERM or SIGHUP: {e}");
            return ExitCode::FAILURE;
        }
    };

    console.line(&format!(
        "{} {}: budget {}, at most {} attempt{}, {} per attempt, waits of at least {}",
        target.method,
        redact::shown_uri(&target.uri),
        retry_budget::Secs(policy.total_budget()),
        policy.max_attempts(),
        if policy.max_attempts() == 1 { "" } else { "s" },
        retry_budget::Secs(policy.attempt_cap()),
        retry_budget::Secs(policy.min_wait()),
    ));
    if policy.max_attempts() < options.policy.max_attempts() {
        console.line(&format!(
            "{INDENT} {} is not a safe method: it is sent once and never retried",
            target.method
        ));
    }

    // The default sensitive names, and any other the user marked.
    let mut sensitive = Sensitive::default().names();
    for header in target.headers.iter().filter(|h| h.value.is_sensitive()) {
        if !sensitive.contains(&header.name) {
            sensitive.push(header.name.clone());
        }
    }
    let progress = Progress::new(console.clone(), &policy);
    let countdown = console.spawn_countdown();
    let (origin, result) = if options.trusted_clock {
        let budget = options
            .signals
            .apply(RetryBudgetLayer::new(policy).observer(progress));
        send(request, tls, sensitive, budget, options.signals.quota()).await
    } else {
        let budget = RetryBudgetLayer::new(policy)
            .calendar(UntrustedCalendar)
            .observer(progress);
        let budget = options.signals.apply(budget);
        send(request, tls, sensitive, budget, options.signals.quota()).await
    };
    if let Some(countdown) = countdown {
        countdown.abort();
    }

    // The outcome of an error that came without a report (the error's own).
    let (report, body, unreported) = match result {
        Ok(response) => {
            let report = response.extensions().get::<Report>().cloned();
            let body = match out.as_mut() {
                Some(out) => {
                    // The body is part of the action: it is read under the
                    // deadline of the attempt that produced it.
                    // (The layer always attaches a report; without one, the
                    // total budget.)
                    let by = report
                        .as_ref()
                        .map_or(policy.total_budget(), Report::body_deadline);
                    let deadline = tower_retry_budget::instant_at(origin, by);
                    final_body::copy(response.into_body(), out, deadline, &cancel).await
                }
                None => BodyRead::not_read(),
            };
            (report, body, None)
        }
        Err(error) => {
            if let ErrorKind::Inner(inner) = error.kind() {
                console.clear();
                console.line(&format!("{INDENT} request failed: {}", chain(inner)));
            }
            let report = error.report().cloned().or_else(|| {
                // Only an inner service that is never ready ends this way.
                console.line(&format!("retry-budget: {error}"));
                None
            });
            (report, BodyRead::not_read(), Some(error.outcome()))
        }
    };
    let left = watcher.left();
    drop(watcher);
    console.clear();

    match &report {
        Some(report) => {
            console.line("");
            console.line(&report.to_string());
        }
        None => console.line("retry-budget: the layer returned no report"),
    }
    if let Some(line) = body.describe() {
        console.line(&line);
    }
    if let Some(leave) = left {
        console.line(&format!("Left on {}.", leave.name()));
    }
    let mut report_unwritten = false;
    if options.json {
        let mut line = report
            .as_ref()
            .map_or_else(|| no_report_json(unreported), Report::to_json);
        if let Some(map) = line.as_object_mut() {
            map.insert("body".into(), body.end.as_str().into());
            map.insert("body_bytes".into(), body.bytes.into());
        }
        if let Err(e) = print_stdout(format!("{line}\n").as_bytes()) {
            console.line(&format!(
                "The JSON report could not be written to stdout ({e})."
            ));
            report_unwritten = true;
        }
    }
    Finish {
        left,
        report_unwritten,
        body: body.end,
        success: report.is_some_and(|r| r.outcome == Outcome::Success),
    }
    .exit()
    .into()
}

/// The response body type after the stack, boxed.
type Body = UnsyncBoxBody<Bytes, tower_http::BoxError>;

/// Sends one request through the client stack (see the module docs).
///
/// Also returns when the request entered the stack: no later than the
/// layer's own origin (it starts its clock when called), so a deadline
/// measured from it is never later than the layer's.
async fn send(
    request: Request<Full<Bytes>>,
    tls: Arc<rustls::ClientConfig>,
    sensitive: Vec<HeaderName>,
    budget: RetryBudgetLayer,
    quota: QuotaLayer,
) -> (
    tokio::time::Instant,
    Result<Response<Body>, Error<hyper_util::client::legacy::Error>>,
) {
    let client =
        Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector::build(tls, false));
    let service = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new(sensitive))
        .layer(classify::trace_layer())
        .layer(DecompressionLayer::new())
        .layer(budget)
        .layer(quota)
        .service(client);
    let origin = tokio::time::Instant::now();
    let result = service.oneshot(request).await;
    (
        origin,
        result.map(|response| response.map(BodyExt::boxed_unsync)),
    )
}

/// The request of a target, with an empty body: the URL checked and
/// without its userinfo, which goes in `Authorization` (unless `-H` gave
/// one, as with curl); framing headers checked.
fn build_request(target: &Target) -> Result<Request<Full<Bytes>>, String> {
    url::check(&target.uri)?;
    let (uri, userinfo) = url::split(&target.uri)?;
    let body = Bytes::new();
    headers::check_framing(&target.headers, &uri, body.len() as u64)?;
    let mut request = Request::builder()
        .method(target.method.clone())
        .uri(uri)
        .body(Full::new(body))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    for header in &target.headers {
        request
            .headers_mut()
            .append(header.name.clone(), header.value.clone());
    }
    if let Some(userinfo) = userinfo {
        if !request.headers().contains_key(AUTHORIZATION) {
            request
                .headers_mut()
                .insert(AUTHORIZATION, userinfo.authorization());
        }
    }
    Ok(request)
}

/// Writes the JSON report to stdout.
fn print_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush())
}

/// The JSON line when the layer gave no report at all: the outcome is the
/// error's own ([`Error::outcome`]), `null` when there was no error.
fn no_report_json(outcome: Option<Outcome>) -> serde_json::Value {
    serde_json::json!({
        "outcome": outcome.map(Outcome::as_str),
        "last_status": null,
        "attempts_started": 0,
        "max_attempts": null,
        "elapsed_s": 0.0,
        "request_s": 0.0,
        "wait_s": 0.0,
        "events": [],
        "message": "The layer returned no report.",
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
