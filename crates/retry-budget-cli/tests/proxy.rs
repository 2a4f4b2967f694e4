//! `retry-budget proxy`, run as the built binary between a real hyper client
//! and a real hyper upstream, all on loopback. The upstream records every
//! request it sees, so each test says exactly what was sent; every wait is
//! bounded, and no test asserts a tight upper bound on wall time.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::{get, metric, send, send_with, Proxy, RedisServer, Reply, Seen, Upstream, PATIENCE};

#[tokio::test]
async fn a_429_then_200_comes_back_with_what_happened_and_is_counted() {
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("1"),
        _ => Reply::status(200).body("the resource\n"),
    });
    let proxy = Proxy::start(&upstream, &[]);
    let request = Request::get(proxy.url("/resource?page=2&token=s3cr3t"))
        .header("authorization", "Bearer end-to-end")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("connection", "x-hop")
        .header("x-hop", "for the proxy only")
        .header("x-custom", "kept")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = send(request).await;

    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "the resource\n");
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(answer.header("retry-budget-outcome"), "success");

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    for (i, request) in seen.iter().enumerate() {
        assert_eq!(request.path, "/resource");
        assert_eq!(request.header("retry-budget-attempt"), Some(["1", "2"][i]));
        assert_eq!(
            request.header("host"),
            Some(upstream.addr.to_string().as_str())
        );
        assert_eq!(request.header("authorization"), Some("Bearer end-to-end"));
        assert_eq!(request.header("x-custom"), Some("kept"));
        assert_eq!(request.header("x-hop"), None, "named by Connection");
        assert_eq!(request.header("proxy-authorization"), None);
    }

    let line = proxy.wait_line(" outcome=");
    let expected = format!(
        " GET http://{}/resource?page=2&token=REDACTED outcome=success attempts=2 elapsed=",
        upstream.addr
    );
    assert!(line.contains(&expected), "{line}");
    assert!(line.ends_with(" last_status=200"), "{line}");
    assert!(!proxy.stderr().contains("s3cr3t") && !proxy.stderr().contains("Bearer"));

    let metrics = proxy.metrics().await;
    let first = metric(
        &metrics,
        "retry_budget_upstream_attempts_total{attempt=\"first\"}",
    );
    let retries = metric(
        &metrics,
        "retry_budget_upstream_attempts_total{attempt=\"retry\"}",
    );
    assert_eq!((first, retries), (1.0, 1.0), "{metrics}");
    assert_eq!(first + retries, upstream.count() as f64);
    assert_eq!(
        metric(
            &metrics,
            "retry_budget_actions_total{outcome=\"success\",category=\"none\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "retry_budget_upstream_responses_total{status=\"429\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "retry_budget_wait_seconds_count{basis=\"server\"}"
        ),
        1.0
    );
    assert_eq!(metric(&metrics, "retry_budget_actions_in_flight"), 0.0);
}

#[tokio::test]
async fn a_post_is_sent_once_unless_it_has_an_idempotency_key() {
    let upstream = Upstream::start(|path, n| match (path, n) {
        ("/keyed", 1..) => Reply::status(201),
        _ => Reply::status(429).retry_after("1"),
    });
    let proxy = Proxy::start(&upstream, &["--no-hold-off"]);
    let post = |path: &str, body: Vec<u8>| {
        Request::post(proxy.url(path))
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };

    let answer = send(post("/jobs", b"payload".to_vec())).await;
    assert_eq!(answer.status, 429, "the 429 reaches the caller as sent");
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(
        answer.header("retry-budget-outcome"),
        "not_retryable",
        "a write not repeated is not a policy of one attempt"
    );
    assert_eq!(upstream.count(), 1);
    assert_eq!(upstream.seen()[0].method, "POST");
    assert_eq!(upstream.seen()[0].body, "payload");
    assert!(proxy
        .wait_line("POST ")
        .ends_with("last_status=429 forwarded_once=not_idempotent"));

    // With a key, the same write is retried, its body replayed in full.
    let mut keyed = post("/keyed", b"payload".to_vec());
    keyed
        .headers_mut()
        .insert("idempotency-key", "job-7f3a".parse().unwrap());
    let answer = send(keyed).await;
    assert_eq!(answer.status, 201);
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    let keyed: Vec<Seen> = upstream
        .seen()
        .into_iter()
        .filter(|s| s.path == "/keyed")
        .collect();
    assert_eq!(keyed.len(), 2);
    assert!(keyed
        .iter()
        .all(|s| s.body == "payload" && s.header("idempotency-key") == Some("job-7f3a")));

    // A body over the 64 KiB replay limit goes once, whole, and is not
    // retried.
    let big = vec![b'x'; 100 * 1024];
    let mut large = post("/large", big.clone());
    large
        .headers_mut()
        .insert("idempotency-key", "job-big".parse().unwrap());
    let answer = send(large).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-outcome"), "not_replayable");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    let large: Vec<Seen> = upstream
        .seen()
        .into_iter()
        .filter(|s| s.path == "/large")
        .collect();
    assert_eq!(large.len(), 1);
    assert_eq!(large[0].body, big);
}

#[tokio::test]
async fn a_retry_after_longer_than_the_budget_returns_the_429_at_once() {
    let upstream = Upstream::start(|_, _| Reply::status(429).retry_after("30"));
    let proxy = Proxy::start(&upstream, &["--budget", "5s", "--attempt-timeout", "1s"]);
    let started = Instant::now();
    let answer = send(get(&proxy.url("/resource"))).await;
    let took = started.elapsed();
    assert_eq!(answer.status, 429);
    assert_eq!(
        answer.header("retry-after"),
        "30",
        "as the upstream sent it"
    );
    assert_eq!(answer.text(), "status 429\n");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(answer.header("retry-budget-outcome"), "budget_exhausted");
    assert_eq!(upstream.count(), 1);
    // Not the 30 s asked for (nor the 5 s budget): returned at once.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(
        proxy
            .metric(
                "retry_budget_actions_total{outcome=\"budget_exhausted\",category=\"rate_limit\"}"
            )
            .await,
        1.0
    );
}

#[tokio::test]
async fn a_caller_deadline_of_one_second_shrinks_the_budget() {
    // Every path: 429 with Retry-After: 1, then 200. Without a deadline the
    // default budget (20 s) retries it; with 1 s left, the retry cannot fit.
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("1"),
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &["--no-hold-off"]);

    let mut request = get(&proxy.url("/grpc"));
    request
        .headers_mut()
        .insert("grpc-timeout", "1S".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-outcome"), "budget_exhausted");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    // The time the core reserved for the attempt: the cap, shrunk to 1 s.
    assert_eq!(
        upstream.seen()[0].header("grpc-timeout"),
        Some("1000000u"),
        "the time reserved for it"
    );

    let mut request = get(&proxy.url("/envoy"));
    request
        .headers_mut()
        .insert("x-envoy-upstream-rq-timeout-ms", "1000".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.header("retry-budget-outcome"), "budget_exhausted");
    let envoy = upstream.seen()[1].clone();
    assert_eq!(envoy.path, "/envoy");
    assert_eq!(envoy.header("x-envoy-upstream-rq-timeout-ms"), Some("1000"));
    assert_eq!(envoy.header("grpc-timeout"), None);

    // The same upstream, no deadline: retried and answered.
    let answer = send(get(&proxy.url("/plain"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(upstream.count(), 4);
}

#[tokio::test]
async fn a_caller_deadline_already_spent_sends_nothing() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &["--no-hold-off"]);
    let mut request = get(&proxy.url("/late"));
    request
        .headers_mut()
        .insert("grpc-timeout", "0S".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.status, 504);
    assert_eq!(answer.header("retry-budget-outcome"), "budget_exhausted");
    assert_eq!(answer.header("retry-budget-attempts"), "0");
    // The core's reason, word for word.
    assert!(
        answer
            .text()
            .contains("the total budget must be greater than zero"),
        "{}",
        answer.text()
    );
    assert_eq!(upstream.count(), 0);
}

#[tokio::test]
async fn a_retry_of_a_proxy_below_is_forwarded_once() {
    let upstream = Upstream::start(|_, _| Reply::status(429).retry_after("1"));
    let proxy = Proxy::start(&upstream, &["--no-hold-off", "--log-format", "json"]);
    let mut request = get(&proxy.url("/resource"));
    request
        .headers_mut()
        .insert("retry-budget-attempt", "2".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(answer.header("retry-budget-outcome"), "attempts_exhausted");
    assert_eq!(upstream.count(), 1);
    assert_eq!(
        upstream.seen()[0].header("retry-budget-attempt"),
        Some("2"),
        "it keeps its number, so no proxy further up retries it either"
    );
    let line: serde_json::Value =
        serde_json::from_str(&proxy.wait_line("\"outcome\"")).expect("a JSON log line");
    assert_eq!(line["outcome"], "attempts_exhausted");
    assert_eq!(line["forwarded_once"], "already_a_retry");
    assert_eq!(line["attempts"], 1);
    assert_eq!(line["last_status"], 429);
    assert_eq!(line["method"], "GET");

    // Asked to, a proxy budgets such requests too.
    let retrying = Proxy::start(
        &upstream,
        &["--no-hold-off", "--retry-retries", "--max-attempts", "2"],
    );
    let mut request = get(&retrying.url("/again"));
    request
        .headers_mut()
        .insert("retry-budget-attempt", "2".parse().unwrap());
    let answer = send(request).await;
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(upstream.count(), 3);
}

#[tokio::test]
async fn the_metrics_match_what_the_upstream_saw() {
    let upstream = Upstream::start(|path, _| match path {
        "/ok" => Reply::status(200),
        "/broken" => Reply::status(500),
        _ => Reply::status(429).retry_after("1"),
    });
    let proxy = Proxy::start(&upstream, &["--no-hold-off", "--max-attempts", "2"]);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for path in ["/ok", "/limited", "/broken", "/ok"] {
        send_with(&client, get(&proxy.url(path))).await;
    }
    let write = Request::post(proxy.url("/write"))
        .body(Full::new(Bytes::from_static(b"w")))
        .unwrap();
    send_with(&client, write).await;

    let seen = upstream.seen();
    let statuses = |status: u16| {
        seen.iter()
            .filter(|s| match s.path.as_str() {
                "/ok" => status == 200,
                "/broken" => status == 500,
                _ => status == 429,
            })
            .count() as f64
    };
    let text = proxy.metrics().await;
    let m = |series: &str| metric(&text, series);
    let attempts = m("retry_budget_upstream_attempts_total{attempt=\"first\"}")
        + m("retry_budget_upstream_attempts_total{attempt=\"retry\"}");
    assert_eq!(attempts, upstream.count() as f64, "{text}");
    assert_eq!(upstream.count(), 6, "2 + 2 + 1 + 1 attempts");
    for status in [200, 429, 500] {
        let series = format!("retry_budget_upstream_responses_total{{status=\"{status}\"}}");
        assert_eq!(m(&series), statuses(status), "{series}\n{text}");
    }
    assert_eq!(
        m("retry_budget_actions_total{outcome=\"success\",category=\"none\"}"),
        2.0
    );
    assert_eq!(
        m("retry_budget_actions_total{outcome=\"attempts_exhausted\",category=\"rate_limit\"}"),
        1.0,
        "the GET retried once"
    );
    assert_eq!(
        m("retry_budget_actions_total{outcome=\"not_retryable\",category=\"rate_limit\"}"),
        1.0,
        "the POST sent once: not repeatable"
    );
    assert_eq!(
        m("retry_budget_actions_total{outcome=\"not_retryable\",category=\"server_error\"}"),
        1.0
    );
    assert_eq!(m("retry_budget_action_duration_seconds_count"), 5.0);
    assert_eq!(m("retry_budget_wait_seconds_count{basis=\"server\"}"), 1.0);
    assert_eq!(m("retry_budget_actions_in_flight"), 0.0);
    assert_eq!(m("retry_budget_actions_waiting"), 0.0);

    let ready = send(get(&format!("http://{}/ready", proxy.admin))).await;
    assert_eq!((ready.status, ready.text().as_str()), (200, "ready\n"));
    let live = send(get(&format!("http://{}/live", proxy.admin))).await;
    assert_eq!(live.status, 200);
}

#[tokio::test]
async fn several_workers_serve_one_port_and_share_the_metrics() {
    let upstream = Upstream::start(|_, _| Reply::status(200).body("ok"));
    let proxy = Proxy::start(&upstream, &["--workers", "3"]);
    assert!(proxy.stderr().contains("3 worker(s)"), "{}", proxy.stderr());
    // Each request on a connection of its own (`Connection: close`), so
    // the kernel spreads them over the workers' sockets.
    for i in 0..30 {
        let request = Request::get(proxy.url(&format!("/r{i}")))
            .header("connection", "close")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(request).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.text(), "ok");
    }
    assert_eq!(upstream.seen().len(), 30);
    // One registry for all workers: every action counted once.
    wait_metric(
        &proxy,
        "retry_budget_actions_total{outcome=\"success\",category=\"none\"}",
        30.0,
    )
    .await;
    // Every worker's lines reach the log (written when the worker idles).
    proxy.wait_line(" GET http://");
    let start = Instant::now();
    while proxy.stderr().matches(" outcome=success ").count() < 30 {
        assert!(start.elapsed() < PATIENCE, "{}", proxy.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn sigterm_lets_the_action_in_flight_finish_then_exits_0() {
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("2"),
        _ => Reply::status(200).body("after the drain started\n"),
    });
    let proxy = Proxy::start(&upstream, &[]);
    let in_flight = tokio::spawn(send(get(&proxy.url("/resource"))));
    upstream.wait_for(1).await;
    // The observer moves the gauges while the action waits.
    let started = Instant::now();
    while proxy.metric("retry_budget_actions_waiting").await != 1.0 {
        assert!(started.elapsed() < PATIENCE, "{}", proxy.metrics().await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(proxy.metric("retry_budget_actions_in_flight").await, 1.0);
    proxy.signal("TERM");
    proxy.wait_line("SIGTERM: no new connections");

    // Not ready any more, and no new connection is accepted...
    let ready = send(get(&format!("http://{}/ready", proxy.admin))).await;
    assert_eq!(ready.status, 503);
    assert!(TcpStream::connect(proxy.addr).is_err(), "still accepting");

    // ... but the action in flight is answered after its wait.
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "after the drain started\n");
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(answer.header("retry-budget-outcome"), "success");
    let status = proxy.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", proxy.stderr());
    assert!(proxy.stderr().contains("retry-budget proxy: drained"));
}

#[tokio::test]
async fn sighup_without_a_config_file_keeps_serving() {
    let upstream = Upstream::start(|_, _| Reply::status(200));
    let proxy = Proxy::start(&upstream, &[]);
    assert_eq!(send(get(&proxy.url("/resource"))).await.status, 200);
    proxy.signal("HUP");
    proxy.wait_line("SIGHUP: no --config file to read again");
    assert_eq!(send(get(&proxy.url("/resource"))).await.status, 200);
    assert!(!proxy.stderr().contains("draining"), "{}", proxy.stderr());
    proxy.signal("TERM");
    assert_eq!(proxy.wait_exit().code(), Some(0), "{}", proxy.stderr());
}

#[tokio::test]
async fn after_the_drain_time_the_rest_is_cancelled() {
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("8"),
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &["--drain", "300ms"]);
    let in_flight = tokio::spawn(send(get(&proxy.url("/resource"))));
    upstream.wait_for(1).await;
    proxy.signal("TERM");
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 503);
    assert_eq!(answer.header("retry-budget-outcome"), "cancelled");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    let line = proxy.wait_line(" outcome=");
    assert!(line.contains(" outcome=cancelled attempts=1 "), "{line}");
    assert_eq!(proxy.wait_exit().code(), Some(0), "{}", proxy.stderr());
    assert_eq!(upstream.count(), 1, "nothing more was sent");
}

#[tokio::test]
async fn after_the_drain_time_the_streams_of_an_h2c_connection_are_cancelled() {
    let upstream = Upstream::start(|_, _| Reply::status(429).retry_after("8"));
    // Neither the hold-off nor the client budget may stop the second
    // action at once, whichever 429 comes back first: both wait.
    let proxy = Proxy::start(
        &upstream,
        &["--drain", "300ms", "--no-hold-off", "--no-client-budget"],
    );
    // Both streams on one connection: each action carries its own token
    // under the connection's.
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let stream = |path: &str| {
        let (client, request) = (client.clone(), get(&proxy.url(path)));
        tokio::spawn(async move { send_with(&client, request).await })
    };
    let (first, second) = (stream("/a"), stream("/b"));
    upstream.wait_for(2).await;
    proxy.signal("TERM");
    for in_flight in [first, second] {
        let answer = in_flight.await.unwrap();
        assert_eq!(answer.status, 503, "{}", proxy.stderr());
        assert_eq!(answer.header("retry-budget-outcome"), "cancelled");
        assert_eq!(answer.header("retry-budget-attempts"), "1");
    }
    assert_eq!(proxy.wait_exit().code(), Some(0), "{}", proxy.stderr());
    assert_eq!(upstream.count(), 2, "nothing more was sent");
}

#[tokio::test]
async fn a_slow_client_does_not_hold_other_actions() {
    const BIG: usize = 32 * 1024 * 1024;
    let upstream = Upstream::start(|path, _| match path {
        "/big" => Reply::status(200).body(vec![b'x'; BIG]),
        _ => Reply::status(200).body("fast\n"),
    });
    // Two upstream attempts at a time, at most.
    let proxy = Proxy::start(&upstream, &["--concurrency", "2"]);

    // One client asks for a large body and never reads it: its action ended
    // with the response head, so it holds no slot.
    let mut reader = TcpStream::connect(proxy.addr).unwrap();
    reader
        .write_all(b"GET /big HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .unwrap();
    // Another sends its headers and then only part of its body: its attempt
    // is in flight (the upstream waits for the rest), holding one slot.
    let mut uploader = TcpStream::connect(proxy.addr).unwrap();
    uploader
        .write_all(b"PUT /upload HTTP/1.1\r\nhost: proxy\r\ncontent-length: 1000\r\n\r\npartial")
        .unwrap();
    upstream.wait_for(2).await;

    for _ in 0..3 {
        let answer = send(get(&proxy.url("/fast"))).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.text(), "fast\n");
    }
    drop((reader, uploader));
}

#[tokio::test]
async fn h2c_callers_are_served_too() {
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("1"),
        _ => Reply::status(200).body("over h2c\n"),
    });
    let proxy = Proxy::start(&upstream, &[]);
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let answer = send_with(&client, get(&proxy.url("/resource"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "over h2c\n");
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(answer.header("retry-budget-outcome"), "success");
    assert_eq!(upstream.count(), 2);
}

#[tokio::test]
async fn a_caller_that_leaves_stops_its_action() {
    let upstream = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("2"),
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &[]);
    let mut caller = TcpStream::connect(proxy.addr).unwrap();
    caller
        .write_all(b"GET /resource HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .unwrap();
    upstream.wait_for(1).await;
    // Gone during the wait for the retry: once the proxy has the 429 and
    // waits (the upstream counting the request is not yet the proxy
    // reading its answer).
    assert_eq!(
        proxy
            .metric_reaching("retry_budget_actions_waiting", 1.0)
            .await,
        1.0
    );
    drop(caller);
    let line = proxy.wait_line(" outcome=");
    assert!(line.contains(" outcome=cancelled attempts=1 "), "{line}");
    assert!(line.ends_with(" last_status=429"), "{line}");
    // No retry in the background: the wait would have ended by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(upstream.count(), 1);
    let text = proxy.metrics().await;
    assert_eq!(
        metric(
            &text,
            "retry_budget_actions_total{outcome=\"cancelled\",category=\"cancelled\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(metric(&text, "retry_budget_actions_in_flight"), 0.0);
    assert_eq!(metric(&text, "retry_budget_actions_waiting"), 0.0);
}

#[tokio::test]
async fn an_http2_upstream_is_reached_with_upstream_http2() {
    let upstream = Upstream::start_h2(|_, n| match n {
        0 => Reply::status(429).retry_after("1"),
        _ => Reply::status(200).body("from h2\n"),
    });
    let proxy = Proxy::start(&upstream, &["--upstream-http2"]);
    let answer = send(get(&proxy.url("/resource"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "from h2\n");
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    assert_eq!(upstream.count(), 2);
    assert!(upstream
        .seen()
        .iter()
        .all(|s| s.header("retry-budget-attempt").is_some()));
}

#[tokio::test]
async fn reset_header_flags_are_the_same_as_get() {
    let upstream = Upstream::start(|_, n| match n {
        0 => {
            let mut reply = Reply::status(429);
            reply.headers.push(("x-ratelimit-reset", "1".to_owned()));
            reply
        }
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &["--reset-header", "x-ratelimit-reset=seconds"]);
    let answer = send(get(&proxy.url("/resource"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    let text = proxy.metrics().await;
    // The 1 s the reset header asked, not the 2 s fallback.
    assert_eq!(
        metric(
            &text,
            "retry_budget_wait_seconds_count{basis=\"reset_header\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "retry_budget_wait_seconds_sum{basis=\"reset_header\"}"
        ),
        1.0,
        "{text}"
    );
}

/// Waits until `series` reads `at_least` on `proxy`'s metrics.
async fn wait_metric(proxy: &Proxy, series: &str, at_least: f64) {
    let start = Instant::now();
    while proxy.metric(series).await < at_least {
        assert!(
            start.elapsed() < PATIENCE,
            "{series} never reached {at_least}:\n{}",
            proxy.metrics().await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn two_proxies_sharing_one_redis_honour_one_retry_after() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start(|path, n| match (path, n) {
        ("/a", 0) => Reply::status(429).retry_after("3"),
        _ => Reply::status(200),
    });
    let flags = [
        "--hold-off-redis",
        &redis.url(),
        "--hold-off-namespace",
        "e2e",
    ];
    let (a, b) = (
        Proxy::start(&upstream, &flags),
        Proxy::start(&upstream, &flags),
    );
    let available = "retry_budget_hold_off_store_available{store=\"redis\"}";
    wait_metric(&a, available, 1.0).await;
    wait_metric(&b, available, 1.0).await;

    // Through A: 429 Retry-After: 3 (A retries after 3 s).
    let a_url = a.url("/a");
    let through_a = tokio::spawn(async move { send(get(&a_url)).await });
    upstream.wait_for(1).await;
    wait_metric(
        &b,
        "retry_budget_hold_off_store_holds_total{store=\"redis\",direction=\"received\"}",
        1.0,
    )
    .await;
    // Through B, to the same upstream: its first attempt is held.
    let answer = send(get(&b.url("/b"))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(through_a.await.unwrap().status, 200);
    let seen = upstream.seen();
    let at = |path: &str| seen.iter().find(|s| s.path == path).expect(path).at;
    let after = at("/b").duration_since(at("/a"));
    assert!(
        after >= Duration::from_secs(3),
        "the upstream saw B's request {after:?} after A's 429"
    );
    assert_eq!(
        b.metric("retry_budget_hold_offs_total{result=\"waited\"}")
            .await,
        1.0
    );

    // Redis stopped: both keep serving.
    drop(redis);
    let start = Instant::now();
    while a.metric(available).await != 0.0 {
        assert!(start.elapsed() < PATIENCE, "A never said Redis was gone");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        a.metric("retry_budget_hold_off_store_failures_total{store=\"redis\"}")
            .await
            >= 1.0
    );
    for proxy in [&a, &b] {
        assert_eq!(send(get(&proxy.url("/c"))).await.status, 200);
    }
}

#[tokio::test]
async fn an_action_waiting_for_its_retry_holds_no_slot() {
    let upstream = Upstream::start(|path, n| match (path, n) {
        ("/limited", 0) => Reply::status(429).retry_after("2"),
        _ => Reply::status(200).body("done\n"),
    });
    // One upstream attempt at a time; no hold-off, so that the 429 holds
    // back only its own action.
    let proxy = Proxy::start(&upstream, &["--concurrency", "1", "--no-hold-off"]);
    let waiting = tokio::spawn(send(get(&proxy.url("/limited"))));
    upstream.wait_for(1).await;
    let started = Instant::now();
    while proxy.metric("retry_budget_actions_waiting").await != 1.0 {
        assert!(started.elapsed() < PATIENCE, "{}", proxy.metrics().await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // While it waits its 2 s, another action gets the only slot.
    let other = send(get(&proxy.url("/other"))).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.header("retry-budget-attempts"), "1");
    assert_eq!(
        proxy.metric("retry_budget_actions_waiting").await,
        1.0,
        "answered during the wait"
    );
    let waited = waiting.await.unwrap();
    assert_eq!(waited.status, 200);
    assert_eq!(waited.header("retry-budget-attempts"), "2");
    let paths: Vec<String> = upstream.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/limited", "/other", "/limited"]);
}

#[tokio::test]
async fn with_an_untrusted_clock_a_retry_after_date_stops_the_action() {
    let upstream =
        Upstream::start(|_, _| Reply::status(429).retry_after("Wed, 21 Oct 2099 07:28:00 GMT"));
    let proxy = Proxy::start(&upstream, &["--untrusted-clock", "--no-hold-off"]);
    let answer = send(get(&proxy.url("/resource"))).await;
    assert_eq!(answer.status, 429);
    assert_eq!(
        answer.header("retry-after"),
        "Wed, 21 Oct 2099 07:28:00 GMT"
    );
    assert_eq!(answer.header("retry-budget-outcome"), "clock_untrusted");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert_eq!(upstream.count(), 1);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_with_the_report() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = Proxy::start_to(&format!("http://127.0.0.1:{port}"), &[]);
    let answer = send(get(&proxy.url("/resource"))).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.header("retry-budget-outcome"), "transport_error");
    assert_eq!(answer.header("retry-budget-attempts"), "1");
    assert!(
        answer.text().contains("Category: transport."),
        "{}",
        answer.text()
    );
    assert!(
        answer.text().contains("Upstream error: "),
        "{}",
        answer.text()
    );
}

/// Sends a chunked POST with an `Idempotency-Key` to the proxy at `addr`
/// over a raw socket (`Connection: close`); the answer as text.
fn raw_chunked_post(addr: SocketAddr, path: &str, key: &str, chunks: &[&[u8]]) -> String {
    use std::io::Read;
    let mut stream = TcpStream::connect(addr).expect("the proxy accepts");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: {key}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        addr
    )
    .into_bytes();
    for chunk in chunks {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&request).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("the whole answer");
    String::from_utf8_lossy(&answer).into_owned()
}

/// A keyed write retried after a hold-off wait: every copy the upstream
/// gets carries the whole body, with `Content-Length` and chunked.
#[tokio::test]
async fn a_keyed_write_after_a_hold_off_reaches_the_upstream_whole_every_time() {
    let upstream = Upstream::start(|path, n| match (path, n) {
        ("/set-hold", _) => Reply::status(429).retry_after("2"),
        ("/pay-cl" | "/pay-chunked", 0 | 1) => Reply::status(429).retry_after("1"),
        _ => Reply::status(200),
    });
    let proxy = Proxy::start(&upstream, &[]);
    let payload = b"{\"amount\":100}";
    let set_hold = || async {
        // A write without a key is sent once; its 429 sets a 2 s hold.
        let answer = send(
            Request::post(proxy.url("/set-hold"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
        assert_eq!(answer.status, 429);
    };

    set_hold().await;
    let answer = send(
        Request::post(proxy.url("/pay-cl"))
            .header("idempotency-key", "pay-1")
            .body(Full::new(Bytes::from_static(payload)))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", proxy.stderr());
    assert_eq!(answer.header("retry-budget-attempts"), "3");

    set_hold().await;
    let addr = proxy.addr;
    let text = tokio::task::spawn_blocking(move || {
        raw_chunked_post(addr, "/pay-chunked", "pay-2", &[b"{\"amo", b"unt\":100}"])
    })
    .await
    .unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("retry-budget-attempts: 3"), "{text}");

    for path in ["/pay-cl", "/pay-chunked"] {
        let copies: Vec<Seen> = upstream
            .seen()
            .into_iter()
            .filter(|s| s.path == path)
            .collect();
        assert_eq!(copies.len(), 3, "{path}");
        for (attempt, copy) in copies.iter().enumerate() {
            assert_eq!(copy.body, &payload[..], "{path}, attempt {attempt}");
        }
    }
}
