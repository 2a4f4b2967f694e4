//! The floor of `retry-budget proxy`'s throughput: a reverse proxy of the
//! same shape on the same stack, doing nothing but forwarding.
//!
//! The shape is the sidecar's (`crates/retry-budget-cli/src/proxy/serve.rs`):
//! `--workers` threads, each a tokio current-thread runtime with a
//! listening socket of its own on one address (`SO_REUSEPORT`: the kernel
//! spreads new connections over them), serving HTTP/1.1 and h2c through
//! hyper-util's `auto` server, and forwarding through a pooled hyper-util
//! legacy client of its own; the binary's allocator is mimalloc. A request
//! is forwarded as received (method, path and query, header fields, body
//! streamed) to the upstream, with `Host` set to the upstream's, the
//! hop-by-hop fields removed ([`hop`]) both ways, and the upstream's
//! response relayed as received. Nothing else: no retries, no time
//! bounds, no logging, no metrics, no graceful shutdown (it runs until
//! killed). What `retry-budget proxy` spends per request beyond this is
//! its own work (BENCHMARKS.md, "Sidecar proxy").
//!
//! A benchmark target (`crates/retry-budget-cli/benches/proxy-throughput.sh`),
//! never published.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod floor;
pub mod hop;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

use floor::Floor;

/// The listen backlog of each worker's socket (as the sidecar's).
const BACKLOG: u32 = 1024;

/// The body of a response to the caller: the upstream's, streamed, or
/// none (the proxy's own error answers).
pub type ProxyBody = Either<Incoming, Empty<Bytes>>;

/// Where requests are forwarded: an `http://host[:port]` URL with no path.
#[derive(Debug, Clone)]
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The `Host` field sent upstream.
    host: HeaderValue,
}

impl FromStr for Upstream {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let uri: Uri = text.parse().map_err(|e| format!("{text}: {e}"))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(format!("{text}: only http:// upstreams"));
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(format!("{text}: no path (requests keep theirs)"));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{text}: no host"))?
            .clone();
        let host = HeaderValue::from_str(authority.as_str()).map_err(|e| format!("{text}: {e}"))?;
        Ok(Self {
            scheme: Scheme::HTTP,
            authority,
            host,
        })
    }
}

/// One worker's forwarding: its upstream and its own pooled client; with
/// `--floor`, the state its requests share with the other workers'.
#[derive(Debug)]
pub struct Proxy {
    upstream: Upstream,
    client: Client<HttpConnector, Incoming>,
    floor: Option<Arc<Floor>>,
}

impl Proxy {
    /// A proxy to `upstream` with a client (and connection pool) of its
    /// own, built as the sidecar builds its client for a plain-HTTP/1.1
    /// upstream.
    pub fn new(upstream: Upstream) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .build(tcp);
        Self {
            upstream,
            client,
            floor: None,
        }
    }

    /// The same proxy doing the least the sidecar's defaults do
    /// ([`floor`]), sharing `floor` with the other workers.
    pub fn with_floor(upstream: Upstream, floor: Arc<Floor>) -> Self {
        Self {
            floor: Some(floor),
            ..Self::new(upstream)
        }
    }

    /// Forwards `request` upstream and returns the upstream's response; a
    /// request the proxy cannot send is answered by the proxy (405 for
    /// `CONNECT`, 502 when the upstream cannot be reached or its answer
    /// cannot be read).
    pub async fn forward(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let (mut parts, body) = request.into_parts();
        if let Err(refused) = self.prepare(&mut parts) {
            return answer(refused);
        }
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                hop::strip(&mut parts.headers);
                // The version is this hop's: hyper writes its own.
                parts.version = Version::default();
                Response::from_parts(parts, Either::Left(body))
            }
            Err(_) => answer(StatusCode::BAD_GATEWAY),
        }
    }

    /// The request head rewritten for the upstream, or the status it is
    /// refused with.
    fn prepare(&self, parts: &mut http::request::Parts) -> Result<(), StatusCode> {
        if parts.method == Method::CONNECT {
            return Err(StatusCode::METHOD_NOT_ALLOWED);
        }
        hop::strip(&mut parts.headers);
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(self.upstream.scheme.clone());
        uri.authority = Some(self.upstream.authority.clone());
        uri.path_and_query = Some(
            parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
        parts.uri = Uri::from_parts(uri).map_err(|_| StatusCode::BAD_REQUEST)?;
        parts.headers.insert(HOST, self.upstream.host.clone());
        parts.version = Version::HTTP_11;
        Ok(())
    }

    /// As [`forward`](Self::forward), doing on the way what [`floor`]
    /// lists: its attempt bounded by the core's deadline, and stopped when
    /// `cancel` (the connection's drain token) fires.
    pub async fn forward_floor(
        &self,
        floor: &Floor,
        request: Request<Incoming>,
        cancel: CancellationToken,
    ) -> Response<ProxyBody> {
        let received = tokio::time::Instant::now();
        let (mut parts, body) = request.into_parts();
        if let Err(refused) = self.prepare(&mut parts) {
            return answer(refused);
        }
        let (method, url) = (parts.method.clone(), parts.uri.clone());
        let started = floor.start(received);
        started.mark(&mut parts.headers);
        // What a retry would be sent from, kept until the answer.
        let copy = parts.clone();
        let sent = tokio::time::timeout(
            started.reserved,
            self.client.request(Request::from_parts(parts, body)),
        );
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            result = sent => Some(result),
        };
        drop(copy);
        let (response, report) = match result {
            Some(Ok(Ok(response))) => {
                let (mut parts, body) = response.into_parts();
                hop::strip(&mut parts.headers);
                parts.version = Version::default();
                let report = started.respond(parts.status.as_u16(), &parts.headers);
                floor::tell(&mut parts.headers, &report);
                (Response::from_parts(parts, Either::Left(body)), report)
            }
            Some(Ok(Err(_))) => (answer(StatusCode::BAD_GATEWAY), started.fail(false)),
            Some(Err(_)) => (answer(StatusCode::GATEWAY_TIMEOUT), started.fail(true)),
            None => (answer(StatusCode::SERVICE_UNAVAILABLE), started.fail(false)),
        };
        floor::log(&method, &url, &report);
        response
    }
}

/// The proxy's own answer: `status`, no body.
fn answer(status: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Empty::new()));
    *response.status_mut() = status;
    response
}

/// `workers` listening sockets on `addr`, all on the port the first one
/// got (`addr`'s, or the one the system chose for port 0). On Unix each is
/// a socket of its own (`SO_REUSEPORT`); elsewhere they are copies of one
/// socket, which every worker accepts from. (The sidecar's, as it binds.)
/// Called within a tokio runtime (a socket is registered with it until it
/// is turned into a std socket).
pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(workers);
    let mut at = addr;
    for _ in 0..workers {
        #[cfg(not(unix))]
        if let Some(first) = listeners.first() {
            let copy = std::net::TcpListener::try_clone(first)?;
            listeners.push(copy);
            continue;
        }
        let socket = if at.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        #[cfg(unix)]
        socket.set_reuseport(true)?;
        socket.set_nodelay(true)?;
        socket.bind(at)?;
        let listener = socket.listen(BACKLOG)?;
        at = listener.local_addr()?;
        listeners.push(listener.into_std()?);
    }
    Ok(listeners)
}

/// Accepts connections on `listener` and serves each on a task of the
/// calling runtime, forever; fails only if the listener cannot be
/// registered with the runtime.
pub async fn serve(listener: std::net::TcpListener, proxy: Arc<Proxy>) -> io::Result<Infallible> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let builder = auto::Builder::new(TokioExecutor::new());
    // The worker's drain token (`--floor`): never fired, watched as the
    // sidecar watches its own.
    let drain = CancellationToken::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: wait a little
                // rather than spin.
                eprintln!("bare-proxy: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        if let Some(floor) = proxy.floor.clone() {
            // Each connection's drain token, a child of the worker's.
            let token = drain.child_token();
            let service = service_fn(move |request| {
                let (proxy, floor, token) = (proxy.clone(), floor.clone(), token.clone());
                async move {
                    let response = proxy.forward_floor(&floor, request, token).await;
                    Ok::<_, Infallible>(response)
                }
            });
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::spawn(async move {
                let _ = connection.await;
            });
            continue;
        }
        let service = service_fn(move |request| {
            let proxy = proxy.clone();
            async move { Ok::<_, Infallible>(proxy.forward(request).await) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(async move {
            // A connection's error (the peer left, a malformed request)
            // ends that connection only.
            let _ = connection.await;
        });
    }
}

/// Serves `listen` with `workers` threads, each a current-thread runtime
/// on a socket of its own with a [`Proxy`] of its own, until the process
/// is killed; returns only if a worker cannot start.
pub fn run(listen: SocketAddr, upstream: &Upstream, workers: usize, floor: bool) -> io::Result<()> {
    let listeners = {
        let binder = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let _entered = binder.enter();
        bind(listen, workers)?
    };
    let at = listeners
        .first()
        .ok_or_else(|| io::Error::other("no worker"))?
        .local_addr()?;
    eprintln!(
        "bare-proxy: listening on {at} (HTTP/1.1, h2c; {workers} worker(s)), upstream {}://{}",
        upstream.scheme, upstream.authority
    );
    let shared = floor.then(|| Arc::new(Floor::new()));
    let mut threads = Vec::with_capacity(workers);
    for (index, listener) in listeners.into_iter().enumerate() {
        let mut runtime = tokio::runtime::Builder::new_current_thread();
        runtime.enable_all();
        let proxy = match &shared {
            Some(shared) => {
                runtime.on_thread_park(floor::flush);
                Proxy::with_floor(upstream.clone(), shared.clone())
            }
            None => Proxy::new(upstream.clone()),
        };
        let proxy = Arc::new(proxy);
        let runtime = runtime.build()?;
        threads.push(
            std::thread::Builder::new()
                .name(format!("bare-proxy-worker-{index}"))
                .spawn(move || runtime.block_on(serve(listener, proxy)))?,
        );
    }
    for thread in threads {
        thread
            .join()
            .map_err(|_| io::Error::other("a worker thread panicked"))??;
    }
    Ok(())
}
