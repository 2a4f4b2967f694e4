//! The bare proxy (the binary, two workers) forwards a GET to a loopback
//! hyper server and relays its answer (real sockets on 127.0.0.1); with
//! `--floor`, doing what its module lists on the way.

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// An upstream that answers every request with what it received: the
/// method, the target and the header fields, one per line.
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut seen = format!("{} {}\n", request.method(), request.uri());
    for (name, value) in request.headers() {
        seen.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
    }
    let response = Response::builder()
        .status(StatusCode::CREATED)
        .header("x-upstream", "yes")
        .header("connection", "x-private")
        .header("x-private", "hop")
        .body(Full::new(Bytes::from(seen)))
        .unwrap();
    Ok(response)
}

/// An echo upstream on loopback, and the proxy (two workers, `--floor`
/// if asked) in front of it: its process, its address, the upstream's,
/// and the proxy's stderr lines after the first, as they come.
async fn proxy(floor: bool) -> (Killed, String, std::net::SocketAddr, Receiver<String>) {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = upstream.accept().await.unwrap();
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(echo)),
            );
        }
    });

    let mut command = Command::new(env!("CARGO_BIN_EXE_bare-proxy"));
    command
        .args(["--listen", "127.0.0.1:0", "--workers", "2", "--upstream"])
        .arg(format!("http://{upstream_addr}"));
    if floor {
        command.arg("--floor");
    }
    let mut proxy = Killed(command.stderr(Stdio::piped()).spawn().unwrap());
    // "bare-proxy: listening on ADDR (...": the port the system chose.
    // Read to the end: the proxy may write more.
    let mut stderr = BufReader::new(proxy.0.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let proxy_addr = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let (lines, more) = channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (proxy, proxy_addr, upstream_addr, more)
}

#[tokio::test]
async fn forwards_a_get_and_relays_the_answer() {
    let (_proxy, proxy_addr, upstream_addr, _) = proxy(false).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let request = Request::get(format!("http://{proxy_addr}/a/path?q=1"))
        .header("x-caller", "kept")
        .header("connection", "keep-alive, x-secret")
        .header("x-secret", "hop")
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();

    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["x-upstream"], "yes");
    assert!(!response.headers().contains_key("x-private"));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8(body.to_vec()).unwrap();
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("GET /a/path?q=1"));
    let fields: Vec<&str> = lines.collect();
    assert!(fields.contains(&"x-caller: kept"), "{seen}");
    assert!(
        fields.contains(&format!("host: {upstream_addr}").as_str()),
        "{seen}"
    );
    assert!(
        !fields
            .iter()
            .any(|f| f.starts_with("x-secret") || f.starts_with("connection")),
        "{seen}"
    );
}

#[tokio::test]
async fn with_floor_it_also_numbers_the_attempt_tells_the_outcome_and_logs_the_action() {
    let (_proxy, proxy_addr, _, stderr) = proxy(true).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let request = Request::get(format!("http://{proxy_addr}/floor"))
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();

    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["retry-budget-attempts"], "1");
    assert_eq!(response.headers()["retry-budget-outcome"], "success");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8(body.to_vec()).unwrap();
    assert!(seen.starts_with("GET /floor\n"), "{seen}");
    assert!(seen.contains("\nretry-budget-attempt: 1\n"), "{seen}");
    // Written when the worker parks, which it does once idle.
    let line = stderr
        .recv_timeout(Duration::from_secs(30))
        .expect("a log line");
    assert!(line.starts_with("ts="), "{line}");
    assert!(
        line.contains(" method=GET url=http://")
            && line.contains("/floor outcome=success attempts=1 status=201 "),
        "{line}"
    );
}

/// The proxy's process, killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
