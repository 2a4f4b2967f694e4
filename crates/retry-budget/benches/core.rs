//! Per-operation cost of the pure core: parsing `Retry-After` in each form,
//! and one decision step of the state machine.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use retry_budget::{retry_after::RetryAfter, Action, Policy};

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry_after");
    for (name, value) in [
        ("delay_seconds", "120"),
        ("imf_fixdate", "Mon, 01 Jan 2024 12:00:06 GMT"),
        ("rfc850", "Monday, 01-Jan-24 12:00:06 GMT"),
        ("asctime", "Mon Jan  1 12:00:06 2024"),
        ("invalid", "tomorrow"),
    ] {
        group.bench_function(name, |b| b.iter(|| RetryAfter::parse(black_box(value))));
    }
    group.finish();
}

fn step(c: &mut Criterion) {
    let policy = Policy::default();
    let retry_after = RetryAfter::parse("3");
    let calendar = Some(SystemTime::UNIX_EPOCH);
    let mut group = c.benchmark_group("action");
    group.bench_function("new_and_first_start", |b| {
        b.iter(|| {
            let mut action = Action::new(black_box(policy));
            black_box(action.attempt_started(Duration::ZERO));
            action
        })
    });
    group.bench_function("response_429_decision", |b| {
        b.iter_batched_ref(
            || {
                let mut action = Action::new(policy);
                action.attempt_started(Duration::ZERO);
                action
            },
            |action| {
                black_box(action.response(
                    Duration::from_secs(2),
                    429,
                    black_box(&retry_after),
                    calendar,
                ))
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, parse, step);
criterion_main!(benches);
