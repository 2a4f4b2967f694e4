//! One request through the proxy: from the caller's request to the
//! upstream's (or the proxy's) response, with what happened in
//! `retry-budget-attempts` and `retry-budget-outcome`, and one log line.
//!
//! What is decided here, per request, is only which [`Policy`] applies:
//!
//! * the configured one, shrunk to the caller's deadline if it sent one
//!   (`Policy::within`, the core's rule);
//! * one attempt for a request that must go once: a write (not a safe
//!   method, and no `Idempotency-Key` with a value once the hop-by-hop
//!   fields are gone, so that the key decided on is the key sent), or a
//!   request that is already a retry of a proxy below
//!   (`retry-budget-attempt` > 1, or not a number, unless
//!   `--retry-retries`), or of an SDK (`x-stainless-retry-count` > 0, as
//!   OpenAI's and Anthropic's SDKs send it), so that retries do not
//!   multiply across proxies and clients. A write to a path listed with
//!   `--idempotent-path` is budgeted like a safe method.
//!
//! With `--preset`, the response tells an SDK not to retry on top of the
//! proxy (`x-should-retry: false`) when the proxy already retried and still
//! ended with a 429, when the 429 said the quota is used up, or when the
//! upstream itself said so. A `held_off` answer carries `retry-after-ms`
//! beside `Retry-After`.
//!
//! Every wait, stop and outcome is then the layer's (the core's), except
//! what only the proxy sees: a caller's request body that breaks
//! (`bad_request_body`, 400: the caller's fault, not the upstream's) and
//! an upstream status outside 100-599 (`invalid_upstream_status`, 502).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, RETRY_AFTER, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use retry_budget::{Outcome, Policy, PolicyError, Report};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower_retry_budget::{
    observer::ActionId, quota::QuotaBody, Error, ErrorKind, Idempotent, ReportSlot,
};
use tracing::Instrument;

use super::args::{Config, LogFormat};
use super::attempt::{AttemptCounter, ATTEMPT};
use super::deadline::{self, CallerDeadline};
use super::hop;
use super::log::ActionLine;
use super::metrics::Metrics;
use super::relay_body::{BrokeFlag, CallerBody, Ending, RelayBody};
use super::stack::Stack;
use crate::common::redact::logged_uri;

/// `retry-budget-attempts`: on every response, the attempts sent.
pub const ATTEMPTS: HeaderName = HeaderName::from_static("retry-budget-attempts");
/// `retry-budget-outcome`: on every response, how the action ended.
pub const OUTCOME: HeaderName = HeaderName::from_static("retry-budget-outcome");
/// `Idempotency-Key`: the caller's mark that a write may be repeated.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `x-stainless-retry-count`: OpenAI's and Anthropic's SDKs number their
/// retries with it (0 for the first request).
pub const SDK_RETRY_COUNT: HeaderName = HeaderName::from_static("x-stainless-retry-count");
/// `x-should-retry`: the word an SDK obeys (see the [module docs](self)).
pub const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
/// `retry-after-ms`: a `held_off` answer's wait, in milliseconds.
pub const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// The body of a response to the caller: the upstream's, streamed, or the
/// proxy's own short text.
pub type ProxyBody = Either<RelayBody, Full<Bytes>>;

/// What the request handlers of one worker share.
#[derive(Debug)]
pub struct Proxy {
    /// The configuration.
    pub config: Arc<Config>,
    /// The worker's client stack.
    pub stack: Stack,
    /// Fired when the drain time is over: actions still running stop as
    /// `cancelled`. (The worker's own child of the process's token, so
    /// that each request's child token is made under a node no other
    /// thread touches.)
    pub cancel: CancellationToken,
    /// Numbers actions for the observer (one per request, whatever worker
    /// and layer instance serves it): this worker's next id, stepping by
    /// the number of workers.
    next_id: AtomicU64,
    id_step: u64,
    /// The metrics (also fed by the layer's observer).
    metrics: Metrics,
}

impl Proxy {
    /// The shared state of the handlers of worker `index` of `workers`.
    pub fn new(
        config: Arc<Config>,
        stack: Stack,
        metrics: Metrics,
        cancel: &CancellationToken,
        (index, workers): (usize, usize),
    ) -> Self {
        Self {
            config,
            stack,
            cancel: cancel.child_token(),
            next_id: AtomicU64::new(index as u64),
            id_step: workers.max(1) as u64,
            metrics,
        }
    }

    /// A number no other action of this process has.
    fn next_id(&self) -> u64 {
        // Only this worker's thread numbers with it: no other thread
        // touches its cache line.
        self.next_id.fetch_add(self.id_step, Ordering::Relaxed)
    }
}

/// The one-attempt policy of a request that must go once (the core's
/// builder checks it).
pub fn once_policy(policy: Policy) -> Result<Policy, PolicyError> {
    policy.to_builder().max_attempts(1).build()
}

/// Why a request is sent once, without retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Once {
    /// Already a retry of a proxy below.
    AlreadyARetry,
    /// Already a retry of an SDK (`x-stainless-retry-count` > 0).
    ClientRetry,
    /// A write without an idempotency key.
    Write,
}

impl Once {
    const fn as_str(self) -> &'static str {
        match self {
            Self::AlreadyARetry => "already_a_retry",
            Self::ClientRetry => "client_retry",
            Self::Write => "not_idempotent",
        }
    }
}

/// Handles one request; never fails (every failure is a response).
pub async fn handle(
    proxy: Arc<Proxy>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let received = Instant::now();
    if request.version() == Version::HTTP_2 {
        // hyper looks for a client's RST_STREAM only while the stream's
        // handler is pending. Pending once before anything is sent lets a
        // stream the client reset at once (HEADERS then RST_STREAM, as a
        // reset flood sends them) end here: no action, no upstream
        // connection opened for it.
        tokio::task::yield_now().await;
    }
    let (mut parts, body) = request.into_parts();
    if parts.method == Method::CONNECT {
        return Ok(local(
            StatusCode::METHOD_NOT_ALLOWED,
            "retry-budget proxy: CONNECT is not supported\n",
        ));
    }
    if parts.method == Method::OPTIONS && parts.uri.path() == "*" {
        // About the server as a whole: behind a path prefix the upstream's
        // answer would not be about what the caller reaches, so the proxy
        // answers for itself and forwards nothing.
        return Ok(local(
            StatusCode::OK,
            "retry-budget proxy: OPTIONS * is answered by the proxy, not forwarded\n",
        ));
    }
    let uri = match proxy.config.upstream.uri_for(parts.uri.path_and_query()) {
        Ok(uri) => uri,
        Err(error) => {
            tracing::debug!(
                target: "retry_budget::proxy",
                "refused {} {}: {error}",
                parts.method,
                logged_uri(&parts.uri),
            );
            return Ok(local(
                StatusCode::BAD_REQUEST,
                &format!(
                    "retry-budget proxy: the request target cannot be sent upstream: {error}\n"
                ),
            ));
        }
    };
    // First, so that what decides below is what would be sent: a key the
    // caller lists in `Connection` is hop-by-hop, and is no key.
    hop::strip_request(&mut parts.headers);
    let sdk_retry = parts
        .headers
        .get(&SDK_RETRY_COUNT)
        .is_some_and(|v| incoming_attempt(v) > 0);
    let incoming_attempt = parts.headers.get(&ATTEMPT).map(incoming_attempt);
    let once = if incoming_attempt.is_some_and(|n| n > 1) && !proxy.config.retry_retries {
        Some(Once::AlreadyARetry)
    } else if sdk_retry && !proxy.config.retry_retries {
        Some(Once::ClientRetry)
    } else if !parts.method.is_safe()
        && !has_idempotency_key(&parts.headers)
        && !proxy.config.idempotent_paths.lists(uri.path())
    {
        Some(Once::Write)
    } else {
        None
    };
    let allowed = deadline::read(&parts.headers);
    let policy = match policy_of(proxy.config.policy, allowed.map(|a| a.time), once) {
        Ok(policy) => policy,
        Err(Refused::DeadlineSpent(zero)) => return Ok(deadline_spent(&zero)),
        Err(Refused::Invalid(error)) => {
            // Not the caller's doing: the configured policy could not be
            // narrowed for this request.
            tracing::error!(
                target: "retry_budget::proxy",
                "internal error: no valid policy for {} {}: {error}",
                parts.method,
                logged_uri(&parts.uri),
            );
            return Ok(local(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("retry-budget proxy: internal error: no valid policy for this request ({error}): nothing was sent\n"),
            ));
        }
    };

    prepare(&mut parts, uri, &proxy.config, &body);
    let counter = match once {
        Some(Once::AlreadyARetry) => AttemptCounter::starting_at(incoming_attempt.unwrap_or(1)),
        _ => AttemptCounter::default(),
    };
    let slot = ReportSlot::new();
    let id = proxy.next_id();
    let cancel = proxy.cancel.child_token();
    let broke = BrokeFlag::default();
    let body = {
        let (metrics, cancel) = (proxy.metrics.clone(), cancel.clone());
        CallerBody::new(body, broke.clone(), move || {
            // The caller's fault: counted as such, and no retry (it could
            // not mend the body).
            metrics.caller_body_broke(id);
            cancel.cancel();
        })
    };
    let extensions = &mut parts.extensions;
    extensions.insert(counter.clone());
    extensions.insert(slot.clone());
    extensions.insert(cancel);
    if let Some(allowed) = allowed {
        extensions.insert(CallerDeadline { allowed });
    }
    if once.is_none() && !parts.method.is_safe() {
        // A write with an Idempotency-Key: the caller says every copy is
        // the same operation.
        extensions.insert(Idempotent);
    }
    extensions.insert(ActionId(id));

    let span = tracing::info_span!(
        target: "retry_budget::proxy",
        "http.client.action",
        otel.name = %parts.method,
        otel.kind = "client",
        http.request.method = %parts.method,
        url.full = %logged_uri(&parts.uri),
        http.response.status_code = tracing::field::Empty,
        retry_budget.outcome = tracing::field::Empty,
        retry_budget.attempts = tracing::field::Empty,
    );
    let mut pending = Pending {
        method: parts.method.clone(),
        url: parts.uri.clone(),
        received,
        slot,
        counter,
        once,
        format: proxy.config.log_format,
        logged: false,
        outcome: None,
    };
    let request = Request::from_parts(parts, body);
    // Declared after `pending`, so dropped before it if the caller leaves:
    // the layer's future, dropped, fills the slot with the core's report
    // before `pending` writes the log line from it.
    let action = std::pin::pin!(proxy
        .stack
        .service(policy)
        .oneshot(request)
        .instrument(span.clone()));
    let result = action.await;
    let report = pending.slot.get();
    if let Some(report) = &report {
        span.record("retry_budget.outcome", report.outcome.as_str());
        span.record("retry_budget.attempts", report.attempts_started);
        if let Some(status) = report.last_status {
            span.record("http.response.status_code", status);
        }
    }
    if let Some(broken) = broke.get() {
        // Whatever the action's end, the caller's body broke first.
        pending.outcome = Some(BAD_REQUEST_BODY);
        if let Some(report) = &report {
            pending.log(report, None);
        }
        let mut response = local(
            StatusCode::BAD_REQUEST,
            &format!("retry-budget proxy: {broken}\n"),
        );
        tell_str(
            &mut response,
            BAD_REQUEST_BODY,
            report.as_ref().map_or(0, |r| r.attempts_started),
        );
        return Ok(response);
    }
    let response = match result {
        Ok(response) if !(100..600).contains(&response.status().as_u16()) => {
            pending.outcome = Some(INVALID_STATUS);
            let status = response.status();
            let mut answer = local(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "retry-budget proxy: the upstream answered an invalid status ({status})\n"
                ),
            );
            tell_str(
                &mut answer,
                INVALID_STATUS,
                report.as_ref().map_or(0, |r| r.attempts_started),
            );
            if let Some(report) = &report {
                pending.log(report, None);
            }
            answer
        }
        Ok(response) => {
            // Logged when the body ends, with how it ended.
            let metrics = proxy.metrics.clone();
            let idle = proxy.config.body_idle_timeout;
            let preset = proxy.config.preset.is_some();
            // The report read above is the slot's for good: the action
            // ended with this response's head, and no layer of this stack
            // corrects a report from the body afterwards.
            relay(response, idle, preset, move |ending| {
                metrics.body_ended(ending.as_str());
                if let Some(report) = &report {
                    pending.log(report, Some(ending));
                }
            })
        }
        Err(error) => {
            if let Some(report) = &report {
                pending.log(report, None);
            }
            failed(&error)
        }
    };
    Ok(response)
}

/// The proxy's own outcome when the caller's request body broke.
const BAD_REQUEST_BODY: &str = "bad_request_body";
/// The proxy's own outcome when the upstream's status is outside 100-599.
const INVALID_STATUS: &str = "invalid_upstream_status";

/// The attempt number a caller's `retry-budget-attempt` says: a number too
/// large for 32 bits is the largest, and a value that is not a number is
/// taken as a retry (2) rather than as a first attempt, so that it cannot
/// open a way around "a proxy's retry is forwarded once".
fn incoming_attempt(value: &HeaderValue) -> u32 {
    let text = value.to_str().unwrap_or("").trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Only digits: it overflows or it is a number.
        text.parse::<u32>().unwrap_or(u32::MAX)
    } else {
        2
    }
}

/// Whether the (hop-by-hop-free) request has an `Idempotency-Key` with a
/// value: an empty one is no key.
fn has_idempotency_key(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(IDEMPOTENCY_KEY)
        .iter()
        .any(|v| v.as_bytes().iter().any(|b| !b.is_ascii_whitespace()))
}

/// Why a request has no policy.
#[derive(Debug, PartialEq)]
enum Refused {
    /// The core's answer to a caller's deadline that allows no time at all
    /// ([`PolicyError::ZeroBudget`] from `Policy::within`): the caller's
    /// budget is spent before anything is sent.
    DeadlineSpent(PolicyError),
    /// Any other refusal: the proxy's own error, not the caller's.
    Invalid(PolicyError),
}

/// The policy of one request; see the [module docs](self).
fn policy_of(
    base: Policy,
    allowed: Option<std::time::Duration>,
    once: Option<Once>,
) -> Result<Policy, Refused> {
    let policy = match allowed.map(|allowed| base.within(allowed)) {
        Some(Ok(policy)) => policy,
        Some(Err(zero @ PolicyError::ZeroBudget)) => return Err(Refused::DeadlineSpent(zero)),
        Some(Err(other)) => return Err(Refused::Invalid(other)),
        None => base,
    };
    if once.is_some() {
        return once_policy(policy).map_err(Refused::Invalid);
    }
    Ok(policy)
}

/// Turns the caller's request head (hop-by-hop fields already removed)
/// into the upstream's.
fn prepare(parts: &mut Parts, uri: Uri, config: &Config, body: &Incoming) {
    // hyper's HTTP/1 client sends no body for a GET or HEAD of unknown
    // length unless told to: a caller's chunked (or HTTP/2, no
    // Content-Length) body is forwarded chunked rather than dropped.
    let unknown_length = !body.is_end_stream()
        && body.size_hint().exact().is_none()
        && !parts.headers.contains_key(CONTENT_LENGTH);
    if !config.upstream_http2
        && unknown_length
        && (parts.method == Method::GET || parts.method == Method::HEAD)
    {
        parts
            .headers
            .insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
    parts.headers.insert(HOST, config.upstream.host.clone());
    parts.uri = uri;
    parts.version = if config.upstream_http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
}

/// The upstream's final response, relayed with what happened; `on_end` is
/// told how its body ended.
fn relay(
    response: Response<QuotaBody<Incoming>>,
    idle: std::time::Duration,
    preset: bool,
    on_end: impl FnOnce(Ending) + Send + 'static,
) -> Response<ProxyBody> {
    let told = response.extensions().get::<Report>().map(|report| {
        // Read only with a preset (it may read the trail).
        let no_retry = preset && no_retry_on_top(report);
        (report.outcome, report.attempts_started, no_retry)
    });
    let (mut parts, body) = response.into_parts();
    hop::strip_response(&mut parts.headers);
    // The version is this hop's: hyper writes its own.
    parts.version = Version::default();
    let body = RelayBody::new(body, idle, on_end);
    let mut response = Response::from_parts(parts, Either::Left(body));
    if let Some((outcome, attempts, no_retry)) = told {
        tell(&mut response, outcome, attempts);
        if no_retry {
            response
                .headers_mut()
                .insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        }
    }
    response
}

/// Whether an SDK must not retry this answer on top of the proxy: the
/// proxy already retried and still ended with a 429, the 429 said the
/// quota is used up, or the upstream said not to retry. (The core decided
/// each: the attempts, the category, the trail.)
fn no_retry_on_top(report: &Report) -> bool {
    let retried_429 = report.attempts_started > 1
        && report.last_status == Some(429)
        && report.outcome != Outcome::Success;
    let server_said = report.events.iter().rev().any(|e| {
        matches!(
            e.kind,
            retry_budget::trail::EventKind::ShouldRetry {
                says: Some(false),
                ..
            }
        )
    });
    retried_429 || report.category() == Some(retry_budget::Category::Quota) || server_said
}

/// The proxy's answer when the action ended without a response.
fn failed<E: std::fmt::Display>(error: &Error<E>) -> Response<ProxyBody> {
    let report = error.report();
    let outcome = error.outcome();
    let status = match error.kind() {
        ErrorKind::Inner(_) => StatusCode::BAD_GATEWAY,
        ErrorKind::AttemptTimeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::NotSent if outcome == Outcome::HeldOff => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let text = match (error.kind(), report) {
        (ErrorKind::Inner(inner), Some(report)) => format!("{report}\nUpstream error: {inner}\n"),
        (_, Some(report)) => format!("{report}\n"),
        (_, None) => format!("{error}\n"),
    };
    let mut response = local(status, &text);
    tell(
        &mut response,
        outcome,
        report.map_or(0, |r| r.attempts_started),
    );
    if let Some((secs, millis)) = report.and_then(held_off_for) {
        response.headers_mut().insert(RETRY_AFTER, secs);
        response.headers_mut().insert(RETRY_AFTER_MS, millis);
    }
    response
}

/// For a `held_off` action: how long the upstream's hold-off still runs
/// (the core's [`Report::held_off_left`]), as a `Retry-After` in whole
/// seconds and a `retry-after-ms` in whole milliseconds, each rounded up.
fn held_off_for(report: &Report) -> Option<(HeaderValue, HeaderValue)> {
    let left = report.held_off_left()?;
    let secs = left
        .as_secs()
        .saturating_add(u64::from(left.subsec_nanos() > 0));
    let millis = u64::try_from(left.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(u64::from(left.subsec_nanos() % 1_000_000 > 0));
    Some((HeaderValue::from(secs), HeaderValue::from(millis)))
}

/// Adds `retry-budget-attempts` and `retry-budget-outcome`.
fn tell<B>(response: &mut Response<B>, outcome: Outcome, attempts: u32) {
    tell_str(response, outcome.as_str(), attempts);
}

/// [`tell`] with the proxy's own outcome name.
fn tell_str<B>(response: &mut Response<B>, outcome: &'static str, attempts: u32) {
    let headers = response.headers_mut();
    headers.insert(ATTEMPTS, HeaderValue::from(attempts));
    headers.insert(OUTCOME, HeaderValue::from_static(outcome));
}

/// The caller's deadline leaves no time (the core's `zero`, a zero budget):
/// the budget is exhausted before the first attempt, nothing is sent.
fn deadline_spent(zero: &PolicyError) -> Response<ProxyBody> {
    let mut response = local(
        StatusCode::GATEWAY_TIMEOUT,
        &format!(
            "retry-budget proxy: the caller's deadline leaves no time ({zero}): nothing was sent\n"
        ),
    );
    tell(&mut response, Outcome::BudgetExhausted, 0);
    response
}

/// A short text response of the proxy's own.
fn local(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text.to_owned()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // Nothing sent, unless the caller says otherwise with `tell`.
    response
        .headers_mut()
        .insert(ATTEMPTS, HeaderValue::from_static("0"));
    response
}

/// The log line of an action, written once: when it ends, or, if the
/// connection is dropped first (the caller left, or the drain time ran
/// out), when this is dropped.
struct Pending {
    method: Method,
    url: Uri,
    received: Instant,
    slot: ReportSlot,
    counter: AttemptCounter,
    once: Option<Once>,
    format: LogFormat,
    logged: bool,
    /// The proxy's own outcome, when it overrides the core's.
    outcome: Option<&'static str>,
}

impl Pending {
    fn log(&mut self, report: &Report, body: Option<Ending>) {
        self.logged = true;
        let mut line = ActionLine::of_report(
            &self.method,
            &self.url,
            report,
            self.received.elapsed(),
            self.once.map(Once::as_str),
        );
        line.body = body;
        if let Some(outcome) = self.outcome {
            line.outcome = outcome;
        }
        line.write(self.format);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.logged {
            return;
        }
        // The caller left: the layer's future, dropped first, has filled the
        // slot with the core's report (`cancelled`).
        match self.slot.get() {
            Some(report) => ActionLine::of_report(
                &self.method,
                &self.url,
                &report,
                self.received.elapsed(),
                self.once.map(Once::as_str),
            )
            .write(self.format),
            // Every request of this stack is budgeted, so the layer always
            // reports; no outcome is made up if it did not.
            None => tracing::error!(
                target: "retry_budget::proxy",
                "internal error: the retry layer gave no report for {} {} ({} attempts sent)",
                self.method,
                logged_uri(&self.url),
                self.counter.sent(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_request_that_must_go_once_gets_one_attempt_within_the_deadline() {
        let base = Policy::default();
        assert_eq!(policy_of(base, None, None), Ok(base));
        let once = policy_of(base, None, Some(Once::Write)).unwrap();
        assert_eq!(once.max_attempts(), 1);
        assert_eq!(once.total_budget(), base.total_budget());
        let both = policy_of(
            base,
            Some(Duration::from_secs(2)),
            Some(Once::AlreadyARetry),
        )
        .unwrap();
        assert_eq!(both.max_attempts(), 1);
        assert_eq!(both.total_budget(), Duration::from_secs(2));
        assert_eq!(both.attempt_cap(), Duration::from_secs(2));
        assert_eq!(
            policy_of(base, Some(Duration::ZERO), None),
            Err(Refused::DeadlineSpent(PolicyError::ZeroBudget)),
            "the core's answer to a spent deadline"
        );
    }

    #[test]
    fn an_attempt_number_that_is_not_a_number_is_a_retry() {
        for (given, read) in [
            ("1", 1),
            (" 3 ", 3),
            ("0", 0),
            ("4294967295", u32::MAX),
            ("4294967296", u32::MAX),
            ("99999999999999999999999", u32::MAX),
            ("abc", 2),
            ("", 2),
            ("-1", 2),
            ("+1", 2),
            ("1.0", 2),
        ] {
            assert_eq!(
                incoming_attempt(&HeaderValue::from_static(given)),
                read,
                "{given:?}"
            );
        }
    }

    #[test]
    fn an_empty_idempotency_key_is_no_key() {
        let mut headers = http::HeaderMap::new();
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static(""));
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("  "));
        assert!(!has_idempotency_key(&headers));
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("k-1"));
        assert!(has_idempotency_key(&headers));
    }
}
