//! Listening, serving and shutting down.
//!
//! The proxy serves HTTP/1.1 and h2c on one port (hyper-util's `auto`
//! server, which tells them apart by the HTTP/2 preface), and the admin
//! routes on another. On SIGHUP it reads its config file again
//! (`reload.rs`) and serves on. On SIGTERM or SIGINT (`common/leave.rs`) it
//! stops accepting at once, reports not ready, lets the actions in flight
//! finish for up to `--drain` (HTTP/1 connections close after their current
//! response, HTTP/2 ones get a GOAWAY), then fires the cancellation token every action
//! carries: those still running stop as `cancelled` (answered with 503 and
//! logged so), and the process exits with status 0.
//!
//! The proxy port is served by `--workers` threads, each a tokio
//! current-thread runtime with its own listening socket on the same
//! address (`SO_REUSEPORT`: the kernel spreads new connections over them)
//! and its own upstream client: a request is read, forwarded, answered and
//! logged on one thread, with no hand-off to another. The main thread
//! runs the admin port, the signals and the drain. What the workers share
//! (connection limit, client budget, hold-off, metrics) is behind `Arc`s.
//!
//! Every client connection, on either port, is bounded (`conn.rs`): a
//! permit of the port's connection limit, a header timeout, an idle
//! timeout; and every relayed response body by `--body-idle-timeout`
//! (`relay_body.rs`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use retry_budget::Secs;
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::common::leave::{Leave, LeaveListener};

use super::admin::Admin;
use super::args::{Args, ConnectionLimits, ProxyConfig};
use super::conn::{Activity, Gate, Tracking};
use super::file;
use super::forward::{self, Proxy};
use super::log;
use super::metrics::Metrics;
use super::reload::Routes;
use super::route::Match;

/// After the drain time, how long cancelled actions get to send their
/// answers before the connections are closed.
const GRACE: Duration = Duration::from_secs(1);

/// The listen backlog of each worker's socket.
const BACKLOG: u32 = 1024;

/// Runs `retry-budget proxy` until SIGTERM or SIGINT; returns its exit
/// status (0 after a drain, 1 if it could not start, 2 for a bad flag or
/// config file). With `--check-config`, checks the file and exits.
pub fn run(args: Args) -> ExitCode {
    if let Some(path) = args.check_config() {
        return file::check(path);
    }
    let config = match args.config_file() {
        Some(path) => file::load(path),
        None => args.config(),
    };
    let config = match config {
        Ok(config) => config,
        Err(message) => return crate::common::run::usage_error(&message),
    };
    let runtime = match runtime(false) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-budget proxy: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(config));
    // The admin connections still open are closed here.
    runtime.shutdown_timeout(Duration::from_millis(100));
    let result = result.and_then(|workers| {
        for worker in workers {
            // A worker that panicked has already printed why.
            worker
                .join()
                .map_err(|_| "a worker thread panicked".to_owned())?;
        }
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("retry-budget proxy: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A current-thread runtime: the main thread's, and each worker's (which
/// writes its buffered log lines whenever it has nothing else to do).
fn runtime(worker: bool) -> std::io::Result<Runtime> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    if worker {
        builder.on_thread_park(log::flush_this_thread);
    }
    builder.enable_all().build()
}

/// `workers` listening sockets on `addr`, all on the port the first one
/// got (`addr`'s, or the one the system chose for port 0). On Unix each is
/// a socket of its own (`SO_REUSEPORT`); elsewhere they are copies of one
/// socket, which every worker accepts from.
fn bind(addr: std::net::SocketAddr, workers: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
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
        // As std's `TcpListener::bind` does on Unix.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        #[cfg(unix)]
        socket.set_reuseport(true)?;
        socket.set_nodelay(true)?;
        socket.bind(at)?;
        let listener = socket.listen(BACKLOG)?;
        at = listener.local_addr()?;
        // Registered again with the runtime of the worker that serves it.
        listeners.push(listener.into_std()?);
    }
    Ok(listeners)
}

/// What the workers are told by the main thread.
#[derive(Debug, Clone, Default)]
struct Phases {
    /// Stop accepting and drain.
    stop: CancellationToken,
    /// The drain time is over: cancel the actions still running.
    cancel: CancellationToken,
    /// The grace time is over: close the connections still open.
    close: CancellationToken,
}

/// A worker ready to start: its socket and runtime.
type ReadyWorker = (std::net::TcpListener, Runtime);

/// Serves until a stop signal, then drains; returns the worker threads.
async fn serve(config: ProxyConfig) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let mut signals =
        LeaveListener::listen().map_err(|e| format!("cannot listen for stop signals: {e}"))?;
    let workers = config.workers.get();
    let listeners =
        bind(config.listen, workers).map_err(|e| format!("--listen {}: {e}", config.listen))?;
    let admin_listener = TcpListener::bind(config.admin)
        .await
        .map_err(|e| format!("--admin {}: {e}", config.admin))?;
    let listen = listeners
        .first()
        .ok_or("no worker")?
        .local_addr()
        .map_err(|e| format!("--listen: {e}"))?;
    let admin = admin_listener
        .local_addr()
        .map_err(|e| format!("--admin: {e}"))?;

    let metrics = Metrics::new();
    let config = Arc::new(config);
    let routes = Routes::new(config.clone(), &metrics)?;
    let ready_workers = prepare_workers(listeners)?;
    announce(&config, listen, admin);
    let gate = Arc::new(Gate::new(
        config.max_connections.get(),
        "proxy",
        metrics.clone(),
    ));
    let admin_gate = Gate::new(config.admin_max_connections.get(), "admin", metrics.clone());
    let ready = Arc::new(AtomicBool::new(true));
    let admin_task = tokio::spawn(
        Admin {
            metrics: metrics.clone(),
            ready: ready.clone(),
            limits: config.connections,
        }
        .serve(admin_listener, admin_gate),
    );
    let drain = config.drain;
    let phases = Phases::default();
    let (threads, all_drained) =
        spawn_workers((config, &routes), &metrics, &gate, &phases, ready_workers)?;
    let received = until_stopped(&mut signals, &routes).await;
    phases.stop.cancel();
    ready.store(false, Ordering::SeqCst);
    eprintln!(
        "retry-budget proxy: {received}: no new connections; draining {} connection(s) for up to {}",
        gate.open(),
        Secs(drain),
    );
    wait_drained(all_drained, drain, &phases).await;
    admin_task.abort();
    Ok(threads)
}

/// Reloads the routes on each SIGHUP until a stop signal; returns its
/// name.
async fn until_stopped(signals: &mut LeaveListener, routes: &Routes) -> &'static str {
    loop {
        match signals.recv().await {
            Some(Leave::Hangup) => routes.reload(),
            Some(leave) => return leave.name(),
            // No stop signal can arrive any more: serve until the process
            // is killed.
            None => std::future::pending().await,
        }
    }
}

/// The first line: where the proxy listens and what it serves (the
/// routes, one line each after it when there are several).
fn announce(config: &ProxyConfig, listen: std::net::SocketAddr, admin: std::net::SocketAddr) {
    let workers = config.workers;
    let serves = match config.routes.as_slice() {
        [one] if one.matcher == Match::Any => one.describe(),
        routes => format!("{} route(s)", routes.len()),
    };
    eprintln!(
        "retry-budget proxy: listening on {listen} (HTTP/1.1, h2c; {workers} worker(s)), admin on {admin}, {serves}"
    );
    if config.routes.len() > 1 || config.routes.iter().any(|r| r.matcher != Match::Any) {
        for route in &config.routes {
            eprintln!("retry-budget proxy: {}", route.line());
        }
    }
}

/// Each worker's runtime, made before anything is served.
fn prepare_workers(listeners: Vec<std::net::TcpListener>) -> Result<Vec<ReadyWorker>, String> {
    let mut ready_workers = Vec::with_capacity(listeners.len());
    for listener in listeners {
        let runtime = runtime(true).map_err(|e| format!("cannot start a worker's runtime: {e}"))?;
        ready_workers.push((listener, runtime));
    }
    Ok(ready_workers)
}

/// Starts the worker threads; the receiver's `recv` ends when every worker
/// has drained (or closed) its connections.
fn spawn_workers(
    (config, routes): (Arc<ProxyConfig>, &Routes),
    metrics: &Metrics,
    gate: &Arc<Gate>,
    phases: &Phases,
    ready_workers: Vec<ReadyWorker>,
) -> Result<(Vec<std::thread::JoinHandle<()>>, mpsc::Receiver<()>), String> {
    let workers = ready_workers.len();
    // Each worker holds a sender until its connections are drained (or
    // closed).
    let (drained, all_drained) = mpsc::channel::<()>(1);
    let mut threads = Vec::with_capacity(workers);
    for (index, (listener, runtime)) in ready_workers.into_iter().enumerate() {
        let worker = Worker {
            proxy: Arc::new(Proxy::new(
                config.clone(),
                routes.worker(index),
                metrics.clone(),
                &phases.cancel,
                (index, workers),
            )),
            gate: gate.clone(),
            phases: phases.clone(),
            drained: drained.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("proxy-worker-{index}"))
            .spawn(move || {
                log::buffer_this_thread();
                runtime.block_on(worker.serve(listener));
                // Connections still open after the grace time are closed
                // here (their actions' lines written then).
                runtime.shutdown_timeout(Duration::from_millis(100));
                log::flush_this_thread();
            })
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        threads.push(thread);
    }
    Ok((threads, all_drained))
}

/// Waits up to `drain` for the workers to drain, then cancels the actions
/// still running, waits [`GRACE`], and closes what is still open.
async fn wait_drained(mut all_drained: mpsc::Receiver<()>, drain: Duration, phases: &Phases) {
    let all_drained = all_drained.recv();
    tokio::pin!(all_drained);
    if tokio::time::timeout(drain, &mut all_drained).await.is_ok() {
        eprintln!("retry-budget proxy: drained");
    } else {
        eprintln!("retry-budget proxy: drain time over: cancelling the actions still in flight");
        phases.cancel.cancel();
        if tokio::time::timeout(GRACE, &mut all_drained).await.is_err() {
            eprintln!("retry-budget proxy: closing the connections still open");
        }
    }
    phases.close.cancel();
}

/// One worker thread's part of the proxy port.
struct Worker {
    proxy: Arc<Proxy>,
    gate: Arc<Gate>,
    phases: Phases,
    drained: mpsc::Sender<()>,
}

impl Worker {
    /// Accepts and serves connections until told to stop, then drains them
    /// until they are done or told to close them.
    async fn serve(self, listener: std::net::TcpListener) {
        let listener = match listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
        {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("retry-budget proxy: a worker cannot listen: {e}");
                return;
            }
        };
        let limits = self.proxy.config.connections;
        let graceful = GracefulShutdown::new();
        let builder = http_builder(limits);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => self.accept(stream, &builder, &graceful),
                    Err(e) => {
                        // Out of file descriptors, most likely: wait a
                        // little rather than spin.
                        eprintln!("retry-budget proxy: cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                () = self.phases.stop.cancelled() => break,
            }
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = self.phases.close.cancelled() => {}
        }
        drop(self.drained);
    }

    /// Serves one accepted connection on a task of its own, or, past the
    /// connection limit, drops it: closed at once, its descriptor freed.
    fn accept(
        &self,
        stream: tokio::net::TcpStream,
        builder: &auto::Builder<TokioExecutor>,
        graceful: &GracefulShutdown,
    ) {
        let Some(permit) = self.gate.admit() else {
            return;
        };
        let _ = stream.set_nodelay(true);
        let proxy = self.proxy.clone();
        let cancel = proxy.connection_token();
        let activity = Activity::default();
        let requests = activity.clone();
        let service = service_fn(move |request| {
            let in_flight = requests.begin(request.version() < http::Version::HTTP_2);
            Tracking::new(forward::handle(&proxy, request, &cancel), in_flight)
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        // Held until the connection's task ends: the drain waits for every
        // watcher. The stop itself is watched by the connection's bounds,
        // polled only when it fires (hyper-util's `watch` polls it on every
        // wake of the connection).
        let watcher = graceful.watcher();
        let stop = self.phases.stop.clone().cancelled_owned();
        let gate = self.gate.clone();
        let limits = self.proxy.config.connections;
        tokio::spawn(async move {
            let _watcher = watcher;
            gate.serve_draining(
                connection,
                (stop, |connection| connection.graceful_shutdown()),
                activity,
                limits,
                permit,
            )
            .await;
        });
    }
}

/// The connection builder of the proxy port: HTTP/1 and HTTP/2 (h2c),
/// under the connection time bounds.
fn http_builder(limits: ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Each HTTP/1 head is timed by the connection's bounds (`conn.rs`),
    // not by hyper's timer per head.
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.idle_timeout)
        .keep_alive_timeout(limits.header_timeout);
    builder
}
