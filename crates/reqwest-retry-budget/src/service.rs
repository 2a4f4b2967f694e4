//! [`ReqwestService`]: `reqwest::Client` as a service of `http` requests,
//! for a tower stack.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::Service;

/// `reqwest::Client` as a `Service<http::Request<B>>` answering
/// `http::Response<reqwest::Body>`, so that the layer (and the rest of a
/// tower stack: a gate, single flight, a hold-off) goes above it with one
/// [`ServiceBuilder`](tower::ServiceBuilder) line:
///
/// ```
/// use reqwest_retry_budget::ReqwestService;
/// use tower::ServiceBuilder;
/// use tower_retry_budget::{Policy, RetryBudgetLayer};
///
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(ReqwestService::new(reqwest::Client::new()));
/// # fn is_service<S: tower::Service<http::Request<String>>>(_: &S) {}
/// # is_service(&client);
/// ```
///
/// The request is converted with reqwest's own `TryFrom` (its extensions
/// kept) and the response with its `From` (status, headers, extensions and
/// body; reqwest's final URL is not part of an `http::Response`). The layer
/// copies the request for each attempt, so its body type must be `Clone`:
/// `String`, `Vec<u8>`, `bytes::Bytes`, or a stream behind
/// [`ReplayBodyLayer`](tower_retry_budget::body_replay::ReplayBodyLayer) mapped to
/// `reqwest::Body::wrap`.
#[derive(Debug, Clone, Default)]
pub struct ReqwestService {
    client: reqwest::Client,
}

impl ReqwestService {
    /// The service over `client`.
    pub fn new(client: reqwest::Client) -> Self {
        Self { client }
    }

    /// The client.
    pub fn get_ref(&self) -> &reqwest::Client {
        &self.client
    }

    /// Unwraps the client.
    pub fn into_inner(self) -> reqwest::Client {
        self.client
    }
}

impl From<reqwest::Client> for ReqwestService {
    fn from(client: reqwest::Client) -> Self {
        Self::new(client)
    }
}

type Pending = <reqwest::Client as Service<reqwest::Request>>::Future;

pin_project! {
    /// The response future of [`ReqwestService`].
    pub struct ResponseFuture {
        #[pin]
        state: State,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        Sent { #[pin] pending: Pending },
        Invalid { error: Option<reqwest::Error> },
    }
}

impl<B> Service<http::Request<B>> for ReqwestService
where
    B: Into<reqwest::Body>,
{
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<reqwest::Request>::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let state = match reqwest::Request::try_from(request) {
            Ok(request) => State::Sent {
                pending: self.client.call(request),
            },
            Err(error) => State::Invalid { error: Some(error) },
        };
        ResponseFuture { state }
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<reqwest::Body>, reqwest::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Sent { pending } => pending.poll(cx).map_ok(http::Response::from),
            StateProj::Invalid { error } => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => panic!("ResponseFuture polled after completion"),
            },
        }
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
