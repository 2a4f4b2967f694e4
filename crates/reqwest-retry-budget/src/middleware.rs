//! [`RetryBudgetMiddleware`]: the layer's own service and future, run
//! over the rest of a `reqwest-middleware` chain.

use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use http::Extensions;
use reqwest_middleware::{Middleware, Next};
use tower::{Layer, Service};
use tower_retry_budget::pace::Pacing;
use tower_retry_budget::{may_retry, AttemptDeadline, Policy, RetryBudgetLayer};

use crate::error::Error;
use crate::request::{into_http, into_reqwest, uri_of, Carried};

/// A [`reqwest_middleware::Middleware`] that retries `429 Too Many
/// Requests` inside a hard budget. See the [crate docs](crate).
///
/// It runs [`RetryBudgetLayer`]'s own service and response future over
/// the rest of the middleware chain (the middlewares after it, then the
/// client): the rule, the waits, the report and every option of the layer
/// are the layer's. Build it with [`new`](Self::new) for the defaults, or
/// from a configured layer with [`from_layer`](Self::from_layer) (or
/// `From`).
///
/// ```
/// use reqwest_retry_budget::RetryBudgetMiddleware;
/// use tower_retry_budget::{Policy, ReportMode, RetryBudgetLayer};
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryBudgetMiddleware::from_layer(
///         RetryBudgetLayer::new(Policy::default())
///             .jitter_seed(7)
///             .report_mode(ReportMode::WhenRetried),
///     ))
///     .build();
/// # let _ = client;
/// ```
///
/// # What reaches the layer from the request
///
/// The request's middleware extensions (`RequestBuilder::with_extension`)
/// are where a caller puts what the layer reads: a
/// [`ReportSlot`](crate::ReportSlot), a
/// [`CancellationToken`](tokio_util::sync::CancellationToken),
/// [`Idempotent`](crate::Idempotent) for a write that may be repeated, an
/// [`ActionId`](tower_retry_budget::observer::ActionId) for the observer. The middlewares after this one get
/// the same extensions on every attempt, with an [`AttemptDeadline`] when
/// the layer was asked for one.
#[derive(Debug, Clone, Default)]
pub struct RetryBudgetMiddleware {
    layer: RetryBudgetLayer,
}

impl RetryBudgetMiddleware {
    /// A middleware with this policy and the layer's defaults
    /// (`RetryBudgetLayer::new(policy)`).
    pub fn new(policy: Policy) -> Self {
        Self::from_layer(RetryBudgetLayer::new(policy))
    }

    /// A middleware that runs `layer`, with all its configuration: signal,
    /// calendar, jitter seed, client budget, hold-off, observer, report
    /// mode, attempt deadlines. Clones of the layer share its client-wide
    /// state (budget, hold-off map, observer) with this middleware.
    pub fn from_layer(layer: RetryBudgetLayer) -> Self {
        Self { layer }
    }

    /// Paces first attempts by the quota the services announce on their
    /// responses (off by default): the layer's
    /// [`pace`](RetryBudgetLayer::pace).
    #[must_use]
    pub fn pace(self, pacing: Pacing) -> Self {
        Self::from_layer(self.layer.pace(pacing))
    }

    /// The layer this middleware runs.
    pub fn layer(&self) -> &RetryBudgetLayer {
        &self.layer
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        self.layer.policy()
    }
}

impl From<RetryBudgetLayer> for RetryBudgetMiddleware {
    fn from(layer: RetryBudgetLayer) -> Self {
        Self::from_layer(layer)
    }
}

#[async_trait::async_trait]
impl Middleware for RetryBudgetMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        if !budgeted(&request, extensions) {
            // A write not marked `Idempotent`: passed on untouched, as the
            // layer passes it (no copy, no timer, no report).
            return next.run(request, extensions).await;
        }
        let Some(uri) = uri_of(&request) else {
            // A URL `http` cannot take: reqwest refuses it too, and says so.
            return next.run(request, extensions).await;
        };
        let request = into_http(request, uri, extensions);
        let shelf = Shelf::new(extensions);
        let mut service = self.layer.layer(NextService {
            next,
            extensions: &shelf.lent,
        });
        // Always ready: the rest of the chain has no readiness of its own
        // (the layer's `poll_ready` is the inner service's).
        let ready = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
        let result = match ready {
            Ok(()) => service.call(request).await,
            Err(error) => Err(error),
        };
        match result {
            Ok(response) => Ok(restore(response)),
            Err(error) => Err(reqwest_middleware::Error::middleware(Error::new(error))),
        }
    }
}

/// Whether the layer budgets this request: its own rule
/// ([`may_retry`]), read from the method and the middleware extensions.
fn budgeted(request: &reqwest::Request, extensions: &mut Extensions) -> bool {
    if request.method().is_safe() {
        return true;
    }
    // The extensions are moved in and back: nothing is copied.
    let mut probe = http::Request::new(());
    *probe.method_mut() = request.method().clone();
    *probe.extensions_mut() = std::mem::take(extensions);
    let budgeted = may_retry(&probe);
    *extensions = std::mem::take(probe.extensions_mut());
    budgeted
}

/// The caller's middleware extensions, lent to one attempt at a time and
/// given back to the caller when the action ends, however it ends (the
/// future dropped included).
struct Shelf<'a> {
    caller: &'a mut Extensions,
    lent: Mutex<Extensions>,
}

impl<'a> Shelf<'a> {
    fn new(caller: &'a mut Extensions) -> Self {
        let lent = Mutex::new(std::mem::take(caller));
        Self { caller, lent }
    }
}

impl Drop for Shelf<'_> {
    fn drop(&mut self) {
        *self.caller = std::mem::take(self.lent.get_mut().unwrap_or_else(PoisonError::into_inner));
    }
}

/// One attempt's hold on the extensions: taken from the shelf when the
/// attempt is sent, put back when it ends or is dropped.
struct Lent<'a> {
    shelf: &'a Mutex<Extensions>,
    extensions: Extensions,
}

impl<'a> Lent<'a> {
    fn new(shelf: &'a Mutex<Extensions>) -> Self {
        let extensions = std::mem::take(&mut *shelf.lock().unwrap_or_else(PoisonError::into_inner));
        Self { shelf, extensions }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        *self.shelf.lock().unwrap_or_else(PoisonError::into_inner) =
            std::mem::take(&mut self.extensions);
    }
}

/// One attempt's future (`reqwest_middleware` boxes its own too).
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The rest of the middleware chain as the service the layer wraps: each
/// attempt is one run of it.
#[derive(Clone)]
struct NextService<'a> {
    next: Next<'a>,
    extensions: &'a Mutex<Extensions>,
}

/// A response as the layer reads it: the head (status, headers,
/// extensions, moved out of reqwest's response, not copied) and, as the
/// body, reqwest's response itself, keeping its body, URL and address.
pub(crate) struct Received(reqwest::Response);

impl<'a> Service<http::Request<Carried>> for NextService<'a> {
    type Response = http::Response<Received>;
    type Error = reqwest_middleware::Error;
    type Future = BoxFuture<'a, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Carried>) -> Self::Future {
        let deadline = request.extensions().get::<AttemptDeadline>().copied();
        // Converted here, not in the future: the boxed future holds only
        // reqwest's request, not the layer's around it.
        let request = into_reqwest(request);
        let next = self.next.clone();
        let shelf = self.extensions;
        Box::pin(async move {
            let request = request.map_err(reqwest_middleware::Error::middleware)?;
            let mut lent = Lent::new(shelf);
            if let Some(deadline) = deadline {
                lent.extensions.insert(deadline);
            }
            let response = next.run(request, &mut lent.extensions).await?;
            Ok(received(response))
        })
    }
}

/// reqwest's response with its head moved into an `http::Response`.
fn received(mut response: reqwest::Response) -> http::Response<Received> {
    let mut head = http::Response::new(());
    *head.status_mut() = response.status();
    *head.version_mut() = response.version();
    *head.headers_mut() = std::mem::take(response.headers_mut());
    *head.extensions_mut() = std::mem::take(response.extensions_mut());
    head.map(|()| Received(response))
}

/// reqwest's response with its head back, the layer's report among its
/// extensions.
fn restore(response: http::Response<Received>) -> reqwest::Response {
    let (parts, Received(mut response)) = response.into_parts();
    *response.headers_mut() = parts.headers;
    *response.extensions_mut() = parts.extensions;
    response
}
