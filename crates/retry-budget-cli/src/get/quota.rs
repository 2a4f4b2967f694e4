//! The quota the final response announced (`RateLimit`, `X-RateLimit-*`,
//! the AI providers' headers), read by the core's
//! [`QuotaReader`] and told in words: one action cannot pace itself, but
//! the user sees what is left.

use std::time::SystemTime;

use http::HeaderMap;
use retry_budget::pace::{QuotaReader, QuotaState};
use retry_budget::Secs;

/// One line per limit `headers` announce, and one per value set aside;
/// none if they announce nothing. `trusted_clock`: a Unix or RFC 3339
/// reset may be read against the calendar clock.
pub fn lines(headers: &HeaderMap, trusted_clock: bool) -> Vec<String> {
    let fields = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()));
    let calendar = trusted_clock.then(SystemTime::now);
    let reading = QuotaReader::new().read(fields, calendar);
    let limits = reading.states.iter().map(limit_line);
    let notes = reading.notes.iter().map(|note| {
        format!(
            "Quota field {} set aside: {:?} ({})",
            note.header, note.raw, note.why
        )
    });
    limits.chain(notes).collect()
}

fn limit_line(state: &QuotaState) -> String {
    let of = state
        .quota
        .map(|quota| format!(" of {quota}"))
        .unwrap_or_default();
    let window = state
        .window
        .map(|window| format!(" per {}", Secs(window)))
        .unwrap_or_default();
    format!(
        "Quota announced: {} ({}): {} left{of}{window}, resets in {}.",
        state.name,
        state.kind,
        state.remaining,
        Secs(state.reset)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ietf_limit_and_a_malformed_field_are_told() {
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit", r#""default";r=3;t=2"#.parse().unwrap());
        headers.insert("ratelimit-policy", r#""default";q=10;w=2"#.parse().unwrap());
        assert_eq!(
            lines(&headers, true),
            ["Quota announced: default (requests): 3 left of 10 per 2 s, resets in 2 s."]
        );
        let mut bad = HeaderMap::new();
        bad.insert("x-ratelimit-remaining", "lots".parse().unwrap());
        bad.insert("x-ratelimit-reset", "2".parse().unwrap());
        let told = lines(&bad, true);
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].starts_with("Quota field x-ratelimit-remaining set aside"),
            "{told:?}"
        );
        assert!(lines(&HeaderMap::new(), true).is_empty());
    }
}
