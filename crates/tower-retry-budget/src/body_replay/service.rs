//! The [`ReplayBodyService`].

use std::task::{Context, Poll};

use http::Request;
use http_body::Body;
use tower::Service;

use super::ReplayBody;
use crate::request::may_retry;

/// Wraps each request body in a [`ReplayBody`] and puts its
/// [`ReplayHandle`](super::ReplayHandle) handle in the request extensions,
/// unless the body has already ended (a GET's): such a body keeps nothing
/// and every copy of it is whole, so there is nothing for a handle to tell.
///
/// Requests that can never be retried (unsafe methods not marked
/// [`Idempotent`](crate::Idempotent)) are wrapped with a limit of zero, so
/// nothing of their body is ever copied.
#[derive(Debug, Clone)]
pub struct ReplayBodyService<S> {
    inner: S,
    limit: usize,
}

impl<S> ReplayBodyService<S> {
    /// Wraps `inner`, keeping up to `limit` bytes per body.
    pub const fn new(inner: S, limit: usize) -> Self {
        Self { inner, limit }
    }
}

impl<S, B> Service<Request<B>> for ReplayBodyService<S>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let limit = if may_retry(&request) { self.limit } else { 0 };
        if request.body().is_end_stream() {
            // Nothing to keep, and every copy is whole: no handle either.
            return self.inner.call(request.map(ReplayBody::ended));
        }
        let mut request = request.map(|body| ReplayBody::new(body, limit));
        let handle = request.body().handle();
        request.extensions_mut().insert(handle);
        self.inner.call(request)
    }
}
