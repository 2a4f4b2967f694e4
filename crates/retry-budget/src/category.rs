//! Error categories: what kind of ending a response or failure is,
//! kept apart from the retry decision (which is the policy's).
//!
//! Every [`Report`](crate::Report) but a success names its category, in
//! its JSON (`category`) and as the last line of its visible status, with a
//! hint of the category's own:
//!
//! ```
//! use retry_budget::Category;
//!
//! let quota = Category::of_status(402).unwrap();
//! assert_eq!(quota.as_str(), "quota");
//! assert!(quota.hint().contains("top up or switch plan"));
//! assert_eq!(Category::of_status(401), Some(Category::NotConfigured));
//! assert_eq!(Category::of_status(200), None);
//! ```

use std::fmt;

/// The category of a failed response or attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Category {
    /// 429: rate limited; worth waiting.
    RateLimit,
    /// 402: quota used up; retrying never helps.
    Quota,
    /// 401 or 403: check credentials and configuration.
    NotConfigured,
    /// Another 4xx.
    ClientError,
    /// A 5xx.
    ServerError,
    /// An attempt ran past its cap.
    Timeout,
    /// The transport failed.
    Transport,
    /// The caller left: a normal ending, not an error.
    Cancelled,
}

impl Category {
    /// The category of a response status; `None` for 1xx, 2xx and 3xx.
    pub const fn of_status(status: u16) -> Option<Self> {
        Some(match status {
            429 => Self::RateLimit,
            402 => Self::Quota,
            401 | 403 => Self::NotConfigured,
            400..=499 => Self::ClientError,
            500..=599 => Self::ServerError,
            _ => return None,
        })
    }

    /// The `snake_case` name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::Quota => "quota",
            Self::NotConfigured => "not_configured",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Cancelled => "cancelled",
        }
    }

    /// A short human hint for the visible status.
    pub const fn hint(self) -> &'static str {
        match self {
            Self::RateLimit => "The service is limiting requests; trying later may work.",
            Self::Quota => "The quota is used up; retrying will not help: top up or switch plan.",
            Self::NotConfigured => "The service refused the credentials; check the configuration.",
            Self::ClientError => "The service rejected the request itself.",
            Self::ServerError => "The service reported an error of its own.",
            Self::Timeout => "The service did not answer in time.",
            Self::Transport => "The connection failed.",
            Self::Cancelled => "The request was cancelled; this is not an error.",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(Category::of_status(429), Some(Category::RateLimit));
        assert_eq!(Category::of_status(402), Some(Category::Quota));
        assert_eq!(Category::of_status(401), Some(Category::NotConfigured));
        assert_eq!(Category::of_status(403), Some(Category::NotConfigured));
        assert_eq!(Category::of_status(404), Some(Category::ClientError));
        assert_eq!(Category::of_status(503), Some(Category::ServerError));
        assert_eq!(Category::of_status(200), None);
        assert_eq!(Category::of_status(304), None);
    }
}
