//! Every case of the given data, driven through the real layer over a
//! scripted inner service under tokio's paused clock, asserting exact
//! instants against the case's `expect`.
//!
//! The clock moves in 1 ms steps (`tokio::time::advance`); the future is
//! polled only when woken. A late wake is made by advancing the clock past the
//! planned wake before polling again; the user leaving by dropping the future
//! or, separately, by firing a cancellation token at the scripted instant.

mod support;

use std::time::Duration;

use http::Request;
use retry_budget::schedule::{self, Case, CaseResult};
use retry_budget::{Outcome, Report};
use serde_json::Value;
use support::{Scripted, Step};
use tokio::time::Instant;
use tokio_test::task;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};
use tower_retry_budget::{calendar::FnCalendar, RetryBudgetLayer};

const FIXTURE: &str = include_str!("../../../tests/fixtures/B62-16-schedules.json");
const STEP: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leave {
    Drop,
    Token,
}

/// What one run through the layer produced.
struct Run {
    calls: Vec<Duration>,
    /// When the future completed (or was dropped).
    ended_at: Duration,
    /// `None` when the future was dropped.
    report: Option<Report>,
    last_status: Option<u16>,
    calls_after_long_advance: usize,
}

async fn drive(case: &Case, leave: Leave) -> Run {
    let origin = Instant::now();
    let script = case
        .attempts
        .iter()
        .map(|a| Step {
            after: a.duration,
            status: a.status,
            retry_after: a.retry_after.clone(),
        })
        .collect();
    let inner = Scripted::new(script);
    let calendar_case = case.clone();
    let calendar = FnCalendar(move || calendar_case.calendar_at(Instant::now() - origin));
    let mut client = tower::ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(case.policy).calendar(calendar))
        .service(inner.clone());

    let token = CancellationToken::new();
    let mut request = Request::get("http://palette.test/palettes?collection=coast")
        .body(())
        .unwrap();
    if leave == Leave::Token {
        request.extensions_mut().insert(token.clone());
    }
    ServiceExt::<Request<()>>::ready(&mut client).await.unwrap();
    let mut fut = Some(task::spawn(client.call(request)));

    let mut lates = case.wake_late_by.iter().copied();
    let mut first = true;
    let mut waits_seen = 0;
    let mut delivered = 0;
    let (ended_at, result) = loop {
        let now = Instant::now() - origin;
        if case.leave_at == Some(now) {
            match leave {
                Leave::Drop => {
                    fut = None;
                    break (now, None);
                }
                Leave::Token => token.cancel(),
            }
        }
        let f = fut.as_mut().unwrap();
        if first || f.is_woken() {
            first = false;
            // Woken while waiting between attempts (every response so far
            // was already delivered by an earlier poll): the timer fired.
            // Make it late, as scripted, by moving the clock before polling.
            let calls = inner.call_count();
            if calls > 0 && delivered == calls && waits_seen < calls && !token.is_cancelled() {
                waits_seen = calls;
                if let Some(late) = lates.next() {
                    tokio::time::advance(late).await;
                }
            }
            let answered = case.attempts[..calls]
                .iter()
                .map(|a| a.duration)
                .zip(inner.calls())
                .all(|(d, start)| start + d <= Instant::now() - origin);
            if answered {
                delivered = calls;
            }
            if let std::task::Poll::Ready(result) = f.poll() {
                break (Instant::now() - origin, Some(result));
            }
        }
        assert!(
            now < Duration::from_secs(120),
            "{}: never finished",
            case.id
        );
        tokio::time::advance(STEP).await;
    };
    drop(fut);
    let calls = inner.calls();
    // Long after the end, nothing else reaches the inner service.
    tokio::time::advance(Duration::from_secs(600)).await;
    let (report, last_status) = match result {
        None => (None, None),
        Some(Ok(response)) => (
            response.extensions().get::<Report>().cloned(),
            Some(response.status().as_u16()),
        ),
        Some(Err(error)) => (error.report().cloned(), None),
    };
    Run {
        calls,
        ended_at,
        report,
        last_status,
        calls_after_long_advance: inner.call_count(),
    }
}

fn secs_of(value: &Value) -> Duration {
    Duration::from_secs_f64(value.as_f64().unwrap())
}

fn check_case(case: &Case, leave: Leave, run: &Run, failures: &mut Vec<String>) {
    let expect = case.expect.as_ref().unwrap();
    let mut fail = |what: String| failures.push(format!("{} ({leave:?}): {what}", case.id));
    if run.calls_after_long_advance != run.calls.len() {
        fail(format!(
            "inner service called again after the end ({} then {})",
            run.calls.len(),
            run.calls_after_long_advance
        ));
    }

    if expect["outcome"] == "invalid_data" {
        // The model rejects the data; the middleware enforces the cap as a
        // real deadline instead: one attempt, abandoned at the cap.
        let report = run.report.as_ref().expect("a report");
        if report.outcome != Outcome::AttemptTimeout
            || run.ended_at != case.policy.attempt_cap()
            || run.calls != [Duration::ZERO]
        {
            fail(format!(
                "expected attempt_timeout at the cap, got {} at {:?} with calls {:?}",
                report.outcome, run.ended_at, run.calls
            ));
        }
        return;
    }

    // Exact instants, observed from outside the layer.
    let starts: Vec<_> = expect["starts_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(secs_of)
        .collect();
    if run.calls != starts {
        fail(format!("calls at {:?}, expected {starts:?}", run.calls));
    }
    if run.calls.len() as u64 != expect["attempts_started"].as_u64().unwrap() {
        fail(format!("{} calls", run.calls.len()));
    }
    if run.ended_at != secs_of(&expect["stopped_at_s"]) {
        fail(format!("ended at {:?}", run.ended_at));
    }

    let Some(report) = &run.report else {
        // Dropped: the caller holds nothing; the checks above are all there is.
        assert_eq!(leave, Leave::Drop);
        return;
    };
    // The response returned, if any, is the last one received.
    if let Some(status) = run.last_status {
        if Some(status) != report.last_status {
            fail(format!(
                "returned {status}, report says {:?}",
                report.last_status
            ));
        }
    }
    let line = CaseResult {
        id: case.id.clone(),
        result: Ok(report.clone()),
    }
    .to_json();
    for m in schedule::mismatches(&line, expect) {
        fail(m.to_string());
    }
}

#[tokio::test(start_paused = true)]
async fn every_fixture_case_through_the_layer() {
    let fixture = schedule::parse(FIXTURE).unwrap();
    let mut failures = Vec::new();
    let mut runs = 0;
    for case in &fixture.cases {
        let leaves: &[Leave] = if case.leave_at.is_some() {
            &[Leave::Drop, Leave::Token]
        } else {
            &[Leave::Token]
        };
        for &leave in leaves {
            let run = drive(case, leave).await;
            check_case(case, leave, &run, &mut failures);
            runs += 1;
        }
    }
    assert_eq!(runs, 16);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
