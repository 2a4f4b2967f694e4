//! The allowance of a rate-limit window shared through a real Redis
//! (`--features redis`).
//!
//! Each test starts its own `redis-server` on a free loopback port (no
//! persistence) and stops it at the end. Without a `redis-server` binary
//! (`$REDIS_SERVER`, else `redis-server` on the `PATH`) the tests say so and
//! pass, unless `RETRY_BUDGET_REQUIRE_REDIS` is set (CI sets it), in which
//! case they fail.
//!
//! Real time is unavoidable (Redis keeps expiries on its own clock): every
//! wait here is "until it happens", with a generous bound that only turns a
//! hang into a failure; no test asserts that something was fast. Each
//! "process" is an allowance with a connection of its own.

#![cfg(feature = "redis")]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tower_retry_budget::hold_off::{
    RedisAllowance, RedisStore, Take, Unavailable, ALLOWANCE_EXPIRY_MARGIN,
};

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

/// A "process": an allowance of its own on `server`, in `namespace`. The
/// bound on each operation is generous (the machine may be busy): these
/// tests are about what is granted, not how fast.
fn process(server: &RedisServer, namespace: &str) -> RedisAllowance {
    let store = RedisStore::new(&server.url())
        .unwrap()
        .namespace(namespace)
        .unwrap()
        .op_timeout(Duration::from_secs(5))
        .unwrap();
    RedisAllowance::new(&store).unwrap()
}

fn namespace(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

/// Unix time in ms, `ms` from now.
fn unix_ms_in(ms: u64) -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(now.as_millis()).unwrap() + ms
}

const KEY: &str = "http://api.test:80 requests";

/// Counts the answers: (granted, refused, ended).
fn tally(answers: &[Take]) -> (usize, usize, usize) {
    let count = |f: fn(&Take) -> bool| answers.iter().filter(|a| f(a)).count();
    (
        count(|a| matches!(a, Take::Granted { .. })),
        count(|a| matches!(a, Take::Refused { .. })),
        count(|a| matches!(a, Take::Ended)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_together_never_start_more_than_the_window_holds() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("two-processes");
    let (a, b) = (process(&server, &ns), process(&server, &ns));
    let end = unix_ms_in(60_000);
    let mut answers = Vec::new();
    let mut lefts = Vec::new();
    // Each read "10 left" from its own responses; they take in turn.
    for _ in 0..15 {
        for process in [&a, &b] {
            let answer = process.take(KEY, end, 10).await.expect("Redis answers");
            match answer {
                Take::Granted { left } => lefts.push(left),
                Take::Refused { window_left } => {
                    assert!(
                        window_left > Duration::ZERO && window_left <= Duration::from_secs(60),
                        "{window_left:?}"
                    );
                }
                Take::Ended => {}
                other => panic!("{other:?}"),
            }
            answers.push(answer);
        }
    }
    assert_eq!(tally(&answers), (10, 20, 0));
    assert_eq!(lefts, (0..10).rev().collect::<Vec<u64>>());
    // The first ten were granted, alternately, and nothing after.
    assert!(answers[..10]
        .iter()
        .all(|a| matches!(a, Take::Granted { .. })));
    for process in [&a, &b] {
        let health = process.health();
        assert!(health.available);
        assert_eq!((health.failures, health.published), (0, 15));
    }
    // Another namespace, another fleet: its own allowance.
    let other = process(&server, &namespace("other-tenant"));
    assert_eq!(
        other.take(KEY, end, 10).await,
        Ok(Take::Granted { left: 9 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_announcement_lowers_the_allowance_and_a_higher_one_never_raises_it() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("lower");
    let (a, b) = (process(&server, &ns), process(&server, &ns));
    let mut redis = server.connection().await;
    let hash = format!("retry-budget:allowance:{ns}:{KEY}");
    let end = unix_ms_in(60_000);
    assert_eq!(a.take(KEY, end, 10).await, Ok(Take::Granted { left: 9 }));
    // B's response was sent before A's attempt counted: 20 is stale.
    assert_eq!(b.take(KEY, end, 20).await, Ok(Take::Granted { left: 8 }));
    // A response counting other clients of the token: 3 left.
    assert_eq!(b.take(KEY, end, 3).await, Ok(Take::Granted { left: 2 }));
    assert_eq!(a.take(KEY, end, 10).await, Ok(Take::Granted { left: 1 }));
    // A later end for the same window does not push it back; an earlier
    // one (a server rounding its reset differently) brings it forward.
    assert_eq!(
        a.take(KEY, end + 900, 10).await,
        Ok(Take::Granted { left: 0 })
    );
    let expires: u64 = redis::cmd("PEXPIRETIME")
        .arg(&hash)
        .query_async(&mut redis)
        .await
        .unwrap();
    let margin = u64::try_from(ALLOWANCE_EXPIRY_MARGIN.as_millis()).unwrap();
    assert_eq!(expires, end + margin);
    let Ok(Take::Refused { window_left }) = b.take(KEY, end - 700, 10).await else {
        panic!("the window is spent");
    };
    assert!(window_left <= Duration::from_millis(60_000 - 700));
    let expires: u64 = redis::cmd("PEXPIRETIME")
        .arg(&hash)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(expires, end - 700 + margin);
    // Spent stays spent, whatever is announced.
    assert!(matches!(
        a.take(KEY, end, u64::MAX).await,
        Ok(Take::Refused { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_ends_at_its_end_and_its_key_expires_after_the_margin() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("expiry");
    let (a, b) = (process(&server, &ns), process(&server, &ns));
    let mut redis = server.connection().await;
    let hash = format!("retry-budget:allowance:{ns}:{KEY}");
    let end = unix_ms_in(1_500);
    assert_eq!(a.take(KEY, end, 1).await, Ok(Take::Granted { left: 0 }));
    assert!(matches!(
        b.take(KEY, end, 1).await,
        Ok(Take::Refused { window_left }) if window_left <= Duration::from_millis(1_500)
    ));
    // Past the end (on Redis's clock, the same as this host's here).
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert_eq!(
        b.take(KEY, end, 1).await,
        Ok(Take::Ended),
        "a window that is over has nothing to take"
    );
    // The next window starts afresh, though the old key is still there
    // (within its margin).
    let next_end = unix_ms_in(1_500);
    assert_eq!(
        b.take(KEY, next_end, 2).await,
        Ok(Take::Granted { left: 1 })
    );
    assert_eq!(
        a.take(KEY, next_end, 2).await,
        Ok(Take::Granted { left: 0 })
    );
    assert!(matches!(
        a.take(KEY, next_end, 2).await,
        Ok(Take::Refused { .. })
    ));
    let expires: u64 = redis::cmd("PEXPIRETIME")
        .arg(&hash)
        .query_async(&mut redis)
        .await
        .unwrap();
    let margin = u64::try_from(ALLOWANCE_EXPIRY_MARGIN.as_millis()).unwrap();
    assert_eq!(expires, next_end + margin);
    eventually("the key expires", || {
        let mut redis = redis.clone();
        let hash = hash.clone();
        async move {
            let exists: u64 = redis::cmd("EXISTS")
                .arg(&hash)
                .query_async(&mut redis)
                .await
                .unwrap();
            exists == 0
        }
    })
    .await;
    assert!(
        unix_ms_in(0) >= next_end + margin,
        "not gone before the window's end and its margin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_every_take_is_unavailable_never_refused() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("stopped");
    let a = process(&server, &ns);
    let end = unix_ms_in(60_000);
    // One left in the window; then the store goes away.
    assert_eq!(a.take(KEY, end, 1).await, Ok(Take::Granted { left: 0 }));
    server.kill();
    let mut pausing = 0;
    for _ in 0..50 {
        match a.take(KEY, end, 1).await {
            Err(Unavailable::Pausing) => pausing += 1,
            Err(Unavailable::Redis { .. } | Unavailable::TimedOut) => {}
            other => panic!("Redis is down, yet: {other:?}"),
        }
    }
    let health = a.health();
    assert!(!health.available);
    assert!(health.failures >= 1);
    assert_eq!(health.dropped, pausing);
    assert!(pausing >= 1, "after a failure, Redis is not asked at once");

    // Redis comes back (empty): takes are answered again.
    server.run().await;
    let start = Instant::now();
    let answer = loop {
        if let Ok(answer) = a.take(KEY, end, 1).await {
            break answer;
        }
        assert!(start.elapsed() < PATIENCE, "no answer after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        answer,
        Take::Granted { left: 0 },
        "a fresh Redis, a fresh window"
    );
    assert!(a.health().available);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_takes_at_once_from_two_processes_grant_exactly_the_allowance() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("concurrent");
    let (a, b) = (process(&server, &ns), process(&server, &ns));
    let end = unix_ms_in(60_000);
    let takes: Vec<_> = (0..200)
        .map(|i| {
            let process = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { process.take(KEY, end, 37).await })
        })
        .collect();
    let mut answers = Vec::new();
    let mut lefts = Vec::new();
    for take in takes {
        let answer = take.await.unwrap().expect("Redis answers");
        if let Take::Granted { left } = answer {
            lefts.push(left);
        }
        answers.push(answer);
    }
    assert_eq!(tally(&answers), (37, 163, 0));
    lefts.sort_unstable();
    assert_eq!(lefts, (0..37).collect::<Vec<u64>>(), "each one taken once");
}

/// A fixed-window limiter of `QUOTA` requests per `WINDOW` (real time),
/// answering after 20 ms with the current draft's `RateLimit` fields (`t`
/// rounded up, as servers do) on every response, and a 429 with
/// `Retry-After` past the quota. Counts its 429s.
#[derive(Clone)]
struct Limiter {
    origin: std::time::Instant,
    state: std::sync::Arc<std::sync::Mutex<(u128, u64)>>,
    too_many: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const QUOTA: u64 = 10;
const WINDOW: Duration = Duration::from_secs(2);

impl Limiter {
    fn new() -> Self {
        Self {
            origin: std::time::Instant::now(),
            state: Default::default(),
            too_many: Default::default(),
        }
    }

    fn too_many(&self) -> u64 {
        self.too_many.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Counts one request: its status and fields.
    fn count(&self) -> http::Response<()> {
        let elapsed = self.origin.elapsed();
        let window = elapsed.as_millis() / WINDOW.as_millis();
        let left_ms = (window + 1) * WINDOW.as_millis() - elapsed.as_millis();
        let t = left_ms.div_ceil(1000);
        let mut state = self.state.lock().unwrap();
        if state.0 != window {
            *state = (window, 0);
        }
        state.1 += 1;
        let over = state.1 > QUOTA;
        let remaining = QUOTA.saturating_sub(state.1);
        drop(state);
        let mut response = http::Response::builder()
            .header("ratelimit", format!(r#""default";r={remaining};t={t}"#))
            .header("ratelimit-policy", format!(r#""default";q={QUOTA};w=2"#));
        if over {
            self.too_many
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            response = response.status(429).header("retry-after", t.to_string());
        }
        response.body(()).unwrap()
    }
}

impl tower::Service<http::Request<()>> for Limiter {
    type Response = http::Response<()>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<()>) -> Self::Future {
        let response = self.count();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(response)
        })
    }
}

/// A "process" of the fleet: a pacing shared on `server` in `namespace`
/// (each with a connection of its own).
fn shared_pacing(server: &RedisServer, namespace: &str) -> tower_retry_budget::pace::Pacing {
    tower_retry_budget::pace::Pacing::new().shared(process(server, namespace))
}

/// Sends `per_client` GETs from each of `clients` concurrent clients of
/// every process in `fleet` to `limiter`; returns how many succeeded.
async fn run_fleet(
    fleet: &[tower_retry_budget::pace::Pacing],
    limiter: &Limiter,
    clients: usize,
    per_client: usize,
) -> usize {
    use tower::{ServiceBuilder, ServiceExt};
    let mut tasks = Vec::new();
    for pacing in fleet {
        let service = ServiceBuilder::new()
            .layer(
                tower_retry_budget::RetryBudgetLayer::new(retry_budget::Policy::default())
                    .pace(pacing.clone()),
            )
            .service(limiter.clone());
        for _ in 0..clients {
            let service = service.clone();
            tasks.push(tokio::spawn(async move {
                let mut ok = 0;
                for _ in 0..per_client {
                    let request = http::Request::get("http://api.test/x").body(()).unwrap();
                    let answer = service.clone().oneshot(request).await;
                    if answer.is_ok_and(|r| r.status() == 200) {
                        ok += 1;
                    }
                }
                ok
            }));
        }
    }
    let mut ok = 0;
    for task in tasks {
        ok += task.await.unwrap();
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_paced_layers_sharing_redis_together_stay_within_the_window() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("fleet-pacing");
    let fleet = [shared_pacing(&server, &ns), shared_pacing(&server, &ns)];
    let limiter = Limiter::new();
    // 6 clients in all, 5 actions each: 30 actions, three windows' worth.
    let ok = run_fleet(&fleet, &limiter, 3, 5).await;
    assert_eq!(ok, 30);
    // The first wave (6, below the quota) knows nothing; from then on the
    // fleet takes each window's allowance from one count. Two pacers that
    // did not share would each spend the whole window (6 429s here when
    // tried).
    assert!(limiter.too_many() <= 2, "{} 429s", limiter.too_many());
    for pacing in &fleet {
        let health = pacing.store_health().expect("shared");
        assert!(health.available && health.published > 0, "{health:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_the_paced_fleet_goes_on_alone() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    let ns = namespace("fleet-pacing-stopped");
    let fleet = [shared_pacing(&server, &ns), shared_pacing(&server, &ns)];
    let limiter = Limiter::new();
    let run = {
        let (fleet, limiter) = (fleet.clone(), limiter.clone());
        tokio::spawn(async move { run_fleet(&fleet, &limiter, 3, 5).await })
    };
    // Once the fleet has taken from Redis, Redis goes away.
    eventually("the fleet takes from Redis", || async {
        fleet
            .iter()
            .all(|p| p.store_health().is_some_and(|h| h.published > 0))
    })
    .await;
    server.kill();
    // Every action still succeeds: no request is refused because Redis is
    // down (each process paces alone, 429s retried).
    assert_eq!(run.await.unwrap(), 30);
    for pacing in &fleet {
        let health = pacing.store_health().expect("shared");
        assert!(!health.available && health.failures > 0, "{health:?}");
    }
}
