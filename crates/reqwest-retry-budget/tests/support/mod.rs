//! What the tests share: a scripted end of the middleware chain (no
//! network: it runs under tokio's paused clock) and a loopback hyper
//! server (real time).
#![allow(dead_code)] // each test file uses part of it

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Extensions;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use reqwest_retry_budget::RetryBudgetMiddleware;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower_retry_budget::AttemptDeadline;

/// What the end of the chain answers to its n-th attempt (0-based).
pub type Reply = Result<http::Response<&'static str>, &'static str>;

/// What the end of the chain saw of one attempt.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When, on tokio's clock, since the script was made.
    pub at: Duration,
    pub method: http::Method,
    /// The whole body, or why it could not be read.
    pub body: Result<Bytes, String>,
    pub deadline: Option<AttemptDeadline>,
    /// A marker the caller put in the middleware extensions, as seen here.
    pub marker: Option<Marker>,
    pub url: String,
    pub headers: http::HeaderMap,
    /// reqwest's per-request timeout.
    pub timeout: Option<Duration>,
}

/// A value a caller puts in the middleware extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker(pub u32);

/// The end of the chain: answers from a script, reads every body, and
/// records what it saw, without a network.
#[derive(Clone)]
pub struct Script {
    answer: Arc<dyn Fn(usize) -> Reply + Send + Sync>,
    seen: Arc<Mutex<Vec<Seen>>>,
    start: Instant,
}

impl Script {
    pub fn new(answer: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        Self {
            answer: Arc::new(answer),
            seen: Arc::default(),
            start: Instant::now(),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The instants of the attempts, in seconds since the script was made.
    pub fn times(&self) -> Vec<f64> {
        self.seen().iter().map(|s| s.at.as_secs_f64()).collect()
    }

    /// A client with `middleware`, then this script.
    pub fn client(&self, middleware: RetryBudgetMiddleware) -> ClientWithMiddleware {
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .with(self.clone())
            .build()
    }
}

#[async_trait::async_trait]
impl Middleware for Script {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let at = self.start.elapsed();
        let body = match request.body_mut().take() {
            None => Ok(Bytes::new()),
            Some(body) => match body.collect().await {
                Ok(collected) => Ok(collected.to_bytes()),
                Err(error) => Err(format!("{error:?}")),
            },
        };
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(Seen {
                at,
                method: request.method().clone(),
                body,
                deadline: extensions.get::<AttemptDeadline>().copied(),
                marker: extensions.get::<Marker>().copied(),
                url: request.url().to_string(),
                headers: request.headers().clone(),
                timeout: request.timeout().copied(),
            });
            seen.len() - 1
        };
        match (self.answer)(n) {
            Ok(response) => Ok(reqwest::Response::from(response)),
            Err(message) => Err(reqwest_middleware::Error::middleware(
                std::io::Error::other(message),
            )),
        }
    }
}

/// A response with this status and, if given, `Retry-After`.
pub fn reply(status: u16, retry_after: Option<&str>) -> Reply {
    let mut response = http::Response::builder().status(status);
    if let Some(value) = retry_after {
        response = response.header("retry-after", value);
    }
    Ok(response.body("palettes").unwrap())
}

/// A loopback HTTP/1 server that answers `answer(n)` to its n-th request
/// and records when each arrived (real time) and its body.
pub struct Server {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<(std::time::Instant, Bytes)>>>,
}

impl Server {
    pub async fn start(
        answer: impl Fn(usize) -> http::Response<&'static str> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<(std::time::Instant, Bytes)>>> = Arc::default();
        let answer = Arc::new(answer);
        let recorded = log.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let answer = answer.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let service =
                        service_fn(move |request: http::Request<hyper::body::Incoming>| {
                            let answer = answer.clone();
                            let recorded = recorded.clone();
                            async move {
                                let at = std::time::Instant::now();
                                let body = request
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                let n = {
                                    let mut log = recorded.lock().unwrap();
                                    log.push((at, body));
                                    log.len() - 1
                                };
                                let response =
                                    answer(n).map(|b| Full::new(Bytes::from_static(b.as_bytes())));
                                Ok::<_, Infallible>(response)
                            }
                        });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// The gaps between the requests the server got, in seconds.
    pub fn gaps(&self) -> Vec<f64> {
        let log = self.log.lock().unwrap();
        log.windows(2)
            .map(|w| w[1].0.duration_since(w[0].0).as_secs_f64())
            .collect()
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// A response with this status and, if given, `Retry-After`.
pub fn response(status: u16, retry_after: Option<&str>) -> http::Response<&'static str> {
    let mut response = http::Response::builder().status(status);
    if let Some(value) = retry_after {
        response = response.header("retry-after", value);
    }
    response.body("palettes").unwrap()
}
