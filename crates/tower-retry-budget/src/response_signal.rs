//! [`RetrySignal`]: what a response head tells the budget.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, StatusCode};
use retry_budget::{
    api_signals::{RetryAfterMs, ShouldRetry, RETRY_AFTER_MS, X_SHOULD_RETRY},
    reset::{ResetFormat, ResetHeaders},
    retry_after::{RetryAfter, MAX_KEPT_RAW},
    Answer,
};

use crate::peek::BodySignals;

/// What one response tells the retry budget. Built by a [`RetrySignal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    status: u16,
    retry_after: RetryAfter,
    retry_forbidden: bool,
    translated_from: Option<String>,
    reset_headers: Option<ResetHeaders>,
    retry_after_ms: Option<RetryAfterMs>,
    should_retry: Option<ShouldRetry>,
    quota: Option<&'static str>,
}

impl Signal {
    /// A response with this HTTP status and `Retry-After`.
    pub const fn new(status: u16, retry_after: RetryAfter) -> Self {
        Self {
            status,
            retry_after,
            retry_forbidden: false,
            translated_from: None,
            reset_headers: None,
            retry_after_ms: None,
            should_retry: None,
            quota: None,
        }
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
        self.retry_after_ms = Some(values);
        self
    }

    /// The `retry-after-ms` values found, if any were looked for.
    pub const fn retry_after_ms(&self) -> Option<&RetryAfterMs> {
        self.retry_after_ms.as_ref()
    }

    /// The server's word on retrying (see [`ResetSignal::should_retry`]).
    #[must_use]
    pub fn with_should_retry(mut self, word: ShouldRetry) -> Self {
        self.should_retry = Some(word);
        self
    }

    /// The server's word on retrying, if it was looked for and sent.
    pub const fn should_retry(&self) -> Option<&ShouldRetry> {
        self.should_retry.as_ref()
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
        self.translated_from = Some(from.into());
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
        self.translated_from.as_deref()
    }

    /// The core's [`Answer`]: this reading, moved in (its `Retry-After`
    /// lent), with the calendar read (`calendar`) only if a date needs it
    /// and, for a reader that looks (`body`: the response's extensions),
    /// what a layer below found in the body: **the one place a response
    /// becomes what the core is told**.
    pub(crate) fn answer(
        &mut self,
        calendar: impl FnOnce() -> Option<SystemTime>,
        body: Option<&Extensions>,
    ) -> Answer<'_> {
        // What a layer below found in the body (only ever read of an error
        // status; a success skips the look).
        let found = (self.status >= 400)
            .then(|| body.and_then(Extensions::get::<BodySignals>))
            .flatten();
        // The limit the body names as the one hit: its reset counts.
        if let Some(limit) = found.and_then(BodySignals::limit) {
            if let Some(resets) = self.reset_headers.as_mut() {
                resets.limit_named(limit);
            }
        }
        // A delay found in the body: one more reset value.
        if let Some(delay) = found.and_then(BodySignals::retry_delay) {
            self.reset_headers
                .get_or_insert_with(|| ResetHeaders::new(None))
                .push(
                    BodySignals::RETRY_DELAY_NAME,
                    ResetFormat::Duration,
                    delay.as_bytes(),
                );
        }
        // The calendar clock is read only when the core needs it: a date,
        // or a reset header given as a calendar time.
        let needs_calendar = self.retry_after.needs_calendar()
            || self
                .reset_headers
                .as_ref()
                .is_some_and(ResetHeaders::needs_calendar);
        let mut answer = Answer::new(self.status, &self.retry_after)
            .calendar(if needs_calendar { calendar() } else { None })
            .forbidden(self.retry_forbidden);
        if let Some(resets) = self.reset_headers.take() {
            answer = answer.resets(resets);
        }
        if let Some(from) = self.translated_from.take() {
            answer = answer.translated_from(from);
        }
        if let Some(values) = self.retry_after_ms.take() {
            answer = answer.retry_after_ms(values);
        }
        if let Some(word) = self.should_retry.take() {
            answer = answer.should_retry(word);
        }
        // A layer below read the body: the service said its quota is used
        // up (only ever said of an error status; a success skips the look).
        if self.status >= 400 {
            if let Some(quota) = found.and_then(BodySignals::quota) {
                answer = answer.quota(quota);
            } else if let Some(code) = self.quota {
                answer = answer.quota(code);
            }
            if let Some(kind) = found.and_then(BodySignals::rate_limited) {
                answer = answer.rate_limited(kind);
            }
        }
        answer
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

/// Reads rate-limit reset headers on top of another signal (opt-in):
/// the IETF draft fields and operator-named headers, raw, for the core to
/// turn into a wait (see [`ResetHeaders`] for the rule: used when
/// `Retry-After` is missing or invalid, the longer wait when both are
/// present, malformed values ignored and recorded, an optional maximum
/// interval). Set it with
/// [`RetryBudgetLayer::signal`](crate::RetryBudgetLayer::signal); it wraps
/// [`HttpSignal`] by default, or [`GrpcSignal`].
///
/// It also reads, when asked, what some APIs send besides `Retry-After`:
/// `retry-after-ms` ([`retry_after_ms`](Self::retry_after_ms)) and
/// `x-should-retry` ([`should_retry`](Self::should_retry));
/// [`ResetSignal::openai`] and [`ResetSignal::anthropic`] read everything
/// those two APIs send.
///
/// Only an error status (4xx, 5xx) is looked at, and the core reads the
/// values only for a status its policy retries.
///
/// ```
/// use std::time::Duration;
/// use http::{Extensions, HeaderMap, StatusCode};
/// use retry_budget::reset::ResetFormat;
/// use tower_retry_budget::response_signal::{GrpcSignal, ResetSignal, RetrySignal};
///
/// let signal = ResetSignal::new()
///     .ratelimit_fields()
///     .header(http::HeaderName::from_static("x-ratelimit-reset"), ResetFormat::Unix)
///     .max_interval(Duration::from_secs(300));
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", r#""p";r=0;t=3"#.parse().unwrap());
/// let read = signal.read(StatusCode::TOO_MANY_REQUESTS, &headers, &Extensions::new());
/// assert!(!read.reset_headers().unwrap().is_empty());
///
/// // Composed with the gRPC reading.
/// let _grpc = ResetSignal::wrapping(GrpcSignal).ratelimit_fields();
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetSignal<S = HttpSignal> {
    inner: S,
    ratelimit_fields: bool,
    headers: Vec<(HeaderName, ResetFormat)>,
    max_interval: Option<Duration>,
    retry_after_ms: bool,
    should_retry: bool,
    remaining: Vec<(HeaderName, HeaderName)>,
    ms_headers: Vec<HeaderName>,
    quota_header: Option<(HeaderName, Vec<&'static str>)>,
}

/// The IETF draft's `RateLimit` field.
pub const RATELIMIT: &str = "ratelimit";
/// The IETF draft's `RateLimit-Reset` field (delta seconds).
pub const RATELIMIT_RESET: &str = "ratelimit-reset";

/// OpenAI's reset header for its requests-per-minute limit (a Go duration).
pub const OPENAI_RESET_REQUESTS: &str = "x-ratelimit-reset-requests";
/// OpenAI's reset header for its tokens-per-minute limit (a Go duration).
pub const OPENAI_RESET_TOKENS: &str = "x-ratelimit-reset-tokens";
/// Anthropic's reset headers, one per limit (RFC 3339 times).
pub const ANTHROPIC_RESETS: [&str; 4] = [
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
];

/// What a provider sends besides `Retry-After`, described as data that
/// [`ResetSignal::with_provider`] interprets: a new provider is one more
/// such table (its signals in a body are read by `PeekLayer`, feature
/// `quota`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provider {
    /// The provider's name (`openai`).
    pub name: &'static str,
    /// It sends `retry-after-ms` ([`ResetSignal::retry_after_ms`]).
    pub retry_after_ms: bool,
    /// It sends `x-should-retry` ([`ResetSignal::should_retry`]).
    pub should_retry: bool,
    /// Its reset headers, each with its format, in the order read
    /// ([`ResetSignal::header`]).
    pub resets: &'static [(&'static str, ResetFormat)],
    /// For a reset header, the header saying how much of that limit
    /// remains ([`ResetSignal::remaining`]): the reset counts only when
    /// the limit is spent.
    pub remaining: &'static [(&'static str, &'static str)],
    /// Other headers read as `retry-after-ms` (Azure's
    /// `x-ms-retry-after-ms`; [`ResetSignal::ms_header`]).
    pub ms_headers: &'static [&'static str],
    /// A header naming the error's type, and the types that mean a quota
    /// used up (Bedrock's `x-amzn-ErrorType: ServiceQuotaExceededException`;
    /// [`ResetSignal::quota_header`]).
    pub quota_header: Option<(&'static str, &'static [&'static str])>,
    /// What its JSON error body says, read by `PeekLayer::for_provider`
    /// (feature `quota`) below the retry layer.
    pub body: ProviderBody,
}

/// What a provider's JSON error body says, as data (read by
/// `PeekLayer::for_provider`, feature `quota`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderBody {
    /// The statuses whose body is read.
    pub statuses: &'static [u16],
    /// `error.code` / `error.type` values meaning a quota used up
    /// (OpenAI's `insufficient_quota`).
    pub quota_codes: &'static [&'static str],
    /// Parts of a `google.rpc.QuotaFailure` `quotaId` meaning a quota
    /// used up (Gemini's `PerDay`).
    pub quota_ids: &'static [&'static str],
    /// `google.rpc.RetryInfo` `retryDelay` is the server's delay.
    pub retry_info: bool,
    /// `error.metadata.error_type` values meaning a transient rate limit
    /// (OpenRouter's `in_flight_budget_exhausted`, on a `402`).
    pub rate_limited: &'static [&'static str],
    /// Text in the body's `message` (top level or in `error`) meaning a
    /// quota used up, for an API that sends no code (Cohere's trial key:
    /// `API calls / month`).
    pub quota_messages: &'static [&'static str],
    /// Text in the body's `message` naming the limit hit, and that limit's
    /// reset header (OpenAI's and Groq's `on tokens per`:
    /// `x-ratelimit-reset-tokens`): that reset counts whatever the
    /// limit's `remaining` says; the others keep the spent-limit rule
    /// ([`ResetHeaders::limit_named`]).
    pub limit_names: &'static [(&'static str, &'static str)],
}

impl ProviderBody {
    /// Nothing read from the body.
    pub const NONE: Self = Self {
        statuses: &[429],
        quota_codes: &[],
        quota_ids: &[],
        retry_info: false,
        rate_limited: &[],
        quota_messages: &[],
        limit_names: &[],
    };

    /// Whether anything is read from the body.
    pub const fn reads_any(&self) -> bool {
        !self.quota_codes.is_empty()
            || !self.quota_ids.is_empty()
            || self.retry_info
            || !self.rate_limited.is_empty()
            || !self.quota_messages.is_empty()
            || !self.limit_names.is_empty()
    }
}

/// OpenAI's (and Groq's) `remaining` headers, one per reset header.
const OPENAI_REMAINING: &[(&str, &str)] = &[
    (OPENAI_RESET_REQUESTS, "x-ratelimit-remaining-requests"),
    (OPENAI_RESET_TOKENS, "x-ratelimit-remaining-tokens"),
];

/// The limits OpenAI's (and Groq's) rate-limit message names (`Rate limit
/// reached for MODEL in organization ORG on tokens per min (TPM)`, `on
/// requests per day (RPD)`), each with its reset header.
const OPENAI_LIMIT_NAMES: &[(&str, &str)] = &[
    ("on tokens per", OPENAI_RESET_TOKENS),
    ("on requests per", OPENAI_RESET_REQUESTS),
];

/// OpenAI's API: see [`ResetSignal::openai`].
pub const OPENAI: Provider = Provider {
    name: "openai",
    retry_after_ms: true,
    should_retry: true,
    resets: &[
        (OPENAI_RESET_REQUESTS, ResetFormat::Duration),
        (OPENAI_RESET_TOKENS, ResetFormat::Duration),
    ],
    remaining: OPENAI_REMAINING,
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody {
        quota_codes: &["insufficient_quota"],
        limit_names: OPENAI_LIMIT_NAMES,
        ..ProviderBody::NONE
    },
};

/// Anthropic's API: see [`ResetSignal::anthropic`].
pub const ANTHROPIC: Provider = Provider {
    name: "anthropic",
    retry_after_ms: true,
    should_retry: true,
    resets: &[
        (ANTHROPIC_RESETS[0], ResetFormat::Rfc3339),
        (ANTHROPIC_RESETS[1], ResetFormat::Rfc3339),
        (ANTHROPIC_RESETS[2], ResetFormat::Rfc3339),
        (ANTHROPIC_RESETS[3], ResetFormat::Rfc3339),
    ],
    remaining: &[
        (
            ANTHROPIC_RESETS[0],
            "anthropic-ratelimit-requests-remaining",
        ),
        (ANTHROPIC_RESETS[1], "anthropic-ratelimit-tokens-remaining"),
        (
            ANTHROPIC_RESETS[2],
            "anthropic-ratelimit-input-tokens-remaining",
        ),
        (
            ANTHROPIC_RESETS[3],
            "anthropic-ratelimit-output-tokens-remaining",
        ),
    ],
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody::NONE,
};

/// Azure OpenAI: `retry-after`, `retry-after-ms` and `x-ms-retry-after-ms`,
/// the longest valid counting (an invalid value such as `-1` is recorded
/// and ignored).
pub const AZURE: Provider = Provider {
    name: "azure",
    retry_after_ms: true,
    should_retry: false,
    resets: &[],
    remaining: &[],
    ms_headers: &["x-ms-retry-after-ms"],
    quota_header: None,
    body: ProviderBody::NONE,
};

/// Groq: as OpenAI's (a Stainless API: `retry-after-ms`, `x-should-retry`,
/// `x-ratelimit-reset-requests|tokens` as Go durations). Its requests
/// limit is per day and its tokens limit per minute: a reset counts only
/// for the limit whose `x-ratelimit-remaining-*` is spent.
pub const GROQ: Provider = Provider {
    name: "groq",
    ..OPENAI
};

/// Cohere: `retry-after-ms`, `Retry-After`, `X-RateLimit-Reset` (a Unix
/// time), the longest valid counting; a `429` whose `message` says a
/// trial key's monthly calls (`API calls / month`) are spent is a quota
/// used up (Cohere sends no code for it).
pub const COHERE: Provider = Provider {
    name: "cohere",
    retry_after_ms: true,
    should_retry: false,
    resets: &[("x-ratelimit-reset", ResetFormat::Unix)],
    remaining: &[],
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody {
        quota_messages: &["API calls / month"],
        ..ProviderBody::NONE
    },
};

/// Mistral: `ratelimitbysize-reset` (delta seconds), counting only when
/// `x-ratelimitbysize-remaining-minute` is spent (or not sent).
pub const MISTRAL: Provider = Provider {
    name: "mistral",
    retry_after_ms: true,
    should_retry: false,
    resets: &[("ratelimitbysize-reset", ResetFormat::Seconds)],
    remaining: &[(
        "ratelimitbysize-reset",
        "x-ratelimitbysize-remaining-minute",
    )],
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody::NONE,
};

/// Amazon Bedrock: a throttle (`429`, `x-amzn-ErrorType:
/// ThrottlingException`, no `Retry-After`) waits the local fallback;
/// `ServiceQuotaExceededException` is a used-up quota (category `quota`).
pub const BEDROCK: Provider = Provider {
    name: "bedrock",
    retry_after_ms: false,
    should_retry: false,
    resets: &[],
    remaining: &[],
    ms_headers: &[],
    quota_header: Some(("x-amzn-errortype", &["ServiceQuotaExceededException"])),
    body: ProviderBody::NONE,
};

/// The Gemini API and Vertex AI: no header besides `Retry-After`; the
/// `RESOURCE_EXHAUSTED` body's `google.rpc.RetryInfo` `retryDelay` is the
/// server's delay, and a `google.rpc.QuotaFailure` violation whose
/// `quotaId` names a per-day quota (`PerDay`) is a quota used up.
pub const GEMINI: Provider = Provider {
    name: "gemini",
    retry_after_ms: false,
    should_retry: false,
    resets: &[],
    remaining: &[],
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody {
        quota_ids: &["PerDay"],
        retry_info: true,
        ..ProviderBody::NONE
    },
};

/// OpenRouter: `Retry-After`; a `402` whose `error.metadata.error_type` is
/// `in_flight_budget_exhausted`, with a delay, is retried as a `429`
/// (any other `402` is not).
pub const OPENROUTER: Provider = Provider {
    name: "openrouter",
    retry_after_ms: false,
    should_retry: false,
    resets: &[],
    remaining: &[],
    ms_headers: &[],
    quota_header: None,
    body: ProviderBody {
        statuses: &[429, 402],
        rate_limited: &["in_flight_budget_exhausted"],
        ..ProviderBody::NONE
    },
};

/// Every provider table, by name.
pub const PROVIDERS: [&Provider; 9] = [
    &OPENAI,
    &ANTHROPIC,
    &GEMINI,
    &AZURE,
    &GROQ,
    &MISTRAL,
    &COHERE,
    &OPENROUTER,
    &BEDROCK,
];

impl Provider {
    /// The table named `name` (`openai`, `azure`...), if there is one.
    pub fn named(name: &str) -> Option<&'static Self> {
        PROVIDERS.into_iter().find(|p| p.name == name)
    }

    /// The table for an upstream host (`api.openai.com`,
    /// `*.openai.azure.com`, `bedrock-runtime.*.amazonaws.com`...): what
    /// `--preset auto` chooses; an unknown host gets none.
    pub fn for_host(host: &str) -> Option<&'static Self> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let provider = match host.as_str() {
            "api.openai.com" => &OPENAI,
            "api.anthropic.com" => &ANTHROPIC,
            "api.groq.com" => &GROQ,
            "api.mistral.ai" => &MISTRAL,
            "api.cohere.com" | "api.cohere.ai" => &COHERE,
            "openrouter.ai" => &OPENROUTER,
            "generativelanguage.googleapis.com" | "aiplatform.googleapis.com" => &GEMINI,
            h if h.ends_with("-aiplatform.googleapis.com") => &GEMINI,
            h if h.ends_with(".openai.azure.com") => &AZURE,
            h if h.starts_with("bedrock-runtime.") && h.ends_with(".amazonaws.com") => &BEDROCK,
            _ => return None,
        };
        Some(provider)
    }
}

impl ResetSignal {
    /// Reads nothing more than [`HttpSignal`] until told which headers.
    pub fn new() -> Self {
        Self::wrapping(HttpSignal)
    }

    /// What OpenAI's API sends on a `429`, read as its SDKs read it:
    ///
    /// | header | read as |
    /// |---|---|
    /// | `retry-after` | as always: delay-seconds or an HTTP-date |
    /// | `retry-after-ms` | milliseconds, counted with `retry-after` (the longest counts) |
    /// | `x-should-retry` | `false` forbids the retry |
    /// | `x-ratelimit-reset-requests` | a Go duration (`1s`, `6m0s`) until the requests limit resets |
    /// | `x-ratelimit-reset-tokens` | a Go duration until the tokens limit resets |
    ///
    /// A reset header counts when no valid delay is given, or when it asks
    /// longer (the rule of [`ResetHeaders`]). OpenAI's other signal, a
    /// `429` whose JSON body says `insufficient_quota`, is in the body:
    /// `PeekLayer::openai` (feature `quota`) reads it.
    ///
    /// ```
    /// use http::{Extensions, HeaderMap, StatusCode};
    /// use tower_retry_budget::response_signal::{ResetSignal, RetrySignal};
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("retry-after-ms", "2500".parse().unwrap());
    /// headers.insert("x-ratelimit-reset-tokens", "6m0s".parse().unwrap());
    /// let read = ResetSignal::openai().read(StatusCode::TOO_MANY_REQUESTS, &headers, &Extensions::new());
    /// assert!(read.retry_after_ms().is_some());
    /// assert!(!read.reset_headers().unwrap().is_empty());
    /// ```
    pub fn openai() -> Self {
        Self::new().with_openai()
    }

    /// What Anthropic's API sends on a `429`, read as its SDKs read it:
    ///
    /// | header | read as |
    /// |---|---|
    /// | `retry-after` | as always: delay-seconds or an HTTP-date |
    /// | `retry-after-ms` | milliseconds, counted with `retry-after` (the longest counts) |
    /// | `x-should-retry` | `false` forbids the retry |
    /// | `anthropic-ratelimit-requests-reset` | an RFC 3339 time when the requests limit resets |
    /// | `anthropic-ratelimit-tokens-reset` | the same, for the tokens limit |
    /// | `anthropic-ratelimit-input-tokens-reset` | the same, for input tokens |
    /// | `anthropic-ratelimit-output-tokens-reset` | the same, for output tokens |
    ///
    /// An RFC 3339 time needs the trusted calendar clock (without one it
    /// is ignored, and the trail says why). Anthropic reports a used-up
    /// credit balance with its own status (not `429`), which is not
    /// retried: no body needs reading.
    pub fn anthropic() -> Self {
        Self::new().with_anthropic()
    }

    /// What Azure OpenAI sends: see [`AZURE`].
    pub fn azure() -> Self {
        Self::new().with_provider(&AZURE)
    }

    /// What Groq sends: see [`GROQ`].
    pub fn groq() -> Self {
        Self::new().with_provider(&GROQ)
    }

    /// What Cohere sends: see [`COHERE`].
    pub fn cohere() -> Self {
        Self::new().with_provider(&COHERE)
    }

    /// What Mistral sends: see [`MISTRAL`].
    pub fn mistral() -> Self {
        Self::new().with_provider(&MISTRAL)
    }

    /// What Amazon Bedrock sends: see [`BEDROCK`].
    pub fn bedrock() -> Self {
        Self::new().with_provider(&BEDROCK)
    }

    /// What the Gemini API sends in its headers (nothing besides
    /// `Retry-After`): see [`GEMINI`]; its body is read by
    /// `PeekLayer::gemini`.
    pub fn gemini() -> Self {
        Self::new().with_provider(&GEMINI)
    }

    /// What OpenRouter sends in its headers (`Retry-After`): see
    /// [`OPENROUTER`]; its body is read by `PeekLayer::openrouter`.
    pub fn openrouter() -> Self {
        Self::new().with_provider(&OPENROUTER)
    }
}

impl<S> ResetSignal<S> {
    /// Reads reset headers on top of `inner` (e.g. [`GrpcSignal`]).
    pub fn wrapping(inner: S) -> Self {
        Self {
            inner,
            ratelimit_fields: false,
            headers: Vec::new(),
            max_interval: None,
            retry_after_ms: false,
            should_retry: false,
            remaining: Vec::new(),
            ms_headers: Vec::new(),
            quota_header: None,
        }
    }

    /// Reads `remaining` as how much is left of the limit whose reset
    /// header is `reset`: that reset counts only when the limit is spent
    /// (`0`; `-1`, malformed or absent are not known to have room). See
    /// [`ResetHeaders::push_limit`]. Repeatable.
    #[must_use]
    pub fn remaining(mut self, reset: HeaderName, remaining: HeaderName) -> Self {
        self.remaining.push((reset, remaining));
        self
    }

    /// Reads `name` as one more `retry-after-ms` (Azure's
    /// `x-ms-retry-after-ms`): counted with `Retry-After`, the longest
    /// valid wait counting. Repeatable.
    #[must_use]
    pub fn ms_header(mut self, name: HeaderName) -> Self {
        self.ms_headers.push(name);
        self
    }

    /// Reads `name` as the error's type: a value (before any `:`) among
    /// `quota` is a used-up quota, told to the core as
    /// [`Answer::quota`](retry_budget::Answer::quota).
    #[must_use]
    pub fn quota_header(mut self, name: HeaderName, quota: &[&'static str]) -> Self {
        self.quota_header = Some((name, quota.to_vec()));
        self
    }

    /// Reads `retry-after-ms` (milliseconds, fractions allowed), which the
    /// core counts with `Retry-After` as one repeated field: the longest
    /// valid wait counts, an invalid value is recorded and ignored (see
    /// [`RetryAfterMs`]).
    #[must_use]
    pub fn retry_after_ms(mut self) -> Self {
        self.retry_after_ms = true;
        self
    }

    /// Reads `x-should-retry`: `false` forbids the retry of a status the
    /// policy retries (it ends `not_retryable`, the trail naming the
    /// header); `true` changes nothing (see [`ShouldRetry`]).
    #[must_use]
    pub fn should_retry(mut self) -> Self {
        self.should_retry = true;
        self
    }

    /// Reads the IETF draft fields: `RateLimit` (`t=` or `reset=`) and
    /// `RateLimit-Reset` (delta seconds).
    #[must_use]
    pub fn ratelimit_fields(mut self) -> Self {
        self.ratelimit_fields = true;
        self
    }

    /// Reads `name` as `format` (`X-RateLimit-Reset` as
    /// [`ResetFormat::Unix`], say). Repeatable.
    #[must_use]
    pub fn header(mut self, name: HeaderName, format: ResetFormat) -> Self {
        self.headers.push((name, format));
        self
    }

    /// Ignores (and records) a reset wait longer than `max`.
    #[must_use]
    pub fn max_interval(mut self, max: Duration) -> Self {
        self.max_interval = Some(max);
        self
    }

    /// Reads what `provider` sends, on top of `inner` and of anything
    /// already asked for: the one reader of a [`Provider`] table.
    #[must_use]
    pub fn with_provider(mut self, provider: &Provider) -> Self {
        if provider.retry_after_ms {
            self = self.retry_after_ms();
        }
        if provider.should_retry {
            self = self.should_retry();
        }
        for &(reset, remaining) in provider.remaining {
            self = self.remaining(
                HeaderName::from_static(reset),
                HeaderName::from_static(remaining),
            );
        }
        for &name in provider.ms_headers {
            self = self.ms_header(HeaderName::from_static(name));
        }
        if let Some((name, quota)) = provider.quota_header {
            self = self.quota_header(HeaderName::from_static(name), quota);
        }
        provider
            .resets
            .iter()
            .fold(self, |signal, &(name, format)| {
                signal.header(HeaderName::from_static(name), format)
            })
    }

    /// Reads what [`ResetSignal::openai`] reads, on top of `inner` and of
    /// anything already asked for ([`OPENAI`]).
    #[must_use]
    pub fn with_openai(self) -> Self {
        self.with_provider(&OPENAI)
    }

    /// Reads what [`ResetSignal::anthropic`] reads, on top of `inner` and
    /// of anything already asked for ([`ANTHROPIC`]).
    #[must_use]
    pub fn with_anthropic(self) -> Self {
        self.with_provider(&ANTHROPIC)
    }

    /// Whether any header is read besides the inner signal's.
    pub fn reads_any(&self) -> bool {
        self.ratelimit_fields
            || !self.headers.is_empty()
            || self.retry_after_ms
            || self.should_retry
            || !self.ms_headers.is_empty()
            || self.quota_header.is_some()
    }
}

impl<S: RetrySignal> RetrySignal for ResetSignal<S> {
    fn read(&self, status: StatusCode, headers: &HeaderMap, extensions: &Extensions) -> Signal {
        let mut signal = self.inner.read(status, headers, extensions);
        if signal.status() < 400 || !self.reads_any() {
            return signal;
        }
        let ms_names = self
            .retry_after_ms
            .then_some(RETRY_AFTER_MS)
            .into_iter()
            .chain(self.ms_headers.iter().map(HeaderName::as_str));
        if ms_names.clone().any(|name| headers.contains_key(name)) {
            let values = ms_names.flat_map(|name| headers.get_all(name).iter());
            signal = signal
                .with_retry_after_ms(RetryAfterMs::from_values(values.map(HeaderValue::as_bytes)));
        }
        if let Some((name, quota)) = &self.quota_header {
            let said = headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(':').next().unwrap_or("").trim());
            if let Some(code) = said.and_then(|said| quota.iter().find(|q| **q == said)) {
                signal = signal.with_quota(code);
            }
        }
        if self.should_retry {
            let values = headers.get_all(X_SHOULD_RETRY).iter();
            if let Some(word) =
                ShouldRetry::from_values(X_SHOULD_RETRY, values.map(HeaderValue::as_bytes))
            {
                signal = signal.with_should_retry(word);
            }
        }
        let mut found = ResetHeaders::new(self.max_interval);
        let remaining = &self.remaining;
        let mut take = |name: &str, format: ResetFormat| {
            let left = remaining
                .iter()
                .find(|(reset, _)| reset.as_str() == name)
                .and_then(|(_, left)| headers.get(left))
                .map(HeaderValue::as_bytes);
            for value in headers.get_all(name) {
                found.push_limit(name, format, value.as_bytes(), left);
            }
        };
        if self.ratelimit_fields {
            take(RATELIMIT, ResetFormat::RateLimit);
            take(RATELIMIT_RESET, ResetFormat::Seconds);
        }
        for (name, format) in &self.headers {
            take(name.as_str(), *format);
        }
        if found.is_empty() {
            return signal;
        }
        signal.with_reset_headers(found)
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

#[cfg(test)]
mod tests {
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
