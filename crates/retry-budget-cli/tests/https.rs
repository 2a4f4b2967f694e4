//! `retry-budget get https://…` against a loopback TLS server whose
//! certificate is issued, in the test, by a private CA made with rcgen.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;

/// A TLS server on loopback: 429 with Retry-After: 1 first, then 200.
/// Returns its address, the request counter and the CA's PEM file.
fn serve_tls(name: &str) -> (SocketAddr, Arc<AtomicUsize>, PathBuf) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let ca_file =
        std::env::temp_dir().join(format!("retry-budget-ca-{name}-{}.pem", std::process::id()));
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let counter = counter.clone();
                tokio::spawn(async move {
                    // A client that does not trust the CA fails the handshake.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |_req: Request<Incoming>| {
                        let n = counter.fetch_add(1, Ordering::SeqCst);
                        let res = if n == 0 {
                            Response::builder().status(429).header("retry-after", "1")
                        } else {
                            Response::builder().status(200)
                        };
                        async move {
                            Ok::<_, Infallible>(
                                res.body(Full::new(Bytes::from_static(b"secure palettes\n")))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    });
    (addr, count, ca_file)
}

fn retry_budget(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn https_with_a_private_ca_retries_the_429_and_succeeds() {
    let (addr, count, ca) = serve_tls("ok");
    let url = format!("https://localhost:{}/palettes", addr.port());
    let out = retry_budget(&[
        "get",
        &url,
        "--cacert",
        ca.to_str().unwrap(),
        "--budget",
        "5s",
        "--attempt-timeout",
        "2s",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "success");
    assert_eq!(report["attempts_started"], 2);
    assert_eq!(report["last_status"], 200);
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let _ = std::fs::remove_file(ca);
}

#[test]
fn https_without_trusting_the_ca_is_a_transport_error_sent_once() {
    let (addr, count, ca) = serve_tls("untrusted");
    let url = format!("https://localhost:{}/palettes", addr.port());
    // Trust some other CA: the server's certificate must be refused.
    let (_, _, other_ca) = serve_tls("other");
    let out = retry_budget(&[
        "get",
        &url,
        "--cacert",
        other_ca.to_str().unwrap(),
        "--budget",
        "5s",
        "--attempt-timeout",
        "2s",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "transport_error");
    assert_eq!(report["attempts_started"], 1);
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "no request crossed a refused handshake"
    );
    let _ = std::fs::remove_file(ca);
    let _ = std::fs::remove_file(other_ca);
}

#[test]
fn an_unreadable_cacert_is_a_usage_error_with_nothing_sent() {
    let (addr, count, ca) = serve_tls("usage");
    let url = format!("https://localhost:{}/palettes", addr.port());
    let out = retry_budget(&["get", &url, "--cacert", "/nonexistent/ca.pem"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--cacert"), "{stderr}");
    assert_eq!(count.load(Ordering::SeqCst), 0);
    let _ = std::fs::remove_file(ca);
}
