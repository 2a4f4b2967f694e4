//! Issue 13's "done when", end to end: `retry-budget get` run as a built
//! binary against a real hyper server on a loopback port. Real time: the two
//! reset-header cases each wait about 3 s, as the server asks; only lower
//! bounds are asserted.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;

type Headers = Vec<(&'static str, String)>;

/// A loopback server: the first request gets 429 with `headers(())`
/// (computed when it arrives), every later one 200.
struct Server {
    addr: SocketAddr,
    count: Arc<AtomicUsize>,
}

impl Server {
    fn start(headers: impl Fn() -> Headers + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let headers = Arc::new(headers);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio");
                while let Ok((stream, _)) = listener.accept().await {
                    let (counter, headers) = (counter.clone(), headers.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |_: Request<Incoming>| {
                            let n = counter.fetch_add(1, Ordering::SeqCst);
                            let mut response =
                                Response::new(Full::new(Bytes::from_static(b"ok\n")));
                            if n == 0 {
                                *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                                for (name, value) in headers() {
                                    response
                                        .headers_mut()
                                        .append(name, value.parse().expect("a header value"));
                                }
                            }
                            async move { Ok::<_, Infallible>(response) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Self { addr, count }
    }

    fn url(&self) -> String {
        format!("http://{}/limited", self.addr)
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

fn get(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .arg("get")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON report")
}

/// The first whole Unix second at least `secs` seconds from now.
fn unix_in(secs: u64) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    let ceil = now.as_secs() + u64::from(now.subsec_nanos() > 0);
    (ceil + secs).to_string()
}

fn reset_events(report: &Value) -> Vec<Value> {
    report["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "reset_header")
        .cloned()
        .collect()
}

#[test]
fn retry_after_30_sent_twice_stops_at_once_against_a_20_s_budget() {
    let server = Server::start(|| vec![("retry-after", "30".into()), ("retry-after", "30".into())]);
    let output = get(&[&server.url(), "--budget", "20s", "--json"]);
    let report = report(&output);
    assert_eq!(report["outcome"], "budget_exhausted", "{report}");
    assert_eq!(server.count(), 1, "one request sent");
    assert_eq!(report["server_requested_wait_s"], 30.0);
    let message = report["message"].as_str().unwrap();
    assert!(
        message.contains("The service asked to wait 30 s"),
        "{message}"
    );
    assert!(report["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "retry_after_repeated" && e["raw"] == "30, 30"));
}

#[test]
fn x_ratelimit_reset_as_unix_time_waits_as_asked_and_is_named() {
    let server = Server::start(|| vec![("x-ratelimit-reset", unix_in(3))]);
    let started = Instant::now();
    let output = get(&[
        &server.url(),
        "--reset-header",
        "x-ratelimit-reset=unix",
        "--json",
    ]);
    let took = started.elapsed();
    let report = report(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert_eq!(server.count(), 2);
    assert!(took >= Duration::from_secs(3), "{took:?}");
    let resets = reset_events(&report);
    assert_eq!(resets.len(), 1, "{report}");
    assert_eq!(resets[0]["header"], "x-ratelimit-reset");
    assert_eq!(resets[0]["format"], "unix");
    assert_eq!(resets[0]["used"], true);
    assert!(resets[0]["wait_s"].as_f64().unwrap() >= 3.0, "{report}");
    // The wait says which header gave it.
    let waits: Vec<_> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "wait_planned")
        .collect();
    assert_eq!(waits[0]["basis"]["source"], "reset_header", "{report}");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("reset header x-ratelimit-reset"), "{err}");
    assert!(err.contains("(reset header asked"), "{err}");
}

#[test]
fn the_ietf_ratelimit_field_with_the_flag_waits_as_asked() {
    let server = Server::start(|| vec![("ratelimit", r#""p";r=0;t=3"#.into())]);
    let started = Instant::now();
    let output = get(&[&server.url(), "--ratelimit-fields", "--json"]);
    let took = started.elapsed();
    let report = report(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    let resets = reset_events(&report);
    assert_eq!(resets[0]["header"], "ratelimit");
    assert_eq!(resets[0]["wait_s"], 3.0);
    assert_eq!(resets[0]["used"], true);
}

#[test]
fn without_the_flags_reset_headers_are_not_read() {
    let server = Server::start(|| vec![("ratelimit", r#""p";r=0;t=3"#.into())]);
    let output = get(&[&server.url(), "--max-attempts", "1", "--json"]);
    let report = report(&output);
    assert_eq!(report["outcome"], "attempts_exhausted", "{report}");
    assert!(reset_events(&report).is_empty(), "{report}");
}

#[test]
fn a_bad_reset_header_flag_is_a_usage_error_with_nothing_sent() {
    let server = Server::start(Vec::new);
    let output = get(&[&server.url(), "--reset-header", "x-ratelimit-reset=millis"]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("must be seconds, unix, duration or rfc3339"),
        "{err}"
    );
    assert_eq!(server.count(), 0);
}
