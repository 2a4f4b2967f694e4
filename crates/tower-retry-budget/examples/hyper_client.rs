//! A hyper-util client behind `RetryBudgetLayer`, against a small loopback
//! server that rate-limits the first request.
//!
//! ```text
//! cargo run -p tower-retry-budget --example hyper_client
//! ```

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};
use tower_retry_budget::{Policy, Report, RetryBudgetLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The upstream: 429 with Retry-After: 1 the first time, then 200.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let seen = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
                    let res = if first {
                        Response::builder().status(429).header("retry-after", "1")
                    } else {
                        Response::builder().status(200)
                    };
                    async move {
                        Ok::<_, Infallible>(
                            res.body(Full::new(Bytes::from_static(b"coast palettes\n")))
                                .unwrap(),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });

    // The client: one layer.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(client);

    let request =
        Request::get(format!("http://{addr}/palettes?collection=coast")).body(Empty::new())?;
    let response = client.oneshot(request).await?;
    if let Some(report) = response.extensions().get::<Report>() {
        eprintln!("{report}");
    }
    let body = response.into_body().collect().await?.to_bytes();
    print!("{}", String::from_utf8_lossy(&body));
    Ok(())
}
