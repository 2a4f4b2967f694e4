//! [`GrpcTrailers`]: which calls are peeked.

use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::body::Listeners;
use super::{GrpcTrailersFuture, PeekBody};
use crate::request;

/// Peeks the first body frame of a gRPC answer whose head has no
/// `grpc-status`, for calls the retry layer budgets. See
/// [`GrpcTrailersLayer`](crate::grpc::GrpcTrailersLayer).
#[derive(Debug, Clone)]
pub struct GrpcTrailers<S> {
    inner: S,
}

impl<S> GrpcTrailers<S> {
    /// Wraps `inner`.
    pub const fn new(inner: S) -> Self {
        Self { inner }
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

impl<S, ReqB, ResB> Service<Request<ReqB>> for GrpcTrailers<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body + Unpin,
{
    type Response = Response<PeekBody<ResB>>;
    type Error = S::Error;
    type Future = GrpcTrailersFuture<S::Future, ResB>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The retry layer budgets exactly these; any other call is neither
        // retried nor reported, so there is nothing to peek for.
        if !request::is_budgeted(&request) {
            return GrpcTrailersFuture::passthrough(self.inner.call(request));
        }
        let listeners = Listeners::of(request.extensions());
        GrpcTrailersFuture::peeking(self.inner.call(request), listeners)
    }
}
