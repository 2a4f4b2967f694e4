//! The bare proxy (the binary, two workers) forwards a GET to a loopback
//! hyper server and relays its answer (real sockets on 127.0.0.1).

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

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

#[tokio::test]
async fn forwards_a_get_and_relays_the_answer() {
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

    let mut proxy = Killed(
        Command::new(env!("CARGO_BIN_EXE_bare-proxy"))
            .args(["--listen", "127.0.0.1:0", "--workers", "2", "--upstream"])
            .arg(format!("http://{upstream_addr}"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // "bare-proxy: listening on ADDR (...": the port the system chose.
    // Kept open to the end: the proxy may write more.
    let mut stderr = BufReader::new(proxy.0.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let proxy_addr = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();

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

/// The proxy's process, killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
