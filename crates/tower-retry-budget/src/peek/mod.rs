//! [`PeekLayer`]: the one layer that reads the start of a response's body
//! for the retry layer above it (a gRPC status in trailers, what a JSON
//! error body says), and [`BodySignals`], the one response extension that
//! tells it what was found.
//!
//! | file | job |
//! |---|---|
//! | `layer.rs` | [`PeekLayer`]: what is read (gRPC trailers, JSON body rules), its bounds |
//! | `service.rs` | [`Peek`]: which calls are peeked at (those the retry layer budgets) |
//! | `future.rs` | [`PeekFuture`]: the head, then the first frame (gRPC) or the body up to its bound (JSON) |
//! | `body.rs` | [`PeekBody`]: what the peek took put back in front, byte for byte |
//! | `late.rs` | a gRPC status in trailers after data: the report in the caller's slot corrected |
//! | `grpc.rs` | where a gRPC head's status will be, and its Trailers-Only form |
//! | `json.rs` | what a JSON error body says, by the configured rules (feature `quota`) |

mod body;
mod future;
mod grpc;
mod json;
mod late;
mod layer;
mod service;

pub use body::PeekBody;
pub use future::PeekFuture;
pub use layer::{PeekLayer, DEFAULT_PEEK_MAX_BODY, DEFAULT_PEEK_READ_TIMEOUT};
pub use service::Peek;

/// Response extension: what a layer below the retry layer found in the
/// response's body, told to the core with the head. The one way a body's
/// signals reach the retry layer.
///
/// [`PeekLayer`] puts it in a response whose body said something: a quota
/// used up (OpenAI's `insufficient_quota`, Gemini's per-day
/// `QuotaFailure`), a delay (Gemini's `google.rpc.RetryInfo`
/// `retryDelay`), a transient rate limit of the service's own kind
/// (OpenRouter's `402` `in_flight_budget_exhausted`), the limit hit
/// (OpenAI's `... on tokens per min`), or a gRPC status brought from
/// trailers into the head. Any layer that learns one of the
/// first three another way may set it too; the retry layer tells the core
/// ([`Answer::quota`](retry_budget::Answer::quota),
/// [`Answer::rate_limited`](retry_budget::Answer::rate_limited), one more
/// reset value), which decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodySignals {
    quota: Option<Box<str>>,
    retry_delay: Option<Box<str>>,
    rate_limited: Option<Box<str>>,
    limit: Option<Box<str>>,
    status_from_trailers: bool,
}

impl BodySignals {
    /// The name the trail gives a body's delay.
    pub const RETRY_DELAY_NAME: &'static str = "retryDelay (body)";

    /// Nothing found.
    pub const fn new() -> Self {
        Self {
            quota: None,
            retry_delay: None,
            rate_limited: None,
            limit: None,
            status_from_trailers: false,
        }
    }

    /// The service said the account's quota is used up (`code`, its name
    /// for it): the core ends a status it retries as `not_retryable`,
    /// category `quota`.
    #[must_use]
    pub fn with_quota(mut self, code: impl Into<Box<str>>) -> Self {
        self.quota = Some(code.into());
        self
    }

    /// The used-up quota's code, if the body named one.
    pub fn quota(&self) -> Option<&str> {
        self.quota.as_deref()
    }

    /// The body named the server's delay, raw (a protobuf Duration in
    /// JSON: `"53s"`, `"1.5s"`): told to the core as one more reset value,
    /// read as a Go-style duration (the longest valid delay counts, a
    /// malformed one is recorded and ignored).
    #[must_use]
    pub fn with_retry_delay(mut self, raw: impl Into<Box<str>>) -> Self {
        self.retry_delay = Some(raw.into());
        self
    }

    /// The raw delay the body named, if any.
    pub fn retry_delay(&self) -> Option<&str> {
        self.retry_delay.as_deref()
    }

    /// The body says this error is a transient rate limit of the
    /// service's own kind (`kind`, its name for it): the core decides
    /// whether it is retried as a `429`.
    #[must_use]
    pub fn with_rate_limited(mut self, kind: impl Into<Box<str>>) -> Self {
        self.rate_limited = Some(kind.into());
        self
    }

    /// The rate limit's kind, if the body named one.
    pub fn rate_limited(&self) -> Option<&str> {
        self.rate_limited.as_deref()
    }

    /// The body names the limit hit, by that limit's reset header
    /// (`x-ratelimit-reset-tokens` for OpenAI's `... on tokens per min`):
    /// the core counts that reset whatever its `remaining` says
    /// ([`ResetHeaders::limit_named`](retry_budget::reset::ResetHeaders::limit_named)).
    #[must_use]
    pub fn with_limit(mut self, reset_header: impl Into<Box<str>>) -> Self {
        self.limit = Some(reset_header.into());
        self
    }

    /// The reset header of the limit the body named, if any.
    pub fn limit(&self) -> Option<&str> {
        self.limit.as_deref()
    }

    /// Whether the head's `grpc-status` was copied from trailers that
    /// followed the initial metadata with no message (set only by
    /// [`PeekLayer`], so that no server can claim it).
    pub const fn status_from_trailers(&self) -> bool {
        self.status_from_trailers
    }

    /// Whether nothing was found.
    pub const fn is_empty(&self) -> bool {
        self.quota.is_none()
            && self.retry_delay.is_none()
            && self.rate_limited.is_none()
            && self.limit.is_none()
            && !self.status_from_trailers
    }

    /// Marks the head's `grpc-status` as brought from trailers.
    pub(crate) fn from_trailers(extensions: &mut http::Extensions) {
        match extensions.get_mut::<Self>() {
            Some(found) => found.status_from_trailers = true,
            None => {
                extensions.insert(Self {
                    status_from_trailers: true,
                    ..Self::new()
                });
            }
        }
    }
}
