//! Tracing output, in a test binary of its own: `tracing` caches callsite
//! interest per process, so a scoped subscriber must not race other tests.

mod support;

use http::Request;
use retry_budget::Policy;
use support::{Captured, Scripted, Step};
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetServiceBuilderExt;

#[tokio::test(start_paused = true)]
async fn every_step_is_traced_and_no_secret_header_is() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let inner = Scripted::new(vec![
        Step::new(1.0, 429, Some("2")),
        Step::new(1.0, 200, None),
    ]);
    let client = ServiceBuilder::new()
        .retry_budget(Policy::default())
        .service(inner);
    let request = Request::get("http://upstream.test/items")
        .header("authorization", "Bearer secret-token-123")
        .header("cookie", "session=secret-cookie-456")
        .body(())
        .unwrap();
    client.oneshot(request).await.unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for step in [
        "attempt started",
        "response",
        "wait planned",
        "woke",
        "stopped",
    ] {
        assert!(text.contains(step), "no {step:?} in:\n{text}");
    }
    assert!(text.contains("retry_after=2 s"), "{text}");
    assert!(
        text.contains("outcome=\"success\"") || text.contains("outcome=success"),
        "{text}"
    );
    assert!(
        !text.contains("secret"),
        "a secret header was logged:\n{text}"
    );
}
