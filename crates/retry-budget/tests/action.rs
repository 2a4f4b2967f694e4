//! One small scenario per test, driving [`Action`] directly with elapsed
//! times. Every expected value below is worked out by hand from the rule (`action.rs`) with
//! the default policy (20 s budget, 3 attempts, 4 s cap, 1 s floor, fallback
//! `2^k` s, only 429 retried) unless a test builds its own.

use std::time::{Duration, SystemTime};

use retry_budget::{
    retry_after::RetryAfter,
    trail::{Event, EventKind, RetryAfterSeen, WaitBasis},
    Action, Answer, Decision, Outcome, Policy, Report,
};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

const NS: Duration = Duration::from_nanos(1);

fn ra(value: &str) -> RetryAfter {
    RetryAfter::parse(value)
}

/// The calendar time at elapsed 0 in these scenarios.
fn epoch() -> SystemTime {
    httpdate::parse_http_date("Mon, 01 Jan 2024 12:00:00 GMT").unwrap()
}

/// The calendar reading at elapsed `t`, with a calendar in step with elapsed
/// time.
fn cal(t: Duration) -> Option<SystemTime> {
    Some(epoch() + t)
}

fn action() -> Action {
    Action::new(Policy::default())
}

/// A default action whose first attempt started at 0 and got a 429 at `at`.
fn after_first_429(at: Duration, retry_after: &RetryAfter) -> (Action, Decision) {
    let mut action = action();
    assert_eq!(action.decision(), Decision::StartNow);
    assert_eq!(
        action.attempt_started(s(0)),
        Decision::AwaitResponse {
            attempt: 1,
            deadline: s(4)
        }
    );
    let decision = action.response(at, 429, retry_after, cal(at));
    (action, decision)
}

fn report(action: &Action) -> Report {
    action.report().expect("the action has stopped")
}

fn kinds(report: &Report) -> Vec<&'static str> {
    report
        .events
        .iter()
        .map(|e| match e.kind {
            EventKind::AttemptStarted { .. } => "attempt_started",
            EventKind::Response { .. } => "response",
            EventKind::WaitPlanned { .. } => "wait_planned",
            EventKind::Woke { .. } => "woke",
            EventKind::CallerLeft { .. } => "caller_left",
            EventKind::AttemptTimedOut { .. } => "attempt_timed_out",
            EventKind::TransportFailed { .. } => "transport_failed",
            EventKind::Stopped { .. } => "stopped",
            _ => "unknown",
        })
        .collect()
}

/// The wait planned by the last `WaitPlanned` event.
fn planned_wait(action: &Action) -> (Duration, WaitBasis) {
    // Stop the action to read its trail; clone so the caller's action is
    // left as it was.
    let mut probe = action.clone();
    probe.caller_left(s(1000));
    let report = report(&probe);
    report
        .events
        .iter()
        .rev()
        .find_map(|e| match e.kind {
            EventKind::WaitPlanned { wait, basis, .. } => Some((wait, basis)),
            _ => None,
        })
        .expect("a wait was planned")
}

// ---------------------------------------------------------------- fallback

#[test]
fn missing_retry_after_waits_2_s_after_the_first_attempt() {
    let (action, decision) = after_first_429(s(2), &RetryAfter::Missing);
    assert_eq!(decision, Decision::WaitUntil(s(4)));
    assert_eq!(
        planned_wait(&action),
        (s(2), WaitBasis::Fallback { completed: 1 })
    );
}

#[test]
fn invalid_retry_after_waits_2_s_after_the_first_attempt() {
    for raw in ["1.5", "-1", "+5", "5s", "NaN", "tomorrow", ""] {
        let (action, decision) = after_first_429(s(2), &ra(raw));
        assert_eq!(decision, Decision::WaitUntil(s(4)), "{raw:?}");
        assert_eq!(
            planned_wait(&action),
            (s(2), WaitBasis::Fallback { completed: 1 }),
            "{raw:?}"
        );
    }
}

#[test]
fn fallback_waits_4_s_after_the_second_attempt() {
    let (mut action, decision) = after_first_429(s(2), &RetryAfter::Missing);
    assert_eq!(decision, Decision::WaitUntil(s(4)));
    assert_eq!(action.timer_woke(s(4)), Decision::StartNow);
    action.attempt_started(s(4));
    // An invalid header after the second attempt: 2^2 = 4 s.
    assert_eq!(
        action.response(s(6), 429, &ra("tomorrow"), cal(s(6))),
        Decision::WaitUntil(s(10))
    );
    assert_eq!(
        planned_wait(&action),
        (s(4), WaitBasis::Fallback { completed: 2 })
    );
}

#[test]
fn the_invalid_value_is_recorded_in_the_trail() {
    let (mut action, _) = after_first_429(s(2), &ra("1.5"));
    action.caller_left(s(3));
    let report = report(&action);
    let seen = report
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Response { retry_after, .. } => Some(retry_after.clone()),
            _ => None,
        })
        .unwrap();
    match seen {
        RetryAfterSeen::Invalid { raw } => assert!(raw.contains("1.5"), "{raw}"),
        other => panic!("recorded as {other:?}"),
    }
    // An invalid header is not a server delay.
    assert_eq!(report.server_requested_wait, None);
}

#[test]
fn a_server_delay_below_the_floor_is_raised_to_1_s() {
    let (action, decision) = after_first_429(s(2), &ra("0"));
    assert_eq!(decision, Decision::WaitUntil(s(3)));
    assert_eq!(
        planned_wait(&action),
        (s(1), WaitBasis::Server { requested: s(0) })
    );
}

#[test]
fn a_server_delay_is_never_shortened() {
    let (_, decision) = after_first_429(s(2), &ra("7"));
    assert_eq!(decision, Decision::WaitUntil(s(9)));
}

// ---------------------------------------------------------------- boundary

#[test]
fn a_reservation_ending_exactly_at_the_budget_is_allowed() {
    // 2 + 14 = 16; 16 + 4 = 20 = budget.
    let (mut action, decision) = after_first_429(s(2), &ra("14"));
    assert_eq!(decision, Decision::WaitUntil(s(16)));
    assert_eq!(action.timer_woke(s(16)), Decision::StartNow);
    assert_eq!(
        action.attempt_started(s(16)),
        Decision::AwaitResponse {
            attempt: 2,
            deadline: s(20)
        }
    );
    assert_eq!(
        action.response(s(20), 200, &RetryAfter::Missing, cal(s(20))),
        Decision::Stop(Outcome::Success)
    );
    let report = report(&action);
    assert_eq!(report.starts(), vec![s(0), s(16)]);
    assert_eq!(report.elapsed, s(20));
}

#[test]
fn a_reservation_ending_1_ns_past_the_budget_is_budget_exhausted() {
    // The 429 arrives 1 ns later: 2 s + 1 ns + 14 s + 4 s = 20 s + 1 ns.
    let at = s(2) + NS;
    let (action, decision) = after_first_429(at, &ra("14"));
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
    let report = report(&action);
    assert_eq!(report.elapsed, at, "stops at once, at t");
    assert_eq!(report.starts(), vec![s(0)]);
    assert_eq!(report.wait_time, Duration::ZERO);
    assert_eq!(report.server_requested_wait, Some(s(14)));
}

#[test]
fn a_wake_1_ns_late_at_the_boundary_is_budget_exhausted() {
    let (mut action, _) = after_first_429(s(2), &ra("14"));
    assert_eq!(
        action.timer_woke(s(16) + NS),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, s(16) + NS);
    assert_eq!(report.attempts_started, 1);
    assert_eq!(report.waits(), vec![(s(2), s(16) + NS)]);
}

#[test]
fn a_start_delayed_past_the_boundary_is_checked_again() {
    // The timer fired on time, but the transport was not ready until later.
    let (mut action, _) = after_first_429(s(2), &ra("14"));
    assert_eq!(action.timer_woke(s(16)), Decision::StartNow);
    assert_eq!(
        action.attempt_started(s(16) + NS),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    assert_eq!(report(&action).attempts_started, 1);
}

// ------------------------------------------------------------ stop reasons

#[test]
fn success_for_2xx() {
    for status in [200, 201, 204, 299] {
        let mut action = action();
        action.attempt_started(s(0));
        assert_eq!(
            action.response(s(1), status, &RetryAfter::Missing, cal(s(1))),
            Decision::Stop(Outcome::Success),
            "{status}"
        );
        assert_eq!(report(&action).last_status, Some(status));
    }
}

#[test]
fn success_for_3xx() {
    for status in [301, 304, 399] {
        let mut action = action();
        action.attempt_started(s(0));
        assert_eq!(
            action.response(s(1), status, &ra("5"), cal(s(1))),
            Decision::Stop(Outcome::Success),
            "{status}"
        );
    }
}

#[test]
fn not_retryable_for_503_and_404() {
    for status in [503, 404] {
        let mut action = action();
        action.attempt_started(s(0));
        // A Retry-After on a status the policy does not retry is not a reason
        // to retry.
        assert_eq!(
            action.response(s(1), status, &ra("1"), cal(s(1))),
            Decision::Stop(Outcome::NotRetryable),
            "{status}"
        );
        let report = report(&action);
        assert_eq!(report.last_status, Some(status));
        assert_eq!(report.attempts_started, 1);
    }
}

#[test]
fn not_retryable_for_1xx() {
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(1), 100, &RetryAfter::Missing, cal(s(1))),
        Decision::Stop(Outcome::NotRetryable)
    );
}

#[test]
fn a_custom_retry_set_makes_429_not_retryable() {
    let policy = Policy::builder().retry_statuses([503]).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(1), 429, &ra("1"), cal(s(1))),
        Decision::Stop(Outcome::NotRetryable)
    );
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(1), 503, &ra("1"), cal(s(1))),
        Decision::WaitUntil(s(2))
    );
}

#[test]
fn attempts_exhausted_after_the_third_429() {
    let (mut action, _) = after_first_429(s(2), &ra("0"));
    assert_eq!(action.timer_woke(s(3)), Decision::StartNow);
    action.attempt_started(s(3));
    assert_eq!(
        action.response(s(5), 429, &ra("0"), cal(s(5))),
        Decision::WaitUntil(s(6))
    );
    assert_eq!(action.timer_woke(s(6)), Decision::StartNow);
    action.attempt_started(s(6));
    assert_eq!(
        action.response(s(8), 429, &ra("0"), cal(s(8))),
        Decision::Stop(Outcome::AttemptsExhausted)
    );
    let report = report(&action);
    assert_eq!(report.starts(), vec![s(0), s(3), s(6)]);
    assert_eq!(report.elapsed, s(8));
    assert_eq!((report.request_time, report.wait_time), (s(6), s(2)));
}

#[test]
fn attempts_exhausted_does_not_need_the_header() {
    // With one attempt allowed, no header of any kind decides the stop:
    // not even one that would otherwise stop the action for another
    // reason. The report still says what the service asked.
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    for (header, asked) in [
        (RetryAfter::Missing, None),
        (ra("tomorrow"), None),
        (
            ra("99999999999999999999"),
            Some(Duration::from_secs(u64::MAX)),
        ),
        // A date with no calendar cannot be measured.
        (ra("Mon, 01 Jan 2024 12:00:06 GMT"), None),
    ] {
        let mut action = Action::new(policy);
        action.attempt_started(s(0));
        assert_eq!(
            action.response(s(2), 429, &header, None),
            Decision::Stop(Outcome::AttemptsExhausted),
            "{header:?}"
        );
        let report = report(&action);
        assert_eq!(report.server_requested_wait, asked, "{header:?}");
        assert!(
            !report
                .events
                .iter()
                .any(|e| matches!(e.kind, EventKind::WaitPlanned { .. })),
            "{header:?}"
        );
    }
}

#[test]
fn clock_untrusted_for_a_date_without_a_calendar() {
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("Mon, 01 Jan 2024 12:00:06 GMT"), None),
        Decision::Stop(Outcome::ClockUntrusted)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, s(2));
    // The date is not reinterpreted as zero: no wait was planned at all.
    assert_eq!(report.server_requested_wait, None);
    assert!(report.waits().is_empty());
}

#[test]
fn clock_untrusted_for_each_date_form() {
    for raw in [
        "Mon, 01 Jan 2024 12:00:06 GMT",
        "Monday, 01-Jan-24 12:00:06 GMT",
        "Mon Jan  1 12:00:06 2024",
    ] {
        let mut action = action();
        action.attempt_started(s(0));
        assert_eq!(
            action.response(s(2), 429, &ra(raw), None),
            Decision::Stop(Outcome::ClockUntrusted),
            "{raw}"
        );
    }
}

#[test]
fn delay_seconds_works_without_a_calendar() {
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("3"), None),
        Decision::WaitUntil(s(5))
    );
    // And so does the fallback.
    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &RetryAfter::Missing, None),
        Decision::WaitUntil(s(4))
    );
}

#[test]
fn budget_exhausted_when_the_wait_does_not_fit() {
    let (action, decision) = after_first_429(s(2), &ra("30"));
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
    let report = report(&action);
    assert_eq!(report.elapsed, s(2));
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.server_requested_wait, Some(s(30)));
}

#[test]
fn budget_exhausted_when_the_wait_fits_but_the_attempt_does_not() {
    // 4 + 6 = 10 (fits), then 14 + 4 = 18 + 4 = 22 > 20.
    let (mut action, _) = after_first_429(s(4), &ra("6"));
    assert_eq!(action.timer_woke(s(10)), Decision::StartNow);
    action.attempt_started(s(10));
    assert_eq!(
        action.response(s(14), 429, &ra("4"), cal(s(14))),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, s(14));
    assert_eq!(report.starts(), vec![s(0), s(10)]);
}

#[test]
fn cancelled_while_ready_before_the_first_attempt() {
    let mut action = action();
    assert_eq!(action.caller_left(s(0)), Decision::Stop(Outcome::Cancelled));
    let report = report(&action);
    assert_eq!(report.attempts_started, 0);
    assert_eq!(report.last_status, None);
    assert!(report.starts().is_empty());
    assert_eq!(kinds(&report), ["caller_left", "stopped"]);
}

#[test]
fn cancelled_while_ready_after_a_wake() {
    let (mut action, _) = after_first_429(s(2), &ra("3"));
    assert_eq!(action.timer_woke(s(5)), Decision::StartNow);
    assert_eq!(action.caller_left(s(5)), Decision::Stop(Outcome::Cancelled));
    // Nothing starts once the caller left.
    assert_eq!(
        action.attempt_started(s(5)),
        Decision::Stop(Outcome::Cancelled)
    );
    let report = report(&action);
    assert_eq!(report.attempts_started, 1);
    assert_eq!(report.waits(), vec![(s(2), s(5))]);
    assert_eq!(
        report.events[report.events.len() - 2].kind,
        EventKind::CallerLeft { waited_from: None }
    );
}

#[test]
fn cancelled_in_flight_counts_the_request_up_to_leaving() {
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.caller_left(ms(1500)),
        Decision::Stop(Outcome::Cancelled)
    );
    // The response that arrives afterwards belongs to nobody.
    assert_eq!(
        action.response(s(2), 200, &RetryAfter::Missing, cal(s(2))),
        Decision::Stop(Outcome::Cancelled)
    );
    let report = report(&action);
    assert_eq!(report.request_time, ms(1500));
    assert_eq!(report.elapsed, ms(1500));
    assert_eq!(report.last_status, None);
}

#[test]
fn cancelled_while_waiting_counts_the_wait_up_to_leaving() {
    let (mut action, decision) = after_first_429(s(2), &ra("8"));
    assert_eq!(decision, Decision::WaitUntil(s(10)));
    assert_eq!(action.caller_left(s(5)), Decision::Stop(Outcome::Cancelled));
    // The timer that fires later starts nothing.
    assert_eq!(action.timer_woke(s(10)), Decision::Stop(Outcome::Cancelled));
    let report = report(&action);
    assert_eq!(report.elapsed, s(5));
    assert_eq!(report.wait_time, s(3));
    assert_eq!(report.waits(), vec![(s(2), s(5))]);
    assert_eq!(report.request_time, s(2));
    assert_eq!(report.attempts_started, 1);
    assert_eq!(
        report.events[report.events.len() - 2].kind,
        EventKind::CallerLeft {
            waited_from: Some(s(2))
        }
    );
}

#[test]
fn attempt_timeout_is_not_retried() {
    let mut action = action();
    assert_eq!(
        action.attempt_started(s(0)),
        Decision::AwaitResponse {
            attempt: 1,
            deadline: s(4)
        }
    );
    assert_eq!(
        action.attempt_timed_out(s(4)),
        Decision::Stop(Outcome::AttemptTimeout)
    );
    let report = report(&action);
    assert_eq!(report.last_status, None);
    assert_eq!(report.request_time, s(4));
    assert_eq!(
        kinds(&report),
        ["attempt_started", "attempt_timed_out", "stopped"]
    );
}

#[test]
fn transport_error_is_not_retried() {
    let (mut action, _) = after_first_429(s(2), &ra("1"));
    action.timer_woke(s(3));
    action.attempt_started(s(3));
    assert_eq!(
        action.transport_failed(ms(3500)),
        Decision::Stop(Outcome::TransportError)
    );
    let report = report(&action);
    // The last response is the first attempt's 429, kept apart from the
    // outcome.
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.attempts_started, 2);
    assert_eq!(report.request_time, ms(2500));
    assert_eq!(
        report.events[report.events.len() - 2].kind,
        EventKind::TransportFailed { attempt: 2 }
    );
}

// -------------------------------------------------------------- stop order

#[test]
fn attempts_exhausted_wins_over_clock_untrusted() {
    let policy = Policy::builder().max_attempts(2).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("1"), None);
    action.timer_woke(s(3));
    action.attempt_started(s(3));
    assert_eq!(
        action.response(s(5), 429, &ra("Mon, 01 Jan 2024 12:00:30 GMT"), None),
        Decision::Stop(Outcome::AttemptsExhausted)
    );
}

#[test]
fn attempts_exhausted_wins_over_budget_exhausted() {
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("30"), cal(s(2))),
        Decision::Stop(Outcome::AttemptsExhausted)
    );
}

#[test]
fn clock_untrusted_wins_over_budget_exhausted() {
    // A date far beyond the budget, with no calendar: the date cannot be
    // measured at all, so the reason is the clock, not the budget.
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("Fri, 31 Dec 9999 23:59:59 GMT"), None),
        Decision::Stop(Outcome::ClockUntrusted)
    );
}

#[test]
fn status_wins_over_everything_in_the_response() {
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 503, &ra("Mon, 01 Jan 2024 12:00:06 GMT"), None),
        Decision::Stop(Outcome::NotRetryable)
    );
}

#[test]
fn a_date_in_the_past_clamps_to_0_then_the_1_s_floor() {
    // The calendar reads 12:00:02 at receipt; the date is 12:00:00.
    let (action, decision) = after_first_429(s(2), &ra("Mon, 01 Jan 2024 12:00:00 GMT"));
    assert_eq!(decision, Decision::WaitUntil(s(3)));
    assert_eq!(
        planned_wait(&action),
        (s(1), WaitBasis::Server { requested: s(0) })
    );
}

#[test]
fn a_date_is_converted_with_the_calendar_at_receipt() {
    // Date 12:00:06, calendar 12:00:02 at receipt: a 4 s wait, until 6.
    let (_, decision) = after_first_429(s(2), &ra("Mon, 01 Jan 2024 12:00:06 GMT"));
    assert_eq!(decision, Decision::WaitUntil(s(6)));

    // The same date received while the calendar is an hour behind: a wait of
    // an hour and 4 s, which does not fit.
    let mut action = action();
    action.attempt_started(s(0));
    let behind = epoch() + s(2) - s(3600);
    assert_eq!(
        action.response(
            s(2),
            429,
            &ra("Mon, 01 Jan 2024 12:00:06 GMT"),
            Some(behind)
        ),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    assert_eq!(report(&action).server_requested_wait, Some(s(3604)));
}

#[test]
fn a_date_is_converted_once_and_later_calendar_changes_do_nothing() {
    use retry_budget::schedule::{run_case, CalendarJump, Case, ScriptedAttempt};

    let attempt = |status: u16, retry_after: Option<&str>| ScriptedAttempt {
        duration: s(2),
        status,
        retry_after: retry_after.map(str::to_owned),
    };
    let base = Case {
        id: "date_once".into(),
        title: None,
        policy: Policy::default(),
        calendar_epoch: epoch(),
        attempts: vec![
            attempt(429, Some("Mon, 01 Jan 2024 12:00:06 GMT")),
            attempt(200, None),
        ],
        clock_trusted: true,
        leave_at: None,
        wake_late_by: vec![],
        calendar_jumps: vec![],
        expect: None,
    };
    let starts = |case: &Case| run_case(case).result.unwrap().starts();
    assert_eq!(starts(&base), vec![s(0), s(6)]);
    // Jumps during the wait, in either direction, change nothing.
    for by in [-3600i128, -5, 5, 3600] {
        let mut jumped = base.clone();
        jumped.calendar_jumps = vec![CalendarJump {
            at: s(3),
            by_nanos: by * 1_000_000_000,
        }];
        assert_eq!(starts(&jumped), vec![s(0), s(6)], "jump by {by} s");
    }
    // A jump before receipt is part of the reading at receipt: the calendar
    // reads 12:00:02 - 10 s, so the date is 14 s away, until 16 (16 + 4 = 20).
    let mut before = base.clone();
    before.calendar_jumps = vec![CalendarJump {
        at: s(1),
        by_nanos: -10_000_000_000,
    }];
    assert_eq!(starts(&before), vec![s(0), s(16)]);
}

// ---------------------------------------------------------- timer wake-ups

#[test]
fn a_late_wake_that_still_fits_starts() {
    let (mut action, _) = after_first_429(s(2), &ra("10"));
    assert_eq!(action.timer_woke(s(14)), Decision::StartNow);
    action.attempt_started(s(14));
    action.response(s(15), 200, &RetryAfter::Missing, cal(s(15)));
    let report = report(&action);
    assert_eq!(report.waits(), vec![(s(2), s(14))]);
    assert!(report.events.iter().any(|e| e.kind
        == EventKind::Woke {
            waited_from: s(2),
            late_by: s(2)
        }));
}

#[test]
fn a_late_wake_that_no_longer_fits_stops() {
    // Planned until 12 (12 + 4 <= 20), woke at 17 (17 + 4 > 20).
    let (mut action, decision) = after_first_429(s(2), &ra("10"));
    assert_eq!(decision, Decision::WaitUntil(s(12)));
    assert_eq!(
        action.timer_woke(s(17)),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, s(17));
    assert_eq!(report.wait_time, s(15), "the time actually spent waiting");
    assert_eq!(report.waits(), vec![(s(2), s(17))]);
    assert_eq!(report.attempts_started, 1);
}

#[test]
fn an_early_wake_changes_nothing() {
    let (mut action, _) = after_first_429(s(2), &ra("10"));
    let before = action.clone();
    assert_eq!(action.timer_woke(s(11)), Decision::WaitUntil(s(12)));
    assert_eq!(action.timer_woke(s(12) - NS), Decision::WaitUntil(s(12)));
    assert_eq!(action.attempts_started(), 1);
    // The trail is unchanged: stop both the same way and compare.
    let mut a = action.clone();
    let mut b = before;
    a.caller_left(s(13));
    b.caller_left(s(13));
    assert_eq!(report(&a), report(&b));
    // The wake on time still starts.
    assert_eq!(action.timer_woke(s(12)), Decision::StartNow);
}

// --------------------------------------------- out of phase and after stop

#[test]
fn inputs_out_of_phase_change_nothing() {
    let mut action = action();
    // Ready: nothing but a start or the caller leaving means anything.
    assert_eq!(
        action.response(s(1), 200, &RetryAfter::Missing, cal(s(1))),
        Decision::StartNow
    );
    assert_eq!(action.timer_woke(s(1)), Decision::StartNow);
    assert_eq!(action.attempt_timed_out(s(1)), Decision::StartNow);
    assert_eq!(action.transport_failed(s(1)), Decision::StartNow);
    assert_eq!(action.attempts_started(), 0);
    assert_eq!(action.outcome(), None);

    // In flight: a wake or a second start is ignored.
    let in_flight = Decision::AwaitResponse {
        attempt: 1,
        deadline: s(5),
    };
    assert_eq!(action.attempt_started(s(1)), in_flight);
    assert_eq!(action.timer_woke(s(2)), in_flight);
    assert_eq!(action.attempt_started(s(2)), in_flight);
    assert_eq!(action.attempts_started(), 1);

    // Waiting: a response, a timeout, a transport failure or a start is
    // ignored.
    assert_eq!(
        action.response(s(3), 429, &ra("3"), cal(s(3))),
        Decision::WaitUntil(s(6))
    );
    assert_eq!(
        action.response(s(4), 200, &RetryAfter::Missing, cal(s(4))),
        Decision::WaitUntil(s(6))
    );
    assert_eq!(action.attempt_timed_out(s(4)), Decision::WaitUntil(s(6)));
    assert_eq!(action.transport_failed(s(4)), Decision::WaitUntil(s(6)));
    assert_eq!(action.attempt_started(s(4)), Decision::WaitUntil(s(6)));
    assert_eq!(action.attempts_started(), 1);

    assert_eq!(action.timer_woke(s(6)), Decision::StartNow);
    action.attempt_started(s(6));
    action.response(s(7), 200, &RetryAfter::Missing, cal(s(7)));
    let report = report(&action);
    assert_eq!(report.starts(), vec![s(1), s(6)]);
    assert_eq!(report.last_status, Some(200));
    assert_eq!(
        kinds(&report),
        [
            "attempt_started",
            "response",
            "wait_planned",
            "woke",
            "attempt_started",
            "response",
            "stopped"
        ]
    );
}

#[test]
fn inputs_after_the_stop_change_nothing() {
    let (mut action, decision) = after_first_429(s(2), &ra("30"));
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
    let frozen = report(&action);
    let stopped = Decision::Stop(Outcome::BudgetExhausted);
    assert_eq!(action.attempt_started(s(3)), stopped);
    assert_eq!(
        action.response(s(4), 200, &RetryAfter::Missing, cal(s(4))),
        stopped
    );
    assert_eq!(action.timer_woke(s(32)), stopped);
    assert_eq!(action.caller_left(s(33)), stopped);
    assert_eq!(action.attempt_timed_out(s(34)), stopped);
    assert_eq!(action.transport_failed(s(35)), stopped);
    assert_eq!(action.decision(), stopped);
    assert_eq!(action.outcome(), Some(Outcome::BudgetExhausted));
    assert_eq!(report(&action), frozen);
}

#[test]
fn time_going_backwards_is_clamped() {
    let (mut action, _) = after_first_429(s(2), &ra("3"));
    // Woke at 5, then told the attempt started at 3 and answered at 1.
    assert_eq!(action.timer_woke(s(5)), Decision::StartNow);
    assert_eq!(
        action.attempt_started(s(3)),
        Decision::AwaitResponse {
            attempt: 2,
            deadline: s(9)
        }
    );
    assert_eq!(
        action.response(s(1), 200, &RetryAfter::Missing, cal(s(1))),
        Decision::Stop(Outcome::Success)
    );
    let report = report(&action);
    assert_eq!(report.starts(), vec![s(0), s(5)]);
    assert_eq!(report.elapsed, s(5));
    assert_eq!(report.request_time, s(2), "the second request took no time");
    assert!(report.events.windows(2).all(|w| w[0].at <= w[1].at));
}

#[test]
fn a_response_before_its_start_does_not_underflow() {
    let mut action = action();
    action.attempt_started(s(3));
    assert_eq!(
        action.response(s(1), 429, &ra("2"), cal(s(1))),
        Decision::WaitUntil(s(5))
    );
    // A wait cannot be left before it began either.
    assert_eq!(action.caller_left(s(0)), Decision::Stop(Outcome::Cancelled));
    let report = report(&action);
    assert_eq!(report.request_time, Duration::ZERO);
    assert_eq!(report.waits(), vec![(s(3), s(3))]);
    assert_eq!(report.elapsed, s(3));
}

// ------------------------------------------------------------ huge values

#[test]
fn a_huge_retry_after_saturates_and_is_budget_exhausted() {
    let huge = ra("99999999999999999999");
    assert_eq!(huge, RetryAfter::Seconds(Duration::from_secs(u64::MAX)));
    let (action, decision) = after_first_429(s(2), &huge);
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
    let report = report(&action);
    assert_eq!(report.elapsed, s(2));
    assert_eq!(
        report.server_requested_wait,
        Some(Duration::from_secs(u64::MAX)),
        "a very long wait, not an invalid header"
    );
    // The status line renders without panicking.
    assert!(report.to_string().contains("no retry was sent"));
}

#[test]
fn a_huge_retry_after_with_a_huge_budget_does_not_overflow() {
    let policy = Policy::builder()
        .total_budget(Duration::MAX)
        .attempt_cap(Duration::MAX)
        .min_wait(Duration::MAX)
        .build()
        .unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    assert_eq!(
        action.response(s(2), 429, &ra("99999999999999999999"), cal(s(2))),
        Decision::Stop(Outcome::BudgetExhausted)
    );
}

#[test]
fn huge_elapsed_times_do_not_panic() {
    let mut action = action();
    action.attempt_started(s(0));
    assert_eq!(
        action.response(Duration::MAX, 429, &ra("1"), None),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    let report = report(&action);
    assert_eq!(report.elapsed, Duration::MAX);
    assert!(report
        .events
        .iter()
        .filter(|e| e.at > s(20))
        .all(|e| e.remaining_budget == Duration::ZERO));
    let _ = report.to_string();
}

#[test]
fn a_date_far_in_the_future_is_budget_exhausted() {
    let (_, decision) = after_first_429(s(2), &ra("Fri, 31 Dec 9999 23:59:59 GMT"));
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
}

#[test]
fn a_huge_fallback_base_saturates() {
    let policy = Policy::builder()
        .fallback_base(u32::MAX)
        .max_attempts(10)
        .total_budget(Duration::MAX)
        .build()
        .unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    // u32::MAX s fits in a budget of Duration::MAX.
    assert_eq!(
        action.response(s(1), 429, &RetryAfter::Missing, None),
        Decision::WaitUntil(s(1) + s(u64::from(u32::MAX)))
    );
}

// ------------------------------------------------------------------ trail

#[test]
fn the_trail_of_schedule_a() {
    let mut action = action();
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("3"), cal(s(2)));
    action.timer_woke(s(5));
    action.attempt_started(s(5));
    action.response(s(7), 429, &ra("4"), cal(s(7)));
    action.timer_woke(s(11));
    action.attempt_started(s(11));
    action.response(s(14), 200, &RetryAfter::Missing, cal(s(14)));
    let report = report(&action);

    let ev = |at: u64, kind: EventKind| Event {
        at: s(at),
        remaining_budget: s(20 - at),
        kind,
    };
    let seconds = |n: u64| RetryAfterSeen::Seconds { value: s(n) };
    let expected = vec![
        ev(
            0,
            EventKind::AttemptStarted {
                attempt: 1,
                reservation_end: s(4),
            },
        ),
        ev(
            2,
            EventKind::Response {
                attempt: 1,
                status: 429,
                retry_after: seconds(3),
            },
        ),
        ev(
            2,
            EventKind::WaitPlanned {
                wait: s(3),
                until: s(5),
                reservation_end: s(9),
                basis: WaitBasis::Server { requested: s(3) },
            },
        ),
        ev(
            5,
            EventKind::Woke {
                waited_from: s(2),
                late_by: s(0),
            },
        ),
        ev(
            5,
            EventKind::AttemptStarted {
                attempt: 2,
                reservation_end: s(9),
            },
        ),
        ev(
            7,
            EventKind::Response {
                attempt: 2,
                status: 429,
                retry_after: seconds(4),
            },
        ),
        ev(
            7,
            EventKind::WaitPlanned {
                wait: s(4),
                until: s(11),
                reservation_end: s(15),
                basis: WaitBasis::Server { requested: s(4) },
            },
        ),
        ev(
            11,
            EventKind::Woke {
                waited_from: s(7),
                late_by: s(0),
            },
        ),
        ev(
            11,
            EventKind::AttemptStarted {
                attempt: 3,
                reservation_end: s(15),
            },
        ),
        ev(
            14,
            EventKind::Response {
                attempt: 3,
                status: 200,
                retry_after: RetryAfterSeen::Missing,
            },
        ),
        ev(
            14,
            EventKind::Stopped {
                outcome: Outcome::Success,
            },
        ),
    ];
    assert_eq!(report.events, expected);
    assert_eq!(report.starts(), vec![s(0), s(5), s(11)]);
    assert_eq!(report.waits(), vec![(s(2), s(5)), (s(7), s(11))]);
    assert_eq!((report.request_time, report.wait_time), (s(7), s(7)));
    // The last response (200) asked for no delay.
    assert_eq!(report.server_requested_wait, None);
}

#[test]
fn the_trail_of_a_date_wait() {
    let (mut action, _) = after_first_429(s(2), &ra("Mon, 01 Jan 2024 12:00:06 GMT"));
    action.caller_left(s(3));
    let report = report(&action);
    let date = httpdate::parse_http_date("Mon, 01 Jan 2024 12:00:06 GMT").unwrap();
    assert_eq!(
        report.events[1].kind,
        EventKind::Response {
            attempt: 1,
            status: 429,
            retry_after: RetryAfterSeen::Date { date },
        }
    );
    assert_eq!(
        report.events[2].kind,
        EventKind::WaitPlanned {
            wait: s(4),
            until: s(6),
            reservation_end: s(10),
            basis: WaitBasis::Server { requested: s(4) },
        }
    );
    assert_eq!(
        report.events.last().unwrap().kind,
        EventKind::Stopped {
            outcome: Outcome::Cancelled
        }
    );
}

#[test]
fn the_trail_serializes_with_snake_case_kinds_and_seconds() {
    let (action, _) = after_first_429(ms(2500), &ra("30"));
    let json = report(&action).to_json();
    let events = json["events"].as_array().unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["attempt_started", "response", "stopped"]);
    assert_eq!(events[1]["at_s"], 2.5);
    assert_eq!(events[1]["remaining_budget_s"], 17.5);
    assert_eq!(events[1]["retry_after"]["form"], "seconds");
    assert_eq!(events[1]["retry_after"]["value_s"], 30.0);
    assert_eq!(events[2]["outcome"], "budget_exhausted");
    assert_eq!(json["outcome"], "budget_exhausted");
}

#[test]
fn remaining_budget_is_budget_minus_at_and_never_negative() {
    // An attempt that answers after the whole budget (its deadline was not
    // enforced by the caller) still yields a non-negative remaining budget.
    let mut action = action();
    action.attempt_started(s(0));
    action.response(s(25), 429, &ra("1"), cal(s(25)));
    let report = report(&action);
    for event in &report.events {
        assert_eq!(event.remaining_budget, s(20).saturating_sub(event.at));
    }
    assert_eq!(report.events.last().unwrap().remaining_budget, s(0));
    assert_eq!(report.outcome, Outcome::BudgetExhausted);
}

// --------------------------------------------------------- visible status

/// Phrases that would claim the service recovered or failed for good.
const OVERCLAIMS: [&str; 14] = [
    "recovered",
    "recovery",
    "is back",
    "back online",
    "back up",
    "restored",
    "healthy",
    "for good",
    "permanent",
    "will never",
    "is down",
    "unavailable",
    "outage",
    "gave up on the service",
];

fn assert_no_overclaim(text: &str) {
    let lower = text.to_lowercase();
    for phrase in OVERCLAIMS {
        assert!(!lower.contains(phrase), "{phrase:?} in {text:?}");
    }
}

const RATE_LIMIT_LINE: &str =
    "Category: rate_limit. The service is limiting requests; trying later may work.";
const CANCELLED_LINE: &str =
    "Category: cancelled. The request was cancelled; this is not an error.";

#[test]
fn status_text_for_budget_exhausted_without_retry_after() {
    // Fallback after one attempt is 2 s: 14.5 + 2 + 4 = 20.5 > 20.
    let (action, decision) = after_first_429(ms(14_500), &RetryAfter::Missing);
    assert_eq!(decision, Decision::Stop(Outcome::BudgetExhausted));
    let text = report(&action).to_string();
    assert_eq!(
        text,
        "Stopped: the retry budget cannot fit the next request.\n\
         Last response: 429. Attempts: 1 / 3. Elapsed: 14.5 s.\n\
         The service gave no Retry-After; no retry was sent.\n\
         Category: rate_limit. The service is limiting requests; trying later may work."
    );
    assert_no_overclaim(&text);
}

#[test]
fn status_text_for_success_keeps_the_response_apart() {
    let mut action = action();
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("3"), cal(s(2)));
    action.timer_woke(s(5));
    action.attempt_started(s(5));
    action.response(s(7), 204, &RetryAfter::Missing, cal(s(7)));
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 2, "success has no category line: {text}");
    assert!(lines[0].starts_with("Finished:"), "{text}");
    assert_eq!(
        lines[1],
        "Last response: 204. Attempts: 2 / 3. Elapsed: 7 s."
    );
    assert_no_overclaim(&text);
}

#[test]
fn status_text_for_attempts_exhausted() {
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let mut action = Action::new(policy);
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("5"), cal(s(2)));
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines[0],
        "Stopped: the one attempt allowed was used (retries are off)."
    );
    assert_eq!(
        lines[1],
        "Last response: 429. Attempts: 1 / 1. Elapsed: 2 s."
    );
    assert_eq!(
        lines[2],
        "The service asked to wait 5 s; no retry was sent."
    );
    assert_eq!(lines[3], RATE_LIMIT_LINE);
    assert_no_overclaim(&text);
}

#[test]
fn status_text_for_clock_untrusted_names_the_date() {
    let mut action = action();
    action.attempt_started(s(0));
    action.response(s(2), 429, &ra("Mon, 01 Jan 2024 12:00:06 GMT"), None);
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[3], RATE_LIMIT_LINE);
    assert!(lines[0].contains("clock"), "{text}");
    assert_eq!(
        lines[1],
        "Last response: 429. Attempts: 1 / 3. Elapsed: 2 s."
    );
    assert_eq!(
        lines[2],
        "The service asked to wait until Mon, 01 Jan 2024 12:00:06 GMT; no retry was sent."
    );
    assert_no_overclaim(&text);
}

#[test]
fn status_text_for_cancelled() {
    let (mut action, _) = after_first_429(s(2), &ra("8"));
    action.caller_left(s(5));
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert!(lines[0].starts_with("Cancelled:"), "{text}");
    assert_eq!(
        lines[1],
        "Last response: 429. Attempts: 1 / 3. Elapsed: 5 s."
    );
    assert_eq!(
        lines[2],
        "The service asked to wait 8 s; no retry was sent."
    );
    assert_eq!(lines[3], CANCELLED_LINE);
    assert_eq!(lines.len(), 4, "{text}");
    assert_no_overclaim(&text);

    // Cancelled during the second attempt: that attempt has no answer, so
    // there is no "asked to wait" line about the first one.
    let (mut action, _) = after_first_429(s(2), &ra("1"));
    action.timer_woke(s(3));
    action.attempt_started(s(3));
    action.caller_left(s(4));
    let text = report(&action).to_string();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(text.lines().nth(2), Some(CANCELLED_LINE), "{text}");
    assert!(!text.contains("asked to wait"), "{text}");
}

#[test]
fn status_text_for_attempt_timeout_and_transport_error_has_no_response() {
    let mut action = action();
    action.attempt_started(s(0));
    action.attempt_timed_out(s(4));
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("4 s"), "names the cap: {text}");
    assert_eq!(
        lines[1],
        "Last response: none. Attempts: 1 / 3. Elapsed: 4 s."
    );
    assert_eq!(
        lines[2],
        "Category: timeout. The service did not answer in time."
    );
    assert_no_overclaim(&text);

    let mut action = Action::new(Policy::default());
    action.attempt_started(s(0));
    action.transport_failed(ms(300));
    let text = report(&action).to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[1],
        "Last response: none. Attempts: 1 / 3. Elapsed: 0.3 s."
    );
    assert_eq!(lines[2], "Category: transport. The connection failed.");
    assert_no_overclaim(&text);
}

#[test]
fn status_text_for_not_retryable_shows_the_status_without_judging_it() {
    for (status, category) in [
        (
            503,
            "Category: server_error. The service reported an error of its own.",
        ),
        (
            404,
            "Category: client_error. The service rejected the request itself.",
        ),
    ] {
        let mut action = action();
        action.attempt_started(s(0));
        action.response(s(1), status, &ra("5"), cal(s(1)));
        let text = report(&action).to_string();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[2], category, "{text}");
        assert!(lines[0].starts_with("Stopped:"), "{text}");
        assert_eq!(
            lines[1],
            format!("Last response: {status}. Attempts: 1 / 3. Elapsed: 1 s.")
        );
        assert_no_overclaim(&text);
    }
}

#[test]
fn every_outcome_has_a_distinct_headline_and_message_equals_display() {
    let mut headlines = Vec::new();
    let mut scenarios: Vec<Action> = Vec::new();
    // success, not_retryable, budget_exhausted, attempts_exhausted,
    // cancelled, clock_untrusted, attempt_timeout, transport_error
    for (status, header, calendar) in [
        (200, ra("1"), cal(s(1))),
        (500, ra("1"), cal(s(1))),
        (429, ra("30"), cal(s(1))),
    ] {
        let mut a = action();
        a.attempt_started(s(0));
        a.response(s(1), status, &header, calendar);
        scenarios.push(a);
    }
    let mut a = Action::new(Policy::builder().max_attempts(1).build().unwrap());
    a.attempt_started(s(0));
    a.response(s(1), 429, &ra("1"), None);
    scenarios.push(a);
    let mut a = action();
    a.caller_left(s(0));
    scenarios.push(a);
    let mut a = action();
    a.attempt_started(s(0));
    a.response(s(1), 429, &ra("Mon, 01 Jan 2024 12:00:06 GMT"), None);
    scenarios.push(a);
    let mut a = action();
    a.attempt_started(s(0));
    a.attempt_timed_out(s(4));
    scenarios.push(a);
    let mut a = action();
    a.attempt_started(s(0));
    a.transport_failed(s(1));
    scenarios.push(a);

    let outcomes: Vec<_> = scenarios.iter().map(|a| a.outcome().unwrap()).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Success,
            Outcome::NotRetryable,
            Outcome::BudgetExhausted,
            Outcome::AttemptsExhausted,
            Outcome::Cancelled,
            Outcome::ClockUntrusted,
            Outcome::AttemptTimeout,
            Outcome::TransportError,
        ]
    );
    for a in &scenarios {
        let report = report(a);
        let text = report.to_string();
        assert_eq!(report.message(), text);
        assert_eq!(report.to_json()["message"], text.as_str());
        assert_no_overclaim(&text);
        headlines.push(text.lines().next().unwrap().to_owned());
    }
    let mut distinct = headlines.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), headlines.len(), "{headlines:#?}");
}

#[test]
fn a_retry_forbidden_by_the_server_stops_a_retried_status_as_not_retryable() {
    let mut action = action();
    action.attempt_started(s(0));
    // Attempts and budget are left: only the server's word stops it.
    let missing = RetryAfter::Missing;
    assert_eq!(
        action.respond(
            s(1),
            Answer::new(429, &missing)
                .calendar(cal(s(1)))
                .forbidden(true)
        ),
        Decision::Stop(Outcome::NotRetryable)
    );
    let report = report(&action);
    assert_eq!(report.last_status, Some(429));
    assert_eq!(report.attempts_started, 1);
    let kinds: Vec<_> = report.events.iter().map(|e| &e.kind).collect();
    assert!(matches!(
        kinds[kinds.len() - 2],
        EventKind::RetryForbidden { attempt: 1 }
    ));
    let text = report.to_string();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "Stopped: the service asked not to retry this request.",
            "Last response: 429. Attempts: 1 / 3. Elapsed: 1 s.",
            RATE_LIMIT_LINE,
        ]
    );
    assert_no_overclaim(&text);
    assert_eq!(
        report.to_json()["events"][2]["kind"],
        serde_json::json!("retry_forbidden")
    );
}

#[test]
fn a_forbidden_retry_is_checked_before_attempts_left_and_only_for_retried_statuses() {
    // Before attempts_exhausted: the answer itself is not retryable.
    let mut last = Action::new(Policy::builder().max_attempts(1).build().unwrap());
    last.attempt_started(s(0));
    let one = ra("1");
    assert_eq!(
        last.respond(s(1), Answer::new(429, &one).forbidden(true)),
        Decision::Stop(Outcome::NotRetryable)
    );
    // A status the policy does not retry ends as always.
    let mut ok = action();
    ok.attempt_started(s(0));
    let missing = RetryAfter::Missing;
    assert_eq!(
        ok.respond(s(1), Answer::new(200, &missing).forbidden(true)),
        Decision::Stop(Outcome::Success)
    );
    assert!(!report(&ok)
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::RetryForbidden { .. })));
    // Before any attempt, the answer is ignored; it applies to one response.
    let mut early = action();
    assert_eq!(
        early.respond(s(0), Answer::new(429, &one).forbidden(true)),
        Decision::StartNow
    );
    assert!(early.events().is_empty());
    early.attempt_started(s(0));
    assert_eq!(
        early.response(s(1), 429, &ra("1"), None),
        Decision::WaitUntil(s(2))
    );
}

#[test]
fn a_translated_response_is_recorded_just_before_it_and_changes_nothing() {
    let mut action = action();
    action.attempt_started(s(0));
    let pushback = RetryAfter::Seconds(ms(1000));
    assert_eq!(
        action.respond(
            ms(300),
            Answer::new(429, &pushback)
                .translated_from("grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000")
        ),
        Decision::WaitUntil(ms(1300))
    );
    let kinds: Vec<_> = action.events().iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds[1],
        EventKind::Translated {
            attempt: 1,
            from: "grpc-status 8 (RESOURCE_EXHAUSTED), grpc-retry-pushback-ms 1000".into(),
        }
    );
    assert!(matches!(kinds[2], EventKind::Response { status: 429, .. }));
    // Not in flight: ignored.
    let before = action.events().len();
    let missing = RetryAfter::Missing;
    action.respond(
        ms(400),
        Answer::new(200, &missing).translated_from("ignored"),
    );
    assert_eq!(action.events().len(), before);
}

#[test]
fn a_transport_not_ready_at_the_latest_start_stops_and_not_before() {
    let mut action = action();
    action.attempt_started(s(0));
    action.response(s(1), 429, &ra("1"), None);
    assert_eq!(action.timer_woke(s(2)), Decision::StartNow);
    assert_eq!(action.transport_not_ready(s(15)), Decision::StartNow);
    assert_eq!(
        action.transport_not_ready(s(16)),
        Decision::Stop(Outcome::BudgetExhausted)
    );
    assert_eq!(report(&action).elapsed, s(16));
}

#[test]
fn a_transport_not_ready_outside_the_ready_phase_changes_nothing() {
    let mut action = action();
    action.attempt_started(s(0));
    let in_flight = action.decision();
    assert_eq!(action.transport_not_ready(s(19)), in_flight);
    assert_eq!(action.outcome(), None);
}

#[test]
fn the_reservation_is_the_attempt_in_flight_and_its_cap() {
    let mut a = action();
    assert_eq!(a.reservation(), None, "nothing in flight yet");
    a.attempt_started(s(0));
    assert_eq!(a.reservation(), Some((1, s(4))));
    a.response(s(1), 429, &ra("2"), None);
    assert_eq!(a.reservation(), None, "waiting");
    a.timer_woke(s(3));
    a.attempt_started(s(3));
    assert_eq!(a.reservation(), Some((2, s(4))));
    // A caller's deadline shrinks the cap, and the reservation with it.
    let mut short = Action::new(Policy::default().within(ms(1500)).unwrap());
    short.attempt_started(s(0));
    assert_eq!(short.reservation(), Some((1, ms(1500))));
}

#[test]
fn held_off_left_is_the_hold_off_still_to_run_and_only_for_held_off() {
    let mut held = action();
    held.hold_off(s(0), ms(25_500));
    let report = held.into_report().unwrap();
    assert_eq!(report.outcome, Outcome::HeldOff);
    assert_eq!(report.held_off_left(), Some(ms(25_500)));

    // A hold-off that fits is waited, not reported.
    let mut waited = action();
    assert_eq!(waited.hold_off(s(0), s(3)), Decision::WaitUntil(s(3)));
    waited.timer_woke(s(3));
    waited.attempt_started(s(3));
    waited.response(s(4), 200, &ra(""), None);
    let report = waited.into_report().unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.held_off_left(), None);
}
