//! Interop with the real `openai` Python SDK (PyPI), driven through
//! `retry-budget proxy`, counting what a loopback upstream that answers as
//! OpenAI does receives for one SDK call:
//!
//! * an `insufficient_quota` 429 reaches the upstream once with
//!   `--preset openai`;
//! * an always-429 upstream sees at most the proxy's attempts for one SDK
//!   call with the preset, not the SDK's attempts times the proxy's.
//!
//! The SDK's Python comes from `RETRY_BUDGET_OPENAI_PYTHON` (`.ci/run`
//! installs `openai` into `.ci/venv` and sets it), else `.ci/venv` itself.
//! Without either the test prints why and skips; with the variable set, a
//! Python that cannot import `openai` fails it. The figures of each row are
//! printed (`cargo test --test openai_sdk -- --nocapture`): they are the
//! README's table.

mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use support::{Proxy, Reply, Upstream};

/// The variable naming the Python that has `openai` installed.
const PYTHON_VAR: &str = "RETRY_BUDGET_OPENAI_PYTHON";

/// One SDK call (`client.models.list()`, a GET) with the SDK's default
/// retries (2), printing what it ended with as JSON.
const CALL: &str = r#"
import json, sys
import openai
client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-test", max_retries=2, timeout=30)
out = {"sdk": openai.__version__}
try:
    client.models.list()
    out["ok"] = True
except openai.APIStatusError as e:
    out["ok"] = False
    out["status"] = e.status_code
    out["code"] = e.code
    out["x_should_retry"] = e.response.headers.get("x-should-retry")
    out["outcome"] = e.response.headers.get("retry-budget-outcome")
print(json.dumps(out))
"#;

const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
const RATE: &str = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;

/// The proxy's budget for these calls: its defaults (20 s, three
/// attempts, 4 s per attempt), with a 100 ms floor so that the
/// `retry-after-ms: 100` an SDK honours is honoured as asked.
const FLAGS: [&str; 8] = [
    "--budget",
    "20s",
    "--attempt-timeout",
    "4s",
    "--min-wait",
    "100ms",
    "--no-hold-off",
    "--no-client-budget",
];

/// The Python to run the SDK with, or why there is none.
fn python() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(PYTHON_VAR) {
        return Ok(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    Err(format!(
        "{PYTHON_VAR} is not set and {} does not exist: `.ci/run` installs the openai SDK there",
        venv.display()
    ))
}

/// Runs one SDK call against `base_url`; what the SDK ended with.
fn sdk_call(python: &PathBuf, base_url: &str) -> Value {
    let output = Command::new(python)
        .args(["-c", CALL, base_url])
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("all_proxy")
        .env_remove("OPENAI_BASE_URL")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "the SDK call failed to run: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A fake OpenAI answering every request with this 429.
fn openai(body: &'static str, retry_after_ms: bool) -> Upstream {
    Upstream::start(move |_, _| {
        let mut reply = Reply::status(429).body(body.as_bytes().to_vec());
        reply
            .headers
            .push(("content-type", "application/json".into()));
        if retry_after_ms {
            reply.headers.push(("retry-after-ms", "100".into()));
        }
        reply
    })
}

/// Requests the upstream received for one SDK call: directly, or through
/// the proxy with `flags`.
fn measure(python: &PathBuf, body: &'static str, proxy: Option<&[&str]>) -> (usize, Value) {
    let upstream = openai(body, body == RATE);
    let result = match proxy {
        None => sdk_call(python, &format!("{}/v1", upstream.url())),
        Some(extra) => {
            let mut flags = FLAGS.to_vec();
            flags.extend_from_slice(extra);
            let proxy = Proxy::start(&upstream, &flags);
            sdk_call(python, &proxy.url("/v1"))
        }
    };
    (upstream.count(), result)
}

#[test]
fn the_openai_sdk_through_the_proxy() {
    let python = match python() {
        Ok(python) => python,
        Err(why) => {
            println!("SKIPPED: the openai SDK is not installed: {why}");
            return;
        }
    };
    let check = Command::new(&python)
        .args(["-c", "import openai; print(openai.__version__)"])
        .output();
    match check {
        Ok(output) if output.status.success() => println!(
            "openai SDK {}",
            String::from_utf8_lossy(&output.stdout).trim()
        ),
        other if std::env::var_os(PYTHON_VAR).is_some() => {
            panic!("{PYTHON_VAR} is set but its Python cannot import openai: {other:?}")
        }
        _ => {
            println!("SKIPPED: {} cannot import openai", python.display());
            return;
        }
    }

    let rows: [(&str, Option<&[&str]>); 4] = [
        ("SDK alone", None),
        (
            "through the proxy, client retries budgeted too (--retry-retries: as before)",
            Some(&["--retry-retries"]),
        ),
        ("through the proxy, no preset", Some(&[])),
        (
            "through the proxy, --preset openai",
            Some(&["--preset", "openai"]),
        ),
    ];
    let mut table = Vec::new();
    for (label, flags) in rows {
        let (rate, rate_result) = measure(&python, RATE, flags);
        let (quota, quota_result) = measure(&python, QUOTA, flags);
        println!("| {label} | {rate} | {quota} |");
        println!("    always-429: {rate_result}\n    insufficient_quota: {quota_result}");
        table.push((label, rate, rate_result, quota, quota_result));
    }

    let (_, alone_rate, _, alone_quota, _) = &table[0];
    let (_, preset_rate, preset_rate_result, preset_quota, preset_quota_result) = &table[3];
    // The SDK alone retries both (its 2 retries: 3 requests each).
    assert_eq!((*alone_rate, *alone_quota), (3, 3));
    // With the preset: the quota call reaches the upstream once...
    assert_eq!(*preset_quota, 1, "{preset_quota_result}");
    assert_eq!(preset_quota_result["code"], "insufficient_quota");
    assert_eq!(preset_quota_result["x_should_retry"], "false");
    // ... and an always-429 upstream sees at most the proxy's 3 attempts.
    assert!(*preset_rate <= 3, "{preset_rate}: {preset_rate_result}");
    assert_eq!(preset_rate_result["x_should_retry"], "false");
    assert_eq!(preset_rate_result["status"], 429);
    // Never the SDK's attempts times the proxy's, even without the preset
    // (its retries carry x-stainless-retry-count and are sent once).
    let (_, no_preset_rate, _, no_preset_quota, _) = &table[2];
    assert!(*no_preset_rate < 9, "{no_preset_rate}");
    assert!(*no_preset_quota < 9, "{no_preset_quota}");
}
