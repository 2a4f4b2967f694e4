//! Vendors' pairs: `X-RateLimit-*`, OpenAI/Groq/Azure, Anthropic.

use crate::reset::ResetFormat;

use super::fields::Fields;
use super::reader::Sink;
use super::state::LimitKind;

/// OpenAI's and Groq's suffixes (Azure OpenAI sends the same remaining
/// fields, with `-1` for unknown and often no reset).
const OPENAI: [(&str, LimitKind); 2] = [
    ("requests", LimitKind::Requests),
    ("tokens", LimitKind::Tokens),
];

/// Anthropic's limits.
const ANTHROPIC: [(&str, LimitKind); 4] = [
    ("requests", LimitKind::Requests),
    ("tokens", LimitKind::Tokens),
    ("input-tokens", LimitKind::Tokens),
    ("output-tokens", LimitKind::Tokens),
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
    for (suffix, kind) in OPENAI {
        sink.pair(
            fields,
            suffix,
            kind,
            [
                &format!("x-ratelimit-remaining-{suffix}"),
                &format!("x-ratelimit-reset-{suffix}"),
                &format!("x-ratelimit-limit-{suffix}"),
            ],
            Some(ResetFormat::Duration),
        );
    }
    for (limit, kind) in ANTHROPIC {
        sink.pair(
            fields,
            &format!("anthropic-{limit}"),
            kind,
            [
                &format!("anthropic-ratelimit-{limit}-remaining"),
                &format!("anthropic-ratelimit-{limit}-reset"),
                &format!("anthropic-ratelimit-{limit}-limit"),
            ],
            Some(ResetFormat::Rfc3339),
        );
    }
}
