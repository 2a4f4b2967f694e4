//! Any bytes as a Retry-After value: no panic, and the result is exactly what
//! RFC 9110 allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retry_budget::{RetryAfter, MAX_KEPT_RAW};

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
        RetryAfter::Missing => panic!("a present value is never missing"),
    }
    // Several fields are never valid.
    assert!(!RetryAfter::from_values([data, data]).is_valid());
});
