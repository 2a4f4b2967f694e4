//! `--preset openai|anthropic` end to end: `retry-budget get` and
//! `retry-budget proxy`, run as the built binary, against loopback hyper
//! upstreams that answer as OpenAI's and Anthropic's APIs do (their
//! documented headers and error bodies). Real time: only lower bounds on
//! waits are asserted.

mod support;

use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::Value;
use support::{get, send, Proxy, Reply, Upstream};

/// OpenAI's answer to an account whose quota is used up.
const QUOTA: &str = r#"{
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": null,
        "code": "insufficient_quota"
    }
}
"#;

/// OpenAI's answer to a rate limit.
const RATE: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;

/// Anthropic's answer to a rate limit.
const ANTHROPIC_RATE: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

fn openai_429(body: &str) -> Reply {
    let mut reply = Reply::status(429).body(body.as_bytes().to_vec());
    reply
        .headers
        .push(("content-type", "application/json".into()));
    reply
}

fn with(mut reply: Reply, name: &'static str, value: &str) -> Reply {
    reply.headers.push((name, value.to_owned()));
    reply
}

fn run_get(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .arg("get")
        .args(args)
        .output()
        .expect("the binary runs");
    (output, started.elapsed())
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

fn kinds(report: &Value) -> Vec<String> {
    report["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn get_waits_what_retry_after_ms_asks() {
    let upstream = Upstream::start(|_, n| {
        if n == 0 {
            with(openai_429(RATE), "retry-after-ms", "1500")
        } else {
            Reply::status(200)
        }
    });
    let url = format!("{}/v1/models", upstream.url());
    let (output, took) = run_get(&[&url, "--preset", "openai", "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert_eq!(upstream.count(), 2);
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    let seen = upstream.seen();
    let gap = seen[1].at.duration_since(seen[0].at);
    assert!(gap >= Duration::from_millis(1500), "{gap:?}");
    assert!(
        kinds(&report).contains(&"retry_after_ms".to_owned()),
        "{report}"
    );

    // Without the preset, the same answer gets the 2 s fallback (and no
    // retry-after-ms event).
    let upstream = Upstream::start(|_, n| {
        if n == 0 {
            with(openai_429(RATE), "retry-after-ms", "1500")
        } else {
            Reply::status(200)
        }
    });
    let url = format!("{}/v1/models", upstream.url());
    let (output, _) = run_get(&[&url, "--json"]);
    let report = json_of(&output);
    assert!(
        !kinds(&report).contains(&"retry_after_ms".to_owned()),
        "{report}"
    );
}

#[test]
fn get_waits_what_an_openai_reset_duration_asks() {
    let upstream = Upstream::start(|_, n| {
        if n > 0 {
            return Reply::status(200);
        }
        let reply = with(openai_429(RATE), "x-ratelimit-reset-requests", "1.5s");
        with(reply, "x-ratelimit-reset-tokens", "250ms")
    });
    let url = format!("{}/v1/models", upstream.url());
    let (output, _) = run_get(&[&url, "--preset", "openai", "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert_eq!(upstream.count(), 2);
    let seen = upstream.seen();
    let gap = seen[1].at.duration_since(seen[0].at);
    assert!(gap >= Duration::from_millis(1500), "{gap:?}");
}

#[test]
fn get_stops_at_once_when_a_reset_duration_exceeds_the_budget() {
    let upstream = Upstream::start(|_, _| {
        let reply = with(openai_429(RATE), "x-ratelimit-reset-requests", "1s");
        with(reply, "x-ratelimit-reset-tokens", "6m0s")
    });
    let url = format!("{}/v1/models", upstream.url());
    let (output, _) = run_get(&[&url, "--preset", "openai", "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "budget_exhausted", "{report}");
    assert_eq!(report["server_requested_wait_s"], 360.0, "{report}");
    assert_eq!(upstream.count(), 1);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("The service asked to wait 6 min (its x-ratelimit-reset-tokens header)")
            || stderr.contains("x-ratelimit-reset-tokens header"),
        "{stderr}"
    );
}

#[test]
fn get_ends_a_quota_429_on_the_first_attempt_and_keeps_its_body() {
    let upstream = Upstream::start(|_, _| openai_429(QUOTA));
    let url = format!("{}/v1/models", upstream.url());
    let dir = std::env::temp_dir().join(format!("rb-ai-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("body.json");
    let (output, _) = run_get(&[
        &url,
        "--preset",
        "openai",
        "--json",
        "-o",
        file.to_str().unwrap(),
    ]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "not_retryable", "{report}");
    assert_eq!(report["category"], "quota", "{report}");
    assert_eq!(report["attempts_started"], 1, "{report}");
    assert_eq!(upstream.count(), 1);
    assert_eq!(std::fs::read(&file).unwrap(), QUOTA.as_bytes());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("top up or switch plan"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();

    // Without the preset: retried as a rate limit until the attempts run out.
    let upstream = Upstream::start(|_, _| with(openai_429(QUOTA), "retry-after", "1"));
    let url = format!("{}/v1/models", upstream.url());
    let (output, _) = run_get(&[&url, "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "attempts_exhausted", "{report}");
    assert_eq!(upstream.count(), 3);
}

#[test]
fn get_obeys_x_should_retry_false() {
    let upstream = Upstream::start(|_, _| {
        let reply = with(openai_429(RATE), "retry-after", "1");
        with(reply, "x-should-retry", "false")
    });
    let url = format!("{}/v1/models", upstream.url());
    let (output, _) = run_get(&[&url, "--preset", "openai", "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "not_retryable", "{report}");
    assert_eq!(upstream.count(), 1);
    assert!(
        kinds(&report).contains(&"should_retry".to_owned()),
        "{report}"
    );
    assert!(
        kinds(&report).contains(&"retry_forbidden".to_owned()),
        "{report}"
    );
}

#[test]
fn get_waits_for_an_anthropic_rfc3339_reset() {
    // Two whole seconds ahead of the calendar (the reading rounds to the
    // second, so at least one second of wait remains).
    let upstream = Upstream::start(|_, n| {
        if n > 0 {
            return Reply::status(200);
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let reset = SystemTime::UNIX_EPOCH + Duration::from_secs(now + 2);
        let mut reply = Reply::status(429).body(ANTHROPIC_RATE.as_bytes().to_vec());
        reply.headers.push((
            "anthropic-ratelimit-requests-reset",
            humantime::format_rfc3339_seconds(reset).to_string(),
        ));
        reply
    });
    let url = format!("{}/v1/messages", upstream.url());
    let (output, took) = run_get(&[&url, "--preset", "anthropic", "--json"]);
    let report = json_of(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert_eq!(upstream.count(), 2);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    let reset = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "reset_header")
        .cloned()
        .expect("a reset_header event");
    assert_eq!(reset["format"], "rfc3339", "{reset}");
    assert_eq!(reset["used"], true, "{reset}");
}

fn post(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"model":"gpt-4o"}"#)))
        .unwrap()
}

const FAST: [&str; 8] = [
    "--budget",
    "6s",
    "--attempt-timeout",
    "1s",
    "--min-wait",
    "100ms",
    "--no-hold-off",
    "--no-client-budget",
];

#[tokio::test(flavor = "multi_thread")]
async fn proxy_tells_an_sdk_not_to_retry_what_it_already_retried() {
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after-ms", "100"));
    let mut flags = FAST.to_vec();
    flags.extend(["--preset", "openai"]);
    let proxy = Proxy::start(&upstream, &flags);
    let answer = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-attempts"), "3");
    assert_eq!(answer.header("x-should-retry"), "false");
    assert_eq!(answer.body, RATE.as_bytes());
    assert_eq!(upstream.count(), 3);

    // Without the preset: nothing is added.
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after", "1"));
    let proxy = Proxy::start(&upstream, &FAST);
    let answer = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("x-should-retry"), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_a_quota_429_reaches_the_upstream_once_and_its_body_the_caller_whole() {
    let upstream = Upstream::start(|_, _| openai_429(QUOTA));
    let mut flags = FAST.to_vec();
    flags.extend(["--preset", "openai"]);
    let proxy = Proxy::start(&upstream, &flags);
    let answer = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-outcome"), "not_retryable");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(answer.header("x-should-retry"), "false");
    assert_eq!(answer.body, QUOTA.as_bytes());
    assert_eq!(upstream.count(), 1);
    proxy.wait_line("outcome=not_retryable attempts=1");
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_an_sdk_retry_is_sent_once() {
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after", "1"));
    let proxy = Proxy::start(&upstream, &FAST);
    let mut request = get(&proxy.url("/v1/models"));
    request
        .headers_mut()
        .insert("x-stainless-retry-count", "1".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(upstream.count(), 1);
    assert_eq!(
        upstream.seen()[0].header("x-stainless-retry-count"),
        Some("1")
    );
    proxy.wait_line("client_retry");

    // The SDK's first request (count 0) is budgeted as usual.
    let mut request = get(&proxy.url("/v1/models"));
    request
        .headers_mut()
        .insert("x-stainless-retry-count", "0".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.header("retry-budget-attempts"), "3");
    assert_eq!(upstream.count(), 4);

    // With --retry-retries, an SDK's retry is budgeted too.
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after", "1"));
    let mut flags = FAST.to_vec();
    flags.push("--retry-retries");
    let proxy = Proxy::start(&upstream, &flags);
    let mut request = get(&proxy.url("/v1/models"));
    request
        .headers_mut()
        .insert("x-stainless-retry-count", "2".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.header("retry-budget-attempts"), "3");
    assert_eq!(upstream.count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_the_preset_never_makes_a_write_retryable_an_idempotent_path_does() {
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after", "1"));
    let mut flags = FAST.to_vec();
    flags.extend(["--preset", "openai"]);
    let proxy = Proxy::start(&upstream, &flags);
    let answer = send(post(&proxy.url("/v1/chat/completions"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(upstream.count(), 1);

    let upstream = Upstream::start(|_, n| {
        if n == 0 {
            with(openai_429(RATE), "retry-after-ms", "200")
        } else {
            Reply::status(200).body(&b"{}"[..])
        }
    });
    let mut flags = FAST.to_vec();
    flags.extend(["--preset", "openai", "--idempotent-path", "/v1/embeddings"]);
    let proxy = Proxy::start(&upstream, &flags);
    let answer = send(post(&proxy.url("/v1/embeddings"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    // The whole body, both times.
    assert_eq!(seen[1].body, &br#"{"model":"gpt-4o"}"#[..]);
    // Another write is still sent once.
    let answer = send(post(&proxy.url("/v1/chat/completions"))).await;
    assert_eq!(answer.header("retry-budget-attempts"), "1");
}

#[test]
fn proxy_a_bad_idempotent_path_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--idempotent-path",
            "v1/embeddings",
        ])
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expected an absolute path"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_a_held_off_answer_carries_retry_after_ms() {
    let upstream = Upstream::start(|_, _| with(openai_429(RATE), "retry-after", "30"));
    let proxy = Proxy::start(&upstream, &["--preset", "openai"]);
    let first = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(first.header("retry-budget-outcome"), "budget_exhausted");
    let held = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(held.status, 429);
    assert_eq!(held.header("retry-budget-outcome"), "held_off");
    let secs: u64 = held.header("retry-after").parse().unwrap();
    let millis: u64 = held.header("retry-after-ms").parse().unwrap();
    assert!((28..=30).contains(&secs), "{secs}");
    assert!(millis > 27_000 && millis <= 30_000, "{millis}");
    assert!(millis <= secs * 1000, "{millis} ms, {secs} s");
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_anthropic_x_should_retry_false_is_passed_on_and_obeyed() {
    let upstream = Upstream::start(|_, _| {
        let mut reply = Reply::status(429).body(ANTHROPIC_RATE.as_bytes().to_vec());
        reply.headers.push(("retry-after", "1".into()));
        reply.headers.push(("x-should-retry", "false".into()));
        reply
    });
    let mut flags = FAST.to_vec();
    flags.extend(["--preset", "anthropic"]);
    let proxy = Proxy::start(&upstream, &flags);
    let answer = send(get(&proxy.url("/v1/models"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-outcome"), "not_retryable");
    assert_eq!(answer.header("x-should-retry"), "false");
    assert_eq!(upstream.count(), 1);
}
