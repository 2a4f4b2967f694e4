//! [`PeekLayer`]: what is read from a response's body, and its bounds.

use std::sync::Arc;
use std::time::Duration;

use retry_budget::StatusSet;
use tower::Layer;

use super::json::JsonRules;
use super::Peek;
#[cfg(feature = "quota")]
use crate::response_signal::Provider;

/// The most of a JSON body [`PeekLayer`] reads by default: 16 KiB (an
/// API's error object is a few hundred bytes).
pub const DEFAULT_PEEK_MAX_BODY: usize = 16 * 1024;
/// How long [`PeekLayer`] waits by default for the rest of a JSON body
/// once the head has come: 1 s (an error body comes with its head).
pub const DEFAULT_PEEK_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads the start of a response's body for the retry layer above it:
/// place it **below** [`RetryBudgetLayer`](crate::RetryBudgetLayer) (closer
/// to the client or channel). What it finds reaches the retry layer as one
/// response extension, [`BodySignals`](super::BodySignals). Two readings,
/// each off unless asked, one layer:
///
/// * **a gRPC status in trailers** ([`grpc`](Self::grpc)), read with
///   [`GrpcSignal`](crate::response_signal::GrpcSignal);
/// * **what a JSON error body says** (feature `quota`, serde_json): a
///   quota used up, the server's delay, a retryable rate limit of the
///   service's own kind (`openai`, `gemini`,
///   `openrouter`, `for_provider`,
///   or the rules one by one).
///
/// Only calls the retry layer budgets are peeked at; every other call, and
/// every response neither reading wants, is passed on untouched, no frame
/// read. Whatever the peek read is given back: the caller receives the
/// whole body, every frame as received (trailers and errors included),
/// byte for byte.
///
/// # gRPC: a status in trailers
///
/// The retry layer decides on a response's head, and
/// [`GrpcSignal`](crate::response_signal::GrpcSignal) reads `grpc-status`
/// there: that is where a *Trailers-Only* answer puts it. But a server that
/// sends its initial metadata before failing answers with a head (`200`, no
/// `grpc-status`), then a trailers frame with the status, and no message in
/// between. Read from the head alone, that call is a plain `200`: a
/// RESOURCE_EXHAUSTED is not retried, and the report says `success` while
/// tonic returns `Err(ResourceExhausted)`. Like linkerd2-proxy's
/// `PeekTrailersBody`, the layer reads the **first body frame** of such an
/// answer before handing the response up:
///
/// | the answer | what the layer does |
/// |---|---|
/// | not gRPC (`content-type` not `application/grpc`, `+...` or `;...`), not `200`, or a head with `grpc-status` (Trailers-Only) | nothing: the response is passed on untouched, no frame is read |
/// | a call the retry layer does not budget (a `POST` not marked [`Idempotent`](crate::Idempotent)) | nothing |
/// | head, then trailers with a non-OK `grpc-status` and no message | the head becomes the Trailers-Only head the server could have sent: every trailer field is appended to it (and [`BodySignals::status_from_trailers`](super::BodySignals::status_from_trailers) marks it, so that no server can claim it), so [`GrpcSignal`](crate::response_signal::GrpcSignal) reads it as usual (RESOURCE_EXHAUSTED → `429` with the pushback, a negative pushback → not retryable) and the trail says `..., in trailers after initial metadata`. The body still yields those exact trailers. |
/// | head, then trailers with `grpc-status: 0` (or none), no message | the head is unchanged; the body yields the trailers |
/// | head, then a message | peeking stops: the response is passed on (nothing is retried once data has been seen); the message is yielded first |
///
/// The gRPC peek has no timer of its own: it is part of the attempt, and a
/// first frame that does not come in time ends the attempt as
/// `attempt_timeout`, like a head that does not come.
///
/// **What `success` means for gRPC.** The report is made when the head
/// (or, with this layer, the first frame) arrives. `success` then means:
/// the service **began an answer** with no error status. For a streaming
/// answer, the final `grpc-status` comes after the messages, when the
/// response has long been returned: when it is not OK, the body corrects
/// the report in the request's [`ReportSlot`](crate::ReportSlot) as the
/// core rules ([`Report::status_after_data`](retry_budget::Report::status_after_data)):
/// outcome `not_retryable`, last status the HTTP equivalent, and a
/// [`StatusAfterData`](retry_budget::trail::EventKind::StatusAfterData)
/// event in the trail. The layer's [`Observer`](crate::observer::Observer),
/// if any, is told too: the `StatusAfterData` event, then the corrected
/// report (a second `on_report` for the same
/// [`ActionId`](crate::observer::ActionId)), with or without a slot. (The
/// copy in the response's extensions was taken when the response was
/// returned and is not updated.)
///
/// **Cost.** On a budgeted gRPC answer, one more poll of the body before
/// the response is returned, and the frame held in [`PeekBody`](super::PeekBody);
/// no allocation on the OK path (the report is cloned only to correct it),
/// except with an observer and no caller's slot: then an answer whose
/// first frame is a message gets a slot of its own and a copy of the
/// report, so that a late status can be told. HTTP responses pay a
/// `content-type` check.
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// use bytes::Bytes;
/// use http::HeaderMap;
/// use http_body_util::{BodyExt, Empty, Full};
/// use retry_budget::{Outcome, Policy};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::{response_signal::GrpcSignal, peek::PeekLayer, Idempotent, ReportSlot, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A server that sends its initial metadata, then fails with
/// // RESOURCE_EXHAUSTED in the trailers (pushback 1 s) the first time.
/// let calls = Arc::new(AtomicU32::new(0));
/// let server = service_fn(move |_req: http::Request<()>| {
///     let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
///     let mut trailers = HeaderMap::new();
///     let body = if first {
///         trailers.insert("grpc-status", "8".parse().unwrap());
///         trailers.insert("grpc-retry-pushback-ms", "1000".parse().unwrap());
///         Empty::new().with_trailers(async { Some(Ok(trailers)) }).boxed_unsync()
///     } else {
///         trailers.insert("grpc-status", "0".parse().unwrap());
///         Full::new(Bytes::from_static(b"\0\0\0\0\x01*"))
///             .with_trailers(async { Some(Ok(trailers)) })
///             .boxed_unsync()
///     };
///     let response = http::Response::builder()
///         .header("content-type", "application/grpc")
///         .body(body)
///         .unwrap();
///     async move { Ok::<_, Infallible>(response) }
/// });
///
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
///     .layer(PeekLayer::grpc()) // below the retry layer
///     .service(server);
///
/// let slot = ReportSlot::new();
/// let mut request = http::Request::post("http://svc/pkg.Svc/Get").body(()).unwrap();
/// request.extensions_mut().insert(Idempotent);
/// request.extensions_mut().insert(slot.clone());
/// let response = client.oneshot(request).await.unwrap();
/// let trailers = response.into_body().collect().await.unwrap().trailers().cloned().unwrap();
/// assert_eq!(trailers["grpc-status"], "0");
///
/// let report = slot.take().unwrap();
/// assert_eq!(report.outcome, Outcome::Success);
/// assert_eq!(report.attempts_started, 2);
/// assert_eq!(report.starts()[1].as_secs(), 1); // after the pushback
/// # }
/// ```
///
/// # JSON: what an error body says
///
/// OpenAI answers an account whose quota is used up with `429` (as it
/// answers a rate limit) and says which in the JSON body:
/// `{"error": {"code": "insufficient_quota", "type": "insufficient_quota", ...}}`.
/// Read from its head, that `429` is retried until the budget runs out,
/// although no retry can ever succeed.
///
/// | the response | what the layer does |
/// |---|---|
/// | a request the retry layer does not budget, a status not in [`statuses`](Self::statuses) (default `429`), a content type that is not JSON (`application/json`, `application/*+json`), or a declared length over [`max_body`](Self::max_body) | nothing: passed on untouched, no byte read |
/// | a JSON body whose `error.code` or `error.type` is one of the codes (or that another rule matches) | a [`BodySignals`](super::BodySignals) in the response's extensions: for a quota, the core ends the action `not_retryable`, category `quota` |
/// | a body that is not JSON, has no such code, is longer than `max_body`, fails, or has not ended within [`read_timeout`](Self::read_timeout) | nothing more: the 429 is treated as usual |
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
/// # #[cfg(feature = "quota")] {
/// use std::convert::Infallible;
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use retry_budget::{Category, Outcome, Policy};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::peek::PeekLayer;
/// use tower_retry_budget::{Report, RetryBudgetLayer};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
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
///     .layer(PeekLayer::openai())
///     .service(openai);
/// let response = client.oneshot(http::Request::new(())).await.unwrap();
/// let report = response.extensions().get::<Report>().unwrap().clone();
/// assert_eq!((report.outcome, report.attempts_started), (Outcome::NotRetryable, 1));
/// assert_eq!(report.category(), Some(Category::Quota));
/// let body = response.into_body().collect().await.unwrap().to_bytes();
/// assert_eq!(body, BODY.as_bytes());
/// # });
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PeekLayer {
    grpc: bool,
    pub(super) json: Arc<JsonRules>,
}

impl Default for PeekLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl PeekLayer {
    /// A layer that reads nothing: every response passes untouched until
    /// a reading is asked for.
    pub fn new() -> Self {
        Self {
            grpc: false,
            json: Arc::new(JsonRules {
                codes: Vec::new(),
                quota_ids: Vec::new(),
                retry_info: false,
                rate_limited: Vec::new(),
                quota_messages: Vec::new(),
                limit_names: Vec::new(),
                statuses: StatusSet::TOO_MANY_REQUESTS,
                max_body: DEFAULT_PEEK_MAX_BODY,
                read_timeout: DEFAULT_PEEK_READ_TIMEOUT,
            }),
        }
    }

    /// Reads a gRPC status that comes in trailers after the initial
    /// metadata (see the [type's docs](Self#grpc-a-status-in-trailers)).
    pub fn grpc() -> Self {
        Self::new().grpc_trailers(true)
    }

    /// Whether a gRPC status in trailers is read (with or without the
    /// JSON rules: the two readings look at different content types).
    #[must_use]
    pub const fn grpc_trailers(mut self, on: bool) -> Self {
        self.grpc = on;
        self
    }

    /// Whether anything is read (without it, every response passes
    /// untouched, no byte read).
    pub fn reads_any(&self) -> bool {
        self.grpc || self.json.reads_any()
    }

    /// Reads these JSON bodies' statuses (default: `429` only). Give the
    /// statuses the retry layer's policy retries: only they can be
    /// retried in vain.
    #[must_use]
    pub fn statuses(mut self, statuses: StatusSet) -> Self {
        Arc::make_mut(&mut self.json).statuses = statuses;
        self
    }

    /// Reads at most this many bytes of a JSON body (default
    /// [`DEFAULT_PEEK_MAX_BODY`]); a longer body is passed on as it is,
    /// unclassified.
    #[must_use]
    pub fn max_body(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.json).max_body = bytes;
        self
    }

    /// Waits at most this long after the head for a JSON body to end
    /// (default [`DEFAULT_PEEK_READ_TIMEOUT`]).
    #[must_use]
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.json).read_timeout = timeout;
        self
    }

    /// The quota codes read for.
    pub fn codes(&self) -> impl Iterator<Item = &str> {
        self.json.codes.iter().map(|c| &**c)
    }
}

/// The JSON rules (feature `quota`).
#[cfg(feature = "quota")]
#[cfg_attr(docsrs, doc(cfg(feature = "quota")))]
impl PeekLayer {
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
        Self::new()
            .quota_codes(body.quota_codes.iter().copied())
            .quota_ids(body.quota_ids.iter().copied())
            .rate_limited(body.rate_limited.iter().copied())
            .quota_messages(body.quota_messages.iter().copied())
            .limit_names(body.limit_names.iter().copied())
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

    /// Also reads `error.code` and `error.type`: one of `codes` is a quota
    /// used up.
    #[must_use]
    pub fn quota_codes<I>(mut self, codes: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        let json = Arc::make_mut(&mut self.json);
        json.codes.extend(codes.into_iter().map(Into::into));
        self
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
        let json = Arc::make_mut(&mut self.json);
        json.quota_ids.extend(parts.into_iter().map(Into::into));
        self
    }

    /// Also reads `error.details[]`'s `google.rpc.RetryInfo` `retryDelay`
    /// as the server's delay ([`BodySignals::retry_delay`](super::BodySignals::retry_delay)).
    #[must_use]
    pub fn retry_info(mut self) -> Self {
        Arc::make_mut(&mut self.json).retry_info = true;
        self
    }

    /// Also reads `error.metadata.error_type`: one of `kinds` is a
    /// transient rate limit ([`BodySignals::rate_limited`](super::BodySignals::rate_limited)),
    /// which the core may retry as a `429` (give its status to
    /// [`statuses`](Self::statuses)).
    #[must_use]
    pub fn rate_limited<I>(mut self, kinds: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Box<str>>,
    {
        let json = Arc::make_mut(&mut self.json);
        json.rate_limited.extend(kinds.into_iter().map(Into::into));
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
        let json = Arc::make_mut(&mut self.json);
        json.quota_messages
            .extend(parts.into_iter().map(Into::into));
        self
    }
}

/// The JSON rules (feature `quota`), continued.
#[cfg(feature = "quota")]
impl PeekLayer {
    /// Also reads the body's `message` (top level or in `error`) for the
    /// limit hit: one containing a pair's text names the limit whose
    /// reset header is the pair's second
    /// ([`BodySignals::limit`](super::BodySignals::limit)); the first pair
    /// found counts.
    #[must_use]
    pub fn limit_names<I, T, H>(mut self, pairs: I) -> Self
    where
        I: IntoIterator<Item = (T, H)>,
        T: Into<Box<str>>,
        H: Into<Box<str>>,
    {
        let json = Arc::make_mut(&mut self.json);
        json.limit_names.extend(
            pairs
                .into_iter()
                .map(|(text, reset)| (text.into(), reset.into())),
        );
        self
    }
}

impl<S> Layer<S> for PeekLayer {
    type Service = Peek<S>;

    fn layer(&self, inner: S) -> Self::Service {
        // No rule: no JSON body is ever read, and nothing is shared.
        let json = self.json.reads_any().then(|| self.json.clone());
        Peek::new(inner, self.grpc, json)
    }
}
