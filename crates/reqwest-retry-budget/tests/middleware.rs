//! `RetryBudgetMiddleware` in a `reqwest_middleware` chain whose end is a
//! script (no network), under tokio's paused clock: the instants are exact.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::Extensions;
use reqwest_retry_budget::{
    Error, Idempotent, Outcome, Policy, Report, ReportSlot, RetryBudgetMiddleware,
};
use retry_budget::trail::{EventKind, WaitBasis};
use support::{reply, Marker, Script};
use tokio_util::sync::CancellationToken;
use tower_retry_budget::budget::ClientBudget;
use tower_retry_budget::calendar::UntrustedCalendar;
use tower_retry_budget::hold_off::HoldOff;
use tower_retry_budget::observer::{ActionId, Event};
use tower_retry_budget::pace::Pacing;
use tower_retry_budget::response_signal::ResetSignal;
use tower_retry_budget::{Jitter, ReportMode, RetryBudgetLayer};

const URL: &str = "http://api.example.test/palettes";

fn middleware() -> RetryBudgetMiddleware {
    RetryBudgetMiddleware::new(Policy::default())
}

fn report(response: &reqwest::Response) -> &Report {
    response.extensions().get::<Report>().expect("a report")
}

/// The waits the server asked for, as the core read them at receipt.
fn requested(report: &Report) -> Vec<Duration> {
    report
        .events
        .iter()
        .filter_map(|event| match event.kind {
            EventKind::WaitPlanned {
                basis: WaitBasis::Server { requested },
                ..
            } => Some(requested),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_in_seconds_is_waited_in_full() {
    let script = Script::new(|n| reply(if n == 0 { 429 } else { 200 }, Some("3")));
    let response = script.client(middleware()).get(URL).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(script.times(), [0.0, 3.0]);
    let report = report(&response);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.attempts_started, 2);
    assert_eq!(requested(report), [Duration::from_secs(3)]);
    assert_eq!(response.text().await.unwrap(), "palettes");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_budget_stops_at_once_with_the_429() {
    let script = Script::new(|_| reply(429, Some("30")));
    let response = script.client(middleware()).get(URL).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(script.times(), [0.0]);
    let report = report(&response);
    assert_eq!(report.outcome, Outcome::BudgetExhausted);
    assert_eq!(report.elapsed, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_date_is_waited_at_least_until_that_date() {
    let script = Script::new(|n| {
        if n > 0 {
            return reply(200, None);
        }
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(5));
        Ok(http::Response::builder()
            .status(429)
            .header("retry-after", date)
            .body("")
            .unwrap())
    });
    let response = script.client(middleware()).get(URL).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let times = script.times();
    assert_eq!(times.len(), 2);
    let asked = requested(report(&response));
    assert_eq!(asked.len(), 1, "one wait, the server's");
    let asked = asked[0];
    // The date has whole seconds: it asks for more than 4 s from receipt.
    assert!(asked > Duration::from_secs(4), "{asked:?}");
    assert!(times[1] >= asked.as_secs_f64(), "{times:?} for {asked:?}");
}

#[tokio::test(start_paused = true)]
async fn always_429_is_never_sent_more_than_three_times() {
    let script = Script::new(|_| reply(429, Some("1")));
    let response = script.client(middleware()).get(URL).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(script.times(), [0.0, 1.0, 2.0]);
    let report = report(&response);
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(report.attempts_started, 3);
}

#[tokio::test(start_paused = true)]
async fn a_402_is_not_retried_and_says_so() {
    let script = Script::new(|_| reply(402, Some("1")));
    let response = script.client(middleware()).get(URL).send().await.unwrap();
    assert_eq!(response.status(), 402);
    assert_eq!(script.count(), 1);
    assert_eq!(report(&response).outcome, Outcome::NotRetryable);
}

#[tokio::test(start_paused = true)]
async fn a_post_is_sent_once_and_passes_through_with_no_report() {
    let script = Script::new(|_| reply(429, Some("1")));
    let slot = ReportSlot::new();
    let response = script
        .client(middleware())
        .post(URL)
        .body("order 7")
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(script.count(), 1);
    assert_eq!(script.seen()[0].body.as_deref().unwrap(), b"order 7");
    assert!(response.extensions().get::<Report>().is_none());
    assert!(slot.take().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_post_is_retried_with_its_whole_body_every_time() {
    let script = Script::new(|n| reply(if n < 2 { 429 } else { 201 }, Some("1")));
    let response = script
        .client(middleware())
        .post(URL)
        .header("idempotency-key", "order-7")
        .body("order 7")
        .with_extension(Idempotent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let seen = script.seen();
    assert_eq!(seen.len(), 3);
    for attempt in &seen {
        assert_eq!(attempt.method, http::Method::POST);
        assert_eq!(attempt.body.as_deref().unwrap(), b"order 7");
    }
    assert_eq!(report(&response).attempts_started, 3);
}

fn stream_body() -> reqwest::Body {
    let chunks = futures_util::stream::iter([
        Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from_static(b"chunk 1, "))),
        Ok(http_body::Frame::data(Bytes::from_static(b"chunk 2"))),
    ]);
    reqwest::Body::wrap(http_body_util::StreamBody::new(chunks))
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_sent_once_and_a_429_to_it_ends_not_replayable() {
    let script = Script::new(|n| reply(if n == 0 { 429 } else { 200 }, Some("1")));
    let response = script
        .client(middleware())
        .put(URL)
        .body(stream_body())
        .with_extension(Idempotent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let seen = script.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body.as_deref().unwrap(), b"chunk 1, chunk 2");
    assert_eq!(report(&response).outcome, Outcome::NotReplayable);
}

#[tokio::test(start_paused = true)]
async fn an_error_of_the_chain_is_the_source_and_the_slot_gets_the_report() {
    let script = Script::new(|_| Err("connection reset"));
    let slot = ReportSlot::new();
    let error = script
        .client(middleware())
        .get(URL)
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap_err();
    let ours = Error::of(&error).expect("the budget's error");
    assert_eq!(ours.outcome(), Outcome::TransportError);
    assert_eq!(ours.report().unwrap().attempts_started, 1);
    let source = std::error::Error::source(ours).expect("a source");
    assert_eq!(source.to_string(), "connection reset");
    assert_eq!(slot.take().unwrap().outcome, Outcome::TransportError);
    assert_eq!(script.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_is_the_caller_leaving_and_nothing_goes_on() {
    let script = Script::new(|_| reply(429, Some("3")));
    let slot = ReportSlot::new();
    let client = script.client(middleware());
    let send = client.get(URL).with_extension(slot.clone()).send();
    assert!(tokio::time::timeout(Duration::from_secs(1), send)
        .await
        .is_err());
    assert_eq!(slot.take().unwrap().outcome, Outcome::Cancelled);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(script.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_token_in_the_extensions_stops_the_wait() {
    let script = Script::new(|_| reply(429, Some("3")));
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let error = script
        .client(middleware())
        .get(URL)
        .with_extension(token)
        .send()
        .await
        .unwrap_err();
    let ours = Error::of(&error).unwrap();
    assert!(ours.is_cancelled());
    assert_eq!(ours.outcome(), Outcome::Cancelled);
    assert_eq!(ours.report().unwrap().elapsed, Duration::from_secs(1));
    assert_eq!(script.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn every_attempt_gets_the_callers_extensions_which_come_back_after() {
    let script = Script::new(|n| reply(if n == 0 { 429 } else { 200 }, Some("1")));
    let client = script.client(RetryBudgetMiddleware::from_layer(
        RetryBudgetLayer::new(Policy::default()).attempt_deadlines(),
    ));
    let mut extensions = Extensions::new();
    extensions.insert(Marker(7));
    let request = client.get(URL).build().unwrap();
    let response = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    for (n, attempt) in seen.iter().enumerate() {
        assert_eq!(attempt.marker, Some(Marker(7)));
        let deadline = attempt.deadline.expect("an attempt deadline");
        assert_eq!(deadline.attempt, n as u32 + 1);
        assert_eq!(deadline.reservation, Duration::from_secs(4));
    }
    assert_eq!(extensions.get::<Marker>(), Some(&Marker(7)));
}

#[tokio::test(start_paused = true)]
async fn the_observer_of_a_configured_layer_hears_every_action() {
    let events = Arc::new(AtomicU32::new(0));
    let reports: Arc<Mutex<Vec<(ActionId, Outcome)>>> = Arc::default();
    struct Watch(Arc<AtomicU32>, Arc<Mutex<Vec<(ActionId, Outcome)>>>);
    impl tower_retry_budget::observer::Observer for Watch {
        fn on_event(&self, _: ActionId, _: &Event) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn on_report(&self, id: ActionId, report: &Report) {
            self.1.lock().unwrap().push((id, report.outcome));
        }
    }
    let script = Script::new(|n| reply(if n == 0 { 429 } else { 200 }, Some("1")));
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .observer(Watch(events.clone(), reports.clone()))
            .into(),
    );
    client
        .get(URL)
        .with_extension(ActionId(41))
        .send()
        .await
        .unwrap();
    assert!(events.load(Ordering::SeqCst) >= 4);
    assert_eq!(*reports.lock().unwrap(), [(ActionId(41), Outcome::Success)]);
}

#[tokio::test(start_paused = true)]
async fn report_mode_when_retried_leaves_a_first_answer_without_a_report() {
    let script = Script::new(|_| reply(200, None));
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .report_mode(ReportMode::WhenRetried)
            .into(),
    );
    let response = client.get(URL).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.extensions().get::<Report>().is_none());
}

/// The gaps of an action whose 429s carry no `Retry-After` (the jittered
/// fallback), under a layer seeded with `seed`.
async fn jittered_gaps(seed: u64) -> Vec<f64> {
    let policy = Policy::builder().jitter(Jitter::Full).build().unwrap();
    let script = Script::new(|_| reply(429, None));
    let client = script.client(RetryBudgetLayer::new(policy).jitter_seed(seed).into());
    client.get(URL).send().await.unwrap();
    let times = script.times();
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn a_jitter_seed_makes_the_fallback_waits_reproducible() {
    let first = jittered_gaps(11).await;
    assert_eq!(first.len(), 2);
    assert_eq!(first, jittered_gaps(11).await);
}

#[tokio::test(start_paused = true)]
async fn a_client_budget_that_refuses_a_retry_ends_it_retry_throttled() {
    let budget = ClientBudget::new(
        retry_budget::ratio::Ratio::percent(1).unwrap(),
        0,
        Duration::from_secs(10),
    )
    .unwrap();
    let script = Script::new(|_| reply(429, Some("1")));
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .client_budget(budget)
            .into(),
    );
    let response = client.get(URL).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(script.count(), 1);
    assert_eq!(report(&response).outcome, Outcome::RetryThrottled);
}

#[tokio::test(start_paused = true)]
async fn a_hold_off_keeps_the_next_request_to_that_host_from_being_sent() {
    let script = Script::new(|_| reply(429, Some("60")));
    let hold_off = HoldOff::new(16).unwrap();
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .hold_off(hold_off)
            .into(),
    );
    let first = client.get(URL).send().await.unwrap();
    assert_eq!(first.status(), 429);
    let error = client.get(URL).send().await.unwrap_err();
    let ours = Error::of(&error).unwrap();
    assert_eq!(ours.outcome(), Outcome::HeldOff);
    assert_eq!(script.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn pacing_keeps_a_first_attempt_the_quota_has_no_room_for_from_being_sent() {
    let script = Script::new(|_| {
        let response = http::Response::builder()
            .status(200)
            .header("ratelimit", r#""default";r=0;t=30"#)
            .header("ratelimit-policy", r#""default";q=10;w=30"#);
        Ok(response.body("").unwrap())
    });
    let client = script.client(RetryBudgetMiddleware::new(Policy::default()).pace(Pacing::new()));
    let first = client.get(URL).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let error = client.get(URL).send().await.unwrap_err();
    let ours = Error::of(&error).unwrap();
    assert_eq!(ours.outcome(), Outcome::Paced);
    assert_eq!(script.count(), 1, "nothing sent");
}

#[tokio::test(start_paused = true)]
async fn a_preset_signal_reads_retry_after_ms_and_x_should_retry() {
    let script = Script::new(|n| {
        let response = http::Response::builder().status(if n < 2 { 429 } else { 200 });
        let response = match n {
            0 => response.header("retry-after-ms", "1500"),
            _ => response.header("x-should-retry", "false"),
        };
        Ok(response.body("").unwrap())
    });
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .signal(ResetSignal::openai())
            .into(),
    );
    let response = client.get(URL).send().await.unwrap();
    assert_eq!(script.times(), [0.0, 1.5]);
    assert_eq!(response.status(), 429);
    assert_eq!(report(&response).outcome, Outcome::NotRetryable);
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_calendar_refuses_to_wait_for_a_date() {
    let script = Script::new(|_| reply(429, Some("Wed, 21 Oct 2037 07:28:00 GMT")));
    let client = script.client(
        RetryBudgetLayer::new(Policy::default())
            .calendar(UntrustedCalendar)
            .into(),
    );
    let response = client.get(URL).send().await.unwrap();
    assert_eq!(script.count(), 1);
    assert_eq!(report(&response).outcome, Outcome::ClockUntrusted);
}

#[tokio::test(start_paused = true)]
async fn every_attempt_is_reqwests_request_whole_headers_and_timeout_included() {
    let script = Script::new(|n| reply(if n == 0 { 429 } else { 200 }, Some("1")));
    let response = script
        .client(middleware())
        .get(URL)
        .header("x-request-id", "r-7")
        .timeout(Duration::from_secs(9))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    for attempt in &seen {
        assert_eq!(attempt.headers.get("x-request-id").unwrap(), "r-7");
        assert_eq!(attempt.url, URL);
        assert_eq!(attempt.timeout, Some(Duration::from_secs(9)));
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_who_leaves_mid_wait_gets_the_extensions_back_with_the_report() {
    let script = Script::new(|_| reply(429, Some("3")));
    let client = script.client(middleware());
    let slot = ReportSlot::new();
    let mut extensions = Extensions::new();
    extensions.insert(Marker(9));
    extensions.insert(slot.clone());
    let request = client.get(URL).build().unwrap();
    let send = client.execute_with_extensions(request, &mut extensions);
    assert!(tokio::time::timeout(Duration::from_secs(1), send)
        .await
        .is_err());
    assert_eq!(extensions.get::<Marker>(), Some(&Marker(9)));
    assert_eq!(slot.take().unwrap().outcome, Outcome::Cancelled);
    assert_eq!(script.count(), 1);
}
