//! What a JSON error body says, by the configured rules: which responses
//! are worth reading (a listed status, a JSON content type, no declared
//! length over the bound), and the reading itself (serde_json, feature
//! `quota`).

use std::time::Duration;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::HeaderMap;
use retry_budget::StatusSet;

#[cfg(feature = "quota")]
use super::BodySignals;

/// The rules of a JSON body's reading, shared by every call of a layer.
#[derive(Debug, Clone)]
pub(super) struct JsonRules {
    pub(super) codes: Vec<Box<str>>,
    pub(super) quota_ids: Vec<Box<str>>,
    pub(super) retry_info: bool,
    pub(super) rate_limited: Vec<Box<str>>,
    pub(super) quota_messages: Vec<Box<str>>,
    /// Text in `message` naming the limit hit, and its reset header.
    pub(super) limit_names: Vec<(Box<str>, Box<str>)>,
    pub(super) statuses: StatusSet,
    pub(super) max_body: usize,
    pub(super) read_timeout: Duration,
}

impl JsonRules {
    /// Whether any rule reads anything (without one, no body is read).
    pub(super) fn reads_any(&self) -> bool {
        !self.codes.is_empty()
            || !self.quota_ids.is_empty()
            || self.retry_info
            || !self.rate_limited.is_empty()
            || !self.quota_messages.is_empty()
            || !self.limit_names.is_empty()
    }
}

/// Whether the response is worth reading: a listed status, a JSON content
/// type, no declared length over the bound.
pub(super) fn worth_reading(config: &JsonRules, status: u16, headers: &HeaderMap) -> bool {
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

/// Reads `body` (JSON) by every configured rule: what it says (empty if
/// nothing, or not JSON).
#[cfg(feature = "quota")]
pub(super) fn read_body(config: &JsonRules, body: &[u8]) -> BodySignals {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return BodySignals::new();
    };
    let messages = || {
        [
            value.get("message"),
            value.get("error").and_then(|e| e.get("message")),
        ]
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
    };
    // A message naming a spent quota (an API with no code for it).
    let message_quota = messages()
        .find_map(|text| {
            config
                .quota_messages
                .iter()
                .find(|part| text.contains(&***part))
        })
        .cloned();
    // A message naming the limit hit: that limit's reset header.
    let limit = messages()
        .find_map(|text| {
            config
                .limit_names
                .iter()
                .find(|(part, _)| text.contains(&**part))
        })
        .map(|(_, reset)| reset.clone());
    let Some(error) = value.get("error").filter(|e| e.is_object()) else {
        return BodySignals {
            quota: message_quota,
            limit,
            ..BodySignals::new()
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
    BodySignals {
        quota,
        retry_delay,
        rate_limited,
        limit,
        status_from_trailers: false,
    }
}

/// The first configured code in `error.code` or `error.type`.
#[cfg(test)]
pub(super) fn quota_code<'c>(config: &'c JsonRules, body: &[u8]) -> Option<&'c str> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    code_in(config, value.get("error")?)
}

/// The first configured code in `error.code` or `error.type`.
#[cfg(feature = "quota")]
fn code_in<'c>(config: &'c JsonRules, error: &serde_json::Value) -> Option<&'c str> {
    ["code", "type"]
        .iter()
        .filter_map(|field| error.get(field)?.as_str())
        .find_map(|said| config.codes.iter().find(|c| &***c == said))
        .map(|c| &**c)
}

#[cfg(all(test, feature = "quota"))]
mod tests {
    use super::*;

    fn config() -> JsonRules {
        super::super::PeekLayer::openai().json.as_ref().clone()
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
