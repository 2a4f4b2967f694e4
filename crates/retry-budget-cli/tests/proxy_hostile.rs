//! `retry-budget proxy` against hostile clients and broken upstreams: raw
//! sockets, hand-written HTTP/2 frames, and upstreams that stall or lie.
//! The proxy runs as the built binary; every bound is set short by its flag
//! (1 s) and every wait allows a generous patience, so that no test asserts
//! an upper bound on wall time a loaded machine could break.
//!
//! The helpers (loopback upstream, proxy child process) are in
//! `tests/support`, shared with `tests/proxy.rs`.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{get, metric, send, Proxy, Reply, Seen, Upstream, PATIENCE};

// ---------------------------------------------------------------------------
// Raw sockets and raw upstreams.

/// Sends `GET path` on new connections until one is answered 200, within
/// the patience (`what` says what did not happen otherwise).
fn wait_until_served(addr: SocketAddr, path: &str, what: &str) {
    let start = Instant::now();
    let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    loop {
        let mut stream = TcpStream::connect(addr).expect("the proxy accepts");
        stream.write_all(request.as_bytes()).unwrap();
        let answer = read_until_closed(&mut stream).unwrap_or_default();
        if answer.starts_with(b"HTTP/1.1 200") {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The HTTP/2 connection preface, then an empty SETTINGS frame.
const H2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Reads `stream` until the peer closes it (end of stream or reset),
/// within the patience; what it sent before, or `None` if it was still
/// open after the patience.
fn read_until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < PATIENCE {
        match stream.read(&mut buf) {
            Ok(0) => return Some(received),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Some(received)
            }
            Err(_) => {}
        }
    }
    None
}

/// Reads one answer with a `content-length` from a kept-alive `stream`,
/// within the patience.
fn read_one_answer(stream: &mut TcpStream) -> String {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = header_of(&text, "content-length")
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if text.len() >= end + 4 + length {
                return text;
            }
        }
        assert!(start.elapsed() < PATIENCE, "no whole answer: {text:?}");
        match stream.read(&mut buf) {
            Ok(0) => return text,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
}

/// Sends `request` (which asks for `Connection: close`) on a new
/// connection to `addr`; the whole answer as text.
fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("the proxy accepts");
    stream.write_all(request).unwrap();
    let answer = read_until_closed(&mut stream).expect("the answer ends in time");
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status of a raw HTTP/1.1 answer.
fn status_of(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP/1.1 answer: {answer:?}"))
}

/// The value of a header in a raw answer's head (case-insensitive name).
fn header_of<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = &answer[..answer.find("\r\n\r\n").unwrap_or(answer.len())];
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// What a [`RawUpstream`] does after writing its bytes.
#[derive(Clone, Copy)]
enum Then {
    /// Closes the connection.
    Close,
    /// Keeps it open (and silent) for a minute.
    Stall,
}

/// A loopback upstream that answers every request head with the same raw
/// bytes, whatever they say.
struct RawUpstream {
    addr: SocketAddr,
    /// Request heads read.
    count: Arc<AtomicUsize>,
    /// TCP connections accepted.
    connections: Arc<AtomicUsize>,
}

impl RawUpstream {
    fn start(response: &'static [u8], then: Then) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let count = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (c, accepted) = (count.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                accepted.fetch_add(1, Ordering::SeqCst);
                let count = c.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(response);
                    if let Then::Stall = then {
                        std::thread::sleep(Duration::from_secs(60));
                    }
                });
            }
        });
        Self {
            addr,
            count,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

// ---------------------------------------------------------------------------
// 1. File descriptors: connection bounds.

#[tokio::test]
async fn connections_without_a_complete_request_head_are_closed() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &["--header-timeout", "1s"]);
    let cases: [(&str, &[u8]); 4] = [
        ("nothing", b""),
        ("part of the HTTP/2 preface", b"PRI * HTTP/2.0\r\n"),
        ("the HTTP/2 preface and no HEADERS", H2_PREFACE_AND_SETTINGS),
        ("part of an HTTP/1 head", b"GET / HTTP/1.1\r\nHost: a\r\n"),
    ];
    for (what, sent) in cases {
        let mut stream = TcpStream::connect(proxy.addr).expect("the proxy accepts");
        stream.write_all(sent).unwrap();
        assert!(
            read_until_closed(&mut stream).is_some(),
            "a connection that sent {what} is still open"
        );
    }
    // Each is closed by the proxy's own bound, and the port still serves.
    let closed = proxy
        .metric("retry_budget_client_connections_closed_total{port=\"proxy\",reason=\"header_timeout\"}")
        .await;
    assert!(closed >= 3.0, "{closed}");
    assert_eq!(send(get(&proxy.url("/x"))).await.status, 200);
}

#[tokio::test]
async fn the_admin_port_closes_connections_without_a_complete_head() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(
        &upstream,
        &["--header-timeout", "1s", "--idle-timeout", "1s"],
    );
    for sent in [&b""[..], b"GET /live HTTP/1.1\r\n"] {
        let mut stream = TcpStream::connect(proxy.admin).expect("the admin port accepts");
        stream.write_all(sent).unwrap();
        assert!(
            read_until_closed(&mut stream).is_some(),
            "an admin connection that sent {:?} is still open",
            String::from_utf8_lossy(sent)
        );
    }
    // A kept-alive admin connection is closed once idle too.
    let mut stream = TcpStream::connect(proxy.admin).expect("the admin port accepts");
    stream
        .write_all(b"GET /live HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let answer = read_until_closed(&mut stream).expect("closed once idle");
    assert_eq!(status_of(&String::from_utf8_lossy(&answer)), 200);
}

#[tokio::test]
async fn an_idle_http1_keep_alive_connection_is_closed() {
    let upstream = Upstream::start(|_, _| Reply::status(200).body("ok"));
    // The header timeout is longer than the patience: only the idle bound
    // can close the connection in time.
    let proxy = Proxy::start(
        &upstream,
        &["--idle-timeout", "1s", "--header-timeout", "120s"],
    );
    let mut stream = TcpStream::connect(proxy.addr).expect("the proxy accepts");
    stream
        .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let received = read_until_closed(&mut stream).expect("closed once idle");
    let text = String::from_utf8_lossy(&received);
    assert_eq!(status_of(&text), 200);
    assert!(text.ends_with("ok"), "{text}");
    let idle = proxy
        .metric_reaching(
            "retry_budget_client_connections_closed_total{port=\"proxy\",reason=\"idle\"}",
            1.0,
        )
        .await;
    assert_eq!(idle, 1.0);
}

#[tokio::test]
async fn a_kept_alive_http1_connection_sending_its_next_head_too_slowly_is_closed() {
    let upstream = Upstream::start(|_, _| Reply::status(200).body("ok"));
    // The idle timeout is longer than the patience: only the header
    // timeout, timing the next head, can close the connection in time.
    let proxy = Proxy::start(
        &upstream,
        &["--header-timeout", "1s", "--idle-timeout", "120s"],
    );
    let mut stream = TcpStream::connect(proxy.addr).expect("the proxy accepts");
    stream
        .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let first = read_one_answer(&mut stream);
    assert_eq!(status_of(&first), 200);
    // Part of the next head, then nothing.
    stream.write_all(b"GET /y HTTP/1.1\r\nHo").unwrap();
    let rest = read_until_closed(&mut stream).expect("closed without its next head");
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    let closed = proxy
        .metric_reaching(
            "retry_budget_client_connections_closed_total{port=\"proxy\",reason=\"header_timeout\"}",
            1.0,
        )
        .await;
    assert_eq!(closed, 1.0);
    assert_eq!(upstream.seen().len(), 1, "the partial head was forwarded");
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let upstream = Upstream::start(|_, _| Reply::status(200).body("ok"));
    let proxy = Proxy::start(
        &upstream,
        &["--idle-timeout", "1s", "--header-timeout", "120s"],
    );
    let stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("the proxy accepts");
    // hyper's HTTP/2 client answers the proxy's PINGs: a live peer.
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an h2c handshake");
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(get(&proxy.url("/x")))
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
    let ended = tokio::time::timeout(PATIENCE, connection).await;
    assert!(ended.is_ok(), "the idle HTTP/2 connection is still open");
    let idle = proxy
        .metric_reaching(
            "retry_budget_client_connections_closed_total{port=\"proxy\",reason=\"idle\"}",
            1.0,
        )
        .await;
    assert_eq!(idle, 1.0);
}

/// One HTTP/2 frame: its 9-byte header, then `payload`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[tokio::test]
async fn http2_streams_reset_before_any_answer_open_no_upstream_connection_each() {
    // An upstream that counts the TCP connections opened to it.
    let upstream = RawUpstream::start(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", Then::Close);
    let proxy = Proxy::start_to(&upstream.url(), &[]);

    // GET / (HPACK: :method GET, :scheme http, :path / from the static
    // table; :authority "a" as a literal without indexing).
    let block = [0x82, 0x86, 0x84, 0x01, 0x01, b'a'];
    const CLIENTS: u32 = 5;
    const STREAMS: u32 = 20;
    for _ in 0..CLIENTS {
        let mut flood = H2_PREFACE_AND_SETTINGS.to_vec();
        for i in 0..STREAMS {
            let id = 2 * i + 1;
            // HEADERS (END_STREAM | END_HEADERS), then RST_STREAM (CANCEL).
            flood.extend(h2_frame(0x1, 0x5, id, &block));
            flood.extend(h2_frame(0x3, 0x0, id, &8u32.to_be_bytes()));
        }
        let mut client = TcpStream::connect(proxy.addr).expect("the proxy accepts");
        client.write_all(&flood).unwrap();
        // Kept open a moment, so the proxy reads every frame before it
        // sees the connection close.
        std::thread::sleep(Duration::from_millis(200));
        drop(client);
    }
    // The proxy still serves (and opens a connection for) a real request.
    let answer = send(get(&proxy.url("/after"))).await;
    assert_eq!(answer.status, 200);
    let opened = upstream.connections.load(Ordering::SeqCst);
    assert!(
        opened <= 1 + CLIENTS as usize,
        "{opened} upstream connections for {} reset streams and one request",
        CLIENTS * STREAMS
    );
}

#[tokio::test]
async fn past_the_connection_limit_new_connections_are_closed_and_the_rest_keeps_working() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &["--max-connections", "2"]);
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(proxy.addr).expect("the proxy accepts"))
        .collect();
    // Each worker accepts from a socket of its own, so connections made in
    // a row may be accepted in another order: a request answered on each
    // of the first two shows both were accepted before the third is made.
    for stream in &mut held {
        stream
            .write_all(b"GET /w HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let answer = read_one_answer(stream);
        assert_eq!(status_of(&answer), 200, "{answer}");
    }
    // The third is past the limit.
    let mut third = TcpStream::connect(proxy.addr).expect("the kernel accepts");
    third
        .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let answer = read_until_closed(&mut third).expect("the third connection is closed");
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    // The two within the limit are open, and serve.
    let first = &mut held[0];
    first
        .write_all(b"GET /y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = read_until_closed(first).expect("an answer");
    assert_eq!(status_of(&String::from_utf8_lossy(&answer)), 200);
    // The admin port has its own limit: /live and /ready answer.
    for path in ["/live", "/ready"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        assert_eq!(
            status_of(&raw_exchange(proxy.admin, request.as_bytes())),
            200
        );
    }
    let refused = proxy
        .metric("retry_budget_client_connections_refused_total{port=\"proxy\"}")
        .await;
    assert_eq!(refused, 1.0);
    // Once connections close, new ones are served again.
    drop(held);
    wait_until_served(proxy.addr, "/z", "no permit came back");
}

#[tokio::test]
async fn idle_connections_past_the_descriptor_limit_do_not_stop_the_proxy() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    // Far more idle connections than descriptors: the limit keeps the
    // proxy's own use under its ulimit, and the header timeout frees the
    // permits of those it took.
    let proxy = Proxy::start_with_fd_limit(
        &upstream,
        128,
        &["--max-connections", "64", "--header-timeout", "1s"],
    );
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(proxy.addr).expect("the kernel accepts"))
        .collect();
    for path in ["/live", "/ready"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        assert_eq!(
            status_of(&raw_exchange(proxy.admin, request.as_bytes())),
            200
        );
    }
    // A new request is served while the idle connections are still open on
    // this side.
    wait_until_served(proxy.addr, "/x", "the proxy serves no request");
    drop(idle);
    assert!(
        !proxy.stderr().contains("cannot accept"),
        "{}",
        proxy.stderr()
    );
}

// ---------------------------------------------------------------------------
// 2. The relayed response body.

#[tokio::test]
async fn a_stalled_response_body_is_cut_off_and_logged_as_timed_out() {
    let upstream = RawUpstream::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
        Then::Stall,
    );
    let proxy = Proxy::start_to(&upstream.url(), &["--body-idle-timeout", "1s"]);
    let answer = raw_exchange(
        proxy.addr,
        b"GET /slow HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 200);
    assert!(answer.ends_with("\r\n\r\nhello"), "cut off: {answer:?}");
    let line = proxy.wait_line("GET http");
    assert!(line.contains(" body=timed_out"), "{line}");
    let timed_out = proxy
        .metric("retry_budget_response_bodies_total{ending=\"timed_out\"}")
        .await;
    assert_eq!(timed_out, 1.0);
    assert_eq!(upstream.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_response_body_cut_short_is_logged_as_truncated() {
    let upstream = RawUpstream::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nhello",
        Then::Close,
    );
    let proxy = Proxy::start_to(&upstream.url(), &[]);
    let answer = raw_exchange(
        proxy.addr,
        b"GET /short HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 200);
    assert!(answer.ends_with("\r\n\r\nhello"), "{answer:?}");
    let line = proxy.wait_line("GET http");
    assert!(line.contains(" body=truncated"), "{line}");
    let truncated = proxy
        .metric("retry_budget_response_bodies_total{ending=\"truncated\"}")
        .await;
    assert_eq!(truncated, 1.0);
}

#[tokio::test]
async fn a_whole_response_body_is_logged_as_complete() {
    let upstream = Upstream::start(|_, _| Reply::status(200).body("the whole body"));
    let proxy = Proxy::start(&upstream, &[]);
    let answer = send(get(&proxy.url("/whole"))).await;
    assert_eq!(answer.text(), "the whole body");
    let line = proxy.wait_line("GET http");
    assert!(
        line.contains(" outcome=success ") && line.contains(" body=complete last_status=200"),
        "{line}"
    );
    let complete = proxy
        .metric("retry_budget_response_bodies_total{ending=\"complete\"}")
        .await;
    assert_eq!(complete, 1.0);
}

// ---------------------------------------------------------------------------
// 3. The upstream's path prefix.

#[tokio::test]
async fn no_path_reaches_the_upstream_outside_its_prefix() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start_to(&format!("{}/v1", upstream.url()), &[]);
    for target in [
        "/../admin",
        "/%2e%2e/admin",
        "/%2E%2e/admin",
        "/v1/../../admin",
        "/./x/../admin",
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(proxy.addr, request.as_bytes());
        assert_eq!(status_of(&answer), 200, "{target}: {answer}");
    }
    let paths: Vec<String> = upstream.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, vec!["/v1/admin"; 5]);

    // A dot-segment behind an encoded slash is refused, unsent.
    let answer = raw_exchange(
        proxy.addr,
        b"GET /..%2fadmin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert_eq!(header_of(&answer, "retry-budget-attempts"), Some("0"));

    // OPTIONS * is answered by the proxy, never sent as "/v1*".
    let answer = raw_exchange(
        proxy.addr,
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(header_of(&answer, "retry-budget-attempts"), Some("0"));
    assert_eq!(upstream.count(), 5, "{:?}", upstream.seen());
}

// ---------------------------------------------------------------------------
// 4. Idempotency keys.

#[tokio::test]
async fn a_hop_by_hop_or_empty_idempotency_key_is_no_key() {
    let upstream = Upstream::start(|_, _| Reply::status(429).retry_after("1"));
    let proxy = Proxy::start(&upstream, &["--no-hold-off"]);
    for (path, key) in [
        (
            "/hop",
            "Connection: close, idempotency-key\r\nIdempotency-Key: k-1\r\n",
        ),
        ("/empty", "Connection: close\r\nIdempotency-Key: \r\n"),
    ] {
        let request =
            format!("POST {path} HTTP/1.1\r\nHost: a\r\n{key}Content-Length: 7\r\n\r\npayload");
        let answer = raw_exchange(proxy.addr, request.as_bytes());
        assert_eq!(status_of(&answer), 429, "{answer}");
        assert_eq!(
            header_of(&answer, "retry-budget-attempts"),
            Some("1"),
            "{path}"
        );
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "each write sent once: {seen:?}");
    let hop = seen.iter().find(|s| s.path == "/hop").unwrap();
    assert_eq!(hop.header("idempotency-key"), None, "hop-by-hop: not sent");
    assert_eq!(hop.body, "payload");
    // Each action's line is written when its body has been relayed, which
    // may be just after the caller has read it.
    for path in ["/hop ", "/empty "] {
        let line = proxy.wait_line(path);
        assert!(line.ends_with("forwarded_once=not_idempotent"), "{line}");
    }
}

// ---------------------------------------------------------------------------
// 5. Log redaction.

#[tokio::test]
async fn secret_query_parameters_are_redacted_as_servers_read_their_names() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    let query = "t%6Fken=SECRET-1&page=2;jwt=SECRET-2&pwd=SECRET-3&client_assertion=SECRET-4\
                 &otp=SECRET-5&bearer=SECRET-6&pass=SECRET-7";
    let answer = send(get(&proxy.url(&format!("/r?{query}")))).await;
    assert_eq!(answer.status, 200);
    let line = proxy.wait_line("GET http");
    assert!(!proxy.stderr().contains("SECRET"), "{}", proxy.stderr());
    assert!(
        line.contains("t%6Fken=REDACTED&page=2;jwt=REDACTED"),
        "{line}"
    );
}

// ---------------------------------------------------------------------------
// 6. Smaller points.

#[tokio::test]
async fn a_malformed_chunked_body_is_the_callers_error() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    // A keyed (retryable) write whose second chunk size is not hex.
    let answer = raw_exchange(
        proxy.addr,
        b"POST /w HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k-2\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert_eq!(
        header_of(&answer, "retry-budget-outcome"),
        Some("bad_request_body")
    );
    let metrics = proxy.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "retry_budget_actions_total{outcome=\"bad_request_body\",category=\"caller\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert!(
        !metrics.contains("outcome=\"transport_error\""),
        "not counted against the upstream: {metrics}"
    );
    assert!(
        upstream.count() <= 1,
        "never retried: {:?}",
        upstream.seen()
    );
    assert!(proxy
        .wait_line("POST http")
        .contains(" outcome=bad_request_body "));
}

#[tokio::test]
async fn an_http1_connection_whose_request_body_broke_serves_no_further_request() {
    // The actions of an HTTP/1 connection share its cancellation token,
    // which a broken body fires: no later request may be read from it.
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    let mut stream = TcpStream::connect(proxy.addr).unwrap();
    stream
        .write_all(
            b"POST /w HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k-3\r\n\
              Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
        )
        .unwrap();
    let answer = read_one_answer(&mut stream);
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert_eq!(
        header_of(&answer, "retry-budget-outcome"),
        Some("bad_request_body")
    );
    // Refused or unanswered: the connection is closed.
    let _ = stream.write_all(b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n");
    let rest = read_until_closed(&mut stream).expect("the connection is closed");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert!(upstream.seen().iter().all(|seen| seen.path != "/second"));
}

#[tokio::test]
async fn a_get_with_a_chunked_body_is_forwarded_with_it() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    let answer = raw_exchange(
        proxy.addr,
        b"GET /search HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
          Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(upstream.seen()[0].body, "hello world");
    // With a Content-Length too.
    let answer = raw_exchange(
        proxy.addr,
        b"GET /search HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\
          Connection: close\r\n\r\nhello",
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(upstream.seen()[1].body, "hello");
}

#[tokio::test]
async fn an_invalid_upstream_status_is_a_502() {
    let upstream = RawUpstream::start(
        b"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        Then::Close,
    );
    let proxy = Proxy::start_to(&upstream.url(), &[]);
    let answer = raw_exchange(
        proxy.addr,
        b"GET /odd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 502, "{answer}");
    assert_eq!(
        header_of(&answer, "retry-budget-outcome"),
        Some("invalid_upstream_status")
    );
    assert!(proxy
        .wait_line("GET http")
        .contains(" outcome=invalid_upstream_status "));
}

#[tokio::test]
async fn an_attempt_number_that_is_not_a_number_counts_as_a_retry() {
    let upstream = Upstream::start(|_, _| Reply::status(429).retry_after("1"));
    let proxy = Proxy::start(&upstream, &["--no-hold-off"]);
    for (path, given, sent) in [("/abc", "abc", "2"), ("/big", "4294967296", "4294967295")] {
        let request = Request::get(proxy.url(path))
            .header("retry-budget-attempt", given)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(request).await;
        assert_eq!(answer.status, 429);
        assert_eq!(answer.header("retry-budget-attempts"), "1", "{given}");
        let seen: Vec<Seen> = upstream
            .seen()
            .into_iter()
            .filter(|s| s.path == path)
            .collect();
        assert_eq!(seen.len(), 1, "{given}: forwarded once");
        assert_eq!(seen[0].header("retry-budget-attempt"), Some(sent));
    }
}

#[tokio::test]
async fn max_hold_bounds_the_hold_off() {
    let upstream = Upstream::start(|path, _| match path {
        "/first" => Reply::status(429).retry_after("3600"),
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &["--max-hold", "1s"]);
    let answer = send(get(&proxy.url("/first"))).await;
    assert_eq!(answer.status, 429);
    // Held for at most a second, not an hour: the next first attempt goes
    // out within its budget.
    let answer = send(get(&proxy.url("/next"))).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(upstream.count(), 2);
}

/// A body idle bound past tokio's clock is never reached: the proxy neither
/// panics nor cuts the stalled body, and the caller leaving ends it.
#[tokio::test]
async fn a_body_idle_bound_past_the_clock_never_fires() {
    let upstream = RawUpstream::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
        Then::Stall,
    );
    let proxy = Proxy::start_to(
        &upstream.url(),
        &["--body-idle-timeout", "18446744073709551615s"],
    );
    let mut stream = TcpStream::connect(proxy.addr).expect("the proxy accepts");
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    let start = Instant::now();
    while !received.ends_with(b"hello") {
        assert!(start.elapsed() < PATIENCE, "no body: {received:?}");
        match stream.read(&mut buf) {
            Ok(0) => panic!("closed: {}", String::from_utf8_lossy(&received)),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    // Still open a second later: the stalled body is not cut.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !matches!(stream.read(&mut buf), Ok(0)),
        "the body was cut off"
    );
    drop(stream);
    let line = proxy.wait_line("GET http");
    assert!(line.contains(" body=caller_gone"), "{line}");
    assert!(!proxy.stderr().contains("panicked"), "{}", proxy.stderr());
}
