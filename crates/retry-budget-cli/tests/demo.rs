//! `retry-budget demo`, run as a built binary: the built-in fixture played
//! on a loopback server in real time.

use std::process::{Command, Output};

use serde_json::Value;

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .arg("demo")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

#[test]
fn list_names_what_it_plays_and_why_not_the_rest() {
    let output = demo(&["--list"]);
    assert_eq!(output.status.code(), Some(0));
    let out = text(&output.stdout);
    for id in [
        "schedule_a_delay_seconds",
        "schedule_b_http_date",
        "missing_header",
        "wait_exceeds_budget",
        "attempt_limit",
        "user_leaves_during_wait",
        "date_clock_untrusted",
        "attempt_longer_than_cap",
    ] {
        assert!(out.contains(&format!("\n  {id} ")), "{id} not in:\n{out}");
    }
    let (_, refused) = out
        .split_once("does not play")
        .expect("a list of cases not played");
    for id in [
        "schedule_b_calendar_adjusted_during_wait",
        "wait_fits_attempt_does_not",
        "scheduler_wakes_late",
    ] {
        assert!(refused.contains(id), "{id} not refused:\n{out}");
    }
}

#[test]
fn missing_header_plays_the_fallback_and_succeeds() {
    let output = demo(&["--case", "missing_header"]);
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{err}");
    for line in [
        "server: request 1 received; it answers 429 in 2 s",
        "attempt 1/3: 429, Retry-After: none (missing)",
        // (Times are real: the 429 arrives a few ms after 2 s.)
        "waiting 2 s (fallback: no usable Retry-After): next start at ",
        "s of the 20 s budget",
        "attempt 2/3 started",
        "stopped: success",
        "Finished: the service answered.\nLast response: 200. Attempts: 2 / 3. Elapsed: ",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }
    // 2 s to the 429, 2 s of wait, 2 s to the 200: at least 6 s (a loaded
    // machine may take longer, so no upper bound).
    let elapsed: f64 = err
        .split("Elapsed: ")
        .nth(1)
        .and_then(|rest| rest.split(" s.").next())
        .and_then(|secs| secs.parse().ok())
        .expect("an elapsed time");
    assert!(elapsed >= 6.0, "{elapsed}");
    assert!(text(&output.stdout).contains("scripted response 2 of 2: 200"));
}

#[test]
fn wait_exceeds_budget_stops_at_2_s_with_one_request() {
    let output = demo(&["--case", "wait_exceeds_budget", "--json"]);
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    let out = text(&output.stdout);
    assert_eq!(out.lines().count(), 1, "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["outcome"], "budget_exhausted");
    assert_eq!(report["attempts_started"], 1);
    assert_eq!(report["last_status"], 429);
    // The 429 arrives at 2 s; the stop follows it at once. Only the budget
    // (20 s) bounds it from above: a loaded machine may answer late.
    let elapsed = report["elapsed_s"].as_f64().unwrap();
    assert!((2.0..20.0).contains(&elapsed), "{elapsed}");
    assert!(
        err.contains("The service asked to wait 30 s; no retry was sent."),
        "{err}"
    );
    assert_eq!(err.matches("server: request").count(), 1, "{err}");
}

#[test]
fn unknown_and_unplayable_cases_are_usage_errors() {
    for (case, needle) in [
        ("no_such_case", "demo --list"),
        ("scheduler_wakes_late", "cannot be played"),
    ] {
        let output = demo(&["--case", case]);
        let err = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
}
