//! Listening, serving and shutting down.
//!
//! The proxy serves HTTP/1.1 and h2c on one port (hyper-util's `auto`
//! server, which tells them apart by the HTTP/2 preface), and the admin
//! routes on another. On SIGTERM, SIGINT or SIGHUP (`interrupt.rs`) it
//! stops accepting at once, reports not ready, lets the actions in flight
//! finish for up to `--drain` (HTTP/1 connections close after their current
//! response, HTTP/2 ones get a GOAWAY), then fires the cancellation token every action
//! carries: those still running stop as `cancelled` (answered with 503 and
//! logged so), and the process exits with status 0.
//!
//! Every client connection, on either port, is bounded (`conn.rs`): a
//! permit of the port's connection limit, a header timeout, an idle
//! timeout; and every relayed response body by `--body-idle-timeout`
//! (`body.rs`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use retry_budget::Secs;
use tokio::net::TcpListener;

use crate::interrupt::Signals;

use super::admin::Admin;
use super::args::{Args, Config};
use super::conn::{Activity, Gate, Tracked};
use super::forward::{self, Proxy};
use super::metrics::Metrics;
use super::stack::Stack;

/// After the drain time, how long cancelled actions get to send their
/// answers before the connections are closed.
const GRACE: Duration = Duration::from_secs(1);

/// Runs `retry-budget proxy` until SIGTERM, SIGINT or SIGHUP; returns its exit
/// status (0 after a drain, 1 if it could not start, 2 for a bad flag).
pub fn run(args: Args) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(message) => return crate::shared::usage_error(&message),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-budget proxy: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve(config));
    // Connections still open after the grace time are closed here.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("retry-budget proxy: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), String> {
    let mut signals =
        Signals::listen().map_err(|e| format!("cannot listen for stop signals: {e}"))?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", config.listen))?;
    let admin_listener = TcpListener::bind(config.admin)
        .await
        .map_err(|e| format!("--admin {}: {e}", config.admin))?;
    let listen = listener
        .local_addr()
        .map_err(|e| format!("--listen: {e}"))?;
    let admin = admin_listener
        .local_addr()
        .map_err(|e| format!("--admin: {e}"))?;

    let metrics = Metrics::new();
    let stack = Stack::new(&config, metrics.clone())?;
    let drain = config.drain;
    eprintln!(
        "retry-budget proxy: listening on {listen} (HTTP/1.1, h2c), admin on {admin}, upstream {}; \
         budget {}, at most {} attempts, {} per attempt",
        config.upstream,
        Secs(config.policy.total_budget()),
        config.policy.max_attempts(),
        Secs(config.policy.attempt_cap()),
    );
    let limits = config.connections;
    let gate = Arc::new(Gate::new(
        config.max_connections.get(),
        "proxy",
        metrics.clone(),
    ));
    let admin_gate = Gate::new(config.admin_max_connections.get(), "admin", metrics.clone());
    let proxy = Arc::new(Proxy::new(config, stack, metrics.clone()));
    let ready = Arc::new(AtomicBool::new(true));
    let admin_task = tokio::spawn(
        Admin {
            metrics,
            ready: ready.clone(),
            limits,
        }
        .serve(admin_listener, admin_gate),
    );

    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.idle_timeout)
        .keep_alive_timeout(limits.header_timeout);
    let received = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Past the limit the stream is dropped here: closed at
                    // once, its descriptor freed.
                    let Some(permit) = gate.admit() else { continue };
                    let _ = stream.set_nodelay(true);
                    let proxy = proxy.clone();
                    let activity = Activity::default();
                    let requests = activity.clone();
                    let service = service_fn(move |request| {
                        let in_flight = requests.begin();
                        let handled = forward::handle(proxy.clone(), request);
                        async move {
                            let response = handled.await?;
                            Ok::<_, std::convert::Infallible>(
                                response.map(|body| Tracked::new(body, in_flight)),
                            )
                        }
                    });
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let watched = graceful.watch(connection);
                    let gate = gate.clone();
                    tokio::spawn(async move {
                        gate.serve(watched, activity, limits, permit).await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors, most likely: wait a little
                    // rather than spin.
                    eprintln!("retry-budget proxy: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(leave) = signals.recv() => break leave.name(),
        }
    };

    drop(listener);
    ready.store(false, Ordering::SeqCst);
    eprintln!(
        "retry-budget proxy: {received}: no new connections; draining {} connection(s) for up to {}",
        graceful.count(),
        Secs(drain),
    );
    let shutdown = graceful.shutdown();
    tokio::pin!(shutdown);
    if tokio::time::timeout(drain, &mut shutdown).await.is_ok() {
        eprintln!("retry-budget proxy: drained");
    } else {
        eprintln!("retry-budget proxy: drain time over: cancelling the actions still in flight");
        proxy.cancel.cancel();
        if tokio::time::timeout(GRACE, &mut shutdown).await.is_err() {
            eprintln!("retry-budget proxy: closing the connections still open");
        }
    }
    admin_task.abort();
    Ok(())
}
