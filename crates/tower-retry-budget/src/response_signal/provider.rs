//! What each provider sends besides `Retry-After`, as data: one
//! [`Provider`] table per API.

use retry_budget::reset::ResetFormat;

use super::*;

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
