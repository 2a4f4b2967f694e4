//! The CLI's one saturating mapping from an elapsed time onto tokio's clock,
//! the same rule as the layer's own (private) mapping: a time beyond the
//! clock's range is "never", not a panic. Every deadline the CLI arms (the
//! final body's, the relayed body's idle bound) goes through it.

use std::time::Duration;

use tokio::time::Instant;

/// The instant at `elapsed` after `origin`, or `None` ("never") if that is
/// beyond tokio's clock.
#[allow(clippy::disallowed_methods)] // the CLI's one place allowed to
pub(crate) fn instant_at(origin: Instant, elapsed: Duration) -> Option<Instant> {
    origin.checked_add(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_clock_is_never_not_a_panic() {
        let origin = Instant::now();
        assert_eq!(
            instant_at(origin, Duration::from_secs(2)),
            Some(origin + Duration::from_secs(2))
        );
        assert_eq!(instant_at(origin, Duration::MAX), None);
    }
}
