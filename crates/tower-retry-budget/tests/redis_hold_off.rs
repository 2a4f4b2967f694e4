//! The hold-off shared through a real Redis (`--features redis`).
//!
//! Each test starts its own `redis-server` on a free loopback port (no
//! persistence) and stops it at the end. Without a `redis-server` binary
//! (`$REDIS_SERVER`, else `redis-server` on the `PATH`) the tests say so and
//! pass, unless `RETRY_BUDGET_REQUIRE_REDIS` is set (CI sets it), in which
//! case they fail.
//!
//! Real time is unavoidable (Redis keeps TTLs on its own clock): every wait
//! here is "until it happens", with a generous bound that only turns a hang
//! into a failure; no test asserts that something was fast.

#![cfg(feature = "redis")]

use std::convert::Infallible;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use retry_budget::{trail::EventKind, Outcome, Policy, Report};
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::hold_off::RedisStore;
use tower_retry_budget::{hold_off::HoldOff, Error, RetryBudgetLayer};

/// The bound on anything the tests wait for: only a hang fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A `redis-server` of this test's own, on a free loopback port.
struct RedisServer {
    binary: String,
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one, or `None` (with a message) when there is no binary and
    /// none is required.
    async fn start() -> Option<Self> {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let found = Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !found {
            if std::env::var_os("RETRY_BUDGET_REQUIRE_REDIS").is_some() {
                panic!("RETRY_BUDGET_REQUIRE_REDIS is set but `{binary}` cannot run");
            }
            eprintln!(
                "SKIPPED: no `{binary}` to run (install redis-server, or set REDIS_SERVER); \
                 set RETRY_BUDGET_REQUIRE_REDIS=1 to make this a failure"
            );
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = Self {
            binary,
            port,
            child: None,
        };
        server.run().await;
        Some(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again, on the same port) and waits until it
    /// answers.
    async fn run(&mut self) {
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        eventually("redis-server answers", || async {
            match client.get_multiplexed_async_connection().await {
                Ok(mut connection) => redis::cmd("PING")
                    .query_async::<String>(&mut connection)
                    .await
                    .is_ok(),
                Err(_) => false,
            }
        })
        .await;
    }

    /// Kills the process, at once.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("a test connection")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `check` is true, polling; fails after [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "{what}: not after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A hold-off shared through `server`, in `namespace`, once it works.
async fn shared(server: &RedisServer, namespace: &str) -> HoldOff {
    let store = RedisStore::new(&server.url())
        .unwrap()
        .namespace(namespace)
        .unwrap();
    let hold_off = HoldOff::builder().redis(store).build().unwrap();
    let probe = hold_off.clone();
    eventually("the store is available", || {
        let available = probe.store_health().is_some_and(|h| h.available);
        async move { available }
    })
    .await;
    hold_off
}

type Calls = Arc<Mutex<Vec<(String, Instant)>>>;
type Upstream = BoxCloneSyncService<Request<()>, Response<()>, Infallible>;

/// An upstream that answers at once: `429` with `Retry-After: N` for a path
/// `/retry-after/N` the first time, `200` otherwise; it records each call.
fn upstream(calls: &Calls) -> Upstream {
    let calls = calls.clone();
    BoxCloneSyncService::new(service_fn(move |request: Request<()>| {
        let path = request.uri().path().to_owned();
        let first = {
            let mut calls = calls.lock().unwrap();
            let first = !calls.iter().any(|(p, _)| *p == path);
            calls.push((path.clone(), Instant::now()));
            first
        };
        async move {
            let response = match path.strip_prefix("/retry-after/") {
                Some(seconds) if first => Response::builder()
                    .status(429)
                    .header("retry-after", seconds),
                _ => Response::builder().status(200),
            };
            Ok::<_, Infallible>(response.body(()).unwrap())
        }
    }))
}

fn calls_to(calls: &Calls, path: &str) -> Vec<Instant> {
    let calls = calls.lock().unwrap();
    calls
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, at)| *at)
        .collect()
}

type Client = BoxCloneSyncService<Request<()>, Response<()>, Error<Infallible>>;

fn client(policy: Policy, hold_off: &HoldOff, upstream: &Upstream) -> Client {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(RetryBudgetLayer::new(policy).hold_off(hold_off.clone()))
            .service(upstream.clone()),
    )
}

/// `Instant::now()` + `secs`, for comparisons.
fn from_now(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

fn namespace(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_through_one_instance_holds_the_first_attempts_of_another() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("two-instances");
    let (a, b) = (shared(&server, &ns).await, shared(&server, &ns).await);
    let calls = Calls::default();
    let upstream = upstream(&calls);
    let client_a = client(Policy::default(), &a, &upstream);
    let client_b = client(Policy::default(), &b, &upstream);
    // B's other client cannot wait at all: its budget is its one cap.
    let tight = Policy::builder()
        .total_budget(Duration::from_secs(4))
        .attempt_cap(Duration::from_secs(4))
        .build()
        .unwrap();
    let client_b_tight = client(tight, &b, &upstream);

    // A: 429 with Retry-After: 3 (A retries after 3 s, in the background).
    let a_action = tokio::spawn(client_a.oneshot(get("http://svc.test/retry-after/3")));
    eventually("B's map has A's hold", || {
        let held = b.until("http://svc.test:80").is_some();
        async move { held }
    })
    .await;
    let refused_at = calls_to(&calls, "/retry-after/3")[0];

    let error = client_b_tight
        .oneshot(get("http://svc.test/tight"))
        .await
        .expect_err("stopped");
    assert_eq!(error.outcome(), Outcome::HeldOff);
    assert!(
        calls_to(&calls, "/tight").is_empty(),
        "nothing was sent while held"
    );

    let response = client_b.oneshot(get("http://svc.test/b")).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(
        report.waits().len(),
        1,
        "B's first attempt waited: {report}"
    );
    let sent = calls_to(&calls, "/b");
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].duration_since(refused_at) >= Duration::from_secs(3),
        "B reached the upstream {:?} after A's 429, not before 3 s",
        sent[0].duration_since(refused_at)
    );
    let a_response = a_action.await.unwrap().unwrap();
    assert_eq!(a_response.status(), 200);
    assert!(b.store_health().unwrap().received >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_hold_never_shortens_a_longer_one_and_newcomers_read_the_keys() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("longer-wins");
    let b = shared(&server, &ns).await;
    let c = shared(&server, &ns).await;
    let mut redis = server.connection().await;
    // A 10 s hold set in Redis by someone this process never heard from
    // (no announcement): the documented key of the authority.
    let key = format!("retry-budget:hold-off:{ns}:http://svc.test:80");
    redis::cmd("SET")
        .arg(&key)
        .arg("1")
        .arg("PX")
        .arg(10_000)
        .query_async::<()>(&mut redis)
        .await
        .unwrap();

    // C gets a 429 asking for 2 s: it publishes, the script keeps the 10 s.
    let calls = Calls::default();
    let upstream = upstream(&calls);
    let (c_response, ttl) = {
        let response = client(Policy::default(), &c, &upstream)
            .oneshot(get("http://svc.test/retry-after/2"))
            .await
            .unwrap();
        eventually("C's hold was published", || {
            let published = c.store_health().unwrap().published >= 1;
            async move { published }
        })
        .await;
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
        (response, ttl)
    };
    assert_eq!(c_response.status(), 200, "C retried after its own 2 s");
    assert!(
        ttl > 5_000,
        "the 10 s hold was kept, not cut to 2 s: {ttl} ms left"
    );

    // A longer one lengthens it, and is announced (C's action stops at
    // once: 30 s do not fit in its budget).
    let response = client(Policy::default(), &c, &upstream)
        .oneshot(get("http://svc.test/retry-after/30"))
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    eventually("B heard the 30 s hold", || {
        let until = b.until("http://svc.test:80");
        async move { until.is_some_and(|u| u > from_now(20)) }
    })
    .await;
    assert_eq!(
        b.store_health().unwrap().received,
        1,
        "the 2 s hold that changed nothing was never announced"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(ttl > 20_000, "{ttl} ms");

    // A process that starts now reads the current keys.
    let d = shared(&server, &ns).await;
    let held = d.until("http://svc.test:80").expect("read on connect");
    assert!(held > from_now(20));
    // Another namespace shares nothing.
    let other = shared(&server, &namespace("other-tenant")).await;
    assert_eq!(other.until("http://svc.test:80"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maximum_hold_applies_to_holds_from_redis() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("max-hold");
    let store = RedisStore::new(&server.url())
        .unwrap()
        .namespace(&ns)
        .unwrap();
    let short = HoldOff::builder()
        .max_hold(Duration::from_secs(5))
        .redis(store)
        .build()
        .unwrap();
    eventually("the store is available", || {
        let available = short.store_health().is_some_and(|h| h.available);
        async move { available }
    })
    .await;
    let a = shared(&server, &ns).await;
    a.hold("http://svc.test:80", from_now(300));
    eventually("the short map heard it", || {
        let until = short.until("http://svc.test:80");
        async move { until.is_some() }
    })
    .await;
    let until = short.until("http://svc.test:80").unwrap();
    assert!(until <= from_now(5), "cut to the 5 s maximum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_no_request_fails_and_sharing_recovers() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("restart");
    let (a, b) = (shared(&server, &ns).await, shared(&server, &ns).await);
    let calls = Calls::default();
    let upstream = upstream(&calls);
    let client_a = client(Policy::default(), &a, &upstream);
    let client_b = client(Policy::default(), &b, &upstream);

    server.kill();
    eventually("A says the store is unavailable", || {
        let available = a.store_health().unwrap().available;
        async move { !available }
    })
    .await;
    // Requests go on; a 429 still holds A's own later first attempts.
    for i in 0..5 {
        let uri = format!("http://up.test/ok/{i}");
        assert_eq!(
            client_a.clone().oneshot(get(&uri)).await.unwrap().status(),
            200
        );
        assert_eq!(
            client_b.clone().oneshot(get(&uri)).await.unwrap().status(),
            200
        );
    }
    let response = client_a
        .clone()
        .oneshot(get("http://down.test/retry-after/1"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "retried after 1 s, Redis or not");
    let health = a.store_health().unwrap();
    assert!(!health.available);
    assert!(health.failures >= 1);
    // A hold recorded while Redis is away.
    a.hold("http://outage.test:80", from_now(60));

    server.run().await;
    for (name, map) in [("A", &a), ("B", &b)] {
        eventually(&format!("{name} recovers"), || {
            let available = map.store_health().unwrap().available;
            async move { available }
        })
        .await;
    }
    // Published once Redis is back (Redis restarted empty).
    eventually("B hears the hold A recorded during the outage", || {
        let held = b.until("http://outage.test:80").is_some();
        async move { held }
    })
    .await;
    let action = tokio::spawn(client_a.oneshot(get("http://back.test/retry-after/5")));
    eventually("B hears A's hold again", || {
        let held = b.until("http://back.test:80").is_some();
        async move { held }
    })
    .await;
    assert_eq!(action.await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_at_start_works_locally_then_joins_when_redis_comes() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    server.kill();
    let ns = namespace("down-at-start");
    let store = RedisStore::new(&server.url())
        .unwrap()
        .namespace(&ns)
        .unwrap();
    let late = HoldOff::builder().redis(store).build().unwrap();
    // Local holds work at once, Redis or not.
    late.hold("http://local.test:80", from_now(30));
    assert!(late.until("http://local.test:80").is_some());
    eventually("the store says Redis is unavailable", || {
        let health = late.store_health().unwrap();
        async move { !health.available && health.failures >= 1 }
    })
    .await;
    // An action started while the store is down says so in its trail, and
    // is served from the local map.
    let calls = Calls::default();
    let response = client(Policy::default(), &late, &upstream(&calls))
        .oneshot(get("http://other.test/ok"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let report = response.extensions().get::<Report>().unwrap();
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(
        report.events[0].kind,
        EventKind::SharedStoreUnavailable,
        "{:?}",
        report.events
    );

    server.run().await;
    eventually("the late store joins", || {
        let available = late.store_health().unwrap().available;
        async move { available }
    })
    .await;
    // Once it is back, an action's trail no longer mentions it.
    let response = client(Policy::default(), &late, &upstream(&calls))
        .oneshot(get("http://other.test/ok-again"))
        .await
        .unwrap();
    let report = response.extensions().get::<Report>().unwrap();
    assert!(!report
        .events
        .iter()
        .any(|e| e.kind == EventKind::SharedStoreUnavailable));
    let other = shared(&server, &ns).await;
    other.hold("http://svc.test:80", from_now(30));
    eventually("the late store hears the others", || {
        let held = late.until("http://svc.test:80").is_some();
        async move { held }
    })
    .await;
}
