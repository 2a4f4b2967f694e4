//! Many actions at once, in the core, one small scenario per test: jitter on the local
//! fallback, a retry refused by the client's shared budget, the shared
//! hold-off before a first attempt, and the error categories of the visible
//! status. Default policy (20 s budget, 3 attempts, 4 s cap, 1 s floor,
//! fallback `2^k` s) unless a test builds its own.

use std::time::{Duration, SystemTime};

use retry_budget::{
    retry_after::RetryAfter,
    trail::{EventKind, WaitBasis},
    Action, Category, Decision, Jitter, Outcome, Policy, Report,
};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn ra(value: &str) -> RetryAfter {
    RetryAfter::parse(value)
}

fn jittered(jitter: Jitter) -> Policy {
    Policy::builder().jitter(jitter).build().unwrap()
}

/// The first fallback wait of an action with this policy and seed: first
/// attempt 0–1 s, 429 without Retry-After.
fn first_wait(policy: Policy, seed: u64) -> Duration {
    let mut action = Action::with_seed(policy, seed);
    action.attempt_started(s(0));
    match action.response(s(1), 429, &RetryAfter::Missing, None) {
        Decision::WaitUntil(until) => until - s(1),
        other => panic!("expected a wait, got {other:?}"),
    }
}

/// Every wait planned by an action that gets 429 without Retry-After on
/// every attempt, each answered at once.
fn planned_waits(policy: Policy, seed: u64) -> Vec<Duration> {
    let mut action = Action::with_seed(policy, seed);
    let mut now = s(0);
    let mut waits = Vec::new();
    loop {
        action.attempt_started(now);
        match action.response(now, 429, &RetryAfter::Missing, None) {
            Decision::WaitUntil(until) => {
                waits.push(until - now);
                now = until;
                assert_eq!(action.timer_woke(now), Decision::StartNow);
            }
            Decision::Stop(_) => return waits,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn report(action: &Action) -> Report {
    action.report().expect("the action has stopped")
}

// ---- jitter ----

#[test]
fn without_jitter_the_fallback_is_exactly_two_then_four_seconds() {
    let generous = Policy::builder()
        .total_budget(s(60))
        .max_attempts(4)
        .build()
        .unwrap();
    assert_eq!(planned_waits(generous, 1), [s(2), s(4), s(8)]);
    assert_eq!(planned_waits(generous, 2), [s(2), s(4), s(8)]);
}

#[test]
fn a_seed_reproduces_the_jittered_waits_exactly() {
    let policy = Policy::builder()
        .total_budget(s(60))
        .max_attempts(5)
        .jitter(Jitter::Decorrelated)
        .fallback_cap(s(8))
        .build()
        .unwrap();
    for seed in [0, 1, 42, u64::MAX] {
        assert_eq!(planned_waits(policy, seed), planned_waits(policy, seed));
    }
    let spread: std::collections::BTreeSet<_> =
        (0..20).map(|seed| planned_waits(policy, seed)).collect();
    assert!(spread.len() > 15, "different seeds spread: {spread:?}");
}

#[test]
fn full_jitter_stays_between_the_floor_and_the_fallback() {
    let waits: Vec<_> = (0..500)
        .map(|seed| first_wait(jittered(Jitter::Full), seed))
        .collect();
    assert!(waits.iter().all(|w| (s(1)..=s(2)).contains(w)), "{waits:?}");
    assert!(waits.iter().any(|w| *w < ms(1_100)) && waits.iter().any(|w| *w > ms(1_900)));
    assert!(
        waits.iter().all(|w| w.subsec_nanos() % 1_000_000 == 0),
        "whole ms"
    );
}

#[test]
fn full_jitter_never_goes_below_the_floor() {
    // min_wait 1.5 s: full jitter of the 2 s fallback stays in [1.5, 2].
    let policy = Policy::builder()
        .min_wait(ms(1_500))
        .jitter(Jitter::Full)
        .build()
        .unwrap();
    let lowest = (0..500).map(|seed| first_wait(policy, seed)).min().unwrap();
    assert!(lowest >= ms(1_500), "{lowest:?}");
}

#[test]
fn equal_jitter_keeps_at_least_half() {
    let policy = Policy::builder()
        .total_budget(s(60))
        .jitter(Jitter::Equal)
        .build()
        .unwrap();
    for seed in 0..300 {
        let waits = planned_waits(policy, seed);
        assert!((s(1)..=s(2)).contains(&waits[0]), "{waits:?}");
        assert!((s(2)..=s(4)).contains(&waits[1]), "{waits:?}");
    }
}

#[test]
fn decorrelated_jitter_grows_from_the_previous_wait_and_respects_the_cap() {
    let policy = Policy::builder()
        .total_budget(s(60))
        .max_attempts(6)
        .jitter(Jitter::Decorrelated)
        .fallback_cap(s(8))
        .build()
        .unwrap();
    for seed in 0..300 {
        let waits = planned_waits(policy, seed);
        let mut previous = s(2);
        for wait in &waits {
            let high = (previous * 3).min(s(8));
            assert!((s(2)..=high).contains(wait), "seed {seed}: {waits:?}");
            previous = *wait;
        }
    }
}

#[test]
fn additive_jitter_only_lengthens_like_the_source() {
    // The source: min(2^attempt s, 8 s) + random × 0.5 s.
    let policy = Policy::builder()
        .jitter(Jitter::Additive(ms(500)))
        .fallback_cap(s(8))
        .build()
        .unwrap();
    for seed in 0..300 {
        let wait = first_wait(policy, seed);
        assert!((s(2)..=ms(2_500)).contains(&wait), "{wait:?}");
    }
}

#[test]
fn jitter_never_touches_a_servers_retry_after() {
    for jitter in [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::Additive(s(3)),
    ] {
        for seed in 0..50 {
            let mut action = Action::with_seed(jittered(jitter), seed);
            action.attempt_started(s(0));
            assert_eq!(
                action.response(s(1), 429, &ra("3"), None),
                Decision::WaitUntil(s(4)),
                "{jitter:?}"
            );
        }
    }
}

#[test]
fn the_reservation_rule_still_decides_every_jittered_start() {
    // Additive jitter of up to 10 s on a 2 s fallback after a 429 at 10 s:
    // the next start (12 + extra) fits only if it is at most 16.
    let policy = jittered(Jitter::Additive(s(10)));
    let (mut waited, mut stopped) = (0, 0);
    for seed in 0..300 {
        let mut action = Action::with_seed(policy, seed);
        action.attempt_started(s(0));
        match action.response(s(10), 429, &RetryAfter::Missing, None) {
            Decision::WaitUntil(until) => {
                assert!(until + s(4) <= s(20), "{until:?}");
                waited += 1;
            }
            Decision::Stop(Outcome::BudgetExhausted) => stopped += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        waited > 0 && stopped > 0,
        "{waited} waited, {stopped} stopped"
    );
}

#[test]
fn the_trail_records_the_wait_before_jitter() {
    let mut action = Action::with_seed(jittered(Jitter::Full), 9);
    action.attempt_started(s(0));
    action.response(s(1), 429, &RetryAfter::Missing, None);
    let basis = action.events().iter().find_map(|e| match &e.kind {
        EventKind::WaitPlanned { basis, .. } => Some(*basis),
        _ => None,
    });
    assert_eq!(
        basis,
        Some(WaitBasis::FallbackJittered {
            completed: 1,
            unjittered: s(2)
        })
    );
}

// ---- the client's shared retry budget refuses a retry ----

#[test]
fn a_refused_retry_stops_at_once_as_retry_throttled() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("1"), None),
        Decision::WaitUntil(s(3))
    );
    assert_eq!(
        action.retry_refused(s(2)),
        Decision::Stop(Outcome::RetryThrottled)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, s(2));
    assert_eq!(report.wait_time, s(0));
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(
        report.to_string(),
        "Stopped: the client's shared retry budget refused the next request.\n\
         Last response: 429. Attempts: 1 / 3. Elapsed: 2 s.\n\
         The service asked to wait 1 s; no retry was sent.\n\
         Category: rate_limit. The service is limiting requests; trying later may work."
    );
    assert_eq!(report.to_json()["outcome"], "retry_throttled");
}

#[test]
fn a_refusal_outside_a_planned_retry_changes_nothing() {
    let mut action = Action::new(Policy::default());
    assert_eq!(action.retry_refused(s(0)), Decision::StartNow);
    action.attempt_started(s(0));
    assert!(matches!(
        action.retry_refused(s(1)),
        Decision::AwaitResponse { .. }
    ));
    // A hold-off wait is no retry.
    let mut held = Action::new(Policy::default());
    held.hold_off(s(0), s(5));
    assert_eq!(held.retry_refused(s(0)), Decision::WaitUntil(s(5)));
}

// ---- the shared hold-off ----

#[test]
fn server_asked_until_is_kept_even_when_the_action_stops() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("30"), None);
    assert_eq!(action.outcome(), Some(Outcome::BudgetExhausted));
    assert_eq!(action.server_asked_until(), Some(s(32)));
}

#[test]
fn server_asked_until_applies_the_floor_and_needs_a_usable_429() {
    let asked = |status: u16, value: RetryAfter, calendar: Option<SystemTime>| {
        let mut action = Action::new(Policy::default());
        action.attempt_started(s(0));
        action.response(s(2), status, &value, calendar);
        action.server_asked_until()
    };
    assert_eq!(asked(429, ra("0"), None), Some(s(3)), "1 s floor");
    assert_eq!(asked(429, RetryAfter::Missing, None), None);
    assert_eq!(asked(429, ra("soon"), None), None);
    assert_eq!(asked(503, ra("5"), None), None, "429 only");
    let date = ra("Mon, 01 Jan 2024 12:00:06 GMT");
    assert_eq!(asked(429, date.clone(), None), None, "no trusted calendar");
    let epoch = httpdate::parse_http_date("Mon, 01 Jan 2024 12:00:00 GMT").unwrap();
    assert_eq!(asked(429, date, Some(epoch)), Some(s(8)));
}

#[test]
fn server_asked_until_is_forgotten_when_the_next_attempt_starts() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.response(s(1), 429, &ra("2"), None);
    assert_eq!(action.server_asked_until(), Some(s(3)));
    action.timer_woke(s(3));
    action.attempt_started(s(3));
    assert_eq!(action.server_asked_until(), None);
}

#[test]
fn a_hold_off_that_fits_delays_the_first_attempt() {
    let mut action = Action::new(Policy::default());
    assert_eq!(action.hold_off(s(0), s(6)), Decision::WaitUntil(s(6)));
    assert_eq!(action.timer_woke(s(6)), Decision::StartNow);
    assert_eq!(
        action.attempt_started(s(6)),
        Decision::AwaitResponse {
            attempt: 1,
            deadline: s(10)
        }
    );
    action.response(s(7), 200, &RetryAfter::Missing, None);
    let report = report(&action);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.starts(), [s(6)]);
    assert_eq!(report.waits(), [(s(0), s(6))]);
    assert_eq!(report.wait_time, s(6));
}

#[test]
fn a_hold_off_that_does_not_fit_stops_without_sending() {
    let mut action = Action::new(Policy::default());
    assert_eq!(
        action.hold_off(s(0), s(25)),
        Decision::Stop(Outcome::HeldOff)
    );
    let report = report(&action);
    assert_eq!(report.attempts_started, 0);
    assert_eq!(report.last_status, None);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(
        report.to_string(),
        "Stopped: the service asked this client to wait longer than the budget allows; nothing was sent.\n\
         Last response: none. Attempts: 0 / 3. Elapsed: 0 s.\n\
         Another request to this service was told to wait 25 s more; this one was not sent.\n\
         Category: rate_limit. The service is limiting requests; trying later may work."
    );
}

#[test]
fn a_hold_off_ending_exactly_at_the_latest_start_fits() {
    let mut action = Action::new(Policy::default());
    assert_eq!(action.hold_off(s(0), s(16)), Decision::WaitUntil(s(16)));
    let mut late = Action::new(Policy::default());
    assert_eq!(
        late.hold_off(s(0), s(16) + Duration::from_nanos(1)),
        Decision::Stop(Outcome::HeldOff)
    );
}

#[test]
fn a_past_hold_off_or_one_after_the_first_attempt_changes_nothing() {
    let mut action = Action::new(Policy::default());
    assert_eq!(action.hold_off(s(2), s(1)), Decision::StartNow);
    action.attempt_started(s(2));
    assert!(matches!(
        action.hold_off(s(2), s(10)),
        Decision::AwaitResponse { .. }
    ));
    assert_eq!(action.events().len(), 1);
}

#[test]
fn leaving_during_a_hold_off_is_cancelled_with_nothing_sent() {
    let mut action = Action::new(Policy::default());
    action.hold_off(s(0), s(6));
    assert_eq!(action.caller_left(s(2)), Decision::Stop(Outcome::Cancelled));
    let report = report(&action);
    assert_eq!(report.attempts_started, 0);
    assert_eq!(report.waits(), [(s(0), s(2))]);
    assert_eq!(report.category(), Some(Category::Cancelled));
}

// ---- categories in the visible status and the JSON ----

fn ended_with(status: u16) -> Report {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.response(s(1), status, &RetryAfter::Missing, None);
    report(&action)
}

#[test]
fn quota_says_retrying_will_not_help() {
    let report = ended_with(402);
    assert_eq!(report.outcome, Outcome::NotRetryable);
    assert_eq!(report.attempts_started, 1, "402 is never retried");
    let text = report.to_string();
    assert_eq!(
        text.lines().last(),
        Some(
            "Category: quota. The quota is used up; retrying will not help: top up or switch plan."
        )
    );
    assert_eq!(report.to_json()["category"], "quota");
}

#[test]
fn credentials_problems_say_check_the_configuration() {
    for status in [401, 403] {
        let report = ended_with(status);
        assert_eq!(report.category(), Some(Category::NotConfigured));
        assert!(report.to_string().ends_with(
            "Category: not_configured. The service refused the credentials; check the configuration."
        ));
    }
}

#[test]
fn every_category_has_its_own_hint() {
    let all = [
        Category::RateLimit,
        Category::Quota,
        Category::NotConfigured,
        Category::ClientError,
        Category::ServerError,
        Category::Timeout,
        Category::Transport,
        Category::Cancelled,
    ];
    let mut hints: Vec<_> = all.iter().map(|c| c.hint()).collect();
    hints.sort_unstable();
    hints.dedup();
    assert_eq!(hints.len(), all.len());
}

#[test]
fn success_has_no_category_and_the_json_says_null() {
    let report = ended_with(200);
    assert_eq!(report.category(), None);
    assert!(!report.to_string().contains("Category"));
    let json = report.to_json();
    assert!(json["category"].is_null());
    assert_eq!(json["shared_with"], 0);
}

#[test]
fn new_outcomes_have_snake_case_names() {
    assert_eq!(Outcome::RetryThrottled.as_str(), "retry_throttled");
    assert_eq!(Outcome::HeldOff.as_str(), "held_off");
    assert_eq!(Outcome::from_name("held_off"), Some(Outcome::HeldOff));
    assert_eq!(
        serde_json::to_value(Outcome::RetryThrottled).unwrap(),
        "retry_throttled"
    );
}
