//! The request while the layer holds it. The layer takes an
//! `http::Request` (its method, URI and extensions are what it reads) and
//! copies it for each attempt; reqwest's own request travels inside it as
//! its body, whole (URL, headers, version, reqwest's extensions, the
//! per-request timeout among them), so that an attempt is reqwest's request
//! again with no conversion: only the URL is parsed once, into the URI.

use http::Extensions;
use reqwest::Body;
use tokio_util::sync::CancellationToken;
use tower_retry_budget::body_replay::ReplayBody;
use tower_retry_budget::observer::ActionId;
use tower_retry_budget::{Idempotent, ReportSlot};

/// reqwest's request under the budget. `Clone` is what the layer needs to
/// send a copy per attempt. reqwest's request is boxed: the layer moves its
/// `http::Request` several times per action, and a pointer moves for less
/// than the box costs (`BENCHMARKS.md`).
pub(crate) enum Carried {
    /// A request whose body (if any) reqwest holds in memory: every copy
    /// is `reqwest::Request::try_clone`, the whole request.
    Reusable(Box<reqwest::Request>),
    /// A request with a streaming body. The body is kept by none of its
    /// copies (a replay limit of zero): the first attempt sends it, and the
    /// handle in the `http::Request` tells the layer that no copy can
    /// follow, so a 429 to it ends the action as `not_replayable`.
    Streaming {
        /// The request without its body.
        head: Box<reqwest::Request>,
        body: ReplayBody<Body>,
    },
    /// A copy reqwest refused: sending it fails ([`NotCopied`]) rather
    /// than send a request cut short. reqwest refuses to copy only a
    /// request with a streaming body, which is never `Reusable`: the layer
    /// never sends one.
    Refused,
}

/// The error of an attempt whose request reqwest refused to copy.
#[derive(Debug, thiserror::Error)]
#[error("reqwest could not copy the request for another attempt")]
pub struct NotCopied;

/// The URI of `request`'s URL, if `http` can take it (reqwest refuses
/// the others too, with its own error).
pub(crate) fn uri_of(request: &reqwest::Request) -> Option<http::Uri> {
    http::Uri::try_from(request.url().as_str()).ok()
}

/// `request` (whose URL is `uri`) as the layer takes it, with what the
/// caller put for the layer in the middleware extensions.
pub(crate) fn into_http(
    mut request: reqwest::Request,
    uri: http::Uri,
    extensions: &Extensions,
) -> http::Request<Carried> {
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = request.method().clone();
    parts.uri = uri;
    parts.version = request.version();
    let streaming = request.body().is_some_and(|body| body.as_bytes().is_none());
    let carried = match request.body_mut().take() {
        Some(body) if streaming => {
            let body = ReplayBody::new(body, 0);
            parts.extensions.insert(body.handle());
            Carried::Streaming {
                head: Box::new(request),
                body,
            }
        }
        body => {
            *request.body_mut() = body;
            Carried::Reusable(Box::new(request))
        }
    };
    if !extensions.is_empty() {
        copy::<ReportSlot>(extensions, &mut parts.extensions);
        copy::<CancellationToken>(extensions, &mut parts.extensions);
        copy::<Idempotent>(extensions, &mut parts.extensions);
        copy::<ActionId>(extensions, &mut parts.extensions);
    }
    http::Request::from_parts(parts, carried)
}

fn copy<T: Clone + Send + Sync + 'static>(from: &Extensions, to: &mut Extensions) {
    if let Some(value) = from.get::<T>() {
        to.insert(value.clone());
    }
}

/// The attempt's request: reqwest's, whole again.
pub(crate) fn into_reqwest(request: http::Request<Carried>) -> Result<reqwest::Request, NotCopied> {
    match request.into_body() {
        Carried::Reusable(request) => Ok(*request),
        Carried::Streaming { mut head, body } => {
            *head.body_mut() = Some(Body::wrap(body));
            Ok(*head)
        }
        Carried::Refused => Err(NotCopied),
    }
}

impl Clone for Carried {
    fn clone(&self) -> Self {
        match self {
            Self::Reusable(request) => request
                .try_clone()
                .map_or(Self::Refused, |copy| Self::Reusable(Box::new(copy))),
            Self::Streaming { head, body } => match head.try_clone() {
                Some(head) => Self::Streaming {
                    head: Box::new(head),
                    body: body.clone(),
                },
                None => Self::Refused,
            },
            Self::Refused => Self::Refused,
        }
    }
}
