//! What a response head says about where its gRPC status will be, and the
//! Trailers-Only form of a head whose status came in trailers.

use http::{Extensions, HeaderMap, HeaderName, StatusCode};

use super::BodySignals;
use crate::response_signal::{is_grpc, GrpcSignal, RetrySignal, GRPC_STATUS};

// Parsed once: a lookup by `&str` parses the name every time.
const STATUS: HeaderName = HeaderName::from_static(GRPC_STATUS);

/// Whether this head is a gRPC answer whose status is still to come: HTTP
/// `200`, a gRPC content type, no `grpc-status` (a Trailers-Only head has
/// one), and a body that is not already over.
pub(super) fn awaits_status(status: StatusCode, headers: &HeaderMap, body_ended: bool) -> bool {
    if status != StatusCode::OK || !is_grpc(headers) {
        return false;
    }
    !body_ended && !headers.contains_key(&STATUS)
}

/// A non-OK status in `trailers` that came with no message: the head
/// becomes the Trailers-Only head the server could have sent (the initial
/// metadata, then every trailer field), marked (a [`BodySignals`]
/// extension) so that the trail says where the status came from. An OK
/// status (or none) changes nothing.
pub(super) fn to_trailers_only(
    headers: &mut HeaderMap,
    extensions: &mut Extensions,
    trailers: &HeaderMap,
) {
    if !trailers.contains_key(&STATUS)
        || GrpcSignal
            .read(StatusCode::OK, trailers, &Extensions::new())
            .status()
            == StatusCode::OK.as_u16()
    {
        return;
    }
    for (name, value) in trailers {
        headers.append(name, value.clone());
    }
    BodySignals::from_trailers(extensions);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn only_a_grpc_200_without_status_and_with_a_body_awaits_its_status() {
        for content_type in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;x=1",
        ] {
            let h = head(&[("content-type", content_type)]);
            assert!(awaits_status(StatusCode::OK, &h, false), "{content_type}");
            assert!(!awaits_status(StatusCode::OK, &h, true), "{content_type}");
        }
        for content_type in [
            "application/json",
            "application/grpc-web",
            "application/grpcx",
            "application/grp",
        ] {
            let h = head(&[("content-type", content_type)]);
            assert!(!awaits_status(StatusCode::OK, &h, false), "{content_type}");
        }
        assert!(!awaits_status(StatusCode::OK, &HeaderMap::new(), false));
        let trailers_only = head(&[("content-type", "application/grpc"), ("grpc-status", "8")]);
        assert!(!awaits_status(StatusCode::OK, &trailers_only, false));
        let intermediary = head(&[("content-type", "application/grpc")]);
        assert!(!awaits_status(
            StatusCode::TOO_MANY_REQUESTS,
            &intermediary,
            false
        ));
    }

    #[test]
    fn no_header_a_server_sends_can_claim_a_status_from_trailers() {
        let h = head(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "8"),
            ("retry-budget-grpc-status-from", "trailers"),
        ]);
        let signal = GrpcSignal.read(StatusCode::OK, &h, &Extensions::new());
        assert_eq!(
            signal.translation(),
            Some("grpc-status 8 (RESOURCE_EXHAUSTED), no grpc-retry-pushback-ms")
        );
    }

    #[test]
    fn a_non_ok_status_in_trailers_makes_the_trailers_only_head() {
        let mut h = head(&[("content-type", "application/grpc"), ("x", "y")]);
        let trailers = head(&[
            ("grpc-status", "8"),
            ("grpc-message", "slow down"),
            ("grpc-retry-pushback-ms", "1000"),
            ("x", "z"),
        ]);
        let mut extensions = Extensions::new();
        to_trailers_only(&mut h, &mut extensions, &trailers);
        assert_eq!(h["grpc-status"], "8");
        assert_eq!(h["grpc-message"], "slow down");
        assert_eq!(h["grpc-retry-pushback-ms"], "1000");
        assert_eq!(h.get_all("x").iter().collect::<Vec<_>>(), ["y", "z"]);
        assert!(extensions
            .get::<BodySignals>()
            .is_some_and(BodySignals::status_from_trailers));

        let signal = GrpcSignal.read(StatusCode::OK, &h, &extensions);
        assert_eq!(signal.status(), 429);
        assert_eq!(
            signal.translation(),
            Some("grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000, in trailers after initial metadata")
        );
    }

    #[test]
    fn an_ok_or_absent_status_in_trailers_changes_nothing() {
        for trailers in [
            head(&[("grpc-status", "0")]),
            head(&[("x", "z")]),
            HeaderMap::new(),
        ] {
            let mut h = head(&[("content-type", "application/grpc")]);
            let before = h.clone();
            let mut extensions = Extensions::new();
            to_trailers_only(&mut h, &mut extensions, &trailers);
            assert_eq!(h, before);
            assert!(extensions.is_empty());
        }
    }
}
