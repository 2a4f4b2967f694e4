//! Property tests of the cross-request budget's arithmetic: for any ratio in
//! `(0, 10]`, any reserve and window, and any sequence of first attempts and
//! retries in time, a retry is granted exactly when the window can pay it,
//! so the budget never over-allocates (tower issue #857) nor under-allocates.

use std::time::Duration;

use proptest::prelude::*;
use retry_budget::ratio::{Ratio, RatioBudget};

/// A ratio in `(0, 10]`: either a decimal (to the millionth, as
/// `Ratio::from_f64` takes it) or any exact fraction.
fn ratio() -> impl Strategy<Value = Ratio> {
    prop_oneof![
        (1u32..=10_000_000).prop_map(|ppm| {
            let ratio = Ratio::from_f64(f64::from(ppm) / 1e6).unwrap();
            assert_eq!(ratio, Ratio::new(ppm, 1_000_000).unwrap(), "{ppm}");
            ratio
        }),
        (1u32..=1_000, 1u32..=1_000)
            .prop_filter("at most 10", |(n, d)| *n <= 10 * *d)
            .prop_map(|(n, d)| Ratio::new(n, d).unwrap()),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Deposit,
    Withdraw,
}

/// Operations at non-decreasing times (steps of up to 3 s).
fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 2 => 0u64..=3_000],
            prop_oneof![Just(Op::Deposit), Just(Op::Withdraw)],
        ),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// At one instant, `D` first attempts buy exactly
    /// `floor(reserve + ratio × D)` retries.
    #[test]
    fn grants_exactly_floor_of_reserve_plus_ratio_times_first_attempts(
        ratio in ratio(),
        min_per_sec in 0u32..=5,
        window_s in 1u64..=60,
        deposits in 0u64..=300,
    ) {
        let mut budget = RatioBudget::new(ratio, min_per_sec, Duration::from_secs(window_s)).unwrap();
        let now = Duration::from_millis(1_234);
        for _ in 0..deposits {
            budget.deposit(now);
        }
        let reserve = u128::from(min_per_sec) * u128::from(window_s);
        let expected = reserve
            + u128::from(ratio.numerator()) * u128::from(deposits) / u128::from(ratio.denominator());
        prop_assert_eq!(u128::from(budget.available(now)), expected);
        let mut granted = 0u128;
        while budget.withdraw(now) {
            granted += 1;
            prop_assert!(granted <= expected, "over-allocation");
        }
        prop_assert_eq!(granted, expected);
        prop_assert_eq!(budget.available(now), 0);
    }

    /// Over time, against a plain model of the window: the answer to every
    /// withdrawal is exactly "the retries in the window, this one included,
    /// are at most reserve + ratio × the first attempts in the window".
    #[test]
    fn every_answer_matches_the_window_model(
        ratio in ratio(),
        min_per_sec in 0u32..=3,
        window_ms in 1_000u64..=60_000,
        ops in ops(),
    ) {
        let window = Duration::from_millis(window_ms);
        let mut budget = RatioBudget::new(ratio, min_per_sec, window).unwrap();
        let width = u128::from(window_ms) * 1_000_000 / 10;
        let reserve = u128::from(min_per_sec) * u128::from(window_ms) / 1000;
        let (num, den) = (u128::from(ratio.numerator()), u128::from(ratio.denominator()));
        // The model: (bucket number, op) of every event recorded.
        let mut log: Vec<(u128, bool)> = Vec::new();
        let mut now_ms = 0u64;
        for (step, op) in ops {
            now_ms += step;
            let now = Duration::from_millis(now_ms);
            let bucket = now.as_nanos() / width;
            let live = |log: &[(u128, bool)], want: bool| {
                log.iter().filter(|(b, w)| *w == want && b + 10 > bucket).count() as u128
            };
            match op {
                Op::Deposit => {
                    budget.deposit(now);
                    log.push((bucket, false));
                }
                Op::Withdraw => {
                    let first = live(&log, false);
                    let retries = live(&log, true);
                    let fits = (retries + 1) * den <= reserve * den + num * first;
                    prop_assert_eq!(budget.withdraw(now), fits, "at {} ms", now_ms);
                    if fits {
                        log.push((bucket, true));
                    }
                }
            }
            prop_assert_eq!(
                budget.counts(now),
                (live(&log, false) as u64, live(&log, true) as u64)
            );
        }
    }
}
