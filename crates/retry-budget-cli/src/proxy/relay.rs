//! The action sent down the stack, and its end relayed to the caller and
//! logged: the upstream's response streamed with what happened
//! (`retry-budget-attempts`, `retry-budget-outcome`, and with `--preset`
//! `x-should-retry: false` when an SDK must not retry on top), or the
//! proxy's own answer when the action ended without one, when the caller's
//! body broke (`bad_request_body`, 400: the caller's fault, not the
//! upstream's), or when the upstream's status is outside 100-599
//! (`invalid_upstream_status`, 502).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::Either;
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use retry_budget::trail::EventKind;
use retry_budget::{Category, Outcome, Report};
use tower::util::Oneshot;
use tower::ServiceExt;
use tower_retry_budget::peek::PeekBody;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span};

use super::args::ProxyConfig;
use super::hop;
use super::log_guard::LogGuard;
use super::metrics::Metrics;
use super::relay_body::{Broke, BrokeFlag, CallerBody, Ending, OnEnd, RelayBody};
use super::reply::{failed, own_outcome, tell, ProxyBody, BAD_REQUEST_BODY, INVALID_STATUS};
use super::stack::PerRequest;
use super::start::Started;
use super::table::Route;

/// `x-should-retry`: the word an SDK obeys (see the [module docs](self)).
pub const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

pin_project! {
    /// The action sent down the stack, then answered to the caller (see
    /// the [module docs](self)). Written out, not an `async fn`: it holds
    /// the layer's future and what its end needs, each once.
    pub struct Relay {
        // First, so dropped before `end`'s log guard if the caller leaves:
        // the layer's future, dropped, fills the slot with the core's
        // report before the guard writes the log line from it.
        #[pin]
        action: Option<Action>,
        // Boxed from the start: the handler's future, moved whole several
        // times, carries a pointer rather than the end's parts, and the
        // same box is the relayed body's [`OnEnd`] at the end.
        end: Option<Box<End>>,
    }
}

/// The layer's future, in the action's span.
type Action = Instrumented<Oneshot<PerRequest, Request<CallerBody>>>;

/// What the action's end is answered and logged with; then, for a
/// relayed response, what its body's end is logged with (the report).
struct End {
    guard: LogGuard,
    broke: Option<BrokeFlag>,
    span: Span,
    metrics: Metrics,
    /// `--body-idle-timeout`, and whether the route has a preset.
    ends: (Duration, bool),
    /// The core's report, once the action has ended.
    report: Option<Report>,
}

impl OnEnd for End {
    fn end(mut self: Box<Self>, ending: Ending) {
        self.metrics.body_ended(ending.as_str());
        let end = &mut *self;
        if let Some(report) = &end.report {
            end.guard.log(report, Some(ending));
        }
    }
}

impl Relay {
    /// Sends the action `started` through `route`'s stack.
    #[inline(always)]
    pub fn new(route: &Route, metrics: &Metrics, config: &ProxyConfig, started: Started) -> Self {
        let Started {
            request,
            policy,
            span,
            guard,
            broke,
        } = started;
        let action = route
            .stack
            .service(policy)
            .oneshot(request)
            .instrument(span.clone());
        Self {
            action: Some(action),
            end: Some(Box::new(End {
                guard,
                broke,
                span,
                metrics: metrics.clone(),
                ends: (config.body_idle_timeout, route.config.preset.is_some()),
                report: None,
            })),
        }
    }
}

impl Future for Relay {
    type Output = Response<ProxyBody>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(action) = this.action.as_mut().as_pin_mut() else {
            panic!("`Relay` polled after completion");
        };
        let result = ready!(action.poll(cx));
        // The layer's future is done: its span goes with it, as the end's
        // own goes when the answer is made.
        this.action.set(None);
        let Some(end) = this.end.take() else {
            panic!("`Relay` polled after completion");
        };
        Poll::Ready(end.answer(result))
    }
}

impl End {
    /// The caller's answer to the action's `result`, logged: the
    /// upstream's final response, relayed and logged when its body ends,
    /// or the proxy's own answer (see the [module docs](self)). The end's
    /// box becomes the relayed body's [`OnEnd`].
    #[inline(always)]
    fn answer(mut self: Box<Self>, result: <Action as Future>::Output) -> Response<ProxyBody> {
        // Taken, not copied: from here on the report is passed along, and
        // every path below that has one writes the line from it (`guard`'s
        // drop reads the slot only when no line was written, which is only
        // when there is no report).
        let report = self.guard.slot.take();
        // The span and the break flag go when the answer is made, not
        // with the body.
        let span = std::mem::replace(&mut self.span, Span::none());
        record(&span, report.as_ref());
        let broke = self.broke.take();
        let mut response = match (broke.as_deref().and_then(Broke::get), result) {
            (Some(broken), _) => {
                // Whatever the action's end, the caller's body broke first.
                let text = format!("retry-budget proxy: {broken}\n");
                let status = StatusCode::BAD_REQUEST;
                return own_end(self.guard, report, status, &text, BAD_REQUEST_BODY);
            }
            (None, Err(error)) => {
                if let Some(report) = &report {
                    self.guard.log(report, None);
                }
                return failed(&error);
            }
            (None, Ok(response)) => response,
        };
        if !(100..600).contains(&response.status().as_u16()) {
            let text = format!(
                "retry-budget proxy: the upstream answered an invalid status ({})\n",
                response.status()
            );
            let status = StatusCode::BAD_GATEWAY;
            return own_end(self.guard, report, status, &text, INVALID_STATUS);
        }
        let (idle, preset) = self.ends;
        rewrite_head(&mut response, preset);
        // `report` is the slot's for good: the action ended with this
        // response's head, and no layer of this stack corrects a report
        // from the body afterwards.
        self.report = report;
        response.map(move |body| Either::Left(RelayBody::new(body, idle, self)))
    }
}

/// The action's outcome on its span.
fn record(span: &Span, report: Option<&Report>) {
    if let Some(report) = report {
        span.record("retry_budget.outcome", report.outcome.as_str());
        span.record("retry_budget.attempts", report.attempts_started);
        if let Some(status) = report.last_status {
            span.record("http.response.status_code", status);
        }
    }
}

/// The proxy's own answer with its own `outcome`, logged.
fn own_end(
    mut guard: LogGuard,
    report: Option<Report>,
    status: StatusCode,
    text: &str,
    outcome: &'static str,
) -> Response<ProxyBody> {
    guard.outcome = Some(outcome);
    if let Some(report) = &report {
        guard.log(report, None);
    }
    own_outcome(status, text, outcome, report.as_ref())
}

/// The upstream's final response head, rewritten in place for the
/// caller: the hop-by-hop fields out, what happened in.
fn rewrite_head(response: &mut Response<PeekBody<Incoming>>, preset: bool) {
    let told = response.extensions().get::<Report>().map(|report| {
        // Read only with a preset (it may read the trail).
        let no_retry = preset && no_retry_on_top(report);
        (report.outcome, report.attempts_started, no_retry)
    });
    hop::strip_response(response.headers_mut());
    // The version is this hop's: hyper writes its own.
    *response.version_mut() = Version::default();
    if let Some((outcome, attempts, no_retry)) = told {
        tell(response, outcome, attempts);
        if no_retry {
            response
                .headers_mut()
                .insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        }
    }
}

/// Whether an SDK must not retry this answer on top of the proxy: the
/// proxy already retried and still ended with a 429, the 429 asked a wait
/// that does not fit the budget (a spent daily limit: any retry before it
/// is another 429), the 429 said the quota is used up, or the upstream
/// said not to retry. (The core decided each: the attempts, the outcome,
/// the category, the trail.)
fn no_retry_on_top(report: &Report) -> bool {
    let retried_429 = report.attempts_started > 1
        && report.last_status == Some(429)
        && report.outcome != Outcome::Success;
    let wait_past_budget = report.last_status == Some(429)
        && report.outcome == Outcome::BudgetExhausted
        && report.server_requested_wait.is_some();
    let retried_429 = retried_429 || wait_past_budget;
    let server_said = report.events.iter().rev().any(|e| {
        matches!(
            e.kind,
            EventKind::ShouldRetry {
                says: Some(false),
                ..
            }
        )
    });
    retried_429 || report.category() == Some(Category::Quota) || server_said
}
