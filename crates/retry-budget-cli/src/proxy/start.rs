//! What one action carries down the stack, set up once its policy is
//! known: the request's extensions (report slot, cancellation, the
//! observer's id; on some requests the attempt offset of a proxy's retry
//! forwarded once, the caller's deadline, the idempotency mark or, on a
//! write that goes once, the budget mark), the caller's body watched for
//! breaking (unless it is already at its end), the action's span, and its
//! log guard.

use std::sync::Arc;

use http::request::Parts;
use http::Request;
use hyper::body::Incoming;
use retry_budget::Policy;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_retry_budget::{
    is_budgeted, observer::ActionId, BudgetThis, CallerExtensions, Idempotent, ReportSlot,
};
use tracing::Span;

use super::args::LogFormat;
use super::classify::{Class, Once};
use super::deadline::{Allowed, CallerDeadline};
use super::log_guard::LogGuard;
use super::metrics::Metrics;
use super::relay_body::{Broke, BrokeFlag, CallerBody};
use crate::common::redact::logged_uri;

/// An action ready to be sent.
pub struct Started {
    /// The upstream request.
    pub request: Request<CallerBody>,
    /// Its policy.
    pub policy: Policy,
    /// The action's span.
    pub span: Span,
    /// Writes its log line once.
    pub guard: LogGuard,
    /// Set if the caller's body broke (none for a body at its end: it
    /// cannot break).
    pub broke: Option<BrokeFlag>,
}

/// What an action is started with, besides its request.
pub struct Setup<'a> {
    /// The observer's number for it.
    pub id: u64,
    /// Fired to cancel it (a child of the worker's token).
    pub cancel: CancellationToken,
    /// Told when the caller's body breaks.
    pub metrics: &'a Metrics,
    /// The log line's format.
    pub format: LogFormat,
    /// When the request was received.
    pub received: Instant,
    /// The config file's route that took it (none for the flags' one).
    pub route: Option<Arc<str>>,
}

/// Sets up the action of the upstream request head `parts` (see the
/// [module docs](self)). Inlined into its one caller, so that the parts of
/// the [`Started`] it returns are made where [`Relay::new`] takes them,
/// not made here and copied out.
///
/// [`Relay::new`]: super::relay::Relay::new
#[inline(always)]
pub fn start(
    mut parts: Parts,
    body: Incoming,
    (class, policy, allowed): (Class, Policy, Option<Allowed>),
    setup: Setup<'_>,
) -> Started {
    let Setup {
        id, cancel, format, ..
    } = setup;
    let slot = ReportSlot::new();
    let (body, broke) = caller_body(body, setup.metrics, id, &cancel);
    let extensions = &mut parts.extensions;
    // The three the layer reads in one entry (each attempt's copy clones
    // one entry for them), then the rare ones: the map the first insert
    // allocates has room for three, so that with the replay layer's
    // handle and each attempt's deadline a plain request never grows it.
    extensions.insert(CallerExtensions {
        slot: Some(slot.clone()),
        cancel: Some(cancel),
        id: Some(ActionId(id)),
    });
    if let Some(offset) = class.offset() {
        extensions.insert(offset);
    }
    if let Some(allowed) = allowed {
        extensions.insert(CallerDeadline { allowed });
    }
    if class.once.is_none() && !parts.method.is_safe() {
        // A write with an Idempotency-Key: the caller says every copy is
        // the same operation.
        extensions.insert(Idempotent);
    }
    let guard = LogGuard {
        method: parts.method.clone(),
        url: parts.uri.clone(),
        received: setup.received,
        slot,
        once: class.once.map(Once::as_str),
        route: setup.route.clone(),
        format,
        logged: false,
        outcome: None,
    };
    let span = span(&parts, setup.route.as_deref());
    let mut request = Request::from_parts(parts, body);
    if !is_budgeted(&request) {
        // A write that must not be repeated is budgeted too (a deadline,
        // cancellation, a report), under the one-attempt policy it was
        // given. The replay layer above keeps none of its body (it reads
        // `may_retry` only, which this mark does not change).
        request.extensions_mut().insert(BudgetThis);
    }
    Started {
        span,
        request,
        policy,
        guard,
        broke,
    }
}

/// The caller's `body` on its way upstream, and its break flag: none for a
/// body already at its end (it is let go, nothing to read or to break).
fn caller_body(
    body: Incoming,
    metrics: &Metrics,
    id: u64,
    cancel: &CancellationToken,
) -> (CallerBody, Option<BrokeFlag>) {
    if http_body::Body::is_end_stream(&body) {
        return (CallerBody::Ended, None);
    }
    let broke = Arc::new(Broke::new(metrics.clone(), id, cancel.clone()));
    (CallerBody::new(body, broke.clone()), Some(broke))
}

/// The action's span, its outcome fields filled when it ends.
fn span(parts: &Parts, route: Option<&str>) -> Span {
    tracing::info_span!(
        target: "retry_budget::proxy",
        "http.client.action",
        otel.name = %parts.method,
        otel.kind = "client",
        retry_budget.route = route,
        http.request.method = %parts.method,
        url.full = %logged_uri(&parts.uri),
        http.response.status_code = tracing::field::Empty,
        retry_budget.outcome = tracing::field::Empty,
        retry_budget.attempts = tracing::field::Empty,
    )
}
