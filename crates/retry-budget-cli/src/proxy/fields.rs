//! The caller's fields the proxy reads on every request before it sends
//! anything: its deadline's (`grpc-timeout`,
//! `x-envoy-upstream-rq-timeout-ms`) and its retries' (`retry-budget-attempt`,
//! `x-stainless-retry-count`).
//!
//! Found in one pass over the request's fields, comparing names, rather
//! than by four lookups: a lookup by a name that is not one of `http`'s
//! own hashes every byte of it, and most requests carry none of these.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::attempt::ATTEMPT;

/// `grpc-timeout`.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `x-envoy-upstream-rq-timeout-ms`.
pub const ENVOY_TIMEOUT: HeaderName = HeaderName::from_static("x-envoy-upstream-rq-timeout-ms");
/// `x-stainless-retry-count`: OpenAI's and Anthropic's SDKs number their
/// retries with it (0 for the first request).
pub const SDK_RETRY_COUNT: HeaderName = HeaderName::from_static("x-stainless-retry-count");

/// The first value of each field the proxy reads (what
/// [`HeaderMap::get`] gives), if the request has it.
#[derive(Debug, Default)]
pub struct Fields<'a> {
    /// `grpc-timeout`.
    pub grpc_timeout: Option<&'a HeaderValue>,
    /// `x-envoy-upstream-rq-timeout-ms`.
    pub envoy_timeout: Option<&'a HeaderValue>,
    /// `retry-budget-attempt`.
    pub attempt: Option<&'a HeaderValue>,
    /// `x-stainless-retry-count`.
    pub sdk_retry_count: Option<&'a HeaderValue>,
}

impl<'a> Fields<'a> {
    /// The fields of `headers` (see the [module docs](self)).
    pub fn of(headers: &'a HeaderMap) -> Self {
        let mut fields = Self::default();
        for (name, value) in headers {
            let slot = if name == GRPC_TIMEOUT {
                &mut fields.grpc_timeout
            } else if name == ENVOY_TIMEOUT {
                &mut fields.envoy_timeout
            } else if name == ATTEMPT {
                &mut fields.attempt
            } else if name == SDK_RETRY_COUNT {
                &mut fields.sdk_retry_count
            } else {
                continue;
            };
            // The first value counts, as with `HeaderMap::get`.
            slot.get_or_insert(value);
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HOST, USER_AGENT};

    #[test]
    fn each_field_is_its_first_value_as_get_gives_it() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("example.com"));
        headers.append(ATTEMPT, HeaderValue::from_static("3"));
        headers.append(USER_AGENT, HeaderValue::from_static("test"));
        headers.append(ATTEMPT, HeaderValue::from_static("1"));
        headers.insert(SDK_RETRY_COUNT, HeaderValue::from_static("0"));
        headers.insert(GRPC_TIMEOUT, HeaderValue::from_static("2S"));
        headers.insert(ENVOY_TIMEOUT, HeaderValue::from_static("1500"));
        let fields = Fields::of(&headers);
        assert_eq!(fields.attempt, headers.get(ATTEMPT));
        assert_eq!(fields.attempt.unwrap(), "3");
        assert_eq!(fields.sdk_retry_count.unwrap(), "0");
        assert_eq!(fields.grpc_timeout.unwrap(), "2S");
        assert_eq!(fields.envoy_timeout.unwrap(), "1500");
        let empty = HeaderMap::new();
        let none = Fields::of(&empty);
        assert!(none.attempt.is_none() && none.grpc_timeout.is_none());
        assert!(none.envoy_timeout.is_none() && none.sdk_retry_count.is_none());
    }
}
