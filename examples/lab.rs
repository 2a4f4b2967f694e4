//! The source document's lab, runnable: several rate-limited actions at
//! once against a real loopback server that rate-limits.
//!
//! ```text
//! cargo run --example lab
//! ```
//!
//! The scene (seed 002): on the exercise page the user clicks "explain" on
//! three exercises, clicks the first one again, and asks for a summary of
//! the notes. Four distinct tasks leave, through a local gate of two. The
//! upstream lets 2 requests through per second and answers 429 to the rest:
//! with `Retry-After` on `/explain/*`, without it on `/summary`. The user
//! closes the second explanation's panel 0.1 s after clicking.
//!
//! The client stack, outermost first:
//!
//! * `SingleFlightLayer`: the second click on the first exercise joins the
//!   first instead of sending a second request;
//! * `RetryBudgetLayer`: retries 429 only, inside a small budget (4 s, at
//!   most 3 attempts, 1 s per attempt), with equal jitter on the local
//!   fallback (capped at 8 s, like the source) from a fixed seed;
//! * `ConcurrencyLimitLayer(2)`: the gate, inside the retry layer, so that
//!   a task waiting for its retry holds no slot;
//! * hyper-util's client.
//!
//! Run 1 retries; run 2 disables retries (max attempts 1): every limited
//! task ends at once with the `rate_limit` category instead of hanging.
//! Each prints a timeline per task, in seconds since the run began.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_budget::{
    trail::{EventKind, RetryAfterSeen, WaitBasis},
    Jitter, Policy, Report,
};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::single_flight::{Shared, SingleFlightLayer};
use tower_retry_budget::RetryBudgetLayer;

/// Requests the upstream lets through per one-second window.
const PER_SECOND: u32 = 2;
/// How long the upstream takes to answer a request it accepts.
const WORK: Duration = Duration::from_millis(200);

/// The upstream's books: requests counted per one-second window since it
/// started, and a log of what it did.
struct Upstream {
    started: Instant,
    windows: Mutex<HashMap<u64, u32>>,
    log: Mutex<Vec<(Duration, String)>>,
}

impl Upstream {
    fn note(&self, at: Duration, line: String) {
        self.log.lock().unwrap().push((at, line));
    }

    /// 200 after some work, or 429 at once when this second's quota is
    /// spent (with `Retry-After` up to the next second, except on
    /// `/summary`).
    async fn answer(self: Arc<Self>, path: String) -> Response<Full<Bytes>> {
        let elapsed = self.started.elapsed();
        let window = elapsed.as_secs();
        let seen = {
            let mut windows = self.windows.lock().unwrap();
            let count = windows.entry(window).or_insert(0);
            *count += 1;
            *count
        };
        if seen > PER_SECOND {
            let mut res = Response::builder().status(429);
            if path.starts_with("/explain") {
                let left = Duration::from_secs(window + 1) - elapsed;
                let wait = left.as_secs_f64().ceil().max(1.0) as u64;
                res = res.header("retry-after", wait.to_string());
                self.note(
                    elapsed,
                    format!("{path}: over quota, 429 with Retry-After: {wait}"),
                );
            } else {
                self.note(
                    elapsed,
                    format!("{path}: over quota, 429 without Retry-After"),
                );
            }
            return res.body(Full::new(Bytes::new())).unwrap();
        }
        self.note(
            elapsed,
            format!("{path}: accepted ({seen} of {PER_SECOND} this second)"),
        );
        // Work on it; if the client goes away, this future is dropped.
        let guard = Abandoned(Some((self.clone(), path.clone())));
        tokio::time::sleep(WORK).await;
        guard.disarm();
        self.note(self.started.elapsed(), format!("{path}: 200 sent"));
        Response::new(Full::new(Bytes::from(format!("the answer for {path}"))))
    }
}

/// Notes a request dropped before its answer: the client's cancellation
/// reached the server's side of the connection.
struct Abandoned(Option<(Arc<Upstream>, String)>);

impl Abandoned {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some((upstream, path)) = self.0.take() {
            let at = upstream.started.elapsed();
            upstream.note(at, format!("{path}: the client went away; work dropped"));
        }
    }
}

async fn serve() -> std::io::Result<(SocketAddr, Arc<Upstream>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let upstream = Arc::new(Upstream {
        started: Instant::now(),
        windows: Mutex::default(),
        log: Mutex::default(),
    });
    let server = upstream.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let path = req.uri().path().to_owned();
                    let server = server.clone();
                    async move { Ok::<_, Infallible>(server.answer(path).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, upstream))
}

fn secs(d: Duration) -> String {
    format!("{:5.2}", d.as_secs_f64())
}

/// One task of the scene.
struct Task {
    name: &'static str,
    path: &'static str,
    /// When the user clicks, after the run began.
    click_at: Duration,
    /// When the user closes the panel, if they do.
    cancel_at: Option<Duration>,
}

const SCENE: [Task; 5] = [
    Task {
        name: "explain #1",
        path: "/explain/1",
        click_at: Duration::ZERO,
        cancel_at: None,
    },
    Task {
        name: "explain #2",
        path: "/explain/2",
        click_at: Duration::ZERO,
        cancel_at: Some(Duration::from_millis(100)),
    },
    Task {
        name: "explain #3",
        path: "/explain/3",
        click_at: Duration::from_millis(10),
        cancel_at: None,
    },
    Task {
        name: "explain #1 again",
        path: "/explain/1",
        click_at: Duration::from_millis(20),
        cancel_at: None,
    },
    Task {
        name: "summary",
        path: "/summary",
        click_at: Duration::from_millis(30),
        cancel_at: None,
    },
];

/// What a task ended with, for its timeline.
struct Ending {
    clicked: Duration,
    ended: Duration,
    status: Option<u16>,
    shared_by: Option<usize>,
    report: Option<Report>,
    error: Option<String>,
}

async fn run(title: &str, policy: Policy) -> Result<(), Box<dyn std::error::Error>> {
    let (addr, upstream) = serve().await?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(policy).jitter_seed(7))
        .concurrency_limit(2)
        .service(client);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in &SCENE {
        let client = client.clone();
        let uri = format!("http://{addr}{}", task.path);
        let (click_at, cancel_at) = (task.click_at, task.cancel_at);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(started + click_at).await;
            let token = CancellationToken::new();
            if let Some(at) = cancel_at {
                let token = token.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(started + at).await;
                    token.cancel();
                });
            }
            let mut request = Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
            request.extensions_mut().insert(token);
            let clicked = started.elapsed();
            let result = client.oneshot(request).await;
            let ended = started.elapsed();
            match result {
                Ok(response) => {
                    let status = Some(response.status().as_u16());
                    let shared_by = response.extensions().get::<Shared>().map(|s| s.callers);
                    let report = response.extensions().get::<Report>().cloned();
                    let _ = response.into_body().collect().await;
                    Ending {
                        clicked,
                        ended,
                        status,
                        shared_by,
                        report,
                        error: None,
                    }
                }
                Err(error) => {
                    let report = error.service_error().and_then(|e| e.report()).cloned();
                    Ending {
                        clicked,
                        ended,
                        status: None,
                        shared_by: None,
                        report,
                        error: Some(error.to_string()),
                    }
                }
            }
        }));
    }
    let mut endings = Vec::new();
    for task in tasks {
        endings.push(task.await?);
    }
    // Let the server note what it dropped.
    tokio::time::sleep(Duration::from_millis(50)).await;

    println!("\n=== {title} ===");
    for (task, ending) in SCENE.iter().zip(&endings) {
        print_timeline(task, ending);
    }
    println!("\n  the upstream's side (2 requests per second):");
    let mut log = upstream.log.lock().unwrap().clone();
    log.sort_by_key(|(at, _)| *at);
    for (at, line) in log {
        println!("    {}  {line}", secs(at));
    }
    Ok(())
}

fn print_timeline(task: &Task, ending: &Ending) {
    println!("\n  {} ({})", task.name, task.path);
    println!("    {}  clicked", secs(ending.clicked));
    let Some(report) = &ending.report else {
        if let Some(error) = &ending.error {
            println!("    {}  ended: {error}", secs(ending.ended));
        }
        return;
    };
    // The action's elapsed zero is when it passed the gate.
    let origin = ending.ended.saturating_sub(report.elapsed);
    let shared_by = ending.shared_by.filter(|n| *n > 1);
    if let (Some(callers), true) = (
        shared_by,
        origin + Duration::from_millis(5) < ending.clicked,
    ) {
        println!(
            "           joins the identical request in flight since {}: nothing new is sent",
            secs(origin).trim()
        );
        println!(
            "    {}  the task gets the shared response: {} (one upstream action, {callers} clicks)",
            secs(ending.ended),
            ending.status.unwrap_or_default()
        );
        return;
    }
    if origin > ending.clicked + Duration::from_millis(20) {
        println!(
            "    {}  admitted through the gate (queued {:.2} s: both slots were taken)",
            secs(origin),
            (origin - ending.clicked).as_secs_f64()
        );
    }
    for event in &report.events {
        let at = secs(origin + event.at);
        let line = match &event.kind {
            EventKind::AttemptStarted { attempt, .. } => format!("attempt {attempt} sent"),
            EventKind::Response {
                status,
                retry_after,
                ..
            } => match retry_after {
                RetryAfterSeen::Seconds { value } => {
                    format!("{status}, Retry-After {} s", value.as_secs())
                }
                RetryAfterSeen::Missing if *status == 429 => format!("{status}, no Retry-After"),
                _ => format!("{status}"),
            },
            EventKind::WaitPlanned { wait, basis, .. } => {
                let why = match basis {
                    WaitBasis::Server { .. } => "as the service asked".to_owned(),
                    WaitBasis::FallbackJittered { unjittered, .. } => {
                        format!("local fallback {} s, jittered", unjittered.as_secs_f64())
                    }
                    WaitBasis::Fallback { .. } => "local fallback".to_owned(),
                    _ => "hold-off".to_owned(),
                };
                format!(
                    "waits {:.3} s ({why}); its slot is free meanwhile",
                    wait.as_secs_f64()
                )
            }
            EventKind::Woke { .. } => "wait over".to_owned(),
            EventKind::CallerLeft { .. } => {
                "the user closed the panel: nothing more is sent".to_owned()
            }
            EventKind::Stopped { outcome } => format!("stopped: {outcome}"),
            _ => continue,
        };
        println!("    {at}  {line}");
    }
    if let Some(callers) = shared_by {
        println!("           (one upstream action, shared by {callers} clicks)");
    }
    if let Some(status) = ending.status {
        println!(
            "    {}  the task gets its response: {status}",
            secs(ending.ended)
        );
    }
    for line in report.to_string().lines() {
        println!("           | {line}");
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lab = Policy::builder()
        .total_budget(Duration::from_secs(4))
        .attempt_cap(Duration::from_secs(1))
        .max_attempts(3)
        .jitter(Jitter::Equal)
        .fallback_cap(Duration::from_secs(8));
    run(
        "Run 1: gate of 2, up to 3 attempts, jitter on the local fallback",
        lab.clone().build()?,
    )
    .await?;
    run(
        "Run 2: retries disabled (max attempts 1): limited tasks end at once as rate_limit",
        lab.max_attempts(1).build()?,
    )
    .await?;
    Ok(())
}
