//! The admin address: `/metrics` (Prometheus text), `/ready` (503 once a
//! shutdown has begun, so that a load balancer stops sending; 200 with the
//! routes whose upstream is failing listed, while serving, and, while a
//! store shared with other proxies is unreachable, still 200, saying so:
//! the proxy goes on alone), `/live` (200 while the process runs).
//! HTTP/1.1 only, GET and HEAD only.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::args::ConnectionLimits;
use super::conn::{Activity, Gate, Tracked};
use super::metrics::{self, Metrics};

/// What the admin routes read.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The metrics.
    pub metrics: Metrics,
    /// Cleared when a shutdown begins.
    pub ready: Arc<AtomicBool>,
    /// The same time bounds as the proxy port's.
    pub limits: ConnectionLimits,
}

impl Admin {
    /// Serves the admin routes on `listener` until the process ends, with
    /// the proxy port's time bounds and a connection limit of its own
    /// (`gate`).
    pub async fn serve(self, listener: TcpListener, gate: Gate) {
        let gate = Arc::new(gate);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors, most likely: the proxy itself
                // matters more than its metrics. Try again shortly.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let Some(permit) = gate.admit() else {
                continue;
            };
            let admin = self.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let activity = Activity::default();
                let requests = activity.clone();
                let limits = admin.limits;
                let service = service_fn(move |request| {
                    // hyper times each head here (`header_read_timeout`
                    // below): the bounds time only the first.
                    let in_flight = requests.begin(false);
                    let response = admin
                        .route(&request)
                        .map(|body| Tracked::new(body, in_flight));
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                gate.serve(connection, activity, limits, permit).await;
            });
        }
    }

    /// The response to one admin request.
    pub fn route(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        match request.uri().path() {
            "/metrics" => {
                let mut response = Response::new(Full::new(Bytes::from(self.metrics.encode())));
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    http::HeaderValue::from_static(metrics::CONTENT_TYPE),
                );
                response
            }
            "/ready" if self.ready.load(Ordering::SeqCst) => self.ready_text(),
            "/ready" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
            "/live" => text(StatusCode::OK, "live\n"),
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: /metrics, /ready or /live\n",
            ),
        }
    }
}

impl Admin {
    /// 200 `ready`, listing the routes whose upstream is failing (the
    /// proxy still serves the others, so it stays ready).
    fn ready_text(&self) -> Response<Full<Bytes>> {
        let failing = self.metrics.route_families().failing();
        // Fail open: without the fleet's store, the proxy works alone.
        let store_down = self.metrics.shared_store_down();
        if failing.is_empty() && !store_down {
            return text(StatusCode::OK, "ready\n");
        }
        let mut body = String::from("ready\n");
        if store_down {
            body.push_str("shared store unreachable: holding off and pacing alone\n");
        }
        if !failing.is_empty() {
            body.push_str(&format!("failing routes: {}\n", failing.join(", ")));
        }
        let mut response = text(StatusCode::OK, "");
        *response.body_mut() = Full::new(Bytes::from(body));
        response
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
