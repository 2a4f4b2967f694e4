//! `--preset auto` and `--connect-to` end to end, as the built binary
//! against loopback upstreams: `get` keeps the request's host name (and so
//! picks the preset by it) while connecting to the stand-in; the proxy's
//! start-up line names the preset in force. Real time: only lower bounds
//! on waits are asserted.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::{Proxy, Reply, Upstream};

fn gemini_429(quota_id: &str, retry_delay: &str) -> Reply {
    let body = format!(
        r#"{{"error":{{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{{"quotaId":"{quota_id}"}}]}},{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{retry_delay}"}}]}}}}"#
    );
    let mut reply = Reply::status(429).body(body.into_bytes());
    reply
        .headers
        .push(("content-type", "application/json".into()));
    reply
}

fn run_get(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .arg("get")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON report ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn get_auto_picks_gemini_by_the_host_name_it_keeps() {
    let upstream = Upstream::start(|_, n| {
        if n == 0 {
            gemini_429(
                "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                "1.5s",
            )
        } else {
            Reply::status(200)
        }
    });
    let connect_to = format!(
        "generativelanguage.googleapis.com:80:127.0.0.1:{}",
        upstream.addr.port()
    );
    let output = run_get(&[
        "http://generativelanguage.googleapis.com/v1beta/models",
        "--connect-to",
        &connect_to,
        "--preset",
        "auto",
        "--json",
    ]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].header("host"),
        Some("generativelanguage.googleapis.com")
    );
    let gap = seen[1].at.duration_since(seen[0].at);
    assert!(gap >= Duration::from_millis(1500), "{gap:?}");

    // Its per-day quota: one request, not retried, category quota.
    let upstream = Upstream::start(|_, _| {
        gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "22s")
    });
    let connect_to = format!(
        "generativelanguage.googleapis.com:80:127.0.0.1:{}",
        upstream.addr.port()
    );
    let output = run_get(&[
        "http://generativelanguage.googleapis.com/v1beta/models",
        "--connect-to",
        &connect_to,
        "--preset",
        "auto",
        "--json",
    ]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "not_retryable", "{report}");
    assert_eq!(report["category"], "quota", "{report}");
    assert_eq!(upstream.count(), 1);
}

#[test]
fn get_auto_reads_nothing_for_an_unknown_host() {
    let upstream = Upstream::start(|_, _| {
        gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "22s")
    });
    let connect_to = format!("unknown.example:80:127.0.0.1:{}", upstream.addr.port());
    let output = run_get(&[
        "http://unknown.example/v1beta/models",
        "--connect-to",
        &connect_to,
        "--preset",
        "auto",
        "--max-attempts",
        "2",
        "--json",
    ]);
    let report = json_of(&output);
    // No preset: the body is not read, the 429 is retried.
    assert_eq!(report["outcome"], "attempts_exhausted", "{report}");
    assert_eq!(upstream.count(), 2);
    assert_eq!(upstream.seen()[0].header("host"), Some("unknown.example"));
}

#[test]
fn the_proxy_names_the_preset_in_force() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    let line = proxy.wait_line("listening on ");
    assert!(line.contains("preset none"), "{line}");
    let proxy = Proxy::start(&upstream, &["--preset", "openrouter"]);
    let line = proxy.wait_line("listening on ");
    assert!(line.contains("preset openrouter"), "{line}");
}
