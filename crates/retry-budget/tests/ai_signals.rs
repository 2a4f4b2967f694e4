//! What OpenAI's and Anthropic's APIs send besides `Retry-After`, told to
//! the core: `retry-after-ms`, `x-should-retry`, reset headers as Go
//! durations and RFC 3339 times, and a quota used up.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use retry_budget::api_signals::{RetryAfterMs, ShouldRetry};
use retry_budget::reset::{ResetFormat, ResetHeaders, ResetIgnored};
use retry_budget::retry_after::RetryAfter;
use retry_budget::trail::{EventKind, ResetRead, WaitBasis};
use retry_budget::{Action, Answer, Category, Decision, Outcome, Policy};

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn started() -> Action {
    let mut action = Action::with_seed(Policy::default(), 1);
    action.attempt_started(s(0));
    action
}

fn planned(action: &Action) -> Option<(Duration, WaitBasis)> {
    action.events().iter().find_map(|e| match e.kind {
        EventKind::WaitPlanned { wait, basis, .. } => Some((wait, basis)),
        _ => None,
    })
}

fn ms_readings(action: &Action) -> Vec<(String, ResetRead)> {
    action
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RetryAfterMs { raw, reading, .. } => Some((raw.to_string(), *reading)),
            _ => None,
        })
        .collect()
}

#[test]
fn retry_after_ms_alone_is_the_servers_delay_not_the_fallback() {
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(429, &missing).retry_after_ms(RetryAfterMs::parse("2500")),
    );
    assert_eq!(next, Decision::WaitUntil(ms(3500)));
    assert_eq!(
        planned(&action),
        Some((
            ms(2500),
            WaitBasis::Server {
                requested: ms(2500)
            }
        ))
    );
    assert_eq!(
        ms_readings(&action),
        vec![(
            "2500".into(),
            ResetRead::Wait {
                wait: ms(2500),
                used: true
            }
        )]
    );
    assert_eq!(action.server_asked_until(), Some(ms(3500)));
}

#[test]
fn retry_after_ms_and_retry_after_the_longest_counts() {
    // Retry-After longer: it counts, the ms value is recorded as not used.
    let mut action = started();
    let three = RetryAfter::parse("3");
    let next = action.respond(
        s(1),
        Answer::new(429, &three).retry_after_ms(RetryAfterMs::parse("2500")),
    );
    assert_eq!(next, Decision::WaitUntil(s(4)));
    assert_eq!(
        ms_readings(&action)[0].1,
        ResetRead::Wait {
            wait: ms(2500),
            used: false
        }
    );

    // retry-after-ms longer (fractional): never sooner than it asked.
    let mut action = started();
    let two = RetryAfter::parse("2");
    let next = action.respond(
        s(1),
        Answer::new(429, &two).retry_after_ms(RetryAfterMs::parse("2000.5")),
    );
    assert_eq!(next, Decision::WaitUntil(s(3) + Duration::from_micros(500)));

    // Below the local floor: raised to it, as any server delay.
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(429, &missing).retry_after_ms(RetryAfterMs::parse("20")),
    );
    assert_eq!(next, Decision::WaitUntil(s(2)));
}

#[test]
fn invalid_retry_after_ms_is_recorded_and_ignored() {
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(429, &missing).retry_after_ms(RetryAfterMs::from_values([&b"-5"[..], b"1e3"])),
    );
    // The 2 s fallback.
    assert_eq!(next, Decision::WaitUntil(s(3)));
    let ignored = ResetRead::Ignored {
        why: ResetIgnored::Malformed,
    };
    assert_eq!(
        ms_readings(&action),
        vec![("-5".into(), ignored), ("1e3".into(), ignored)]
    );
    assert!(matches!(
        planned(&action),
        Some((_, WaitBasis::Fallback { completed: 1 }))
    ));
}

#[test]
fn a_retry_after_ms_beyond_the_budget_stops_at_once_and_says_so() {
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(429, &missing).retry_after_ms(RetryAfterMs::parse("30000")),
    );
    assert_eq!(next, Decision::Stop(Outcome::BudgetExhausted));
    let report = action.report().unwrap();
    assert_eq!(report.server_requested_wait, Some(s(30)));
    assert!(
        report.to_string().contains(
            "The service asked to wait 30 s (its retry-after-ms header); no retry was sent."
        ),
        "{report}"
    );
}

#[test]
fn a_retry_after_date_no_clock_can_measure_stays_unmeasurable() {
    let mut action = started();
    let date = RetryAfter::parse("Sun, 06 Nov 2094 08:49:37 GMT");
    let next = action.respond(
        s(1),
        Answer::new(429, &date).retry_after_ms(RetryAfterMs::parse("1000")),
    );
    assert_eq!(next, Decision::Stop(Outcome::ClockUntrusted));
}

#[test]
fn retry_after_ms_on_a_status_not_retried_is_not_read() {
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(503, &missing).retry_after_ms(RetryAfterMs::parse("1000")),
    );
    assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
    assert!(ms_readings(&action).is_empty());
}

#[test]
fn should_retry_false_forbids_and_the_trail_names_the_header() {
    let mut action = started();
    let one = RetryAfter::parse("1");
    let next = action.respond(
        s(1),
        Answer::new(429, &one).should_retry(ShouldRetry::parse("x-should-retry", b"false")),
    );
    assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
    let kinds: Vec<_> = action.events().iter().map(|e| e.kind.clone()).collect();
    assert!(kinds.contains(&EventKind::ShouldRetry {
        attempt: 1,
        header: "x-should-retry".into(),
        raw: "false".into(),
        says: Some(false),
    }));
    assert!(kinds.contains(&EventKind::RetryForbidden { attempt: 1 }));
    let report = action.report().unwrap();
    assert!(report
        .to_string()
        .starts_with("Stopped: the service asked not to retry this request."));
    assert_eq!(report.category(), Some(Category::RateLimit));
}

#[test]
fn should_retry_true_or_junk_changes_nothing() {
    for raw in [&b"true"[..], b"maybe", b"FALSE"] {
        let mut action = started();
        let one = RetryAfter::parse("1");
        let next = action.respond(
            s(1),
            Answer::new(429, &one).should_retry(ShouldRetry::parse("x-should-retry", raw)),
        );
        assert_eq!(next, Decision::WaitUntil(s(2)), "{raw:?}");
        assert!(action
            .events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::ShouldRetry { .. })));
    }
    // `true` on a status the policy does not retry: still not retried.
    for status in [500, 503, 400, 409] {
        let mut action = started();
        let missing = RetryAfter::Missing;
        let next = action.respond(
            s(1),
            Answer::new(status, &missing)
                .should_retry(ShouldRetry::parse("x-should-retry", b"true")),
        );
        assert_eq!(next, Decision::Stop(Outcome::NotRetryable), "{status}");
    }
}

#[test]
fn should_retry_false_is_checked_before_attempts_left() {
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    let missing = RetryAfter::Missing;
    let next = action.respond(
        s(1),
        Answer::new(429, &missing).should_retry(ShouldRetry::parse("x-should-retry", b"false")),
    );
    assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
}

#[test]
fn a_quota_used_up_is_not_retryable_with_the_quota_category_and_hint() {
    let mut action = started();
    let one = RetryAfter::parse("1");
    let next = action.respond(
        s(1),
        Answer::new(429, &one)
            .quota("insufficient_quota")
            .should_retry(ShouldRetry::parse("x-should-retry", b"true")),
    );
    assert_eq!(next, Decision::Stop(Outcome::NotRetryable));
    let report = action.report().unwrap();
    assert_eq!(report.attempts_started, 1);
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.category(), Some(Category::Quota));
    assert!(report.events.iter().any(|e| e.kind
        == EventKind::QuotaExhausted {
            attempt: 1,
            code: "insufficient_quota".into()
        }));
    let text = report.to_string();
    assert!(
        text.starts_with(
            "Stopped: the service says the quota is used up (insufficient_quota); retrying will not help."
        ),
        "{text}"
    );
    assert!(text.contains(Category::Quota.hint()), "{text}");
    // Without the word, the same 429 is a rate limit, retried.
    let mut plain = started();
    assert_eq!(
        plain.respond(s(1), Answer::new(429, &one)),
        Decision::WaitUntil(s(2))
    );
}

#[test]
fn a_quota_on_a_status_not_retried_changes_nothing() {
    let mut action = started();
    let missing = RetryAfter::Missing;
    let next = action.respond(s(1), Answer::new(200, &missing).quota("insufficient_quota"));
    assert_eq!(next, Decision::Stop(Outcome::Success));
    assert_eq!(action.report().unwrap().category(), None);
}

#[test]
fn openai_and_anthropic_reset_headers() {
    // OpenAI: Go durations, the longest counting, no calendar needed.
    let mut action = started();
    let missing = RetryAfter::Missing;
    let mut resets = ResetHeaders::new(None);
    resets.push("x-ratelimit-reset-requests", ResetFormat::Duration, b"1.5s");
    resets.push("x-ratelimit-reset-tokens", ResetFormat::Duration, b"6s");
    let next = action.respond(s(1), Answer::new(429, &missing).resets(resets));
    assert_eq!(next, Decision::WaitUntil(s(7)));

    // A reset header never shortens a longer retry-after-ms.
    let mut action = started();
    let mut resets = ResetHeaders::new(None);
    resets.push("x-ratelimit-reset-requests", ResetFormat::Duration, b"1s");
    let next = action.respond(
        s(1),
        Answer::new(429, &missing)
            .retry_after_ms(RetryAfterMs::parse("4000"))
            .resets(resets),
    );
    assert_eq!(next, Decision::WaitUntil(s(5)));

    // Anthropic: RFC 3339, with the trusted calendar.
    let now = SystemTime::UNIX_EPOCH + s(1_796_148_000 - 5);
    let mut action = started();
    let mut resets = ResetHeaders::new(None);
    resets.push(
        "anthropic-ratelimit-requests-reset",
        ResetFormat::Rfc3339,
        b"2026-12-01T18:00:00Z",
    );
    let next = action.respond(
        s(1),
        Answer::new(429, &missing)
            .calendar(Some(now))
            .resets(resets.clone()),
    );
    assert_eq!(next, Decision::WaitUntil(s(6)));

    // Without a calendar it is ignored (and recorded), the fallback applies.
    let mut action = started();
    let next = action.respond(s(1), Answer::new(429, &missing).resets(resets));
    assert_eq!(next, Decision::WaitUntil(s(3)));
    assert!(action.events().iter().any(|e| matches!(
        e.kind,
        EventKind::ResetHeader {
            reading: ResetRead::Ignored {
                why: ResetIgnored::NoTrustedCalendar
            },
            ..
        }
    )));
}

proptest! {
    /// No header value can panic a parser or the core: arbitrary bytes as
    /// `retry-after-ms`, `x-should-retry` and reset headers in the new
    /// formats, with or without a calendar reading.
    #[test]
    fn no_value_panics(
        raw in proptest::collection::vec(any::<u8>(), 0..48),
        text in "[0-9.:TZtz+\\-µμnsuhm ]{0,32}",
        calendar in proptest::option::of(0u64..=u64::MAX / 4),
    ) {
        let calendar = calendar
            .map(|secs| SystemTime::UNIX_EPOCH.checked_add(s(secs)).unwrap_or(SystemTime::UNIX_EPOCH));
        for value in [&raw[..], text.as_bytes()] {
            let mut resets = ResetHeaders::new(Some(s(3600)));
            resets.push("d", ResetFormat::Duration, value);
            resets.push("r", ResetFormat::Rfc3339, value);
            let _ = resets.read(calendar).count();
            let mut action = started();
            let missing = RetryAfter::Missing;
            let next = action.respond(
                s(1),
                Answer::new(429, &missing)
                    .calendar(calendar)
                    .retry_after_ms(RetryAfterMs::from_values([value]))
                    .should_retry(ShouldRetry::parse("x-should-retry", value))
                    .resets(resets),
            );
            prop_assert!(matches!(next, Decision::WaitUntil(_) | Decision::Stop(_)));
        }
    }
}
