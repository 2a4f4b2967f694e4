//! The state machine under arbitrary policies and arbitrary input sequences:
//! no panic, no overflow, and the invariants of the budget rule hold.
#![no_main]

use std::time::{Duration, SystemTime};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use retry_budget::{Action, Answer, Decision, Outcome, Policy, trail::EventKind, retry_after::RetryAfter};

#[derive(Debug, Arbitrary)]
enum Input {
    Start(u64),
    Response { at: u64, status: u16, retry_after: Vec<u8>, calendar: Option<u64> },
    Wake(u64),
    Leave(u64),
    Timeout(u64),
    TransportFailed(u64),
    Forbid,
    Translated(u64),
}

#[derive(Debug, Arbitrary)]
struct Script {
    budget_ms: u64,
    cap_ms: u64,
    attempts: u8,
    min_wait_ms: u64,
    base: u32,
    inputs: Vec<Input>,
}

fuzz_target!(|script: Script| {
    let Ok(policy) = Policy::builder()
        .total_budget(Duration::from_millis(script.budget_ms))
        .attempt_cap(Duration::from_millis(script.cap_ms))
        .max_attempts(u32::from(script.attempts))
        .min_wait(Duration::from_millis(script.min_wait_ms))
        .fallback_base(script.base)
        .build()
    else {
        return;
    };
    let mut action = Action::new(policy);
    // The server's word and a translation go with the next response.
    let (mut forbidden, mut translated) = (false, false);
    for input in script.inputs {
        let ms = Duration::from_millis;
        let decision = match input {
            Input::Start(at) => action.attempt_started(ms(at)),
            Input::Response { at, status, retry_after, calendar } => {
                let calendar = calendar.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s % (1 << 40)));
                let retry_after = RetryAfter::parse_bytes(&retry_after);
                let mut answer = Answer::new(status, &retry_after).calendar(calendar).forbidden(forbidden);
                if translated {
                    answer = answer.translated_from("grpc-status 8 (RESOURCE_EXHAUSTED)");
                }
                (forbidden, translated) = (false, false);
                action.respond(ms(at), answer)
            }
            Input::Wake(at) => action.timer_woke(ms(at)),
            Input::Leave(at) => action.caller_left(ms(at)),
            Input::Timeout(at) => action.attempt_timed_out(ms(at)),
            Input::TransportFailed(at) => action.transport_failed(ms(at)),
            Input::Forbid => {
                forbidden = true;
                action.decision()
            }
            Input::Translated(_) => {
                translated = true;
                action.decision()
            }
        };
        if let Decision::WaitUntil(until) = decision {
            // A planned wait always leaves room for the whole next attempt.
            assert!(until.saturating_add(policy.attempt_cap()) <= policy.total_budget());
        }
    }
    let Some(report) = action.clone().into_report() else { return };
    assert!(report.attempts_started <= policy.max_attempts());
    for start in &report.starts {
        assert!(*start + policy.attempt_cap() <= policy.total_budget(), "{report:?}");
    }
    assert!(report.starts.windows(2).all(|w| w[0] <= w[1]));
    assert!(report.events.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(matches!(report.events.last().map(|e| &e.kind), Some(EventKind::Stopped { .. })));
    if report.outcome == Outcome::InvalidData {
        panic!("the state machine never says invalid_data");
    }
    let _ = report.to_string();
    let _ = report.to_json();
});
