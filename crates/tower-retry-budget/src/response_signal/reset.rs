//! [`ResetSignal`]: rate-limit reset headers and the providers' fields,
//! read on top of another signal.

use std::time::Duration;

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, StatusCode};
use retry_budget::{
    api_signals::{RetryAfterMs, ShouldRetry, RETRY_AFTER_MS, X_SHOULD_RETRY},
    reset::{ResetFormat, ResetHeaders},
};

use super::*;

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
