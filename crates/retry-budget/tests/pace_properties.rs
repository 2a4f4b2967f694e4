//! Properties of the quota reader and the pacer over arbitrary inputs: no
//! header and no sequence of observations makes them panic, hold a start
//! past the maximum hold, or let more first attempts into a window than it
//! announced.

use std::time::{Duration, SystemTime};

use proptest::collection::vec;
use proptest::prelude::*;
use retry_budget::pace::{
    Admission, LimitKind, Pacer, PacerConfig, Placement, QuotaReader, QuotaState, MAX_LIMITS,
    MAX_NAME_LEN,
};
use retry_budget::reset::ResetFormat;

const NAMES: [&str; 16] = [
    "RateLimit",
    "RateLimit-Policy",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Limit",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "Retry-After",
];

/// Values near the formats (so that many parse) and arbitrary bytes.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..40),
        "[-0-9a-z\";=,. :TZ+()]{0,40}".prop_map(String::into_bytes),
        (any::<i64>(), any::<i64>()).prop_map(|(r, t)| format!("\"p\";r={r};t={t}").into_bytes()),
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        (any::<u32>(), "(ms|s|m|h|us)").prop_map(|(n, u)| format!("{n}{u}").into_bytes()),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, Vec<u8>)>> {
    vec((prop::sample::select(&NAMES[..]), value()), 0..12)
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

fn state() -> impl Strategy<Value = QuotaState> {
    (
        prop::sample::select(vec!["a", "b"]),
        any::<bool>(),
        prop_oneof![0u64..20, any::<u64>()],
        duration(),
        proptest::option::of(prop_oneof![0u64..20, any::<u64>()]),
        proptest::option::of(duration()),
    )
        .prop_map(
            |(name, tokens, remaining, reset, quota, window)| QuotaState {
                name: name.to_owned(),
                kind: if tokens {
                    LimitKind::Tokens
                } else {
                    LimitKind::Requests
                },
                remaining,
                reset,
                quota,
                window,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Admit(Duration),
    Observe {
        sent_back: Duration,
        advance: Duration,
        states: Vec<QuotaState>,
    },
    Release(usize),
    /// An admitted (or planned) start sent after this advance.
    Sent(usize, Duration),
    /// A retry planned after a wait.
    Retry(Duration),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => duration().prop_map(Op::Admit),
        2 => (duration(), duration(), vec(state(), 0..4)).prop_map(|(sent_back, advance, states)| {
            Op::Observe { sent_back, advance, states }
        }),
        1 => any::<usize>().prop_map(Op::Release),
        1 => (any::<usize>(), duration()).prop_map(|(i, advance)| Op::Sent(i, advance)),
        1 => duration().prop_map(Op::Retry),
    ]
}

fn config() -> impl Strategy<Value = PacerConfig> {
    (
        duration(),
        duration(),
        prop_oneof![Just(0u64), any::<u64>()],
        any::<bool>(),
    )
        .prop_map(|(max_hold, spread, token_threshold, burst)| PacerConfig {
            max_hold,
            spread,
            token_threshold,
            placement: if burst {
                Placement::Burst
            } else {
                Placement::Even
            },
        })
}

proptest! {
    #[test]
    fn the_reader_never_panics_and_bounds_what_it_keeps(
        headers in headers(),
        max_hold in duration(),
        calendar in proptest::option::of(any::<u64>()),
        x_reset in proptest::option::of(prop::sample::select(vec![ResetFormat::Seconds, ResetFormat::Unix])),
    ) {
        let reader = QuotaReader::new().max_hold(max_hold).x_ratelimit_reset(x_reset);
        let calendar = calendar.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s % 400_000_000_000));
        let reading = reader.read(headers.iter().map(|(n, v)| (*n, &v[..])), calendar);
        prop_assert!(reading.states.len() <= MAX_LIMITS);
        for state in &reading.states {
            prop_assert!(state.reset <= max_hold);
            prop_assert!(state.name.len() <= MAX_NAME_LEN);
        }
    }

    #[test]
    fn no_sequence_makes_the_pacer_panic_or_hold_past_the_maximum(
        config in config(),
        seed in any::<u64>(),
        ops in vec(op(), 0..40),
    ) {
        let mut pacer = Pacer::with_seed(config, seed);
        let mut now = Duration::ZERO;
        let mut admitted: Vec<Admission> = Vec::new();
        for op in ops {
            match op {
                Op::Admit(advance) => {
                    now = now.saturating_add(advance);
                    let admission = pacer.admit(now);
                    prop_assert!(admission.at >= now);
                    prop_assert!(admission.at - now <= config.max_hold, "{admission:?} at {now:?}");
                    if admission.at > now {
                        prop_assert!(admission.reason.is_some());
                    }
                    admitted.push(admission);
                }
                Op::Observe { sent_back, advance, states } => {
                    now = now.saturating_add(advance);
                    pacer.observe(now.saturating_sub(sent_back), now, &states);
                    for held in pacer.limits() {
                        prop_assert!(held.resets_at > now);
                        prop_assert!(held.resets_at - now <= config.max_hold);
                    }
                }
                Op::Release(i) => {
                    if !admitted.is_empty() {
                        pacer.release(&admitted[i % admitted.len()]);
                    }
                }
                Op::Sent(i, advance) => {
                    now = now.saturating_add(advance);
                    if !admitted.is_empty() {
                        pacer.sent(&admitted[i % admitted.len()], now);
                    }
                }
                Op::Retry(wait) => {
                    let planned = pacer.retry_planned(now, wait);
                    prop_assert!(planned.at >= now && planned.at - now <= config.max_hold);
                    admitted.push(planned);
                }
            }
        }
    }

    #[test]
    fn headers_read_then_paced_never_hold_past_the_maximum(
        responses in vec((headers(), 0u64..5_000, 0u64..500), 0..8),
        max_hold in (0u64..120_000).prop_map(Duration::from_millis),
    ) {
        let reader = QuotaReader::new();
        let mut pacer = Pacer::with_seed(PacerConfig { max_hold, ..PacerConfig::default() }, 3);
        let mut now = Duration::ZERO;
        for (headers, advance, latency) in responses {
            now += Duration::from_millis(advance);
            let admission = pacer.admit(now);
            prop_assert!(admission.at - now <= max_hold);
            let sent = admission.at;
            now = sent + Duration::from_millis(latency);
            let reading = reader.read(headers.iter().map(|(n, v)| (*n, &v[..])), None);
            pacer.observe(sent, now, &reading.states);
        }
    }

    #[test]
    fn no_more_first_attempts_start_before_the_reset_than_announced(
        remaining in 0u64..30,
        reset in 1u64..5_000,
        in_flight in 0usize..5,
        asked in 1usize..60,
        burst in any::<bool>(),
    ) {
        let placement = if burst { Placement::Burst } else { Placement::Even };
        let mut pacer = Pacer::with_seed(PacerConfig { placement, ..PacerConfig::default() }, 9);
        let ms = Duration::from_millis;
        // The announcing request, then `in_flight` more before its answer.
        pacer.admit(ms(0));
        for i in 0..in_flight {
            pacer.admit(ms(1 + i as u64));
        }
        let received = ms(100);
        pacer.observe(ms(0), received, &[QuotaState {
            name: "q".to_owned(),
            kind: LimitKind::Requests,
            remaining,
            reset: ms(reset),
            quota: None,
            window: None,
        }]);
        let resets_at = received + ms(reset);
        let before_reset = (0..asked)
            .map(|_| pacer.admit(received).at)
            .filter(|at| *at < resets_at)
            .count();
        let allowed = (remaining as usize).saturating_sub(in_flight);
        prop_assert!(before_reset <= allowed, "{before_reset} > {allowed}");
        prop_assert_eq!(before_reset, allowed.min(asked));
    }
}
