//! [`RetrySignal`]: what a response head tells the budget.

use std::time::SystemTime;

use http::header::RETRY_AFTER;
use http::{Extensions, HeaderMap, HeaderValue, StatusCode};
use retry_budget::{
    api_signals::{RetryAfterMs, ShouldRetry},
    reset::{ResetFormat, ResetHeaders},
    retry_after::RetryAfter,
    Answer,
};

use crate::peek::BodySignals;

mod grpc;
mod provider;
mod reset;

pub(crate) use grpc::is_grpc;
pub use grpc::{GrpcSignal, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS};
pub use provider::*;
pub use reset::*;

/// What one response tells the retry budget. Built by a [`RetrySignal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    status: u16,
    retry_after: RetryAfter,
    retry_forbidden: bool,
    reset_headers: Option<ResetHeaders>,
    quota: Option<&'static str>,
    /// What a response rarely says, apart (none: nothing of it).
    more: Option<Box<More>>,
}

/// The parts of a [`Signal`] a response rarely has (a translated status, a
/// provider's `retry-after-ms` or `x-should-retry`), kept apart so that
/// the usual signal is small and carries none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct More {
    translated_from: Option<String>,
    retry_after_ms: Option<RetryAfterMs>,
    should_retry: Option<ShouldRetry>,
}

impl Signal {
    /// A response with this HTTP status and `Retry-After`.
    pub const fn new(status: u16, retry_after: RetryAfter) -> Self {
        Self {
            status,
            retry_after,
            retry_forbidden: false,
            reset_headers: None,
            quota: None,
            more: None,
        }
    }

    /// The rare parts, made if need be.
    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    /// A header said the quota is used up (`code`, the service's name
    /// for it; see [`ResetSignal::quota_header`]).
    #[must_use]
    pub const fn with_quota(mut self, code: &'static str) -> Self {
        self.quota = Some(code);
        self
    }

    /// The used-up quota a header named, if any.
    pub const fn quota(&self) -> Option<&'static str> {
        self.quota
    }

    /// The `retry-after-ms` values found in the response, for the core to
    /// count with `Retry-After` (see [`ResetSignal::retry_after_ms`]).
    #[must_use]
    pub fn with_retry_after_ms(mut self, values: RetryAfterMs) -> Self {
        self.more().retry_after_ms = Some(values);
        self
    }

    /// The `retry-after-ms` values found, if any were looked for.
    pub fn retry_after_ms(&self) -> Option<&RetryAfterMs> {
        self.more.as_ref()?.retry_after_ms.as_ref()
    }

    /// The server's word on retrying (see [`ResetSignal::should_retry`]).
    #[must_use]
    pub fn with_should_retry(mut self, word: ShouldRetry) -> Self {
        self.more().should_retry = Some(word);
        self
    }

    /// The server's word on retrying, if it was looked for and sent.
    pub fn should_retry(&self) -> Option<&ShouldRetry> {
        self.more.as_ref()?.should_retry.as_ref()
    }

    /// The rate-limit reset headers found in the response, raw, for the
    /// core to read (see [`ResetSignal`]).
    #[must_use]
    pub fn with_reset_headers(mut self, headers: ResetHeaders) -> Self {
        self.reset_headers = Some(headers);
        self
    }

    /// The reset headers found, if any were looked for.
    pub const fn reset_headers(&self) -> Option<&ResetHeaders> {
        self.reset_headers.as_ref()
    }

    /// The server forbids retrying this response (the core stops a retried
    /// status as `not_retryable`).
    #[must_use]
    pub const fn forbid_retry(mut self) -> Self {
        self.retry_forbidden = true;
        self
    }

    /// The status and delay were translated from another protocol's
    /// signal; `from` (what the server actually sent) goes into the trail.
    #[must_use]
    pub fn translated_from(mut self, from: impl Into<String>) -> Self {
        self.more().translated_from = Some(from.into());
        self
    }

    /// The status told to the core.
    pub const fn status(&self) -> u16 {
        self.status
    }

    /// The server's delay told to the core.
    pub const fn retry_after(&self) -> &RetryAfter {
        &self.retry_after
    }

    /// Whether the server forbids a retry.
    pub const fn retry_forbidden(&self) -> bool {
        self.retry_forbidden
    }

    /// What the server actually sent, if the signal was translated.
    pub fn translation(&self) -> Option<&str> {
        self.more.as_ref()?.translated_from.as_deref()
    }

    /// The core's [`Answer`]: this reading, moved in (its `Retry-After`
    /// moved to `retry_after`, which the answer borrows), with the calendar
    /// read (`calendar`) only if a date needs it and, for a reader that
    /// looks (`body`: the response's extensions), what a layer below found
    /// in the body: **the one place a response becomes what the core is
    /// told**. Each part is moved once; what the response does not say is
    /// not set.
    #[inline(always)]
    pub(crate) fn answer<'a>(
        self,
        retry_after: &'a mut Option<RetryAfter>,
        calendar: impl FnOnce() -> Option<SystemTime>,
        body: Option<&Extensions>,
    ) -> Answer<'a> {
        let Self {
            status,
            retry_after: read,
            retry_forbidden,
            mut reset_headers,
            quota,
            more,
        } = self;
        // What a layer below found in the body (read of an error status).
        let found = (status >= 400)
            .then(|| body.and_then(Extensions::get::<BodySignals>))
            .flatten();
        body_resets(found, &mut reset_headers);
        let retry_after: &'a RetryAfter = retry_after.insert(read);
        let mut answer = Answer::new(status, retry_after);
        // The calendar clock is read only when the core needs it: a date,
        // or a reset header given as a calendar time.
        if retry_after.needs_calendar()
            || reset_headers
                .as_ref()
                .is_some_and(ResetHeaders::needs_calendar)
        {
            answer = answer.calendar(calendar());
        }
        if retry_forbidden {
            answer = answer.forbidden(true);
        }
        if let Some(resets) = reset_headers {
            answer = answer.resets(resets);
        }
        if let Some(more) = more {
            answer = more.told(answer);
        }
        // A layer below read the body: the service said its quota is used
        // up (only ever said of an error status; a success skips the look).
        if status >= 400 {
            if let Some(quota) = found.and_then(BodySignals::quota) {
                answer = answer.quota(quota);
            } else if let Some(code) = quota {
                answer = answer.quota(code);
            }
            if let Some(kind) = found.and_then(BodySignals::rate_limited) {
                answer = answer.rate_limited(kind);
            }
        }
        answer
    }
}

impl More {
    /// The answer with these parts told.
    fn told(self, mut answer: Answer<'_>) -> Answer<'_> {
        if let Some(from) = self.translated_from {
            answer = answer.translated_from(from);
        }
        if let Some(values) = self.retry_after_ms {
            answer = answer.retry_after_ms(values);
        }
        if let Some(word) = self.should_retry {
            answer = answer.should_retry(word);
        }
        answer
    }
}

/// What a layer below found in the body adds to the reset headers: the
/// limit it names as the one hit (its reset counts), and a delay (one more
/// reset value).
#[inline(always)]
fn body_resets(found: Option<&BodySignals>, resets: &mut Option<ResetHeaders>) {
    if let Some(limit) = found.and_then(BodySignals::limit) {
        if let Some(resets) = resets.as_mut() {
            resets.limit_named(limit);
        }
    }
    if let Some(delay) = found.and_then(BodySignals::retry_delay) {
        resets.get_or_insert_with(|| ResetHeaders::new(None)).push(
            BodySignals::RETRY_DELAY_NAME,
            ResetFormat::Duration,
            delay.as_bytes(),
        );
    }
}

/// Reads a response head into the [`Signal`] the retry budget is told.
/// Object-safe: a layer may hold one as `Arc<dyn RetrySignal + Send + Sync>`.
///
/// What the retry layer reads from a response head: a [`RetrySignal`] turns
/// the status line and headers into what the core
/// [`Action`](retry_budget::Action) is told (a status, a
/// [`RetryAfter`], and whether the server forbids a retry).
///
/// The rule stays in the core: a signal only *reads*. The default,
/// [`HttpSignal`], is the HTTP status and `Retry-After` as they are (a
/// zero-sized type, no allocation). [`GrpcSignal`] is the opt-in reading
/// for gRPC, and [`ResetSignal`] the opt-in reading of rate-limit reset
/// headers (IETF `RateLimit`, `RateLimit-Reset`, operator-named headers as
/// seconds or Unix time) on top of either, set with
/// [`RetryBudgetLayer::signal`](crate::RetryBudgetLayer::signal).
///
/// # gRPC (`GrpcSignal`)
///
/// A gRPC call answers HTTP `200` and puts its status in `grpc-status`,
/// normally in the trailers. When it fails before any message, the server
/// sends a *Trailers-Only* response: `grpc-status` (and the rest of the
/// trailers) in the response **headers**, where a retry layer can see them.
/// [`GrpcSignal`] reads those:
///
/// | the response head | told to the core |
/// |---|---|
/// | HTTP status other than 200 (an intermediary's `429`, a `503`) | that status and its `Retry-After`, as [`HttpSignal`] |
/// | `200` without `grpc-status` (a call that is answering; its status comes in the trailers) | `200` |
/// | `200`, `grpc-status: 0` (OK) | `200` |
/// | `200`, `grpc-status: 8` (RESOURCE_EXHAUSTED) | `429`, its HTTP equivalent |
/// | `200`, any other `grpc-status` | its HTTP equivalent (`google.rpc.Code`'s table: UNAVAILABLE `503`, UNAUTHENTICATED `401`, INTERNAL `500`, ...; an unknown code `500`) |
///
/// and, for any non-OK `grpc-status`, the server's pushback (gRFC A6,
/// "gRPC Retry Design"):
///
/// | `grpc-retry-pushback-ms` | told to the core |
/// |---|---|
/// | absent | no server delay ([`RetryAfter::Missing`]): the local fallback applies |
/// | `1*DIGIT` milliseconds | the server's delay: [`RetryAfter::Seconds`]`(Duration::from_millis(ms))` (huge values saturate); the core's 1 s floor still applies |
/// | negative, malformed, or repeated | the server forbids a retry ([`Answer::forbidden`](retry_budget::Answer::forbidden)): a retried status stops as `not_retryable` |
///
/// A translated response is recorded in the trail
/// ([`EventKind::Translated`](retry_budget::trail::EventKind::Translated), e.g.
/// `grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000`) just
/// before the response as told, so the report's `429` and its delay can be
/// traced to what the server actually sent.
///
/// Only the head is read. A `grpc-status` in trailers that follow the
/// initial metadata with no message is brought into the head by
/// [`PeekLayer::grpc`](crate::peek::PeekLayer::grpc), placed below the retry
/// layer (the trail then says `, in trailers after initial metadata`); a
/// `grpc-status` in trailers after messages arrives after the response has
/// been handed to the caller and is never retried (that layer corrects the
/// report in a [`ReportSlot`](crate::ReportSlot) instead). Which calls may be retried at all is not the signal's business:
/// gRPC calls are `POST`, so only calls marked [`Idempotent`](crate::Idempotent)
/// are budgeted (see the [crate docs](crate#grpc--tonic)).
///
/// ```
/// use std::time::Duration;
/// use http::{Extensions, HeaderMap, StatusCode};
/// use retry_budget::retry_after::RetryAfter;
/// use tower_retry_budget::response_signal::{GrpcSignal, RetrySignal};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("grpc-status", "8".parse().unwrap());
/// headers.insert("grpc-retry-pushback-ms", "1500".parse().unwrap());
/// let signal = GrpcSignal.read(StatusCode::OK, &headers, &Extensions::new());
/// assert_eq!(signal.status(), 429);
/// assert_eq!(signal.retry_after(), &RetryAfter::Seconds(Duration::from_millis(1500)));
/// assert!(!signal.retry_forbidden());
///
/// headers.insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
/// assert!(GrpcSignal.read(StatusCode::OK, &headers, &Extensions::new()).retry_forbidden());
/// ```
pub trait RetrySignal {
    /// What the response with this status, headers and extensions tells
    /// the budget. The extensions carry what a layer below the retry layer
    /// learned about the response (e.g. that
    /// [`PeekLayer::grpc`](crate::peek::PeekLayer::grpc) brought a
    /// `grpc-status` from the trailers into the head).
    fn read(&self, status: StatusCode, headers: &HeaderMap, extensions: &Extensions) -> Signal;
}

/// The default signal: the HTTP status and its `Retry-After`, nothing else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpSignal;

impl RetrySignal for HttpSignal {
    #[inline]
    fn read(&self, status: StatusCode, headers: &HeaderMap, _: &Extensions) -> Signal {
        Signal::new(status.as_u16(), retry_after(headers))
    }
}

/// `Retry-After` from the headers (every field, so that a repeated header
/// is seen as such).
fn retry_after(headers: &HeaderMap) -> RetryAfter {
    if !headers.contains_key(RETRY_AFTER) {
        // Most responses: no field to gather.
        return RetryAfter::Missing;
    }
    RetryAfter::from_values(
        headers
            .get_all(RETRY_AFTER)
            .iter()
            .map(HeaderValue::as_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use http::HeaderName;

    #[test]
    fn a_provider_table_reads_as_the_calls_it_stands_for() {
        let by_hand = ResetSignal::new()
            .retry_after_ms()
            .should_retry()
            .header(
                HeaderName::from_static(OPENAI_RESET_REQUESTS),
                ResetFormat::Duration,
            )
            .header(
                HeaderName::from_static(OPENAI_RESET_TOKENS),
                ResetFormat::Duration,
            )
            .remaining(
                HeaderName::from_static(OPENAI_RESET_REQUESTS),
                HeaderName::from_static("x-ratelimit-remaining-requests"),
            )
            .remaining(
                HeaderName::from_static(OPENAI_RESET_TOKENS),
                HeaderName::from_static("x-ratelimit-remaining-tokens"),
            );
        assert_eq!(ResetSignal::openai(), by_hand);
        let by_hand = ANTHROPIC_RESETS.iter().fold(
            ResetSignal::new().retry_after_ms().should_retry(),
            |signal, name| {
                let remaining = name.replace("-reset", "-remaining");
                signal
                    .header(HeaderName::from_static(name), ResetFormat::Rfc3339)
                    .remaining(
                        HeaderName::from_static(name),
                        HeaderName::from_bytes(remaining.as_bytes()).unwrap(),
                    )
            },
        );
        assert_eq!(ResetSignal::anthropic(), by_hand);
        assert_ne!(ResetSignal::openai(), ResetSignal::anthropic());
    }

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

    fn grpc(pairs: &[(&str, &str)]) -> Signal {
        GrpcSignal.read(StatusCode::OK, &head(pairs), &Extensions::new())
    }

    #[test]
    fn http_signal_is_status_and_retry_after() {
        let signal = HttpSignal.read(
            StatusCode::TOO_MANY_REQUESTS,
            &head(&[("retry-after", "3"), ("grpc-status", "8")]),
            &Extensions::new(),
        );
        assert_eq!(
            signal,
            Signal::new(429, RetryAfter::Seconds(Duration::from_secs(3)))
        );
        assert_eq!(signal.translation(), None);
    }

    #[test]
    fn resource_exhausted_with_a_valid_pushback_is_429_with_that_delay() {
        for (raw, millis) in [("1000", 1000), ("0", 0), ("250", 250), ("007", 7)] {
            let signal = grpc(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", raw)]);
            assert_eq!(signal.status(), 429, "{raw}");
            assert_eq!(
                signal.retry_after(),
                &RetryAfter::Seconds(Duration::from_millis(millis)),
                "{raw}"
            );
            assert!(!signal.retry_forbidden(), "{raw}");
            assert_eq!(
                signal.translation(),
                Some(
                    format!("grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms {raw}")
                        .as_str()
                )
            );
        }
    }

    #[test]
    fn a_huge_pushback_saturates_instead_of_overflowing() {
        let signal = grpc(&[
            ("grpc-status", "8"),
            ("grpc-retry-pushback-ms", "99999999999999999999999"),
        ]);
        assert_eq!(
            signal.retry_after(),
            &RetryAfter::Seconds(Duration::from_millis(u64::MAX))
        );
        assert!(!signal.retry_forbidden());
    }

    #[test]
    fn a_negative_or_malformed_pushback_forbids_the_retry() {
        for raw in ["-1", "-1000", "1.5", "+5", "5ms", "abc", "", " 5", "0x10"] {
            let signal = grpc(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", raw)]);
            assert_eq!(signal.status(), 429, "{raw:?}");
            assert!(signal.retry_forbidden(), "{raw:?}");
            assert_eq!(signal.retry_after(), &RetryAfter::Missing, "{raw:?}");
        }
        let repeated = grpc(&[
            ("grpc-status", "8"),
            ("grpc-retry-pushback-ms", "100"),
            ("grpc-retry-pushback-ms", "200"),
        ]);
        assert!(repeated.retry_forbidden());
        assert_eq!(
            repeated.translation(),
            Some("grpc-status 8 (RESOURCE_EXHAUSTED), repeated grpc-retry-pushback-ms")
        );
    }

    #[test]
    fn an_absent_pushback_leaves_the_local_fallback() {
        let signal = grpc(&[("grpc-status", "8")]);
        assert_eq!(signal.status(), 429);
        assert_eq!(signal.retry_after(), &RetryAfter::Missing);
        assert!(!signal.retry_forbidden());
        assert_eq!(
            signal.translation(),
            Some("grpc-status 8 (RESOURCE_EXHAUSTED), no grpc-retry-pushback-ms")
        );
    }

    #[test]
    fn other_grpc_statuses_are_their_http_equivalents_and_not_429() {
        for (code, status) in [
            ("1", 499),
            ("2", 500),
            ("3", 400),
            ("4", 504),
            ("5", 404),
            ("7", 403),
            ("12", 501),
            ("13", 500),
            ("14", 503),
            ("16", 401),
            ("17", 500),
            ("nope", 500),
        ] {
            let signal = grpc(&[("grpc-status", code), ("grpc-retry-pushback-ms", "1000")]);
            assert_eq!(signal.status(), status, "{code}");
            assert_ne!(signal.status(), 429, "{code}");
        }
        // OK, and a call still answering (status in the trailers): 200.
        assert_eq!(
            grpc(&[("grpc-status", "0")]),
            Signal::new(200, RetryAfter::Missing)
        );
        assert_eq!(
            grpc(&[("retry-after", "5")]),
            Signal::new(200, RetryAfter::Missing)
        );
    }

    #[test]
    fn an_intermediarys_http_status_is_read_as_http() {
        let signal = GrpcSignal.read(
            StatusCode::TOO_MANY_REQUESTS,
            &head(&[("retry-after", "2"), ("grpc-status", "14")]),
            &Extensions::new(),
        );
        assert_eq!(
            signal,
            Signal::new(429, RetryAfter::Seconds(Duration::from_secs(2)))
        );
    }

    #[test]
    fn long_raw_values_are_cut_in_the_translation() {
        let long = "9".repeat(200);
        let signal = grpc(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", &long)]);
        let from = signal.translation().unwrap();
        assert!(from.ends_with('…'), "{from}");
        assert!(from.len() < 200, "{from}");
    }
}
