//! Requests the proxy answers itself, forwarding nothing: a method it does
//! not relay, a request no route takes, a target that cannot be sent
//! upstream, a request no valid policy can be made for.

use http::request::Parts;
use http::{Method, Response, StatusCode};
use retry_budget::PolicyError;

use super::classify::Refused;
use super::reply::{deadline_spent, local, ProxyBody};
use super::table::Miss;
use super::upstream::TargetError;
use crate::common::redact::logged_uri;

/// The answer to a request the proxy never forwards, whatever its target:
/// `CONNECT`, and `OPTIONS *`.
pub fn method(parts: &Parts) -> Option<Response<ProxyBody>> {
    if parts.method == Method::CONNECT {
        return Some(local(
            StatusCode::METHOD_NOT_ALLOWED,
            "retry-budget proxy: CONNECT is not supported\n",
        ));
    }
    if parts.method == Method::OPTIONS && parts.uri.path() == "*" {
        // About the server as a whole: behind a path prefix the upstream's
        // answer would not be about what the caller reaches, so the proxy
        // answers for itself and forwards nothing.
        return Some(local(
            StatusCode::OK,
            "retry-budget proxy: OPTIONS * is answered by the proxy, not forwarded\n",
        ));
    }
    None
}

/// The answer to a request no route takes: 404 (no prefix matches its
/// path) or 421 (no route names its host); nothing is sent.
pub fn route(parts: &Parts, miss: Miss) -> Response<ProxyBody> {
    tracing::debug!(
        target: "retry_budget::proxy",
        "refused {} {}: no route ({miss:?})",
        parts.method,
        logged_uri(&parts.uri),
    );
    match miss {
        Miss::NoPrefix => local(
            StatusCode::NOT_FOUND,
            "retry-budget proxy: no route takes this path (no match.prefix matches it): nothing was sent\n",
        ),
        Miss::UnknownHost => local(
            StatusCode::MISDIRECTED_REQUEST,
            "retry-budget proxy: no route serves this host (no match.host names it): nothing was sent\n",
        ),
    }
}

/// The answer to a target that cannot be sent upstream (400).
pub fn target(parts: &Parts, error: &TargetError) -> Response<ProxyBody> {
    tracing::debug!(
        target: "retry_budget::proxy",
        "refused {} {}: {error}",
        parts.method,
        logged_uri(&parts.uri),
    );
    local(
        StatusCode::BAD_REQUEST,
        &format!("retry-budget proxy: the request target cannot be sent upstream: {error}\n"),
    )
}

/// The answer to a request that has no policy.
pub fn policy(parts: &Parts, refused: &Refused) -> Response<ProxyBody> {
    match refused {
        Refused::DeadlineSpent(zero) => deadline_spent(zero),
        Refused::Invalid(error) => no_valid_policy(parts, error),
    }
}

/// Not the caller's doing: the configured policy could not be narrowed
/// for this request (500).
fn no_valid_policy(parts: &Parts, error: &PolicyError) -> Response<ProxyBody> {
    tracing::error!(
        target: "retry_budget::proxy",
        "internal error: no valid policy for {} {}: {error}",
        parts.method,
        logged_uri(&parts.uri),
    );
    local(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("retry-budget proxy: internal error: no valid policy for this request ({error}): nothing was sent\n"),
    )
}
