//! `retry-budget get URL`: one request through [`RetryBudgetLayer`] over
//! hyper-util's client, with every step shown on stderr as it happens.
//!
//! The client stack, outermost first, is the one a user would build:
//!
//! ```text
//! SetSensitiveRequestHeadersLayer (Authorization, Cookie, Proxy-Authorization)
//!   → classify::trace_layer()     (tower-http's TraceLayer, shown with --verbose)
//!   → DecompressionLayer          (gzip)
//!   → RetryBudgetLayer            (the budget)
//!   → hyper_util::client::legacy::Client (HTTP, or HTTPS through rustls)
//! ```
//!
//! Nothing here applies a budget rule: the steps come from the layer's
//! `tracing` events ([`crate::progress`]), the ending from the
//! [`Report`] it returns (in the final response's extensions, or in its
//! error). Ctrl-C fires a [`CancellationToken`] put in the request's
//! extensions: the layer sends nothing more and returns at once with the
//! report.
//!
//! Exit status: 0 for `success`, 1 for every other outcome, 2 for a usage
//! error (nothing is sent), 130 for Ctrl-C.

use std::error::Error as StdError;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_budget::{Outcome, Policy, PolicyError, Report};
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::decompression::DecompressionLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_retry_budget::{
    classify, Calendar, Error, ErrorKind, Idempotent, RetryBudgetLayer, UntrustedCalendar,
};
use tracing_subscriber::layer::SubscriberExt;

use crate::progress::{Console, ProgressLayer, INDENT};

/// The arguments of `retry-budget get`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to fetch (http:// or https://).
    #[arg(value_name = "URL", value_parser = parse_url)]
    url: Uri,
    /// The request method. Only safe methods (GET, HEAD, OPTIONS, TRACE) are
    /// ever retried; any other is sent once.
    #[arg(short = 'X', long, value_name = "M", default_value = "GET", value_parser = parse_method)]
    method: Method,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    headers: Vec<Header>,
    /// The total budget of the action, counted from the first attempt's start.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "20s", value_parser = parse_duration)]
    budget: Duration,
    /// The maximum number of attempts, the first included.
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_attempts: u32,
    /// The per-attempt cap: reserved in full before every attempt, and the
    /// attempt's deadline.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "4s", value_parser = parse_duration)]
    attempt_timeout: Duration,
    /// The shortest wait applied to a valid Retry-After.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "1s", value_parser = parse_duration)]
    min_wait: Duration,
    /// Trust only the CA certificates in this PEM file for https:// (instead
    /// of the platform's roots), e.g. a private CA.
    #[arg(long, value_name = "FILE")]
    cacert: Option<std::path::PathBuf>,
    /// Trust no calendar clock: a Retry-After date stops with clock_untrusted.
    #[arg(long)]
    untrusted_clock: bool,
    /// Print the report as one JSON object on stdout (instead of the body).
    #[arg(long)]
    json: bool,
    /// Also show tower-http's trace events.
    #[arg(short, long)]
    verbose: bool,
}

/// One `-H 'Name: value'`.
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
    value: HeaderValue,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct Target {
    /// The method.
    pub method: Method,
    /// The URL (http:// or https://).
    pub uri: Uri,
    /// Extra request headers.
    pub headers: Vec<Header>,
    /// A PEM file of CA certificates to trust instead of the platform's.
    pub cacert: Option<std::path::PathBuf>,
}

/// How to send it and what to print.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The budget.
    pub policy: Policy,
    /// Whether the system calendar clock is trusted for Retry-After dates.
    pub trusted_clock: bool,
    /// JSON report on stdout instead of the body.
    pub json: bool,
    /// Show tower-http's trace events too.
    pub verbose: bool,
}

/// Runs the command and returns the process's exit status.
pub fn run(args: Args) -> ExitCode {
    let policy = match policy(&args) {
        Ok(policy) => policy,
        Err(message) => return usage_error(&message),
    };
    let target = Target {
        method: args.method,
        uri: args.url,
        headers: args.headers,
        cacert: args.cacert,
    };
    let options = Options {
        policy,
        trusted_clock: !args.untrusted_clock,
        json: args.json,
        verbose: args.verbose,
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-budget: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let console = Console::stderr();
    runtime.block_on(fetch(target, options, &console, CancellationToken::new()))
}

/// Prints a usage error (one line) and returns exit status 2.
pub fn usage_error(message: &str) -> ExitCode {
    eprintln!("retry-budget: {message}");
    ExitCode::from(2)
}

/// The tokio runtime of a command.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The policy of the flags; the error names the flag.
fn policy(args: &Args) -> Result<Policy, String> {
    Policy::builder()
        .total_budget(args.budget)
        .max_attempts(args.max_attempts)
        .attempt_cap(args.attempt_timeout)
        .min_wait(args.min_wait)
        .build()
        .map_err(|e| {
            let flag = match e {
                PolicyError::ZeroBudget => "--budget",
                PolicyError::ZeroAttempts | PolicyError::TooManyAttempts { .. } => "--max-attempts",
                PolicyError::ZeroAttemptCap | PolicyError::CapExceedsBudget { .. } => {
                    "--attempt-timeout"
                }
                _ => "the budget flags",
            };
            format!("{flag}: {e}")
        })
}

/// Sends `target` under `options`, shows every step on `console`, prints the
/// visible status (and the body or the JSON report), and returns the exit
/// status. `cancel` ends the action when fired (Ctrl-C fires it too).
pub async fn fetch(
    target: Target,
    options: Options,
    console: &Console,
    cancel: CancellationToken,
) -> ExitCode {
    let mut request = match build_request(&target) {
        Ok(request) => request,
        Err(message) => return usage_error(&message),
    };
    let https = target.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let tls = match crate::tls::client_config(target.cacert.as_deref(), https) {
        Ok(tls) => tls,
        Err(message) => return usage_error(&message),
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

    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = match watch_ctrl_c(cancel.clone(), interrupted.clone()) {
        Ok(watcher) => watcher,
        Err(e) => {
            eprintln!("retry-budget: cannot listen for Ctrl-C: {e}");
            return ExitCode::FAILURE;
        }
    };

    console.line(&format!(
        "{} {}: budget {}, at most {} attempt{}, {} per attempt, waits of at least {}",
        target.method,
        target.uri,
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

    let countdown = console.spawn_countdown();
    let result = if options.trusted_clock {
        send(request, tls, RetryBudgetLayer::new(policy)).await
    } else {
        send(
            request,
            tls,
            RetryBudgetLayer::new(policy).calendar(UntrustedCalendar),
        )
        .await
    };
    if let Some(countdown) = countdown {
        countdown.abort();
    }

    let mut body_interrupted = false;
    let report = match result {
        Ok(response) => {
            let report = response.extensions().get::<Report>().cloned();
            if !options.json {
                body_interrupted = !copy_body(response, &cancel, console).await;
            }
            report
        }
        Err(error) => {
            if let ErrorKind::Inner(inner) = error.kind() {
                console.clear();
                console.line(&format!("{INDENT} request failed: {}", chain(inner)));
            }
            error.report().cloned().or_else(|| {
                // Only an inner service that is never ready ends this way.
                console.line(&format!("retry-budget: {error}"));
                None
            })
        }
    };
    watcher.abort();
    console.clear();

    let interrupted = interrupted.load(Ordering::SeqCst);
    match &report {
        Some(report) => {
            console.line("");
            console.line(&report.to_string());
        }
        None => console.line("retry-budget: the layer returned no report"),
    }
    if body_interrupted {
        console.line("Interrupted while the response body was being read.");
    }
    if options.json {
        let line = report
            .as_ref()
            .map_or_else(|| no_report_json(interrupted), Report::to_json);
        print_stdout(format!("{line}\n").as_bytes());
    }
    if interrupted {
        ExitCode::from(130)
    } else if report.is_some_and(|r| r.outcome == Outcome::Success) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The response body type after the stack, boxed.
type Body = UnsyncBoxBody<Bytes, tower_http::BoxError>;

/// Sends one request through the client stack (see the module docs).
async fn send<C>(
    request: Request<Full<Bytes>>,
    tls: Arc<rustls::ClientConfig>,
    budget: RetryBudgetLayer<C>,
) -> Result<Response<Body>, Error<hyper_util::client::legacy::Error>>
where
    C: Calendar + Clone,
{
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(tls))
        .https_or_http()
        .enable_http1()
        .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    let service = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            AUTHORIZATION,
            COOKIE,
            PROXY_AUTHORIZATION,
        ]))
        .layer(classify::trace_layer())
        .layer(DecompressionLayer::new())
        .layer(budget)
        .service(client);
    let response = service.oneshot(request).await?;
    Ok(response.map(BodyExt::boxed_unsync))
}

/// The request of a target, with an empty body.
fn build_request(target: &Target) -> Result<Request<Full<Bytes>>, String> {
    let mut request = Request::builder()
        .method(target.method.clone())
        .uri(target.uri.clone())
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    for header in &target.headers {
        request
            .headers_mut()
            .append(header.name.clone(), header.value.clone());
    }
    Ok(request)
}

/// Fires `cancel` (and sets `interrupted`) on Ctrl-C. The signal handler is
/// in place when this returns, before anything is sent.
fn watch_ctrl_c(
    cancel: CancellationToken,
    interrupted: Arc<AtomicBool>,
) -> io::Result<tokio::task::JoinHandle<()>> {
    #[cfg(unix)]
    let mut signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    Ok(tokio::spawn(async move {
        #[cfg(unix)]
        let received = signal.recv().await.is_some();
        #[cfg(not(unix))]
        let received = tokio::signal::ctrl_c().await.is_ok();
        if received {
            interrupted.store(true, Ordering::SeqCst);
            cancel.cancel();
        }
    }))
}

/// Copies the body to stdout as it arrives; `false` if `cancel` fired
/// first.
async fn copy_body(
    response: Response<Body>,
    cancel: &CancellationToken,
    console: &Console,
) -> bool {
    let mut body = response.into_body();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = cancel.cancelled() => return false,
        };
        match frame {
            None => return true,
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    print_stdout(data);
                }
            }
            Some(Err(e)) => {
                console.line(&format!(
                    "{INDENT} the response body could not be read to the end: {}",
                    chain(e.as_ref())
                ));
                return true;
            }
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is the reader's choice.
fn print_stdout(bytes: &[u8]) {
    let mut stdout = io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
}

/// An error and its sources, on one line.
fn chain(error: &(dyn StdError + 'static)) -> String {
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

/// The JSON line when the layer gave no report at all.
fn no_report_json(interrupted: bool) -> serde_json::Value {
    let outcome = if interrupted {
        Outcome::Cancelled
    } else {
        Outcome::TransportError
    };
    serde_json::json!({
        "outcome": outcome.as_str(),
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

fn parse_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("not a URL ({e}); give one such as http://127.0.0.1:8080/path"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(format!(
                "the scheme {other}: is not supported: http:// or https:// only"
            ))
        }
        None => return Err("no scheme: give a full URL such as http://127.0.0.1:8080/path".into()),
    }
    match uri.host() {
        Some(host) if !host.is_empty() => Ok(uri),
        _ => Err("the URL has no host".into()),
    }
}

fn parse_method(text: &str) -> Result<Method, String> {
    Method::from_bytes(text.to_ascii_uppercase().as_bytes())
        .map_err(|_| "not an HTTP method token".to_owned())
}

fn parse_header(text: &str) -> Result<Header, String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| "expected 'Name: value'".to_owned())?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{:?} is not a valid header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| format!("the value of {name} is not a valid header value"))?;
    Ok(Header { name, value })
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("expected a duration such as 20s or 500ms ({e})"))
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
        assert_eq!(policy(&args), Ok(Policy::default()));
        assert_eq!(args.method, Method::GET);
        assert!(!args.json && !args.untrusted_clock);
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
        let policy = policy(&args).unwrap();
        assert_eq!(policy.total_budget(), Duration::from_secs(90));
        assert_eq!(policy.max_attempts(), 5);
        assert_eq!(policy.attempt_cap(), Duration::from_millis(500));
        assert_eq!(policy.min_wait(), Duration::from_secs(2));
        assert_eq!(args.method, Method::POST);
        assert_eq!(args.headers.len(), 2);
        assert_eq!(args.headers[0].name, AUTHORIZATION);
        assert_eq!(args.headers[0].value, "Bearer t");
        assert_eq!(args.headers[1].value, "b");
    }

    #[test]
    fn bad_values() {
        assert!(parse_duration("20x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_url("not a url").is_err());
        assert!(parse_url("https://example.com/").is_ok());
        assert!(parse_url("ftp://example.com/").is_err());
        assert!(parse_url("/just/a/path").is_err());
        assert!(parse_header("NoColon").is_err());
        assert!(parse_header("Bad Name: v").is_err());
        assert!(parse_header("X: a\u{7f}b").is_err());
        let zero = args(&["http://a/", "--max-attempts", "0"]).unwrap();
        assert!(policy(&zero).unwrap_err().starts_with("--max-attempts: "));
        let big = args(&["http://a/", "--budget", "1s"]).unwrap();
        assert!(policy(&big).unwrap_err().starts_with("--attempt-timeout: "));
    }
}
