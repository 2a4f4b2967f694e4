//! [`Action::pace`]: the pacer's admission told to the core before the
//! first attempt. Default policy (20 s budget, 4 s cap: the latest first
//! start is 16 s) unless a test builds its own.

use std::time::Duration;

use retry_budget::pace::{LimitKind, PaceReason, PaceRule, Pacer, PacerConfig, QuotaReader};
use retry_budget::retry_after::RetryAfter;
use retry_budget::trail::{EventKind, WaitBasis};
use retry_budget::trail_text::{basis_name, kind_name, Note, WaitReason};
use retry_budget::{Action, Category, Decision, Outcome, Policy};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn reason(left: u64, resets_at: Duration) -> PaceReason {
    PaceReason {
        limit: "default".into(),
        kind: LimitKind::Requests,
        announced: left,
        left,
        resets_at,
        rule: PaceRule::Exhausted,
        clamped: false,
    }
}

#[test]
fn a_pace_that_fits_waits_then_starts() {
    let mut action = Action::new(Policy::default());
    let why = reason(0, ms(2050));
    assert_eq!(
        action.pace(ms(10), ms(2100), &why),
        Decision::WaitUntil(ms(2100))
    );
    let events = action.events();
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].kind,
        EventKind::Paced {
            until: ms(2100),
            reason: why.clone()
        }
    );
    assert_eq!(
        events[1].kind,
        EventKind::WaitPlanned {
            wait: ms(2090),
            until: ms(2100),
            reservation_end: ms(6100),
            basis: WaitBasis::Pace {
                left: 0,
                resets_at: ms(2050)
            },
        }
    );
    assert_eq!(action.timer_woke(ms(2100)), Decision::StartNow);
    assert_eq!(
        action.attempt_started(ms(2100)),
        Decision::AwaitResponse {
            attempt: 1,
            deadline: ms(6100),
        }
    );
    let report = {
        action.response(ms(2300), 200, &RetryAfter::Missing, None);
        action.into_report().unwrap()
    };
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.paced(), Some(&why));
    assert_eq!(report.paced_left(), None);
}

#[test]
fn a_pace_that_does_not_fit_stops_without_sending() {
    let mut action = Action::new(Policy::default());
    let why = reason(0, s(30));
    assert_eq!(
        action.pace(s(1), s(17) + ms(1), &why),
        Decision::Stop(Outcome::Paced)
    );
    assert_eq!(action.attempts_started(), 0);
    let report = action.into_report().unwrap();
    assert_eq!(report.outcome, Outcome::Paced);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(report.elapsed, s(1));
    assert_eq!(report.paced_left(), Some(s(16) + ms(1)));
    assert_eq!(report.paced(), Some(&why));
    let text = report.to_string();
    assert!(
        text.contains("Limit default: 0 left (announced 0), resets in 29 s"),
        "{text}"
    );
    let json = report.to_json();
    assert_eq!(json["outcome"], "paced");
    assert_eq!(json["category"], "rate_limit");
    let paced = &json["events"][0];
    assert_eq!(paced["kind"], "paced");
    assert_eq!(paced["reason"]["limit"], "default");
    assert_eq!(paced["reason"]["left"], 0);
    assert_eq!(paced["reason"]["resets_at_s"], 30.0);
}

#[test]
fn a_pace_ending_exactly_at_the_latest_start_fits() {
    let mut action = Action::new(Policy::default());
    assert_eq!(
        action.pace(s(0), s(16), &reason(0, s(16))),
        Decision::WaitUntil(s(16))
    );
    let mut late = Action::new(Policy::default());
    assert_eq!(
        late.pace(s(0), s(16) + Duration::from_nanos(1), &reason(0, s(16))),
        Decision::Stop(Outcome::Paced)
    );
}

#[test]
fn a_past_pace_or_one_after_the_first_attempt_changes_nothing() {
    let mut action = Action::new(Policy::default());
    assert_eq!(
        action.pace(s(2), s(1), &reason(0, s(1))),
        Decision::StartNow
    );
    assert!(action.events().is_empty());
    action.attempt_started(s(2));
    action.response(s(3), 429, &RetryAfter::Missing, None);
    let before = action.events().len();
    let waiting = action.decision();
    assert_eq!(action.pace(s(3), s(10), &reason(0, s(10))), waiting);
    assert_eq!(action.events().len(), before, "a retry is never paced");
}

#[test]
fn a_pace_during_a_hold_off_keeps_the_later_instant() {
    let mut earlier = Action::new(Policy::default());
    assert_eq!(earlier.hold_off(s(0), s(5)), Decision::WaitUntil(s(5)));
    assert_eq!(
        earlier.pace(s(0), s(3), &reason(0, s(3))),
        Decision::WaitUntil(s(5))
    );
    assert_eq!(earlier.events().len(), 1, "the hold-off alone");

    let mut later = Action::new(Policy::default());
    later.hold_off(s(0), s(5));
    assert_eq!(
        later.pace(s(0), s(8), &reason(0, s(8))),
        Decision::WaitUntil(s(8))
    );
    assert_eq!(later.timer_woke(s(8)), Decision::StartNow);
    let woke = later.events().last().unwrap();
    assert_eq!(
        woke.kind,
        EventKind::Woke {
            waited_from: s(0),
            late_by: s(0)
        }
    );

    let mut stopped = Action::new(Policy::default());
    stopped.hold_off(s(0), s(5));
    assert_eq!(
        stopped.pace(s(0), s(18), &reason(0, s(18))),
        Decision::Stop(Outcome::Paced)
    );
}

#[test]
fn the_words_of_a_pace() {
    let basis = WaitBasis::Pace {
        left: 2,
        resets_at: ms(2500),
    };
    assert_eq!(basis_name(&basis), "pace");
    assert_eq!(
        WaitReason(&basis).to_string(),
        "pace: 2 left of the announced quota until its reset at 2.5 s"
    );
    let paced = EventKind::Paced {
        until: ms(1200),
        reason: reason(2, ms(2500)),
    };
    assert_eq!(kind_name(&paced), "paced");
    assert_eq!(
        Note::of(&paced).unwrap().to_string(),
        "paced by limit default: 2 left (announced 2), resets at 2.5 s; no start before 1.2 s"
    );
    assert_eq!(Outcome::from_name("paced"), Some(Outcome::Paced));
}

/// The pacer and the action together, as an adapter runs them: the
/// announced "0 left, resets in 2 s" holds the next first attempt.
#[test]
fn a_pacer_admission_fed_to_the_action() {
    let reader = QuotaReader::new();
    let config = PacerConfig {
        spread: Duration::ZERO,
        ..PacerConfig::default()
    };
    let mut pacer = Pacer::with_seed(config, 1);
    assert_eq!(pacer.admit(ms(0)).at, ms(0));
    let reading = reader.read(
        [
            ("RateLimit", &br#""default";r=0;t=2"#[..]),
            ("RateLimit-Policy", &br#""default";q=10;w=2"#[..]),
        ],
        None,
    );
    pacer.observe(ms(0), ms(100), &reading.states);
    let admission = pacer.admit(ms(100));
    assert_eq!(admission.at, ms(2100));
    let why = admission.reason.clone().unwrap();
    assert_eq!((why.left, why.resets_at), (0, ms(2100)));
    let mut action = Action::new(Policy::default());
    assert_eq!(
        action.pace(ms(100), admission.at, &why),
        Decision::WaitUntil(ms(2100))
    );
}
