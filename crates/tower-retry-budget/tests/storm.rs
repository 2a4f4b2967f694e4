//! A storm: many concurrent actions against a server that answers 429 to
//! most requests, with a mix of valid, invalid, missing, huge and past-date
//! Retry-After values, some answers slower than the per-attempt cap, and
//! some failures without an answer.
//!
//! Twice: under tokio's paused clock against an in-process service, where
//! every instant is exact and every budget is checked to the nanosecond;
//! and once on loopback against a real hyper server through hyper-util's
//! client, a smoke test whose only time bound is a generous hang detector.
//! The default (300 actions) runs in CI in a few seconds. The large run:
//! `STORM_ACTIONS=2000 cargo test -p tower-retry-budget --test storm`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_budget::{Outcome, Policy, Report};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::RetryBudgetLayer;

const RETRY_AFTER: [Option<&str>; 7] = [
    Some("0"),
    Some("1"),
    None,
    Some("soon"),
    Some("99999999999999999999"),
    Some("Mon, 01 Jan 2024 12:00:00 GMT"),
    Some("1.5"),
];

#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    posts: Mutex<HashMap<String, usize>>,
}

/// What the n-th request gets: mostly 429s, some slow, some closed.
async fn answer(n: usize, slow: Duration) -> Result<Response<Full<Bytes>>, std::io::Error> {
    match n % 10 {
        0 => Ok(Response::new(Full::new(Bytes::from_static(b"ok")))),
        1 => {
            tokio::time::sleep(slow).await;
            Ok(Response::new(Full::new(Bytes::from_static(b"late"))))
        }
        // An error from the service makes hyper close the connection.
        2 => Err(std::io::Error::other("reset")),
        _ => {
            let mut res = Response::builder().status(429);
            if let Some(value) = RETRY_AFTER[n % RETRY_AFTER.len()] {
                res = res.header("retry-after", value);
            }
            Ok(res.body(Full::new(Bytes::new())).unwrap())
        }
    }
}

fn actions() -> usize {
    std::env::var("STORM_ACTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

const BUDGET: Duration = Duration::from_secs(2);
const CAP: Duration = Duration::from_millis(300);

fn policy() -> Policy {
    Policy::builder()
        .total_budget(BUDGET)
        .attempt_cap(CAP)
        .min_wait(Duration::from_millis(100))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_storm_under_paused_time_keeps_every_budget_exactly() {
    let actions = actions();
    let seen = Arc::new(Seen::default());
    let upstream_seen = seen.clone();
    let upstream = tower::service_fn(move |req: Request<()>| {
        let n = upstream_seen.requests.fetch_add(1, Ordering::SeqCst);
        if req.method() == Method::POST {
            let id = req.headers()["x-id"].to_str().unwrap().to_owned();
            *upstream_seen.posts.lock().unwrap().entry(id).or_default() += 1;
        }
        answer(n, CAP * 2)
    });
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy()))
        .service(upstream);

    let mut tasks = Vec::with_capacity(actions);
    for i in 0..actions {
        let client = client.clone();
        let method = if i % 10 == 5 {
            Method::POST
        } else {
            Method::GET
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("http://upstream.test/items/{i}"))
            .header("x-id", i.to_string())
            .body(())
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let began = tokio::time::Instant::now();
            let result = client.oneshot(request).await;
            let report = match &result {
                Ok(response) => response.extensions().get::<Report>().cloned(),
                Err(error) => error.report().cloned(),
            };
            (method, began.elapsed(), report)
        }));
    }

    let mut outcomes: HashMap<Outcome, usize> = HashMap::new();
    for task in tasks {
        let (method, elapsed, report) = task.await.expect("an action panicked");
        match (method, report) {
            (Method::GET, Some(report)) => {
                assert!(report.attempts_started <= 3);
                // Exact: the paused clock never wakes late.
                assert_eq!(elapsed, report.elapsed, "{report}");
                assert!(report.elapsed <= BUDGET, "{report}");
                for start in &report.starts() {
                    assert!(*start + CAP <= BUDGET, "{report}");
                }
                *outcomes.entry(report.outcome).or_default() += 1;
            }
            (Method::GET, None) => panic!("a GET ended without a report"),
            // POSTs pass through: no report, one request.
            (_, report) => assert!(report.is_none()),
        }
    }
    check_storm(&seen, actions, &outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_429s_on_loopback_ends_every_action() {
    let actions = actions();
    let (budget, cap, policy) = (BUDGET, CAP, policy());
    // A hang detector, not a timing assertion: far above any budget.
    let hung = Duration::from_secs(60);

    // The server.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let (stop, mut stopped) = watch::channel(false);
    let server_seen = seen.clone();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => accepted.unwrap(),
                _ = stopped.changed() => return,
            };
            let seen = server_seen.clone();
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let n = seen.requests.fetch_add(1, Ordering::SeqCst);
                    if req.method() == Method::POST {
                        let id = req.headers()["x-id"].to_str().unwrap().to_owned();
                        *seen.posts.lock().unwrap().entry(id).or_default() += 1;
                    }
                    answer(n, cap * 2)
                });
                let connection =
                    http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    _ = stopped.changed() => {}
                }
            });
        }
    });

    // The client: one shared hyper-util client behind the layer.
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(policy))
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    let started = Instant::now();
    let mut tasks = Vec::with_capacity(actions);
    for i in 0..actions {
        let client = client.clone();
        let method = if i % 10 == 5 {
            Method::POST
        } else {
            Method::GET
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("http://{addr}/items/{i}"))
            .header("x-id", i.to_string())
            .body(Empty::new())
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let result = client.oneshot(request).await;
            let report = match &result {
                Ok(response) => response.extensions().get::<Report>().cloned(),
                Err(error) => error.report().cloned(),
            };
            (method, report)
        }));
    }

    let mut outcomes: HashMap<Outcome, usize> = HashMap::new();
    for task in tasks {
        let (method, report) = tokio::time::timeout(hung, task)
            .await
            .expect("an action hung")
            .expect("an action panicked");
        match (method, report) {
            (Method::GET, Some(report)) => {
                assert!(report.attempts_started <= 3);
                // Started only where the full cap fitted (a late wake may
                // stop an action after its budget: no bound on that here).
                for start in &report.starts() {
                    assert!(*start + cap <= budget, "{report}");
                }
                *outcomes.entry(report.outcome).or_default() += 1;
            }
            (Method::GET, None) => panic!("a GET ended without a report"),
            // POSTs pass through: no report, one request.
            (_, report) => assert!(report.is_none()),
        }
    }
    let requests = seen.requests.load(Ordering::SeqCst);
    println!(
        "{actions} actions in {:?}: {requests} upstream requests; outcomes {outcomes:?}",
        started.elapsed()
    );
    check_storm(&seen, actions, &outcomes);

    // Nothing is left behind: stop the server, drop the client's pool, and
    // every task ends.
    stop.send(true).unwrap();
    drop(client);
    server.await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let deadline = Instant::now() + hung;
    while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        0,
        "tasks left alive after the storm"
    );
}

/// What every storm must show: at most 3 upstream requests per action,
/// every POST sent exactly once, and each kind of ending met.
fn check_storm(seen: &Seen, actions: usize, outcomes: &HashMap<Outcome, usize>) {
    let requests = seen.requests.load(Ordering::SeqCst);
    assert!(
        requests <= 3 * actions,
        "{requests} requests for {actions} actions"
    );
    let posts = seen.posts.lock().unwrap().clone();
    assert!(posts.values().all(|&n| n == 1), "a POST was sent twice");
    assert_eq!(posts.len(), (0..actions).filter(|i| i % 10 == 5).count());
    for outcome in [
        Outcome::Success,
        Outcome::BudgetExhausted,
        Outcome::AttemptTimeout,
        Outcome::TransportError,
    ] {
        assert!(
            outcomes.contains_key(&outcome),
            "no {outcome} in {outcomes:?}"
        );
    }
}
