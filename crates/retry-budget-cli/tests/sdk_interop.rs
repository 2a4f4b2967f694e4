//! Interop with the real AI SDKs for Python (PyPI: `openai`, `anthropic`,
//! `groq`, `google-genai`, `mistralai`, `cohere`): for one SDK call (a GET,
//! `sdk_call.py`, with the SDK's default retries), how many requests reach a
//! loopback upstream that answers in its provider's documented shapes,
//!
//! * (a) the SDK pointed at the upstream directly,
//! * (b) through `retry-budget proxy` with no preset,
//! * (c) through the proxy with `--preset <provider>`, for the presets in
//!   [`PRESETS`] only; the others print why they wait.
//!
//! Per provider, its scenarios: a rate limit with its delay then a success
//! ([`Kind::Wait`]), a used-up quota ([`Kind::Quota`]) and an upstream that
//! always answers the rate limit ([`Kind::Always`]). (a) and (b) are asserted
//! as measured (each expectation says why, from the SDK's retry code); (c)
//! against the targets: a wait ends in success after exactly one 429, a quota
//! reaches the upstream once (an SDK's unmarked repeats included: the
//! proxy's hold-off answers them), an always-429 at most the proxy's
//! attempts (shown as measured only for an SDK whose own retries are
//! unmarked).
//!
//! The SDKs' Python comes from `RETRY_BUDGET_SDK_PYTHON` (`.ci/run` installs
//! the six into `.ci/venv` and sets it), else `.ci/venv` itself. Without a
//! Python the test prints why and skips; an SDK it cannot import skips its
//! own rows, saying so, unless the variable is set: then that fails, but
//! for the SDKs `.ci/run` names in `RETRY_BUDGET_SDK_UNINSTALLABLE` (it could
//! not install them), which skip. The table is printed
//! (`cargo test --test sdk_interop -- --nocapture`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{Proxy, Reply, Upstream};

/// The variable naming the Python that has the SDKs installed.
const PYTHON_VAR: &str = "RETRY_BUDGET_SDK_PYTHON";

/// The variable listing (space-separated, as pip names them) the SDKs that
/// `.ci/run` could not install: their rows skip, saying so.
const UNINSTALLABLE_VAR: &str = "RETRY_BUDGET_SDK_UNINSTALLABLE";

/// One SDK call (see its docstring).
const SDK_CALL: &str = include_str!("sdk_call.py");

/// The presets `retry-budget proxy --preset` accepts today. A row's
/// proxy-with-preset cell runs only when its provider is listed here; add a
/// provider when its preset lands.
const PRESETS: &[&str] = &[
    "openai",
    "anthropic",
    "gemini",
    "azure",
    "groq",
    "mistral",
    "cohere",
    "openrouter",
    "bedrock",
];

/// The proxy's budget for these calls: its defaults (20 s, three attempts,
/// 4 s per attempt, the shared hold-off on), a 100 ms floor, and no client
/// budget, so that each call is measured alone (each cell has a proxy of
/// its own). The hold-off is the proxy's default: after a used-up quota it
/// keeps an SDK's unmarked repeats of that call from the upstream.
const FLAGS: [&str; 7] = [
    "--budget",
    "20s",
    "--attempt-timeout",
    "4s",
    "--min-wait",
    "100ms",
    "--no-client-budget",
];

/// The proxy's attempts per request under [`FLAGS`].
const PROXY_ATTEMPTS: usize = 3;

/// A success every SDK's model call parses: a model list (OpenAI, Groq,
/// Mistral: `data`; Anthropic: `data`, `has_more`; Cohere: `models`) or one
/// Gemini model (`name`).
const SUCCESS: &str = r#"{"object":"list","data":[],"has_more":false,"first_id":null,"last_id":null,"models":[],"name":"models/gemini-2.5-flash"}"#;

/// What a scenario's answers mean, and so what the preset must make of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A rate limit with its delay, then a success: one 429 and one 200.
    Wait,
    /// A used-up quota, every time: the upstream sees it once.
    Quota,
    /// The rate limit, every time: at most the proxy's attempts.
    Always,
}

/// One provider's answer to a scenario.
struct Scenario {
    name: &'static str,
    kind: Kind,
    /// The answer that is not a success.
    answer: fn() -> Reply,
    /// Requests the upstream sees for one SDK call: directly, and through
    /// the proxy without a preset.
    direct: usize,
    proxy: usize,
    /// Why those counts, from the SDK's and the proxy's rules.
    why: &'static str,
}

/// One row group: an SDK talking to one provider's API.
struct Row {
    /// The name `sdk_call.py` knows the SDK by.
    sdk: &'static str,
    /// The provider, as its `--preset` would be named.
    provider: &'static str,
    /// The SDK retries a 429 itself and marks nothing the proxy could tell
    /// a retry by (cohere): an always-429 is shown as measured, not held to
    /// the proxy's attempts.
    unmarked_retries: bool,
    scenarios: Vec<Scenario>,
}

fn json_reply(status: u16, body: &str) -> Reply {
    let mut reply = Reply::status(status).body(body.as_bytes().to_vec());
    reply
        .headers
        .push(("content-type", "application/json".into()));
    reply
}

fn with(mut reply: Reply, headers: &[(&'static str, &str)]) -> Reply {
    for (name, value) in headers {
        reply.headers.push((name, (*value).to_owned()));
    }
    reply
}

// The providers' answers, as their documentation and real captures show
// them, with a delay of 1 s where one is asked for so that the test stays
// short.

fn openai_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        &[
            ("retry-after", "1"),
            ("x-ratelimit-limit-requests", "3"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
        ],
    )
}

fn openai_quota() -> Reply {
    json_reply(
        429,
        r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
    )
}

fn anthropic_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit. Please try again later."},"request_id":"req_011CZrU3xcqt5z3XzEkovTus"}"#,
        ),
        &[("retry-after", "1")],
    )
}

/// A spend limit: a 400, not a 429.
fn anthropic_quota() -> Reply {
    json_reply(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-01-01 at 00:00 UTC."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
    )
}

/// Groq's tokens-per-minute 429: the request limit (per day) has room,
/// its reset is minutes away; the token limit is spent.
fn groq_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Used 5034, Requested 1443. Please try again in 1s. Visit https://console.groq.com/docs/rate-limits for more information.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        ),
        &[
            ("retry-after", "1"),
            ("x-ratelimit-limit-requests", "14400"),
            ("x-ratelimit-remaining-requests", "14370"),
            ("x-ratelimit-reset-requests", "2m59.56s"),
            ("x-ratelimit-limit-tokens", "6000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "1s"),
        ],
    )
}

/// Groq's requests-per-day limit spent: a wait of minutes.
fn groq_quota() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on requests per day (RPD): Limit 1000, Used 1000, Requested 1. Please try again in 9m38.016s. Visit https://console.groq.com/docs/rate-limits for more information.","type":"requests","code":"rate_limit_exceeded"}}"#,
        ),
        &[
            ("retry-after", "579"),
            ("x-ratelimit-limit-requests", "1000"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "9m38.016s"),
            ("x-ratelimit-limit-tokens", "6000"),
            ("x-ratelimit-remaining-tokens", "6000"),
            ("x-ratelimit-reset-tokens", "0s"),
        ],
    )
}

fn gemini_429(quota_id: &str, retry_delay: &str) -> Reply {
    let body = format!(
        r#"{{"error":{{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"{quota_id}","quotaDimensions":{{"location":"global","model":"gemini-2.5-flash"}},"quotaValue":"250"}}]}},{{"@type":"type.googleapis.com/google.rpc.Help","links":[{{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}}]}},{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{retry_delay}"}}]}}}}"#
    );
    json_reply(429, &body)
}

fn gemini_rate() -> Reply {
    gemini_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "1s")
}

fn gemini_quota() -> Reply {
    gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "22s")
}

fn mistral_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"object":"error","message":"Requests rate limit exceeded","type":"rate_limit_error","param":null,"code":"1300"}"#,
        ),
        &[
            ("ratelimitbysize-reset", "1"),
            ("ratelimitbysize-limit", "500000"),
            ("ratelimitbysize-remaining", "0"),
            ("x-ratelimitbysize-limit-minute", "500000"),
            ("x-ratelimitbysize-remaining-minute", "0"),
        ],
    )
}

/// Mistral documents no body of its own for a spent monthly limit (it is a
/// 429 too): the monthly limit's headers at 0, its reset days away (an
/// assumption by analogy with the per-minute headers).
fn mistral_quota() -> Reply {
    with(
        json_reply(
            429,
            r#"{"object":"error","message":"Requests rate limit exceeded","type":"rate_limit_error","param":null,"code":"1300"}"#,
        ),
        &[
            ("ratelimitbysize-reset", "1296000"),
            ("x-ratelimitbysize-limit-month", "1000000000"),
            ("x-ratelimitbysize-remaining-month", "0"),
        ],
    )
}

fn cohere_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"message":"You are past the per minute request limit, please wait and try again later."}"#,
        ),
        &[("retry-after", "1")],
    )
}

/// A trial key's monthly calls spent.
fn cohere_quota() -> Reply {
    json_reply(
        429,
        r#"{"message":"You are using a Trial key, which is limited to 1000 API calls / month. You can continue to use the Trial key for free or upgrade to a Production key with higher rate limits at 'https://dashboard.cohere.com/api-keys'. Contact us on 'https://discord.gg/XW44jPfYJu' or email us at support@cohere.com with any questions"}"#,
    )
}

fn azure_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 1 second. Please contact Azure support service if you would like to further increase the default rate limit."}}"#,
        ),
        &[
            ("retry-after", "1"),
            ("retry-after-ms", "1000"),
            ("x-ms-retry-after-ms", "1000"),
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-remaining-tokens", "0"),
        ],
    )
}

/// Azure's day-long wait.
fn azure_quota() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}"#,
        ),
        &[("retry-after", "86400"), ("retry-after-ms", "86400000")],
    )
}

fn openrouter_rate() -> Reply {
    with(
        json_reply(
            429,
            r#"{"error":{"code":429,"message":"Rate limit exceeded: free-models-per-min.","metadata":{"error_type":"rate_limit_exceeded"}}}"#,
        ),
        &[("retry-after", "1")],
    )
}

/// The retryable 402: the in-flight budget, with its Retry-After.
fn openrouter_in_flight() -> Reply {
    with(
        json_reply(
            402,
            r#"{"error":{"code":402,"message":"Your in-flight requests already use your spending budget. Retry shortly.","metadata":{"error_type":"in_flight_budget_exhausted","limit_source":"openrouter_in_flight_budget"}}}"#,
        ),
        &[("retry-after", "1")],
    )
}

/// Credits spent: a 402 without Retry-After.
fn openrouter_quota() -> Reply {
    json_reply(
        402,
        r#"{"error":{"code":402,"message":"Insufficient credits. Add more using https://openrouter.ai/settings/credits","metadata":{"error_type":"payment_required","limit_source":"openrouter_credits"}}}"#,
    )
}

/// The rows, and what is true of (a) and (b) today.
///
/// The SDKs' rules (their source): the Stainless SDKs (openai, anthropic,
/// groq) retry 408/409/429/5xx twice and send `x-stainless-retry-count`;
/// openai honours a delay up to 120 s and does not retry past it, groq
/// honours up to 60 s and backs off past it, anthropic honours any.
/// google-genai and mistralai do not retry unless configured; cohere retries
/// 408/409/429/5xx twice, honouring a delay up to 60 s. The proxy (no
/// preset) retries a 429 up to 3 times within its 20 s budget, stops at once
/// on a delay past it (and holds later first attempts for that delay, its
/// hold-off), sends an SDK's marked retry once, and passes a 400 or 402 on
/// untouched.
fn rows() -> Vec<Row> {
    use Kind::{Always, Quota, Wait};
    vec![
        Row {
            sdk: "openai",
            provider: "openai",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "rate limit, retry-after 1",
                    kind: Wait,
                    answer: openai_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after the asked second, by the SDK or the proxy",
                },
                Scenario {
                    name: "insufficient_quota 429",
                    kind: Quota,
                    answer: openai_quota,
                    direct: 3,
                    proxy: 5,
                    why: "SDK: 1 + 2 retries; proxy: 3 attempts, then each SDK retry once",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: openai_rate,
                    direct: 3,
                    proxy: 5,
                    why: "as the quota",
                },
            ],
        },
        Row {
            sdk: "openai",
            provider: "azure",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "429, retry-after(-ms) 1 s",
                    kind: Wait,
                    answer: azure_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after the asked second",
                },
                Scenario {
                    name: "429, retry-after 86400",
                    kind: Quota,
                    answer: azure_quota,
                    direct: 1,
                    proxy: 1,
                    why: "the SDK does not retry past 120 s; the proxy stops on a delay past its budget",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: azure_rate,
                    direct: 3,
                    proxy: 5,
                    why: "SDK: 1 + 2 retries; proxy: 3 attempts, then each SDK retry once",
                },
            ],
        },
        Row {
            sdk: "openai",
            provider: "openrouter",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "429 rate_limit_exceeded, retry-after 1",
                    kind: Wait,
                    answer: openrouter_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after the asked second",
                },
                Scenario {
                    name: "402 in_flight_budget_exhausted, retry-after 1",
                    kind: Wait,
                    answer: openrouter_in_flight,
                    direct: 1,
                    proxy: 1,
                    why: "neither the SDK nor the proxy retries a 402 today",
                },
                Scenario {
                    name: "402 credits",
                    kind: Quota,
                    answer: openrouter_quota,
                    direct: 1,
                    proxy: 1,
                    why: "a 402 is not retried",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: openrouter_rate,
                    direct: 3,
                    proxy: 5,
                    why: "SDK: 1 + 2 retries; proxy: 3 attempts, then each SDK retry once",
                },
            ],
        },
        Row {
            sdk: "anthropic",
            provider: "anthropic",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "rate_limit_error, retry-after 1",
                    kind: Wait,
                    answer: anthropic_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after the asked second",
                },
                Scenario {
                    name: "400 usage limits",
                    kind: Quota,
                    answer: anthropic_quota,
                    direct: 1,
                    proxy: 1,
                    why: "a 400 is not retried",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: anthropic_rate,
                    direct: 3,
                    proxy: 5,
                    why: "SDK: 1 + 2 retries; proxy: 3 attempts, then each SDK retry once",
                },
            ],
        },
        Row {
            sdk: "groq",
            provider: "groq",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "TPM 429, retry-after 1, reset-requests 2m59.56s",
                    kind: Wait,
                    answer: groq_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after retry-after; the proxy without a preset reads no reset header",
                },
                Scenario {
                    name: "RPD spent, retry-after 579",
                    kind: Quota,
                    answer: groq_quota,
                    direct: 3,
                    proxy: 1,
                    why: "the SDK backs off past 60 s and retries twice; the proxy stops the first at once (past its budget) and its hold-off (Retry-After 579) answers the retries, nothing sent",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: groq_rate,
                    direct: 3,
                    proxy: 5,
                    why: "SDK: 1 + 2 retries; proxy: 3 attempts, then each SDK retry once",
                },
            ],
        },
        Row {
            sdk: "google-genai",
            provider: "gemini",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "RESOURCE_EXHAUSTED per minute, retryDelay 1s",
                    kind: Wait,
                    answer: gemini_rate,
                    direct: 1,
                    proxy: 2,
                    why: "the SDK does not retry by default; the proxy retries after its fallback wait",
                },
                Scenario {
                    name: "RESOURCE_EXHAUSTED PerDay, retryDelay 22s",
                    kind: Quota,
                    answer: gemini_quota,
                    direct: 1,
                    proxy: PROXY_ATTEMPTS,
                    why: "no SDK retry; the proxy, reading no body, spends its attempts",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: gemini_rate,
                    direct: 1,
                    proxy: PROXY_ATTEMPTS,
                    why: "no SDK retry; the proxy's attempts",
                },
            ],
        },
        Row {
            sdk: "mistralai",
            provider: "mistral",
            unmarked_retries: false,
            scenarios: vec![
                Scenario {
                    name: "rate_limit_error, ratelimitbysize-reset 1",
                    kind: Wait,
                    answer: mistral_rate,
                    direct: 1,
                    proxy: 2,
                    why: "the SDK does not retry without a RetryConfig; the proxy retries after its fallback wait",
                },
                Scenario {
                    name: "monthly limit, ratelimitbysize-reset 15 days",
                    kind: Quota,
                    answer: mistral_quota,
                    direct: 1,
                    proxy: PROXY_ATTEMPTS,
                    why: "no SDK retry; the proxy, reading no reset header, spends its attempts",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: mistral_rate,
                    direct: 1,
                    proxy: PROXY_ATTEMPTS,
                    why: "no SDK retry; the proxy's attempts",
                },
            ],
        },
        Row {
            sdk: "cohere",
            provider: "cohere",
            unmarked_retries: true,
            scenarios: vec![
                Scenario {
                    name: "per-minute 429, retry-after 1",
                    kind: Wait,
                    answer: cohere_rate,
                    direct: 2,
                    proxy: 2,
                    why: "one retry after the asked second",
                },
                Scenario {
                    name: "trial key monthly limit",
                    kind: Quota,
                    answer: cohere_quota,
                    direct: 3,
                    proxy: 3 * PROXY_ATTEMPTS,
                    why: "the SDK retries every 429 twice and marks nothing: the proxy's attempts for each",
                },
                Scenario {
                    name: "always 429",
                    kind: Always,
                    answer: cohere_rate,
                    direct: 3,
                    proxy: 3 * PROXY_ATTEMPTS,
                    why: "as the quota",
                },
            ],
        },
    ]
}

/// The Python to run the SDKs with, or why there is none.
fn python() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(PYTHON_VAR) {
        return Ok(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    Err(format!(
        "{PYTHON_VAR} is not set and {} does not exist: `.ci/run` installs the SDKs there",
        venv.display()
    ))
}

/// Runs `sdk_call.py` with these arguments; its stdout, or why it failed.
fn run_sdk_call(python: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(python)
        .args(["-c", SDK_CALL])
        .args(args)
        // The SDKs' own environment must not redirect or reconfigure them.
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("all_proxy")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("GROQ_BASE_URL")
        .env_remove("CO_API_URL")
        .env_remove("GOOGLE_GEMINI_BASE_URL")
        .env_remove("GOOGLE_GENAI_USE_VERTEXAI")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .map_err(|e| format!("{} does not run: {e}", python.display()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// The SDK's version, or why it cannot be imported.
fn sdk_version(python: &Path, sdk: &str) -> Result<String, String> {
    // The reason is the traceback's last line (`ModuleNotFoundError: ...`).
    run_sdk_call(python, &[sdk, "--version"])
        .map_err(|stderr| stderr.lines().last().unwrap_or_default().to_owned())
}

/// One SDK call against `base_url`: what it ended with.
fn sdk_call(python: &Path, sdk: &str, base_url: &str) -> Value {
    let stdout = run_sdk_call(python, &[sdk, base_url])
        .unwrap_or_else(|stderr| panic!("the {sdk} call failed to run: {stderr}"));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// An upstream answering every path with `answer` (or, for a wait, with
/// `answer` first and then a success).
fn upstream(scenario: &Scenario) -> Upstream {
    let (answer, kind) = (scenario.answer, scenario.kind);
    Upstream::start(move |_, n| {
        if kind == Kind::Wait && n > 0 {
            json_reply(200, SUCCESS)
        } else {
            answer()
        }
    })
}

/// One cell: requests the upstream received for one SDK call, and what the
/// SDK ended with. `proxy`: none (direct), or the proxy with these extra
/// flags.
fn measure(python: &Path, sdk: &str, scenario: &Scenario, proxy: Option<&[&str]>) -> Cell {
    let upstream = upstream(scenario);
    let result = match proxy {
        None => sdk_call(python, sdk, &upstream.url()),
        Some(extra) => {
            let mut flags = FLAGS.to_vec();
            flags.extend_from_slice(extra);
            let proxy = Proxy::start(&upstream, &flags);
            sdk_call(python, sdk, &proxy.url(""))
        }
    };
    Cell {
        count: upstream.count(),
        result,
    }
}

struct Cell {
    count: usize,
    result: Value,
}

impl Cell {
    fn ok(&self) -> bool {
        self.result["ok"] == true
    }

    /// `3 (429)`, `2 (ok)`.
    fn show(&self) -> String {
        if self.ok() {
            format!("{} (ok)", self.count)
        } else {
            format!("{} ({})", self.count, self.result["status"])
        }
    }
}

/// The measured cells of one scenario.
struct Measured {
    direct: Cell,
    proxy: Cell,
    /// With the preset, or why not.
    preset: Result<Cell, String>,
}

/// Measures one row group, one scenario after the other; the reason
/// instead when its SDK cannot be imported.
fn measure_row(python: &Path, row: &Row) -> Result<Vec<Measured>, String> {
    sdk_version(python, row.sdk)?;
    let preset = ["--preset", row.provider];
    Ok(row
        .scenarios
        .iter()
        .map(|scenario| Measured {
            direct: measure(python, row.sdk, scenario, None),
            proxy: measure(python, row.sdk, scenario, Some(&[])),
            preset: if PRESETS.contains(&row.provider) {
                Ok(measure(python, row.sdk, scenario, Some(&preset)))
            } else {
                Err(format!("no `--preset {}` yet", row.provider))
            },
        })
        .collect())
}

#[test]
fn the_ai_sdks_direct_through_the_proxy_and_with_its_presets() {
    let python = match python() {
        Ok(python) => python,
        Err(why) => {
            println!("SKIPPED: the AI SDKs are not installed: {why}");
            return;
        }
    };
    let required = std::env::var_os(PYTHON_VAR).is_some();
    let uninstallable = std::env::var(UNINSTALLABLE_VAR).unwrap_or_default();
    let uninstallable: Vec<&str> = uninstallable.split_whitespace().collect();
    let rows = rows();
    let python = python.as_path();

    // Each row group on its own thread: the waits, not the CPU, take the time.
    let measured: Vec<Result<Vec<Measured>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .iter()
            .map(|row| {
                let skip = uninstallable.contains(&row.sdk);
                scope.spawn(move || {
                    if skip {
                        return Err(format!(
                            "`.ci/run` could not install it ({UNINSTALLABLE_VAR})"
                        ));
                    }
                    measure_row(python, row)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a row group measured"))
            .collect()
    });

    println!("| SDK | provider | scenario | direct | proxy | proxy + preset |");
    println!("|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    let mut waiting = Vec::new();
    for (row, measured) in rows.iter().zip(&measured) {
        let measured = match measured {
            Ok(measured) => measured,
            Err(why) if required && !uninstallable.contains(&row.sdk) => {
                failures.push(format!(
                    "{PYTHON_VAR} is set but its Python cannot import {}: {why}",
                    row.sdk
                ));
                continue;
            }
            Err(why) => {
                println!(
                    "SKIPPED: {} rows: {} cannot be imported: {why}",
                    row.provider, row.sdk
                );
                continue;
            }
        };
        for (scenario, cells) in row.scenarios.iter().zip(measured) {
            let preset = match &cells.preset {
                Ok(cell) => cell.show(),
                Err(why) => {
                    waiting.push(format!("{} / {}: {why}", row.sdk, scenario.name));
                    "waits".to_owned()
                }
            };
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                row.sdk,
                row.provider,
                scenario.name,
                cells.direct.show(),
                cells.proxy.show(),
                preset
            );
            let label = format!("{} / {} / {}", row.sdk, row.provider, scenario.name);
            if cells.direct.count != scenario.direct {
                failures.push(format!(
                    "{label}, direct: {} requests, expected {} ({}): {}",
                    cells.direct.count, scenario.direct, scenario.why, cells.direct.result
                ));
            }
            if cells.proxy.count != scenario.proxy {
                failures.push(format!(
                    "{label}, proxy: {} requests, expected {} ({}): {}",
                    cells.proxy.count, scenario.proxy, scenario.why, cells.proxy.result
                ));
            }
            if let Ok(cell) = &cells.preset {
                let measured_only = row.unmarked_retries && scenario.kind == Kind::Always;
                // An SDK that retries every 429 unmarked and obeys no word
                // (Cohere's) sends each of its attempts to the proxy as a
                // new call: with the preset, a used-up quota holds the
                // upstream off, so its repeats are answered by the proxy
                // (`held_off`, category `quota`) and the upstream sees the
                // call once.
                let kind = scenario.kind;
                if let Some(missed) = preset_target(kind, cell).filter(|_| !measured_only) {
                    failures.push(format!(
                        "{label}, with --preset {}: {missed}: {}",
                        row.provider, cell.result
                    ));
                }
            }
        }
    }
    for why in &waiting {
        println!("WAITS FOR ITS PRESET: {why}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What a cell with the preset missed of the issue's targets, if anything.
fn preset_target(kind: Kind, cell: &Cell) -> Option<String> {
    match kind {
        Kind::Wait if !(cell.ok() && cell.count == 2) => Some(format!(
            "{} requests, ok {}: expected one 429 and the success",
            cell.count,
            cell.ok()
        )),
        Kind::Quota if cell.count != 1 => Some(format!(
            "{} requests: a used-up quota must reach the upstream once",
            cell.count
        )),
        Kind::Always if cell.count > PROXY_ATTEMPTS => Some(format!(
            "{} requests: more than the proxy's {PROXY_ATTEMPTS} attempts",
            cell.count
        )),
        _ => None,
    }
}
