//! One `get`: the request checked and sent through the client stack, the
//! steps shown as they happen, the final body read under its deadline, and
//! the end told (the visible status, the JSON report, the exit status).

use std::io::{self, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderName, Request, Response};
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
    calendar::UntrustedCalendar, classify, BudgetThis, Error, ErrorKind, Idempotent,
    RetryBudgetLayer,
};
use tracing_subscriber::layer::SubscriberExt;

use super::final_body::{self, BodyRead};
use super::finish::Finish;
use super::progress::{Console, Progress, ProgressLayer, INDENT};
use super::{Options, Target};
use crate::common::connector;
use crate::common::headers::{self, Sensitive};
use crate::common::idempotency::has_idempotency_key;
use crate::common::leave::{self, Leave};
use crate::common::run::{chain, usage_error};
use crate::common::{redact, url};

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
    let (mut request, tls, mut out) = match prepare(&target, output, options.json).await {
        Ok(prepared) => prepared,
        Err(message) => return usage_error(&message),
    };
    request.extensions_mut().insert(cancel.clone());
    let policy = policy_for(&mut request, options.policy);
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
    announce(console, &target, &policy, &options.policy);
    let (origin, result) = act(request, tls, &target, &options, policy, console).await;
    let end = read_end(
        result,
        out.as_mut(),
        (policy, origin),
        (&cancel, options.trusted_clock),
        console,
    )
    .await;
    let left = watcher.left();
    drop(watcher);
    console.clear();
    tell_end(console, end, left, options.json)
}

/// Where the body goes.
type Out = Pin<Box<dyn AsyncWrite + Send>>;

/// The request, the TLS configuration and the output (created), checked
/// before anything is sent; the error is a usage error.
async fn prepare(
    target: &Target,
    output: &Output,
    json: bool,
) -> Result<(Request<Full<Bytes>>, Arc<rustls::ClientConfig>, Option<Out>), String> {
    let request = build_request(target)?;
    let https = target.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let tls = crate::common::tls::client_config(target.cacert.as_deref(), https)?;
    let out: Option<Out> = match output {
        Output::Stdout if json => None,
        Output::Stdout => Some(Box::pin(tokio::io::stdout())),
        Output::File(path) => match tokio::fs::File::create(path).await {
            Ok(file) => Some(Box::pin(file)),
            Err(e) => {
                return Err(format!(
                    "--output {}: cannot create the file: {e}",
                    crate::common::escape::escape(&path.display().to_string())
                ))
            }
        },
    };
    Ok((request, tls, out))
}

/// The policy `request` is sent under: `policy`, or one attempt of it for
/// a write that nothing marks as safe to repeat.
fn policy_for(request: &mut Request<Full<Bytes>>, policy: Policy) -> Policy {
    if !tower_retry_budget::may_retry(request) && has_idempotency_key(request.headers()) {
        // A write that carries an `Idempotency-Key` (sent unchanged with
        // every copy): the caller says repeating it is the same operation,
        // as the proxy reads it.
        request.extensions_mut().insert(Idempotent);
    }
    if !tower_retry_budget::may_retry(request) {
        // A write is never retried. Rather than let it pass through the
        // layer with no deadline, no cancellation and no report, it is
        // budgeted under a one-attempt policy: the layer times it, cancels
        // it and reports it, keeps no copy of it, and has the core end it
        // `not_retryable` (not repeatable) where a 429 would be retried.
        if let Ok(once) = policy.to_builder().max_attempts(1).build() {
            request.extensions_mut().insert(BudgetThis);
            return once;
        }
    }
    policy
}

/// The first lines: what is sent, under which budget.
fn announce(console: &Console, target: &Target, policy: &Policy, asked: &Policy) {
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
    if policy.max_attempts() < asked.max_attempts() {
        console.line(&format!(
            "{INDENT} {} is not a safe method: it is sent once and never retried \
             (an Idempotency-Key header marks it safe to repeat)",
            target.method
        ));
    }
}

/// What [`send`] returns: when the request entered the stack, and its
/// result.
type Sent = (
    tokio::time::Instant,
    Result<Response<Body>, Error<hyper_util::client::legacy::Error>>,
);

/// The action, its steps shown on `console` as they happen.
async fn act(
    request: Request<Full<Bytes>>,
    tls: Arc<rustls::ClientConfig>,
    target: &Target,
    options: &Options,
    policy: Policy,
    console: &Console,
) -> Sent {
    // The default sensitive names, and any other the user marked.
    let mut sensitive = Sensitive::default().names();
    for header in target.headers.iter().filter(|h| h.value.is_sensitive()) {
        if !sensitive.contains(&header.name) {
            sensitive.push(header.name.clone());
        }
    }
    let progress = Progress::new(console.clone(), &policy);
    let countdown = console.spawn_countdown();
    let sent = if options.trusted_clock {
        let budget = options
            .signals
            .apply(RetryBudgetLayer::new(policy).observer(progress));
        send(request, tls, sensitive, budget, options).await
    } else {
        let budget = RetryBudgetLayer::new(policy)
            .calendar(UntrustedCalendar)
            .observer(progress);
        let budget = options.signals.apply(budget);
        send(request, tls, sensitive, budget, options).await
    };
    if let Some(countdown) = countdown {
        countdown.abort();
    }
    sent
}

/// How the action ended: its report, how its body was read, and the
/// outcome of an error that came without a report (the error's own).
struct End {
    report: Option<Report>,
    /// The quota the final response announced, in words.
    quota: Vec<String>,
    body: BodyRead,
    unreported: Option<Outcome>,
}

/// Reads the final body (under the deadline of the attempt that produced
/// it, from `origin`), or shows the error.
async fn read_end(
    result: Result<Response<Body>, Error<hyper_util::client::legacy::Error>>,
    out: Option<&mut Out>,
    (policy, origin): (Policy, tokio::time::Instant),
    (cancel, trusted_clock): (&CancellationToken, bool),
    console: &Console,
) -> End {
    match result {
        Ok(response) => {
            let report = response.extensions().get::<Report>().cloned();
            let quota = super::quota::lines(response.headers(), trusted_clock);
            let body = match out {
                Some(out) => {
                    // The body is part of the action: it is read under the
                    // deadline of the attempt that produced it.
                    // (The layer always attaches a report; without one, the
                    // total budget.)
                    let by = report
                        .as_ref()
                        .map_or(policy.total_budget(), Report::body_deadline);
                    let deadline = tower_retry_budget::instant_at(origin, by);
                    final_body::copy(response.into_body(), out, deadline, cancel).await
                }
                None => BodyRead::not_read(),
            };
            End {
                report,
                quota,
                body,
                unreported: None,
            }
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
            End {
                report,
                quota: Vec::new(),
                body: BodyRead::not_read(),
                unreported: Some(error.outcome()),
            }
        }
    }
}

/// Shows the end (the report, the body's ending, a signal), prints the
/// JSON report if asked, and returns the exit status.
fn tell_end(console: &Console, end: End, left: Option<Leave>, json: bool) -> ExitCode {
    let End {
        report,
        quota,
        body,
        unreported,
    } = end;
    match &report {
        Some(report) => {
            console.line("");
            console.line(&report.to_string());
        }
        None => console.line("retry-budget: the layer returned no report"),
    }
    for line in &quota {
        console.line(line);
    }
    if let Some(line) = body.describe() {
        console.line(&line);
    }
    if let Some(leave) = left {
        console.line(&format!("Left on {}.", leave.name()));
    }
    let mut report_unwritten = false;
    if json {
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
    options: &Options,
) -> Sent {
    let quota = options.signals.quota();
    let connector = connector::build_with(tls, false, options.connect_to.clone());
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
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
