//! The [`RetryBudget`] service: decides, per request, whether it is budgeted
//! at all, and starts the action: its first attempt, or a wait for a
//! hold-off, or a stop, as the core answers.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use retry_budget::Policy;
use tower::Service;

use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind};
use crate::future::ResponseFuture;
use crate::layer::Config;
use crate::request;

/// Retries `429 Too Many Requests` inside a hard budget. See the
/// [crate docs](crate).
///
/// # Readiness
///
/// `poll_ready` is the inner service's. The first attempt is sent on the
/// service the caller made ready; the response future keeps a clone of it
/// and waits for *that clone's* `poll_ready` before every retry (as
/// `tower::retry` and linkerd2-proxy do), so back-pressure is respected on
/// retries too. Waiting for readiness spends budget: if the inner service is
/// not ready by the latest time at which the full cap still fits, the action
/// stops as `budget_exhausted`. A readiness error, in any phase, ends the
/// action as `transport_error`, with its report (the caller's own
/// `poll_ready` included: its error carries the report of an action that
/// never started).
///
/// A first attempt delayed by a [hold-off](crate::hold_off::HoldOff) is sent on a
/// clone too, made ready when the hold-off has passed. The service the
/// caller made ready is dropped at once (and replaced by an unready clone),
/// so nothing below (a concurrency limit's slot, say) is held while the
/// action waits.
#[derive(Debug, Clone)]
pub struct RetryBudget<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RetryBudget<S> {
    /// Wraps `inner` with `policy`, the system calendar clock and dates
    /// measured against it.
    pub fn new(inner: S, policy: Policy) -> Self {
        Self::from_config(inner, Arc::new(Config::new(policy)))
    }

    pub(crate) const fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.config.policy
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResB> Service<Request<B>> for RetryBudget<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: Clone,
{
    type Response = Response<ResB>;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|error| {
            // The transport failed before any request: an action that never
            // started, told to the core like any other ending.
            let extras = self.config.extras.without_request();
            let mut ctx = Ctx::<S, B>::new(self.config.clone(), self.inner.clone(), extras, None);
            ctx.step(|action, now| action.readiness_failed(now));
            ctx.finish_error(ErrorKind::Inner(error))
        })
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !request::is_budgeted(&request) {
            // Not retryable: no copy, no timer, no report.
            return ResponseFuture::passthrough(self.inner.call(request));
        }
        ResponseFuture::start(&mut self.inner, &self.config, request)
    }
}
