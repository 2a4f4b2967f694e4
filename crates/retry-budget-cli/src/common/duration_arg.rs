//! Durations on the command line (`--budget 20s`, `--attempt-cap 500ms`):
//! one parser and one error text for every flag of every command.
//!
//! humantime reads the value; this only words the error for the user.

use std::time::Duration;

/// Reads a flag's duration (`20s`, `500ms`, `1m 30s`), for clap's
/// `value_parser`.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("expected a duration such as 20s or 500ms ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humantime_durations_and_one_error_text() {
        assert_eq!(parse("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1m 30s"), Ok(Duration::from_secs(90)));
        for bad in ["20x", "-1s", "", "soon"] {
            let error = parse(bad).unwrap_err();
            assert!(
                error.starts_with("expected a duration such as 20s or 500ms ("),
                "{bad:?}: {error}"
            );
        }
    }
}
