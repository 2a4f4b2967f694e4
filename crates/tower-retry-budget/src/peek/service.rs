//! [`Peek`]: which calls are peeked at.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::json::JsonRules;
use super::late::Listeners;
use super::{PeekBody, PeekFuture};
use crate::request;
use crate::AttemptDeadline;

/// Reads the start of a response's body for the retry layer above it,
/// for calls that layer budgets. See [`PeekLayer`](super::PeekLayer).
#[derive(Debug, Clone)]
pub struct Peek<S> {
    inner: S,
    grpc: bool,
    /// `None`: no rule, no JSON body read.
    json: Option<Arc<JsonRules>>,
}

impl<S> Peek<S> {
    pub(super) const fn new(inner: S, grpc: bool, json: Option<Arc<JsonRules>>) -> Self {
        Self { inner, grpc, json }
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Peek<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body + Unpin,
{
    type Response = Response<PeekBody<ResB>>;
    type Error = S::Error;
    type Future = PeekFuture<S::Future, ResB>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The retry layer budgets exactly these; any other call is neither
        // retried nor reported, so there is nothing to peek for.
        if !request::is_budgeted(&request) || (!self.grpc && self.json.is_none()) {
            return PeekFuture::passthrough(self.inner.call(request));
        }
        let listeners = if self.grpc {
            Listeners::of(request.extensions())
        } else {
            Listeners::default()
        };
        // A JSON read never outlasts the attempt's deadline, when the
        // retry layer sends it.
        let deadline = self.json.as_ref().and_then(|_| {
            let attempt = request.extensions().get::<AttemptDeadline>()?;
            crate::clock::instant_at(tokio::time::Instant::now(), attempt.reservation)
        });
        let json = self.json.clone();
        PeekFuture::peeking(
            self.inner.call(request),
            self.grpc,
            json,
            deadline,
            listeners,
        )
    }
}
