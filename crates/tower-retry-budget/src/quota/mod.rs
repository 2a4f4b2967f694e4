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
