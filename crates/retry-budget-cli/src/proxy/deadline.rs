//! The caller's deadline: `grpc-timeout` (gRPC over HTTP/2) or
//! `x-envoy-upstream-rq-timeout-ms` (Envoy and the meshes built on it).
//!
//! # Why
//!
//! A caller that will give up after 1 s gains nothing from a proxy that
//! keeps retrying for 20 s: the answer would belong to nobody. So the
//! caller's deadline shrinks the action's budget, through the core's own
//! validated builder (`Policy::within`): the rule (an attempt starts only if its
//! whole cap fits) stays the core's, it just has less room. Each attempt
//! sent then carries the time the core reserved *for it*
//! ([`AttemptDeadline`](tower_retry_budget::AttemptDeadline), which ends
//! inside the shrunk budget) in the header the caller used, so the upstream
//! (or the next proxy) knows it too.
//!
//! The parsing is hand-written: the `grpc-timeout` grammar is a few lines
//! (tonic's parser is private), and Envoy's header is a decimal integer.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use super::fields::Fields;
pub use super::fields::{ENVOY_TIMEOUT, GRPC_TIMEOUT};

/// What a caller allows, read from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The shortest time any of the caller's deadline headers allows.
    pub time: Duration,
    /// The caller sent a valid `grpc-timeout`.
    pub grpc: bool,
    /// The caller sent a valid `x-envoy-upstream-rq-timeout-ms`.
    pub envoy: bool,
}

/// Reads the caller's deadline headers (found in `fields`). A missing or unreadable header is
/// no deadline (it is forwarded as it came); Envoy's `0` means "no
/// timeout", as in Envoy.
pub fn read(fields: &Fields<'_>) -> Option<Allowed> {
    let grpc = fields.grpc_timeout.and_then(parse_grpc_timeout);
    let envoy = fields
        .envoy_timeout
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let time = match (grpc, envoy) {
        (None, None) => return None,
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
    };
    Some(Allowed {
        time,
        grpc: grpc.is_some(),
        envoy: envoy.is_some(),
    })
}

/// Request extension: the caller's deadline headers, for every attempt to
/// rewrite.
#[derive(Debug, Clone, Copy)]
pub struct CallerDeadline {
    /// What the caller allowed when the proxy received the request.
    pub allowed: Allowed,
}

impl CallerDeadline {
    /// Writes `left`, the time the core reserved for the attempt
    /// ([`AttemptDeadline`](tower_retry_budget::AttemptDeadline)), into the
    /// headers the caller used. The core only reserves time that ends
    /// inside the budget the caller's deadline shrank, so this is never
    /// more than the caller still allows.
    pub fn write(&self, headers: &mut HeaderMap, left: Duration) {
        if self.allowed.grpc {
            headers.insert(GRPC_TIMEOUT, format_grpc_timeout(left));
        }
        if self.allowed.envoy {
            // Never 0: Envoy reads 0 as "no timeout".
            let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
            headers.insert(ENVOY_TIMEOUT, HeaderValue::from(ms));
        }
    }
}

/// The units of `grpc-timeout`, finest first, with their length in
/// nanoseconds.
const UNITS: [(u8, u128); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60_000_000_000),
    (b'H', 3_600_000_000_000),
];

/// The most a `grpc-timeout` value may have: 8 digits.
const MAX_VALUE: u128 = 99_999_999;

/// `TimeoutValue TimeoutUnit` (gRPC over HTTP/2): at most 8 digits, then
/// one of `H M S m u n`.
fn parse_grpc_timeout(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    let (&unit, digits) = bytes.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let nanos_per = UNITS.iter().find(|(u, _)| *u == unit)?.1;
    let value: u128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    // In u128: 99999999 hours in nanoseconds (3.6e20) would overflow a u64.
    let nanos = value * nanos_per;
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    Some(Duration::new(secs, sub))
}

/// The finest unit whose value fits in 8 digits (rounded down: never more
/// time than is left).
fn format_grpc_timeout(left: Duration) -> HeaderValue {
    let nanos = left.as_nanos();
    for (unit, per) in UNITS {
        let value = nanos / per;
        if value <= MAX_VALUE {
            let text = format!("{value}{}", char::from(unit));
            return HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("99999999H"));
        }
    }
    HeaderValue::from_static("99999999H")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::read`] of the fields found in `headers`.
    fn read(headers: &HeaderMap) -> Option<Allowed> {
        super::read(&Fields::of(headers))
    }

    fn headers(fields: &[(&http::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.insert((*name).clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn grpc_timeout_grammar() {
        let parse = |v: &str| parse_grpc_timeout(&HeaderValue::from_str(v).unwrap());
        assert_eq!(parse("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("250u"), Some(Duration::from_micros(250)));
        assert_eq!(parse("7n"), Some(Duration::from_nanos(7)));
        assert_eq!(
            parse("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        for bad in [
            "",
            "S",
            "1",
            "1s",
            "-1S",
            "+1S",
            "1.5S",
            "123456789S",
            "1 S",
            "1SS",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting_keeps_eight_digits_and_rounds_down() {
        let f = |d: Duration| format_grpc_timeout(d).to_str().unwrap().to_owned();
        assert_eq!(f(Duration::from_millis(50)), "50000000n");
        assert_eq!(f(Duration::from_secs(1)), "1000000u");
        assert_eq!(f(Duration::from_millis(999_999)), "999999m");
        assert_eq!(f(Duration::from_secs(200_000)), "200000S");
        assert_eq!(f(Duration::from_nanos(1_999_999_999)), "1999999u");
        assert_eq!(f(Duration::MAX), "99999999H");
        assert_eq!(f(Duration::ZERO), "0n");
    }

    #[test]
    fn the_shortest_deadline_counts_and_bad_ones_are_none() {
        let both = headers(&[(&GRPC_TIMEOUT, "2S"), (&ENVOY_TIMEOUT, "1500")]);
        assert_eq!(
            read(&both),
            Some(Allowed {
                time: Duration::from_millis(1500),
                grpc: true,
                envoy: true
            })
        );
        assert_eq!(read(&headers(&[(&ENVOY_TIMEOUT, "0")])), None);
        assert_eq!(read(&headers(&[(&ENVOY_TIMEOUT, "-5")])), None);
        assert_eq!(
            read(&headers(&[(&ENVOY_TIMEOUT, "99999999999999999999999")])),
            None
        );
        assert_eq!(read(&headers(&[(&GRPC_TIMEOUT, "soon")])), None);
        assert_eq!(read(&HeaderMap::new()), None);
    }

    #[test]
    fn the_reservation_goes_into_the_headers_the_caller_used() {
        let deadline = |grpc, envoy| CallerDeadline {
            allowed: Allowed {
                time: Duration::from_secs(10),
                grpc,
                envoy,
            },
        };
        let mut headers = HeaderMap::new();
        deadline(true, true).write(&mut headers, Duration::from_millis(2500));
        assert_eq!(headers[&GRPC_TIMEOUT], "2500000u");
        assert_eq!(headers[&ENVOY_TIMEOUT], "2500");
        let mut headers = HeaderMap::new();
        deadline(false, true).write(&mut headers, Duration::ZERO);
        assert_eq!(headers.get(&GRPC_TIMEOUT), None);
        assert_eq!(headers[&ENVOY_TIMEOUT], "1", "never Envoy's 'no timeout'");
    }
}
