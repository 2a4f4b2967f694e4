//! The pacer's rules, one by one, on exact instants.

use std::time::Duration;

use retry_budget::pace::{
    Admission, FleetWindow, LimitKind, PaceRule, Pacer, PacerConfig, Placement, QuotaState,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn requests(remaining: u64, reset: Duration) -> QuotaState {
    QuotaState {
        name: "default".to_owned(),
        kind: LimitKind::Requests,
        remaining,
        reset,
        quota: None,
        window: None,
    }
}

fn tokens(remaining: u64, reset: Duration) -> QuotaState {
    QuotaState {
        name: "tokens".to_owned(),
        kind: LimitKind::Tokens,
        ..requests(remaining, reset)
    }
}

/// No spread: every instant exact.
fn exact() -> PacerConfig {
    PacerConfig {
        spread: Duration::ZERO,
        ..PacerConfig::default()
    }
}

fn pacer(config: PacerConfig) -> Pacer {
    Pacer::with_seed(config, 42)
}

fn ats(pacer: &mut Pacer, now: Duration, n: usize) -> Vec<Duration> {
    (0..n).map(|_| pacer.admit(now).at).collect()
}

#[test]
fn nothing_known_starts_at_once() {
    let mut p = pacer(exact());
    assert_eq!(
        p.admit(ms(7)),
        Admission {
            at: ms(7),
            reason: None
        }
    );
}

#[test]
fn nothing_left_waits_for_the_reset() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(50), &[requests(0, ms(2000))]);
    let admission = p.admit(ms(60));
    assert_eq!(admission.at, ms(2050));
    assert_eq!(admission.wait(ms(60)), ms(1990));
    let why = admission.reason.unwrap();
    assert_eq!(
        (
            why.limit.as_str(),
            why.kind,
            why.announced,
            why.left,
            why.resets_at,
            why.rule,
            why.clamped
        ),
        (
            "default",
            LimitKind::Requests,
            0,
            0,
            ms(2050),
            PaceRule::Exhausted,
            false
        )
    );
}

#[test]
fn the_spread_after_a_reset_is_seeded_and_bounded() {
    let config = PacerConfig {
        spread: ms(100),
        ..PacerConfig::default()
    };
    let run = |seed| {
        let mut p = Pacer::with_seed(config, seed);
        p.observe(ms(0), ms(0), &[requests(0, ms(1000))]);
        ats(&mut p, ms(0), 8)
    };
    let first = run(1);
    assert_eq!(first, run(1), "same seed, same instants");
    assert_ne!(first, run(2));
    assert!(
        first.iter().all(|at| (ms(1000)..=ms(1100)).contains(at)),
        "{first:?}"
    );
    let mut distinct = first.clone();
    distinct.dedup();
    assert!(
        distinct.len() > 1,
        "the waiting actions do not return together"
    );
}

#[test]
fn what_is_left_is_placed_evenly_until_the_reset() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    // 4 left, resetting at 2050: 0 + k * 2050 / 5.
    p.observe(ms(0), ms(50), &[requests(4, ms(2000))]);
    assert_eq!(
        ats(&mut p, ms(50), 5),
        vec![ms(410), ms(820), ms(1230), ms(1640), ms(2050)]
    );
    let spread = p.admit(ms(50));
    assert_eq!(spread.reason.unwrap().rule, PaceRule::Exhausted);
}

#[test]
fn an_even_start_already_due_goes_at_once() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(1500), &[requests(4, ms(2000))]);
    // 0 + 3500 / 5 = 700, already past at 1500.
    assert_eq!(
        p.admit(ms(1500)),
        Admission {
            at: ms(1500),
            reason: None
        }
    );
    // Then from 1500: (3500 - 1500) / 4 = 500.
    let next = p.admit(ms(1500));
    assert_eq!(next.at, ms(2000));
    let why = next.reason.unwrap();
    assert_eq!(
        (why.rule, why.left, why.announced),
        (PaceRule::Spread, 3, 4)
    );
}

#[test]
fn burst_placement_spends_what_is_left_at_once() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    p.admit(ms(0));
    p.observe(ms(0), ms(50), &[requests(3, ms(2000))]);
    assert_eq!(
        ats(&mut p, ms(50), 4),
        vec![ms(50), ms(50), ms(50), ms(2050)]
    );
}

#[test]
fn starts_since_the_request_was_sent_are_taken_from_what_is_left() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    for t in [0, 100, 200] {
        p.admit(ms(t));
    }
    // The answer to the request sent at 0: 3 left, but two more are in
    // flight since: 1 left.
    p.observe(ms(0), ms(300), &[requests(3, ms(1000))]);
    assert_eq!(ats(&mut p, ms(300), 2), vec![ms(300), ms(1300)]);
    let why = p.admit(ms(300)).reason.unwrap();
    assert_eq!((why.announced, why.left), (3, 0));
}

#[test]
fn a_released_start_no_longer_counts() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    p.observe(ms(0), ms(10), &[requests(1, ms(1000))]);
    let admitted = p.admit(ms(10));
    assert_eq!(admitted.at, ms(10));
    assert_eq!(p.admit(ms(10)).at, ms(1010));
    p.release(&admitted);
    // The start waiting at 1010 (after the reset) does not count in the
    // window: its one start is free again.
    assert_eq!(p.admit(ms(10)).at, ms(10));
}

#[test]
fn a_state_expires_at_its_reset() {
    let mut p = pacer(exact());
    p.observe(ms(0), ms(0), &[requests(0, ms(1000))]);
    assert_eq!(p.admit(ms(999)).at, ms(1000));
    assert_eq!(p.limits().count(), 1);
    // An upstream that stops sending the fields: no longer paced.
    assert_eq!(
        p.admit(ms(1000)),
        Admission {
            at: ms(1000),
            reason: None
        }
    );
    assert_eq!(p.limits().count(), 0);
}

#[test]
fn an_earlier_sent_response_never_raises_what_a_later_one_lowered() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    p.admit(ms(0));
    p.admit(ms(100));
    // The later-sent request's answer arrives first: 2 left.
    p.observe(ms(100), ms(200), &[requests(2, ms(1800))]);
    // The earlier one's, late, says 5: ignored.
    p.observe(ms(0), ms(300), &[requests(5, ms(1700))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.basis), (2, ms(100)));
    // But the earliest reset within the window is its end.
    assert_eq!(held.resets_at, ms(2000));
    // An earlier-sent answer that leaves less is taken: 0 - 0 after 0... it
    // says 1 left with one start (at 100) since: 0.
    p.observe(ms(0), ms(400), &[requests(1, ms(1600))]);
    let held = p.limits().next().unwrap();
    assert_eq!(
        (held.remaining, held.basis, held.resets_at),
        (1, ms(0), ms(2000))
    );
    assert_eq!(p.admit(ms(400)).at, ms(2000));
}

#[test]
fn within_one_window_the_earliest_reset_is_its_end() {
    let mut p = pacer(exact());
    // t rounded up to whole seconds: 500 + 2000 and 900 + 2000.
    p.observe(ms(0), ms(500), &[requests(5, ms(2000))]);
    p.observe(ms(400), ms(900), &[requests(4, ms(2000))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.resets_at), (4, ms(2500)));
}

#[test]
fn a_later_sent_response_from_a_new_window_replaces_the_state() {
    let mut p = pacer(exact());
    p.observe(ms(0), ms(100), &[requests(0, ms(1000))]);
    p.observe(ms(1050), ms(1100), &[requests(9, ms(2000))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.resets_at), (9, ms(3100)));
    // An earlier-sent answer from a window of its own is stale.
    p.observe(ms(50), ms(1200), &[requests(0, ms(10))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.resets_at), (9, ms(3100)));
}

#[test]
fn token_limits_pace_only_when_exhausted_or_below_the_threshold() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(0), &[tokens(5, ms(1000))]);
    assert_eq!(ats(&mut p, ms(0), 3), vec![ms(0); 3]);
    // Same window: the earlier reset (1000) stays its end.
    p.observe(ms(0), ms(10), &[tokens(0, ms(1000))]);
    let admission = p.admit(ms(10));
    assert_eq!(admission.at, ms(1000));
    assert_eq!(admission.reason.unwrap().kind, LimitKind::Tokens);

    let mut p = pacer(PacerConfig {
        token_threshold: 5,
        ..exact()
    });
    p.observe(ms(0), ms(0), &[tokens(5, ms(1000))]);
    assert_eq!(p.admit(ms(0)).at, ms(1000));
}

#[test]
fn the_latest_limit_wins_and_is_named() {
    let mut p = pacer(exact());
    let mut b = requests(0, ms(3000));
    b.name = "b".to_owned();
    p.observe(
        ms(0),
        ms(0),
        &[requests(0, ms(1000)), b, tokens(0, ms(2000))],
    );
    let admission = p.admit(ms(0));
    assert_eq!(
        (admission.at, admission.reason.unwrap().limit.as_str()),
        (ms(3000), "b")
    );
}

#[test]
fn with_a_known_quota_each_window_after_the_reset_takes_its_quota() {
    let mut p = pacer(exact());
    let state = QuotaState {
        quota: Some(2),
        window: Some(ms(2000)),
        ..requests(0, ms(1000))
    };
    p.observe(ms(0), ms(0), &[state]);
    assert_eq!(
        ats(&mut p, ms(0), 5),
        vec![ms(1000), ms(1000), ms(3000), ms(3000), ms(5000)]
    );
}

#[test]
fn no_start_is_placed_past_the_maximum_hold() {
    let config = PacerConfig {
        max_hold: ms(4000),
        ..exact()
    };
    let mut p = pacer(config);
    // A reset of an hour is held for the maximum hold.
    p.observe(ms(0), ms(0), &[requests(0, Duration::from_secs(3600))]);
    assert_eq!(p.limits().next().unwrap().resets_at, ms(4000));
    assert_eq!(p.admit(ms(0)).at, ms(4000));

    // Projected windows past the hold: clamped, and the reason says so.
    let mut p = pacer(config);
    let state = QuotaState {
        quota: Some(1),
        window: Some(ms(3000)),
        ..requests(0, ms(1000))
    };
    p.observe(ms(0), ms(0), &[state]);
    assert_eq!(ats(&mut p, ms(0), 2), vec![ms(1000), ms(4000)]);
    let clamped = p.admit(ms(0));
    assert_eq!(clamped.at, ms(4000));
    assert!(clamped.reason.unwrap().clamped);
}

#[test]
fn time_going_backwards_is_read_as_the_latest_seen() {
    let mut p = pacer(exact());
    assert_eq!(p.admit(ms(500)).at, ms(500));
    assert_eq!(p.admit(ms(300)).at, ms(500));
    // A response received "before" it was sent.
    p.observe(ms(900), ms(100), &[requests(0, ms(100))]);
    assert_eq!(p.limits().next().unwrap().basis, ms(500));
}

#[test]
fn the_reason_is_written_for_the_trail() {
    let mut p = pacer(exact());
    p.observe(ms(0), ms(500), &[requests(0, ms(1500))]);
    let why = p.admit(ms(500)).reason.unwrap();
    assert_eq!(
        serde_json::to_value(&why).unwrap(),
        serde_json::json!({
            "limit": "default",
            "kind": "requests",
            "announced": 0,
            "left": 0,
            "resets_at_s": 2.0,
            "rule": "exhausted",
            "clamped": false,
        })
    );
}

#[test]
fn the_fleet_shares_the_windows_of_request_limits_only() {
    let mut p = pacer(exact());
    assert_eq!(p.fleet_windows(ms(0)), vec![]);
    p.admit(ms(0));
    p.observe(
        ms(0),
        ms(50),
        &[requests(7, ms(2000)), tokens(0, ms(60_000))],
    );
    assert_eq!(
        p.fleet_windows(ms(60)),
        vec![FleetWindow {
            limit: "default".to_owned(),
            announced: 7,
            resets_at: ms(2050),
        }]
    );
    // Past its reset, a window is no longer shared.
    assert_eq!(p.fleet_windows(ms(2050)), vec![]);
}

#[test]
fn a_window_the_fleet_spent_holds_the_start_until_its_end() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    p.admit(ms(0));
    let state = QuotaState {
        quota: Some(10),
        window: Some(ms(2000)),
        ..requests(5, ms(2000))
    };
    p.observe(ms(0), ms(100), &[state]);
    // Locally 5 are left: at once.
    let admission = p.admit(ms(100));
    assert_eq!(admission.at, ms(100));
    // The fleet has none left for 1.5 s (by Redis's clock): not before.
    let again = p.fleet_spent("default", ms(100), ms(1500), &admission);
    assert_eq!(again.at, ms(1600));
    let why = again.reason.expect("paced by the fleet's window");
    assert_eq!(
        (
            why.limit.as_str(),
            why.announced,
            why.left,
            why.resets_at,
            why.rule
        ),
        ("default", 0, 0, ms(1600), PaceRule::Exhausted)
    );
    // The start given back and placed again counts once: nine more fit
    // in the window after the fleet's, the eleventh goes to the next one.
    assert_eq!(ats(&mut p, ms(100), 9), vec![ms(1600); 9]);
    assert_eq!(p.admit(ms(100)).at, ms(3600));
}

#[test]
fn a_fleet_window_longer_than_the_maximum_hold_is_clamped() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(10), &[requests(3, ms(1000))]);
    let admission = p.admit(ms(10));
    let again = p.fleet_spent("default", ms(10), Duration::MAX, &admission);
    assert!(again.at <= ms(10) + exact().max_hold);
}

#[test]
fn a_token_limit_learns_the_cost_of_a_start_and_counts_starts_since() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(50), &[tokens(5000, ms(6000))]);
    // No cost known: 5,000 tokens left do not pace.
    assert_eq!(p.admit(ms(100)).at, ms(100));
    // The response to the start at 100 ms: 1,000 fewer, one start
    // between the two requests.
    p.observe(ms(100), ms(150), &[tokens(4000, ms(5900))]);
    assert_eq!(p.limits().next().unwrap().cost, Some(1000));
    // Four starts' worth left: four go at once, the fifth waits for the
    // reset (the earlier of the two announced).
    assert_eq!(ats(&mut p, ms(200), 4), vec![ms(200); 4]);
    let fifth = p.admit(ms(200));
    assert_eq!(fifth.at, ms(6050));
    let why = fifth.reason.unwrap();
    assert_eq!(
        (why.kind, why.announced, why.left, why.rule),
        (LimitKind::Tokens, 4000, 0, PaceRule::Exhausted)
    );
}

#[test]
fn a_token_cost_is_the_largest_drop_per_start_and_survives_the_window() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    p.observe(ms(0), ms(10), &[tokens(10_000, ms(1000))]);
    p.admit(ms(20));
    p.admit(ms(30));
    // Two starts between the requests, 3,000 fewer: 1,500 a start.
    p.observe(ms(30), ms(40), &[tokens(7000, ms(970))]);
    assert_eq!(p.limits().next().unwrap().cost, Some(1500));
    p.admit(ms(50));
    // A smaller drop keeps the larger cost.
    p.observe(ms(50), ms(60), &[tokens(6500, ms(950))]);
    assert_eq!(p.limits().next().unwrap().cost, Some(1500));
    // The next window keeps it: 2,000 left is one start's worth.
    p.observe(ms(1100), ms(1110), &[tokens(2000, ms(1000))]);
    assert_eq!(p.limits().next().unwrap().cost, Some(1500));
    assert_eq!(p.admit(ms(1120)).at, ms(1120));
    assert_eq!(p.admit(ms(1120)).at, ms(2110));
}

#[test]
fn a_later_sent_response_finding_more_left_starts_a_new_window() {
    let mut p = pacer(exact());
    p.admit(ms(0));
    // The old window's end, announced late (rounded up): 2 s.
    p.observe(ms(0), ms(100), &[requests(0, ms(1900))]);
    // A request sent at 1150 ms, after the server's real reset, finds 9
    // left, its window ending at 2.9 s: less than a second from the old
    // end, but a count that went up is a new window.
    p.observe(ms(1150), ms(1200), &[requests(9, ms(1700))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.resets_at), (9, ms(2900)));
    // Nine more fit before 2.9 s, none after the old end's instant.
    assert!(ats(&mut p, ms(1200), 9).iter().all(|at| *at < ms(2900)));
    assert_eq!(p.admit(ms(1200)).at, ms(2900));
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Seen against express-rate-limit: six actions admitted at once are sent
/// a moment later; the first answer back covers only what reached the
/// server before it. Compared by the instant each was admitted, the five
/// others counted as covered, and the window was spent twice over.
#[test]
fn a_burst_is_counted_from_the_instants_it_was_sent() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    let admitted: Vec<Admission> = (0..6).map(|_| p.admit(ms(0))).collect();
    for (i, admission) in (1..).zip(&admitted) {
        p.sent(admission, us(100 * i));
    }
    // The answer to the first sent (at 100 us): 9 left of 10; the five
    // sent after it are in flight.
    p.observe(us(100), ms(3), &[requests(9, ms(2000))]);
    let why = p.admit(ms(3)).reason;
    assert_eq!(why, None);
    assert_eq!(ats(&mut p, ms(3), 3), vec![ms(3); 3]);
    let fifth = p.admit(ms(3));
    assert_eq!(fifth.at, ms(2003));
    let why = fifth.reason.unwrap();
    assert_eq!((why.announced, why.left), (9, 0));
}

/// Two requests sent less than a round trip apart may reach the server
/// in either order: the later-sent one finding more left raced the other
/// and is not a new window.
#[test]
fn a_raced_answer_finding_more_left_does_not_raise_the_count() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    let first = p.admit(ms(0));
    let second = p.admit(ms(0));
    p.sent(&first, us(200));
    p.sent(&second, us(800));
    // The first sent reached the server second: 4 left.
    p.observe(us(200), ms(3), &[requests(4, ms(2000))]);
    // The second sent, 0.6 ms later (its round trip was 2.8 ms), reached
    // it first: 5 left, the older count.
    p.observe(us(800), us(3100), &[requests(5, ms(2000))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.basis), (4, us(200)));
    // One start counted since the first was sent: 3 left.
    assert_eq!(ats(&mut p, ms(4), 3), vec![ms(4); 3]);
    assert_eq!(p.admit(ms(4)).at, ms(2003));
    // Sent a full round trip later, more left is a new window.
    p.observe(ms(1000), ms(1002), &[requests(9, ms(2000))]);
    let held = p.limits().next().unwrap();
    assert_eq!((held.remaining, held.resets_at), (9, ms(3002)));
}

/// A 429's retry waits what its response asked and lands in a window the
/// pacer may already have placed: it counts there like a first attempt,
/// or it is one too many in that window and its own 429 the next one's.
#[test]
fn a_planned_retry_counts_in_the_window_it_lands_in() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    p.observe(ms(0), ms(10), &[requests(3, ms(2000))]);
    let retry = p.retry_planned(ms(10), ms(500));
    assert_eq!(retry.at, ms(510));
    // Two of the three are left for first attempts.
    assert_eq!(ats(&mut p, ms(20), 2), vec![ms(20); 2]);
    assert_eq!(p.admit(ms(20)).at, ms(2010));
    // Sent late, it still counts once; a retry never sent is given back.
    p.sent(&retry, ms(530));
    let again = p.retry_planned(ms(600), ms(100));
    p.release(&again);
    let why = p.admit(ms(700)).reason.unwrap();
    assert_eq!((why.announced, why.left), (3, 0));
    // A retry's wait is never made longer than the maximum hold.
    let far = p.retry_planned(ms(700), Duration::MAX);
    assert_eq!(far.at, ms(700) + exact().max_hold);
}

/// Another caller's later instant may reach the pacer first: a start is
/// still kept at the instant it was sent, the one its answer names.
#[test]
fn a_start_sent_before_the_latest_instant_seen_is_kept_where_it_was_sent() {
    let mut p = pacer(PacerConfig {
        placement: Placement::Burst,
        ..exact()
    });
    let admitted = p.admit(ms(0));
    p.observe(ms(10), ms(10), &[]);
    p.sent(&admitted, ms(5));
    // Its answer: 3 left, its own start not taken from them.
    p.observe(ms(5), ms(20), &[requests(3, ms(1000))]);
    assert_eq!(ats(&mut p, ms(20), 3), vec![ms(20); 3]);
    assert_eq!(p.admit(ms(20)).at, ms(1020));
}
