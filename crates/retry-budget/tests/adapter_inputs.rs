//! The questions an adapter asks the core instead of deciding itself
//!: a readiness failure in every phase, whether the request may
//! be moved instead of copied, and what to tell the client's shared state.
//! Every expected value is worked out by hand with the default policy (20 s
//! budget, 3 attempts, 4 s cap, 1 s floor, fallback `2^k` s).

use std::time::Duration;

use retry_budget::{
    retry_after::RetryAfter, trail::EventKind, Action, ClientEffects, Decision, Outcome, Policy,
};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ra(value: &str) -> RetryAfter {
    RetryAfter::parse(value)
}

fn effects(deposit: bool, withdraw: bool, hold_until: Option<Duration>) -> ClientEffects {
    let mut e = ClientEffects::default();
    e.deposit = deposit;
    e.withdraw = withdraw;
    e.hold_until = hold_until;
    e
}

fn last_two(action: &Action) -> Vec<EventKind> {
    let events = action.events();
    events[events.len() - 2..]
        .iter()
        .map(|e| e.kind.clone())
        .collect()
}

#[test]
fn readiness_failing_before_the_first_attempt_stops_as_a_transport_error() {
    let mut action = Action::new(Policy::default());
    assert_eq!(
        action.readiness_failed(s(0)),
        Decision::Stop(Outcome::TransportError)
    );
    assert_eq!(
        last_two(&action),
        [
            EventKind::TransportFailed { attempt: 1 },
            EventKind::Stopped {
                outcome: Outcome::TransportError
            }
        ]
    );
    let report = action.report().unwrap();
    assert_eq!(
        (report.attempts_started, report.last_status, report.elapsed),
        (0, None, s(0))
    );
}

#[test]
fn readiness_failing_after_a_hold_off_stops_at_the_wake() {
    let mut action = Action::new(Policy::default());
    assert_eq!(action.hold_off(s(0), s(3)), Decision::WaitUntil(s(3)));
    assert_eq!(action.timer_woke(s(3)), Decision::StartNow);
    assert_eq!(
        action.readiness_failed(s(5)),
        Decision::Stop(Outcome::TransportError)
    );
    let report = action.report().unwrap();
    assert_eq!(
        (report.attempts_started, report.elapsed, report.wait_time),
        (0, s(5), s(3))
    );
    assert_eq!(
        report.events[report.events.len() - 2].kind,
        EventKind::TransportFailed { attempt: 1 }
    );
}

#[test]
fn readiness_failing_after_a_wait_is_the_next_attempt_s_failure() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(1), 429, &ra("2"), None),
        Decision::WaitUntil(s(3))
    );
    assert_eq!(action.timer_woke(s(3)), Decision::StartNow);
    assert_eq!(
        action.readiness_failed(s(4)),
        Decision::Stop(Outcome::TransportError)
    );
    let report = action.report().unwrap();
    // The last response stays the last response.
    assert_eq!(
        (report.attempts_started, report.last_status),
        (1, Some(429))
    );
    assert_eq!(
        report.events[report.events.len() - 2].kind,
        EventKind::TransportFailed { attempt: 2 }
    );
}

#[test]
fn readiness_failure_outside_the_ready_phase_changes_nothing() {
    let mut action = Action::new(Policy::default());
    let in_flight = action.attempt_started(s(0));
    assert_eq!(action.readiness_failed(s(1)), in_flight);
    let waiting = action.response(s(1), 429, &ra("2"), None);
    assert_eq!(action.readiness_failed(s(2)), waiting);
    action.caller_left(s(2));
    let events = action.events().len();
    assert_eq!(
        action.readiness_failed(s(3)),
        Decision::Stop(Outcome::Cancelled)
    );
    assert_eq!(action.events().len(), events);
}

#[test]
fn the_last_possible_attempt_may_move_the_request() {
    let mut action = Action::new(Policy::default());
    assert!(action.retry_may_follow());
    action.attempt_started(s(0));
    assert!(action.retry_may_follow(), "attempt 1 of 3");
    action.response(s(1), 429, &ra("1"), None);
    assert!(action.retry_may_follow(), "attempt 2 of 3 next");
    action.timer_woke(s(2));
    action.attempt_started(s(2));
    assert!(action.retry_may_follow(), "attempt 2 of 3 in flight");
    action.response(s(3), 429, &ra("1"), None);
    action.timer_woke(s(4));
    assert!(!action.retry_may_follow(), "attempt 3 of 3 next");
    action.attempt_started(s(4));
    assert!(!action.retry_may_follow());

    let single = Policy::builder().max_attempts(1).build().unwrap();
    assert!(!Action::new(single).retry_may_follow());
    let mut stopped = Action::new(Policy::default());
    stopped.caller_left(s(0));
    assert!(!stopped.retry_may_follow());
}

#[test]
fn effects_are_answered_once_each() {
    let mut action = Action::new(Policy::default());
    assert!(action.client_effects().is_empty(), "nothing started yet");
    action.attempt_started(s(0));
    assert_eq!(action.client_effects(), effects(true, false, None));
    assert!(action.client_effects().is_empty());

    // A 429 with a delay: a retry to pay for, a hold-off to publish.
    action.response(s(1), 429, &ra("3"), None);
    assert_eq!(action.client_effects(), effects(false, true, Some(s(4))));
    assert!(action.client_effects().is_empty());

    // The retry: no second deposit; its 429 without a delay plans a wait
    // (fallback) but publishes nothing.
    action.timer_woke(s(4));
    action.attempt_started(s(4));
    assert!(action.client_effects().is_empty());
    action.response(s(5), 429, &RetryAfter::Missing, None);
    assert_eq!(action.client_effects(), effects(false, true, None));
}

#[test]
fn a_hold_off_wait_is_no_retry_and_a_stop_still_publishes_the_server_s_delay() {
    let mut action = Action::new(Policy::default());
    action.hold_off(s(0), s(2));
    assert!(
        action.client_effects().is_empty(),
        "no retry, nothing started"
    );
    action.timer_woke(s(2));
    action.attempt_started(s(2));
    assert_eq!(action.client_effects(), effects(true, false, None));
    // 30 s does not fit: the action stops, but the service asked every
    // client to wait until 3 + 30.
    assert_eq!(
        action.response(s(3), 429, &ra("30"), None),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    assert_eq!(action.client_effects(), effects(false, false, Some(s(33))));
}

#[test]
fn a_refused_withdrawal_is_told_back_and_stops_as_retry_throttled() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.client_effects();
    action.response(s(1), 429, &ra("1"), None);
    assert!(action.client_effects().withdraw);
    assert_eq!(
        action.retry_refused(s(1)),
        Decision::Stop(Outcome::RetryThrottled)
    );
    assert!(action.client_effects().is_empty());
}

#[test]
fn a_huge_delay_is_published_saturated() {
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.client_effects();
    action.response(s(1), 429, &ra("99999999999999999999"), None);
    assert_eq!(
        action.client_effects().hold_until,
        Some(s(1).saturating_add(s(u64::MAX)))
    );
}

mod properties {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use retry_budget::trail::WaitBasis;

    #[derive(Debug, Clone)]
    enum Input {
        Start(Duration),
        Response(Duration, u16, RetryAfter),
        Woke(Duration),
        ReadinessFailed(Duration),
        NotReady(Duration),
        HoldOff(Duration, Duration),
        Refused(Duration),
        Left(Duration),
    }

    fn when() -> impl Strategy<Value = Duration> {
        prop_oneof![
            8 => (0u64..=30_000).prop_map(Duration::from_millis),
            1 => Just(Duration::MAX),
        ]
    }

    fn input() -> impl Strategy<Value = Input> {
        let retry_after = prop_oneof![
            Just(RetryAfter::Missing),
            (0u64..30).prop_map(|s| RetryAfter::Seconds(Duration::from_secs(s))),
            any::<u64>().prop_map(|s| RetryAfter::Seconds(Duration::from_secs(s))),
        ];
        prop_oneof![
            4 => when().prop_map(Input::Start),
            4 => (when(), prop_oneof![Just(429u16), Just(200u16), Just(503u16)], retry_after)
                .prop_map(|(t, s, h)| Input::Response(t, s, h)),
            3 => when().prop_map(Input::Woke),
            1 => when().prop_map(Input::ReadinessFailed),
            1 => when().prop_map(Input::NotReady),
            1 => (when(), when()).prop_map(|(t, u)| Input::HoldOff(t, u)),
            1 => when().prop_map(Input::Refused),
            1 => when().prop_map(Input::Left),
        ]
    }

    fn policy() -> impl Strategy<Value = Policy> {
        (1u64..40, 1u32..5, 0u64..10).prop_filter_map("valid", |(budget, attempts, cap)| {
            Policy::builder()
                .total_budget(s(budget))
                .max_attempts(attempts)
                .attempt_cap(s(cap.min(budget)))
                .build()
                .ok()
        })
    }

    proptest! {
        /// The answers the adapter obeys stay consistent with the trail,
        /// whatever the inputs: a deposit once the first attempt started, a
        /// withdrawal for each planned retry, the hold-off the core computed,
        /// and a request moved only when no attempt can follow.
        #[test]
        fn effects_and_move_decisions_match_the_trail(
            policy in policy(),
            inputs in vec(input(), 0..30),
        ) {
            let mut action = Action::new(policy);
            let (mut deposits, mut withdrawals) = (0, 0);
            let mut held_for = Vec::new();
            // The attempt count beyond which no attempt may start, once the
            // core said none may follow.
            let mut last_allowed: Option<u32> = None;
            for input in &inputs {
                let before = action.decision();
                let decision = match input {
                    Input::Start(t) => action.attempt_started(*t),
                    Input::Response(t, status, h) => action.response(*t, *status, h, None),
                    Input::Woke(t) => action.timer_woke(*t),
                    Input::ReadinessFailed(t) => {
                        let d = action.readiness_failed(*t);
                        if before == Decision::StartNow {
                            prop_assert_eq!(d, Decision::Stop(Outcome::TransportError));
                        } else {
                            prop_assert_eq!(d, before);
                        }
                        d
                    }
                    Input::NotReady(t) => action.transport_not_ready(*t),
                    Input::HoldOff(t, u) => action.hold_off(*t, *u),
                    Input::Refused(t) => action.retry_refused(*t),
                    Input::Left(t) => action.caller_left(*t),
                };
                prop_assert_eq!(decision, action.decision());
                let effects = action.client_effects();
                if effects.deposit {
                    deposits += 1;
                    prop_assert!(action.attempts_started() >= 1);
                }
                if effects.withdraw {
                    withdrawals += 1;
                }
                if let Some(until) = effects.hold_until {
                    prop_assert_eq!(Some(until), action.server_asked_until());
                    held_for.push(action.attempts_started());
                }
                if action.attempts_started() >= 1 {
                    prop_assert_eq!(deposits, 1, "deposited once the first attempt started");
                }
                if let Some(limit) = last_allowed {
                    prop_assert!(action.attempts_started() <= limit);
                }
                if !action.retry_may_follow() && last_allowed.is_none() {
                    last_allowed = Some(match action.decision() {
                        Decision::AwaitResponse { .. } | Decision::Stop(_) => {
                            action.attempts_started()
                        }
                        _ => action.attempts_started() + 1,
                    });
                }
            }
            let planned_retries = action
                .events()
                .iter()
                .filter(|e| {
                    matches!(&e.kind, EventKind::WaitPlanned { basis, .. } if *basis != WaitBasis::HoldOff)
                })
                .count();
            prop_assert_eq!(withdrawals, planned_retries);
            let mut unique = held_for.clone();
            unique.dedup();
            prop_assert_eq!(unique, held_for, "one hold-off per attempt at most");
        }
    }
}
