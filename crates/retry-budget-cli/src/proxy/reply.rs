//! What the caller is told: the two headers on every response
//! (`retry-budget-attempts`, `retry-budget-outcome`), and the proxy's own
//! short text responses (a refusal, a deadline already spent, an action
//! that ended without a response, a broken caller body, an invalid
//! upstream status).

use std::sync::LazyLock;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};
use retry_budget::{Outcome, PolicyError, Report};
use tower_retry_budget::{Error, ErrorKind};

use super::relay_body::RelayBody;

/// `retry-budget-attempts`: on every response, the attempts sent.
pub const ATTEMPTS: HeaderName = HeaderName::from_static("retry-budget-attempts");
/// `retry-budget-outcome`: on every response, how the action ended.
pub const OUTCOME: HeaderName = HeaderName::from_static("retry-budget-outcome");
/// `retry-after-ms`: a `held_off` or `paced` answer's wait, in milliseconds.
pub const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

/// The proxy's own outcome when the caller's request body broke.
pub const BAD_REQUEST_BODY: &str = "bad_request_body";
/// The proxy's own outcome when the upstream's status is outside 100-599.
pub const INVALID_STATUS: &str = "invalid_upstream_status";

/// The body of a response to the caller: the upstream's, streamed, or the
/// proxy's own short text.
pub type ProxyBody = Either<RelayBody, Full<Bytes>>;

/// A short text response of the proxy's own.
pub fn local(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text.to_owned()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // Nothing sent, unless the caller says otherwise with `tell`.
    response
        .headers_mut()
        .insert(ATTEMPTS, HeaderValue::from_static("0"));
    response
}

/// Adds `retry-budget-attempts` and `retry-budget-outcome`.
pub fn tell<B>(response: &mut Response<B>, outcome: Outcome, attempts: u32) {
    tell_value(response, outcome_value(outcome), attempts);
}

/// [`tell`] with the proxy's own outcome name.
pub fn tell_str<B>(response: &mut Response<B>, outcome: &'static str, attempts: u32) {
    tell_value(response, HeaderValue::from_static(outcome), attempts);
}

fn tell_value<B>(response: &mut Response<B>, outcome: HeaderValue, attempts: u32) {
    let headers = response.headers_mut();
    headers.insert(ATTEMPTS, count(attempts));
    headers.insert(OUTCOME, outcome);
}

/// The `retry-budget-outcome` value of each of the core's outcomes, in the
/// order of [`Outcome::ALL`], made once: a value made from a name at run
/// time checks each of its bytes.
static OUTCOME_VALUES: LazyLock<[HeaderValue; Outcome::ALL.len()]> =
    LazyLock::new(|| Outcome::ALL.map(|outcome| HeaderValue::from_static(outcome.as_str())));

/// `outcome`'s name as a header value.
fn outcome_value(outcome: Outcome) -> HeaderValue {
    Outcome::ALL
        .iter()
        .position(|known| *known == outcome)
        .and_then(|index| OUTCOME_VALUES.get(index))
        .map_or_else(
            || HeaderValue::from_static(outcome.as_str()),
            HeaderValue::clone,
        )
}

/// The header values of the counts an action has, checked once.
static DIGITS: [HeaderValue; 10] = [
    HeaderValue::from_static("0"),
    HeaderValue::from_static("1"),
    HeaderValue::from_static("2"),
    HeaderValue::from_static("3"),
    HeaderValue::from_static("4"),
    HeaderValue::from_static("5"),
    HeaderValue::from_static("6"),
    HeaderValue::from_static("7"),
    HeaderValue::from_static("8"),
    HeaderValue::from_static("9"),
];

/// A count as a header value: a static one for the counts an action has
/// (no allocation per response), written out above nine.
pub fn count(n: u32) -> HeaderValue {
    usize::try_from(n)
        .ok()
        .and_then(|i| DIGITS.get(i))
        .map_or_else(|| HeaderValue::from(n), HeaderValue::clone)
}

/// A text response with the proxy's own `outcome`, after `report`'s
/// attempts (none without a report).
pub fn own_outcome(
    status: StatusCode,
    text: &str,
    outcome: &'static str,
    report: Option<&Report>,
) -> Response<ProxyBody> {
    let mut response = local(status, text);
    tell_str(
        &mut response,
        outcome,
        report.map_or(0, |r| r.attempts_started),
    );
    response
}

/// The caller's deadline leaves no time (the core's `zero`, a zero budget):
/// the budget is exhausted before the first attempt, nothing is sent.
pub fn deadline_spent(zero: &PolicyError) -> Response<ProxyBody> {
    let mut response = local(
        StatusCode::GATEWAY_TIMEOUT,
        &format!(
            "retry-budget proxy: the caller's deadline leaves no time ({zero}): nothing was sent\n"
        ),
    );
    tell(&mut response, Outcome::BudgetExhausted, 0);
    response
}

/// The proxy's answer when the action ended without a response.
pub fn failed<E: std::fmt::Display>(error: &Error<E>) -> Response<ProxyBody> {
    let report = error.report();
    let outcome = error.outcome();
    let status = match error.kind() {
        ErrorKind::Inner(_) => StatusCode::BAD_GATEWAY,
        ErrorKind::AttemptTimeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::NotSent if matches!(outcome, Outcome::HeldOff | Outcome::Paced) => {
            StatusCode::TOO_MANY_REQUESTS
        }
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let text = match (error.kind(), report) {
        (ErrorKind::Inner(inner), Some(report)) => format!("{report}\nUpstream error: {inner}\n"),
        (_, Some(report)) => format!("{report}\n"),
        (_, None) => format!("{error}\n"),
    };
    let mut response = local(status, &text);
    tell(
        &mut response,
        outcome,
        report.map_or(0, |r| r.attempts_started),
    );
    if let Some((secs, millis)) = report.and_then(held_off_for) {
        response.headers_mut().insert(RETRY_AFTER, secs);
        response.headers_mut().insert(RETRY_AFTER_MS, millis);
    }
    response
}

/// For a `held_off` or `paced` action: how long the upstream's hold-off
/// or announced quota still keeps a first attempt back (the core's
/// [`Report::held_off_left`], [`Report::paced_left`]), as a `Retry-After`
/// in whole seconds and a `retry-after-ms` in whole milliseconds, each
/// rounded up.
fn held_off_for(report: &Report) -> Option<(HeaderValue, HeaderValue)> {
    let left = report.held_off_left().or_else(|| report.paced_left())?;
    let secs = left
        .as_secs()
        .saturating_add(u64::from(left.subsec_nanos() > 0));
    let millis = u64::try_from(left.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(u64::from(left.subsec_nanos() % 1_000_000 > 0));
    Some((HeaderValue::from(secs), HeaderValue::from(millis)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_reads_as_its_digits_static_or_written_out() {
        for n in [0, 1, 3, 9, 10, 42, 1000, u32::MAX] {
            assert_eq!(count(n), HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn each_outcome_is_told_by_its_name() {
        for outcome in Outcome::ALL {
            let mut response = Response::new(());
            tell(&mut response, outcome, 2);
            assert_eq!(response.headers()[OUTCOME], outcome.as_str(), "{outcome:?}");
            assert_eq!(response.headers()[ATTEMPTS], "2");
        }
    }
}
