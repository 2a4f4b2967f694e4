//! Vendors' pairs: `X-RateLimit-*`, OpenAI/Groq/Azure, Anthropic.

use crate::reset::ResetFormat;

use super::fields::Fields;
use super::reader::Sink;
use super::state::LimitKind;

/// One vendor limit: its name, what it counts, and its fields
/// `[remaining, reset, limit]`.
type Limit = (&'static str, LimitKind, [&'static str; 3]);

/// OpenAI's and Groq's (Azure OpenAI sends the same remaining fields, with
/// `-1` for unknown and often no reset).
const OPENAI: [Limit; 2] = [
    (
        "requests",
        LimitKind::Requests,
        [
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
            "x-ratelimit-limit-requests",
        ],
    ),
    (
        "tokens",
        LimitKind::Tokens,
        [
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
            "x-ratelimit-limit-tokens",
        ],
    ),
];

/// Anthropic's.
const ANTHROPIC: [Limit; 4] = [
    (
        "anthropic-requests",
        LimitKind::Requests,
        [
            "anthropic-ratelimit-requests-remaining",
            "anthropic-ratelimit-requests-reset",
            "anthropic-ratelimit-requests-limit",
        ],
    ),
    (
        "anthropic-tokens",
        LimitKind::Tokens,
        [
            "anthropic-ratelimit-tokens-remaining",
            "anthropic-ratelimit-tokens-reset",
            "anthropic-ratelimit-tokens-limit",
        ],
    ),
    (
        "anthropic-input-tokens",
        LimitKind::Tokens,
        [
            "anthropic-ratelimit-input-tokens-remaining",
            "anthropic-ratelimit-input-tokens-reset",
            "anthropic-ratelimit-input-tokens-limit",
        ],
    ),
    (
        "anthropic-output-tokens",
        LimitKind::Tokens,
        [
            "anthropic-ratelimit-output-tokens-remaining",
            "anthropic-ratelimit-output-tokens-reset",
            "anthropic-ratelimit-output-tokens-limit",
        ],
    ),
];

pub(crate) fn read(fields: &Fields<'_>, x_reset: Option<ResetFormat>, sink: &mut Sink) {
    sink.pair(
        fields,
        "x-ratelimit",
        LimitKind::Requests,
        [
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-limit",
        ],
        x_reset,
    );
    for (name, kind, names) in OPENAI {
        sink.pair(fields, name, kind, names, Some(ResetFormat::Duration));
    }
    for (name, kind, names) in ANTHROPIC {
        sink.pair(fields, name, kind, names, Some(ResetFormat::Rfc3339));
    }
}
