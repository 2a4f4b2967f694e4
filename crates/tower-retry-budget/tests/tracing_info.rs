//! Under a `tracing` subscriber at INFO (what a service runs), the layer
//! writes nothing: every one of its events is at DEBUG. In a test binary of
//! its own: `tracing` caches callsite interest per process.

mod support;

use http::Request;
use retry_budget::{Outcome, Policy, Report};
use support::{Captured, Scripted, Step};
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetServiceBuilderExt;

#[tokio::test(start_paused = true)]
async fn an_info_subscriber_gets_no_line_from_any_ending() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // The capture works: a line at INFO from here is written.
    tracing::info!("control line");
    assert!(
        captured.text().contains("control line"),
        "{}",
        captured.text()
    );
    captured.0.lock().unwrap().clear();

    let scripts = [
        (vec![Step::new(0.1, 200, None)], Outcome::Success),
        (
            vec![Step::new(0.1, 429, Some("1")), Step::new(0.1, 200, None)],
            Outcome::Success,
        ),
        (vec![Step::new(0.1, 404, None)], Outcome::NotRetryable),
        (
            vec![Step::new(0.1, 429, Some("60"))],
            Outcome::BudgetExhausted,
        ),
    ];
    for (script, outcome) in scripts {
        let client = ServiceBuilder::new()
            .retry_budget(Policy::default())
            .service(Scripted::new(script));
        let request = Request::get("http://upstream.test/items").body(()).unwrap();
        let response = client.oneshot(request).await.unwrap();
        let report = response.extensions().get::<Report>().unwrap();
        assert_eq!(report.outcome, outcome);
        assert_eq!(
            captured.text(),
            "",
            "a line for an action ending {outcome:?}"
        );
    }
}
