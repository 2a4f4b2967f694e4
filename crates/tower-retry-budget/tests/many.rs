//! Many actions at once, through the layer under tokio's paused
//! clock, one small scenario per test: the concurrency gate (tower's
//! `ConcurrencyLimit` and `LoadShed`), the client's shared retry budget, the
//! shared hold-off, jitter and the categories of the reports.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{ratio::Ratio, Category, Jitter, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::retry::budget::TpsBudget;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::gate::{self, AlreadyRunning};
use tower_retry_budget::{budget::ClientBudget, hold_off::HoldOff, ErrorKind, RetryBudgetLayer};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// What the upstream answers: after how long, which status, which
/// `Retry-After`.
#[derive(Debug, Clone, Copy)]
struct Answer {
    after: Duration,
    status: u16,
    retry_after: Option<&'static str>,
}

fn answer(after_s: u64, status: u16, retry_after: Option<&'static str>) -> Answer {
    Answer {
        after: s(after_s),
        status,
        retry_after,
    }
}

type Rule = dyn Fn(&str, usize) -> Answer + Send + Sync;

/// A fake upstream: answers by path and by how many times that path was
/// called before; records every call and how many were in flight at most.
#[derive(Clone)]
struct Upstream {
    rule: Arc<Rule>,
    calls: Arc<Mutex<Vec<(String, Duration)>>>,
    origin: Instant,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl Upstream {
    fn new(rule: impl Fn(&str, usize) -> Answer + Send + Sync + 'static) -> Self {
        Self {
            rule: Arc::new(rule),
            calls: Arc::default(),
            origin: Instant::now(),
            in_flight: Arc::default(),
            most_in_flight: Arc::default(),
        }
    }

    /// When each path was called, as elapsed time since the upstream was made.
    fn calls_to(&self, path: &str) -> Vec<Duration> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, at)| *at)
            .collect()
    }

    fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }
}

struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<B> Service<Request<B>> for Upstream {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let path = req.uri().path().to_owned();
        let answer = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.iter().filter(|(p, _)| *p == path).count();
            calls.push((path.clone(), self.origin.elapsed()));
            (self.rule)(&path, n)
        };
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let guard = InFlight(self.in_flight.clone());
        Box::pin(async move {
            let _guard = guard;
            tokio::time::sleep(answer.after).await;
            let mut res = Response::builder().status(answer.status);
            if let Some(value) = answer.retry_after {
                res = res.header("retry-after", value);
            }
            Ok(res.body(()).unwrap())
        })
    }
}

fn get(path: &str) -> Request<()> {
    Request::get(format!("http://upstream.test{path}"))
        .body(())
        .unwrap()
}

fn report_of<B>(response: &Response<B>) -> &Report {
    response.extensions().get::<Report>().expect("a report")
}

/// Runs `paths` as concurrent tasks through clones of `client`; returns each
/// task's result and the elapsed time at which it ended.
async fn run_all<S>(client: S, paths: &[&str]) -> Vec<(Result<S::Response, S::Error>, Duration)>
where
    S: Service<Request<()>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    let origin = Instant::now();
    let tasks: Vec<_> = paths
        .iter()
        .map(|path| {
            let client = client.clone();
            let request = get(path);
            tokio::spawn(async move {
                let result = client.oneshot(request).await;
                (result, origin.elapsed())
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

// ---- the concurrency gate ----

#[tokio::test(start_paused = true)]
async fn four_tasks_through_a_gate_of_two_go_in_two_batches() {
    let upstream = Upstream::new(|_, _| answer(1, 200, None));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .concurrency_limit(2)
        .service(upstream.clone());
    let results = run_all(
        client,
        &["/explain/1", "/explain/2", "/explain/3", "/summary"],
    )
    .await;
    let ended: Vec<_> = results.iter().map(|(_, at)| *at).collect();
    assert_eq!(ended, [s(1), s(1), s(2), s(2)]);
    assert_eq!(upstream.calls_to("/explain/3"), [s(1)]);
    assert_eq!(upstream.calls_to("/summary"), [s(1)]);
    assert_eq!(upstream.most_in_flight(), 2);
}

/// A: 429 asking for 5 s at 1 s, then 200 after 1 s. B: 200 after 1 s.
fn a_limited_then_b() -> Upstream {
    Upstream::new(|path, n| match (path, n) {
        ("/a", 0) => answer(1, 429, Some("5")),
        _ => answer(1, 200, None),
    })
}

#[tokio::test(start_paused = true)]
async fn a_waiting_action_releases_its_slot() {
    let upstream = a_limited_then_b();
    // The gate inside the retry layer: one slot per attempt.
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .concurrency_limit(1)
        .service(upstream.clone());
    let results = run_all(client, &["/a", "/b"]).await;
    // B takes the slot A gave back while waiting for its Retry-After.
    assert_eq!(upstream.calls_to("/b"), [s(1)]);
    assert_eq!(results[1].1, s(2), "B is done before A even retries");
    assert_eq!(upstream.calls_to("/a"), [s(0), s(6)]);
    assert_eq!(results[0].1, s(7));
    assert_eq!(upstream.most_in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_gate_outside_the_retry_layer_would_hold_the_slot_through_the_wait() {
    // The contrast: the same scene with the limit around the whole action.
    let upstream = a_limited_then_b();
    let client = ServiceBuilder::new()
        .concurrency_limit(1)
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream.clone());
    let results = run_all(client, &["/a", "/b"]).await;
    assert_eq!(upstream.calls_to("/b"), [s(7)], "B queued behind A's wait");
    assert_eq!(results[1].1, s(8));
}

#[tokio::test(start_paused = true)]
async fn load_shed_refuses_a_third_action_at_once_with_already_running() {
    let upstream = Upstream::new(|_, _| answer(2, 200, None));
    let client = ServiceBuilder::new()
        .map_err(gate::already_running)
        .load_shed()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .concurrency_limit(2)
        .service(upstream.clone());
    let results = run_all(client, &["/1", "/2", "/3"]).await;
    assert!(results[0].0.is_ok() && results[1].0.is_ok());
    let (refused, at) = &results[2];
    let error: &BoxError = refused.as_ref().unwrap_err();
    assert!(error.is::<AlreadyRunning>(), "{error}");
    assert_eq!(*at, s(0), "refused at once, not queued");
    assert!(error.to_string().contains("already running"));
    assert!(upstream.calls_to("/3").is_empty(), "nothing was sent");
}

#[tokio::test(start_paused = true)]
async fn load_shed_never_refuses_the_retry_of_an_admitted_action() {
    // Gate of 1. A is admitted, gets a 429 (1 s), waits; its retry queues
    // for the slot instead of being shed.
    let upstream = Upstream::new(|path, n| match (path, n) {
        ("/a", 0) => answer(1, 429, Some("1")),
        _ => answer(1, 200, None),
    });
    let client = ServiceBuilder::new()
        .map_err(gate::already_running)
        .load_shed()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .concurrency_limit(1)
        .service(upstream.clone());
    let response = client.oneshot(get("/a")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(upstream.calls_to("/a"), [s(0), s(2)]);
}

// ---- the client's shared retry budget ----

/// 50 actions, each told 429 (Retry-After: 1) on every attempt, all at once.
async fn storm<B>(budget: B) -> (Upstream, Vec<Report>)
where
    B: tower::retry::budget::Budget + Send + Sync + 'static,
{
    let upstream = Upstream::new(|_, _| answer(0, 429, Some("1")));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).client_budget(budget))
        .service(upstream.clone());
    let paths: Vec<String> = (0..50).map(|i| format!("/item/{i}")).collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let reports = run_all(client, &paths)
        .await
        .into_iter()
        .map(|(result, _)| report_of(&result.unwrap()).clone())
        .collect();
    (upstream, reports)
}

#[tokio::test(start_paused = true)]
async fn the_client_budget_caps_upstream_calls_under_a_429_storm() {
    let budget = ClientBudget::new(Ratio::percent(20).unwrap(), 0, s(10)).unwrap();
    let (upstream, reports) = storm(budget.clone()).await;
    // Without it: 50 × 3 = 150 calls. With it: 50 first attempts + 20 %.
    let retries = upstream.call_count() - 50;
    assert_eq!(retries, 10);
    assert_eq!(retries * 5, 50, "retries are exactly 1/5 of first attempts");
    assert_eq!(budget.counts(), (50, 10));
    assert!(reports.iter().all(|r| r.outcome == Outcome::RetryThrottled));
    assert_eq!(
        reports.iter().filter(|r| r.attempts_started == 2).count(),
        10
    );
}

#[tokio::test(start_paused = true)]
async fn the_client_budget_does_not_round_a_ratio_up_like_tps_budget() {
    // tower issue #857: at 0.7 TpsBudget pays one retry per first attempt.
    let ours = ClientBudget::new(Ratio::from_f64(0.7).unwrap(), 0, s(10)).unwrap();
    let (upstream, _) = storm(ours).await;
    assert_eq!(upstream.call_count() - 50, 35);

    let tower_s = TpsBudget::new(s(10), 0, 0.7);
    let (upstream, _) = storm(tower_s).await;
    assert_eq!(
        upstream.call_count() - 50,
        50,
        "tower's budget plugs in as is"
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttled_retry_returns_the_429_with_its_own_outcome() {
    // A reserve-free budget without first attempts in it cannot pay.
    let budget = ClientBudget::new(Ratio::percent(10).unwrap(), 0, s(10)).unwrap();
    let upstream = Upstream::new(|_, _| answer(1, 429, Some("2")));
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).client_budget(budget))
        .service(upstream.clone());
    let started = Instant::now();
    let response = client.oneshot(get("/x")).await.unwrap();
    assert_eq!(started.elapsed(), s(1), "no pointless wait");
    assert_eq!(response.status(), 429);
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::RetryThrottled);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert_eq!(report.to_json()["outcome"], "retry_throttled");
    assert_eq!(upstream.call_count(), 1);
}

// ---- the shared hold-off ----

#[tokio::test(start_paused = true)]
async fn a_later_first_attempt_waits_for_the_hold_off() {
    // A: 429 asking for 5 s at 1 s; B starts at 2 s to the same service.
    let upstream = Upstream::new(|path, n| match (path, n) {
        ("/a", 0) => answer(1, 429, Some("5")),
        _ => answer(1, 200, None),
    });
    let hold_off = HoldOff::new(16).unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off.clone()))
        .service(upstream.clone());
    let a = tokio::spawn(client.clone().oneshot(get("/a")));
    tokio::time::sleep(s(2)).await;
    let b = client.oneshot(get("/b")).await.unwrap();
    assert_eq!(
        upstream.calls_to("/b"),
        [s(6)],
        "not before the service asked"
    );
    let report = report_of(&b);
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.starts(), [s(4)], "elapsed since B's start, at 2 s");
    assert_eq!(report.waits(), [(s(0), s(4))]);
    assert_eq!(a.await.unwrap().unwrap().status(), 200);
    assert_eq!(upstream.calls_to("/a"), [s(0), s(6)]);
    assert_eq!(hold_off.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hold_off_that_does_not_fit_stops_without_sending() {
    let upstream = Upstream::new(|path, _| match path {
        "/a" => answer(1, 429, Some("30")),
        _ => answer(1, 200, None),
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).hold_off(HoldOff::default()))
        .service(upstream.clone());
    let a = client.clone().oneshot(get("/a")).await.unwrap();
    assert_eq!(report_of(&a).outcome, Outcome::BudgetExhausted);
    // At 1 s the service asked for 30 s: until 31, far past B's latest start.
    let started = Instant::now();
    let error = client.clone().oneshot(get("/b")).await.unwrap_err();
    assert_eq!(started.elapsed(), s(0), "stopped at once");
    assert!(matches!(error.kind(), ErrorKind::NotSent));
    assert_eq!(error.outcome(), Outcome::HeldOff);
    let report = error.report().unwrap();
    assert_eq!(report.attempts_started, 0);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert!(upstream.calls_to("/b").is_empty(), "nothing was sent");

    // Another service is not held off.
    let other = Request::get("http://elsewhere.test/b").body(()).unwrap();
    assert_eq!(client.oneshot(other).await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_hold_off_wait_holds_no_slot_of_the_gate() {
    // Gate of 1 inside the layer. A holds the hold-off (429, 5 s at 1 s);
    // B waits for it; C, to another service, passes through meanwhile.
    let upstream = Upstream::new(|path, n| match (path, n) {
        ("/a", 0) => answer(1, 429, Some("5")),
        _ => answer(1, 200, None),
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).hold_off(HoldOff::default()))
        .concurrency_limit(1)
        .service(upstream.clone());
    let a = tokio::spawn(client.clone().oneshot(get("/a")));
    tokio::time::sleep(s(2)).await;
    // B's caller keeps its service (made ready, holding a slot) alive.
    let mut b_service = client.clone();
    ServiceExt::<Request<()>>::ready(&mut b_service)
        .await
        .unwrap();
    let b = tokio::spawn(b_service.call(get("/b")));
    tokio::time::sleep(s(1)).await;
    let other = Request::get("http://elsewhere.test/c").body(()).unwrap();
    let c = tokio::time::timeout(s(30), client.oneshot(other))
        .await
        .expect("C got the slot: B's wait holds none")
        .unwrap();
    assert_eq!(c.status(), 200);
    assert_eq!(upstream.calls_to("/c"), [s(3)], "B's wait held no slot");
    drop(b_service);
    b.await.unwrap().unwrap();
    a.await.unwrap().unwrap();
    assert_eq!(upstream.calls_to("/b").len(), 1);
    assert!(upstream.calls_to("/b")[0] >= s(6));
}

// ---- jitter ----

/// Three actions refused together (429 without Retry-After at 1 s): when
/// does each retry?
async fn retry_times(seed: u64) -> Vec<Duration> {
    let upstream = Upstream::new(|_, n| match n {
        0 => answer(1, 429, None),
        _ => answer(0, 200, None),
    });
    let policy = Policy::builder()
        .jitter(Jitter::Full)
        .fallback_cap(s(8))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy).jitter_seed(seed))
        .service(upstream.clone());
    run_all(client, &["/1", "/2", "/3"]).await;
    ["/1", "/2", "/3"]
        .iter()
        .map(|path| upstream.calls_to(path)[1])
        .collect()
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_retries_reproducibly_from_a_seed() {
    let first = retry_times(7).await;
    assert_eq!(first, retry_times(7).await, "the same seed, the same run");
    let mut distinct = first.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "refused together, retried apart: {first:?}"
    );
    // Full jitter of the 2 s fallback, never under the 1 s floor.
    assert!(first.iter().all(|t| (s(2)..=s(3)).contains(t)), "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn without_jitter_the_schedule_stays_exact() {
    let upstream = Upstream::new(|_, n| match n {
        0 => answer(1, 429, None),
        _ => answer(0, 200, None),
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()).jitter_seed(7))
        .service(upstream.clone());
    run_all(client, &["/1", "/2"]).await;
    assert_eq!(upstream.calls_to("/1"), [s(0), s(3)]);
    assert_eq!(upstream.calls_to("/2"), [s(0), s(3)]);
}

// ---- categories ----

#[tokio::test(start_paused = true)]
async fn quota_and_credentials_end_at_once_with_their_category() {
    for (status, category) in [
        (402, Category::Quota),
        (401, Category::NotConfigured),
        (403, Category::NotConfigured),
        (404, Category::ClientError),
        (503, Category::ServerError),
    ] {
        let upstream = Upstream::new(move |_, _| answer(0, status, Some("1")));
        let client = ServiceBuilder::new()
            .layer(RetryBudgetLayer::new(Policy::default()))
            .service(upstream.clone());
        let response = client.oneshot(get("/x")).await.unwrap();
        let report = report_of(&response);
        assert_eq!(report.outcome, Outcome::NotRetryable);
        assert_eq!(report.category(), Some(category));
        assert_eq!(report.to_json()["category"], category.as_str());
        assert!(report.to_string().ends_with(category.hint()));
        assert_eq!(upstream.call_count(), 1, "{status} is never retried");
    }
}

#[tokio::test(start_paused = true)]
async fn with_retries_disabled_a_limited_action_ends_at_once_as_rate_limit() {
    let upstream = Upstream::new(|_, _| answer(1, 429, Some("1")));
    let policy = Policy::builder().max_attempts(1).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy))
        .service(upstream.clone());
    let started = Instant::now();
    let response = client.oneshot(get("/x")).await.unwrap();
    assert_eq!(started.elapsed(), s(1));
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::AttemptsExhausted);
    assert_eq!(report.category(), Some(Category::RateLimit));
    assert!(report.to_string().ends_with(
        "Category: rate_limit. The service is limiting requests; trying later may work."
    ));
}
