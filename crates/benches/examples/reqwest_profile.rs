//! One variant of `benches/reqwest.rs` (`bare`, `reqwest_retry` or
//! `retry_budget`), a fixed number of happy GETs over loopback, for a
//! profiler: `valgrind --tool=callgrind` counts each variant's
//! instructions (user space only: the kernel's share of loopback is not
//! counted).
//!
//! ```text
//! cargo build --release -p retry-budget-benches --example reqwest_profile
//! valgrind --tool=callgrind target/release/examples/reqwest_profile retry_budget 2000
//! ```

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry_budget::{Policy, RetryBudgetMiddleware};
use tokio::net::TcpListener;

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "retry_budget".to_owned());
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = service_fn(|_: http::Request<hyper::body::Incoming>| async {
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                            b"coast palettes\n",
                        ))))
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
        let client = match variant.as_str() {
            "bare" => builder.build(),
            "reqwest_retry" => builder
                .with(RetryTransientMiddleware::new_with_policy(
                    ExponentialBackoff::builder().build_with_max_retries(3),
                ))
                .build(),
            _ => builder
                .with(RetryBudgetMiddleware::new(Policy::default()))
                .build(),
        };
        let url = format!("http://{addr}/palettes");
        for _ in 0..calls {
            let response = client.get(&url).send().await.expect("a response");
            std::hint::black_box(response.bytes().await.expect("the body"));
        }
    });
}
