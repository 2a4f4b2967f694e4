//! What the proxy's test binaries share: a loopback hyper upstream that
//! records what it sees, the proxy run as the built binary (its stderr
//! collected line by line), and a hyper client to call it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The longest any one step of a test may take before it fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What the upstream answers to one request.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: format!("status {status}\n").into_bytes(),
        }
    }

    pub fn retry_after(mut self, value: &str) -> Self {
        self.headers.push(("retry-after", value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// When its head arrived.
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A loopback upstream answering the n-th request (0-based) to a path with
/// `reply(path, n)`. It reads each request body in full before answering.
pub struct Upstream {
    pub addr: SocketAddr,
    pub count: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    pub fn start(reply: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(false, reply)
    }

    /// The same upstream speaking only HTTP/2 (h2c, prior knowledge).
    pub fn start_h2(reply: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(true, reply)
    }

    pub fn serve(h2: bool, reply: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let per_path = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
        let reply = Arc::new(reply);
        let (c, s) = (count.clone(), seen.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio");
                while let Ok((stream, _)) = listener.accept().await {
                    let (count, seen, per_path, reply) =
                        (c.clone(), s.clone(), per_path.clone(), reply.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<Incoming>| {
                            let (count, seen, per_path, reply) =
                                (count.clone(), seen.clone(), per_path.clone(), reply.clone());
                            async move {
                                let (parts, body) = request.into_parts();
                                let path = parts.uri.path().to_owned();
                                let n = {
                                    let mut map = per_path.lock().unwrap();
                                    let n = map.entry(path.clone()).or_insert(0);
                                    *n += 1;
                                    *n - 1
                                };
                                // Counted as soon as the head is in.
                                count.fetch_add(1, Ordering::SeqCst);
                                let at = Instant::now();
                                let body = body
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                seen.lock().unwrap().push(Seen {
                                    method: parts.method.to_string(),
                                    path: path.clone(),
                                    at,
                                    headers: parts.headers,
                                    body,
                                });
                                let reply = reply(&path, n);
                                let mut response =
                                    Response::new(Full::new(Bytes::from(reply.body)));
                                *response.status_mut() =
                                    StatusCode::from_u16(reply.status).unwrap();
                                for (name, value) in reply.headers {
                                    response.headers_mut().append(name, value.parse().unwrap());
                                }
                                Ok::<_, Infallible>(response)
                            }
                        });
                        let io = TokioIo::new(stream);
                        let _ = if h2 {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, service)
                                .await
                        } else {
                            http1::Builder::new().serve_connection(io, service).await
                        };
                    });
                }
            });
        });
        Self { addr, count, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until the upstream has seen `n` requests.
    pub async fn wait_for(&self, n: usize) {
        let start = Instant::now();
        while self.count() < n {
            assert!(
                start.elapsed() < PATIENCE,
                "the upstream saw {} of {n}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The proxy, as a child process; its stderr is collected line by line.
pub struct Proxy {
    pub child: Mutex<Child>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub lines: Arc<Mutex<Vec<String>>>,
    /// The thread collecting stderr: done once the proxy's stderr closed.
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Proxy {
    pub fn start(upstream: &Upstream, flags: &[&str]) -> Self {
        Self::start_to(&upstream.url(), flags)
    }

    pub fn start_to(upstream: &str, flags: &[&str]) -> Self {
        Self::spawn(
            Command::new(env!("CARGO_BIN_EXE_retry-budget")),
            upstream,
            flags,
        )
    }

    /// The proxy under `ulimit -n fd_limit` (set by the shell that then
    /// execs it).
    pub fn start_with_fd_limit(upstream: &Upstream, fd_limit: u32, flags: &[&str]) -> Self {
        let mut shell = Command::new("sh");
        shell.args([
            "-c",
            &format!("ulimit -n {fd_limit} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_retry-budget"),
        ]);
        Self::spawn(shell, &upstream.url(), flags)
    }

    pub fn spawn(mut command: Command, upstream: &str, flags: &[&str]) -> Self {
        command
            .args(["proxy", "--upstream", upstream])
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(flags);
        Self::spawn_command(command)
    }

    /// The proxy serving a config file (which names its own listeners).
    pub fn start_config(file: &std::path::Path) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_retry-budget"));
        command.args(["proxy", "--config"]).arg(file);
        Self::spawn_command(command)
    }

    fn spawn_command(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        let mut proxy = Self {
            child: Mutex::new(child),
            addr: "127.0.0.1:1".parse().unwrap(),
            admin: "127.0.0.1:1".parse().unwrap(),
            lines,
            reader: Mutex::new(Some(reader)),
        };
        let first = proxy.wait_line("listening on ");
        let after = |marker: &str, end: char| -> SocketAddr {
            let rest = &first[first.find(marker).unwrap() + marker.len()..];
            rest[..rest.find(end).unwrap()].parse().unwrap()
        };
        proxy.addr = after("listening on ", ' ');
        proxy.admin = after("admin on ", ',');
        proxy
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The first stderr line containing `needle`, waiting for it.
    pub fn wait_line(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(line) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            let exited = self.child.lock().unwrap().try_wait();
            if let Ok(Some(status)) = exited {
                // Give the reader thread a moment to collect the last lines.
                std::thread::sleep(Duration::from_millis(100));
                if let Some(line) = self
                    .lines
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|l| l.contains(needle))
                {
                    return line.clone();
                }
                panic!(
                    "the proxy exited ({status}) without {needle:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no {needle:?} on stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([
                &format!("-{name}"),
                &self.child.lock().unwrap().id().to_string(),
            ])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    pub fn wait_exit(&self) -> ExitStatus {
        let start = Instant::now();
        loop {
            let exited = self.child.lock().unwrap().try_wait().expect("try_wait");
            if let Some(status) = exited {
                // Every line the proxy wrote is collected before its exit
                // is told: the reader ends at the closed pipe.
                if let Some(reader) = self.reader.lock().unwrap().take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the proxy did not exit:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The value of one metric line (`name{labels}`), 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.metrics().await, series)
    }

    /// The value of one metric line once it reaches `value`, or its last
    /// value after [`PATIENCE`]: a counter the proxy bumps just after it
    /// closes a connection may lag the client seeing the close.
    pub async fn metric_reaching(&self, series: &str, value: f64) -> f64 {
        let start = std::time::Instant::now();
        loop {
            let seen = self.metric(series).await;
            if seen == value || start.elapsed() > PATIENCE {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        let answer = send(get(&format!("http://{}/metrics", self.admin))).await;
        assert_eq!(answer.status, 200);
        assert!(answer
            .header("content-type")
            .starts_with("application/openmetrics-text"));
        answer.text()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// A response, read in full.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

pub async fn send(request: Request<Full<Bytes>>) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    send_with(&client, request).await
}

pub async fn send_with(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Answer {
    let answer = async {
        let response = client.request(request).await.expect("the proxy answers");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the whole body").to_bytes();
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    };
    tokio::time::timeout(PATIENCE, answer)
        .await
        .expect("an answer in time")
}

/// A `redis-server` of the test's own on a free loopback port, or `None`
/// (with a message) when there is none and `RETRY_BUDGET_REQUIRE_REDIS` is
/// unset.
pub struct RedisServer(Child, u16);

impl RedisServer {
    pub fn start() -> Option<Self> {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) if std::env::var_os("RETRY_BUDGET_REQUIRE_REDIS").is_none() => {
                eprintln!("SKIPPED: cannot run `{binary}` ({e}); set RETRY_BUDGET_REQUIRE_REDIS=1 to make this a failure");
                return None;
            }
            Err(e) => panic!("RETRY_BUDGET_REQUIRE_REDIS is set but `{binary}` cannot run: {e}"),
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < PATIENCE, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(Self(child, port))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.1)
    }

    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
