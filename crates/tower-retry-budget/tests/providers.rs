//! The provider tables (Azure OpenAI, Groq, Cohere, Mistral, Bedrock, and
//! the spent-limit rule for OpenAI and Anthropic) through the layer under
//! tokio's paused clock with exact instants: the asked delay is waited at
//! least, a quota ends on its first attempt, a delay past the budget stops
//! at once, malformed headers change nothing.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Request, Response};
use retry_budget::trail::{EventKind, WaitBasis};
use retry_budget::{Category, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::calendar::FnCalendar;
use tower_retry_budget::response_signal::{
    HttpSignal, Provider, ResetSignal, RetrySignal, AZURE, BEDROCK, COHERE, GROQ, MISTRAL, OPENAI,
    PROVIDERS,
};
use tower_retry_budget::RetryBudgetLayer;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// The calendar reading used throughout (Unix seconds).
const NOW: u64 = 1_796_148_000;

/// The first response is `status` with these headers, every later one 200.
async fn run<G>(signal: G, status: u16, headers: &[(&str, &str)]) -> (Report, Duration, usize)
where
    G: RetrySignal + Clone + Send + Sync + 'static,
{
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let inner = service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut res = Response::builder().status(if n == 0 { status } else { 200 });
        if n == 0 {
            for (name, value) in &headers {
                res = res.header(name.as_str(), value.as_str());
            }
        }
        let res = res.body(()).unwrap();
        async move { Ok::<_, Infallible>(res) }
    });
    let layer = RetryBudgetLayer::new(Policy::default())
        .calendar(FnCalendar(|| {
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(NOW))
        }))
        .signal(signal);
    let client = ServiceBuilder::new().layer(layer).service(inner);
    let started = Instant::now();
    let response = client.oneshot(Request::new(())).await.unwrap();
    let report = response.extensions().get::<Report>().unwrap().clone();
    (report, started.elapsed(), calls.load(Ordering::SeqCst))
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

fn signal(provider: &Provider) -> ResetSignal {
    ResetSignal::new().with_provider(provider)
}

#[tokio::test(start_paused = true)]
async fn azure_waits_the_longest_valid_of_its_three_delays() {
    let azure = ResetSignal::azure();
    assert_eq!(azure, signal(&AZURE));
    for (headers, took) in [
        (
            &[
                ("retry-after", "2"),
                ("retry-after-ms", "2500"),
                ("x-ms-retry-after-ms", "3250"),
            ][..],
            MS(3250),
        ),
        (
            &[("retry-after", "3"), ("x-ms-retry-after-ms", "1500")][..],
            S(3),
        ),
        // `-1` (and any invalid value) is ignored.
        (
            &[
                ("retry-after", "2"),
                ("retry-after-ms", "-1"),
                ("x-ms-retry-after-ms", "-1"),
            ][..],
            S(2),
        ),
        (&[("x-ms-retry-after-ms", "4100")][..], MS(4100)),
    ] {
        let (report, elapsed, calls) = run(azure.clone(), 429, headers).await;
        assert_eq!(
            (report.outcome, elapsed, calls),
            (Outcome::Success, took, 2),
            "{headers:?}"
        );
    }
    // A day's retry-after: past the budget, stopped at once.
    let (report, took, calls) = run(azure, 429, &[("retry-after", "86400")]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, S(0), 1)
    );
}

/// Groq's documented tokens-per-minute 429: the requests limit (per day)
/// resets in 2m59.56s but has room; the tokens limit is spent.
const GROQ_TPM: [(&str, &str); 7] = [
    ("retry-after", "2"),
    ("x-ratelimit-limit-requests", "14400"),
    ("x-ratelimit-remaining-requests", "14370"),
    ("x-ratelimit-reset-requests", "2m59.56s"),
    ("x-ratelimit-limit-tokens", "18000"),
    ("x-ratelimit-remaining-tokens", "0"),
    ("x-ratelimit-reset-tokens", "7.66s"),
];

#[tokio::test(start_paused = true)]
async fn groq_waits_for_the_spent_tokens_limit_not_the_daily_requests() {
    for preset in [ResetSignal::groq(), ResetSignal::openai()] {
        let (report, took, calls) = run(preset.clone(), 429, &GROQ_TPM).await;
        assert_eq!(
            (report.outcome, took, calls),
            (Outcome::Success, MS(7660), 2)
        );
        assert_eq!(
            basis(&report),
            vec![WaitBasis::ResetHeader {
                requested: MS(7660)
            }]
        );
        // The requests limit spent: its reset (past the budget) counts.
        let mut spent = GROQ_TPM;
        spent[2].1 = "0";
        let (report, took, calls) = run(preset, 429, &spent).await;
        assert_eq!(
            (report.outcome, took, calls),
            (Outcome::BudgetExhausted, S(0), 1)
        );
    }
    // Both limits with room: only retry-after counts.
    let mut room = GROQ_TPM;
    room[5].1 = "17997";
    let (_, took, _) = run(ResetSignal::groq(), 429, &room).await;
    assert_eq!(took, S(2));
    assert_eq!(GROQ.resets, OPENAI.resets);
}

#[tokio::test(start_paused = true)]
async fn anthropic_counts_only_a_spent_limit() {
    // NOW is 2026-12-01T18:00:00Z.
    let mut headers = vec![
        ("anthropic-ratelimit-requests-reset", "2026-12-01T18:10:00Z"),
        ("anthropic-ratelimit-requests-remaining", "40"),
        ("anthropic-ratelimit-tokens-reset", "2026-12-01T18:00:03Z"),
        ("anthropic-ratelimit-tokens-remaining", "0"),
    ];
    let (report, took, calls) = run(ResetSignal::anthropic(), 429, &headers).await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(3), 2));
    headers[1].1 = "0";
    let (report, took, _) = run(ResetSignal::anthropic(), 429, &headers).await;
    assert_eq!((report.outcome, took), (Outcome::BudgetExhausted, S(0)));
}

#[tokio::test(start_paused = true)]
async fn cohere_waits_the_longest_of_ms_seconds_and_unix_reset() {
    let cohere = ResetSignal::cohere();
    assert_eq!(cohere, signal(&COHERE));
    let reset = (NOW + 4).to_string();
    let headers = [
        ("retry-after-ms", "1500"),
        ("retry-after", "2"),
        ("x-ratelimit-reset", reset.as_str()),
    ];
    let (report, took, calls) = run(cohere.clone(), 429, &headers).await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(4), 2));
    let (_, took, _) = run(cohere.clone(), 429, &[("retry-after-ms", "3500")]).await;
    assert_eq!(took, MS(3500));
    let far = (NOW + 86_400).to_string();
    let (report, took, calls) = run(cohere, 429, &[("x-ratelimit-reset", far.as_str())]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, S(0), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn mistral_waits_its_reset_seconds_when_its_limit_is_spent() {
    let mistral = ResetSignal::mistral();
    assert_eq!(mistral, signal(&MISTRAL));
    let (report, took, calls) = run(mistral.clone(), 429, &[("ratelimitbysize-reset", "3")]).await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(3), 2));
    let spent = [
        ("ratelimitbysize-reset", "5"),
        ("x-ratelimitbysize-remaining-minute", "0"),
    ];
    let (_, took, _) = run(mistral.clone(), 429, &spent).await;
    assert_eq!(took, S(5));
    // Room left in the minute: the reset is not the wait (the fallback is).
    let room = [
        ("ratelimitbysize-reset", "5"),
        ("x-ratelimitbysize-remaining-minute", "12"),
    ];
    let (report, took, _) = run(mistral.clone(), 429, &room).await;
    assert_eq!(took, S(2));
    assert!(matches!(basis(&report)[0], WaitBasis::Fallback { .. }));
    // A monthly limit's far-off reset: past the budget, stopped at once.
    let (report, took, calls) = run(mistral, 429, &[("ratelimitbysize-reset", "1296000")]).await;
    assert_eq!(
        (report.outcome, took, calls),
        (Outcome::BudgetExhausted, S(0), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn bedrock_throttling_waits_the_fallback_and_a_quota_is_not_retried() {
    let bedrock = ResetSignal::bedrock();
    assert_eq!(bedrock, signal(&BEDROCK));
    let (report, took, calls) = run(
        bedrock.clone(),
        429,
        &[("x-amzn-errortype", "ThrottlingException")],
    )
    .await;
    assert_eq!((report.outcome, took, calls), (Outcome::Success, S(2), 2));
    assert!(matches!(basis(&report)[0], WaitBasis::Fallback { .. }));
    for raw in [
        "ServiceQuotaExceededException",
        "ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/",
    ] {
        let (report, took, calls) = run(bedrock.clone(), 400, &[("x-amzn-errortype", raw)]).await;
        assert_eq!(
            (report.outcome, took, calls),
            (Outcome::NotRetryable, S(0), 1)
        );
        assert_eq!(report.category(), Some(Category::Quota), "{raw}");
        // Said on a 429 too: ended on its first attempt.
        let (report, _, calls) = run(bedrock.clone(), 429, &[("x-amzn-errortype", raw)]).await;
        assert_eq!((report.outcome, calls), (Outcome::NotRetryable, 1));
        assert_eq!(report.category(), Some(Category::Quota));
    }
    // Without the preset: a 400 is not retried, but not named a quota.
    let (report, _, _) = run(
        HttpSignal,
        400,
        &[("x-amzn-errortype", "ServiceQuotaExceededException")],
    )
    .await;
    assert_ne!(report.category(), Some(Category::Quota));
}

#[tokio::test(start_paused = true)]
async fn malformed_headers_change_nothing_for_any_preset() {
    let garbage: &[(&str, &str)] = &[
        ("retry-after-ms", "soon"),
        ("x-ms-retry-after-ms", "-1"),
        ("x-ratelimit-reset-requests", "-5s"),
        ("x-ratelimit-remaining-requests", "\u{fe}"),
        ("x-ratelimit-reset-tokens", "1x"),
        ("x-ratelimit-remaining-tokens", "-1"),
        ("x-ratelimit-reset", "tomorrow"),
        ("ratelimitbysize-reset", "1e3"),
        ("x-ratelimitbysize-remaining-minute", ""),
        ("anthropic-ratelimit-requests-reset", "2026-13-01T00:00:00Z"),
        ("x-amzn-errortype", "ServiceQuota"),
    ];
    let (plain, plain_took, plain_calls) = run(HttpSignal, 429, &[]).await;
    for provider in PROVIDERS {
        let (report, took, calls) = run(signal(provider), 429, garbage).await;
        assert_eq!(
            (report.outcome, took, calls),
            (plain.outcome, plain_took, plain_calls),
            "{}",
            provider.name
        );
        assert_eq!(basis(&report), basis(&plain), "{}", provider.name);
    }
}

#[test]
fn auto_chooses_by_host() {
    for (host, name) in [
        ("api.openai.com", Some("openai")),
        ("api.anthropic.com", Some("anthropic")),
        ("my-resource.openai.azure.com", Some("azure")),
        ("api.groq.com", Some("groq")),
        ("api.mistral.ai", Some("mistral")),
        ("api.cohere.com", Some("cohere")),
        ("bedrock-runtime.us-east-1.amazonaws.com", Some("bedrock")),
        ("API.OpenAI.com.", Some("openai")),
        ("openai.azure.com", None),
        ("bedrock.us-east-1.amazonaws.com", None),
        ("example.com", None),
        ("", None),
    ] {
        assert_eq!(Provider::for_host(host).map(|p| p.name), name, "{host}");
    }
    for provider in PROVIDERS {
        assert_eq!(Provider::named(provider.name), Some(provider));
    }
}
