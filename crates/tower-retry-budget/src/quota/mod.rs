//! [`QuotaLayer`]: a `429` whose JSON body says the quota is used up, told
//! to the retry layer so that it is not retried.

#[cfg(feature = "quota")]
mod body;
#[cfg(feature = "quota")]
mod future;
#[cfg(feature = "quota")]
mod layer;

#[cfg(feature = "quota")]
pub use body::QuotaBody;
#[cfg(feature = "quota")]
pub use future::QuotaFuture;
#[cfg(feature = "quota")]
pub use layer::{Quota, QuotaLayer, DEFAULT_QUOTA_MAX_BODY, DEFAULT_QUOTA_READ_TIMEOUT};

/// Response extension: the service said, in this response, that the
/// account's quota is used up (OpenAI's `insufficient_quota`).
///
/// Put in a response by a layer below the retry layer (`QuotaLayer`, with
/// the `quota` feature, reads it from the JSON body); the retry layer tells
/// the core ([`Answer::quota`](retry_budget::Answer::quota)), which ends a
/// status it retries as `not_retryable`, category `quota`. Any layer that
/// learns it another way may set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExhausted {
    code: Box<str>,
}

impl QuotaExhausted {
    /// The service's code for it (`insufficient_quota`).
    pub fn new(code: impl Into<Box<str>>) -> Self {
        Self { code: code.into() }
    }

    /// The service's code.
    pub fn code(&self) -> &str {
        &self.code
    }
}

/// Response extension: the body named the server's delay (Gemini's
/// `google.rpc.RetryInfo` `retryDelay`, a protobuf Duration in JSON:
/// `"53s"`, `"1.5s"`), raw. Put by `QuotaLayer` (feature `quota`); the
/// retry layer tells the core as one more reset value, read as a Go-style
/// duration (the longest valid delay counts, a malformed one is recorded
/// and ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRetryDelay {
    raw: Box<str>,
}

impl BodyRetryDelay {
    /// The name the trail gives the value.
    pub const NAME: &'static str = "retryDelay (body)";

    /// The raw `retryDelay`.
    pub fn new(raw: impl Into<Box<str>>) -> Self {
        Self { raw: raw.into() }
    }

    /// The raw `retryDelay`.
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

/// Response extension: the body says this error is a transient rate limit
/// of the service's own kind (OpenRouter's `402`
/// `in_flight_budget_exhausted`). Put by `QuotaLayer` (feature `quota`);
/// the retry layer tells the core
/// ([`Answer::rate_limited`](retry_budget::Answer::rate_limited)), which
/// decides whether it is retried as a `429`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    kind: Box<str>,
}

impl RateLimited {
    /// The service's name for the kind.
    pub fn new(kind: impl Into<Box<str>>) -> Self {
        Self { kind: kind.into() }
    }

    /// The service's name for the kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }
}
