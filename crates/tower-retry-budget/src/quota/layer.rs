//! [`QuotaLayer`] and [`Quota`]: which responses are read, and how.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body::Body;
use retry_budget::StatusSet;
use tower::{Layer, Service};

use super::{QuotaBody, QuotaFuture};
use crate::request;
use crate::response_signal::Provider;
use crate::AttemptDeadline;

/// The most of a body [`QuotaLayer`] reads by default: 16 KiB (an API's
/// error object is a few hundred bytes).
pub const DEFAULT_QUOTA_MAX_BODY: usize = 16 * 1024;
/// How long [`QuotaLayer`] waits by default for the rest of a body once
/// the head has come: 1 s (an error body comes with its head).
pub const DEFAULT_QUOTA_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads the JSON body of a retried status (`429`) for a quota that is used
/// up, and tells the retry layer: place it **below**
/// [`RetryBudgetLayer`](crate::RetryBudgetLayer), as
/// [`GrpcTrailersLayer`](crate::grpc::GrpcTrailersLayer) is for gRPC. Needs the
/// `quota` feature (serde_json).
///
/// # Why
///
/// OpenAI answers an account whose quota is used up with `429` (as it
/// answers a rate limit) and says which in the JSON body:
/// `{"error": {"code": "insufficient_quota", "type": "insufficient_quota", ...}}`.
/// Read from its head, that `429` is retried until the budget runs out,
/// although no retry can ever succeed.
///
/// # What it does
///
/// | the response | what the layer does |
/// |---|---|
/// | a request the retry layer does not budget, a status not in [`statuses`](Self::statuses) (default `429`), a content type that is not JSON (`application/json`, `application/*+json`), or a declared length over [`max_body`](Self::max_body) | nothing: passed on untouched, no byte read |
/// | a JSON body whose `error.code` or `error.type` is one of the codes | a [`QuotaExhausted`](super::QuotaExhausted) in the response's extensions: the core ends the action `not_retryable`, category `quota` |
/// | a body that is not JSON, has no such code, is longer than `max_body`, fails, or has not ended within [`read_timeout`](Self::read_timeout) | nothing more: the 429 is treated as usual |
///
/// Whatever it read is given back: the caller receives the whole body,
/// every frame as received (trailers and errors included), byte for byte.
///
/// # Time
///
/// The read is part of the attempt: it ends by [`read_timeout`](Self::read_timeout)
/// after the head, and never after the attempt's deadline when the retry
/// layer sends it ([`RetryBudgetLayer::attempt_deadlines`](crate::RetryBudgetLayer::attempt_deadlines)):
/// then the read stops at that deadline, and the retry layer, which polls
/// the attempt before its own timer, gets the response untouched. Without
/// it, a body slower than the attempt's cap ends the attempt as
/// `attempt_timeout`, like a head that does not come.
///
/// ```
/// use std::convert::Infallible;
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use retry_budget::{Category, Outcome, Policy};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::quota::QuotaLayer;
/// use tower_retry_budget::{Report, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// const BODY: &str = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
/// let openai = service_fn(|_req: http::Request<()>| async {
///     let response = http::Response::builder()
///         .status(429)
///         .header("content-type", "application/json")
///         .body(Full::new(Bytes::from_static(BODY.as_bytes())))
///         .unwrap();
///     Ok::<_, Infallible>(response)
/// });
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()).attempt_deadlines())
///     .layer(QuotaLayer::openai())
///     .service(openai);
/// let response = client.oneshot(http::Request::new(())).await.unwrap();
/// let report = response.extensions().get::<Report>().unwrap().clone();
/// assert_eq!((report.outcome, report.attempts_started), (Outcome::NotRetryable, 1));
/// assert_eq!(report.category(), Some(Category::Quota));
/// let body = response.into_body().collect().await.unwrap().to_bytes();
/// assert_eq!(body, BODY.as_bytes());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct QuotaLayer {
    config: Arc<QuotaConfig>,
}

#[derive(Debug, Clone)]
pub(super) struct QuotaConfig {
    pub(super) codes: Vec<Box<str>>,
    pub(super) quota_ids: Vec<Box<str>>,
    pub(super) retry_info: bool,
    pub(super) rate_limited: Vec<Box<str>>,
    pub(super) quota_messages: Vec<Box<str>>,
    pub(super) statuses: StatusSet,
    pub(super) max_body: usize,
    pub(super) read_timeout: Duration,
}

impl QuotaLayer {
    /// Reads for these codes in `error.code` or `error.type`.
    pub fn new<I>(codes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        Self {
            config: Arc::new(QuotaConfig {
                codes: codes.into_iter().map(Into::into).collect(),
                quota_ids: Vec::new(),
                retry_info: false,
                rate_limited: Vec::new(),
                quota_messages: Vec::new(),
                statuses: StatusSet::TOO_MANY_REQUESTS,
                max_body: DEFAULT_QUOTA_MAX_BODY,
                read_timeout: DEFAULT_QUOTA_READ_TIMEOUT,
            }),
        }
    }

    /// OpenAI's: `insufficient_quota`, on a `429`
    /// ([`OPENAI`](crate::response_signal::OPENAI)).
    pub fn openai() -> Self {
        Self::for_provider(&crate::response_signal::OPENAI)
    }

    /// Gemini's (and Vertex AI's) `RESOURCE_EXHAUSTED` `429`: its
    /// `google.rpc.RetryInfo` `retryDelay` is the server's delay
    /// ([`retry_info`](Self::retry_info)); a `google.rpc.QuotaFailure`
    /// violation whose `quotaId` names a per-day quota (`PerDay`) is a
    /// quota used up ([`quota_ids`](Self::quota_ids)).
    pub fn gemini() -> Self {
        Self::for_provider(&crate::response_signal::GEMINI)
    }

    /// OpenRouter's: a `402` whose `error.metadata.error_type` is
    /// `in_flight_budget_exhausted` is a transient rate limit
    /// ([`rate_limited`](Self::rate_limited)); any other `402` is not.
    pub fn openrouter() -> Self {
        Self::for_provider(&crate::response_signal::OPENROUTER)
    }

    /// Reads what `provider`'s body says ([`Provider::body`]); a provider
    /// with nothing in its body gives a layer that reads nothing.
    pub fn for_provider(provider: &Provider) -> Self {
        let body = &provider.body;
        let statuses = body.statuses.iter().fold(StatusSet::EMPTY, |set, &status| {
            set.with(status).unwrap_or(set)
        });
        Self::new(body.quota_codes.iter().copied())
            .quota_ids(body.quota_ids.iter().copied())
            .rate_limited(body.rate_limited.iter().copied())
            .quota_messages(body.quota_messages.iter().copied())
            .statuses(statuses)
            .retry_info_if(body.retry_info)
    }

    fn retry_info_if(self, on: bool) -> Self {
        if on {
            self.retry_info()
        } else {
            self
        }
    }

    /// Also reads `error.details[].violations[].quotaId` (Google's
    /// `google.rpc.QuotaFailure`): one containing any of `parts` is a
    /// quota used up, its `quotaId` the code told.
    #[must_use]
    pub fn quota_ids<I>(mut self, parts: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        let config = Arc::make_mut(&mut self.config);
        config.quota_ids.extend(parts.into_iter().map(Into::into));
        self
    }

    /// Also reads `error.details[]`'s `google.rpc.RetryInfo` `retryDelay`
    /// as the server's delay ([`BodyRetryDelay`](super::BodyRetryDelay)).
    #[must_use]
    pub fn retry_info(mut self) -> Self {
        Arc::make_mut(&mut self.config).retry_info = true;
        self
    }

    /// Also reads `error.metadata.error_type`: one of `kinds` is a
    /// transient rate limit ([`RateLimited`](super::RateLimited)), which
    /// the core may retry as a `429` (give its status to
    /// [`statuses`](Self::statuses)).
    #[must_use]
    pub fn rate_limited<I>(mut self, kinds: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        let config = Arc::make_mut(&mut self.config);
        config
            .rate_limited
            .extend(kinds.into_iter().map(Into::into));
        self
    }

    /// Also reads the body's `message` (top level or in `error`): one
    /// containing any of `parts` is a quota used up, the part the code
    /// told (for an API that sends no code).
    #[must_use]
    pub fn quota_messages<I>(mut self, parts: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        let config = Arc::make_mut(&mut self.config);
        config
            .quota_messages
            .extend(parts.into_iter().map(Into::into));
        self
    }

    /// Whether any body rule is set (without one, every response passes
    /// untouched, no byte read).
    pub fn reads_any(&self) -> bool {
        let c = &self.config;
        !c.codes.is_empty()
            || !c.quota_ids.is_empty()
            || c.retry_info
            || !c.rate_limited.is_empty()
            || !c.quota_messages.is_empty()
    }

    /// Reads these statuses' bodies (default: `429` only). Give the
    /// statuses the retry layer's policy retries: only they can be
    /// retried in vain.
    #[must_use]
    pub fn statuses(mut self, statuses: StatusSet) -> Self {
        Arc::make_mut(&mut self.config).statuses = statuses;
        self
    }

    /// Reads at most this many bytes (default [`DEFAULT_QUOTA_MAX_BODY`]);
    /// a longer body is passed on as it is, unclassified.
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.config).max_body = bytes;
        self
    }

    /// Waits at most this long after the head for the body to end
    /// (default [`DEFAULT_QUOTA_READ_TIMEOUT`]).
    #[must_use]
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.config).read_timeout = timeout;
        self
    }

    /// The codes read for.
    pub fn codes(&self) -> impl Iterator<Item = &str> {
        self.config.codes.iter().map(|c| &**c)
    }
}

impl<S> Layer<S> for QuotaLayer {
    type Service = Quota<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Quota {
            inner,
            config: self.config.clone(),
        }
    }
}

/// Reads a retried status's JSON body for a quota used up. See
/// [`QuotaLayer`].
#[derive(Debug, Clone)]
pub struct Quota<S> {
    inner: S,
    config: Arc<QuotaConfig>,
}

impl<S> Quota<S> {
    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Quota<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body + Unpin,
{
    type Response = Response<QuotaBody<ResB>>;
    type Error = S::Error;
    type Future = QuotaFuture<S::Future, ResB>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // Only what the retry layer budgets can be retried in vain.
        let config = &self.config;
        let reads_nothing = config.codes.is_empty()
            && config.quota_ids.is_empty()
            && !config.retry_info
            && config.rate_limited.is_empty()
            && config.quota_messages.is_empty();
        if !request::is_budgeted(&request) || reads_nothing {
            return QuotaFuture::passthrough(self.inner.call(request));
        }
        let attempt = request.extensions().get::<AttemptDeadline>().copied();
        let deadline = attempt
            .and_then(|a| crate::clock::instant_at(tokio::time::Instant::now(), a.reservation));
        QuotaFuture::reading(self.inner.call(request), self.config.clone(), deadline)
    }
}

/// Whether the response is worth reading: a listed status, a JSON content
/// type, no declared length over the bound.
pub(super) fn worth_reading(config: &QuotaConfig, status: u16, headers: &HeaderMap) -> bool {
    if !config.statuses.contains(status) || !is_json(headers) {
        return false;
    }
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    declared.is_none_or(|len| len <= config.max_body as u64)
}

/// `application/json` or `application/*+json`, with any parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let Some(subtype) = essence.strip_prefix("application/") else {
        return false;
    };
    subtype == "json" || subtype.ends_with("+json")
}

/// What a body says, by the configured rules.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct BodySays {
    pub(super) quota: Option<Box<str>>,
    pub(super) retry_delay: Option<Box<str>>,
    pub(super) rate_limited: Option<Box<str>>,
}

/// Reads `body` (JSON) by every configured rule.
pub(super) fn read_body(config: &QuotaConfig, body: &[u8]) -> BodySays {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return BodySays::default();
    };
    // A message naming a spent quota (an API with no code for it).
    let message_quota = [
        value.get("message"),
        value.get("error").and_then(|e| e.get("message")),
    ]
    .into_iter()
    .flatten()
    .filter_map(serde_json::Value::as_str)
    .find_map(|text| {
        config
            .quota_messages
            .iter()
            .find(|part| text.contains(&***part))
    })
    .cloned();
    let Some(error) = value.get("error").filter(|e| e.is_object()) else {
        return BodySays {
            quota: message_quota,
            ..BodySays::default()
        };
    };
    let details = || {
        error
            .get("details")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
    };
    let type_is = |detail: &serde_json::Value, name: &str| {
        detail
            .get("@type")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|t| t.strip_prefix("type.googleapis.com/") == Some(name))
    };
    let quota = code_in(config, error)
        .map(Into::into)
        .or_else(|| {
            details()
                .filter(|d| type_is(d, "google.rpc.QuotaFailure"))
                .filter_map(|d| d.get("violations")?.as_array())
                .flatten()
                .filter_map(|v| v.get("quotaId")?.as_str())
                .find(|id| config.quota_ids.iter().any(|part| id.contains(&**part)))
                .map(Into::into)
        })
        .or(message_quota);
    let retry_delay = config
        .retry_info
        .then(|| {
            details()
                .filter(|d| type_is(d, "google.rpc.RetryInfo"))
                .find_map(|d| d.get("retryDelay")?.as_str())
                .map(Into::into)
        })
        .flatten();
    let rate_limited = error
        .get("metadata")
        .and_then(|m| m.get("error_type")?.as_str())
        .and_then(|kind| config.rate_limited.iter().find(|k| &***k == kind))
        .cloned();
    BodySays {
        quota,
        retry_delay,
        rate_limited,
    }
}

/// The first configured code in `error.code` or `error.type`.
#[cfg(test)]
pub(super) fn quota_code<'c>(config: &'c QuotaConfig, body: &[u8]) -> Option<&'c str> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    code_in(config, value.get("error")?)
}

/// The first configured code in `error.code` or `error.type`.
fn code_in<'c>(config: &'c QuotaConfig, error: &serde_json::Value) -> Option<&'c str> {
    ["code", "type"]
        .iter()
        .filter_map(|field| error.get(field)?.as_str())
        .find_map(|said| config.codes.iter().find(|c| &***c == said))
        .map(|c| &**c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> QuotaConfig {
        QuotaLayer::openai().config.as_ref().clone()
    }

    #[test]
    fn json_content_types() {
        for (value, json) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON", true),
            ("application/problem+json", true),
            ("text/json", false),
            ("application/jsonx", false),
            ("text/plain", false),
            ("application/x-ndjson", false),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(is_json(&headers), json, "{value}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn worth_reading_a_listed_status_with_a_small_json_body() {
        let config = config();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        assert!(worth_reading(&config, 429, &headers));
        assert!(!worth_reading(&config, 500, &headers));
        assert!(!worth_reading(&config, 200, &headers));
        headers.insert(CONTENT_LENGTH, "16384".parse().unwrap());
        assert!(worth_reading(&config, 429, &headers));
        headers.insert(CONTENT_LENGTH, "16385".parse().unwrap());
        assert!(!worth_reading(&config, 429, &headers));
    }

    #[test]
    fn codes_in_error_code_or_error_type() {
        let config = config();
        let code = |body: &str| quota_code(&config, body.as_bytes());
        assert_eq!(
            code(r#"{"error":{"code":"insufficient_quota","type":"insufficient_quota"}}"#),
            Some("insufficient_quota")
        );
        assert_eq!(
            code(r#"{"error":{"code":null,"type":"insufficient_quota"}}"#),
            Some("insufficient_quota")
        );
        assert_eq!(
            code(r#"{"error":{"code":"insufficient_quota","type":"requests"}}"#),
            Some("insufficient_quota")
        );
        for other in [
            r#"{"error":{"code":"rate_limit_exceeded","type":"requests"}}"#,
            r#"{"error":"insufficient_quota"}"#,
            r#"{"code":"insufficient_quota"}"#,
            r#"{"error":{"code":"INSUFFICIENT_QUOTA"}}"#,
            r#"{"error":{"code":["insufficient_quota"]}}"#,
            r#"{"error":{"code":"insufficient_quota""#,
            "insufficient_quota",
            "",
            "[]",
        ] {
            assert_eq!(code(other), None, "{other}");
        }
    }
}
