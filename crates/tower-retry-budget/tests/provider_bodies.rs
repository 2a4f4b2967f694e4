//! The body presets through the layer under tokio's paused clock: Gemini's
//! `RetryInfo` delay and per-day `QuotaFailure`, OpenRouter's retryable
//! `402`, the limit OpenAI's and Groq's message names; malformed bodies
//! change nothing, and the caller gets the body byte for byte.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use retry_budget::trail::{EventKind, WaitBasis};
use retry_budget::{Category, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::peek::PeekLayer;
use tower_retry_budget::response_signal::{HttpSignal, ResetSignal, RetrySignal};
use tower_retry_budget::RetryBudgetLayer;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

fn gemini(quota_id: &str, retry_delay: &str) -> String {
    format!(
        r#"{{"error":{{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"{quota_id}","quotaValue":"250"}}]}},{{"@type":"type.googleapis.com/google.rpc.Help","links":[]}},{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{retry_delay}"}}]}}}}"#
    )
}

const PER_MINUTE: &str = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier";
const PER_DAY: &str = "GenerateRequestsPerDayPerProjectPerModel-FreeTier";
const IN_FLIGHT: &str = r#"{"error":{"code":402,"message":"Retry shortly.","metadata":{"error_type":"in_flight_budget_exhausted","limit_source":"openrouter_in_flight_budget"}}}"#;
const CREDITS: &str = r#"{"error":{"code":402,"message":"Insufficient credits.","metadata":{"error_type":"payment_required","limit_source":"openrouter_credits"}}}"#;

/// The first response is `status` with `body` (JSON) and `headers`, every
/// later one 200. Returns the report, the time taken, the upstream's
/// count, and the body the caller received.
async fn run(
    quota: PeekLayer,
    status: u16,
    body: &str,
    headers: &[(&str, &str)],
) -> (Report, Duration, usize, Bytes) {
    run_with(HttpSignal, quota, status, body, headers).await
}

/// [`run`], the retry layer reading with `signal`.
async fn run_with(
    signal: impl RetrySignal + Send + Sync + 'static,
    quota: PeekLayer,
    status: u16,
    body: &str,
    headers: &[(&str, &str)],
) -> (Report, Duration, usize, Bytes) {
    let body = Bytes::from(body.to_owned());
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut res = Response::builder()
            .status(if n == 0 { status } else { 200 })
            .header("content-type", "application/json");
        if n == 0 {
            for (name, value) in &headers {
                res = res.header(name.as_str(), value.as_str());
            }
        }
        let res = res
            .body(Full::new(if n == 0 { body.clone() } else { Bytes::new() }))
            .unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let client = ServiceBuilder::new()
        .layer(
            RetryBudgetLayer::new(Policy::default())
                .signal(signal)
                .attempt_deadlines(),
        )
        .layer(quota)
        .service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let took = started.elapsed();
    let report = response.extensions().get::<Report>().unwrap().clone();
    let got = response.into_body().collect().await.unwrap().to_bytes();
    (report, took, calls.load(Ordering::SeqCst), got)
}

fn basis(report: &Report) -> Vec<WaitBasis> {
    report
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WaitPlanned { basis, .. } => Some(basis),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn gemini_waits_its_retry_delay_at_least() {
    for (delay, wait) in [("53s", S(53)), ("1.5s", MS(1500)), ("3s", S(3))] {
        let body = gemini(PER_MINUTE, delay);
        let policy_budget_fits = wait < S(20);
        let (report, took, calls, _) = run(PeekLayer::gemini(), 429, &body, &[]).await;
        if policy_budget_fits {
            assert_eq!(
                (report.outcome, took, calls),
                (Outcome::Success, wait, 2),
                "{delay}"
            );
            assert_eq!(
                basis(&report),
                vec![WaitBasis::ResetHeader { requested: wait }]
            );
        } else {
            // Past the budget: stopped at once.
            assert_eq!(
                (report.outcome, took, calls),
                (Outcome::BudgetExhausted, S(0), 1),
                "{delay}"
            );
        }
    }
    // Without the preset the fallback (2 s) applies.
    let body = gemini(PER_MINUTE, "3s");
    let none = PeekLayer::new();
    let (_, took, _, _) = run(none, 429, &body, &[]).await;
    assert_eq!(took, S(2));
}

#[tokio::test(start_paused = true)]
async fn a_gemini_per_day_quota_ends_on_its_first_attempt() {
    let body = gemini(PER_DAY, "22s");
    let (report, took, calls, got) = run(PeekLayer::gemini(), 429, &body, &[]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::NotRetryable, S(0), 1)
    );
    assert_eq!(report.category(), Some(Category::Quota));
    assert!(report.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::QuotaExhausted { code, .. } if &**code == PER_DAY
    )));
    assert_eq!(got, body.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn openrouter_retries_only_its_in_flight_402_with_a_delay() {
    let (report, took, calls, got) = run(
        PeekLayer::openrouter(),
        402,
        IN_FLIGHT,
        &[("retry-after", "1")],
    )
    .await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(1), 2));
    assert!(got.is_empty(), "the success's body");
    // Without Retry-After: not a wait-and-retry case.
    let (report, took, calls, got) = run(PeekLayer::openrouter(), 402, IN_FLIGHT, &[]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::NotRetryable, S(0), 1)
    );
    assert_eq!(got, IN_FLIGHT.as_bytes());
    // Any other 402 is not retried, Retry-After or not: a quota.
    let (report, took, calls, _) = run(
        PeekLayer::openrouter(),
        402,
        CREDITS,
        &[("retry-after", "1")],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::NotRetryable, S(0), 1)
    );
    assert_eq!(report.category(), Some(Category::Quota));
    // Without the preset the retryable 402 is not retried.
    let none = PeekLayer::new();
    let (_, _, calls, _) = run(none, 402, IN_FLIGHT, &[("retry-after", "1")]).await;
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn an_in_flight_402_past_the_budget_stops_at_once_as_a_rate_limit() {
    let (report, took, calls, _) = run(
        PeekLayer::openrouter(),
        402,
        IN_FLIGHT,
        &[("retry-after", "3600")],
    )
    .await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, S(0), 1)
    );
    assert_eq!(report.category(), Some(Category::RateLimit));
}

#[tokio::test(start_paused = true)]
async fn malformed_bodies_change_nothing() {
    let bad = [
        String::new(),
        "{".to_owned(),
        "[]".to_owned(),
        r#"{"error":"RESOURCE_EXHAUSTED"}"#.to_owned(),
        r#"{"error":{"details":"PerDay"}}"#.to_owned(),
        r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":53}]}}"#.to_owned(),
        r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":{"quotaId":"PerDay"}}]}}"#.to_owned(),
        r#"{"error":{"metadata":{"error_type":["in_flight_budget_exhausted"]}}}"#.to_owned(),
        gemini(PER_MINUTE, "-5s"),
        gemini(PER_MINUTE, "soon"),
        gemini(PER_MINUTE, "\u{1f600}"),
        "\u{0}\u{ff}".to_owned(),
    ];
    for body in &bad {
        for quota in [PeekLayer::gemini(), PeekLayer::openrouter()] {
            let (report, took, calls, _) = run(quota, 429, body, &[]).await;
            assert_eq!(
                (report.outcome, took, calls),
                (Outcome::Success, S(2), 2),
                "{body}"
            );
            assert!(
                matches!(basis(&report)[0], WaitBasis::Fallback { .. }),
                "{body}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_cohere_trial_keys_monthly_limit_is_a_quota_its_minute_limit_is_not() {
    const MONTH: &str = r#"{"message":"You are using a Trial key, which is limited to 1000 API calls / month. You can continue to use the Trial key for free."}"#;
    const MINUTE: &str =
        r#"{"message":"You are using a Trial key, which is limited to 40 API calls / minute."}"#;
    let cohere = || PeekLayer::for_provider(&tower_retry_budget::response_signal::COHERE);
    let (report, took, calls, got) = run(cohere(), 429, MONTH, &[]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::NotRetryable, S(0), 1)
    );
    assert_eq!(report.category(), Some(Category::Quota));
    assert_eq!(got, MONTH.as_bytes());
    let (report, took, calls, _) = run(cohere(), 429, MINUTE, &[("retry-after", "1")]).await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(1), 2));
}

/// Groq's tokens-per-minute 429 for a request larger than the tokens left:
/// both limits have room by their headers, the body names the tokens.
const GROQ_TPM: &str = r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Used 5034, Requested 1443. Please try again in 7.5s. Visit https://console.groq.com/docs/rate-limits for more information.","type":"tokens","code":"rate_limit_exceeded"}}"#;
/// OpenAI's tokens-per-minute 429.
const OPENAI_TPM: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 6s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;

#[tokio::test(start_paused = true)]
async fn the_limit_the_body_names_is_waited_for_even_with_room_left() {
    let headers = [
        ("x-ratelimit-remaining-requests", "14370"),
        ("x-ratelimit-reset-requests", "2m59.56s"),
        ("x-ratelimit-remaining-tokens", "966"),
        ("x-ratelimit-reset-tokens", "7.5s"),
    ];
    let (report, took, calls, got) = run_with(
        ResetSignal::groq(),
        PeekLayer::for_provider(&tower_retry_budget::response_signal::GROQ),
        429,
        GROQ_TPM,
        &headers,
    )
    .await;
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(calls, 2);
    assert_eq!(took, MS(7_500), "the tokens' reset, not the fallback");
    assert!(
        matches!(basis(&report)[..], [WaitBasis::ResetHeader { requested }] if requested == MS(7_500)),
        "{:?}",
        basis(&report)
    );
    assert!(got.is_empty());

    // Without the body's word, neither limit is spent: the fallback.
    let (report, took, calls, _) = run_with(
        ResetSignal::groq(),
        PeekLayer::new(),
        429,
        GROQ_TPM,
        &headers,
    )
    .await;
    assert_eq!((report.outcome, calls), (Outcome::Success, 2));
    assert!(
        matches!(
            basis(&report)[..],
            [WaitBasis::Fallback { .. } | WaitBasis::FallbackJittered { .. }]
        ),
        "{:?}",
        basis(&report)
    );
    assert!(took < MS(7_500), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_limit_the_body_does_not_name_keeps_the_spent_limit_rule() {
    // The tokens named, the requests' reset minutes away: spent, or not
    // sent, it counts as before (past the budget: stopped at once).
    for left in [Some("0"), None] {
        let mut headers = vec![
            ("x-ratelimit-reset-requests", "2m59.56s"),
            ("x-ratelimit-reset-tokens", "6s"),
        ];
        if let Some(left) = left {
            headers.push(("x-ratelimit-remaining-requests", left));
        }
        let (report, took, calls, got) = run_with(
            ResetSignal::openai(),
            PeekLayer::openai(),
            429,
            OPENAI_TPM,
            &headers,
        )
        .await;
        assert_eq!(
            (report.outcome, calls, took),
            (Outcome::BudgetExhausted, 1, S(0)),
            "{left:?}"
        );
        assert_eq!(got, OPENAI_TPM.as_bytes(), "the body, byte for byte");
    }
    // With room left, only the named tokens' reset counts.
    let headers = [
        ("x-ratelimit-remaining-requests", "14000"),
        ("x-ratelimit-reset-requests", "2m59.56s"),
        ("x-ratelimit-reset-tokens", "6s"),
    ];
    let (report, took, calls, _) = run_with(
        ResetSignal::openai(),
        PeekLayer::openai(),
        429,
        OPENAI_TPM,
        &headers,
    )
    .await;
    assert_eq!((report.outcome, calls, took), (Outcome::Success, 2, S(6)));

    // A message naming no limit, or malformed: the headers' rule alone.
    let room = [
        ("x-ratelimit-remaining-tokens", "966"),
        ("x-ratelimit-reset-tokens", "7.5s"),
    ];
    for body in [
        r#"{"error":{"message":"on tokens"}}"#,
        "{not json",
        r#"{"message":7}"#,
    ] {
        let (report, _, calls, got) =
            run_with(ResetSignal::openai(), PeekLayer::openai(), 429, body, &room).await;
        assert_eq!((report.outcome, calls), (Outcome::Success, 2), "{body}");
        assert!(
            matches!(
                basis(&report)[..],
                [WaitBasis::Fallback { .. } | WaitBasis::FallbackJittered { .. }]
            ),
            "{body}: {:?}",
            basis(&report)
        );
        assert!(got.is_empty() || got == body.as_bytes());
    }
}
