//! Pacing through the layer, under tokio's paused clock: first attempts
//! wait for the quota a mock upstream announces in `RateLimit` and
//! `RateLimit-Policy` fields, a wait that does not fit stops as `paced`
//! with nothing sent, an upstream without fields is unaffected, and
//! retries are never paced. Every response takes 100 ms.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::pace::{PacerConfig, QuotaIgnored};
use retry_budget::trail::{EventKind, WaitBasis};
use retry_budget::trail_text::Note;
use retry_budget::{Category, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::pace::Pacing;
use tower_retry_budget::{ErrorKind, RetryBudgetLayer};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

type Calls = Arc<Mutex<Vec<Duration>>>;

/// An upstream that answers after 100 ms with `status`, plus a
/// `Retry-After: 1` on a 429, and `fields` (name, value) on every
/// response; the n-th call (from 0) gets `statuses[n]`, or 200 past the
/// end. Records when each call arrived, since the test's start.
fn upstream(
    fields: &'static [(&'static str, &'static str)],
    statuses: &'static [u16],
    calls: &Calls,
) -> impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future = impl Send>
       + Clone
       + Send {
    let origin = Instant::now();
    let log = calls.clone();
    service_fn(move |_request: Request<()>| {
        let n = {
            let mut log = log.lock().unwrap();
            log.push(origin.elapsed());
            log.len() - 1
        };
        async move {
            tokio::time::sleep(ms(100)).await;
            let status = statuses.get(n).copied().unwrap_or(200);
            let mut response = Response::builder().status(status);
            if status == 429 {
                response = response.header("retry-after", "1");
            }
            for (name, value) in fields {
                response = response.header(*name, *value);
            }
            Ok::<_, Infallible>(response.body(()).unwrap())
        }
    })
}

fn unspread() -> Pacing {
    Pacing::new().config(PacerConfig {
        spread: Duration::ZERO,
        ..PacerConfig::default()
    })
}

fn get() -> Request<()> {
    Request::get("http://api.test/x").body(()).unwrap()
}

const EXHAUSTED: &[(&str, &str)] = &[
    ("ratelimit", r#""default";r=0;t=2"#),
    ("ratelimit-policy", r#""default";q=10;w=2"#),
];

#[tokio::test(start_paused = true)]
async fn nothing_left_holds_the_next_first_attempt_until_the_reset() {
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(EXHAUSTED, &[], &calls));
    let start = Instant::now();

    client.clone().oneshot(get()).await.unwrap();
    // Answered at 100 ms: none left, the window resets 2 s later.
    let second = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(*calls.lock().unwrap(), [ms(0), ms(2100)]);
    assert_eq!(start.elapsed(), ms(2200));

    let report = second.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    let why = report.paced().expect("paced");
    assert_eq!((why.limit.as_str(), why.left), ("default", 0));
    assert!(report.events.iter().any(|event| event.kind
        == EventKind::WaitPlanned {
            wait: ms(2000),
            until: ms(2000),
            reservation_end: ms(6000),
            basis: WaitBasis::Pace {
                left: 0,
                resets_at: ms(2100)
            },
        }));
}

#[tokio::test(start_paused = true)]
async fn the_spread_after_the_reset_stays_within_its_bound() {
    let calls = Calls::default();
    let pacing = Pacing::new().config(PacerConfig {
        spread: ms(100),
        ..PacerConfig::default()
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(pacing))
        .service(upstream(EXHAUSTED, &[], &calls));
    client.clone().oneshot(get()).await.unwrap();
    client.clone().oneshot(get()).await.unwrap();
    let second = calls.lock().unwrap()[1];
    assert!(second >= ms(2100) && second <= ms(2200), "{second:?}");
}

#[tokio::test(start_paused = true)]
async fn a_burst_is_placed_evenly_inside_the_window() {
    const TWO_LEFT: &[(&str, &str)] = &[
        ("ratelimit", r#""default";r=2;t=2"#),
        ("ratelimit-policy", r#""default";q=3;w=2"#),
    ];
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(TWO_LEFT, &[], &calls));
    client.clone().oneshot(get()).await.unwrap();
    // At 100 ms: 2 left until 2.1 s, counted from the first start (0 s).
    let burst: Vec<_> = (0..3)
        .map(|_| tokio::spawn(client.clone().oneshot(get())))
        .collect();
    for action in burst {
        action.await.unwrap().unwrap();
    }
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls, [ms(0), ms(700), ms(1400), ms(2100)]);
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_does_not_fit_stops_as_paced_with_nothing_sent() {
    const LONG: &[(&str, &str)] = &[
        ("ratelimit", r#""default";r=0;t=30"#),
        ("ratelimit-policy", r#""default";q=10;w=30"#),
    ];
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(LONG, &[], &calls));
    let start = Instant::now();
    client.clone().oneshot(get()).await.unwrap();

    let error = client.clone().oneshot(get()).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(100), "stopped at once");
    assert!(matches!(error.kind(), ErrorKind::NotSent));
    assert_eq!(error.outcome(), Outcome::Paced);
    let report = error.report().unwrap();
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(report.attempts_started, 0);
    assert_eq!(report.paced_left(), Some(ms(30_000)));
    assert_eq!(report.paced().unwrap().resets_at, ms(30_100));
    assert_eq!(calls.lock().unwrap().len(), 1, "nothing sent");
}

#[tokio::test(start_paused = true)]
async fn an_upstream_without_fields_is_unaffected() {
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(&[], &[], &calls));
    let burst: Vec<_> = (0..5)
        .map(|_| tokio::spawn(client.clone().oneshot(get())))
        .collect();
    for action in burst {
        action.await.unwrap().unwrap();
    }
    client.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        [ms(0); 5].into_iter().chain([ms(100)]).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_waits_what_its_429_asked_not_the_pace() {
    const FIVE: &[(&str, &str)] = &[
        ("ratelimit", r#""default";r=0;t=5"#),
        ("ratelimit-policy", r#""default";q=10;w=5"#),
    ];
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(FIVE, &[429], &calls));
    let response = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(response.status(), 200);
    // 429 at 100 ms asking 1 s: the retry at 1.1 s, not at the 5.1 s reset.
    assert_eq!(*calls.lock().unwrap(), [ms(0), ms(1100)]);
}

#[tokio::test(start_paused = true)]
async fn layers_given_clones_share_the_pacers() {
    let calls = Calls::default();
    let pacing = unspread();
    let one = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(pacing.clone()))
        .service(upstream(EXHAUSTED, &[], &calls));
    let other = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(pacing.clone()))
        .service(upstream(EXHAUSTED, &[], &calls));
    one.oneshot(get()).await.unwrap();
    let held = pacing.limits("http://api.test:80");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].remaining, 0);
    other.oneshot(get()).await.unwrap();
    assert_eq!(*calls.lock().unwrap(), [ms(0), ms(2100)]);
}

#[tokio::test(start_paused = true)]
async fn quota_fields_set_aside_are_noted_in_the_trail_and_not_paced() {
    // A cached response (its fields describe another moment), then one
    // with a negative remaining: neither paces, both are noted.
    const CACHED: &[(&str, &str)] = &[
        ("age", "30"),
        ("ratelimit", r#""default";r=0;t=2"#),
        ("ratelimit-policy", r#""default";q=10;w=2"#),
    ];
    const NEGATIVE: &[(&str, &str)] =
        &[("x-ratelimit-remaining", "-4"), ("x-ratelimit-reset", "2")];
    for (fields, header, why) in [
        (CACHED, "age", QuotaIgnored::Cached),
        (NEGATIVE, "x-ratelimit-remaining", QuotaIgnored::Negative),
    ] {
        let calls = Calls::default();
        let client = ServiceBuilder::new()
            .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
            .service(upstream(fields, &[], &calls));
        let response = client.clone().oneshot(get()).await.unwrap();
        let report = response.extensions().get::<Report>().unwrap();
        let notes: Vec<String> = report
            .events
            .iter()
            .filter(|event| matches!(event.kind, EventKind::QuotaField { .. }))
            .map(|event| Note::of(&event.kind).unwrap().to_string())
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with(&format!("quota field {header}: ")),
            "{notes:?}"
        );
        assert!(notes[0].ends_with(&format!("({why})")), "{notes:?}");
        // Nothing was held: the next request goes at once.
        client.clone().oneshot(get()).await.unwrap();
        assert_eq!(*calls.lock().unwrap(), [ms(0), ms(100)]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_planned_retry_counts_in_the_window_it_lands_in() {
    const ONE_LEFT: &[(&str, &str)] = &[
        ("ratelimit", r#""default";r=1;t=5"#),
        ("ratelimit-policy", r#""default";q=10;w=5"#),
    ];
    let calls = Calls::default();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(unspread()))
        .service(upstream(ONE_LEFT, &[429], &calls));
    let first = tokio::spawn(client.clone().oneshot(get()));
    tokio::time::sleep(ms(200)).await;
    // At 200 ms: one left until 5.1 s, but the retry of the 429 (planned
    // at 1.1 s) takes it: the next first attempt waits for the reset.
    client.clone().oneshot(get()).await.unwrap();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(*calls.lock().unwrap(), [ms(0), ms(1100), ms(5100)]);
}

/// Calls to `a.test` answer after 100 ms with none left (`EXHAUSTED`),
/// those to any other host at once with no field; each call's host and
/// arrival (since the test's start) are recorded.
fn two_upstreams(
    calls: &Arc<Mutex<Vec<(String, Duration)>>>,
) -> impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future = impl Send>
       + Clone
       + Send {
    let origin = Instant::now();
    let log = calls.clone();
    service_fn(move |request: Request<()>| {
        let host = request.uri().host().unwrap_or_default().to_owned();
        log.lock().unwrap().push((host.clone(), origin.elapsed()));
        async move {
            let mut response = Response::builder();
            if host == "a.test" {
                tokio::time::sleep(ms(100)).await;
                for (name, value) in EXHAUSTED {
                    response = response.header(*name, *value);
                }
            }
            Ok::<_, Infallible>(response.body(()).unwrap())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_pacer_let_go_to_make_room_is_looked_up_again_by_its_action() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let pacing = unspread().capacity(1);
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).pace(pacing.clone()))
        .service(two_upstreams(&calls));
    let to = |uri: &str| Request::get(uri).body(()).unwrap();

    // An action to `a.test` is in flight when one to `b.test` takes the
    // only room (`a.test` holds no limit yet).
    let first = tokio::spawn(client.clone().oneshot(to("http://a.test/")));
    tokio::task::yield_now().await;
    client.clone().oneshot(to("http://b.test/")).await.unwrap();
    // Its answer (none left, reset 2 s later) is held for `a.test` all the
    // same, in the room `b.test` (no limit) makes again.
    first.await.unwrap().unwrap();
    let held = pacing.limits("http://a.test:80");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].remaining, 0);
    assert!(pacing.limits("http://b.test:80").is_empty());

    // `a.test`'s next first attempt waits for the reset; `b.test` finds no
    // room (`a.test`'s limit is held) and goes unpaced.
    client.clone().oneshot(to("http://b.test/")).await.unwrap();
    client.clone().oneshot(to("http://a.test/")).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let at = |host: &str| {
        calls
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, at)| *at)
            .collect::<Vec<_>>()
    };
    assert_eq!(at("a.test"), [ms(0), ms(2100)]);
    assert_eq!(at("b.test"), [ms(0), ms(100)]);
}
