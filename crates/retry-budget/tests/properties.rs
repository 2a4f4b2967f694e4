//! Properties of the budget rule over random policies and random scripts.
//!
//! Each replayed case is checked against an oracle written from the rule
//! (the wait formula, the start condition and the order of stop reasons),
//! not against the code's own output. A second set of properties drives
//! [`Action`] directly with arbitrary inputs in arbitrary order, and a third
//! checks `Retry-After` parsing on any bytes.

use std::time::{Duration, SystemTime};

use proptest::collection::vec;
use proptest::prelude::*;
use retry_budget::schedule::{run_case, CalendarJump, Case, ScriptedAttempt};
use retry_budget::{
    retry_after::RetryAfter,
    trail::{EventKind, RetryAfterSeen, WaitBasis},
    Action, Answer, Decision, Outcome, Policy, Report,
};

fn epoch() -> SystemTime {
    httpdate::parse_http_date("Mon, 01 Jan 2024 12:00:00 GMT").unwrap()
}

/// `base^k` seconds, saturating: the rule's fallback, computed
/// independently of the policy's own helper.
fn fallback(base: u32, k: u32) -> Duration {
    let mut secs: u64 = 1;
    for _ in 0..k {
        secs = secs.saturating_mul(u64::from(base));
    }
    Duration::from_secs(secs)
}

/// What the rule says must happen to a retried status after `k` completed
/// attempts, given the header seen and the calendar at receipt: the planned
/// wait, or the stop reason.
fn expected_after_retried_status(
    policy: &Policy,
    k: u32,
    t: Duration,
    seen: &RetryAfterSeen,
    calendar: Option<SystemTime>,
) -> Result<Duration, Outcome> {
    if k >= policy.max_attempts() {
        return Err(Outcome::AttemptsExhausted);
    }
    let wait = match seen {
        RetryAfterSeen::Seconds { value } => (*value).max(policy.min_wait()),
        RetryAfterSeen::Date { date } => {
            let Some(now) = calendar else {
                return Err(Outcome::ClockUntrusted);
            };
            let delay = date.duration_since(now).unwrap_or(Duration::ZERO);
            delay.max(policy.min_wait())
        }
        RetryAfterSeen::Unmeasured { .. } => return Err(Outcome::ClockUntrusted),
        RetryAfterSeen::Missing | RetryAfterSeen::Invalid { .. } => {
            fallback(policy.fallback_base(), k)
        }
    };
    let fits = t
        .checked_add(wait)
        .and_then(|start| start.checked_add(policy.attempt_cap()))
        .is_some_and(|end| end <= policy.total_budget());
    if fits {
        Ok(wait)
    } else {
        Err(Outcome::BudgetExhausted)
    }
}

/// The stop reason for a status the policy does not retry.
fn not_retried(status: u16) -> Outcome {
    if (200..400).contains(&status) {
        Outcome::Success
    } else {
        Outcome::NotRetryable
    }
}

// -------------------------------------------------------------- strategies

/// A policy on a grid of `tick`, so that boundaries (a reservation ending
/// exactly at the budget) are hit often. Only 429 is retried.
fn policy() -> impl Strategy<Value = Policy> {
    let tick = prop_oneof![
        Just(Duration::from_millis(500)),
        Just(Duration::from_secs(1)),
        Just(Duration::from_nanos(333_333_333)),
    ];
    (tick, 1u32..=80)
        .prop_flat_map(|(tick, budget)| {
            (
                Just(tick),
                Just(budget),
                // Mostly small caps, so that retries have room; any cap up to
                // the budget now and then.
                prop_oneof![3 => 1u32..=budget.min(8), 1 => 1u32..=budget],
                1u32..=6,
                0u32..=8,
                1u32..=4,
            )
        })
        .prop_map(|(tick, budget, cap, attempts, min_wait, base)| {
            Policy::builder()
                .total_budget(tick * budget)
                .attempt_cap(tick * cap)
                .max_attempts(attempts)
                .min_wait(tick * min_wait)
                .fallback_base(base)
                .build()
                .expect("a valid policy")
        })
}

/// A raw `Retry-After` value, or none.
fn header() -> impl Strategy<Value = Option<String>> {
    let imf = prop_oneof![3 => -10i64..=12, 1 => -60i64..=120].prop_map(|offset| {
        let magnitude = Duration::from_secs(offset.unsigned_abs());
        let date = if offset >= 0 {
            epoch() + magnitude
        } else {
            epoch() - magnitude
        };
        httpdate::fmt_http_date(date)
    });
    prop_oneof![
        2 => Just(None),
        3 => (0u64..=4).prop_map(|n| Some(n.to_string())),
        1 => (0u64..=30).prop_map(|n| Some(n.to_string())),
        1 => "[0-9]{20,40}".prop_map(Some),
        1 => "[ \t]{0,2}[-+0-9.eEsxN]{0,6}[ \t]{0,2}".prop_map(Some),
        1 => any::<String>().prop_map(Some),
        3 => imf.prop_map(Some),
    ]
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![1 => Just(200u16), 1 => Just(404), 5 => Just(429), 1 => Just(503)]
}

/// A case with one scripted attempt per allowed attempt, each no longer than
/// the cap, so the model can always replay it.
fn case() -> impl Strategy<Value = Case> {
    policy().prop_flat_map(|policy| {
        let cap = policy.attempt_cap();
        let budget = policy.total_budget();
        let n = policy.max_attempts() as usize;
        let attempt =
            (0u32..=8, status(), header()).prop_map(move |(eighths, status, h)| ScriptedAttempt {
                duration: cap * eighths / 8,
                status,
                retry_after: h,
            });
        let leave = proptest::option::weighted(0.3, (0u32..=24).prop_map(move |q| budget * q / 20));
        let late = prop_oneof![
            2 => Just(Vec::new()),
            1 => vec((0u32..=4).prop_map(|q| Duration::from_millis(500) * q), 0..4),
        ];
        let jump = (0u32..=20, -120i64..=120).prop_map(move |(q, by)| CalendarJump {
            at: budget * q / 20,
            by_nanos: i128::from(by) * 1_000_000_000,
        });
        (
            Just(policy),
            vec(attempt, n),
            proptest::bool::weighted(0.85),
            leave,
            late,
            vec(jump, 0..2),
        )
            .prop_map(
                |(policy, attempts, clock_trusted, leave_at, wake_late_by, calendar_jumps)| Case {
                    id: "random".into(),
                    title: None,
                    policy,
                    calendar_epoch: epoch(),
                    attempts,
                    clock_trusted,
                    leave_at,
                    wake_late_by,
                    calendar_jumps,
                    expect: None,
                },
            )
    })
}

// ---------------------------------------------------------- replay oracle

/// Every invariant of the rule of one replayed case.
fn check_replay(case: &Case, report: &Report) -> Result<(), TestCaseError> {
    let policy = &case.policy;
    let budget = policy.total_budget();
    let cap = policy.attempt_cap();
    let on_time = case.wake_late_by.iter().all(Duration::is_zero);

    // Attempts and starts.
    prop_assert!(report.attempts_started <= policy.max_attempts());
    prop_assert_eq!(report.starts().len(), report.attempts_started as usize);
    for start in &report.starts() {
        prop_assert!(*start + cap <= budget, "start {:?} + cap > budget", start);
    }
    if let Some(first) = report.starts().first() {
        prop_assert_eq!(
            *first,
            Duration::ZERO,
            "the budget counts from the first start"
        );
    }
    for pair in report.starts().windows(2) {
        prop_assert!(pair[0] <= pair[1]);
        if !policy.min_wait().is_zero() {
            prop_assert!(pair[0] < pair[1], "starts not strictly increasing");
        }
    }

    // Time accounting: request and wait are each counted once, and in the
    // replay every moment is one or the other.
    let stopped_at = report.elapsed;
    prop_assert!(report.request_time + report.wait_time <= stopped_at);
    prop_assert_eq!(report.request_time + report.wait_time, stopped_at);
    let waited: Duration = report.waits().iter().map(|(from, to)| *to - *from).sum();
    prop_assert_eq!(waited, report.wait_time);
    for (from, to) in &report.waits() {
        prop_assert!(from <= to);
    }
    if on_time {
        prop_assert!(stopped_at <= budget, "stopped at {:?}", stopped_at);
    }

    // The trail.
    let events = &report.events;
    prop_assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    for event in events {
        prop_assert_eq!(event.remaining_budget, budget.saturating_sub(event.at));
    }
    let stops: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Stopped { .. }))
        .collect();
    prop_assert_eq!(stops.len(), 1);
    prop_assert_eq!(
        &events.last().unwrap().kind,
        &EventKind::Stopped {
            outcome: report.outcome
        }
    );
    prop_assert_eq!(events.last().unwrap().at, stopped_at);

    // Cancellation comes first: the caller leaving at or before the stop
    // means the action is cancelled, exactly then.
    match case.leave_at {
        Some(leave) if leave <= stopped_at => {
            prop_assert_eq!(report.outcome, Outcome::Cancelled);
            prop_assert_eq!(stopped_at, leave);
        }
        _ => prop_assert_ne!(report.outcome, Outcome::Cancelled),
    }

    // Every step against the rule.
    let mut last_status = None;
    let mut server_requested = None;
    let mut pending: Option<(Duration, Duration)> = None;
    let mut waits_seen = 0usize;
    for (i, event) in events.iter().enumerate() {
        // The step after this one, past the notes that annotate a response
        // (repeated values, a lenient date, reset headers).
        let next = events[i + 1..].iter().map(|e| &e.kind).find(|kind| {
            !matches!(
                kind,
                EventKind::RetryAfterRepeated { .. }
                    | EventKind::LenientDate { .. }
                    | EventKind::ResetHeader { .. }
            )
        });
        match &event.kind {
            EventKind::AttemptStarted {
                attempt,
                reservation_end,
            } => {
                prop_assert_eq!(*reservation_end, event.at + cap);
                prop_assert_eq!(report.starts()[*attempt as usize - 1], event.at);
            }
            EventKind::Response {
                attempt,
                status,
                retry_after,
            } => {
                let k = *attempt;
                let scripted = &case.attempts[k as usize - 1];
                let start = report.starts()[k as usize - 1];
                prop_assert_eq!(*status, scripted.status);
                prop_assert_eq!(event.at, start + scripted.duration);
                let parsed = scripted
                    .retry_after
                    .as_deref()
                    .map_or(RetryAfter::Missing, RetryAfter::parse);
                prop_assert_eq!(
                    retry_after,
                    &RetryAfterSeen::at_receipt(&parsed, case.calendar_at(event.at))
                );
                last_status = Some(*status);

                let t = event.at;
                // The server's delay is the last response's, for a retried
                // status, whatever the stop reason; a date only with a
                // calendar.
                server_requested = None;
                if policy.retries(*status) {
                    match retry_after {
                        RetryAfterSeen::Seconds { value } => server_requested = Some(*value),
                        RetryAfterSeen::Date { date } => {
                            if let Some(now) = case.calendar_at(t) {
                                server_requested =
                                    Some(date.duration_since(now).unwrap_or(Duration::ZERO));
                            }
                        }
                        _ => {}
                    }
                }
                let expected = if policy.retries(*status) {
                    expected_after_retried_status(policy, k, t, retry_after, case.calendar_at(t))
                } else {
                    Err(not_retried(*status))
                };
                match expected {
                    Ok(wait) => {
                        let Some(EventKind::WaitPlanned {
                            wait: planned,
                            until,
                            reservation_end,
                            basis,
                        }) = next
                        else {
                            return Err(TestCaseError::fail(format!(
                                "expected a wait of {wait:?} after {event:?}, got {next:?}"
                            )));
                        };
                        prop_assert_eq!(*planned, wait);
                        prop_assert_eq!(*until, t + wait);
                        pending = Some((t, *until));
                        prop_assert_eq!(*reservation_end, t + wait + cap);
                        match (retry_after, basis) {
                            (
                                RetryAfterSeen::Missing | RetryAfterSeen::Invalid { .. },
                                WaitBasis::Fallback { completed },
                            ) => prop_assert_eq!(*completed, k),
                            (_, WaitBasis::Server { requested }) => {
                                prop_assert!(retry_after_is_valid(retry_after));
                                prop_assert!(*requested <= wait);
                            }
                            other => {
                                return Err(TestCaseError::fail(format!(
                                    "basis does not match the header: {other:?}"
                                )))
                            }
                        }
                        // Never sooner than planned: the next start, if any,
                        // is at least t + max(min_wait, server delay); on
                        // time, exactly then.
                        if let Some(next_start) = report.starts().get(k as usize) {
                            prop_assert!(*next_start - t >= wait);
                            if on_time {
                                prop_assert_eq!(*next_start, t + wait);
                            }
                        }
                    }
                    Err(outcome) => {
                        // (A caller leaving at t is seen before the
                        // response, which is then never recorded.)
                        prop_assert_eq!(next, Some(&EventKind::Stopped { outcome }));
                        prop_assert_eq!(stopped_at, t);
                    }
                }
            }
            EventKind::Woke {
                waited_from,
                late_by,
            } => {
                let now = event.at;
                let (from, until) = pending.take().expect("a wake follows a planned wait");
                let late = case
                    .wake_late_by
                    .get(waits_seen)
                    .copied()
                    .unwrap_or_default();
                waits_seen += 1;
                prop_assert_eq!(*waited_from, from);
                prop_assert_eq!(*late_by, late);
                prop_assert_eq!(now, until + late);
                if now + cap <= budget {
                    prop_assert!(
                        matches!(next, Some(EventKind::AttemptStarted { .. })),
                        "room left at {:?} but {:?}",
                        now,
                        next
                    );
                } else {
                    prop_assert_eq!(
                        next,
                        Some(&EventKind::Stopped {
                            outcome: Outcome::BudgetExhausted
                        })
                    );
                }
            }
            EventKind::CallerLeft { waited_from } => {
                prop_assert_eq!(*waited_from, pending.map(|(from, _)| from));
            }
            _ => {}
        }
    }
    prop_assert_eq!(report.last_status, last_status);
    prop_assert_eq!(report.server_requested_wait, server_requested);

    // The outcome agrees with the last response.
    match report.outcome {
        Outcome::Success => prop_assert!(matches!(last_status, Some(200..=399))),
        Outcome::NotRetryable => {
            let status = last_status.unwrap();
            prop_assert!(!policy.retries(status) && !(200..400).contains(&status));
        }
        Outcome::AttemptsExhausted => {
            prop_assert_eq!(report.attempts_started, policy.max_attempts());
            prop_assert_eq!(last_status, Some(429));
        }
        Outcome::ClockUntrusted => prop_assert!(!case.clock_trusted),
        Outcome::BudgetExhausted | Outcome::Cancelled => {}
        other => {
            return Err(TestCaseError::fail(format!(
                "the replay of valid data cannot end as {other}"
            )))
        }
    }
    Ok(())
}

fn retry_after_is_valid(seen: &RetryAfterSeen) -> bool {
    matches!(
        seen,
        RetryAfterSeen::Seconds { .. } | RetryAfterSeen::Date { .. }
    )
}

/// The visible status: the last response on its own line, apart from the
/// outcome; "no retry was sent" only when it is true; no overclaim.
fn check_status_text(report: &Report) -> Result<(), TestCaseError> {
    let text = report.to_string();
    prop_assert!(!overclaims(&text), "{}", text);
    let mut lines: Vec<&str> = text.lines().collect();
    // Every ending but success closes with its category's hint, exactly.
    match report.category() {
        Some(category) => {
            let hint = format!("Category: {category}. {}", category.hint());
            prop_assert_eq!(lines.pop(), Some(hint.as_str()), "{}", text);
        }
        None => prop_assert!(!text.contains("Category:"), "{}", text),
    }
    prop_assert!(lines.len() == 2 || lines.len() == 3, "{}", text);
    let status = report
        .last_status
        .map_or_else(|| "none".to_owned(), |s| s.to_string());
    let expected = format!(
        "Last response: {status}. Attempts: {} / {}. Elapsed: ",
        report.attempts_started, report.max_attempts
    );
    prop_assert!(lines[1].starts_with(&expected), "{}", text);
    if text.contains("no retry was sent") {
        let last_response = report
            .events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::Response { .. }));
        let last_start = report
            .events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::AttemptStarted { .. }));
        prop_assert!(
            last_response.is_some() && last_start < last_response,
            "{}",
            text
        );
    }
    prop_assert_eq!(report.message(), text);
    Ok(())
}

/// Words that would claim the service recovered or failed for good.
fn overclaims(text: &str) -> bool {
    let lower = text.to_lowercase();
    [
        "recovered",
        "is back",
        "back online",
        "restored",
        "healthy",
        "for good",
        "permanent",
        "will never",
        "is down",
        "unavailable",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

proptest! {
    #[test]
    fn replay_follows_the_budget_rule(case in case()) {
        let result = run_case(&case);
        let report = match &result.result {
            Ok(report) => report,
            Err(invalid) => {
                return Err(TestCaseError::fail(format!(
                    "valid data rejected: {}", invalid.message
                )));
            }
        };
        check_replay(&case, report)?;
        check_status_text(report)?;
        let line = result.to_json();
        prop_assert_eq!(line["outcome"].as_str(), Some(report.outcome.as_str()));
    }

    #[test]
    fn replay_never_panics_on_any_header_text(
        policy in policy(),
        headers in vec(any::<String>(), 1..=6),
        trusted in any::<bool>(),
    ) {
        let attempts = (0..policy.max_attempts() as usize)
            .map(|i| ScriptedAttempt {
                duration: policy.attempt_cap() / 2,
                status: 429,
                retry_after: Some(headers[i % headers.len()].clone()),
            })
            .collect();
        let case = Case {
            id: "any_header".into(),
            title: None,
            policy,
            calendar_epoch: epoch(),
            attempts,
            clock_trusted: trusted,
            leave_at: None,
            wake_late_by: vec![],
            calendar_jumps: vec![],
            expect: None,
        };
        let result = run_case(&case);
        let report = result.result.as_ref().map_err(|e| TestCaseError::fail(e.message.clone()))?;
        check_replay(&case, report)?;
        // Serialising the trail and the status line does not panic either.
        let _ = result.to_json().to_string();
    }

    #[test]
    fn an_attempt_longer_than_the_cap_is_invalid_data(
        policy in policy(),
        extra_ns in 1u64..=1_000_000_000,
        index in 0usize..6,
    ) {
        let n = policy.max_attempts() as usize;
        let index = index % n;
        let attempts = (0..n)
            .map(|i| ScriptedAttempt {
                duration: if i == index {
                    policy.attempt_cap() + Duration::from_nanos(extra_ns)
                } else {
                    Duration::ZERO
                },
                status: 429,
                retry_after: None,
            })
            .collect();
        let case = Case {
            id: "too_long".into(),
            title: None,
            policy,
            calendar_epoch: epoch(),
            attempts,
            clock_trusted: true,
            leave_at: None,
            wake_late_by: vec![],
            calendar_jumps: vec![],
            expect: None,
        };
        let result = run_case(&case);
        prop_assert_eq!(result.outcome(), Outcome::InvalidData);
        let message = result.result.unwrap_err().message;
        let needle = format!("Attempt {} lasted", index + 1);
        prop_assert!(message.contains(&needle), "{}", message);
    }
}

// ------------------------------------------------- Action, arbitrary inputs

#[derive(Debug, Clone)]
enum Input {
    Start(Duration),
    Response(Duration, u16, RetryAfter, Option<SystemTime>),
    Woke(Duration),
    Left(Duration),
    TimedOut(Duration),
    TransportFailed(Duration),
    /// The server forbids retrying the next response.
    Forbid,
    /// The next response was translated from another protocol's signal.
    Translated,
}

fn when() -> impl Strategy<Value = Duration> {
    prop_oneof![
        20 => (0u64..=40_000).prop_map(Duration::from_millis),
        1 => Just(Duration::MAX),
        1 => any::<u64>().prop_map(Duration::from_secs),
    ]
}

fn any_retry_after() -> impl Strategy<Value = RetryAfter> {
    prop_oneof![
        3 => header().prop_map(|h| h.map_or(RetryAfter::Missing, |h| RetryAfter::parse(&h))),
        1 => vec(any::<u8>(), 0..40).prop_map(|b| RetryAfter::parse_bytes(&b)),
        1 => any::<u64>().prop_map(|n| RetryAfter::Seconds(Duration::from_secs(n))),
    ]
}

fn calendar() -> impl Strategy<Value = Option<SystemTime>> {
    proptest::option::weighted(
        0.8,
        (0u64..=200_000)
            .prop_map(|ms| epoch() - Duration::from_secs(60) + Duration::from_millis(ms)),
    )
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        3 => when().prop_map(Input::Start),
        4 => (when(), status(), any_retry_after(), calendar())
            .prop_map(|(t, s, h, c)| Input::Response(t, s, h, c)),
        3 => when().prop_map(Input::Woke),
        1 => when().prop_map(Input::Left),
        1 => when().prop_map(Input::TimedOut),
        1 => when().prop_map(Input::TransportFailed),
        1 => Just(Input::Forbid),
        1 => Just(Input::Translated),
    ]
}

fn input_time(input: &Input) -> Duration {
    match input {
        Input::Start(t)
        | Input::Response(t, ..)
        | Input::Woke(t)
        | Input::Left(t)
        | Input::TimedOut(t)
        | Input::TransportFailed(t) => *t,
        // Told with the next response (one `Answer`), at its time: no
        // input of their own.
        Input::Translated | Input::Forbid => Duration::ZERO,
    }
}

proptest! {
    #[test]
    fn action_holds_its_invariants_under_any_inputs(
        policy in policy(),
        inputs in vec(input(), 0..24),
    ) {
        let mut action = Action::new(policy);
        let mut latest = Duration::ZERO;
        let mut frozen: Option<Report> = None;
        // The server's word and a translation are told with the next
        // response the action answers (one `Answer`), as an adapter does.
        let mut forbidden = false;
        let mut translated = false;
        for input in &inputs {
            let before = action.attempts_started();
            let phase_before = action.decision();
            latest = latest.max(input_time(input));
            let decision = match input {
                Input::Start(t) => action.attempt_started(*t),
                Input::Response(t, status, header, calendar) => {
                    let mut answer = Answer::new(*status, header)
                        .calendar(*calendar)
                        .forbidden(forbidden);
                    if translated {
                        answer = answer.translated_from("from elsewhere");
                    }
                    action.respond(*t, answer)
                }
                Input::Woke(t) => action.timer_woke(*t),
                Input::Left(t) => action.caller_left(*t),
                Input::TimedOut(t) => action.attempt_timed_out(*t),
                Input::TransportFailed(t) => action.transport_failed(*t),
                Input::Forbid => {
                    forbidden = true;
                    action.decision()
                }
                Input::Translated => {
                    translated = true;
                    action.decision()
                }
            };
            // A forbidden retry applies to the next response only.
            let answered = matches!(
                (input, phase_before),
                (Input::Response(..), Decision::AwaitResponse { .. })
            );
            let forbid_applies = forbidden && answered;
            forbidden &= !answered;
            translated &= !answered;
            if matches!(input, Input::Forbid | Input::Translated) {
                prop_assert_eq!(decision, phase_before);
            }
            prop_assert_eq!(decision, action.decision());
            prop_assert!(action.attempts_started() <= policy.max_attempts());
            let after = action.attempts_started();
            prop_assert!(after == before || (after == before + 1 && matches!(input, Input::Start(_))));

            // After the stop, nothing changes.
            if let Some(report) = &frozen {
                prop_assert_eq!(&action.report().unwrap(), report);
                continue;
            }
            if let Decision::Stop(outcome) = decision {
                prop_assert_eq!(action.outcome(), Some(outcome));
                frozen = action.report();
                prop_assert!(frozen.is_some());
            } else {
                prop_assert!(action.report().is_none());
            }

            // A wake re-checks from the current time: early changes nothing,
            // on time or late starts only if the full cap still fits.
            if let (Input::Woke(_), Decision::WaitUntil(until)) = (input, phase_before) {
                let fits = latest
                    .checked_add(policy.attempt_cap())
                    .is_some_and(|end| end <= policy.total_budget());
                let expected = if latest < until {
                    Decision::WaitUntil(until)
                } else if fits {
                    Decision::StartNow
                } else {
                    Decision::Stop(Outcome::BudgetExhausted)
                };
                prop_assert_eq!(decision, expected);
            }

            // A wait planned after a response follows the formula from the
            // latest elapsed time seen.
            if forbid_applies && matches!(input, Input::Response(_, 429, ..)) {
                prop_assert_eq!(decision, Decision::Stop(Outcome::NotRetryable));
                continue;
            }
            if let (Input::Response(_, 429, header, calendar), Decision::AwaitResponse { .. }, Decision::WaitUntil(until)) =
                (input, phase_before, decision)
            {
                let seen = RetryAfterSeen::at_receipt(header, *calendar);
                let expected = expected_after_retried_status(&policy, before, latest, &seen, *calendar);
                prop_assert_eq!(Ok(until - latest), expected);
            }
            if let (Input::Response(_, 429, header, calendar), Decision::AwaitResponse { .. }, Decision::Stop(outcome)) =
                (input, phase_before, decision)
            {
                let seen = RetryAfterSeen::at_receipt(header, *calendar);
                let expected = expected_after_retried_status(&policy, before, latest, &seen, *calendar);
                prop_assert_eq!(Err(outcome), expected);
            }
        }

        // Leave, to read the report whatever happened.
        action.caller_left(latest);
        let report = action.report().expect("stopped");
        let budget = policy.total_budget();
        for start in &report.starts() {
            prop_assert!(*start + policy.attempt_cap() <= budget);
        }
        prop_assert!(report.starts().windows(2).all(|w| w[0] <= w[1]));
        prop_assert!(report.events.windows(2).all(|w| w[0].at <= w[1].at));
        for event in &report.events {
            prop_assert_eq!(event.remaining_budget, budget.saturating_sub(event.at));
        }
        prop_assert!(report.request_time.checked_add(report.wait_time).is_some_and(|sum| sum <= report.elapsed));
        let ends_with_stop = matches!(
            report.events.last().map(|e| &e.kind),
            Some(EventKind::Stopped { .. })
        );
        prop_assert!(ends_with_stop);
        let _ = report.to_string();
        let _ = report.to_json();
    }
}

// --------------------------------------------------------- Retry-After

proptest! {
    #[test]
    fn parsing_any_bytes_never_panics_and_keeps_a_short_raw(bytes in vec(any::<u8>(), 0..200)) {
        match RetryAfter::parse_bytes(&bytes) {
            RetryAfter::Invalid(invalid) => {
                prop_assert!(invalid.raw().chars().count() <= retry_budget::retry_after::MAX_KEPT_RAW + 1);
            }
            RetryAfter::Seconds(_) | RetryAfter::Date(_) | RetryAfter::Repeated(_) => {}
            RetryAfter::Missing => return Err(TestCaseError::fail("a present header is never Missing")),
        }
    }

    #[test]
    fn delay_seconds_is_exactly_digits_and_saturates(
        digits in "[0-9]{1,45}",
        lead in "[ \t]{0,2}",
        trail in "[ \t]{0,2}",
    ) {
        let significant = digits.trim_start_matches('0');
        let expected = if significant.len() > 20 {
            u64::MAX
        } else if significant.is_empty() {
            0
        } else {
            u64::try_from(significant.parse::<u128>().unwrap()).unwrap_or(u64::MAX)
        };
        let parsed = RetryAfter::parse(&format!("{lead}{digits}{trail}"));
        prop_assert_eq!(parsed, RetryAfter::Seconds(Duration::from_secs(expected)));
    }

    #[test]
    fn digits_with_anything_else_are_not_delay_seconds(
        digits in "[0-9]{1,6}",
        // No comma: a comma makes a list, whose valid element counts.
        junk in "[-+.eEsx;a-z]{1,3}",
        before in any::<bool>(),
    ) {
        let raw = if before { format!("{junk}{digits}") } else { format!("{digits}{junk}") };
        prop_assert!(
            matches!(RetryAfter::parse(&raw), RetryAfter::Invalid(_)),
            "{:?} parsed as valid", raw
        );
    }

    #[test]
    fn an_imf_fixdate_round_trips(secs in 0u64..=253_402_300_799) {
        let date = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        prop_assert_eq!(
            RetryAfter::parse(&httpdate::fmt_http_date(date)),
            RetryAfter::Date(date.into())
        );
    }
}
