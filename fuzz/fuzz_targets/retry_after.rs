//! Any bytes as a Retry-After value: no panic, and the result is exactly what
//! RFC 9110 allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retry_budget::retry_after::{RetryAfter, MAX_KEPT_RAW};

fuzz_target!(|data: &[u8]| {
    let parsed = RetryAfter::parse_bytes(data);
    let trimmed = data
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .map(|start| {
            let end = data.iter().rposition(|b| !matches!(b, b' ' | b'\t')).unwrap();
            &data[start..=end]
        })
        .unwrap_or(&[]);
    let digits = !trimmed.is_empty() && trimmed.iter().all(u8::is_ascii_digit);
    match &parsed {
        RetryAfter::Seconds(_) => assert!(digits, "seconds from {data:?}"),
        RetryAfter::Date(_) => assert!(!digits && trimmed.is_ascii()),
        RetryAfter::Invalid(invalid) => {
            assert!(!digits);
            assert!(invalid.raw().chars().count() <= MAX_KEPT_RAW + 1);
        }
        // A comma-separated list: at least one valid element.
        RetryAfter::Repeated(repeated) => {
            assert!(data.contains(&b','));
            assert!(repeated.values().iter().any(RetryAfter::is_valid));
            assert!(repeated.raw().chars().count() <= MAX_KEPT_RAW + 1);
        }
        RetryAfter::Missing => panic!("a present value is never missing"),
    }
    // The same value twice is valid exactly when it is, and asks the same.
    let twice = RetryAfter::from_values([data, data]);
    assert_eq!(twice.is_valid(), parsed.is_valid());
    assert_eq!(twice.asked(None), parsed.asked(None));
});
