//! `retry-budget get`, run as a built binary against a real hyper server on
//! a loopback port started by each test. The server counts the requests it
//! sees, so every test can say exactly what was sent.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// What the server answers to one request.
struct Reply {
    after: Duration,
    status: u16,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

impl Reply {
    fn status(status: u16) -> Self {
        Self {
            after: Duration::ZERO,
            status,
            headers: Vec::new(),
            body: format!("status {status}\n").into_bytes(),
        }
    }

    fn retry_after(mut self, value: &str) -> Self {
        self.headers
            .push(("retry-after", value.as_bytes().to_vec()));
        self
    }

    fn after(mut self, after: Duration) -> Self {
        self.after = after;
        self
    }
}

/// What the server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: http::HeaderMap,
}

/// A loopback server answering the n-th request (0-based) with `reply(n)`.
struct Server {
    addr: SocketAddr,
    count: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(reply: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
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
                    let (count, seen, reply) = (c.clone(), s.clone(), reply.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<Incoming>| {
                            let n = count.fetch_add(1, Ordering::SeqCst);
                            seen.lock().unwrap().push(Seen {
                                method: request.method().to_string(),
                                uri: request.uri().to_string(),
                                headers: request.headers().clone(),
                            });
                            let reply = reply(n);
                            async move {
                                tokio::time::sleep(reply.after).await;
                                let mut response =
                                    Response::new(Full::new(Bytes::from(reply.body)));
                                *response.status_mut() =
                                    http::StatusCode::from_u16(reply.status).unwrap();
                                for (name, value) in reply.headers {
                                    response.headers_mut().append(
                                        name,
                                        http::HeaderValue::from_bytes(&value).unwrap(),
                                    );
                                }
                                Ok::<_, Infallible>(response)
                            }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Self { addr, count, seen }
    }

    fn url(&self) -> String {
        format!("http://{}/resource", self.addr)
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-budget"));
    command.arg("get").args(args);
    command
}

fn get(args: &[&str]) -> Output {
    command(args).output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8 stderr")
}

/// Stdout is exactly one line: a JSON object with at least the keys of the
/// issue; it is returned.
fn json(output: &Output) -> Value {
    let text = stdout(output);
    assert!(text.ends_with('\n'), "{text:?}");
    assert_eq!(text.lines().count(), 1, "{text:?}");
    let value: Value = serde_json::from_str(&text).expect("stdout is JSON");
    for key in [
        "outcome",
        "last_status",
        "attempts_started",
        "max_attempts",
        "elapsed_s",
        "request_s",
        "wait_s",
        "events",
        "message",
    ] {
        assert!(value.get(key).is_some(), "no {key} in {value}");
    }
    value
}

#[test]
fn success_after_one_429_waits_as_asked_and_prints_the_body() {
    let server = Server::start(|n| match n {
        0 => Reply::status(429).retry_after("1"),
        _ => Reply {
            body: b"the resource\n".to_vec(),
            ..Reply::status(200)
        },
    });
    let started = Instant::now();
    let output = get(&[&server.url(), "--budget", "5s", "--attempt-timeout", "1s"]);
    let took = started.elapsed();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&output), "the resource\n");
    assert_eq!(server.count(), 2);
    // The 1 s the server asked for was waited, not shortened.
    assert!(took >= Duration::from_secs(1), "{took:?}");
    for line in [
        "attempt 1/3 started",
        "attempt 1/3: 429, Retry-After: 1 s (valid)",
        // (Times are real: the 429 arrives some ms after the start.)
        "waiting 1 s (server asked 1 s): next start at ",
        "s of the 5 s budget",
        "] woke, ",
        "attempt 2/3 started",
        "attempt 2/3: 200",
        "stopped: success",
        "Finished: the service answered.\nLast response: 200. Attempts: 2 / 3.",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }
    // Steps come in order.
    let first = err.find("attempt 1/3: 429").unwrap();
    let wait = err.find("waiting 1 s").unwrap();
    let second = err.find("attempt 2/3 started").unwrap();
    assert!(first < wait && wait < second, "{err}");
}

#[test]
fn a_long_retry_after_stops_at_once() {
    let server = Server::start(|_| Reply::status(429).retry_after("30"));
    let output = get(&[
        &server.url(),
        "--budget",
        "5s",
        "--attempt-timeout",
        "1s",
        "--json",
    ]);
    // Stopped at once: one request, no wait (no wall-clock bound needed).
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(server.count(), 1);
    let report = json(&output);
    assert_eq!(report["outcome"], "budget_exhausted");
    assert_eq!(report["last_status"], 429);
    assert_eq!(report["attempts_started"], 1);
    assert_eq!(report["max_attempts"], 3);
    assert_eq!(report["wait_s"], 0.0);
    let err = stderr(&output);
    assert!(
        err.contains(
            "Stopped: the retry budget cannot fit the next request.\nLast response: 429. Attempts: 1 / 3."
        ),
        "{err}"
    );
    assert!(
        err.contains("The service asked to wait 30 s; no retry was sent."),
        "{err}"
    );
    assert!(!err.contains("waiting"), "{err}");
}

#[test]
fn post_is_sent_once() {
    let server = Server::start(|_| Reply::status(429).retry_after("1"));
    let output = get(&[&server.url(), "--method", "POST", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(server.count(), 1);
    assert_eq!(server.seen()[0].method, "POST");
    let report = json(&output);
    assert_eq!(report["attempts_started"], 1);
    assert_eq!(report["max_attempts"], 1);
    assert_eq!(report["last_status"], 429);
    assert_eq!(report["wait_s"], 0.0);
    // Retries are on; the write was not safe to repeat: its own outcome,
    // with the reason and how to make it repeatable.
    assert_eq!(report["outcome"], "not_retryable", "{report}");
    assert_eq!(report["category"], "rate_limit", "{report}");
    let message = report["message"].as_str().unwrap();
    assert!(
        message.contains("its method is not safe to repeat") && message.contains("Idempotency-Key"),
        "{message}"
    );
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "not_repeatable"),
        "{report}"
    );
    let err = stderr(&output);
    assert!(
        err.contains("POST is not a safe method: it is sent once and never retried"),
        "{err}"
    );
    assert!(!err.contains("attempts_exhausted"), "{err}");
    assert!(!err.contains("waiting"), "{err}");
}

#[test]
fn post_with_an_idempotency_key_is_retried() {
    let server = Server::start(|n| match n {
        0 => Reply::status(429).retry_after("0"),
        _ => Reply::status(201),
    });
    let output = get(&[
        &server.url(),
        "--method",
        "POST",
        "-H",
        "Idempotency-Key: job-7f3a",
        "--min-wait",
        "10ms",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.count(), 2);
    let seen = server.seen();
    assert!(seen.iter().all(|r| r.method == "POST"));
    let report = json(&output);
    assert_eq!(report["outcome"], "success", "{report}");
    assert_eq!(report["attempts_started"], 2);
}

#[test]
fn the_quota_the_response_announced_is_told() {
    let server = Server::start(|_| {
        let mut reply = Reply::status(200);
        reply
            .headers
            .push(("ratelimit", br#""default";r=7;t=30"#.to_vec()));
        reply
            .headers
            .push(("ratelimit-policy", br#""default";q=10;w=60"#.to_vec()));
        reply
    });
    let output = get(&[&server.url()]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(
        err.contains("Quota announced: default (requests): 7 left of 10 per 60 s, resets in 30 s."),
        "{err}"
    );
}

#[test]
fn status_503_is_not_retried() {
    let server = Server::start(|_| Reply::status(503).retry_after("1"));
    let output = get(&[&server.url()]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert_eq!(server.count(), 1);
    // The body of the last response still goes to stdout.
    assert_eq!(stdout(&output), "status 503\n");
    assert!(
        err.contains("Stopped: the response is not one this policy retries.\nLast response: 503."),
        "{err}"
    );
    assert!(err.contains("stopped: not_retryable"), "{err}");
}

#[test]
fn the_per_attempt_cap_is_a_deadline_and_is_not_retried() {
    let server = Server::start(|_| Reply::status(200).after(Duration::from_secs(3)));
    let output = get(&[&server.url(), "--attempt-timeout", "300ms", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(server.count(), 1);
    let report = json(&output);
    assert_eq!(report["outcome"], "attempt_timeout");
    assert_eq!(report["last_status"], Value::Null);
    assert_eq!(report["attempts_started"], 1);
    // Never before the cap; the upper bound is only the budget (a loaded
    // machine may fire the timer late).
    let elapsed = report["elapsed_s"].as_f64().unwrap();
    assert!((0.3..20.0).contains(&elapsed), "{elapsed}");
    let err = stderr(&output);
    assert!(err.contains("attempt 1/3 ran past its time limit"), "{err}");
    assert!(err.contains("Last response: none."), "{err}");
}

#[test]
fn json_matches_what_the_server_saw() {
    let server = Server::start(|_| Reply::status(429).retry_after("1"));
    let output = get(&[
        &server.url(),
        "--max-attempts",
        "2",
        "--budget",
        "5s",
        "--attempt-timeout",
        "1s",
        "--min-wait",
        "100ms",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["outcome"], "attempts_exhausted");
    assert_eq!(
        report["attempts_started"].as_u64(),
        Some(server.count() as u64)
    );
    assert_eq!(server.count(), 2);
    assert_eq!(report["last_status"], 429);
    assert_eq!(report["max_attempts"], 2);
    // At least what the server asked; less than the budget, since a second
    // attempt still started.
    let wait = report["wait_s"].as_f64().unwrap();
    assert!((1.0..5.0).contains(&wait), "{wait}");
    let kinds: Vec<&str> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "attempt_started",
            "response",
            "wait_planned",
            "woke",
            "attempt_started",
            "response",
            "stopped"
        ]
    );
    // The message is the visible status printed on stderr.
    let message = report["message"].as_str().unwrap();
    assert!(message.starts_with("Stopped: all 2 attempts allowed were used."));
    assert!(stderr(&output).contains(message));
}

#[test]
fn headers_are_sent_and_gzip_is_decompressed() {
    // "hello, decompressed\n", gzip-compressed.
    const GZIP: &[u8] = &[
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9,
        0xd7, 0x51, 0x48, 0x49, 0x4d, 0xce, 0xcf, 0x2d, 0x28, 0x4a, 0x2d, 0x2e, 0x4e, 0x4d, 0xe1,
        0x02, 0x00, 0x39, 0x56, 0x4f, 0x9f, 0x14, 0x00, 0x00, 0x00,
    ];
    let server = Server::start(|_| Reply {
        headers: vec![("content-encoding", b"gzip".to_vec())],
        body: GZIP.to_vec(),
        ..Reply::status(200)
    });
    let output = get(&[
        &server.url(),
        "-H",
        "Authorization: Bearer secret-token",
        "--header",
        "X-Trace: 42",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "hello, decompressed\n");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["authorization"], "Bearer secret-token");
    assert_eq!(seen[0].headers["x-trace"], "42");
    assert!(seen[0].headers["accept-encoding"]
        .to_str()
        .unwrap()
        .contains("gzip"));
    // The token is never shown.
    assert!(!stderr(&output).contains("secret-token"));
}

#[test]
fn a_date_without_a_trusted_clock_stops() {
    let server = Server::start(|_| Reply::status(429).retry_after("Wed, 21 Oct 2037 07:28:00 GMT"));
    let output = get(&[&server.url(), "--untrusted-clock", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(server.count(), 1);
    assert_eq!(json(&output)["outcome"], "clock_untrusted");
}

#[test]
fn a_refused_connection_is_a_transport_error() {
    // A port that was free a moment ago: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = get(&[&format!("http://127.0.0.1:{port}/"), "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["outcome"], "transport_error");
    assert_eq!(report["attempts_started"], 1);
    let err = stderr(&output);
    assert!(err.contains("request failed: "), "{err}");
    assert!(err.contains("failed before any response"), "{err}");
}

#[test]
fn bad_flags_are_one_line_exit_2_and_send_nothing() {
    let server = Server::start(|_| Reply::status(200));
    let url = server.url();
    let cases: &[(&[&str], &str)] = &[
        (&[&url, "--budget", "20x"], "--budget"),
        (&[&url, "--attempt-timeout", "soon"], "--attempt-timeout"),
        (&[&url, "--min-wait", "-1s"], "--min-wait"),
        (&[&url, "--max-attempts", "three"], "--max-attempts"),
        (&[&url, "--max-attempts", "0"], "--max-attempts"),
        (&[&url, "--max-attempts", "101"], "at most 100"),
        (&[&url, "--budget", "2s"], "--attempt-timeout"),
        (&[&url, "-H", "NoColon"], "Name: value"),
        (&[&url, "-H", "Bad Name: v"], "header name"),
        (&[&url, "--method", "GE T"], "method"),
        (&["not a url"], "URL"),
        (&["ftp://127.0.0.1:1/"], "scheme"),
        (&["/no/scheme"], "scheme"),
        (&[&url, "--no-such-flag"], "--no-such-flag"),
        (&[], "URL"),
        (&["http://127.0.0.1:99999/"], "1 to 65535"),
        (&["http://127.0.0.1:0/"], "1 to 65535"),
        (&["http://127.0.0.1:8o8o/"], "1 to 65535"),
        (&[&url, "-H", "Content-Length: 5"], "Content-Length"),
        (
            &[&url, "-H", "Transfer-Encoding: chunked"],
            "Transfer-Encoding",
        ),
        (&[&url, "-H", "Host: elsewhere.example"], "Host"),
        (&[&url, "--sensitive", "not a name"], "--sensitive"),
        (&[&url, "--output", "/nonexistent-dir/body"], "--output"),
    ];
    for (args, needle) in cases {
        let output = get(args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("retry-budget: "), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    }
    assert_eq!(server.count(), 0, "a usage error sent a request");
}

#[test]
fn ctrl_c_during_a_wait_cancels_at_once() {
    let server = Server::start(|_| Reply::status(429).retry_after("3"));
    let mut child = command(&[&server.url(), "--budget", "10s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "no wait in:\n{seen}");
        seen.push_str(&line);
        if line.contains("waiting 3 s") {
            break;
        }
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = child.wait().unwrap();
    err.read_to_string(&mut seen).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();

    assert_eq!(status.code(), Some(130), "{seen}");
    assert_eq!(out.lines().count(), 1, "{out:?}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["outcome"], "cancelled");
    assert_eq!(report["attempts_started"], 1);
    assert_eq!(report["last_status"], 429);
    assert!(
        seen.contains("caller left: no further attempt is sent"),
        "{seen}"
    );
    assert!(seen.contains("Cancelled: the caller left"), "{seen}");
    // The process is gone well before the planned next start (at 3 s):
    // the server saw the first request only.
    assert_eq!(server.count(), 1);
}

#[test]
fn framing_headers_that_agree_are_sent() {
    let server = Server::start(|_| Reply::status(200));
    let host = server.addr.to_string();
    let output = get(&[
        &server.url(),
        "-H",
        &format!("Host: {host}"),
        "-H",
        "Content-Length: 0",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.count(), 1);
    assert_eq!(server.seen()[0].headers["host"], host.as_str());
}

/// Every byte the command wrote, stdout and stderr.
fn everything(output: &Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

#[test]
fn userinfo_is_sent_as_basic_and_never_shown() {
    let server = Server::start(|_| Reply::status(200));
    let url = format!("http://user:SECRET@{}/resource", server.addr);
    for mode in [&[][..], &["-v"][..], &["--json"][..], &["-v", "--json"][..]] {
        let mut args = vec![url.as_str()];
        args.extend_from_slice(mode);
        let output = get(&args);
        let all = everything(&output);
        assert_eq!(output.status.code(), Some(0), "{mode:?}: {all}");
        assert!(!all.contains("SECRET"), "{mode:?}: {all}");
        assert!(
            stderr(&output).starts_with(&format!("GET http://user:***@{}/resource:", server.addr)),
            "{mode:?}: {all}"
        );
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    for request in seen {
        // base64("user:SECRET"), and no userinfo on the request line.
        assert_eq!(request.headers["authorization"], "Basic dXNlcjpTRUNSRVQ=");
        assert_eq!(request.uri, "/resource");
    }
    // A -H Authorization wins over the URL's, as with curl.
    let output = get(&[&url, "-H", "Authorization: Bearer OTHER"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.seen()[4].headers["authorization"], "Bearer OTHER");
    assert!(!everything(&output).contains("OTHER"));
}

#[test]
fn userinfo_is_hidden_when_the_connection_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for mode in [&[][..], &["-v"][..], &["--json"][..]] {
        let url = format!("http://user:SECRET@127.0.0.1:{port}/");
        let mut args = vec![url.as_str()];
        args.extend_from_slice(mode);
        let output = get(&args);
        let all = everything(&output);
        assert_eq!(output.status.code(), Some(1), "{all}");
        assert!(all.contains("user:***@127.0.0.1"), "{all}");
        assert!(!all.contains("SECRET"), "{mode:?}: {all}");
    }
}

#[test]
fn usage_errors_never_echo_a_secret_nor_a_control_character() {
    let server = Server::start(|_| Reply::status(200));
    let url = server.url();
    let secret_url = format!("http://user:SECRET@{}/", server.addr);
    let cases: &[&[&str]] = &[
        &[&url, "-H", "Authorization: Bearer SECRET\u{1}\u{1b}[2J"],
        &[&url, "-H", "Authorization Bearer SECRET"],
        &[&url, "-H", "Cookie: id=SECRET\u{7f}"],
        &[
            &url,
            "--sensitive",
            "X-Api-Key",
            "-H",
            "X-Api-Key: SECRET\nmore",
        ],
        &[
            &url,
            "--sensitive=x-api-key",
            "--header=X-Api-Key: SECRET\rmore",
        ],
        // clap's own errors quote arguments: they are scrubbed too.
        &[&url, "Authorization: Bearer SECRET"],
        &[&url, "--header"],
        &[&url, "-H", "Authorization: SECRET", "--budget", "SECRET"],
        &[&url, "-HProxy-Authorization: SECRET", "extra"],
        &["http://user:SECRET@127.0.0.1:99999/"],
        &[&secret_url, "--no-such-flag"],
        &[&secret_url, "unexpected"],
        &["http://SECRET@127.0.0.1:0/"],
        &[&url, "-H", "Host: SECRET", "--sensitive", "host"],
    ];
    for args in cases {
        let output = get(args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("SECRET"), "{args:?}: {err}");
        assert!(
            !err.trim_end().chars().any(char::is_control),
            "{args:?}: {err:?}"
        );
    }
    assert_eq!(server.count(), 0, "a usage error sent a request");
}

#[test]
fn a_closed_stdout_fails_the_json_report_too() {
    let server = Server::start(|_| Reply::status(200));
    let mut child = command(&[&server.url(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // The reader leaves before the report is written: `| head -c 0`.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("the binary ends");
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(23), "{err}");
    assert!(
        err.contains("The JSON report could not be written to stdout"),
        "{err}"
    );
    assert!(err.contains("Finished: the service answered."), "{err}");
}
