//! The gRPC reading of a response head: Trailers-Only `grpc-status` and
//! `grpc-retry-pushback-ms`.

use std::fmt::Write as _;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{Extensions, HeaderMap, StatusCode};
use retry_budget::retry_after::{RetryAfter, MAX_KEPT_RAW};

use crate::peek::BodySignals;

use super::*;

/// The gRPC reading: Trailers-Only `grpc-status` (8, RESOURCE_EXHAUSTED, as
/// `429`) and `grpc-retry-pushback-ms` (gRFC A6), on top of
/// [`HttpSignal`]. See [`RetrySignal`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrpcSignal;

/// `grpc-status`.
pub const GRPC_STATUS: &str = "grpc-status";
/// `grpc-retry-pushback-ms` (gRFC A6).
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// `application/grpc`, `application/grpc+proto`, `application/grpc;...`
/// (gRPC over HTTP/2). Not `application/grpc-web*`: gRPC-Web sends its
/// trailers inside the body, where no trailers frame will come.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let prefix = b"application/grpc";
    value.len() >= prefix.len()
        && value[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(value.get(prefix.len()), None | Some(b'+' | b';'))
}

impl RetrySignal for GrpcSignal {
    fn read(&self, status: StatusCode, headers: &HeaderMap, extensions: &Extensions) -> Signal {
        if status != StatusCode::OK {
            return HttpSignal.read(status, headers, extensions);
        }
        let Some(code) = headers.get(GRPC_STATUS) else {
            return Signal::new(200, RetryAfter::Missing);
        };
        let code = parse_code(code.as_bytes());
        if code == Some(0) {
            return Signal::new(200, RetryAfter::Missing);
        }
        let (http_status, name) = code.map_or((500, "not a gRPC code"), http_equivalent);
        let mut from = String::new();
        let _ = write!(
            from,
            "grpc-status {} ({name})",
            kept(headers.get(GRPC_STATUS).map_or(&[][..], |v| v.as_bytes()))
        );
        let mut pushbacks = headers.get_all(GRPC_RETRY_PUSHBACK_MS).iter();
        let signal = match (pushbacks.next(), pushbacks.next()) {
            (None, _) => {
                from.push_str(", no grpc-retry-pushback-ms");
                Signal::new(http_status, RetryAfter::Missing)
            }
            (Some(value), None) => {
                let _ = write!(
                    from,
                    ", {GRPC_RETRY_PUSHBACK_MS} {}",
                    kept(value.as_bytes())
                );
                match parse_pushback(value.as_bytes()) {
                    Some(delay) => Signal::new(http_status, RetryAfter::Seconds(delay)),
                    None => Signal::new(http_status, RetryAfter::Missing).forbid_retry(),
                }
            }
            (Some(_), Some(_)) => {
                let _ = write!(from, ", repeated {GRPC_RETRY_PUSHBACK_MS}");
                Signal::new(http_status, RetryAfter::Missing).forbid_retry()
            }
        };
        // Set by the trailers peek on a head whose `grpc-status` it copied
        // from trailers that followed the initial metadata with no message;
        // without it, a `grpc-status` in the head is a Trailers-Only
        // response's. An extension, so that no server can claim it.
        if extensions
            .get::<BodySignals>()
            .is_some_and(BodySignals::status_from_trailers)
        {
            from.push_str(", in trailers after initial metadata");
        }
        signal.translated_from(from)
    }
}

/// A `grpc-status` value: `1*DIGIT`.
fn parse_code(raw: &[u8]) -> Option<u32> {
    if raw.is_empty() || raw.len() > 9 || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// A `grpc-retry-pushback-ms` value: a non-negative integer of
/// milliseconds, `1*DIGIT` and nothing else (gRFC A6: anything else, a
/// negative value included, means "do not retry"). A huge value saturates.
fn parse_pushback(raw: &[u8]) -> Option<Duration> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let millis = raw.iter().fold(0u64, |acc, digit| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    });
    Some(Duration::from_millis(millis))
}

/// The HTTP equivalent of a gRPC status code, and its name
/// (`google.rpc.Code`).
const fn http_equivalent(code: u32) -> (u16, &'static str) {
    match code {
        0 => (200, "OK"),
        1 => (499, "CANCELLED"),
        2 => (500, "UNKNOWN"),
        3 => (400, "INVALID_ARGUMENT"),
        4 => (504, "DEADLINE_EXCEEDED"),
        5 => (404, "NOT_FOUND"),
        6 => (409, "ALREADY_EXISTS"),
        7 => (403, "PERMISSION_DENIED"),
        8 => (429, "RESOURCE_EXHAUSTED"),
        9 => (400, "FAILED_PRECONDITION"),
        10 => (409, "ABORTED"),
        11 => (400, "OUT_OF_RANGE"),
        12 => (501, "UNIMPLEMENTED"),
        13 => (500, "INTERNAL"),
        14 => (503, "UNAVAILABLE"),
        15 => (500, "DATA_LOSS"),
        16 => (401, "UNAUTHENTICATED"),
        _ => (500, "unknown code"),
    }
}

/// A raw header value as kept in the trail: lossy UTF-8, at most
/// [`MAX_KEPT_RAW`] characters.
fn kept(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    if text.chars().count() <= MAX_KEPT_RAW {
        return text.into_owned();
    }
    let mut cut: String = text.chars().take(MAX_KEPT_RAW).collect();
    cut.push('…');
    cut
}
